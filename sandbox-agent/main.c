/* sandbox-agent: the static agent baked into sandbox images. Dispatches the subcommands; the
 * isolation path starts in cli_exec.c -> boundary_prepare.c, boundary_view.c,
 * boundary_run.c -> init.c. */
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "fdio.h"
#include "json_text.h"
#include "log.h"
#include "steptime.h"

static void usage(FILE *f)
{
	fprintf(f, "usage: sandbox-agent exec [options] -- COMMAND   run one command through the boundary\n"
		   "       sandbox-agent serve --listen HOST:PORT|unix:PATH --tls-cert F --tls-key F --tls-ca F\n"
		   "                     --manager-name NAME --state-dir DIR [--generation N] [--block-port PORT]...\n"
		   "       sandbox-agent check                      report the kernel features the boundary needs\n"
		   "       sandbox-agent verify-receipt --receipt FILE --key FILE [--nonce HEX] [--exec-id ID]\n");
}

int main(int argc, char **argv)
{
	const char *cmd = argc >= 2 ? argv[1] : "";
	struct sb_err err;

	/* Before anything is opened: a pipe or key file must never land on 0-2 (fdio.h). */
	if (fd_stdio_ensure() < 0)
		return CLI_FAILED;
	steptime_init();
	sb_log_init("sandbox-agent");
	if (sb_json_seed(&err) < 0) {
		fprintf(stderr, "sandbox-agent: %s\n", err.msg);
		return CLI_FAILED;
	}
	if (strcmp(cmd, "exec") == 0)
		return cli_exec(argc - 1, argv + 1);
	if (strcmp(cmd, "check") == 0)
		return cli_check(argc - 1, argv + 1);
	if (strcmp(cmd, "serve") == 0)
		return cli_serve(argc - 1, argv + 1);
	if (strcmp(cmd, "verify-receipt") == 0)
		return cli_verify_receipt(argc - 1, argv + 1);
	if (strcmp(cmd, "help") == 0 || strcmp(cmd, "--help") == 0) {
		usage(stdout);
		return 0;
	}
	fprintf(stderr, "sandbox-agent: unknown command '%s'\n", cmd);
	usage(stderr);
	return CLI_USAGE;
}
