/* Whole writes to a descriptor and private-file creation (see fdio.h). */
#include "fdio.h"

#include <errno.h>
#include <stdbool.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "pathfmt.h"

int fd_stdio_ensure(void)
{
	for (int fd = 0; fd < 3; fd++) {
		int got;

		if (fcntl(fd, F_GETFD) >= 0)
			continue;
		/* The lowest free number is fd itself: those below it are open (this loop). */
		got = open("/dev/null", O_RDWR);
		if (got < 0)
			return -1;
		if (got != fd) {
			close(got);
			errno = EBADF;
			return -1;
		}
	}
	return 0;
}

int fd_reserve(int fd, size_t bytes)
{
	if (fallocate(fd, FALLOC_FL_KEEP_SIZE, 0, (off_t)bytes) == 0)
		return 0;
	if (errno != EOPNOTSUPP && errno != ENOSYS)
		return errno;
	return posix_fallocate(fd, 0, (off_t)bytes);
}

int fd_reserve_release(int fd)
{
	struct stat st;

	if (fstat(fd, &st) < 0)
		return -1;
	return ftruncate(fd, st.st_size);
}

int fd_write_all(int fd, const void *buf, size_t len)
{
	const char *p = buf;

	while (len > 0) {
		ssize_t n = write(fd, p, len);

		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return -1;
		/* Never returned for len > 0 by pipes, sockets or files; looping on it would spin. */
		if (n == 0) {
			errno = EPIPE;
			return -1;
		}
		p += n;
		len -= (size_t)n;
	}
	return 0;
}

int fd_read_exact(int fd, void *buf, size_t len)
{
	size_t done = 0;

	while (done < len) {
		ssize_t n = read(fd, (char *)buf + done, len - done);

		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return -1;
		done += (size_t)n;
	}
	return 0;
}

/* errno, or EIO when a failed call left none: a message must never carry a stale or zero errno. */
static int errno_or_eio(void)
{
	return errno != 0 ? errno : EIO;
}

/* Writes, owns and syncs the open fd; the caller closes and unlinks on -1. */
static int file_fill(int fd, uid_t uid, gid_t gid, const void *data, size_t len)
{
	errno = 0;
	if ((uid != (uid_t)-1 || gid != (gid_t)-1) && fchown(fd, uid, gid) < 0)
		return -1;
	/* fd_write_all loops over short writes, so a full disk is its real ENOSPC, not a count. */
	if (fd_write_all(fd, data, len) < 0)
		return -1;
	/* The data must be on disk before anyone relies on the file (a receipt, a key). */
	return fsync(fd);
}

/* name, a new file in dirfd (never an existing one, never through a link), open for writing. */
static int file_open_new(int dirfd, const char *dir, const char *name, mode_t mode, struct sb_err *err)
{
	int fd;

	if (name[0] == '\0' || strchr(name, '/') != NULL || strcmp(name, ".") == 0 || strcmp(name, "..") == 0)
		return sb_invalid(err, "creating %s/%s: not a single file name", dir, name);
	fd = openat(dirfd, name, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, mode);
	if (fd < 0)
		return sb_fail_errno(err, "creating %s/%s", dir, name);
	return fd;
}

/* fd_file_create, with the directory's fsync only when sync_dir: a temporary that is renamed into
 * place needs none of its own (the rename's directory fsync makes the final name durable, and a
 * stale temporary is removed by the next replace). */
static int file_create(int dirfd, const char *dir, const char *name, mode_t mode, uid_t uid, gid_t gid,
		       const void *data, size_t len, bool sync_dir, struct sb_err *err)
{
	int fd, saved;

	fd = file_open_new(dirfd, dir, name, mode, err);
	if (fd < 0)
		return -1;
	if (file_fill(fd, uid, gid, data, len) < 0) {
		saved = errno_or_eio();
		close(fd);
		unlinkat(dirfd, name, 0);
		return sb_fail(err, saved, "writing %s/%s", dir, name);
	}
	if (close(fd) < 0) {
		saved = errno_or_eio();
		unlinkat(dirfd, name, 0);
		return sb_fail(err, saved, "closing %s/%s", dir, name);
	}
	/* The directory entry must be durable too, or a crash could lose a file whose existence
	 * was already reported. */
	if (sync_dir && fsync(dirfd) < 0) {
		saved = errno_or_eio();
		unlinkat(dirfd, name, 0);
		return sb_fail(err, saved, "syncing directory %s", dir);
	}
	return 0;
}

int fd_file_write_new(int dirfd, const char *dir, const char *name, mode_t mode, const void *data, size_t len,
		      struct sb_err *err)
{
	int fd, saved;

	fd = file_open_new(dirfd, dir, name, mode, err);
	if (fd < 0)
		return -1;
	errno = 0;
	if (fd_write_all(fd, data, len) < 0) {
		saved = errno_or_eio();
		close(fd);
		unlinkat(dirfd, name, 0);
		return sb_fail(err, saved, "writing %s/%s", dir, name);
	}
	return fd;
}

int fd_file_create(int dirfd, const char *dir, const char *name, mode_t mode, uid_t uid, gid_t gid,
		   const void *data, size_t len, struct sb_err *err)
{
	return file_create(dirfd, dir, name, mode, uid, gid, data, len, true, err);
}

int fd_file_create_path(const char *path, mode_t mode, uid_t uid, gid_t gid, const void *data, size_t len,
			struct sb_err *err)
{
	const char *slash = strrchr(path, '/');
	char dir[PATH_MAX];
	int dirfd, rc;

	if (slash == NULL)
		dir[0] = '.', dir[1] = '\0';
	else if (path_fmt(dir, sizeof dir, err, "%.*s", slash == path ? 1 : (int)(slash - path), path) < 0)
		return -1;
	dirfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (dirfd < 0)
		return sb_fail_errno(err, "opening directory %s", dir);
	rc = fd_file_create(dirfd, dir, slash ? slash + 1 : path, mode, uid, gid, data, len, err);
	close(dirfd);
	return rc;
}

int fd_file_replace(int dirfd, const char *dir, const char *name, const char *tmp, mode_t mode,
		    const void *data, size_t len, struct sb_err *err)
{
	int saved;

	/* A tmp left by a crash would make the exclusive create fail forever. */
	if (unlinkat(dirfd, tmp, 0) < 0 && errno != ENOENT)
		return sb_fail_errno(err, "removing the stale %s/%s", dir, tmp);
	if (file_create(dirfd, dir, tmp, mode, (uid_t)-1, (gid_t)-1, data, len, false, err) < 0)
		return -1;
	if (renameat(dirfd, tmp, dirfd, name) < 0) {
		saved = errno_or_eio();
		unlinkat(dirfd, tmp, 0);
		return sb_fail(err, saved, "replacing %s/%s", dir, name);
	}
	if (fsync(dirfd) < 0)
		return sb_fail_errno(err, "syncing directory %s", dir);
	return 0;
}

int fd_private_tighten(int fd, const char *path, struct sb_err *err)
{
	struct stat st;

	if (fstat(fd, &st) != 0)
		return sb_fail_errno(err, "checking %s", path);
	if (!S_ISREG(st.st_mode))
		return sb_invalid(err, "%s is not a regular file", path);
	if ((st.st_mode & 07777) != 0600 && fchmod(fd, 0600) != 0)
		return sb_fail_errno(err, "making %s mode 0600", path);
	return 0;
}

int fd_private_open(const char *path, struct sb_err *err)
{
	int fd = open(path, O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600);

	if (fd < 0 && errno == ENOENT)
		return sb_fail_errno(err, "creating %s (its directory must exist)", path);
	if (fd < 0)
		return sb_fail_errno(err, "opening %s", path);
	if (fd_private_tighten(fd, path, err) != 0) {
		close(fd);
		return -1;
	}
	return fd;
}
