/* Unit tests for manager/core/live_exec.c: followers bounded per exec and per identity, a hub that
 * ended is not found, a reader drains what the rings hold after the end, then is told it ended, and a
 * reader that takes nothing has its skips counted as the ring drops them and when it stops. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "live_exec.h"
#include "metrics.h"

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
	struct live_reader rd;
	enum live_stream stream;
	struct sb_err err;
	size_t len;

	(void)state;
	assert_non_null(h = live_exec_begin("x-1", "carol"));
	assert_int_equal(live_exec_attach("x-1", true, &r, &err), 0);
	live_exec_read_begin(r, &rd, off);
	assert_int_equal(live_exec_next(r, &rd, buf, &stream, &offset, &len, &skipped, 10), 0);
	live_exec_put(h, LIVE_STDERR, 0, (const uint8_t *)"warn\n", 5);
	live_exec_put(h, LIVE_STDOUT, 10, (const uint8_t *)"late\n", 5); /* the agent skipped 10 */
	live_exec_end(h);
	assert_int_equal(live_exec_next(r, &rd, buf, &stream, &offset, &len, &skipped, 10), 1);
	assert_int_equal(stream, LIVE_STDOUT);
	assert_int_equal(skipped, 10);
	assert_int_equal(offset, 10);
	assert_memory_equal(buf, "late\n", 5);
	assert_int_equal(live_exec_next(r, &rd, buf, &stream, &offset, &len, &skipped, 10), 1);
	assert_int_equal(stream, LIVE_STDERR);
	assert_memory_equal(buf, "warn\n", 5);
	assert_int_equal(live_exec_next(r, &rd, buf, &stream, &offset, &len, &skipped, 10), -1);
	live_exec_read_end(r, &rd);
	live_exec_detach(r, true);
}

/* The manager's counter of one kind ("streamed", "skipped"), as a scrape shows it. */
static unsigned long long live_counter(const char *kind)
{
	struct metrics_gauges g = { .version = "test", .backend = "process" };
	char key[96], *text, *at;
	unsigned long long v = 0;
	struct sb_err err;
	size_t len;

	snprintf(key, sizeof key, "sandbox_manager_live_output_bytes_total{kind=\"%s\"} ", kind);
	assert_int_equal(metrics_render(&g, &text, &len, &err), 0);
	at = strstr(text, key);
	assert_non_null(at);
	v = strtoull(at + strlen(key), NULL, 10);
	free(text);
	return v;
}

/* A reader stuck on a client that takes nothing (its thread waits in a write) never calls next:
 * what the ring drops past it is counted as it is dropped, and what it never took when it stops. */
static void test_stuck_reader_skips_counted(void **state)
{
	static uint8_t flood[3 * LIVE_RING_BYTES];
	uint64_t off[LIVE_STREAMS] = { 0, 0 };
	struct live_reader rd;
	struct live_exec *h;

	(void)state;
	metrics_reset();
	memset(flood, 'y', sizeof flood);
	assert_non_null(h = live_exec_begin("x-2", "dave"));
	live_exec_read_begin(h, &rd, off);
	live_exec_put(h, LIVE_STDOUT, 0, flood, LIVE_RING_BYTES);
	assert_int_equal(live_counter("skipped"), 0);
	live_exec_put(h, LIVE_STDOUT, LIVE_RING_BYTES, flood, 2 * LIVE_RING_BYTES);
	assert_int_equal(live_counter("skipped"), 2 * LIVE_RING_BYTES);
	live_exec_put(h, LIVE_STDERR, 0, flood, 100);
	live_exec_read_end(h, &rd);
	assert_int_equal(live_counter("skipped"), 3 * LIVE_RING_BYTES + 100);
	assert_int_equal(live_counter("streamed"), 0);
	live_exec_end(h);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_followers_bounded),
		cmocka_unit_test(test_reader_drains_after_end),
		cmocka_unit_test(test_stuck_reader_skips_counted),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
