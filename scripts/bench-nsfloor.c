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

static void die(const char *what)
{
	perror(what);
	_exit(125);
}

static void file_put(pid_t pid, const char *name, const char *text)
{
	char path[64];
	int fd;

	snprintf(path, sizeof path, "/proc/%d/%s", (int)pid, name);
	fd = open(path, O_WRONLY | O_CLOEXEC);
	if (fd < 0 || write(fd, text, strlen(text)) != (ssize_t)strlen(text))
		die(path);
	close(fd);
}

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
	if (cmd == 0) {
		/* The environment the agent gives a command (sandbox-agent/cli_exec.c env_build), whatever
		 * the caller's: bash's start depends on it (LANG=C.UTF-8 loads the locale's files; without
		 * SHELL bash looks its uid up in the user database), and the floor is to differ from a boxed
		 * command by its isolation only. */
		static char *const envp[] = { "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
					      "HOME=/tmp", "LANG=C.UTF-8", "TMPDIR=/tmp", "TMP=/tmp", "TEMP=/tmp",
					      "SHELL=/bin/bash", NULL };

		execle("/bin/bash", "bash", "-c", command, (char *)NULL, envp);
		die("execve /bin/bash");
	}
	if (waitpid(cmd, &status, 0) < 0)
		die("waitpid");
	return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

int main(int argc, char **argv)
{
	struct clone_args ca = { .flags = CLONE_NEWUSER | CLONE_NEWPID | CLONE_NEWNS | CLONE_PIDFD,
				 .exit_signal = SIGCHLD };
	char map[64];
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
	file_put(pid, "setgroups", "deny");
	snprintf(map, sizeof map, "0 %d 1", (int)getgid());
	file_put(pid, "gid_map", map);
	snprintf(map, sizeof map, "0 %d 1", (int)getuid());
	file_put(pid, "uid_map", map);
	close(go[1]);
	memset(&info, 0, sizeof info);
	if (waitid((idtype_t)P_PIDFD, (id_t)pidfd, &info, WEXITED) < 0)
		die("waitid");
	return info.si_code == CLD_EXITED ? info.si_status : 128 + info.si_status;
}
