/* Shared clone-side steps (see nsspawn.h). */
#include "nsspawn.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/close_range.h>
#include <linux/sched.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "fdio.h"
pid_t spawn_clone_into(uint64_t ns_flags, int cgroup_fd, int *pidfd, struct sb_err *err)
{
	/* With CLONE_PARENT the child's exit signal is the caller's own (its parent's choice, SIGCHLD for
	 * ours), and clone3 refuses any other. */
	int exit_signal = (ns_flags & CLONE_PARENT) ? 0 : SIGCHLD;
	struct clone_args args = {
		.flags = ns_flags | CLONE_PIDFD | (cgroup_fd >= 0 ? CLONE_INTO_CGROUP : 0),
		.pidfd = (uint64_t)(uintptr_t)pidfd,
		.exit_signal = (uint64_t)exit_signal,
		.cgroup = cgroup_fd >= 0 ? (uint64_t)cgroup_fd : 0,
	};
	pid_t pid = (pid_t)syscall(SYS_clone3, &args, sizeof args);

	/* Without clone3 a cgroup could only be entered after the child runs: refused, not degraded. */
	if (pid < 0 && errno == ENOSYS && cgroup_fd < 0)
		pid = (pid_t)syscall(SYS_clone, ns_flags | CLONE_PIDFD | (uint64_t)exit_signal, NULL, pidfd, NULL, 0);
	if (pid < 0)
		return sb_fail_errno(err, cgroup_fd >= 0 ? "creating namespaces in the sandbox's cgroup (clone3)" :
				     "creating namespaces (clone)");
	return pid;
}

pid_t spawn_clone(uint64_t ns_flags, int *pidfd, struct sb_err *err)
{
	return spawn_clone_into(ns_flags, -1, pidfd, err);
}

int spawn_proc_write(pid_t pid, const char *name, const char *text, struct sb_err *err)
{
	char path[64];
	size_t len = strlen(text);
	ssize_t n;
	int fd;

	int plen = snprintf(path, sizeof path, "/proc/%d/%s", (int)pid, name);

	if (plen < 0 || (size_t)plen >= sizeof path)
		return sb_fail(err, ENAMETOOLONG, "/proc/%d/%s: path too long", (int)pid, name);
	fd = open(path, O_WRONLY | O_CLOEXEC);
	if (fd < 0)
		return sb_fail_errno(err, "opening %s", path);
	/* One write: the kernel takes a map only whole, in a single write(2). */
	n = write(fd, text, len);
	if (n < 0) {
		sb_fail_errno(err, "writing %s", path);
		close(fd);
		return -1;
	}
	close(fd);
	if ((size_t)n != len)
		return sb_fail(err, EIO, "writing %s: %zd of %zu bytes taken", path, n, len);
	return 0;
}

/* setgroups first: an unprivileged writer's gid_map is refused until setgroups is denied
 * (user_namespaces(7)), and denying it keeps the namespace from ever changing its supplementary
 * groups. Each map holds one line, so a truncated line would be a different map: it is refused,
 * never written. */
static int id_maps_write(pid_t pid, uid_t inside_uid, uid_t outside_uid, gid_t inside_gid, gid_t outside_gid,
			 bool deny_setgroups, struct sb_err *err)
{
	char map[64];
	int n;

	if (deny_setgroups && spawn_proc_write(pid, "setgroups", "deny", err) < 0)
		return -1;
	n = snprintf(map, sizeof map, "%u %u 1\n", (unsigned)inside_gid, (unsigned)outside_gid);
	if (n < 0 || (size_t)n >= sizeof map)
		return sb_fail(err, EOVERFLOW, "gid map of pid %d does not fit", (int)pid);
	if (spawn_proc_write(pid, "gid_map", map, err) < 0)
		return -1;
	n = snprintf(map, sizeof map, "%u %u 1\n", (unsigned)inside_uid, (unsigned)outside_uid);
	if (n < 0 || (size_t)n >= sizeof map)
		return sb_fail(err, EOVERFLOW, "uid map of pid %d does not fit", (int)pid);
	return spawn_proc_write(pid, "uid_map", map, err);
}

int spawn_id_maps_write(pid_t pid, uid_t inside_uid, uid_t outside_uid, gid_t inside_gid, gid_t outside_gid,
			struct sb_err *err)
{
	return id_maps_write(pid, inside_uid, outside_uid, inside_gid, outside_gid, true, err);
}

int spawn_id_maps_write_groups_open(pid_t pid, uid_t inside_uid, uid_t outside_uid, gid_t inside_gid,
				    gid_t outside_gid, struct sb_err *err)
{
	return id_maps_write(pid, inside_uid, outside_uid, inside_gid, outside_gid, false, err);
}

int spawn_signals_default(struct sb_err *err)
{
	/* The kernel's own struct sigaction, zeroed: SIG_DFL, no flags, an empty mask, in every
	 * architecture's layout (handler, flags, [restorer,] mask); 8 bytes of mask for 64 signals. */
	unsigned long dfl[4] = { 0 };
	sigset_t none;

	for (int sig = 1; sig <= 64; sig++)
		if (sig != SIGKILL && sig != SIGSTOP && syscall(SYS_rt_sigaction, sig, dfl, NULL, 8) < 0)
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

int spawn_ids_set(uid_t uid, gid_t gid, struct sb_err *err)
{
	if (syscall(SYS_setresgid, gid, gid, gid) < 0)
		return sb_fail_errno(err, "setresgid(%u)", (unsigned)gid);
	if (syscall(SYS_setresuid, uid, uid, uid) < 0)
		return sb_fail_errno(err, "setresuid(%u)", (unsigned)uid);
	return 0;
}

int spawn_fds_cloexec_above_stdio(struct sb_err *err)
{
	if (syscall(SYS_close_range, 3U, ~0U, CLOSE_RANGE_CLOEXEC) < 0)
		return sb_fail_errno(err, "close_range");
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
