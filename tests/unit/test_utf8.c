/* Unit tests for common/utf8.c: RFC 3629 exactly (every boundary of each length, overlongs,
 * surrogates, above U+10FFFF, cut-short sequences), and agreement with jansson, which the records
 * and the CLI rely on when they ask before building a JSON string. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>
#include <jansson.h>
#include <string.h>

#include "utf8.h"

#define LEN(s) utf8_seq_len((const uint8_t *)(s), sizeof(s) - 1)

static void test_seq_len_boundaries(void **state)
{
	(void)state;
	assert_int_equal(utf8_seq_len((const uint8_t *)"", 1), 1); /* NUL: one valid byte */
	assert_int_equal(LEN("A"), 1);
	assert_int_equal(LEN("\x7f"), 1);
	assert_int_equal(LEN("\xc2\x80"), 2);          /* U+0080, the first two-byte */
	assert_int_equal(LEN("\xdf\xbf"), 2);          /* U+07FF */
	assert_int_equal(LEN("\xe0\xa0\x80"), 3);      /* U+0800 */
	assert_int_equal(LEN("\xed\x9f\xbf"), 3);      /* U+D7FF, just below the surrogates */
	assert_int_equal(LEN("\xee\x80\x80"), 3);      /* U+E000, just above them */
	assert_int_equal(LEN("\xef\xbf\xbf"), 3);      /* U+FFFF */
	assert_int_equal(LEN("\xf0\x90\x80\x80"), 4);  /* U+10000 */
	assert_int_equal(LEN("\xf4\x8f\xbf\xbf"), 4);  /* U+10FFFF, the last */
	assert_int_equal(LEN("\xe2\x82\xac" "x"), 3);  /* the length of the first sequence only */
}

static void test_seq_len_refusals(void **state)
{
	(void)state;
	assert_int_equal(LEN("\x80"), 0);              /* a lone continuation byte */
	assert_int_equal(LEN("\xbf"), 0);
	assert_int_equal(LEN("\xc0\x80"), 0);          /* overlong NUL */
	assert_int_equal(LEN("\xc1\xbf"), 0);          /* overlong U+007F */
	assert_int_equal(LEN("\xe0\x9f\xbf"), 0);      /* overlong U+07FF */
	assert_int_equal(LEN("\xf0\x8f\xbf\xbf"), 0);  /* overlong U+FFFF */
	assert_int_equal(LEN("\xed\xa0\x80"), 0);      /* U+D800, a surrogate */
	assert_int_equal(LEN("\xed\xbf\xbf"), 0);      /* U+DFFF */
	assert_int_equal(LEN("\xf4\x90\x80\x80"), 0);  /* U+110000 */
	assert_int_equal(LEN("\xf5\x80\x80\x80"), 0);  /* no lead byte above 0xF4 */
	assert_int_equal(LEN("\xff"), 0);
	assert_int_equal(LEN("\xc3" "A"), 0);          /* a lead byte without its continuation */
	assert_int_equal(LEN("\xe2\x82"), 0);          /* cut short by the end */
	assert_int_equal(utf8_seq_len((const uint8_t *)"\xf0\x90\x80\x80", 3), 0);
}

static void test_valid(void **state)
{
	(void)state;
	assert_true(utf8_valid("", 0));
	assert_true(utf8_valid_str("plain text"));
	assert_true(utf8_valid_str("gr\xc3\xbc\xc3\x9f \xe2\x82\xac \xf0\x9f\x98\x80"));
	assert_false(utf8_valid_str("tail \xc3"));
	assert_false(utf8_valid_str("\xed\xa0\x80 surrogate"));
	assert_true(utf8_valid("a\0b", 3));              /* NUL inside counted text is valid UTF-8 */
	assert_false(utf8_valid("ok\xe2\x82\xac", 4));   /* a sequence cut by the length */
	assert_true(utf8_valid("ok\xe2\x82\xac", 5));
}

/* The check and jansson agree on every one- and two-byte string and on every three-byte lead: the
 * records and the CLI use it to refuse before jansson would. */
static void test_agrees_with_jansson(void **state)
{
	unsigned char s[4] = { 0 };

	(void)state;
	for (unsigned a = 1; a < 256; a++) {
		for (unsigned b = 0; b < 256; b++) {
			json_t *j;

			s[0] = (unsigned char)a;
			s[1] = (unsigned char)b;
			s[2] = 0x80;
			j = json_stringn((const char *)s, b ? 3 : 1);
			assert_int_equal(utf8_valid(s, b ? 3 : 1), j != NULL);
			json_decref(j);
		}
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_seq_len_boundaries),
		cmocka_unit_test(test_seq_len_refusals),
		cmocka_unit_test(test_valid),
		cmocka_unit_test(test_agrees_with_jansson),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
