/* Unit tests for sandbox-agent/receipt.c's rooms (rule N4) and the spare room made ahead (issue 32):
 * a room taken through the spare is the exec's <id>.room, its RECEIPT_ROOM_BYTES allocated (reserved
 * past its end: its size stays 0, common/fdio.c fd_reserve), and the spare is used up; without a spare the room is made as before; a spare an earlier life left (its
 * blocks not known to be allocated) is replaced, never used; a room whose name exists already is
 * refused through the spare as without it, and the spare is not spent on it. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <errno.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "receipt.h"

struct fixture {
	char dir[64];
	struct privdir rdir;
	struct spare_file spare;
};

static int setup(void **state)
{
	struct fixture *f = calloc(1, sizeof *f);
	struct sb_err err;

	assert_non_null(f);
	snprintf(f->dir, sizeof f->dir, "/tmp/test-receipt-room.XXXXXX");
	assert_non_null(mkdtemp(f->dir));
	assert_int_equal(chmod(f->dir, 0700), 0);
	assert_int_equal(privdir_open(&f->rdir, f->dir, false, 077, &err), 0);
	spare_file_init(&f->spare, RECEIPT_SPARE_NAME);
	*state = f;
	return 0;
}

static void rm(const struct fixture *f, const char *name)
{
	unlinkat(f->rdir.fd, name, 0);
}

static int teardown(void **state)
{
	struct fixture *f = *state;

	spare_file_close(&f->spare);
	rm(f, ".spare.room");
	rm(f, "e1.room");
	rm(f, "e2.room");
	privdir_close(&f->rdir);
	rmdir(f->dir);
	free(f);
	return 0;
}

/* The file's size and allocated bytes; -1 when it does not exist. */
static long long size_of(const struct fixture *f, const char *name, long long *allocated)
{
	struct stat st;

	if (fstatat(f->rdir.fd, name, &st, AT_SYMLINK_NOFOLLOW) < 0)
		return -1;
	if (allocated != NULL)
		*allocated = (long long)st.st_blocks * 512;
	return (long long)st.st_size;
}

/* A room: RECEIPT_ROOM_BYTES allocated, reserved past an end of 0 (or, where the filesystem cannot
 * reserve past the end, allocated up to it: fd_reserve's fallback). */
static void expect_reserved(const struct fixture *f, const char *name)
{
	long long allocated = 0, size = size_of(f, name, &allocated);

	assert_true(size == 0 || size == RECEIPT_ROOM_BYTES);
	assert_true(allocated >= RECEIPT_ROOM_BYTES);
}

static void expect_room(const struct fixture *f, const char *name, const struct receipt_info *info)
{
	struct stat a, b;

	assert_true(info->has_room);
	expect_reserved(f, name);
	/* The descriptor is the named file's. */
	assert_int_equal(fstat(info->room_fd, &a), 0);
	assert_int_equal(fstatat(f->rdir.fd, name, &b, AT_SYMLINK_NOFOLLOW), 0);
	assert_true(a.st_ino == b.st_ino && a.st_dev == b.st_dev);
}

static void test_room_through_the_spare(void **state)
{
	struct fixture *f = *state;
	struct receipt_info info = { 0 };
	struct sb_err err;

	assert_int_equal(spare_file_make(&f->spare, &f->rdir, RECEIPT_ROOM_BYTES, &err), 0);
	expect_reserved(f, ".spare.room");
	assert_int_equal(receipt_room_take_spare(&f->spare, &f->rdir, "e1", &info, &err), 0);
	expect_room(f, "e1.room", &info);
	assert_int_equal(size_of(f, ".spare.room", NULL), -1);
	assert_int_equal(f->spare.fd, -1);
	receipt_room_drop(&f->rdir, "e1", &info);
	assert_int_equal(size_of(f, "e1.room", NULL), -1);
}

static void test_room_without_a_spare(void **state)
{
	struct fixture *f = *state;
	struct receipt_info info = { 0 };
	struct sb_err err;

	assert_int_equal(receipt_room_take_spare(&f->spare, &f->rdir, "e1", &info, &err), 0);
	expect_room(f, "e1.room", &info);
	receipt_room_drop(&f->rdir, "e1", &info);
}

static void test_stale_spare_replaced(void **state)
{
	struct fixture *f = *state;
	struct sb_err err;
	int fd = openat(f->rdir.fd, ".spare.room", O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);

	/* Left by an earlier life: a sparse file of the right size, nothing allocated. */
	assert_true(fd >= 0);
	assert_int_equal(ftruncate(fd, RECEIPT_ROOM_BYTES), 0);
	close(fd);
	assert_int_equal(spare_file_make(&f->spare, &f->rdir, RECEIPT_ROOM_BYTES, &err), 0);
	expect_reserved(f, ".spare.room");
}

static void test_existing_room_refused(void **state)
{
	struct fixture *f = *state;
	struct receipt_info info = { 0 }, first = { 0 };
	struct sb_err err;

	assert_int_equal(receipt_room_take(&f->rdir, "e2", &first, &err), 0);
	assert_int_equal(spare_file_make(&f->spare, &f->rdir, RECEIPT_ROOM_BYTES, &err), 0);
	assert_int_equal(receipt_room_take_spare(&f->spare, &f->rdir, "e2", &info, &err), -1);
	assert_false(info.has_room);
	assert_int_equal(err.errnum, EEXIST);
	assert_true(f->spare.fd >= 0);
	expect_reserved(f, ".spare.room");
	receipt_room_drop(&f->rdir, "e2", &first);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_room_through_the_spare, setup, teardown),
		cmocka_unit_test_setup_teardown(test_room_without_a_spare, setup, teardown),
		cmocka_unit_test_setup_teardown(test_stale_spare_replaced, setup, teardown),
		cmocka_unit_test_setup_teardown(test_existing_room_refused, setup, teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
