/* Attack program: a daemon(3)-style escape. Double fork, setsid, every signal ignored; the grandchild
 * writes a heartbeat (a counter) to HEARTBEAT_PATH every 100 ms for 30 s. The parent exits 0 as soon as
 * the first heartbeat is written, so the test can check that the heartbeat stops when the result returns.
 * Usage (after the guard's two inodes): HEARTBEAT_PATH [keep-stdio]; with keep-stdio the grandchild
 * keeps the command's stdout and stderr open (a background process holding the output pipes).
 * Runs only behind guard_check(). */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "guard.h"

#define BEATS 300
#define BEAT_NS (100 * 1000 * 1000L)

static void ignore_all_signals(void)
{
	struct sigaction sa;
	int sig;

	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = SIG_IGN;
	for (sig = 1; sig < NSIG; sig++)
		if (sig != SIGKILL && sig != SIGSTOP)
			sigaction(sig, &sa, NULL);
}

static void write_beat(const char *path, int n)
{
	char buf[32];
	int len = snprintf(buf, sizeof(buf), "%d\n", n);
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);

	if (fd < 0)
		return;
	if (write(fd, buf, (size_t)len) != len) {
		/* nothing to do: the next beat tries again */
	}
	close(fd);
}

/* grandchild: the would-be survivor */
static void daemon_run(const char *path, int keep_stdio, int ready_fd)
{
	struct timespec beat = { 0, BEAT_NS };
	int n, null;

	ignore_all_signals();
	if (chdir("/") != 0)
		_exit(1);
	umask(022);
	if (!keep_stdio) {
		null = open("/dev/null", O_RDWR);
		if (null < 0)
			_exit(1);
		dup2(null, 0);
		dup2(null, 1);
		dup2(null, 2);
		if (null > 2)
			close(null);
	}
	for (n = 1; n <= BEATS; n++) {
		write_beat(path, n);
		if (n == 1) {
			if (write(ready_fd, "r", 1) != 1)
				_exit(1);
			close(ready_fd);
		}
		nanosleep(&beat, NULL);
	}
	_exit(0);
}

int main(int argc, char **argv)
{
	int first = guard_check(argc, argv);
	int ready[2], keep_stdio;
	pid_t child;
	char c;

	if (argc - first < 1 || argv[first][0] != '/') {
		printf("usage: attack_survive HOST_PIDNS HOST_USERNS /ABSOLUTE/HEARTBEAT [keep-stdio]\n");
		return 2;
	}
	keep_stdio = argc - first > 1 && strcmp(argv[first + 1], "keep-stdio") == 0;
	if (pipe2(ready, O_CLOEXEC) != 0) {
		perror("pipe2");
		return 1;
	}
	child = fork();
	if (child < 0) {
		perror("fork");
		return 1;
	}
	if (child == 0) {
		/* child: a new session, then the grandchild, then exit so it is orphaned */
		close(ready[0]);
		if (setsid() < 0)
			_exit(1);
		child = fork();
		if (child < 0)
			_exit(1);
		if (child == 0)
			daemon_run(argv[first], keep_stdio, ready[1]);
		_exit(0);
	}
	close(ready[1]);
	waitpid(child, NULL, 0);
	if (read(ready[0], &c, 1) != 1) {
		printf("attack_survive: the daemon did not start\n");
		return 1;
	}
	printf("attack_survive daemon_started=1\n");
	return 0;
}
