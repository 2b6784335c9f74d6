/* sandbox-manager: the host service and its client commands. `serve` runs the daemon
 * (daemon.c); every other command is a client of its control socket (cli.c). */
#include <signal.h>
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "log.h"
#include "manager.h"
#include "mcp.h"
#include "version.h"

static void usage(FILE *f)
{
	fprintf(f, "usage: sandbox-manager serve [--config FILE] [--state-dir DIR] [--volume DIR] [--socket PATH]\n"
		   "                       [--backend process|podman] [--agent PATH] [--resource NAME=BROKER:ARG]...\n"
		   "                       [--podman-socket PATH --image NAME [--podman-seccomp FILE] [--podman-network MODE]\n"
		   "                        [--sandbox-cpus N] [--sandbox-memory-mib N] [--sandbox-pids N]]\n"
		   "                       [--tmp-size BYTES] [--shm-size BYTES] [--cgroup-parent DIR]\n"
		   "                       [--default-timeout-seconds N] [--max-timeout-seconds N] [--idle-seconds N]\n"
		   "                       [--stop-grace-seconds N]\n"
		   "       sandbox-manager session create --identity ID --repo PATH_OR_URL [--branch B] [--grant RES=ACCESS]...\n"
		   "       sandbox-manager session show|delete --session S   show: its sandbox and the limits that hold\n"
		   "       sandbox-manager exec --session S [--timeout-seconds N] [--json] -- COMMAND\n"
		   "       sandbox-manager cancel --session S\n"
		   "       sandbox-manager grant --session S (--set RES=ACCESS | --revoke RES)\n"
		   "       sandbox-manager records --session S [--limit N] [--before EXEC] [--state STATE]\n"
		   "       sandbox-manager records --exec ID\n"
		   "       sandbox-manager mcp --session S        the Bash tool for agent frameworks, MCP on stdio\n"
		   "       sandbox-manager status [--json] | metrics   health (exit 0 healthy, 1 degraded) | Prometheus text\n"
		   "Client commands find the daemon by --socket PATH or $SANDBOX_MANAGER_SOCKET.\n");
}

int main(int argc, char **argv)
{
	const char *cmd = argc >= 2 ? argv[1] : "";

	sb_log_init("sandbox-manager");
	/* A write past RLIMIT_FSIZE must fail with EFBIG and take the error path (an uncertain answer,
	 * a refused start), not kill the process with SIGXFSZ before it can answer. Children reset
	 * their dispositions (nsspawn.c, gitrun.c). */
	signal(SIGXFSZ, SIG_IGN);
	if (strcmp(cmd, "serve") == 0)
		return daemon_serve(argc - 1, argv + 1);
	if (strcmp(cmd, "session") == 0)
		return mcli_session(argc - 1, argv + 1);
	if (strcmp(cmd, "exec") == 0)
		return mcli_exec(argc - 1, argv + 1);
	if (strcmp(cmd, "cancel") == 0)
		return mcli_cancel(argc - 1, argv + 1);
	if (strcmp(cmd, "grant") == 0)
		return mcli_grant(argc - 1, argv + 1);
	if (strcmp(cmd, "records") == 0)
		return mcli_records(argc - 1, argv + 1);
	if (strcmp(cmd, "status") == 0 || strcmp(cmd, "metrics") == 0)
		return mcli_status(argc - 1, argv + 1);
	if (strcmp(cmd, "mcp") == 0)
		return mcp_serve(argc - 1, argv + 1, SB_VERSION);
	if (strcmp(cmd, "version") == 0) {
		printf("sandbox-manager %s\n", SB_VERSION);
		return 0;
	}
	if (strcmp(cmd, "help") == 0 || strcmp(cmd, "--help") == 0) {
		usage(stdout);
		return 0;
	}
	fprintf(stderr, "sandbox-manager: unknown command '%s'\n", cmd);
	usage(stderr);
	return MCLI_USAGE;
}
