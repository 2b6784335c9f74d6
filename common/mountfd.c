/* Mounts made from descriptors (see mountfd.h). */
#include "mountfd.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/openat2.h>
#include <stdio.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "linux_calls.h" /* after the system headers: it fills in what musl lacks */

int mfd_open_nofollow(int dirfd, const char *path, uint64_t flags)
{
	struct open_how how = {
		.flags = flags | O_CLOEXEC,
		.resolve = RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS | (dirfd == AT_FDCWD ? 0 : RESOLVE_BENEATH),
	};

	return (int)syscall(SYS_openat2, dirfd, path, &how, sizeof how);
}

static void close_keep_errno(int fd)
{
	int saved = errno;

	close(fd);
	errno = saved;
}

int mfd_open_reachable(const char *path, const char **rest)
{
	char name[NAME_MAX + 1];
	const char *c = path + 1;
	int fd = mfd_open_nofollow(AT_FDCWD, "/", O_PATH | O_DIRECTORY);

	while (fd >= 0 && *c != '\0') {
		size_t n = strcspn(c, "/");
		int next;

		if (n > NAME_MAX) {
			close(fd);
			errno = ENAMETOOLONG;
			return -1;
		}
		memcpy(name, c, n);
		name[n] = '\0';
		next = mfd_open_nofollow(fd, name, O_PATH);
		if (next < 0 && errno == EACCES)
			break; /* fd is as deep as this credential goes: *rest is c */
		close_keep_errno(fd);
		fd = next;
		c += n;
		c += *c == '/';
	}
	*rest = c;
	return fd;
}

int mfd_dir_make_beneath(int root, const char *rel)
{
	char buf[PATH_MAX];
	size_t len = strlen(rel);
	int fd;

	if (len >= sizeof buf) {
		errno = ENAMETOOLONG;
		return -1;
	}
	memcpy(buf, rel, len + 1);
	/* Most mount points' directories exist already (the host's /dev, a working directory): one
	 * open of the whole path, with the walk's own rules (no link followed, nothing outside root),
	 * finds them in one call instead of three per component. Only what is missing is walked and
	 * made. A ".." is left to the walk, which refuses it at every step as it always did. */
	if (strstr(rel, "..") == NULL) {
		fd = mfd_open_nofollow(root, len ? rel : ".", O_PATH | O_DIRECTORY);
		if (fd >= 0 || errno != ENOENT)
			return fd;
	}
	fd = mfd_open_nofollow(root, ".", O_PATH | O_DIRECTORY);
	for (char *c = buf; fd >= 0 && *c != '\0';) {
		char *end = c + strcspn(c, "/");
		bool last = *end == '\0';
		int next;

		*end = '\0';
		/* EEXIST also on a read-only mount: the kernel looks the name up before it asks for
		 * write access, so existing directories of a read-only view are walked, not refused. */
		if (mkdirat(fd, c, 0755) < 0 && errno != EEXIST) {
			close_keep_errno(fd);
			return -1;
		}
		next = mfd_open_nofollow(fd, c, O_PATH | O_DIRECTORY);
		close_keep_errno(fd);
		fd = next;
		c = last ? end : end + 1;
	}
	return fd;
}

int mfd_mountpoint_make(int root, const char *path, bool dir, struct sb_err *err)
{
	char parent[PATH_MAX];
	const char *slash = strrchr(path, '/');
	const char *name;
	size_t plen;
	struct stat st;
	int pfd, fd;

	if (path[0] != '/' || slash == NULL || strlen(path) >= sizeof parent)
		return sb_invalid(err, "mount point %s is not a plain absolute path", path);
	name = slash + 1;
	if (name[0] == '\0') {
		/* "/" itself: the root is its own mount point. */
		fd = mfd_open_nofollow(root, ".", O_PATH | O_DIRECTORY);
		return fd < 0 ? sb_fail_errno(err, "opening /") : fd;
	}
	plen = (size_t)(slash - path);                   /* "/a/b/c" -> "a/b" */
	memcpy(parent, path + 1, plen ? plen - 1 : 0);
	parent[plen ? plen - 1 : 0] = '\0';
	pfd = mfd_dir_make_beneath(root, parent);
	if (pfd < 0)
		return sb_fail_errno(err, "making the directories that lead to %s", path);
	if ((dir ? mkdirat(pfd, name, 0755) : mknodat(pfd, name, S_IFREG | 0444, 0)) < 0 && errno != EEXIST) {
		sb_fail_errno(err, "making the mount point %s", path);
		close(pfd);
		return -1;
	}
	fd = mfd_open_nofollow(pfd, name, O_PATH);
	close(pfd);
	if (fd < 0)
		return sb_fail_errno(err, "opening the mount point %s", path);
	if (fstat(fd, &st) < 0 || S_ISDIR(st.st_mode) != dir) {
		close(fd);
		return sb_fail(err, dir ? ENOTDIR : EISDIR, "mount point %s is not a %s", path, dir ? "directory" : "file");
	}
	return fd;
}

int mfd_attach(int mnt, int root, const char *path, bool dir, struct sb_err *err)
{
	int target = mfd_mountpoint_make(root, path, dir, err);
	int rc = 0;

	if (target < 0)
		return -1;
	if (move_mount(mnt, "", target, "", MOVE_MOUNT_F_EMPTY_PATH | MOVE_MOUNT_T_EMPTY_PATH) < 0)
		rc = sb_fail_errno(err, "attaching the mount at %s", path);
	close(target);
	return rc;
}

static int fs_config_number(int fs, const char *key, uint64_t value)
{
	char text[32];

	snprintf(text, sizeof text, "%llu", (unsigned long long)value);
	return fsconfig(fs, FSCONFIG_SET_STRING, key, text, 0);
}

int mfd_fs_new(const char *type, const char *mode, uint64_t size_bytes, uint64_t attrs, const char *what,
	       struct sb_err *err)
{
	int fs = fsopen(type, FSOPEN_CLOEXEC);
	int mnt = -1;

	if (fs < 0)
		return sb_fail_errno(err, "creating a %s for %s", type, what);
	if (mode != NULL && fsconfig(fs, FSCONFIG_SET_STRING, "mode", mode, 0) < 0)
		sb_fail_errno(err, "setting the mode of the %s for %s", type, what);
	else if (size_bytes > 0 && (fs_config_number(fs, "size", size_bytes) < 0 ||
				    fs_config_number(fs, "nr_inodes", size_bytes / 4096 > 1024 ? size_bytes / 4096 : 1024) < 0))
		sb_fail_errno(err, "bounding the %s for %s to %llu bytes", type, what, (unsigned long long)size_bytes);
	else if (fsconfig(fs, FSCONFIG_CMD_CREATE, NULL, NULL, 0) < 0)
		sb_fail_errno(err, "creating the %s for %s", type, what);
	else if ((mnt = fsmount(fs, FSMOUNT_CLOEXEC, (unsigned)attrs)) < 0)
		sb_fail_errno(err, "mounting the %s for %s", type, what);
	close(fs);
	return mnt;
}

int mfd_clone_tree(int src, uint64_t attrs, const char *what, struct sb_err *err)
{
	struct mount_attr attr = { .attr_set = attrs };
	/* Recursive: a copy of a mount with locked submounts must take them along (the kernel
	 * refuses otherwise), and a read-only view must be read-only all the way down. */
	int mnt = open_tree(src, "", OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC | AT_RECURSIVE | AT_EMPTY_PATH);

	if (mnt < 0)
		return sb_fail_errno(err, "copying the mount of %s", what);
	/* Attributes before attaching: the mount is never visible with fewer restrictions. */
	if (attrs && mount_setattr(mnt, "", AT_EMPTY_PATH | AT_RECURSIVE, &attr, sizeof attr) < 0) {
		sb_fail_errno(err, "restricting the mount of %s%s", what,
			      (attrs & MOUNT_ATTR_RDONLY) ? " to read-only" : "");
		close(mnt);
		return -1;
	}
	return mnt;
}

int mfd_seal(int mnt, const char *what, struct sb_err *err)
{
	struct mount_attr attr = { .attr_set = MOUNT_ATTR_RDONLY };

	if (mount_setattr(mnt, "", AT_EMPTY_PATH, &attr, sizeof attr) < 0)
		return sb_fail_errno(err, "making %s read-only", what);
	return 0;
}

int mfd_tree_private(struct sb_err *err)
{
	if (mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) < 0)
		return sb_fail_errno(err, "making the mount tree private");
	return 0;
}

int mfd_cwd_enter(const char *cwd, struct sb_err *err)
{
	char seen[PATH_MAX];

	if (chdir(cwd) < 0)
		return sb_fail_errno(err, "entering the working directory %s", cwd);
	if (getcwd(seen, sizeof seen) == NULL)
		return sb_fail_errno(err, "reading back the working directory");
	if (strcmp(seen, cwd) != 0)
		return sb_fail(err, EXDEV, "working directory %s resolves to %s inside the sandbox", cwd, seen);
	return 0;
}
