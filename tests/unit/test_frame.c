/* Unit tests for common/frame.c: round trips, the cap checked before allocation, truncation; and
 * manager/control/control.c's message: its header and text in one write, short or past the JSON
 * scratch, so that a sender that dies while it answers never leaves half a frame. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>
#include <errno.h>

#include "control.h"
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

/* One message: one write of exactly its header and text, read back whole as the same JSON. */
static void one_message_one_write(json_t *msg)
{
	struct memstream m;
	struct sb_stream s;
	struct sb_err err;
	char *text = json_dumps(msg, JSON_COMPACT);
	json_t *back = NULL;

	assert_non_null(text);
	stream_init(&s, &m);
	assert_int_equal(control_send_stream(&s, msg, CONTROL_RESPONSE_CAP, &err), 0);
	assert_int_equal(m.write_calls, 1);
	assert_int_equal(m.len, 4 + strlen(text));
	assert_memory_equal(m.data + 4, text, strlen(text));
	assert_int_equal(control_recv_stream(&s, CONTROL_RESPONSE_CAP, &back, &err), 1);
	assert_true(json_equal(back, msg));
	json_decref(back);
	free(text);
}

static void test_control_message_in_one_write(void **state)
{
	char big[3000];
	json_t *msg = json_pack("{s:b, s:s}", "accepted", 1, "exec_id", "0123456789abcdef");

	(void)state;
	assert_non_null(msg);
	one_message_one_write(msg);
	/* Past sb_json_dumps' scratch: the text is written a second time, still after the header. */
	memset(big, 'x', sizeof big - 1);
	big[sizeof big - 1] = '\0';
	assert_int_equal(json_object_set_new(msg, "stdout", json_string(big)), 0);
	one_message_one_write(msg);
	json_decref(msg);
}

/* A message over the cap is refused before anything is written. */
static void test_control_message_over_cap(void **state)
{
	struct memstream m;
	struct sb_stream s;
	struct sb_err err;
	json_t *msg = json_pack("{s:s}", "stdout", "0123456789");

	(void)state;
	stream_init(&s, &m);
	assert_int_equal(control_send_stream(&s, msg, 8, &err), -1);
	assert_int_equal(m.write_calls, 0);
	json_decref(msg);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_round_trip),
		cmocka_unit_test(test_oversized_refused_before_allocation),
		cmocka_unit_test(test_write_over_cap),
		cmocka_unit_test(test_truncated),
		cmocka_unit_test(test_header_codec),
		cmocka_unit_test(test_control_message_in_one_write),
		cmocka_unit_test(test_control_message_over_cap),
	};
	return cmocka_run_group_tests_name("frame", tests, NULL, NULL);
}
