/* Unit tests for common/textesc.c: the encoder escapes every class a terminal acts on (C0 but newline
 * and tab, DEL, C1, bidi formatting, the separators) and every byte that is not UTF-8, reversibly; JSON
 * for a terminal holds none of them raw and reads back the same; the records' bounds and the MCP
 * text's shape cut between tokens, so each token must be an escape whole or one UTF-8 sequence, read
 * as textesc_decode reads them, or a cut would split an escape or a character. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>
#include <jansson.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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

/* in (n bytes) encodes to want, escaped, and decodes back to in. */
static void encodes_to(const char *in, size_t n, const char *want)
{
	uint8_t back[64];
	size_t len;
	bool escaped;
	char *out = textesc_encode((const uint8_t *)in, n, &len, &escaped);

	assert_non_null(out);
	if (!escaped || strcmp(out, want) != 0)
		fail_msg("encoded %zu bytes (first 0x%02x) as \"%s\" (escaped %d), not \"%s\"", n, (uint8_t)in[0], out,
			 escaped, want);
	assert_int_equal(len, strlen(out));
	assert_true(utf8_valid(out, len));
	assert_int_equal(textesc_decode(out, len, back), n);
	assert_memory_equal(back, in, n);
	free(out);
}

/* in travels as itself. */
static void stays_plain(const char *in)
{
	size_t len;
	bool escaped;
	char *out = textesc_encode((const uint8_t *)in, strlen(in), &len, &escaped);

	assert_non_null(out);
	if (escaped || strcmp(out, in) != 0)
		fail_msg("plain text \"%s\" was escaped as \"%s\"", in, out);
	free(out);
}

/* Every class the rule names, one character at a time, with a backslash beside it (doubled once
 * the text is escaped); and the neighbours of each range, which stay plain. */
static void test_encode_every_class(void **state)
{
	static const uint32_t bidi[] = { 0x061C, 0x200E, 0x200F, 0x202A, 0x202B, 0x202C, 0x202D,
					 0x202E, 0x2066, 0x2067, 0x2068, 0x2069, 0x2028, 0x2029 };
	char in[8], want[64];

	(void)state;
	for (int c = 0; c < 0x20; c++) { /* C0, NUL included; newline and tab are text */
		if (c == '\n' || c == '\t')
			continue;
		in[0] = (char)c, in[1] = '\\';
		snprintf(want, sizeof want, "\\x%02x\\\\", c);
		encodes_to(in, 2, want);
	}
	encodes_to("\x7f\\", 2, "\\x7f\\\\"); /* DEL */
	for (int c = 0x80; c <= 0x9F; c++) { /* C1 as UTF-8: U+009B is CSI, U+009D OSC */
		in[0] = (char)0xC2, in[1] = (char)c;
		snprintf(want, sizeof want, "\\xc2\\x%02x", c);
		encodes_to(in, 2, want);
	}
	encodes_to("\x9b[2J", 4, "\\x9b[2J"); /* the raw C1 byte, not UTF-8 */
	encodes_to("\x9d", 1, "\\x9d");
	for (size_t i = 0; i < sizeof bidi / sizeof bidi[0]; i++) {
		uint32_t cp = bidi[i];

		if (cp < 0x800) {
			in[0] = (char)(0xC0 | cp >> 6), in[1] = (char)(0x80 | (cp & 0x3F));
			snprintf(want, sizeof want, "\\x%02x\\x%02x", (uint8_t)in[0], (uint8_t)in[1]);
			encodes_to(in, 2, want);
		} else {
			in[0] = (char)(0xE0 | cp >> 12), in[1] = (char)(0x80 | (cp >> 6 & 0x3F));
			in[2] = (char)(0x80 | (cp & 0x3F));
			snprintf(want, sizeof want, "\\x%02x\\x%02x\\x%02x", (uint8_t)in[0], (uint8_t)in[1],
				 (uint8_t)in[2]);
			encodes_to(in, 3, want);
		}
	}
	encodes_to("evil\xe2\x80\xaetxt.exe", 14, "evil\\xe2\\x80\\xaetxt.exe");
	/* Text a terminal does not act on: newline, tab, a backslash, U+00A0, U+061B, U+200D (ZWJ),
	 * U+2029's and U+202E's neighbours U+2027, U+202F, U+2065, U+206A, and the euro sign. */
	stays_plain("a\tb\nc\\d \xc2\xa0 \xd8\x9b \xe2\x80\x8d \xe2\x80\xa7 \xe2\x80\xaf \xe2\x81\xa5 \xe2\x81\xaa \xe2\x82\xac");
	assert_int_equal(textesc_plain_len((const uint8_t *)"\xe2\x80\xae", 3), 0);
	assert_int_equal(textesc_plain_len((const uint8_t *)"\xe2\x80\xaf", 3), 3);
}

/* JSON for a terminal: no DEL, C1, bidi or separator character raw, whatever field holds it; ESC
 * as jansson writes it; other text (U+00E9) as it is; JSON_INDENT's newlines kept; read back by a
 * JSON parser to the very string. */
static void test_json_dumps_holds_no_acting_character(void **state)
{
	const char s[] = "\x1b[1m\x7f \xc2\x9b\xc2\x9d caf\xc3\xa9 \xe2\x80\xae\xe2\x81\xa6\xd8\x9c\xe2\x80\xa8 \\";
	json_t *j = json_pack("{s:s, s:[s]}", "stdout", s, "k\xe2\x80\x8f", s), *back;
	char *text;

	(void)state;
	assert_non_null(j);
	text = textesc_json_dumps(j, JSON_INDENT(2) | JSON_SORT_KEYS);
	assert_non_null(text);
	for (const char *bad = "\x1b\x7f"; *bad; bad++)
		assert_null(strchr(text, *bad));
	assert_null(strstr(text, "\xc2\x9b"));
	assert_null(strstr(text, "\xc2\x9d"));
	assert_null(strstr(text, "\xe2\x80\xae"));
	assert_null(strstr(text, "\xe2\x80\x8f"));
	assert_null(strstr(text, "\xe2\x81\xa6"));
	assert_null(strstr(text, "\xd8\x9c"));
	assert_null(strstr(text, "\xe2\x80\xa8"));
	assert_non_null(strstr(text, "\\u001B[1m\\u007F \\u009B\\u009D caf\xc3\xa9 \\u202E\\u2066\\u061C\\u2028 \\\\"));
	assert_non_null(strstr(text, "\"k\\u200F\""));
	assert_non_null(strstr(text, "{\n  \""));
	back = json_loads(text, JSON_REJECT_DUPLICATES, NULL);
	assert_non_null(back);
	assert_true(json_equal(back, j));
	json_decref(back);
	json_decref(j);
	free(text);
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
		text = textesc_encode(in, sizeof in, &len, &escaped);
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
		cmocka_unit_test(test_encode_every_class),
		cmocka_unit_test(test_json_dumps_holds_no_acting_character),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
