/* Unit tests for manager/core/live_exec.c: followers bounded per exec and per identity, a hub that
 * ended is not found, and a reader drains what the rings hold after the end, then is told it ended. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "live_exec.h"

static void test_followers_bounded(void **state)
{
	struct live_exec *hub[5], *bob, *f[64];
	struct sb_err err;
	char id[24]; /* "alice-" and any int */
	size_t n = 0;

	(void)state;
	for (int i = 0; i < 5; i++) {
		snprintf(id, sizeof id, "alice-%d", i);
		assert_non_null(hub[i] = live_exec_begin(id, "alice"));
	}
	assert_non_null(bob = live_exec_begin("bob-0", "bob"));
	/* per exec */
	for (int i = 0; i < LIVE_FOLLOWERS_MAX; i++)
		assert_int_equal(live_exec_attach("alice-0", true, &f[n++], &err), 0);
	assert_int_equal(live_exec_attach("alice-0", true, &f[n], &err), -1);
	assert_int_equal(err.errnum, EBUSY);
	/* the exec's own client is not a follower */
	assert_int_equal(live_exec_attach("alice-0", false, &f[n], &err), 0);
	live_exec_detach(f[n], false);
	/* per identity: 32 across alice's execs */
	for (int e = 1; n < LIVE_FOLLOWERS_IDENTITY_MAX; e = e % 4 + 1) {
		snprintf(id, sizeof id, "alice-%d", e);
		assert_int_equal(live_exec_attach(id, true, &f[n++], &err), 0);
	}
	assert_int_equal(live_exec_attach("alice-4", true, &f[n], &err), -1);
	assert_int_equal(err.errnum, EBUSY);
	assert_non_null(strstr(err.msg, "identity alice"));
	/* another identity is not held back */
	assert_int_equal(live_exec_attach("bob-0", true, &f[n], &err), 0);
	live_exec_detach(f[n], true);
	/* one leaves: one more may come */
	live_exec_detach(f[n - 1], true);
	assert_int_equal(live_exec_attach("alice-4", true, &f[n - 1], &err), 0);
	assert_int_equal(live_exec_attach("nobody", true, &f[n], &err), -1);
	assert_int_equal(err.errnum, ENOENT);
	for (size_t i = 0; i < n; i++)
		live_exec_detach(f[i], true);
	for (int i = 0; i < 5; i++)
		live_exec_end(hub[i]);
	live_exec_end(bob);
	assert_int_equal(live_exec_attach("alice-0", true, &f[0], &err), -1);
	assert_int_equal(err.errnum, ENOENT);
}

static void test_reader_drains_after_end(void **state)
{
	uint8_t buf[LIVE_CHUNK_MAX];
	uint64_t off[LIVE_STREAMS] = { 0, 0 }, offset, skipped;
	struct live_exec *h, *r;
	enum live_stream stream;
	struct sb_err err;
	size_t len;

	(void)state;
	assert_non_null(h = live_exec_begin("x-1", "carol"));
	assert_int_equal(live_exec_attach("x-1", true, &r, &err), 0);
	assert_int_equal(live_exec_next(r, off, buf, &stream, &offset, &len, &skipped, 10), 0);
	live_exec_put(h, LIVE_STDERR, 0, (const uint8_t *)"warn\n", 5);
	live_exec_put(h, LIVE_STDOUT, 10, (const uint8_t *)"late\n", 5); /* the agent skipped 10 */
	live_exec_end(h);
	assert_int_equal(live_exec_next(r, off, buf, &stream, &offset, &len, &skipped, 10), 1);
	assert_int_equal(stream, LIVE_STDOUT);
	assert_int_equal(skipped, 10);
	assert_int_equal(offset, 10);
	assert_memory_equal(buf, "late\n", 5);
	assert_int_equal(live_exec_next(r, off, buf, &stream, &offset, &len, &skipped, 10), 1);
	assert_int_equal(stream, LIVE_STDERR);
	assert_memory_equal(buf, "warn\n", 5);
	assert_int_equal(live_exec_next(r, off, buf, &stream, &offset, &len, &skipped, 10), -1);
	live_exec_detach(r, true);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_followers_bounded),
		cmocka_unit_test(test_reader_drains_after_end),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
