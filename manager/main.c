/* sandbox-manager: the host service's client commands, and the way to the daemon. Every command
 * but `serve` is a client of the daemon's control socket (cli.c, mcp.c) and this program links
 * nothing else: no SQLite, curl or TLS, so a call starts as fast as a static program can (issue 18).
 * `serve` becomes the daemon: sandbox-manager-daemon beside this executable (daemon_main.c),
 * exec'd in this process (so does `mcp --http`, whose HTTP server is libmicrohttpd's), so its pid, arguments, environment and descriptors are the ones `serve`
 * was started with (a unit's MainPID, a test's kill). Each command's usage lives with the command
 * (`COMMAND --help`); this file holds only the table. */
#include <errno.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "codex_bridge.h"
#include "fdio.h"
#include "json_text.h"
#include "log.h"
#include "mcp.h"
#include "pathfmt.h"
#include "version.h"

#define DAEMON_NAME "sandbox-manager-daemon"

/* The daemon ships beside this program (build/, BINDIR), as the agent does beside the daemon
 * (config.c): found from this executable's own path, never from $PATH or the working directory.
 * Exec'd with argv COMMAND FLAGS... as "sandbox-manager-daemon COMMAND FLAGS...". */
static int run_daemon(int argc, char **argv)
{
	char self[PATH_MAX], daemon[PATH_MAX];
	ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
	char *slash, **dv = calloc((size_t)argc + 2, sizeof *dv);
	struct sb_err err;

	if (dv == NULL) {
		fprintf(stderr, "sandbox-manager: out of memory\n");
		return MCLI_FAILED;
	}
	if (n <= 0) {
		fprintf(stderr, "sandbox-manager: cannot find this program's own path (/proc/self/exe): %s\n",
			strerror(n < 0 ? errno : ENOENT));
		return MCLI_FAILED;
	}
	self[n] = '\0';
	slash = strrchr(self, '/');
	if (slash != NULL)
		*slash = '\0';
	if (path_fmt(daemon, sizeof daemon, &err, "%s/" DAEMON_NAME, slash != NULL ? self : ".") < 0) {
		fprintf(stderr, "sandbox-manager: %s\n", err.msg);
		return MCLI_FAILED;
	}
	dv[0] = DAEMON_NAME;
	memcpy(dv + 1, argv, (size_t)argc * sizeof *dv);
	execv(daemon, dv);
	fprintf(stderr, "sandbox-manager: cannot run the daemon %s: %s\n", daemon, strerror(errno));
	return MCLI_FAILED;
}

static int run_serve(int argc, char **argv)
{
	return run_daemon(argc, argv);
}

/* stdio here; --http in the daemon's program, which links libmicrohttpd (this one stays static):
 * the flags are checked here first, so a usage error costs no exec. */
static int run_mcp(int argc, char **argv)
{
	int rc = mcp_serve(argc, argv, SB_VERSION, NULL);

	return rc == MCP_SERVE_HTTP_ELSEWHERE ? run_daemon(argc, argv) : rc;
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
	{ "serve", run_serve, "run the manager (the daemon)" },
	{ "ca", run_daemon, "issue a client certificate for the control API over TLS (the daemon's CA)" },
	{ "session", mcli_session, "create, show, delete and list sessions" },
	{ "exec", mcli_exec, "run a command in a session's sandbox" },
	{ "cancel", mcli_cancel, "stop a session's running command" },
	{ "grant", mcli_grant, "change a session's grants" },
	{ "records", mcli_records, "a session's execs, or one exec" },
	{ "follow", mcli_follow, "a running exec's output as it comes, from another terminal" },
	{ "resolve", mcli_resolve, "settle an uncertain exec by an operator's word" },
	{ "status", mcli_status, "the manager's health (exit 0 healthy, 1 degraded) and counts" },
	{ "metrics", mcli_status, "the manager's metrics in the Prometheus text format" },
	{ "mcp", run_mcp, "the Bash tool for agent frameworks, MCP on stdio" },
	{ "codex-bridge", codex_bridge_serve, "the Bash tool for Codex's app-server, a JSON-RPC proxy on stdio" },
	{ "version", run_version, "print the version" },
};

/* A client's own certificate for managers at tls://HOST:PORT: --tls-cert/--tls-key/--tls-ca FILE
 * (or =FILE), taken out of argv before the command parses it (none past "--": a command's own) and
 * passed on as the environment variables control_client.c reads, for every client command alike.
 * -1: one of them has no value. */
static int client_tls_flags(int *argc, char **argv)
{
	static const char *const flags[][2] = { { "--tls-cert", "SANDBOX_MANAGER_TLS_CERT" },
						{ "--tls-key", "SANDBOX_MANAGER_TLS_KEY" },
						{ "--tls-ca", "SANDBOX_MANAGER_TLS_CA" } };
	int in, out = 1;

	for (in = 1; in < *argc && strcmp(argv[in], "--") != 0; in++) {
		size_t f, n = 0;

		for (f = 0; f < 3 && (n = strlen(flags[f][0]),
				      strncmp(argv[in], flags[f][0], n) != 0 || (argv[in][n] != '\0' && argv[in][n] != '='));
		     f++)
			;
		if (f == 3) {
			argv[out++] = argv[in];
			continue;
		}
		if (argv[in][n] == '\0' && in + 1 >= *argc)
			return -1;
		setenv(flags[f][1], argv[in][n] == '=' ? argv[in] + n + 1 : argv[++in], 1);
	}
	while (in < *argc)
		argv[out++] = argv[in++];
	argv[out] = NULL;
	*argc = out;
	return 0;
}

static void usage(FILE *f)
{
	fprintf(f, "usage: sandbox-manager COMMAND [FLAGS]\n\n");
	for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
		fprintf(f, "  %-12s %s\n", commands[i].name, commands[i].summary);
	fprintf(f, "\nsandbox-manager COMMAND --help shows a command's flags. Client commands find the daemon by\n"
		   "--socket PATH or $SANDBOX_MANAGER_SOCKET (or tls://HOST:PORT with --tls-cert/--tls-key/--tls-ca).\n"
		   "Exit codes: 0 done; 2 usage error; 125 refused, failed or\n"
		   "unreachable; exec: the command's own code, 124 timed out, 128+N signal N.\n");
}

int main(int argc, char **argv)
{
	const char *cmd = argc >= 2 ? argv[1] : "";
	struct sb_err err;

	/* Before anything is opened: started with 0, 1 or 2 closed, the first file (the lock, the
	 * records) would take its number and the log lines would be written into it (fdio.h). */
	if (fd_stdio_ensure() < 0)
		return MCLI_FAILED;
	sb_log_init("sandbox-manager");
	if (sb_json_seed(&err) < 0) {
		fprintf(stderr, "sandbox-manager: %s\n", err.msg);
		return MCLI_FAILED;
	}
	/* A write past RLIMIT_FSIZE must fail with EFBIG and take the error path (an uncertain answer,
	 * a refused start), not kill the process with SIGXFSZ before it can answer. Children reset
	 * their dispositions (nsspawn.c, gitrun.c). */
	signal(SIGXFSZ, SIG_IGN);
	/* Before the command too (`sandbox-manager --tls-cert F exec ...`), never for serve's own. */
	if (strcmp(cmd, "serve") != 0 && strcmp(cmd, "ca") != 0) {
		if (client_tls_flags(&argc, argv) < 0) {
			fprintf(stderr, "sandbox-manager: --tls-cert, --tls-key and --tls-ca each take a file\n");
			return MCLI_USAGE;
		}
		cmd = argc >= 2 ? argv[1] : "";
	}
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
