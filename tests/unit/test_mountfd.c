/* Unit tests for common/mountfd.c mfd_dir_make_beneath(): the directory a mount point lies in, found
 * in one open where it exists and made where it does not, with the same refusals either way: no
 * link followed, nothing outside root, no "..". Plain directories, no privilege needed. */
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include "mountfd.h"
#include "testutil.h"

struct fixture {
	char dir[64];
	int root; /* <dir>/root: what the calls are beneath */
};

static int setup(void **state)
{
	struct fixture *f = calloc(1, sizeof *f);
	char path[128];

	if (f == NULL)
		return -1;
	snprintf(f->dir, sizeof f->dir, "/tmp/test_mountfd.XXXXXX");
	if (mkdtemp(f->dir) == NULL)
		return -1;
	snprintf(path, sizeof path, "%s/root", f->dir);
	if (mkdir(path, 0755) < 0)
		return -1;
	f->root = open(path, O_PATH | O_DIRECTORY | O_CLOEXEC);
	*state = f;
	return f->root < 0 ? -1 : 0;
}

static int teardown(void **state)
{
	struct fixture *f = *state;

	close(f->root);
	test_rmtree(f->dir);
	free(f);
	return 0;
}

/* The identity of rel beneath root, without following a final link; -1 in st_ino if absent. */
static struct stat ident(const struct fixture *f, const char *rel)
{
	struct stat st;

	if (fstatat(f->root, rel, &st, AT_SYMLINK_NOFOLLOW) < 0)
		st.st_ino = (ino_t)-1;
	return st;
}

static void expect_dir_at(const struct fixture *f, int fd, const char *rel)
{
	struct stat got, want = ident(f, rel);

	assert_true(fd >= 0);
	assert_int_equal(fstat(fd, &got), 0);
	assert_true(S_ISDIR(got.st_mode));
	assert_int_equal(got.st_dev, want.st_dev);
	assert_int_equal(got.st_ino, want.st_ino);
	close(fd);
}

static void test_existing_found(void **state)
{
	struct fixture *f = *state;

	assert_int_equal(mkdirat(f->root, "a", 0700), 0);
	assert_int_equal(mkdirat(f->root, "a/b", 0700), 0);
	expect_dir_at(f, mfd_dir_make_beneath(f->root, "a/b"), "a/b");
	/* Found, not made again: the mode is the one it had. */
	assert_int_equal(ident(f, "a/b").st_mode & 07777, 0700);
	expect_dir_at(f, mfd_dir_make_beneath(f->root, ""), ".");
}

static void test_missing_made(void **state)
{
	struct fixture *f = *state;

	expect_dir_at(f, mfd_dir_make_beneath(f->root, "x/y/z"), "x/y/z");
	assert_int_equal(ident(f, "x").st_mode & 07777, 0755);
	assert_int_equal(ident(f, "x/y/z").st_mode & 07777, 0755);
	/* Partly there: the rest is made below what exists. */
	expect_dir_at(f, mfd_dir_make_beneath(f->root, "x/y/new/deeper"), "x/y/new/deeper");
}

static void expect_refused(const struct fixture *f, const char *rel, int want)
{
	errno = 0;
	assert_int_equal(mfd_dir_make_beneath(f->root, rel), -1);
	assert_int_equal(errno, want);
}

/* A link anywhere on the way is refused, whether what lies past it exists or not, and nothing is made
 * where it points. */
static void test_link_refused(void **state)
{
	struct fixture *f = *state;
	char target[160];

	snprintf(target, sizeof target, "%s/outside", f->dir);
	assert_int_equal(mkdir(target, 0755), 0);
	assert_int_equal(mkdirat(f->root, "a", 0755), 0);
	assert_int_equal(symlinkat(target, f->root, "a/link"), 0);
	assert_int_equal(symlinkat("..", f->root, "a/up"), 0);

	expect_refused(f, "a/link", ELOOP);
	expect_refused(f, "a/link/made", ELOOP);
	expect_refused(f, "a/up/a", ELOOP);
	strcat(target, "/made");
	assert_int_equal(access(target, F_OK), -1);
}

/* ".." is refused even where it would stay beneath root; a file on the way is not a directory. */
static void test_dotdot_and_files_refused(void **state)
{
	struct fixture *f = *state;
	int fd;

	assert_int_equal(mkdirat(f->root, "a", 0755), 0);
	assert_int_equal(mkdirat(f->root, "a/b", 0755), 0);
	expect_refused(f, "a/../a/b", EXDEV);
	expect_refused(f, "a/b/..", EXDEV);
	expect_refused(f, "..", EXDEV);
	assert_true(ident(f, "a/b").st_ino != (ino_t)-1);

	fd = openat(f->root, "a/file", O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
	assert_true(fd >= 0);
	close(fd);
	expect_refused(f, "a/file", ENOTDIR);
	expect_refused(f, "a/file/x", ENOTDIR);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_existing_found, setup, teardown),
		cmocka_unit_test_setup_teardown(test_missing_made, setup, teardown),
		cmocka_unit_test_setup_teardown(test_link_refused, setup, teardown),
		cmocka_unit_test_setup_teardown(test_dotdot_and_files_refused, setup, teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
