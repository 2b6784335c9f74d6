/* Unit tests for the disk bound of rule N4 (manager/core/disk_bound.c): which bound holds for a state
 * directory and a volume on one filesystem or two, the reserve's file (its size allocated, 0600), given
 * back (blocks freed) and taken again, disk-reserve 0 stated as no bound, a reserve too large for its
 * filesystem refused, and a leftover reserve removed when the filesystems are separate. The full
 * filesystem itself is in tests/integration/manager_resources.sh (manager_disk_reserve). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "disk_bound.h"

#define MIB (1024 * 1024)

struct fixture {
	char dir[PATH_MAX];     /* the state directory, on /tmp */
	char volume[PATH_MAX + 16]; /* <dir>/volume: the default layout */
	char other[PATH_MAX];   /* a directory on /dev/shm: another filesystem */
	char reserve[PATH_MAX + 32];
};

static int setup(void **state)
{
	struct fixture *f = calloc(1, sizeof *f);

	assert_non_null(f);
	snprintf(f->dir, sizeof f->dir, "/tmp/test_disk_bound.XXXXXX");
	assert_non_null(mkdtemp(f->dir));
	snprintf(f->volume, sizeof f->volume, "%s/volume", f->dir);
	assert_int_equal(mkdir(f->volume, 0700), 0);
	snprintf(f->other, sizeof f->other, "/dev/shm/test_disk_bound.XXXXXX");
	assert_non_null(mkdtemp(f->other));
	snprintf(f->reserve, sizeof f->reserve, "%s/%s", f->dir, DISK_RESERVE_NAME);
	*state = f;
	return 0;
}

static int teardown(void **state)
{
	struct fixture *f = *state;

	unlink(f->reserve);
	rmdir(f->volume);
	rmdir(f->dir);
	rmdir(f->other);
	free(f);
	return 0;
}

static void bound_close(struct disk_bound *d)
{
	if (d->fd >= 0)
		close(d->fd);
	if (d->dir_fd >= 0)
		close(d->dir_fd);
}

static void assert_bound(struct disk_bound *d, const char *want)
{
	json_t *j = disk_bound_json(d);

	assert_non_null(j);
	assert_string_equal(json_string_value(json_object_get(j, "bound")), want);
	json_decref(j);
}

static void test_reserve_on_one_filesystem(void **state)
{
	struct fixture *f = *state;
	struct disk_bound d = { 0 };
	struct sb_err err;
	struct stat st;
	json_t *j;

	assert_int_equal(disk_bound_start(&d, f->dir, f->volume, 2 * MIB, &err), 0);
	assert_int_equal(d.kind, DISK_RESERVE);
	assert_true(d.held);
	assert_int_equal(stat(f->reserve, &st), 0);
	assert_int_equal(st.st_size, 2 * MIB);
	assert_true((int64_t)st.st_blocks * 512 >= 2 * MIB); /* allocated, not a hole */
	assert_int_equal(st.st_mode & 07777, 0600);
	j = disk_bound_json(&d);
	assert_string_equal(json_string_value(json_object_get(j, "bound")), "reserve");
	assert_int_equal(json_integer_value(json_object_get(j, "bytes")), 2 * MIB);
	assert_true(json_is_true(json_object_get(j, "held")));
	json_decref(j);

	/* Given back: its blocks freed, and the statement may run again. */
	assert_true(disk_bound_release(&d));
	assert_false(d.held);
	assert_int_equal(d.released, 1);
	assert_int_equal(stat(f->reserve, &st), 0);
	assert_int_equal(st.st_blocks, 0);
	/* Room enough: the next call takes it again. */
	assert_int_equal(disk_bound_admit(&d, &err), 0);
	assert_true(d.held);
	assert_int_equal(stat(f->reserve, &st), 0);
	assert_true((int64_t)st.st_blocks * 512 >= 2 * MIB);
	bound_close(&d);
}

/* Two filesystems: nothing held, the bound stated, a reserve an earlier layout left removed, and a
 * full records store has no room to be given. */
static void test_separate_filesystems(void **state)
{
	struct fixture *f = *state;
	struct disk_bound d = { 0 };
	struct sb_err err;
	struct stat a, b;
	int fd;

	assert_int_equal(stat(f->dir, &a), 0);
	assert_int_equal(stat(f->other, &b), 0);
	assert_true(a.st_dev != b.st_dev); /* the test's premise: /tmp and /dev/shm are two */
	fd = open(f->reserve, O_CREAT | O_WRONLY | O_CLOEXEC, 0600);
	assert_true(fd >= 0);
	close(fd);
	assert_int_equal(disk_bound_start(&d, f->dir, f->other, 2 * MIB, &err), 0);
	assert_int_equal(d.kind, DISK_SEPARATE);
	assert_int_equal(access(f->reserve, F_OK), -1);
	assert_bound(&d, "separate filesystem");
	assert_false(disk_bound_release(&d));
	assert_int_equal(disk_bound_admit(&d, &err), 0);
	bound_close(&d);
}

static void test_zero_is_no_bound(void **state)
{
	struct fixture *f = *state;
	struct disk_bound d = { 0 };
	struct sb_err err;

	assert_int_equal(disk_bound_start(&d, f->dir, f->volume, 0, &err), 0);
	assert_int_equal(d.kind, DISK_NONE);
	assert_bound(&d, "none");
	assert_int_equal(access(f->reserve, F_OK), -1);
	assert_false(disk_bound_release(&d));
	bound_close(&d);
}

/* Over a quarter of its filesystem it could never be taken again once given back: refused. */
static void test_too_large_refused(void **state)
{
	struct fixture *f = *state;
	struct disk_bound d = { 0 };
	struct sb_err err;

	assert_int_equal(disk_bound_start(&d, f->dir, f->volume, INT64_C(1) << 60, &err), -1);
	assert_non_null(strstr(err.msg, "too large for the filesystem"));
	assert_int_equal(access(f->reserve, F_OK), -1);
	bound_close(&d);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_reserve_on_one_filesystem, setup, teardown),
		cmocka_unit_test_setup_teardown(test_separate_filesystems, setup, teardown),
		cmocka_unit_test_setup_teardown(test_zero_is_no_bound, setup, teardown),
		cmocka_unit_test_setup_teardown(test_too_large_refused, setup, teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
