/* The manager's client commands: each builds one control request, sends it to the daemon and
 * prints the answer. Exit codes (DESIGN.md): exec exits with the command's own code, 124 when it
 * timed out, 125 when it was refused, could not run, or its outcome is uncertain; the other
 * commands exit 0 on success, 2 for usage errors, 125 when the manager refused or is unreachable. */
#ifndef SB_MANAGER_CLI_H
#define SB_MANAGER_CLI_H

#define MCLI_USAGE 2
#define MCLI_TIMEOUT 124
#define MCLI_FAILED 125

int mcli_session(int argc, char **argv);
int mcli_exec(int argc, char **argv);
int mcli_cancel(int argc, char **argv);
int mcli_grant(int argc, char **argv);
int mcli_records(int argc, char **argv);
/* status and metrics (cli_status.c; argv[0] says which): status exits 0 healthy, 1 degraded. */
int mcli_status(int argc, char **argv);

/* Send one request to the daemon at the socket from --socket / $SANDBOX_MANAGER_SOCKET and
 * return its response (a new reference), or NULL with a message printed. */
struct json_t;
struct json_t *mcli_call(const char *socket_flag, struct json_t *request);

#endif
