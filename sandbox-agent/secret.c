/* The secret page (see secret.h). Never logs or prints what it holds. */
#include "secret.h"

#include <errno.h>
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <fcntl.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "random.h"
#include "sealed.h"

#define SECRET_PAGE 4096

struct secrets *secrets_alloc(struct sb_err *err)
{
	void *p = mmap(NULL, SECRET_PAGE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);

	if (p == MAP_FAILED) {
		sb_fail_errno(err, "mapping the secret page");
		return NULL;
	}
	if (madvise(p, SECRET_PAGE, MADV_WIPEONFORK) < 0 || madvise(p, SECRET_PAGE, MADV_DONTDUMP) < 0) {
		sb_fail_errno(err, "protecting the secret page (MADV_WIPEONFORK needs Linux 4.14)");
		munmap(p, SECRET_PAGE);
		return NULL;
	}
	return p;
}

void secrets_free(struct secrets *s)
{
	if (s == NULL)
		return;
	explicit_bzero(s, sizeof *s);
	munmap(s, SECRET_PAGE);
}

#define KEY_NAME "receipt.key"

static int key_create(struct secrets *s, const struct privdir *dir, struct sb_err *err)
{
	if (sb_random_bytes(s->key, sizeof s->key, err) < 0)
		return -1;
	return privdir_file_create(dir, KEY_NAME, s->key, sizeof s->key, err);
}

/* The own-uid rule: a key others can read is no key. */
static bool key_private(const struct stat *st)
{
	return S_ISREG(st->st_mode) && (st->st_mode & 077) == 0 && st->st_uid == geteuid();
}

static int key_read(struct secrets *s, int fd, const char *shown, struct sb_err *err)
{
	ssize_t n = read(fd, s->key, sizeof s->key);

	if (n != (ssize_t)sizeof s->key)
		return sb_invalid(err, "receipt key %s must hold exactly %zu bytes", shown, sizeof s->key);
	return 0;
}

int secrets_key_load(struct secrets *s, const struct privdir *dir, struct sb_err *err)
{
	struct stat st;
	char shown[PATH_MAX + 16];
	int fd = openat(dir->fd, KEY_NAME, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
	int rc;

	if (fd < 0 && errno == ENOENT)
		return key_create(s, dir, err);
	if (fd < 0)
		return sb_fail_errno(err, "opening receipt key %s/%s", dir->path, KEY_NAME);
	/* Refuse rather than sign with it. */
	if (fstat(fd, &st) < 0 || !key_private(&st)) {
		close(fd);
		return sb_fail(err, EPERM, "receipt key %s/%s must be a file owned by uid %u with mode 0600", dir->path,
			       KEY_NAME, (unsigned)geteuid());
	}
	snprintf(shown, sizeof shown, "%s/%s", dir->path, KEY_NAME);
	rc = key_read(s, fd, shown, err);
	close(fd);
	return rc;
}

int secrets_key_load_file(struct secrets *s, const char *path, struct sb_err *err)
{
	struct stat st;
	struct sb_err why;
	int fd, rc;

	/* Links are followed: a Secret volume's names are the kubelet's links into its ..data
	 * directory. What is checked is the file reached (its descriptor), never the name. */
	fd = open(path, O_RDONLY | O_NOCTTY | O_NONBLOCK | O_CLOEXEC);
	if (fd < 0)
		return sb_fail_errno(err, "opening receipt key %s", path);
	if (fstat(fd, &st) < 0) {
		rc = sb_fail_errno(err, "checking receipt key %s", path);
	} else if (!key_private(&st) && sealed_check(fd, &st, path, &why) < 0) {
		/* why.msg ends in its errno's text already */
		rc = sb_fail(err, 0, "receipt key refused (owned by uid %u with mode 0600, or on a read-only mount as "
			     "sealed.c says): %s", (unsigned)geteuid(), why.msg);
		err->errnum = why.errnum;
	} else {
		rc = key_read(s, fd, path, err);
	}
	close(fd);
	return rc;
}
