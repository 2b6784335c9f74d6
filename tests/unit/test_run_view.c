/* The call's view (sandbox-agent/boundary_view.c): its two arrays are kept for the next view, one of
 * each at the first capacity, and a kept array never shows a view anything of the one before. The
 * checks themselves are the integration tests' (agent_alias.sh, agent_boundary.sh, test_agent_serve). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "boundary_internal.h"

#define N_DIRS 12

static char top[] = "/tmp/test_run_view.XXXXXX";
static char cwd[PATH_MAX], exe[PATH_MAX];
static struct hidden_dir dirs[N_DIRS];

static int setup(void **state)
{
	(void)state;
	if (mkdtemp(top) == NULL)
		return -1;
	snprintf(cwd, sizeof cwd, "%s/work", top);
	if (mkdir(cwd, 0700) < 0)
		return -1;
	snprintf(exe, sizeof exe, "%s/agent", top);
	if (close(open(exe, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0700)) < 0)
		return -1;
	for (int i = 0; i < N_DIRS; i++) {
		struct stat st;

		snprintf(dirs[i].path, sizeof dirs[i].path, "%s/private%d", top, i);
		if (mkdir(dirs[i].path, 0700) < 0 || stat(dirs[i].path, &st) < 0)
			return -1;
		dirs[i].dev = st.st_dev;
		dirs[i].ino = st.st_ino;
	}
	return 0;
}

static int teardown(void **state)
{
	(void)state;
	for (int i = 0; i < N_DIRS; i++)
		rmdir(dirs[i].path);
	rmdir(cwd);
	unlink(exe);
	rmdir(top);
	return 0;
}

/* A boundary hiding the first n of the private directories; its binary a file beside them. */
static struct boundary boundary_of(size_t n)
{
	struct boundary b = { .hidden = dirs, .n_hidden = n, .readonly_world = true };

	snprintf(b.agent_exe, sizeof b.agent_exe, "%s", exe);
	return b;
}

static void view_of(size_t n, struct run_view *v)
{
	struct boundary b = boundary_of(n);
	struct sb_err err;

	if (run_view_build(&b, cwd, NULL, v, &err) < 0)
		fail_msg("%s", err.msg);
	assert_int_equal(v->n_hidden, n);
	for (size_t i = 0; i < n; i++)
		assert_string_equal(v->hidden[i].path, dirs[i].path);
}

/* The second view takes the first's arrays: no allocation of 33 KB per view (M68). */
static void test_view_arrays_kept(void **state)
{
	struct run_view v;
	void *hidden, *g;

	(void)state;
	view_of(3, &v);
	hidden = v.hidden;
	g = v.g;
	run_view_free(&v);
	assert_true(run_view_kept_bytes() > 0);
	view_of(3, &v);
	assert_ptr_equal(v.hidden, hidden);
	assert_ptr_equal(v.g, g);
	assert_int_equal(run_view_kept_bytes(), 0); /* taken: one view holds them */
	run_view_free(&v);
}

/* A view with fewer entries than the one before shows only its own: neither kept array's later
 * entries are counted (one hidden directory, and two guarded objects: it and the binary). */
static void test_kept_view_shows_no_earlier_entries(void **state)
{
	struct run_view v;

	(void)state;
	view_of(5, &v);
	run_view_free(&v);
	view_of(1, &v);
	assert_int_equal(v.n_hidden, 1);
	assert_int_equal(v.n_g, 2); /* the one directory and the binary */
	run_view_free(&v);
}

/* What is kept stays bounded: an array that grew past the first capacity is freed, never kept, and
 * one array of each kind is the most kept (M69). */
static void test_kept_views_bounded(void **state)
{
	struct run_view v, w;
	size_t first;

	(void)state;
	view_of(2, &v);
	run_view_free(&v);
	first = run_view_kept_bytes();
	assert_true(first > 0);
	view_of(N_DIRS, &v); /* 12 directories: past the first capacity of both arrays */
	assert_int_equal(run_view_kept_bytes(), 0);
	run_view_free(&v);
	assert_int_equal(run_view_kept_bytes(), 0);
	view_of(2, &v);
	view_of(2, &w); /* two at once: the second allocates its own */
	run_view_free(&v);
	run_view_free(&w);
	assert_int_equal(run_view_kept_bytes(), first);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_view_arrays_kept),
		cmocka_unit_test(test_kept_view_shows_no_earlier_entries),
		cmocka_unit_test(test_kept_views_bounded),
	};

	return cmocka_run_group_tests(tests, setup, teardown);
}
