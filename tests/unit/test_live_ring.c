/* Unit tests for live output's bounds: common/live_ring.c (fixed memory, absolute offsets, a slow
 * reader told what it skipped and where it resumes, a writer's gap never served) and the agent's tap
 * (sandbox-agent/live_tap.c live_tap_next: both streams, skipped bytes counted once). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "live_ring.h"
#include "live_tap.h"

static void put_str(struct live_ring *r, const char *s)
{
	live_ring_put(r, r->end, (const uint8_t *)s, strlen(s));
}

static void test_reader_in_step_gets_everything(void **state)
{
	struct live_ring r;
	struct sb_err err;
	uint8_t out[32];
	uint64_t at = 0, skipped;
	size_t n;

	(void)state;
	assert_int_equal(live_ring_init(&r, 8, &err), 0);
	put_str(&r, "abcde");
	n = live_ring_get(&r, &at, out, sizeof out, &skipped);
	assert_int_equal(n, 5);
	assert_int_equal(skipped, 0);
	assert_memory_equal(out, "abcde", 5);
	/* Across the ring's end. */
	put_str(&r, "fghij");
	n = live_ring_get(&r, &at, out, sizeof out, &skipped);
	assert_int_equal(n, 5);
	assert_int_equal(skipped, 0);
	assert_memory_equal(out, "fghij", 5);
	assert_int_equal(at, 10);
	assert_int_equal(live_ring_get(&r, &at, out, sizeof out, &skipped), 0);
	live_ring_free(&r);
}

/* A reader that fell behind: the lost bytes counted, the copy resuming at the oldest held byte, memory
 * never past the ring. */
static void test_slow_reader_skips_counted(void **state)
{
	struct live_ring r;
	struct sb_err err;
	uint8_t out[32];
	uint64_t at = 0, skipped;
	size_t n;

	(void)state;
	assert_int_equal(live_ring_init(&r, 8, &err), 0);
	for (int i = 0; i < 1000; i++)
		put_str(&r, "0123456789");
	assert_int_equal(r.end, 10000);
	assert_int_equal(r.end - r.start, 8);
	n = live_ring_get(&r, &at, out, sizeof out, &skipped);
	assert_int_equal(skipped, 9992);
	assert_int_equal(n, 8);
	assert_memory_equal(out, "23456789", 8);
	assert_int_equal(at, 10000);
	live_ring_free(&r);
}

/* One put larger than the ring keeps its newest bytes. */
static void test_oversized_put_keeps_newest(void **state)
{
	struct live_ring r;
	struct sb_err err;
	uint8_t out[32];
	uint64_t at = 0, skipped;

	(void)state;
	assert_int_equal(live_ring_init(&r, 4, &err), 0);
	put_str(&r, "abcdefghij");
	assert_int_equal(live_ring_get(&r, &at, out, sizeof out, &skipped), 4);
	assert_int_equal(skipped, 6);
	assert_memory_equal(out, "ghij", 4);
	live_ring_free(&r);
}

/* The manager's side: a chunk after a gap the agent skipped; the gap is never served as bytes, and a
 * chunk sent again (already held) is not held twice. A reader resuming at an offset gets from there. */
static void test_gap_and_resume(void **state)
{
	struct live_ring r;
	struct sb_err err;
	uint8_t out[32];
	uint64_t at = 0, skipped;

	(void)state;
	assert_int_equal(live_ring_init(&r, 16, &err), 0);
	live_ring_put(&r, 0, (const uint8_t *)"abc", 3);
	live_ring_put(&r, 100, (const uint8_t *)"xyz", 3);
	live_ring_put(&r, 101, (const uint8_t *)"yz!", 3);
	assert_int_equal(r.lost, 97);
	assert_int_equal(r.end, 104);
	assert_int_equal(live_ring_get(&r, &at, out, sizeof out, &skipped), 4);
	assert_int_equal(skipped, 100);
	assert_memory_equal(out, "xyz!", 4);
	at = 102;
	assert_int_equal(live_ring_get(&r, &at, out, sizeof out, &skipped), 2);
	assert_int_equal(skipped, 0);
	assert_memory_equal(out, "z!", 2);
	live_ring_free(&r);
}

/* The agent's tap: the wait loop's feed never waits for the sender; what the sender could not take is
 * one skipped count on the next chunk of that stream, then it is in step again. */
static void test_tap_next_both_streams(void **state)
{
	static uint8_t buf[LIVE_CHUNK_MAX];
	struct live_tap t;
	struct sb_err err;
	enum live_stream stream;
	uint64_t offset, skipped;
	size_t len;
	uint8_t big[LIVE_RING_BYTES];

	(void)state;
	memset(&t, 0, sizeof t);
	assert_int_equal(live_ring_init(&t.ring[LIVE_STDOUT], LIVE_RING_BYTES, &err), 0);
	assert_int_equal(live_ring_init(&t.ring[LIVE_STDERR], LIVE_RING_BYTES, &err), 0);
	memset(big, 'y', sizeof big);
	for (int i = 0; i < 3; i++)
		live_ring_put(&t.ring[LIVE_STDOUT], t.ring[LIVE_STDOUT].end, big, sizeof big);
	live_ring_put(&t.ring[LIVE_STDERR], 0, (const uint8_t *)"oops\n", 5);
	assert_int_equal(live_tap_next(&t, buf, &stream, &offset, &len, &skipped), 1);
	assert_int_equal(stream, LIVE_STDOUT);
	assert_int_equal(skipped, 2 * LIVE_RING_BYTES);
	assert_int_equal(offset, 2 * LIVE_RING_BYTES);
	assert_int_equal(len, LIVE_CHUNK_MAX);
	for (int i = 0; i < 3; i++) {
		assert_int_equal(live_tap_next(&t, buf, &stream, &offset, &len, &skipped), 1);
		assert_int_equal(stream, LIVE_STDOUT);
		assert_int_equal(skipped, 0);
	}
	assert_int_equal(live_tap_next(&t, buf, &stream, &offset, &len, &skipped), 1);
	assert_int_equal(stream, LIVE_STDERR);
	assert_int_equal(offset, 0);
	assert_memory_equal(buf, "oops\n", 5);
	assert_int_equal(live_tap_next(&t, buf, &stream, &offset, &len, &skipped), 0);
	assert_int_equal(t.skipped, 2 * LIVE_RING_BYTES);
	live_ring_free(&t.ring[LIVE_STDOUT]);
	live_ring_free(&t.ring[LIVE_STDERR]);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_reader_in_step_gets_everything),
		cmocka_unit_test(test_slow_reader_skips_counted),
		cmocka_unit_test(test_oversized_put_keeps_newest),
		cmocka_unit_test(test_gap_and_resume),
		cmocka_unit_test(test_tap_next_both_streams),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
