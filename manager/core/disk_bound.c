/* Rule N4 (see disk_bound.h): which bound keeps a full volume from the records and the private
 * directories, and the reserve the manager holds when they share one filesystem. Owns
 * <state-dir>/disk-reserve, through descriptors only; never writes a record. */
#include "disk_bound.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include "log.h"

#define BTRFS_MAGIC 0x9123683e

/* The bytes this process may still write on the reserve's filesystem (root may use the blocks
 * reserved for it, as the manager's own writes then do). -1 with errno. */
static int64_t free_bytes(const struct disk_bound *d)
{
	struct statvfs v;

	if (fstatvfs(d->dir_fd, &v) < 0)
		return -1;
	return (int64_t)((geteuid() == 0 ? v.f_bfree : v.f_bavail) * v.f_frsize);
}

/* Blocks allocated for the whole reserve, or none (a partial allocation is given back at once).
 * 0, or an errno value. */
static int reserve_take(struct disk_bound *d)
{
	int rc = posix_fallocate(d->fd, 0, d->bytes);

	if (rc != 0) {
		if (ftruncate(d->fd, 0) < 0)
			sb_warn("disk: giving back a partial reserve in %s: %s", d->state_dir, strerror(errno));
		return rc;
	}
	d->held = true;
	return 0;
}

/* btrfs gives each subvolume its own st_dev while they share one pool of space: two subvolumes
 * are one filesystem here. */
static bool same_filesystem(int dir_fd, const struct stat *st, const char *volume, const struct stat *vst)
{
	struct statfs a, b;

	if (st->st_dev == vst->st_dev)
		return true;
	return fstatfs(dir_fd, &a) == 0 && statfs(volume, &b) == 0 && a.f_type == BTRFS_MAGIC && b.f_type == BTRFS_MAGIC;
}

/* The reserve's file, 0600, this user's, opened by descriptor beneath the state directory (which
 * is private: dir_private checked it before). */
static int reserve_open(struct disk_bound *d, struct sb_err *err)
{
	struct stat st;

	d->fd = openat(d->dir_fd, DISK_RESERVE_NAME, O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600);
	if (d->fd < 0)
		return sb_fail_errno(err, "opening the disk reserve %s/%s", d->state_dir, DISK_RESERVE_NAME);
	if (fstat(d->fd, &st) < 0 || !S_ISREG(st.st_mode) || st.st_uid != geteuid() || fchmod(d->fd, 0600) < 0)
		return sb_fail(err, EEXIST, "the disk reserve %s/%s is not a regular file of this user: remove it",
			       d->state_dir, DISK_RESERVE_NAME);
	return 0;
}

int disk_bound_start(struct disk_bound *d, const char *state_dir, const char *volume, int64_t bytes,
		     struct sb_err *err)
{
	struct stat st, vst;
	struct statvfs v;
	int rc;

	pthread_mutex_init(&d->lock, NULL);
	d->fd = -1;
	d->bytes = bytes;
	snprintf(d->state_dir, sizeof d->state_dir, "%s", state_dir);
	d->dir_fd = open(state_dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (d->dir_fd < 0 || fstat(d->dir_fd, &st) < 0)
		return sb_fail_errno(err, "opening the state directory %s", state_dir);
	if (stat(volume, &vst) < 0)
		return sb_fail_errno(err, "inspecting the volume %s", volume);
	d->kind = !same_filesystem(d->dir_fd, &st, volume, &vst) ? DISK_SEPARATE : bytes > 0 ? DISK_RESERVE : DISK_NONE;
	if (d->kind != DISK_RESERVE) {
		/* A reserve an earlier layout left would only take space. */
		if (unlinkat(d->dir_fd, DISK_RESERVE_NAME, 0) < 0 && errno != ENOENT)
			sb_warn("disk: removing %s/%s: %s", state_dir, DISK_RESERVE_NAME, strerror(errno));
		if (d->kind == DISK_SEPARATE)
			sb_info("disk: the state directory %s and the volume %s are separate filesystems: no sandbox "
				"writes where the records and the private directories are (rule N4)", state_dir, volume);
		else
			sb_warn("disk: the state directory %s and the volume %s are one filesystem and disk-reserve is "
				"0: a command that fills the volume can keep other calls from being recorded; put the "
				"volume on a filesystem of its own, or set disk-reserve", state_dir, volume);
		return 0;
	}
	/* Taken again only with twice its size free (disk_bound_admit): on a smaller filesystem, once
	 * given back, it never would be, and every call would be refused from then on. */
	if (fstatvfs(d->dir_fd, &v) == 0 && (int64_t)(v.f_blocks * v.f_frsize) < 4 * bytes)
		return sb_refuse(err, EINVAL, "disk-reserve %lld bytes is too large for the filesystem of %s (%lld bytes "
				 "in all): set at most a quarter of it, or put the volume on a filesystem of its own",
				 (long long)bytes, state_dir, (long long)(v.f_blocks * v.f_frsize));
	if (reserve_open(d, err) < 0)
		return -1;
	rc = reserve_take(d);
	if (rc == EFBIG)
		return sb_refuse(err, EFBIG, "the disk reserve %s/%s (%lld bytes) is over this process's file size limit "
				 "(RLIMIT_FSIZE, ulimit -f): raise the limit, or lower disk-reserve", state_dir,
				 DISK_RESERVE_NAME, (long long)bytes);
	if (rc != 0 && rc != ENOSPC)
		return sb_fail(err, rc, "allocating the disk reserve %s/%s (%lld bytes)", state_dir, DISK_RESERVE_NAME,
			       (long long)bytes);
	sb_info("disk: the state directory %s and the volume %s are one filesystem: the manager holds a reserve of "
		"%lld bytes in %s to finish its records when the volume fills%s", state_dir, volume, (long long)bytes,
		DISK_RESERVE_NAME, d->held ? "" : " (not held now: no room; calls are refused until there is)");
	return 0;
}

bool disk_bound_release(void *ctx)
{
	struct disk_bound *d = ctx;
	bool gave = false;

	if (d->kind != DISK_RESERVE)
		return false;
	pthread_mutex_lock(&d->lock);
	if (d->held && ftruncate(d->fd, 0) == 0) {
		d->held = false;
		d->released++;
		gave = true;
	}
	pthread_mutex_unlock(&d->lock);
	if (gave)
		sb_warn("disk: the filesystem of %s is full: its reserve of %lld bytes is given back to finish a record; "
			"calls are refused until it can be held again", d->state_dir, (long long)d->bytes);
	/* Given back now, or by another call's record a moment ago: the room is there to try once. */
	return true;
}

int disk_bound_admit(struct disk_bound *d, struct sb_err *err)
{
	int64_t avail = 0;
	int rc = 0;

	if (d->kind != DISK_RESERVE)
		return 0;
	pthread_mutex_lock(&d->lock);
	/* Taken again only with twice its size free, so that as much is left to write once it is held. */
	if (!d->held && (avail = free_bytes(d)) >= 2 * d->bytes && reserve_take(d) == 0)
		sb_info("disk: the reserve of %lld bytes in %s is held again", (long long)d->bytes, d->state_dir);
	if (!d->held)
		rc = sb_refuse(err, ENOSPC, "the filesystem of the state directory %s is full (%lld bytes free): the "
			       "manager gave back its reserve of %lld bytes to finish the records of running calls and "
			       "accepts no call until %lld bytes are free to hold it again; free space there (the "
			       "volume shares it: a command may have filled its worktree)", d->state_dir,
			       (long long)(avail > 0 ? avail : 0), (long long)d->bytes, (long long)(2 * d->bytes));
	pthread_mutex_unlock(&d->lock);
	return rc;
}

json_t *disk_bound_json(struct disk_bound *d)
{
	json_t *j;

	if (d->kind == DISK_SEPARATE)
		return json_pack("{s:s}", "bound", "separate filesystem");
	if (d->kind == DISK_NONE)
		return json_pack("{s:s, s:s}", "bound", "none", "why",
				 "the volume shares the state directory's filesystem and disk-reserve is 0");
	pthread_mutex_lock(&d->lock);
	j = json_pack("{s:s, s:I, s:b, s:I, s:I}", "bound", "reserve", "bytes", (json_int_t)d->bytes, "held", d->held,
		      "released", (json_int_t)d->released, "free_bytes", (json_int_t)free_bytes(d));
	pthread_mutex_unlock(&d->lock);
	return j;
}
