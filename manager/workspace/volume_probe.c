/* The volume probe (workspace.h volume_probe), run once when the manager starts: the persistent
 * volume must give what git and the manager rely on. Must never leave its probe files behind. */
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
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
