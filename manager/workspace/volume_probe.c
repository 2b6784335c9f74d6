/* The volume probe (workspace.h volume_probe) and the closed-volume check (volume_closed_check),
 * run once when the manager starts: the persistent volume must give what git and the manager rely on,
 * and let no other user list or open what it holds. Must never leave its probe files behind. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "cleanup.h"
#include "fdio.h"
#include "workspace_internal.h"

/* ---------------------------------------------------------------- the volume probe */

#define PROBE_SIZE 65536

/* A new file written whole and fsync'd, its directory entry too: common/fdio.c's one way. */
static int probe_write(const char *path, const unsigned char *data, size_t len, struct sb_err *err)
{
	return fd_file_create_path(path, 0600, (uid_t)-1, (gid_t)-1, data, len, err);
}

/* 1 when the file holds exactly data, 0 when it differs, -1 on error. */
static int probe_same(const char *path, const unsigned char *data, size_t len, struct sb_err *err)
{
	cleanup_close int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
	cleanup_free unsigned char *buf = malloc(len + 1);
	size_t off = 0;
	ssize_t n;

	if (fd < 0)
		return sb_fail_errno(err, "reopening %s", path);
	if (buf == NULL)
		return sb_fail(err, ENOMEM, "reading %s", path);
	while ((n = read(fd, buf + off, len + 1 - off)) != 0) {
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return sb_fail_errno(err, "reading back %s", path);
		off += (size_t)n;
		if (off > len)
			break;
	}
	return off == len && memcmp(buf, data, len) == 0 ? 1 : 0;
}

static int probe_exclusive(const char *dir, struct sb_err *err)
{
	cleanup_free char *path = NULL;
	int fd;

	if (path_alloc_fmt(&path, err, "%s/lock", dir) != 0)
		return -1;
	fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
	if (fd < 0)
		return sb_fail_errno(err, "exclusive create (O_EXCL) of a lock file failed");
	close(fd);
	fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
	if (fd >= 0) {
		close(fd);
		return sb_fail(err, 0, "exclusive create (O_EXCL) is not honoured: a second create of the same "
			       "lock file succeeded, so git's lock files would not protect the repository");
	}
	if (errno != EEXIST)
		return sb_fail_errno(err, "exclusive create (O_EXCL): a second create failed without EEXIST");
	return 0;
}

static void probe_fill(unsigned char *data, size_t len, unsigned salt)
{
	uint64_t x = ((uint64_t)getpid() << 32) ^ (uint64_t)time(NULL) ^ salt;

	for (size_t i = 0; i < len; i++) {
		x = x * 6364136223846793005ull + 1442695040888963407ull;
		data[i] = (unsigned char)(x >> 56);
	}
}

static int probe_data(const char *dir, unsigned char *a, unsigned char *b, struct sb_err *err)
{
	cleanup_free char *data = NULL, *next = NULL;
	int same;

	if (path_alloc_fmt(&data, err, "%s/data", dir) != 0 || path_alloc_fmt(&next, err, "%s/data.new", dir) != 0)
		return -1;
	/* An fsync'd write must read back through a fresh descriptor. */
	if (probe_write(data, a, PROBE_SIZE, err) != 0)
		return -1;
	same = probe_same(data, a, PROBE_SIZE, err);
	if (same <= 0)
		return same < 0 ? -1 : sb_fail(err, 0, "fsync'd write read back: the data read back differs "
					       "from the data written");
	/* rename() over an existing file must replace it in one step, as git's lock files assume. */
	if (probe_write(next, b, PROBE_SIZE, err) != 0)
		return -1;
	if (rename(next, data) != 0)
		return sb_fail_errno(err, "atomic rename over an existing file failed");
	if (path_exists(next))
		return sb_fail(err, 0, "atomic rename: the old name still exists after rename()");
	same = probe_same(data, b, PROBE_SIZE, err);
	if (same <= 0)
		return same < 0 ? -1 : sb_fail(err, 0, "atomic rename: the renamed file does not hold the new data");
	return 0;
}

static int probe_cleanup(const char *dir, struct sb_err *err)
{
	static const char *const names[] = { "lock", "data", "data.new", NULL };

	for (size_t i = 0; names[i] != NULL; i++) {
		cleanup_free char *path = NULL;

		if (path_alloc_fmt(&path, err, "%s/%s", dir, names[i]) != 0)
			return -1;
		if (unlink(path) != 0 && errno != ENOENT)
			return sb_fail_errno(err, "removing %s", path);
	}
	if (rmdir(dir) != 0)
		return sb_fail_errno(err, "removing %s", dir);
	return 0;
}

int volume_probe(const char *volume, struct sb_err *err)
{
	cleanup_free unsigned char *a = malloc(PROBE_SIZE), *b = malloc(PROBE_SIZE);
	cleanup_free char *dir = NULL;
	struct sb_err cleanup_err;
	int rc;

	if (a == NULL || b == NULL)
		return sb_fail(err, ENOMEM, "probing volume %s", volume);
	if (path_alloc_fmt(&dir, err, "%s/.volume-probe-XXXXXX", volume) != 0)
		return -1;
	if (mkdtemp(dir) == NULL)
		return sb_fail_errno(err, "volume %s refused: cannot create a directory in it", volume);
	probe_fill(a, PROBE_SIZE, 1);
	probe_fill(b, PROBE_SIZE, 2);
	rc = probe_exclusive(dir, err);
	if (rc == 0)
		rc = probe_data(dir, a, b, err);
	if (probe_cleanup(dir, &cleanup_err) != 0 && rc == 0) {
		*err = cleanup_err;
		rc = -1;
	}
	if (rc != 0)
		sb_err_prefix(err, "volume %s refused", volume);
	return rc;
}

/* ---------------------------------------------------------------- a closed volume (rule N3) */

/* One directory's mode against the rule: refused when it has a bit of `forbidden`, or (group_gid
 * not -1) belongs to another group. The message names the path and the command that fixes it. */
static int closed_dir(const char *path, mode_t forbidden, mode_t fix, gid_t group_gid, struct sb_err *err)
{
	struct stat st;

	if (lstat(path, &st) != 0)
		return errno == ENOENT ? 0 : sb_fail_errno(err, "inspecting %s", path);
	if (!S_ISDIR(st.st_mode))
		return sb_fail(err, ENOTDIR, "volume refused: %s is not a directory (a symbolic link is refused); "
			       "remove it", path);
	if (group_gid != (gid_t)-1 && st.st_gid != group_gid)
		return sb_fail(err, EPERM, "volume refused: %s belongs to group %u, not to the identity's group %u, "
			       "whose sandboxes alone may pass it; fix: chgrp %u %s && chmod %04o %s", path,
			       (unsigned)st.st_gid, (unsigned)group_gid, (unsigned)group_gid, path, (unsigned)fix, path);
	if ((st.st_mode & forbidden) != 0)
		return sb_fail(err, EPERM, "volume refused: %s has mode %04o, which lets other users list or open "
			       "what it holds; fix: chmod %04o %s", path, (unsigned)(st.st_mode & 07777),
			       (unsigned)fix, path);
	return 0;
}

/* Each entry of dir that is a directory, checked by closed_dir with the same rule. */
static int closed_entries(const char *dir, mode_t forbidden, mode_t fix, struct sb_err *err)
{
	cleanup_free char *path = NULL;
	struct dirent *de;
	DIR *d = opendir(dir);
	int rc = 0;

	if (d == NULL)
		return errno == ENOENT ? 0 : sb_fail_errno(err, "listing %s", dir);
	while (rc == 0 && (errno = 0, de = readdir(d)) != NULL) {
		if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
			continue;
		free(path);
		path = NULL;
		rc = path_alloc_fmt(&path, err, "%s/%s", dir, de->d_name);
		if (rc == 0 && de->d_type != DT_DIR && de->d_type != DT_UNKNOWN)
			continue;
		if (rc == 0)
			rc = closed_dir(path, forbidden, fix, (gid_t)-1, err);
	}
	if (rc == 0 && errno != 0)
		rc = sb_fail_errno(err, "listing %s", dir);
	closedir(d);
	return rc;
}

/* One identity's directory and what is below it. */
static int closed_identity(const char *dir, const char *name, workspace_owner_fn owner_of, void *ctx,
			   struct sb_err *err)
{
	static const char *const private[] = { "private-state", "provider-auth", NULL };
	cleanup_free char *repos = NULL, *works = NULL;
	struct workspace_owner owner;

	if (closed_dir(dir, 066, 0711, (gid_t)-1, err) != 0 || owner_of(ctx, name, &owner, err) != 0 ||
	    path_alloc_fmt(&repos, err, "%s/repositories", dir) != 0 ||
	    path_alloc_fmt(&works, err, "%s/workspaces", dir) != 0)
		return -1;
	if (closed_dir(repos, 067, 0710, owner.gid, err) != 0 || closed_dir(works, 067, 0710, owner.gid, err) != 0 ||
	    closed_entries(works, 077, 0700, err) != 0)
		return -1;
	for (size_t i = 0; private[i] != NULL; i++) {
		cleanup_free char *path = NULL;

		if (path_alloc_fmt(&path, err, "%s/%s", dir, private[i]) != 0 || closed_dir(path, 077, 0700, (gid_t)-1, err) != 0)
			return -1;
	}
	return 0;
}

int volume_closed_check(const char *volume, workspace_owner_fn owner_of, void *ctx, struct sb_err *err)
{
	cleanup_free char *identities = NULL;
	struct dirent *de;
	DIR *d;
	int rc;

	if (closed_dir(volume, 066, 0711, (gid_t)-1, err) != 0 ||
	    path_alloc_fmt(&identities, err, "%s/identities", volume) != 0 ||
	    closed_dir(identities, 066, 0711, (gid_t)-1, err) != 0)
		return -1;
	d = opendir(identities);
	if (d == NULL)
		return errno == ENOENT ? 0 : sb_fail_errno(err, "listing %s", identities);
	rc = 0;
	while (rc == 0 && (errno = 0, de = readdir(d)) != NULL) {
		cleanup_free char *dir = NULL;

		if (de->d_name[0] == '.')
			continue;
		rc = path_alloc_fmt(&dir, err, "%s/%s", identities, de->d_name);
		if (rc == 0)
			rc = closed_identity(dir, de->d_name, owner_of, ctx, err);
	}
	if (rc == 0 && errno != 0)
		rc = sb_fail_errno(err, "listing %s", identities);
	closedir(d);
	return rc;
}
