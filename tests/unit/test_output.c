/* Unit tests for sandbox-agent/output.c: bounded head + tail, exact counts, digests, and
 * the reversible UTF-8 escaping. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "output.h"
#include "random.h"

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
	char *out = output_to_utf8((const uint8_t *)in, strlen(in), &len, &escaped);

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
	char *out = output_to_utf8(in, sizeof in, &len, &escaped);

	(void)state;
	assert_true(escaped);
	assert_int_equal(len, strlen("\\xffa\\\\\\xe2\\x82\\xc0\\xaf\\xed\\xa0\\x80") + 1);
	assert_memory_equal(out, "\\xffa\\\\\\xe2\\x82\\xc0\\xaf\\xed\\xa0\\x80\0", len);
	free(out);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_small_output_kept_whole),
		cmocka_unit_test(test_head_and_tail_with_marker),
		cmocka_unit_test(test_digest_covers_every_byte),
		cmocka_unit_test(test_limit_over_maximum_refused),
		cmocka_unit_test(test_utf8_valid_is_untouched),
		cmocka_unit_test(test_utf8_invalid_is_escaped_reversibly),
	};
	return cmocka_run_group_tests_name("output", tests, NULL, NULL);
}
