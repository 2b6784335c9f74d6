/* The kernel's floor of an isolated call, for `make bench` (scripts/bench-agent.sh): the least any
 * sandbox with a fresh user, PID and mount namespace and its own /proc can cost per command on this
 * machine. One clone3 into the three namespaces, the id maps written, a private tree and a fresh
 * /proc, then `bash -c COMMAND` as PID 2 under a PID 1 that waits for it; the parent waits for PID 1
 * through its pidfd, so the namespace's teardown is counted as the agent's is. None of the agent's
 * checks, no read-only world, Landlock, seccomp, receipt or output capture: a measuring stick only,
 * never a sandbox. Usage: bench-nsfloor COMMAND (prints nothing; exits with bash's status). */
#define _GNU_SOURCE
#include <fcntl.h>
#include <linux/sched.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "bench-ns.h"

/* PID 1 of the new namespace: its tree private, a fresh /proc, the command as PID 2, reaped. */
static int init_main(int go, const char *command)
{
	char c;
	int status;
	pid_t cmd;

	if (read(go, &c, 1) != 0) /* the parent closes its end once the maps are written */
		die("waiting for the id maps");
	if (mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) < 0 ||
	    mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, NULL) < 0)
		die("mounting /proc");
	cmd = fork();
	if (cmd < 0)
		die("fork");
	if (cmd == 0)
		bash_exec(command);
	if (waitpid(cmd, &status, 0) < 0)
		die("waitpid");
	return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

int main(int argc, char **argv)
{
	struct clone_args ca = { .flags = CLONE_NEWUSER | CLONE_NEWPID | CLONE_NEWNS | CLONE_PIDFD,
				 .exit_signal = SIGCHLD };
	int go[2], pidfd = -1;
	siginfo_t info;
	pid_t pid;

	if (argc != 2) {
		fprintf(stderr, "usage: bench-nsfloor COMMAND\n");
		return 2;
	}
	if (pipe2(go, O_CLOEXEC) < 0)
		die("pipe2");
	ca.pidfd = (__u64)(uintptr_t)&pidfd;
	pid = (pid_t)syscall(SYS_clone3, &ca, sizeof ca);
	if (pid < 0)
		die("clone3");
	if (pid == 0) {
		close(go[1]);
		_exit(init_main(go[0], argv[1]));
	}
	close(go[0]);
	id_maps_write(pid);
	close(go[1]);
	memset(&info, 0, sizeof info);
	if (waitid((idtype_t)P_PIDFD, (id_t)pidfd, &info, WEXITED) < 0)
		die("waitid");
	return info.si_code == CLD_EXITED ? info.si_status : 128 + info.si_status;
}
