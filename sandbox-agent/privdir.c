/* The agent's private directories, held by descriptor (see privdir.h). */
#include "privdir.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fdio.h"
#include "mountfd.h"
#include "sealed.h"

static int privdir_check(struct privdir *d, mode_t forbidden_mode, struct sb_err *err)
{
	struct stat st;

	if (fstat(d->fd, &st) < 0)
		return sb_fail_errno(err, "checking %s", d->path);
	/* Ours and private, or someone else could have made it first and read what we put there. */
	if (!S_ISDIR(st.st_mode) || st.st_uid != geteuid() || (st.st_mode & forbidden_mode) != 0)
		return sb_fail(err, EPERM, "%s must be a directory owned by uid %u with no %03o permission bits: "
			       "the agent keeps its keys, receipts and state there", d->path, (unsigned)geteuid(),
			       (unsigned)forbidden_mode);
	d->dev = st.st_dev;
	d->ino = st.st_ino;
	return 0;
}

static int privdir_finish(struct privdir *d, int fd, mode_t forbidden_mode, struct sb_err *err)
{
	if (fd < 0)
		return sb_fail_errno(err, "opening %s (symbolic links are refused on the way)", d->path);
	d->fd = fd;
	if (privdir_check(d, forbidden_mode, err) < 0) {
		privdir_close(d);
		return -1;
	}
	return 0;
}

int privdir_open(struct privdir *d, const char *path, bool create, mode_t forbidden_mode, struct sb_err *err)
{
	d->fd = -1;
	if (path[0] != '/')
		return sb_invalid(err, "private directory %s must be an absolute path", path);
	if ((size_t)snprintf(d->path, sizeof d->path, "%s", path) >= sizeof d->path)
		return sb_fail(err, ENAMETOOLONG, "private directory path too long: %s", path);
	if (create && mkdir(path, 0700) < 0 && errno != EEXIST)
		return sb_fail_errno(err, "creating %s", path);
	return privdir_finish(d, mfd_open_nofollow(AT_FDCWD, path, O_RDONLY | O_DIRECTORY), forbidden_mode, err);
}

int privdir_open_at(struct privdir *d, const struct privdir *parent, const char *name, bool create,
		    mode_t forbidden_mode, struct sb_err *err)
{
	d->fd = -1;
	if (strchr(name, '/') != NULL || strcmp(name, "..") == 0 || strcmp(name, ".") == 0)
		return sb_invalid(err, "private directory name %s must be one path component", name);
	if ((size_t)snprintf(d->path, sizeof d->path, "%s/%s", parent->path, name) >= sizeof d->path)
		return sb_fail(err, ENAMETOOLONG, "private directory path too long: %s/%s", parent->path, name);
	if (create && mkdirat(parent->fd, name, 0700) < 0 && errno != EEXIST)
		return sb_fail_errno(err, "creating %s", d->path);
	return privdir_finish(d, mfd_open_nofollow(parent->fd, name, O_RDONLY | O_DIRECTORY), forbidden_mode, err);
}

int privdir_open_readable(struct privdir *d, const char *path, struct sb_err *err)
{
	struct stat st;
	struct sb_err why;

	if (privdir_open(d, path, false, 022, err) == 0)
		return 0;
	/* Not this uid's: a Secret volume's directory may still do, by sealed.c's rule. */
	d->fd = mfd_open_nofollow(AT_FDCWD, path, O_RDONLY | O_DIRECTORY);
	if (d->fd < 0)
		return -1; /* err says why already */
	if (fstat(d->fd, &st) < 0) {
		sb_fail_errno(err, "checking %s", path);
		privdir_close(d);
		return -1;
	}
	if (!S_ISDIR(st.st_mode) || sealed_check(d->fd, &st, path, &why) < 0) {
		/* the agent keeps its keys there; why.msg ends in its errno's text already */
		sb_fail(err, 0, "%s must be a directory owned by uid %u and not writable by group or others, or lie on a "
			"read-only mount as sealed.c says: %s", path, (unsigned)geteuid(),
			S_ISDIR(st.st_mode) ? why.msg : "not a directory");
		err->errnum = EPERM;
		privdir_close(d);
		return -1;
	}
	d->dev = st.st_dev;
	d->ino = st.st_ino;
	return 0;
}

void privdir_close(struct privdir *d)
{
	if (d->fd >= 0)
		close(d->fd);
	d->fd = -1;
}

int privdir_file_create(const struct privdir *dir, const char *name, const void *data, size_t len,
			struct sb_err *err)
{
	/* common/fdio.c: exclusive, no symlink, written whole, file and directory fsynced. */
	return fd_file_create(dir->fd, dir->path, name, 0600, (uid_t)-1, (gid_t)-1, data, len, err);
}
