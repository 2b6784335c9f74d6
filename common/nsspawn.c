/* Shared clone-side steps (see nsspawn.h). */
#include "nsspawn.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/sched.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "fdio.h"
pid_t spawn_clone(uint64_t ns_flags, int *pidfd, struct sb_err *err)
{
	struct clone_args args = {
		.flags = ns_flags | CLONE_PIDFD,
		.pidfd = (uint64_t)(uintptr_t)pidfd,
		.exit_signal = SIGCHLD,
	};
	pid_t pid = (pid_t)syscall(SYS_clone3, &args, sizeof args);

	if (pid < 0 && errno == ENOSYS)
		pid = (pid_t)syscall(SYS_clone, ns_flags | CLONE_PIDFD | SIGCHLD, NULL, pidfd, NULL, 0);
	if (pid < 0)
		return sb_fail_errno(err, "creating namespaces (clone)");
	return pid;
}

int spawn_proc_write(pid_t pid, const char *name, const char *text, struct sb_err *err)
{
	char path[64];
	size_t len = strlen(text);
	ssize_t n;
	int fd;

	snprintf(path, sizeof path, "/proc/%d/%s", (int)pid, name);
	fd = open(path, O_WRONLY | O_CLOEXEC);
	if (fd < 0)
		return sb_fail_errno(err, "opening %s", path);
	n = write(fd, text, len);
	close(fd);
	if (n != (ssize_t)len)
		return sb_fail_errno(err, "writing %s", path);
	return 0;
}

int spawn_signals_default(struct sb_err *err)
{
	struct sigaction dfl;
	sigset_t none;

	memset(&dfl, 0, sizeof dfl);
	dfl.sa_handler = SIG_DFL;
	for (int sig = 1; sig < NSIG; sig++)
		if (sig != SIGKILL && sig != SIGSTOP && sigaction(sig, &dfl, NULL) < 0 && errno != EINVAL)
			return sb_fail_errno(err, "resetting the disposition of signal %d", sig);
	sigemptyset(&none);
	if (sigprocmask(SIG_SETMASK, &none, NULL) < 0)
		return sb_fail_errno(err, "unblocking signals");
	return 0;
}

int spawn_fds_keep(unsigned *keep, size_t n, struct sb_err *err)
{
	unsigned next = 0;

	for (size_t i = 1; i < n; i++)
		for (size_t j = i; j > 0 && keep[j - 1] > keep[j]; j--) {
			unsigned t = keep[j];

			keep[j] = keep[j - 1];
			keep[j - 1] = t;
		}
	for (size_t i = 0; i < n; i++) {
		if (keep[i] > next && syscall(SYS_close_range, next, keep[i] - 1, 0) < 0)
			return sb_fail_errno(err, "closing inherited descriptors");
		next = keep[i] + 1;
	}
	if (syscall(SYS_close_range, next, ~0U, 0) < 0)
		return sb_fail_errno(err, "closing inherited descriptors");
	return 0;
}

void spawn_die(int fd, const char *role, const struct sb_err *err, int status)
{
	char msg[SB_ERR_MSG_MAX + 64];
	size_t rlen = strnlen(role, 32), mlen = strnlen(err->msg, SB_ERR_MSG_MAX);

	memcpy(msg, role, rlen);
	memcpy(msg + rlen, ": ", 2);
	memcpy(msg + rlen + 2, err->msg, mlen);
	/* Nobody left to read it when this fails: dying is all there is to do either way. */
	(void)fd_write_all(fd, msg, rlen + 2 + mlen);
	_exit(status);
}
