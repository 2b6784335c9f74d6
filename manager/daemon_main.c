/* sandbox-manager-daemon: the daemon alone (core/daemon.c), the one program that links the records,
 * the backends, TLS and libmicrohttpd. Users start it as `sandbox-manager serve`, which execs it
 * (main.c); its argv is then "sandbox-manager-daemon serve FLAGS...". `sandbox-manager mcp --http`
 * execs it too, as "sandbox-manager-daemon mcp FLAGS..." (the MCP server's HTTP transport, which
 * is no part of the daemon: it runs as that command's own process). Run by hand it takes the same. */
#include <signal.h>
#include <stdio.h>
#include <string.h>

#include "fdio.h"
#include "json_text.h"
#include "log.h"
#include "manager.h"
#include "mcp.h"
#include "mcp_http.h"
#include "version.h"

/* ca_cmd.c: `sandbox-manager ca issue` (it links the CA, as serve does). */
int ca_cmd(int argc, char **argv);

int main(int argc, char **argv)
{
	struct sb_err err;

	/* Before anything is opened: started with 0, 1 or 2 closed, the first file (the lock, the
	 * records) would take its number and the log lines would be written into it (fdio.h). */
	if (fd_stdio_ensure() < 0)
		return 125;
	sb_log_init("sandbox-manager");
	if (sb_json_seed(&err) < 0) {
		fprintf(stderr, "sandbox-manager: %s\n", err.msg);
		return 125;
	}
	/* A write past RLIMIT_FSIZE must fail with EFBIG and take the error path (an uncertain answer,
	 * a refused start), not kill the process with SIGXFSZ before it can answer. Children reset
	 * their dispositions (nsspawn.c, gitrun.c). */
	signal(SIGXFSZ, SIG_IGN);
	if (argc >= 2 && strcmp(argv[1], "ca") == 0)
		return ca_cmd(argc - 1, argv + 1);
	if (argc >= 2 && strcmp(argv[1], "mcp") == 0)
		return mcp_serve(argc - 1, argv + 1, SB_VERSION, &mcp_http_ops);
	if (argc < 2 || strcmp(argv[1], "serve") != 0) {
		fprintf(stderr, "usage: sandbox-manager-daemon serve|mcp [FLAGS] (what `sandbox-manager serve` and "
				"`sandbox-manager mcp --http` run; see their --help)\n");
		return 2;
	}
	return daemon_serve(argc - 1, argv + 1);
}
