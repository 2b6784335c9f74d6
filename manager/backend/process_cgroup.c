/* The process backend's cgroups (process.h): each sandbox's own cgroup v2 directory under a parent
 * the host delegated to the manager, with its memory, pids and CPU limits written before anything
 * runs in it, removed once the sandbox is proven gone, and read back for limits(). Never touches a
 * cgroup outside the delegated parent, nor one whose name is not "sandbox-<session>-<generation>". */
#include "process.h"

#include "log.h"
#include "mountfd.h"
#include "pathfmt.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statfs.h>

#define CGROUP_RMDIR_TRIES 50       /* 10 ms apart: a cgroup empties a moment after its last process is reaped */
#ifndef CGROUP2_SUPER_MAGIC
#define CGROUP2_SUPER_MAGIC 0x63677270
#endif

static int open_nofollow_dir(const char *path)
{
	return mfd_open_nofollow(AT_FDCWD, path, O_RDONLY | O_DIRECTORY);
}

/* Write `text` to <dirfd>/<name> in one write. */
static int cgroup_write(int dirfd, const char *name, const char *text, struct sb_err *err)
{
	cleanup_close int fd = openat(dirfd, name, O_WRONLY | O_CLOEXEC | O_NOFOLLOW);
	size_t len = strlen(text);
	ssize_t n;

	if (fd < 0)
		return sb_fail_errno(err, "opening the cgroup's %s", name);
	n = write(fd, text, len);
	if (n < 0)
		return sb_fail_errno(err, "writing '%s' to the cgroup's %s", text, name);
	if ((size_t)n != len)
		return sb_fail(err, EIO, "writing '%s' to the cgroup's %s: short write", text, name);
	return 0;
}

/* Does <dirfd>/cgroup.procs list pid? Every process of the cgroup is a line of its own, in no order. */
static bool cgroup_holds(int dirfd, pid_t pid)
{
	char line[32], want[32];
	bool found = false;
	int fd = openat(dirfd, "cgroup.procs", O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
	FILE *f = fd < 0 ? NULL : fdopen(fd, "re");

	if (f == NULL) {
		if (fd >= 0)
			close(fd);
		return false;
	}
	snprintf(want, sizeof want, "%d\n", (int)pid);
	while (!found && fgets(line, sizeof line, f) != NULL)
		found = strcmp(line, want) == 0;
	fclose(f);
	return found;
}

/* The first line of <dirfd>/<name>, without its newline; -1 with errno. */
static int cgroup_read(int dirfd, const char *name, char *out, size_t len)
{
	cleanup_close int fd = openat(dirfd, name, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
	ssize_t n;

	if (fd < 0)
		return -1;
	n = read(fd, out, len - 1);
	if (n < 0)
		return -1;
	out[n] = '\0';
	out[strcspn(out, "\n")] = '\0';
	return 0;
}

static bool word_in(const char *list, const char *word)
{
	size_t n = strlen(word);

	for (const char *c = list; (c = strstr(c, word)) != NULL; c += n)
		if ((c == list || c[-1] == ' ') && (c[n] == '\0' || c[n] == ' '))
			return true;
	return false;
}

/* "sandbox-<session>-<generation>": one per sandbox generation, a plain name (session ids are hex
 * or volprobe-<hex>; anything else is refused rather than put in a path). */
static int cgroup_name(const struct sandbox_spec *spec, char *out, size_t len, struct sb_err *err)
{
	int n;

	if (spec->session[0] == '\0' || strspn(spec->session, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
					       "0123456789-") != strlen(spec->session))
		return sb_invalid(err, "session '%s' cannot name a cgroup", spec->session);
	n = snprintf(out, len, "sandbox-%s-%llu", spec->session, (unsigned long long)spec->generation);
	if (n < 0 || (size_t)n >= len)
		return sb_fail(err, ENAMETOOLONG, "the cgroup name of session %s", spec->session);
	return 0;
}

/* Removes an empty cgroup of ours; a cgroup empties a moment after its last process was reaped. */
int cgroup_remove(const struct process *p, const char *name, struct sb_err *err)
{
	for (int i = 0; i < CGROUP_RMDIR_TRIES; i++) {
		if (unlinkat(p->cgroup_fd, name, AT_REMOVEDIR) == 0 || errno == ENOENT)
			return 0;
		if (errno != EBUSY)
			break;
		usleep(10 * 1000);
	}
	return sb_fail_errno(err, "removing the sandbox's cgroup %s/%s", p->set.cgroup_parent, name);
}

/* The sandbox's own cgroup with its limits, before anything runs in it; its descriptor goes to
 * clone3 (CLONE_INTO_CGROUP), so init is born there and every descendant stays there. */
int cgroup_make(const struct process *p, const struct sandbox_spec *spec, char *name, int *fd, struct sb_err *err)
{
	char num[64];

	name[0] = '\0';
	*fd = -1;
	if (p->cgroup_fd < 0)
		return 0;
	if (cgroup_name(spec, name, CGROUP_NAME_MAX, err) < 0)
		return -1;
	/* A leftover of this very generation (a manager killed mid-prepare) is empty once its
	 * sandbox ended; a non-empty one is refused by rmdir (EBUSY), and so is this prepare. */
	if (mkdirat(p->cgroup_fd, name, 0755) < 0) {
		if (errno != EEXIST)
			return sb_fail_errno(err, "creating the cgroup %s/%s", p->set.cgroup_parent, name);
		if (cgroup_remove(p, name, err) < 0)
			return -1;
		if (mkdirat(p->cgroup_fd, name, 0755) < 0)
			return sb_fail_errno(err, "creating the cgroup %s/%s", p->set.cgroup_parent, name);
	}
	*fd = openat(p->cgroup_fd, name, O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW);
	if (*fd < 0)
		return sb_fail_errno(err, "opening the cgroup %s/%s", p->set.cgroup_parent, name);
	if (p->set.memory_bytes > 0) {
		snprintf(num, sizeof num, "%lld", (long long)p->set.memory_bytes);
		if (cgroup_write(*fd, "memory.max", num, err) < 0 ||
		    cgroup_write(*fd, "memory.swap.max", "0", err) < 0)
			return -1;
	}
	if (p->set.pids > 0) {
		snprintf(num, sizeof num, "%lld", (long long)p->set.pids);
		if (cgroup_write(*fd, "pids.max", num, err) < 0)
			return -1;
	}
	if (p->set.nano_cpus > 0) {
		/* quota per 100 ms period: 1e9 nano-CPUs are one CPU, 100000 us of every 100000 */
		snprintf(num, sizeof num, "%lld 100000", (long long)(p->set.nano_cpus / 10000));
		if (cgroup_write(*fd, "cpu.max", num, err) < 0)
			return -1;
	}
	return 0;
}

/* The delegated parent: a cgroup v2 directory the manager may write, with the controllers its
 * limits need enabled for its children. Checked once, at start. */
int cgroup_parent_open(struct process *p, struct sb_err *err)
{
	const char *want[3] = { p->set.memory_bytes > 0 ? "memory" : NULL, p->set.pids > 0 ? "pids" : NULL,
				p->set.nano_cpus > 0 ? "cpu" : NULL };
	char have[512], enable[64] = "";
	struct statfs sf;

	p->cgroup_fd = open_nofollow_dir(p->set.cgroup_parent);
	if (p->cgroup_fd < 0)
		return sb_fail_errno(err, "config: cgroup-parent %s", p->set.cgroup_parent);
	if (fstatfs(p->cgroup_fd, &sf) < 0 || sf.f_type != CGROUP2_SUPER_MAGIC)
		return sb_invalid(err, "config: cgroup-parent %s is not a cgroup v2 directory", p->set.cgroup_parent);
	if (cgroup_read(p->cgroup_fd, "cgroup.controllers", have, sizeof have) < 0)
		return sb_fail_errno(err, "config: reading %s/cgroup.controllers", p->set.cgroup_parent);
	for (size_t i = 0; i < 3; i++) {
		if (want[i] == NULL)
			continue;
		if (!word_in(have, want[i]))
			return sb_fail(err, EOPNOTSUPP, "config: cgroup-parent %s does not offer the %s controller "
				       "(it has: %s); delegate it, or set its limit to 0", p->set.cgroup_parent, want[i],
				       have[0] ? have : "none");
		snprintf(enable + strlen(enable), sizeof enable - strlen(enable), "%s+%s", enable[0] ? " " : "", want[i]);
	}
	/* The kernel refuses (EBUSY) while processes sit in the parent itself: cgroup v2 keeps
	 * processes in leaves only. */
	if (enable[0] != '\0' && cgroup_write(p->cgroup_fd, "cgroup.subtree_control", enable, err) < 0) {
		sb_err_prefix(err, "config: cgroup-parent %s: enabling %s for its children (it must hold no "
			      "process itself)", p->set.cgroup_parent, enable);
		return -1;
	}
	return 0;
}

/* Sandboxes' cgroups a killed manager left behind: the empty ones go (rmdir refuses a cgroup
 * that still holds a process). */
void cgroup_sweep(const struct process *p)
{
	/* fdopendir takes the descriptor over: a copy, close-on-exec like every other (a plain dup
	 * would not be, while the manager's other threads may start children). */
	int fd = fcntl(p->cgroup_fd, F_DUPFD_CLOEXEC, 0);
	DIR *d = fd < 0 ? NULL : fdopendir(fd);
	struct dirent *e;

	if (d == NULL) {
		if (fd >= 0)
			close(fd);
		return;
	}
	while ((e = readdir(d)) != NULL)
		if (e->d_type == DT_DIR && strncmp(e->d_name, "sandbox-", 8) == 0 &&
		    unlinkat(p->cgroup_fd, e->d_name, AT_REMOVEDIR) == 0)
			sb_info("removed the empty cgroup %s/%s of an earlier sandbox", p->set.cgroup_parent, e->d_name);
	closedir(d);
}

/* What the host offers, for the start-up line when no cgroup-parent is configured. */
void cgroup_describe_host(char *out, size_t len)
{
	char line[PATH_MAX], have[256] = "";
	FILE *f = fopen("/proc/self/cgroup", "re");
	bool v2 = false;
	int fd;

	while (f != NULL && fgets(line, sizeof line, f) != NULL)
		if (strncmp(line, "0::", 3) == 0)
			v2 = true;
	if (f != NULL)
		fclose(f);
	fd = open_nofollow_dir("/sys/fs/cgroup/unified");
	if (fd < 0)
		fd = open_nofollow_dir("/sys/fs/cgroup");
	if (fd >= 0 && cgroup_read(fd, "cgroup.controllers", have, sizeof have) < 0)
		have[0] = '\0';
	if (fd >= 0)
		close(fd);
	snprintf(out, len, "%s; cgroup v2 controllers at its root: %s", v2 ? "this manager is in a cgroup v2 hierarchy" :
		 "this manager is in no cgroup v2 hierarchy", have[0] ? have : "none");
}

static int64_t limit_parse(const char *text)
{
	return strcmp(text, "max") == 0 || text[0] < '0' || text[0] > '9' ? -1 : strtoll(text, NULL, 10);
}

/* The cgroup's files for the limits, and the init's own membership in it (cgroup.procs). */
int cgroup_limits_read(const struct process *p, const char *name, pid_t pid, struct sandbox_limits *out,
		       struct sb_err *err)
{
	char text[256];
	cleanup_close int cg = -1;

	if (p->cgroup_fd < 0 || name[0] == '\0')
		return 0;
	cg = openat(p->cgroup_fd, name, O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW);
	if (cg < 0 || !cgroup_holds(cg, pid))
		return 0; /* init is not (or no longer) in it: no cgroup limit is shown as holding */
	if (path_fmt(out->cgroup, sizeof out->cgroup, err, "%s/%s", p->set.cgroup_parent, name) < 0)
		return -1;
	if (cgroup_read(cg, "memory.max", text, sizeof text) == 0)
		out->memory_max = limit_parse(text);
	if (cgroup_read(cg, "pids.max", text, sizeof text) == 0)
		out->pids_max = limit_parse(text);
	if (cgroup_read(cg, "cpu.max", text, sizeof text) == 0 && limit_parse(text) >= 0) {
		out->cpu_quota_us = limit_parse(text);
		out->cpu_period_us = strchr(text, ' ') ? strtoll(strchr(text, ' ') + 1, NULL, 10) : -1;
	}
	return 0;
}
