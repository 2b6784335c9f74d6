/* sandbox-manager: the host service and its client commands. `serve` runs the daemon
 * (daemon.c); every other command is a client of its control socket (cli.c, mcp.c). Each
 * command's usage lives with the command (`COMMAND --help`); this file holds only the table. */
#include <signal.h>
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "codex_bridge.h"
#include "log.h"
#include "manager.h"
#include "mcp.h"
#include "version.h"

static int run_mcp(int argc, char **argv)
{
	return mcp_serve(argc, argv, SB_VERSION);
}

static int run_version(int argc, char **argv)
{
	return mcli_version(argc, argv, SB_VERSION);
}

/* Each gets argv from its own name on (argv[0] is the command). */
static const struct {
	const char *name;
	int (*run)(int argc, char **argv);
	const char *summary;
} commands[] = {
	{ "serve", daemon_serve, "run the manager (the daemon)" },
	{ "session", mcli_session, "create, show, delete and list sessions" },
	{ "exec", mcli_exec, "run a command in a session's sandbox" },
	{ "cancel", mcli_cancel, "stop a session's running command" },
	{ "grant", mcli_grant, "change a session's grants" },
	{ "records", mcli_records, "a session's execs, or one exec" },
	{ "resolve", mcli_resolve, "settle an uncertain exec by an operator's word" },
	{ "status", mcli_status, "the manager's health (exit 0 healthy, 1 degraded) and counts" },
	{ "metrics", mcli_status, "the manager's metrics in the Prometheus text format" },
	{ "mcp", run_mcp, "the Bash tool for agent frameworks, MCP on stdio" },
	{ "codex-bridge", codex_bridge_serve, "the Bash tool for Codex's app-server, a JSON-RPC proxy on stdio" },
	{ "version", run_version, "print the version" },
};

static void usage(FILE *f)
{
	fprintf(f, "usage: sandbox-manager COMMAND [FLAGS]\n\n");
	for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
		fprintf(f, "  %-12s %s\n", commands[i].name, commands[i].summary);
	fprintf(f, "\nsandbox-manager COMMAND --help shows a command's flags. Client commands find the daemon by\n"
		   "--socket PATH or $SANDBOX_MANAGER_SOCKET. Exit codes: 0 done; 2 usage error; 125 refused, failed or\n"
		   "unreachable; exec: the command's own code, 124 timed out, 128+N signal N.\n");
}

int main(int argc, char **argv)
{
	const char *cmd = argc >= 2 ? argv[1] : "";

	sb_log_init("sandbox-manager");
	/* A write past RLIMIT_FSIZE must fail with EFBIG and take the error path (an uncertain answer,
	 * a refused start), not kill the process with SIGXFSZ before it can answer. Children reset
	 * their dispositions (nsspawn.c, gitrun.c). */
	signal(SIGXFSZ, SIG_IGN);
	for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
		if (strcmp(cmd, commands[i].name) == 0)
			return commands[i].run(argc - 1, argv + 1);
	if (strcmp(cmd, "--version") == 0)
		return run_version(1, argv + 1);
	if (strcmp(cmd, "help") == 0 || strcmp(cmd, "--help") == 0 || strcmp(cmd, "-h") == 0) {
		/* `help COMMAND` is `COMMAND --help`. */
		for (size_t i = 0; argc >= 3 && i < sizeof commands / sizeof commands[0]; i++)
			if (strcmp(argv[2], commands[i].name) == 0)
				return commands[i].run(2, (char *[]){ argv[2], "--help", NULL });
		if (argc < 3) {
			usage(stdout);
			return 0;
		}
		cmd = argv[2];
	}
	if (cmd[0] == '\0')
		fprintf(stderr, "sandbox-manager: a command is required\n");
	else
		fprintf(stderr, "sandbox-manager: unknown command '%s'\n", cmd);
	usage(stderr);
	return MCLI_USAGE;
}
