/* Unit tests for common/textesc.c's tokens and common/random.c's hex digit: the records' bounds and
 * the MCP text's shape cut between tokens, so each token must be an escape whole or one UTF-8
 * sequence, read as textesc_decode reads them, or a cut would split an escape or a character. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "output.h"
#include "random.h"
#include "textesc.h"
#include "utf8.h"

static void test_hex_value(void **state)
{
	(void)state;
	assert_int_equal(sb_hex_value('0'), 0);
	assert_int_equal(sb_hex_value('9'), 9);
	assert_int_equal(sb_hex_value('a'), 10);
	assert_int_equal(sb_hex_value('F'), 15);
	assert_int_equal(sb_hex_value('g'), -1);
	assert_int_equal(sb_hex_value('/'), -1);
	assert_int_equal(sb_hex_value('\0'), -1);
}

static void test_tokens(void **state)
{
	const char esc[] = "a\\\\\\x00\\xzz\xc3\xa9\xff";
	size_t n = sizeof esc - 1;

	(void)state;
	/* Escaped: "a", "\\\\", "\\x00", then "\\xzz" is no escape (the decoder keeps its backslash). */
	assert_int_equal(textesc_token_len(esc, n, 0, true), 1);
	assert_int_equal(textesc_token_len(esc, n, 1, true), 2);
	assert_int_equal(textesc_token_len(esc, n, 3, true), 4);
	assert_int_equal(textesc_token_len(esc, n, 7, true), 1);
	assert_int_equal(textesc_token_len(esc, n, 11, true), 2); /* U+00E9 */
	assert_int_equal(textesc_token_len(esc, n, 13, true), 1); /* a byte that starts nothing */
	/* Plain text: a backslash is itself. */
	assert_int_equal(textesc_token_len(esc, n, 1, false), 1);
	assert_int_equal(textesc_token_len(esc, n, 3, false), 1);
	/* An escape cut by the end is not one. */
	assert_int_equal(textesc_token_len("\\x4", 3, 0, true), 1);
	assert_int_equal(textesc_token_len("\\", 1, 0, true), 1);
}

/* Random bytes through the agent's escaping: every token decodes on its own to what the whole
 * decode gives at that place, so a cut between tokens never changes a byte. */
static void test_tokens_match_decoder(void **state)
{
	uint8_t in[4096], whole[4096 * 4], part[8];
	struct sb_err err;

	(void)state;
	for (int round = 0; round < 50; round++) {
		size_t len, at = 0, dn;
		bool escaped;
		char *text;

		assert_int_equal(sb_random_bytes(in, sizeof in, &err), 0);
		for (size_t i = 0; i < sizeof in; i += 7)
			in[i] = (uint8_t)(round & 1 ? '\\' : 'x'); /* plenty of backslashes and x's */
		text = output_to_utf8(in, sizeof in, &len, &escaped);
		assert_non_null(text);
		assert_true(escaped);
		dn = textesc_decode(text, len, whole);
		assert_int_equal(dn, sizeof in);
		for (size_t i = 0, k, pn; i < len; i += k) {
			k = textesc_token_len(text, len, i, true);
			assert_true(k >= 1 && k <= 4 && i + k <= len);
			assert_true(utf8_valid(text + i, k));
			pn = textesc_decode(text + i, k, part);
			assert_memory_equal(part, whole + at, pn);
			at += pn;
		}
		assert_int_equal(at, sizeof in);
		free(text);
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_hex_value),
		cmocka_unit_test(test_tokens),
		cmocka_unit_test(test_tokens_match_decoder),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
