/* Unit tests for common/frame.c: round trips, the cap checked before allocation, truncation. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>
#include <errno.h>

#include "frame.h"
#include "testutil.h"

static void test_round_trip(void **state)
{
	struct memstream m;
	struct sb_stream s;
	struct sb_err err;
	uint8_t *out;
	size_t len;

	(void)state;
	stream_init(&s, &m);
	assert_int_equal(frame_write(&s, "hello", 5, 64, &err), 0);
	assert_int_equal(frame_write(&s, "", 0, 64, &err), 0);
	assert_int_equal(m.len, 4 + 5 + 4);
	assert_int_equal(frame_read(&s, 64, &out, &len, &err), 1);
	assert_int_equal(len, 5);
	assert_memory_equal(out, "hello", 5);
	free(out);
	assert_int_equal(frame_read(&s, 64, &out, &len, &err), 1);
	assert_int_equal(len, 0);
	free(out);
	/* A clean end of stream between frames is 0, not an error. */
	assert_int_equal(frame_read(&s, 64, &out, &len, &err), 0);
	assert_null(out);
}

static void test_oversized_refused_before_allocation(void **state)
{
	struct memstream m;
	struct sb_stream s;
	struct sb_err err;
	uint8_t *out = (uint8_t *)&m;
	size_t len = 99;

	(void)state;
	stream_init(&s, &m);
	frame_encode_header(m.data, 0xFFFFFFFFu);
	m.len = 4;
	assert_int_equal(frame_read(&s, 1024, &out, &len, &err), -1);
	assert_int_equal(err.errnum, EMSGSIZE);
	assert_null(out);
	assert_int_equal(len, 0);
	/* Only the header was read: nothing was consumed for the announced body. */
	assert_int_equal(m.pos, 4);
	assert_non_null(strstr(err.msg, "over the cap"));
}

static void test_write_over_cap(void **state)
{
	struct memstream m;
	struct sb_stream s;
	struct sb_err err;

	(void)state;
	stream_init(&s, &m);
	assert_int_equal(frame_write(&s, "123456789", 9, 8, &err), -1);
	assert_int_equal(err.errnum, EMSGSIZE);
	assert_int_equal(m.len, 0);
}

static void test_truncated(void **state)
{
	struct memstream m;
	struct sb_stream s;
	struct sb_err err;
	uint8_t *out;
	size_t len;

	(void)state;
	stream_init(&s, &m);
	frame_encode_header(m.data, 10);
	memcpy(m.data + 4, "abc", 3);
	m.len = 7;
	assert_int_equal(frame_read(&s, 64, &out, &len, &err), -1);
	assert_int_equal(err.errnum, EPROTO);
	assert_null(out);

	stream_init(&s, &m);
	m.data[0] = 0;
	m.len = 2;
	assert_int_equal(frame_read(&s, 64, &out, &len, &err), -1);
	assert_int_equal(err.errnum, EPROTO);
}

static void test_header_codec(void **state)
{
	uint8_t hdr[4];

	(void)state;
	frame_encode_header(hdr, 0x01020304u);
	assert_int_equal(hdr[0], 1);
	assert_int_equal(hdr[3], 4);
	assert_int_equal(frame_decode_header(hdr), 0x01020304u);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_round_trip),
		cmocka_unit_test(test_oversized_refused_before_allocation),
		cmocka_unit_test(test_write_over_cap),
		cmocka_unit_test(test_truncated),
		cmocka_unit_test(test_header_codec),
	};
	return cmocka_run_group_tests_name("frame", tests, NULL, NULL);
}
