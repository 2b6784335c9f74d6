/* The agent's subcommands. Exit codes: 0 done (for exec: a result was printed, whatever the
 * command's status), CLI_USAGE for bad flags, CLI_FAILED when nothing could be done. */
#ifndef SB_CLI_H
#define SB_CLI_H

#include <jansson.h>
#include <stdbool.h>

#define CLI_USAGE 2
#define CLI_FAILED 125

int cli_exec(int argc, char **argv);
int cli_check(int argc, char **argv);
int cli_verify_receipt(int argc, char **argv);
int cli_serve(int argc, char **argv);

/* The `check` report as JSON (also sent in the agent's Hello); *ok false: no boundary here. */
json_t *check_report(bool *ok);

#endif
