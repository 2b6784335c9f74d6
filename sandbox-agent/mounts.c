/* The mount view of a command (see mounts.h). Runs in init between clone() and the command's
 * fork: no allocation, every result checked, failures reported through sb_err. */
#include "mounts.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <sys/mount.h>
#include <unistd.h>

/* pid numbers below 300 are not reused after wrap-around, and the kernel refuses a
 * pid_max at or below that (RESERVED_PIDS). */
#define PID_MAX_FLOOR 301

static int mount_proc(struct sb_err *err)
{
	/* Only a procfs mounted from inside shows just this PID namespace: the agent and every
	 * host process disappear from the command's view. The kernel allows it only when the
	 * existing /proc is fully visible (not masked), which is what `check` tests. */
	if (mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, NULL) < 0)
		return sb_fail_errno(err, "mounting a fresh /proc for the PID namespace");
	return 0;
}

/* Linux >= 6.14 keeps pid_max per PID namespace, writable by the namespace's owner: a hard
 * cap on live processes that also holds for host root, where RLIMIT_NPROC does not apply.
 * Older kernels refuse the write; RLIMIT_NPROC is then the only bound (`check` says so). */
static bool pid_max_apply(unsigned long max_processes)
{
	char value[32];
	bool applied;
	int fd, n;

	if (max_processes + 1 < PID_MAX_FLOOR)
		max_processes = PID_MAX_FLOOR - 1;
	n = snprintf(value, sizeof value, "%lu\n", max_processes + 1);
	fd = open("/proc/sys/kernel/pid_max", O_WRONLY | O_CLOEXEC);
	if (fd < 0)
		return false;
	/* Not fatal: see above; the caller reports whether it held. */
	applied = write(fd, value, (size_t)n) == n;
	close(fd);
	return applied;
}

static int hide_dir(const char *dir, struct sb_err *err)
{
	/* An empty, read-only, mode-000 tmpfs: the command sees a directory it can neither list
	 * nor write, whatever the real one holds. It cannot unmount it: no capabilities, and
	 * seccomp denies umount2. */
	if (mount("tmpfs", dir, "tmpfs", MS_NOSUID | MS_NODEV | MS_NOEXEC | MS_RDONLY,
		  "size=4k,nr_inodes=1,mode=000") < 0)
		return sb_fail_errno(err, "hiding %s", dir);
	return 0;
}

static int enter_cwd(const char *cwd, struct sb_err *err)
{
	char seen[PATH_MAX];

	/* After the view is final, so the path resolves in the command's world. */
	if (chdir(cwd) < 0)
		return sb_fail_errno(err, "entering the working directory %s", cwd);
	if (getcwd(seen, sizeof seen) == NULL)
		return sb_fail_errno(err, "reading back the working directory");
	if (strcmp(seen, cwd) != 0)
		return sb_fail(err, EXDEV, "working directory %s resolves to %s inside the sandbox", cwd, seen);
	return 0;
}

int mounts_build_view(char *const *hidden, size_t n_hidden, unsigned long max_processes,
		      const char *cwd, bool *pid_max_applied, struct sb_err *err)
{
	/* Private first: otherwise every mount below would propagate to the host's peers. */
	if (mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) < 0)
		return sb_fail_errno(err, "making the mount tree private");
	if (mount_proc(err) < 0)
		return -1;
	*pid_max_applied = pid_max_apply(max_processes);
	for (size_t i = 0; i < n_hidden; i++)
		if (hide_dir(hidden[i], err) < 0)
			return -1;
	return enter_cwd(cwd, err);
}
