/* The process backend's sandbox seen from outside (process.h): its init's identity (pid and start
 * time, the runtime id), the stop request (SIGKILL through a pidfd) and the evidence of its end (the
 * PID-namespace init exited, seen through that pidfd). Never says a sandbox is gone on anything
 * else: a sent signal is a request, and a pid alone may name another process by now. */
#include "process.h"

#include "clock.h"
#include "log.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/wait.h>

/* Field 22 of /proc/<pid>/stat, the start time in clock ticks since boot: with the pid it names
 * one process for good, since a pid is reused only after its process was reaped. 0, or -1 with
 * errno (ENOENT/ESRCH: no such process). */
int starttime_read(pid_t pid, unsigned long long *out)
{
	char path[64], buf[1024];
	cleanup_close int fd = -1;
	const char *p;
	ssize_t n;

	snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -1;
	n = read(fd, buf, sizeof buf - 1);
	if (n <= 0)
		return n == 0 ? (errno = ESRCH, -1) : -1;
	buf[n] = '\0';
	/* The command name (field 2) may hold spaces and parentheses: count from the last ')'. */
	p = strrchr(buf, ')');
	if (p == NULL) {
		errno = EPROTO;
		return -1;
	}
	/* p: the space before field 3; each step moves to the space before the next field. */
	p++;
	for (int field = 3; field < 22 && p != NULL; field++)
		p = strchr(p + 1, ' ');
	if (p == NULL || sscanf(p, " %llu", out) != 1) {
		errno = EPROTO;
		return -1;
	}
	return 0;
}

/* "process:<pid>:<starttime>" */
static int runtime_id_parse(const char *id, pid_t *pid, unsigned long long *start, struct sb_err *err)
{
	unsigned long p = 0;
	char *end = NULL;
	bool ok = id != NULL && strncmp(id, "process:", 8) == 0 && id[8] >= '1' && id[8] <= '9';

	if (ok) {
		errno = 0;
		p = strtoul(id + 8, &end, 10);
		ok = errno == 0 && *end == ':' && p > 1 && p <= INT_MAX && end[1] >= '0' && end[1] <= '9';
	}
	if (ok) {
		*start = strtoull(end + 1, &end, 10);
		ok = errno == 0 && *end == '\0';
	}
	if (!ok)
		return sb_invalid(err, "runtime id '%s' is not one of the process backend "
				  "(process:<pid>:<start time>)", id ? id : "(null)");
	*pid = (pid_t)p;
	return 0;
}

/* A pidfd for the recorded init, or proof that it is gone. 1: gone (the pid is free or names a
 * younger process); 0: *fd holds a pidfd of the very process; -1: err. The pidfd is opened BEFORE
 * the start time is compared: a process reused the pid only after ours was reaped, so a match
 * read after the open names the process the pidfd holds. */
static int init_pidfd_open(const struct sandbox_handle *h, int *fd, struct sb_err *err)
{
	unsigned long long recorded, now = 0;
	pid_t pid;

	if (runtime_id_parse(h->runtime_id, &pid, &recorded, err) < 0)
		return -1;
	*fd = (int)syscall(SYS_pidfd_open, pid, 0);
	if (*fd < 0)
		return errno == ESRCH ? 1 : sb_fail_errno(err, "pidfd_open(%d)", (int)pid);
	if (starttime_read(pid, &now) == 0 && now == recorded)
		return 0;
	if (errno != 0 && errno != ENOENT && errno != ESRCH && errno != EPROTO) {
		sb_fail_errno(err, "reading the start time of pid %d", (int)pid);
		close(*fd);
		*fd = -1;
		return -1;
	}
	close(*fd);
	*fd = -1;
	return 1;
}

/* Our own child is reaped here (true); an adopted one is someone else's to reap (ECHILD), and its
 * pidfd turning readable already proves it exited. */
static bool init_reap(int pidfd)
{
	siginfo_t info;
	int rc;

	memset(&info, 0, sizeof info);
	while ((rc = waitid((idtype_t)P_PIDFD, (id_t)pidfd, &info, WEXITED | WNOHANG)) < 0 && errno == EINTR) {
	}
	return rc == 0 && info.si_pid != 0;
}

/* Wait up to timeout_ms for the init behind pidfd to exit. 1: exited; 0: still running. A PID
 * namespace's init exits only after the kernel has killed and reaped every other process of the
 * namespace (zap_pid_ns_processes), nested namespaces included: its exit is the sandbox's end. */
int init_wait_exit(int pidfd, int timeout_ms, bool *reaped)
{
	int64_t deadline = clock_mono_ms() + timeout_ms;

	for (;;) {
		struct pollfd p = { .fd = pidfd, .events = POLLIN };
		int n = poll(&p, 1, clock_remaining_ms(deadline));

		if (n > 0) {
			bool ours = init_reap(pidfd);

			if (reaped != NULL)
				*reaped = ours;
			return 1;
		}
		if (n == 0 || (n < 0 && errno != EINTR) || clock_remaining_ms(deadline) == 0)
			return 0;
	}
}

void handle_clear(struct sandbox_handle *h)
{
	struct process_handle *ph = process_handle_of(h);

	memset(h, 0, sizeof *h);
	ph->magic = PROCESS_HANDLE_MAGIC;
	ph->pidfd = -1;
}

/* A handle this backend filled, or err: a zeroed one must never reach a pidfd (descriptor 0 is
 * no sandbox's init, and a poll on it proves nothing). */
static struct process_handle *handle_held(struct sandbox_handle *h, struct sb_err *err)
{
	struct process_handle *ph = process_handle_of(h);

	if (ph->magic != PROCESS_HANDLE_MAGIC) {
		sb_invalid(err, "the handle of sandbox '%s' holds no sandbox of the process backend", h->runtime_id);
		return NULL;
	}
	return ph;
}

/* SIGKILL to the sandbox's PID 1: the kernel then kills everything in its PID namespace, nested
 * command namespaces included. A request, not evidence. */
int process_stop(struct backend *be, struct sandbox_handle *h, struct sb_err *err)
{
	struct process_handle *ph = handle_held(h, err);

	(void)be;
	if (ph == NULL)
		return -1;
	if (ph->pidfd < 0) {
		int rc = init_pidfd_open(h, &ph->pidfd, err);

		if (rc != 0)
			return rc < 0 ? -1 : 0; /* gone already */
	}
	if (syscall(SYS_pidfd_send_signal, ph->pidfd, SIGKILL, NULL, 0) < 0 && errno != ESRCH)
		return sb_fail_errno(err, "sending SIGKILL to the sandbox's init (pid %d)", (int)ph->pid);
	return 0;
}

/* After the evidence: the sandbox's network helper is reaped, and its cgroup, empty now, goes. A
 * cgroup that will not go is logged (the next start sweeps it); it holds no process, so the evidence
 * stands. */
static void evidence_cgroup_remove(struct process *p, struct process_handle *ph)
{
	struct sb_err err;

	process_net_reap(&ph->net_pid);
	if (ph->cgroup[0] == '\0' || p->cgroup_fd < 0)
		return;
	if (cgroup_remove(p, ph->cgroup, &err) < 0)
		sb_warn("%s", err.msg);
	ph->cgroup[0] = '\0';
}

/* The evidence, in the words of what was seen: the reaped init (our child), its pidfd turning
 * readable (an adopted init, someone else's child), or a pid that is free or names a younger
 * process (the init is gone and was reaped by whoever was its parent). An init adopted after a
 * restart is the old manager's child, reaped by whoever inherited it. */
int process_evidence(struct backend *be, struct sandbox_handle *h, int timeout_ms, struct sb_err *err)
{
	struct process_handle *ph = handle_held(h, err);
	bool reaped = false;

	if (ph == NULL)
		return -1;
	if (h->evidence[0] != '\0' && ph->pidfd < 0)
		return 0; /* proven before: a sandbox once gone stays gone */
	if (ph->pidfd < 0) {
		int rc = init_pidfd_open(h, &ph->pidfd, err);

		if (rc < 0)
			return -1;
		if (rc == 1) {
			evidence_cgroup_remove(process_of(be), ph);
			snprintf(h->evidence, sizeof h->evidence, "init of the sandbox's PID namespace (%s) is gone: "
				 "its pid is free or names a younger process", h->runtime_id);
			return 0;
		}
	}
	if (!init_wait_exit(ph->pidfd, timeout_ms < 0 ? 0 : timeout_ms, &reaped))
		return sb_fail(err, ETIMEDOUT, "the sandbox's init (pid %d) did not exit within %d ms: not proven gone",
			       (int)ph->pid, timeout_ms);
	close(ph->pidfd);
	ph->pidfd = -1;
	evidence_cgroup_remove(process_of(be), ph);
	if (reaped)
		snprintf(h->evidence, sizeof h->evidence, "reaped init of the sandbox's PID namespace (pid %d)", (int)ph->pid);
	else
		snprintf(h->evidence, sizeof h->evidence, "init of the sandbox's PID namespace (pid %d) exited: its "
			 "pidfd turned readable, and it was reaped elsewhere", (int)ph->pid);
	return 0;
}

int process_adopt(struct backend *be, const char *runtime_id, const char *address, struct sandbox_handle *h,
		  struct sb_err *err)
{
	struct process_handle *ph = process_handle_of(h);
	unsigned long long start;
	pid_t pid;

	(void)be;
	handle_clear(h);
	if (runtime_id_parse(runtime_id, &pid, &start, err) < 0)
		return -1;
	if (strlen(runtime_id) >= sizeof h->runtime_id || (address && strlen(address) >= sizeof h->address))
		return sb_fail(err, ENAMETOOLONG, "runtime id or address too long");
	snprintf(h->runtime_id, sizeof h->runtime_id, "%s", runtime_id);
	snprintf(h->address, sizeof h->address, "%s", address ? address : "");
	ph->pid = pid;
	return 0; /* the pidfd is opened, start time checked, when stop() or evidence() needs it */
}
