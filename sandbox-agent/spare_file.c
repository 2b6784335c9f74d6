/* Files made ahead (see spare_file.h). */
#include "spare_file.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <sys/stat.h>
#include <unistd.h>

#include "linux_calls.h" /* after the system headers: it fills in what musl lacks */

#include "fdio.h"

void spare_file_init(struct spare_file *sf, const char *name)
{
	pthread_mutex_init(&sf->lock, NULL);
	sf->name = name;
	sf->fd = -1;
}

void spare_file_close(struct spare_file *sf)
{
	if (sf->fd >= 0)
		close(sf->fd);
	sf->fd = -1;
	pthread_mutex_destroy(&sf->lock);
}

int spare_file_make(struct spare_file *sf, const struct privdir *dir, size_t bytes, struct sb_err *err)
{
	int fd = -1, rc = 0;

	pthread_mutex_lock(&sf->lock);
	if (sf->fd >= 0)
		goto out;
	if (unlinkat(dir->fd, sf->name, 0) < 0 && errno != ENOENT) {
		rc = sb_fail_errno(err, "removing %s/%s", dir->path, sf->name);
		goto out;
	}
	fd = openat(dir->fd, sf->name, O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
	if (fd < 0) {
		rc = sb_fail_errno(err, "creating %s/%s", dir->path, sf->name);
		goto out;
	}
	if (bytes > 0 && (rc = fd_reserve(fd, bytes)) != 0) {
		close(fd);
		unlinkat(dir->fd, sf->name, 0);
		rc = sb_fail(err, rc, "allocating %zu bytes in %s/%s", bytes, dir->path, sf->name);
		goto out;
	}
	sf->fd = fd;
out:
	pthread_mutex_unlock(&sf->lock);
	return rc;
}

int spare_file_adopt(struct spare_file *sf, const struct privdir *dir, const char *from, struct sb_err *err)
{
	struct stat st;
	int fd, rc = 0;

	pthread_mutex_lock(&sf->lock);
	if (sf->fd >= 0) {
		rc = 1;
		goto out;
	}
	fd = openat(dir->fd, from, O_RDWR | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0) {
		rc = sb_fail_errno(err, "opening %s/%s", dir->path, from);
		goto out;
	}
	/* Emptied before it is named the spare: what it held (an earlier life's bytes, say) is never
	 * under that name, which a take writes into from its start without truncating. */
	if (fstat(fd, &st) < 0)
		rc = sb_fail_errno(err, "inspecting %s/%s", dir->path, from);
	else if (!S_ISREG(st.st_mode) || st.st_nlink != 1)
		rc = sb_fail(err, EINVAL, "%s/%s is not a plain file of one name", dir->path, from);
	else if (ftruncate(fd, 0) < 0 || renameat(dir->fd, from, dir->fd, sf->name) < 0)
		rc = sb_fail_errno(err, "taking %s/%s as %s", dir->path, from, sf->name);
	if (rc < 0) {
		close(fd);
		goto out;
	}
	sf->fd = fd;
out:
	pthread_mutex_unlock(&sf->lock);
	return rc;
}

int spare_file_take(struct spare_file *sf, const struct privdir *dir, const char *name, const char *text,
		    size_t len)
{
	int fd, saved;

	if (pthread_mutex_trylock(&sf->lock) != 0) {
		errno = EAGAIN;
		return -1;
	}
	fd = sf->fd;
	if (fd < 0) {
		pthread_mutex_unlock(&sf->lock);
		errno = EAGAIN;
		return -1;
	}
	if ((len == 0 || fd_write_all(fd, text, len) == 0) &&
	    renameat2(dir->fd, sf->name, dir->fd, name, RENAME_NOREPLACE) == 0) {
		sf->fd = -1;
		pthread_mutex_unlock(&sf->lock);
		return fd;
	}
	saved = errno; /* the write's or the rename's */
	if (!(saved == EEXIST && len == 0)) {
		close(fd);
		unlinkat(dir->fd, sf->name, 0);
		sf->fd = -1;
	}
	pthread_mutex_unlock(&sf->lock);
	errno = saved;
	return -1;
}
