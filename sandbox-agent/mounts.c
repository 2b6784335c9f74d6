/* The mount view of a command (see mounts.h). Runs in init between clone() and the command's
 * fork: no allocation, every result checked, failures reported through sb_err. The mounts are
 * made from descriptors (common/mountfd.c), never by re-resolving a path after a check. */
#include "mounts.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/fsuid.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include "linux_calls.h" /* after the system headers: it fills in what musl lacks */

#include "cleanup.h"
#include "fstype.h"
#include "mountfd.h"
#include "steptime.h"

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

unsigned long mounts_pid_max_read(void)
{
	char text[32];
	int fd = open("/proc/sys/kernel/pid_max", O_RDONLY | O_CLOEXEC);
	ssize_t n = fd >= 0 ? read(fd, text, sizeof text - 1) : -1;

	if (fd >= 0)
		close(fd);
	if (n <= 0)
		return 0;
	text[n] = '\0';
	return strtoul(text, NULL, 10);
}

/* Linux >= 6.14 keeps pid_max per PID namespace, writable by the namespace's owner: a hard
 * cap on live processes that also holds for host root, where RLIMIT_NPROC does not apply.
 * Older kernels refuse the write; RLIMIT_NPROC is then the only bound (`check` says so). The
 * command itself can never raise it again: it is not uid 0 of its user namespace
 * (boundary_prepare.c command_ids_choose), and init measures it after the command (init.c). */
static unsigned long pid_max_apply(unsigned long max_processes)
{
	char value[32];
	bool applied;
	int fd, n;

	if (max_processes + 1 < PID_MAX_FLOOR)
		max_processes = PID_MAX_FLOOR - 1;
	n = snprintf(value, sizeof value, "%lu\n", max_processes + 1);
	fd = open("/proc/sys/kernel/pid_max", O_WRONLY | O_CLOEXEC);
	if (fd < 0)
		return 0;
	/* Not fatal: see above; the caller reports whether it held. */
	applied = write(fd, value, (size_t)n) == n;
	close(fd);
	return applied ? max_processes + 1 : 0;
}

/* ---- the read-only world of `sandbox-agent exec` ---- */

/* Rule N7: a detached copy of the writable root held by src, its mounts inside (which the recursive copy
 * must take along) read-only, nodev, nosuid and noexec: only what is declared writable is, and a mount
 * made there since the agent's check (boundary_view.c writable_mounts_check()) brings no device, set-id
 * program or write access with it. The root's own mount then gets write and exec back, unless it lacked
 * them before the copy (a flag the namespace copy locked cannot be cleared, and must not be widened).
 * A root on a kernel filesystem is refused by the f_type of the very descriptor copied. */
static int writable_copy(int src, const char *root, struct sb_err *err)
{
	struct mount_attr back = { 0 };
	struct statvfs sv;
	const char *type;
	int rc = fstype_kernel_fd(src, root, &type, err), mnt;

	if (rc > 0)
		return sb_fail(err, EACCES, "the writable %s is on a %s filesystem, which belongs to the kernel: a "
			       "command could change the machine's or other processes' state through it; choose a "
			       "directory on a data filesystem", root, type);
	if (rc < 0)
		return -1;
	if (fstatvfs(src, &sv) < 0)
		return sb_fail_errno(err, "statvfs of the writable root %s", root);
	/* No device node works in a writable root either: a chroot's /dev bound in it would otherwise
	 * bring back every terminal the fresh /dev leaves out. */
	mnt = mfd_clone_tree(src, MOUNT_ATTR_RDONLY | MOUNT_ATTR_NODEV | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NOEXEC,
			     root, err);
	if (mnt < 0)
		return -1;
	back.attr_clr = ((sv.f_flag & ST_RDONLY) ? 0 : MOUNT_ATTR_RDONLY) | ((sv.f_flag & ST_NOEXEC) ? 0 : MOUNT_ATTR_NOEXEC);
	if (back.attr_clr && mount_setattr(mnt, "", AT_EMPTY_PATH, &back, sizeof back) < 0) {
		sb_fail_errno(err, "making the writable root %s writable again", root);
		close(mnt);
		return -1;
	}
	return mnt;
}

/* Detached copies of the writable roots, taken while the host view is still as it was. */
static int writable_clone(const char *const *roots, size_t n, int *clones, struct init_bound *bound,
			  struct sb_err *err)
{
	for (size_t i = 0; i < n; i++) {
		int src = mfd_open_nofollow(AT_FDCWD, roots[i], O_PATH | O_DIRECTORY);
		struct stat st;

		if (src < 0)
			return sb_fail_errno(err, "opening the writable root %s", roots[i]);
		/* What is copied is what the agent compares, for a prebuilt init (init.h struct init_bound). */
		if (fstat(src, &st) < 0) {
			close(src);
			return sb_fail_errno(err, "fstat of the writable root %s", roots[i]);
		}
		bound->id[bound->n].dev = st.st_dev;
		bound->id[bound->n].ino = st.st_ino;
		bound->n++;
		clones[i] = writable_copy(src, roots[i], err);
		close(src);
		if (clones[i] < 0)
			return -1;
	}
	return 0;
}

/* The order the roots are attached in: shorter paths first. A root declared inside another (or the
 * working directory inside one) must go on top of it, or the outer copy, where it is read-only
 * (writable_copy()), would cover it; an ancestor's path is always the shorter. No allocation: init. */
static void attach_order(const char *const *roots, size_t n, size_t *order)
{
	for (size_t i = 0; i < n; i++) {
		size_t j = i;

		for (; j > 0 && strlen(roots[order[j - 1]]) > strlen(roots[i]); j--)
			order[j] = order[j - 1];
		order[j] = i;
	}
}

/* Every mount of the copied tree read-only, without device nodes and set-id bits. Read-only
 * stops writes to files, directories and links only: a device node opened for writing still
 * works on a read-only mount (a pts of a chroot's /dev bound somewhere), hence nodev; FIFOs and
 * sockets are the Landlock layer's and seccomp's (init.c command_main()). Setting these is always
 * allowed, even on mounts locked by the namespace copy; only clearing them would not be, which is
 * why the writable roots were copied before, not re-opened after. */
static int world_readonly(struct sb_err *err)
{
	struct mount_attr attr = { .attr_set = MOUNT_ATTR_RDONLY | MOUNT_ATTR_NODEV | MOUNT_ATTR_NOSUID };

	if (mount_setattr(AT_FDCWD, "/", AT_RECURSIVE, &attr, sizeof attr) < 0)
		return sb_fail_errno(err, "making the host's view read-only");
	return 0;
}

static const char *const dev_nodes[] = { "/dev/null", "/dev/zero", "/dev/full", "/dev/random", "/dev/urandom" };
#define N_DEV_NODES (sizeof dev_nodes / sizeof dev_nodes[0])

/* Detached copies of the host's harmless character devices, taken before the host view turns
 * nodev (a copy keeps its source's flags, and nodev cannot be cleared again). Absent on this host:
 * left out (-1). */
static int dev_nodes_clone(int *src, struct sb_err *err)
{
	for (size_t i = 0; i < N_DEV_NODES; i++) {
		int fd = mfd_open_nofollow(AT_FDCWD, dev_nodes[i], O_PATH);

		src[i] = -1;
		if (fd < 0)
			continue;
		src[i] = mfd_clone_tree(fd, MOUNT_ATTR_NOSUID | MOUNT_ATTR_NOEXEC, dev_nodes[i], err);
		close(fd);
		if (src[i] < 0)
			return -1;
	}
	return 0;
}

/* A minimal /dev: those devices (bound: a tmpfs made in a user namespace cannot hold working
 * device nodes), the usual links, a sized /dev/shm. No pts and no ptmx: a command never reaches
 * the operator's terminal (or any other). Sealed read-only. */
static int dev_build(const struct boundary *b, int root, const int *src, struct sb_err *err)
{
	static const char *const links[][2] = {
		{ "fd", "/proc/self/fd" }, { "stdin", "/proc/self/fd/0" },
		{ "stdout", "/proc/self/fd/1" }, { "stderr", "/proc/self/fd/2" },
	};
	int dev = -1, mnt = -1, shm = -1, rc = -1;

	dev = mfd_fs_new("tmpfs", "0755", 1 << 20, MOUNT_ATTR_NOSUID | MOUNT_ATTR_NOEXEC, "/dev", err);
	if (dev < 0 || mfd_attach(dev, root, "/dev", true, err) < 0)
		goto out;
	for (size_t i = 0; i < N_DEV_NODES; i++)
		if (src[i] >= 0 && mfd_attach(src[i], root, dev_nodes[i], false, err) < 0)
			goto out;
	mnt = mfd_open_nofollow(root, "dev", O_PATH | O_DIRECTORY);
	if (mnt < 0) {
		sb_fail_errno(err, "opening the new /dev");
		goto out;
	}
	for (size_t i = 0; i < sizeof links / sizeof links[0]; i++)
		if (symlinkat(links[i][1], mnt, links[i][0]) < 0) {
			sb_fail_errno(err, "making the link /dev/%s", links[i][0]);
			goto out;
		}
	shm = mfd_fs_new("tmpfs", "1777", b->shm_bytes, MFD_ATTR_SAFE, "/dev/shm", err);
	if (shm < 0 || mfd_attach(shm, root, "/dev/shm", true, err) < 0 || mfd_seal(dev, "/dev", err) < 0)
		goto out;
	rc = 0;
out:
	if (dev >= 0)
		close(dev);
	if (mnt >= 0)
		close(mnt);
	if (shm >= 0)
		close(shm);
	return rc;
}

/* The mount point (the fifth field) of one line of mountinfo, its octal escapes (\040 for a space)
 * decoded, into out. -1 when the line has no such field or it does not fit. */
static int mountinfo_point(const char *line, char *out, size_t len)
{
	const char *p = line;
	size_t n = 0;

	for (int field = 0; field < 4; field++) {
		p = strchr(p, ' ');
		if (p == NULL)
			return -1;
		p++;
	}
	while (*p != ' ' && *p != '\0') {
		char c = *p++;

		if (c == '\\' && p[0] >= '0' && p[0] <= '3' && p[1] >= '0' && p[1] <= '7' && p[2] >= '0' && p[2] <= '7') {
			c = (char)((p[0] - '0') << 6 | (p[1] - '0') << 3 | (p[2] - '0'));
			p += 3;
		}
		if (n + 1 >= len)
			return -1;
		out[n++] = c;
	}
	out[n] = '\0';
	return n > 0 ? 0 : -1;
}

static bool path_beneath(const char *path, const char *dir)
{
	size_t n = strlen(dir);

	return strncmp(path, dir, n) == 0 && (path[n] == '/' || path[n] == '\0' || n == 1);
}

/* One line of the view's mount table: a mount beneath a writable root (at, canonical) that the command
 * can open and that is a kernel filesystem refuses the call. Opened as the command's ids, without
 * following links: what the command cannot reach (covered, or not searchable) is not in its view. */
static int kernel_mount_refuse(const char *line, const char (*at)[PATH_MAX], size_t n, struct sb_err *err)
{
	char point[PATH_MAX];
	const char *type;
	int fd, rc;

	if (mountinfo_point(line, point, sizeof point) < 0)
		return sb_fail(err, EINVAL, "a line of the view's mount table without a mount point");
	for (size_t i = 0; i < n; i++) {
		if (!path_beneath(point, at[i]))
			continue;
		fd = mfd_open_nofollow(AT_FDCWD, point, O_PATH);
		if (fd < 0) {
			if (errno == ENOENT || errno == ENOTDIR || errno == EACCES || errno == ELOOP)
				return 0;
			return sb_fail_errno(err, "opening %s, mounted inside the writable %s", point, at[i]);
		}
		rc = fstype_kernel_fd(fd, point, &type, err);
		close(fd);
		if (rc > 0)
			return sb_fail(err, EACCES, "the writable %s holds a %s filesystem at %s, which belongs to the "
				       "kernel: a command could change the machine's or other processes' state through "
				       "it; unmount it or choose a writable root without it", at[i], type, point);
		return rc;
	}
	return 0;
}

/* Rule N7 again, on the view as built: every mount of this namespace beneath a writable root, from
 * init's own mountinfo, read in pieces into a fixed buffer (no allocation in init). This catches a
 * kernel filesystem mounted after the agent's check (boundary_view.c writable_mounts_check()) and copied
 * with its root. A line longer than the buffer fails closed. */
static int kernel_mounts_refuse(const char (*at)[PATH_MAX], size_t n, struct sb_err *err)
{
	char buf[16384];
	size_t have = 0;
	int fd = open("/proc/self/mountinfo", O_RDONLY | O_CLOEXEC), rc = 0;

	if (fd < 0)
		return sb_fail_errno(err, "opening the view's mount table");
	while (rc == 0) {
		ssize_t got = read(fd, buf + have, sizeof buf - 1 - have);
		char *line = buf, *nl;

		if (got < 0 && errno == EINTR)
			continue;
		if (got < 0) {
			rc = sb_fail_errno(err, "reading the view's mount table");
			break;
		}
		have += (size_t)got;
		while (rc == 0 && (nl = memchr(line, '\n', (size_t)(buf + have - line))) != NULL) {
			*nl = '\0';
			rc = kernel_mount_refuse(line, at, n, err);
			line = nl + 1;
		}
		have = (size_t)(buf + have - line);
		if (rc == 0 && (got == 0 || have == sizeof buf - 1)) {
			if (have > 0)
				rc = sb_fail(err, E2BIG, "a line of the view's mount table is unfinished or too long");
			break;
		}
		memmove(buf, line, have);
	}
	close(fd);
	return rc;
}

/* The writable roots as the kernel names them in this namespace (the working directory may be spelled
 * with ".."), from descriptors opened on the view as built. */
static int roots_canonical(const char *const *roots, size_t n, char (*at)[PATH_MAX], struct sb_err *err)
{
	for (size_t i = 0; i < n; i++) {
		char link[64];
		int fd = mfd_open_nofollow(AT_FDCWD, roots[i], O_PATH | O_DIRECTORY);
		ssize_t len;

		if (fd < 0)
			return sb_fail_errno(err, "opening the writable root %s in the view", roots[i]);
		snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
		len = readlink(link, at[i], PATH_MAX - 1);
		close(fd);
		if (len <= 0 || len >= PATH_MAX - 1 || at[i][0] != '/')
			return sb_fail(err, len < 0 ? errno : ENAMETOOLONG, "naming the writable root %s in the view",
				       roots[i]);
		at[i][len] = '\0';
	}
	return 0;
}

/* The host view read-only, the writable roots back on top, a fresh /dev, a private /tmp.
 * The roots are attached last: one under /tmp gets its mount point made in the fresh tmpfs. */
static int world_build(const struct boundary *b, const char *cwd, struct init_bound *bound, struct sb_err *err)
{
	const char *roots[BOUNDARY_MAX_WRITABLE + 1];
	int clones[BOUNDARY_MAX_WRITABLE + 1], devs[N_DEV_NODES];
	size_t order[BOUNDARY_MAX_WRITABLE + 1];
	char at[BOUNDARY_MAX_WRITABLE + 1][PATH_MAX];
	size_t n = 0;
	int root = -1, tmp = -1, rc = -1;

	roots[n++] = cwd;
	for (size_t i = 0; i < b->n_writable; i++)
		roots[n++] = b->writable[i];
	for (size_t i = 0; i < n; i++)
		clones[i] = -1;
	for (size_t i = 0; i < N_DEV_NODES; i++)
		devs[i] = -1;
	if (writable_clone(roots, n, clones, bound, err) < 0 || dev_nodes_clone(devs, err) < 0 || world_readonly(err) < 0)
		goto out;
	root = mfd_open_nofollow(AT_FDCWD, "/", O_PATH | O_DIRECTORY);
	if (root < 0) {
		sb_fail_errno(err, "opening /");
		goto out;
	}
	if (dev_build(b, root, devs, err) < 0)
		goto out;
	tmp = mfd_fs_new("tmpfs", "1777", b->tmp_bytes, MFD_ATTR_SAFE, "/tmp", err);
	if (tmp < 0 || mfd_attach(tmp, root, "/tmp", true, err) < 0)
		goto out;
	attach_order(roots, n, order);
	for (size_t i = 0; i < n; i++)
		if (mfd_attach(clones[order[i]], root, roots[order[i]], true, err) < 0)
			goto out;
	/* Last, on the view the command will have: nothing is attached beneath the roots after this. */
	if (roots_canonical(roots, n, at, err) < 0 || kernel_mounts_refuse((const char (*)[PATH_MAX])at, n, err) < 0)
		goto out;
	rc = 0;
out:
	for (size_t i = 0; i < n; i++)
		if (clones[i] >= 0)
			close(clones[i]);
	for (size_t i = 0; i < N_DEV_NODES; i++)
		if (devs[i] >= 0)
			close(devs[i]);
	if (root >= 0)
		close(root);
	if (tmp >= 0)
		close(tmp);
	return rc;
}

/* ---- hiding the agent's directories ---- */

/* An empty, read-only, mode-000 tmpfs over the directory the agent holds: the command sees a
 * directory it can neither list nor write, whatever the real one holds. It cannot unmount it:
 * no capabilities, and seccomp denies umount2. The path is opened once, its identity compared
 * with the one the agent recorded from its descriptor, and the mount attached to what was
 * opened: a directory moved or replaced since fails closed instead of leaving the real one
 * visible under another name. */
static int hide_dir(const struct hidden_dir *h, struct sb_err *err)
{
	struct stat st;
	int fd = mfd_open_nofollow(AT_FDCWD, h->path, O_PATH | O_DIRECTORY);
	int mnt, rc;

	if (fd < 0)
		return sb_fail_errno(err, "the agent's private directory %s is not where the agent holds it "
				     "(moved or replaced?): refusing to run commands", h->path);
	if (fstat(fd, &st) < 0 || st.st_dev != h->dev || st.st_ino != h->ino) {
		close(fd);
		return sb_fail(err, EXDEV, "the agent's private directory %s was moved or replaced since the agent "
			       "opened it: refusing to run commands", h->path);
	}
	mnt = mfd_fs_new("tmpfs", "000", 4096, MFD_ATTR_SAFE | MOUNT_ATTR_NOEXEC | MOUNT_ATTR_RDONLY, h->path, err);
	if (mnt < 0) {
		close(fd);
		return -1;
	}
	rc = move_mount(mnt, "", fd, "", MOVE_MOUNT_F_EMPTY_PATH | MOVE_MOUNT_T_EMPTY_PATH);
	if (rc < 0)
		sb_fail_errno(err, "hiding %s", h->path);
	close(mnt);
	close(fd);
	return rc < 0 ? -1 : 0;
}

/* `serve --user-home`: the agent's copies of /etc/passwd and /etc/group (command_user.c), each
 * bound read-only over the view's own file. Before the hiding mounts, which cover the state
 * directory the copies lie in. As hide_dir(): the path opened once, its identity compared with the
 * one the agent recorded, and the copy taken from what was opened, so that a file put in its place
 * fails closed instead of naming users. */
static int users_bind(const struct boundary *b, struct sb_err *err)
{
	cleanup_close int root = -1;

	if (b->n_users == 0)
		return 0;
	root = mfd_open_nofollow(AT_FDCWD, "/", O_PATH | O_DIRECTORY);
	if (root < 0)
		return sb_fail_errno(err, "opening /");
	for (size_t i = 0; i < b->n_users; i++) {
		const struct user_file *u = &b->users[i];
		cleanup_close int fd = mfd_open_nofollow(AT_FDCWD, u->source, O_PATH);
		cleanup_close int mnt = -1;
		struct stat st;

		if (fd < 0)
			return sb_fail_errno(err, "opening the agent's copy %s", u->source);
		if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode) || st.st_dev != u->dev || st.st_ino != u->ino)
			return sb_fail(err, EXDEV, "the agent's copy %s was replaced since the agent wrote it: "
				       "refusing to run commands", u->source);
		mnt = mfd_clone_tree(fd, MFD_ATTR_SAFE | MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOEXEC, u->source, err);
		if (mnt < 0 || mfd_attach(mnt, root, u->target, false, err) < 0)
			return -1;
	}
	return 0;
}

/* What init creates in a new tmpfs must be owned by ids this namespace maps: under a host-root
 * agent init's own (host 0) are not, and the kernel would refuse (EOVERFLOW). So the read-only
 * world is built with the command's ids as filesystem ids; its lookups then run with them too,
 * which is what the command will have. */
static int fs_ids_take(uid_t fs_uid, gid_t fs_gid, struct sb_err *err)
{
	setfsuid(fs_uid);
	setfsgid(fs_gid);
	if ((uid_t)setfsuid((uid_t)-1) != fs_uid || (gid_t)setfsgid((gid_t)-1) != fs_gid)
		return sb_fail(err, EPERM, "taking the command's filesystem ids %u:%u", (unsigned)fs_uid,
			       (unsigned)fs_gid);
	return 0;
}

int mounts_build_view(const struct boundary *b, const char *cwd, uid_t fs_uid, gid_t fs_gid,
		      unsigned long *pid_max_set, struct init_bound *bound, struct sb_err *err)
{
	struct stat st;

	bound->n = 1; /* [0]: the working directory, entered last */
	/* Private first: otherwise every mount below would propagate to the host's peers. */
	if (mfd_tree_private(err) < 0 || users_bind(b, err) < 0)
		return -1;
	/* The hiding mounts in the host's view as it is, with init's own ids: every hidden
	 * directory must be found, and be the one the agent holds. A private /tmp may cover some of
	 * them again below; that does not make their check optional. */
	for (size_t i = 0; i < b->n_hidden; i++)
		if (hide_dir(&b->hidden[i], err) < 0)
			return -1;
	steptime_mark(STEP_INIT_HIDDEN);
	if (b->readonly_world && (fs_ids_take(fs_uid, fs_gid, err) < 0 || world_build(b, cwd, bound, err) < 0))
		return -1;
	steptime_mark(STEP_INIT_WORLD);
	/* After the read-only step, so the fresh procfs stays writable where the kernel allows
	 * (the command's own /proc/self files, and pid_max for init just below). */
	if (mount_proc(err) < 0)
		return -1;
	*pid_max_set = pid_max_apply(b->max_processes);
	if (mfd_cwd_enter(cwd, err) < 0)
		return -1;
	if (stat(".", &st) < 0)
		return sb_fail_errno(err, "stat of the working directory %s", cwd);
	bound->id[0].dev = st.st_dev;
	bound->id[0].ino = st.st_ino;
	steptime_mark(STEP_INIT_PROC);
	return 0;
}
