/* The manager's client commands: each builds one control request, sends it to the daemon and
 * prints the answer. `-h`/`--help` on any of them prints its usage and flags on stdout (exit 0).
 * Exit codes (DESIGN.md, docs/operations.md):
 *   exec:            the command's own exit code; 124 it timed out; 128+N a signal N ended it
 *                    (137: SIGKILL); 125 it was refused, cancelled, could not run, or its outcome
 *                    is uncertain (the reason on stderr);
 *   every command:   0 done; 2 a usage error (one line saying what, then the usage, on stderr);
 *                    125 the manager refused it (one line "sandbox-manager: KIND: MESSAGE" on
 *                    stderr, KIND e.g. not_found for an unknown session or exec), or is unreachable.
 * Each failure is printed once, as one line. */
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
int mcli_resolve(int argc, char **argv);
/* follow --exec ID: a running exec's output as it comes (live_send.h), else what its record keeps. */
int mcli_follow(int argc, char **argv);
int mcli_version(int argc, char **argv, const char *version);
/* status and metrics (argv[0] says which; flags in cli.c, the answers printed by cli_status.c):
 * status exits 0 healthy, 1 degraded. */
int mcli_status(int argc, char **argv);
struct json_t;
int mcli_status_run(const struct json_t *sockets, int as_json);
int mcli_metrics_run(const struct json_t *sockets);

/* Send one request (consumed; NULL: out of memory) to the managers of the --socket values
 * (sockets, a JSON array) or $SANDBOX_MANAGER_SOCKET, following the session's owner (follow.h),
 * and return the response (a new reference), or NULL with one message printed. */
struct json_t *mcli_call(const struct json_t *sockets, struct json_t *request);

#endif
