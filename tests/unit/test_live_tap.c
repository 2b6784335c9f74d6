/* Unit tests for the agent's live output sender kept between execs (sandbox-agent/live_tap.c): one
 * tap serves exec after exec, each with only its own bytes from offset 0; an exec's stop returns only
 * after its last chunk went out; a failed send gives up that exec alone; closing the owner ends the
 * thread, and taps made and closed leave none behind. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "live_ring.h"
#include "live_tap.h"
#include "testutil.h"

/* One exec's view of what the sender sent: the bytes of each stream at their offsets. */
struct got {
	uint8_t bytes[LIVE_STREAMS][4 * LIVE_CHUNK_MAX];
	uint64_t end[LIVE_STREAMS]; /* just past the highest byte received */
	unsigned chunks;
	bool gap;                   /* a chunk that did not start where the previous ended */
	bool fail;                  /* this exec's send fails */
	unsigned slow_us;           /* each send takes this long (the stop must still wait for it) */
};

static int record(void *ctx, enum live_stream stream, uint64_t offset, const uint8_t *data, size_t len,
		  uint64_t skipped)
{
	struct got *g = ctx;

	if (g->fail)
		return -1;
	if (g->slow_us > 0)
		usleep(g->slow_us);
	if (offset != g->end[stream] + skipped || offset + len > sizeof g->bytes[stream]) {
		g->gap = true;
		return 0;
	}
	memcpy(g->bytes[stream] + offset, data, len);
	g->end[stream] = offset + len;
	g->chunks++;
	return 0;
}

static void feed_str(struct live_tap *t, enum live_stream s, const char *text)
{
	live_tap_feed(t, s, (const uint8_t *)text, strlen(text));
}

/* Two execs in a row on one tap: the second sees its own bytes from offset 0, none of the first's. */
static void test_two_execs_each_own_bytes(void **state)
{
	static struct got a, b;
	struct live_tap t;
	struct sb_err err;

	(void)state;
	memset(&t, 0, sizeof t);
	assert_int_equal(live_tap_begin(&t, record, &a, &err), 0);
	feed_str(&t, LIVE_STDOUT, "first out\n");
	feed_str(&t, LIVE_STDERR, "first err\n");
	live_tap_stop(&t);
	assert_int_equal(a.end[LIVE_STDOUT], 10);
	assert_memory_equal(a.bytes[LIVE_STDOUT], "first out\n", 10);
	assert_int_equal(a.end[LIVE_STDERR], 10);
	assert_false(a.gap);
	assert_true(t.started);

	assert_int_equal(live_tap_begin(&t, record, &b, &err), 0);
	feed_str(&t, LIVE_STDOUT, "second\n");
	live_tap_stop(&t);
	assert_int_equal(b.end[LIVE_STDOUT], 7);
	assert_memory_equal(b.bytes[LIVE_STDOUT], "second\n", 7);
	assert_int_equal(b.end[LIVE_STDERR], 0);
	assert_false(b.gap);
	/* The first exec's view is untouched by the second. */
	assert_int_equal(a.end[LIVE_STDOUT], 10);
	live_tap_close(&t);
	assert_false(t.started);
}

/* The stop returns only once the last chunk is out: after it, everything fed is at the receiver. */
static void test_stop_waits_for_last_chunk(void **state)
{
	static struct got g;
	static uint8_t data[3 * LIVE_CHUNK_MAX];
	struct live_tap t;
	struct sb_err err;

	(void)state;
	memset(&t, 0, sizeof t);
	for (size_t i = 0; i < sizeof data; i++)
		data[i] = (uint8_t)(i * 7);
	g.slow_us = 20000;
	assert_int_equal(live_tap_begin(&t, record, &g, &err), 0);
	live_tap_feed(&t, LIVE_STDOUT, data, sizeof data); /* fits the ring: nothing skipped */
	live_tap_stop(&t);
	assert_int_equal(g.end[LIVE_STDOUT], sizeof data);
	assert_int_equal(g.chunks, 3);
	assert_memory_equal(g.bytes[LIVE_STDOUT], data, sizeof data);
	assert_false(g.gap);
	live_tap_close(&t);
}

/* A stop that comes while the last chunk is being written (taken from the ring, nothing left in it)
 * still waits for that write: it returns with the chunk at the receiver, never while it is in
 * flight. An exec with no output at all stops at once, and the next exec is served. */
static void test_stop_waits_for_send_under_way(void **state)
{
	static struct got g, none, next;
	struct live_tap t;
	struct sb_err err;

	(void)state;
	memset(&t, 0, sizeof t);
	g.slow_us = 200000;
	assert_int_equal(live_tap_begin(&t, record, &g, &err), 0);
	feed_str(&t, LIVE_STDOUT, "last\n");
	usleep(50000); /* the sender took the chunk and is inside its 200 ms write */
	live_tap_stop(&t);
	assert_int_equal(g.chunks, 1);
	assert_int_equal(g.end[LIVE_STDOUT], 5);

	assert_int_equal(live_tap_begin(&t, record, &none, &err), 0);
	live_tap_stop(&t);
	assert_int_equal(none.chunks, 0);

	assert_int_equal(live_tap_begin(&t, record, &next, &err), 0);
	feed_str(&t, LIVE_STDERR, "again\n");
	live_tap_stop(&t);
	assert_int_equal(next.end[LIVE_STDERR], 6);
	assert_false(next.gap);
	live_tap_close(&t);
}

/* A failed send gives up that exec's rest (its stop still returns); the next exec on the same tap is
 * served, and another owner's tap never notices. */
static void test_failed_send_next_exec_served(void **state)
{
	static struct got bad, next, other;
	struct live_tap t, u;
	struct sb_err err;

	(void)state;
	memset(&t, 0, sizeof t);
	memset(&u, 0, sizeof u);
	bad.fail = true;
	assert_int_equal(live_tap_begin(&t, record, &bad, &err), 0);
	assert_int_equal(live_tap_begin(&u, record, &other, &err), 0);
	feed_str(&t, LIVE_STDOUT, "lost\n");
	feed_str(&u, LIVE_STDOUT, "other\n");
	live_tap_stop(&t);
	live_tap_stop(&u);
	assert_int_equal(bad.end[LIVE_STDOUT], 0);
	assert_int_equal(other.end[LIVE_STDOUT], 6);

	assert_int_equal(live_tap_begin(&t, record, &next, &err), 0);
	feed_str(&t, LIVE_STDOUT, "served\n");
	live_tap_stop(&t);
	assert_int_equal(next.end[LIVE_STDOUT], 7);
	assert_memory_equal(next.bytes[LIVE_STDOUT], "served\n", 7);
	assert_false(next.gap);
	live_tap_close(&t);
	live_tap_close(&u);
}

/* A joined thread may still be listed for an instant while the kernel reaps it: ask again, bounded. */
static int threads_settled(int want)
{
	int n = test_thread_count(0);

	for (int i = 0; i < 2000 && n != want; i++) {
		struct timespec ms = { 0, 1000000 };

		nanosleep(&ms, NULL);
		n = test_thread_count(0);
	}
	return n;
}

/* One thread per tap however many execs it serves, and none left once the owners are gone. */
static void test_no_thread_left(void **state)
{
	static struct got g;
	struct sb_err err;
	int base = test_thread_count(0);

	(void)state;
	for (int round = 0; round < 20; round++) {
		struct live_tap t;

		memset(&t, 0, sizeof t);
		for (int exec = 0; exec < 3; exec++) {
			memset(&g, 0, sizeof g);
			assert_int_equal(live_tap_begin(&t, record, &g, &err), 0);
			feed_str(&t, LIVE_STDOUT, "x\n");
			live_tap_stop(&t);
			assert_int_equal(g.end[LIVE_STDOUT], 2);
		}
		assert_int_equal(threads_settled(base + 1), base + 1);
		live_tap_close(&t);
		assert_null(t.ring[LIVE_STDOUT].buf);
		assert_null(t.ring[LIVE_STDERR].buf);
	}
	assert_int_equal(threads_settled(base), base);
}

/* A stop or close of a tap no exec used is nothing. */
static void test_unused_tap(void **state)
{
	struct live_tap t;

	(void)state;
	memset(&t, 0, sizeof t);
	live_tap_stop(&t);
	live_tap_close(&t);
	assert_false(t.started);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_two_execs_each_own_bytes),
		cmocka_unit_test(test_stop_waits_for_last_chunk),
		cmocka_unit_test(test_stop_waits_for_send_under_way),
		cmocka_unit_test(test_failed_send_next_exec_served),
		cmocka_unit_test(test_no_thread_left),
		cmocka_unit_test(test_unused_tap),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
