/* Unit tests for sandbox-agent/output.c: bounded head + tail, exact counts, digests, and
 * the reversible UTF-8 escaping (NUL included), through the exec result JSON as its readers parse it. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include <jansson.h>

#include "output.h"
#include "random.h"
#include "result.h"
#include "textesc.h"

static void feed_str(struct output_capture *c, const char *s)
{
	output_feed(c, (const uint8_t *)s, strlen(s));
}

static void test_small_output_kept_whole(void **state)
{
	struct output_capture c;
	struct sb_err err;
	size_t len;
	uint8_t *text;

	(void)state;
	assert_int_equal(output_init(&c, 16, &err), 0);
	feed_str(&c, "hello ");
	feed_str(&c, "world");
	output_finish(&c);
	assert_false(output_truncated(&c));
	text = output_render(&c, &len);
	assert_int_equal(len, 11);
	assert_string_equal((char *)text, "hello world");
	free(text);
	output_free(&c);
}

/* Captures one after another, as a warm agent runs them, reuse the buffers the last one held
 * (output.c's kept buffers): no new allocation for the next exec. */
static void test_buffers_kept_for_next_capture(void **state)
{
	struct output_capture c;
	struct sb_err err;
	uintptr_t head, tail;
	void *volatile other[2]; /* volatile: the compiler may not drop the two allocations */

	(void)state;
	assert_int_equal(output_init(&c, 4096, &err), 0);
	head = (uintptr_t)c.head;
	tail = (uintptr_t)c.tail;
	output_free(&c);
	/* Blocks of the same size taken between: had the two been freed, the allocator could hand
	 * them out here, and the capture would not find them again. */
	other[0] = malloc(2048 + 1);
	other[1] = malloc(2048 + 1);
	assert_int_equal(output_init(&c, 4096, &err), 0);
	free(other[0]);
	free(other[1]);
	assert_true((uintptr_t)c.head == head || (uintptr_t)c.head == tail);
	assert_true((uintptr_t)c.tail == head || (uintptr_t)c.tail == tail);
	assert_true(c.head != c.tail);
	output_free(&c);
}

/* What is kept is the last capture's buffers, never more: a capture with another limit frees them. */
static void test_kept_buffers_bounded_by_last_capture(void **state)
{
	struct output_capture c, d;
	struct sb_err err;

	(void)state;
	assert_int_equal(output_init(&c, 4096, &err), 0);
	assert_int_equal(output_init(&d, 4096, &err), 0);
	output_free(&c);
	output_free(&d);
	assert_int_equal(output_kept_bytes(), 4 * (2048 + 1));
	assert_int_equal(output_init(&c, 64, &err), 0);
	assert_int_equal(output_kept_bytes(), 0);
	output_free(&c);
	assert_int_equal(output_kept_bytes(), 2 * (32 + 1));
	/* Two captures of that limit at once: their four buffers are kept. */
	assert_int_equal(output_init(&c, 64, &err), 0);
	assert_int_equal(output_init(&d, 64, &err), 0);
	output_free(&c);
	output_free(&d);
	assert_int_equal(output_kept_bytes(), 4 * (32 + 1));
}

/* A kept buffer still holds the earlier command's bytes: the next capture shows only its own,
 * before and after its tail ring fills. */
static void test_kept_buffers_show_no_earlier_bytes(void **state)
{
	const char *second[] = { "xy", "12345", "0123456789" };
	const char *want[] = { "xy", "12345", "0123\n[... 2 bytes omitted ...]\n6789" };
	struct output_capture c;
	struct sb_err err;
	size_t len;
	uint8_t *text;

	(void)state;
	for (size_t i = 0; i < sizeof second / sizeof second[0]; i++) {
		assert_int_equal(output_init(&c, 8, &err), 0);
		feed_str(&c, "abcdefghijklmnopqrstuvwxyz");
		output_free(&c);
		assert_int_equal(output_init(&c, 8, &err), 0);
		feed_str(&c, second[i]);
		output_finish(&c);
		text = output_render(&c, &len);
		assert_int_equal(len, strlen(want[i]));
		assert_string_equal((char *)text, want[i]);
		assert_int_equal(c.total, strlen(second[i]));
		free(text);
		output_free(&c);
	}
}

static void test_head_and_tail_with_marker(void **state)
{
	struct output_capture c;
	struct sb_err err;
	size_t len;
	uint8_t *text;

	(void)state;
	assert_int_equal(output_init(&c, 8, &err), 0);
	/* 26 bytes in uneven chunks through an 8-byte limit: head "abcd", tail "wxyz". */
	feed_str(&c, "abc");
	feed_str(&c, "defghijklmnopqrstu");
	feed_str(&c, "vwxyz");
	output_finish(&c);
	assert_true(output_truncated(&c));
	assert_int_equal(c.total, 26);
	text = output_render(&c, &len);
	assert_string_equal((char *)text, "abcd\n[... 18 bytes omitted ...]\nwxyz");
	free(text);
	output_free(&c);
}

static void test_digest_covers_every_byte(void **state)
{
	/* SHA-256("abc"), FIPS 180-2 test vector. */
	static const char want[] = "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad";
	struct output_capture c;
	struct sb_err err;
	char hex[65];

	(void)state;
	assert_int_equal(output_init(&c, 0, &err), 0);
	feed_str(&c, "a");
	feed_str(&c, "bc");
	output_finish(&c);
	sb_hex_encode(c.digest, 32, hex);
	assert_string_equal(hex, want);
	assert_int_equal(c.total, 3);
	output_free(&c);
}

static void test_limit_over_maximum_refused(void **state)
{
	struct output_capture c;
	struct sb_err err;

	(void)state;
	assert_int_equal(output_init(&c, OUTPUT_LIMIT_MAX + 1u, &err), -1);
	assert_non_null(strstr(err.msg, "over the maximum"));
}

static void test_utf8_valid_is_untouched(void **state)
{
	const char *in = "caf\xc3\xa9 \\n \xe2\x82\xac";
	size_t len;
	bool escaped;
	char *out = textesc_encode((const uint8_t *)in, strlen(in), &len, &escaped);

	(void)state;
	assert_false(escaped);
	assert_string_equal(out, in);
	free(out);
}

static void test_utf8_invalid_is_escaped_reversibly(void **state)
{
	/* 0xff invalid; a truncated 3-byte sequence; an overlong '/' (C0 AF); a surrogate. */
	const uint8_t in[] = { 0xff, 'a', '\\', 0xe2, 0x82, 0xc0, 0xaf, 0xed, 0xa0, 0x80, 0x00 };
	size_t len;
	bool escaped;
	char *out = textesc_encode(in, sizeof in, &len, &escaped);

	(void)state;
	assert_true(escaped);
	assert_string_equal(out, "\\xffa\\\\\\xe2\\x82\\xc0\\xaf\\xed\\xa0\\x80\\x00");
	assert_int_equal(len, strlen(out));
	free(out);
}

/* NUL is valid UTF-8 but is escaped like a byte that is not: JSON could carry it only as \u0000,
 * which the journal, the manager and the CLI refuse (jansson without JSON_ALLOW_NUL). */
static void test_nul_is_escaped(void **state)
{
	size_t len;
	bool escaped;
	char *out = textesc_encode((const uint8_t *)"a\0b\\", 4, &len, &escaped);

	(void)state;
	assert_true(escaped);
	assert_string_equal(out, "a\\x00b\\\\");
	assert_int_equal(len, strlen(out));
	free(out);
}

/* The rule's one decoder (common/textesc.c: the CLI prints with it, the manager keeps files with it). */
static size_t unescape(const char *s, size_t n, bool escaped, uint8_t *out)
{
	if (!escaped) {
		memcpy(out, s, n);
		return n;
	}
	return textesc_decode(s, n, out);
}

/* Random bytes, NUL and control bytes among them, through the exec result JSON as the agent's
 * journal and the manager parse it (flags 0: no JSON_ALLOW_NUL): every stream decodes back to
 * the very bytes, with its count. */
static void test_random_bytes_through_result_json(void **state)
{
	struct exec_request req = { .exec_id = "bin", .generation = 3 };
	struct sb_err err;

	(void)state;
	for (int round = 0; round < 500; round++) {
		struct exec_outcome o = { .status = EXEC_EXITED };
		uint8_t in[300], back[300];
		size_t n = (size_t)round % sizeof in;
		json_t *j, *parsed, *text;
		json_error_t jerr;
		char *wire;

		assert_int_equal(sb_random_bytes(in, n, &err), 0);
		assert_int_equal(output_init(&o.out, 4096, &err), 0);
		assert_int_equal(output_init(&o.err, 4096, &err), 0);
		output_feed(&o.out, in, n);
		output_finish(&o.out);
		output_finish(&o.err);
		j = result_to_json(&req, &o, NULL);
		assert_non_null(j);
		wire = json_dumps(j, JSON_COMPACT);
		assert_non_null(wire);
		assert_null(strstr(wire, "\\u0000"));
		parsed = json_loads(wire, JSON_REJECT_DUPLICATES, &jerr);
		if (parsed == NULL)
			fail_msg("round %d: the result is refused by its readers: %s", round, jerr.text);
		text = json_object_get(parsed, "stdout");
		assert_int_equal(strlen(json_string_value(text)), json_string_length(text));
		assert_int_equal(json_integer_value(json_object_get(parsed, "stdout_bytes")), n);
		assert_int_equal(unescape(json_string_value(text), json_string_length(text),
					  json_is_true(json_object_get(parsed, "stdout_escaped")), back),
				 n);
		assert_memory_equal(back, in, n);
		json_decref(parsed);
		json_decref(j);
		free(wire);
		output_free(&o.out);
		output_free(&o.err);
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_small_output_kept_whole),
		cmocka_unit_test(test_head_and_tail_with_marker),
		cmocka_unit_test(test_buffers_kept_for_next_capture),
		cmocka_unit_test(test_kept_buffers_bounded_by_last_capture),
		cmocka_unit_test(test_kept_buffers_show_no_earlier_bytes),
		cmocka_unit_test(test_digest_covers_every_byte),
		cmocka_unit_test(test_limit_over_maximum_refused),
		cmocka_unit_test(test_utf8_valid_is_untouched),
		cmocka_unit_test(test_utf8_invalid_is_escaped_reversibly),
		cmocka_unit_test(test_nul_is_escaped),
		cmocka_unit_test(test_random_bytes_through_result_json),
	};
	return cmocka_run_group_tests_name("output", tests, NULL, NULL);
}
