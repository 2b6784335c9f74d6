/* sandbox-manager-daemon: the daemon alone (core/daemon.c), the one program that links the records,
 * the backends and TLS. Users start it as `sandbox-manager serve`, which execs it (main.c); its
 * argv is then "sandbox-manager-daemon serve FLAGS...". Run by hand it takes the same. */
#include <signal.h>
#include <stdio.h>
#include <string.h>

#include "log.h"
#include "manager.h"

/* ca_cmd.c: `sandbox-manager ca issue` (it links the CA, as serve does). */
int ca_cmd(int argc, char **argv);

int main(int argc, char **argv)
{
	sb_log_init("sandbox-manager");
	/* A write past RLIMIT_FSIZE must fail with EFBIG and take the error path (an uncertain answer,
	 * a refused start), not kill the process with SIGXFSZ before it can answer. Children reset
	 * their dispositions (nsspawn.c, gitrun.c). */
	signal(SIGXFSZ, SIG_IGN);
	if (argc >= 2 && strcmp(argv[1], "ca") == 0)
		return ca_cmd(argc - 1, argv + 1);
	if (argc < 2 || strcmp(argv[1], "serve") != 0) {
		fprintf(stderr, "usage: sandbox-manager-daemon serve [FLAGS] (what `sandbox-manager serve` runs; "
				"see sandbox-manager serve --help)\n");
		return 2;
	}
	return daemon_serve(argc - 1, argv + 1);
}
