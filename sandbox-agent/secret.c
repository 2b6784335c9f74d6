/* The secret page (see secret.h). Never logs or prints what it holds. */
#include "secret.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "random.h"

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

int secrets_key_load(struct secrets *s, const struct privdir *dir, struct sb_err *err)
{
	struct stat st;
	ssize_t n;
	int fd = openat(dir->fd, KEY_NAME, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);

	if (fd < 0 && errno == ENOENT)
		return key_create(s, dir, err);
	if (fd < 0)
		return sb_fail_errno(err, "opening receipt key %s/%s", dir->path, KEY_NAME);
	/* A key others can read is no key: refuse rather than sign with it. */
	if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode) || (st.st_mode & 077) != 0 || st.st_uid != geteuid()) {
		close(fd);
		return sb_fail(err, EPERM, "receipt key %s/%s must be a file owned by uid %u with mode 0600", dir->path,
			       KEY_NAME, (unsigned)geteuid());
	}
	n = read(fd, s->key, sizeof s->key);
	close(fd);
	if (n != (ssize_t)sizeof s->key)
		return sb_fail(err, EINVAL, "receipt key %s/%s must hold exactly %zu bytes", dir->path, KEY_NAME,
			       sizeof s->key);
	return 0;
}
