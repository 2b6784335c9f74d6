/* sandbox-manager: the host service's command line. Subcommands arrive with the manager issues;
 * until then it says so plainly instead of pretending. */
#include <stdio.h>
#include <string.h>

#include "log.h"

#define SB_VERSION "0.1.0"

static void usage(FILE *f)
{
	fprintf(f, "usage: sandbox-manager version\n"
		   "       sandbox-manager help\n");
}

int main(int argc, char **argv)
{
	sb_log_init("sandbox-manager");
	if (argc >= 2 && strcmp(argv[1], "version") == 0) {
		printf("sandbox-manager %s\n", SB_VERSION);
		return 0;
	}
	if (argc >= 2 && (strcmp(argv[1], "help") == 0 || strcmp(argv[1], "--help") == 0)) {
		usage(stdout);
		return 0;
	}
	fprintf(stderr, "sandbox-manager: unknown command '%s'\n", argc >= 2 ? argv[1] : "");
	usage(stderr);
	return 2;
}
