/* Unit tests for manager/front/live_summary.c: the MCP progress message's view of live output is the
 * newest line with something to show, never a byte a terminal acts on, capped without cutting a
 * UTF-8 sequence. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "live_summary.h"
#include "textesc.h"

static bool take(char *summary, const char *text)
{
	return live_summary_take(summary, text, strlen(text), false);
}

static void test_last_line_with_something(void **state)
{
	char s[LIVE_SUMMARY_MAX + 1] = "";

	(void)state;
	assert_true(take(s, "line 1\nline 2\n"));
	assert_string_equal(s, "line 2");
	/* blank lines and a chunk of only newlines keep what was there */
	assert_true(take(s, "line 3\n\n  \n"));
	assert_string_equal(s, "line 3");
	assert_false(take(s, "\n\n"));
	assert_string_equal(s, "line 3");
	/* a progress bar: the state after its last carriage return */
	assert_true(take(s, "10%\r55%\r"));
	assert_string_equal(s, "55%");
}

/* Controls, escape sequences, DEL, C1 and bidi characters never reach the message. */
static void test_terminal_safe(void **state)
{
	char s[LIVE_SUMMARY_MAX + 1] = "";
	const char evil[] = "\x1b[31mred\x1b[0m\x07 \x7f\xc2\x9b" "2J\xe2\x80\xaetxt\tend\x1b]0;title\x07\n";

	(void)state;
	assert_true(take(s, evil));
	for (size_t i = 0; s[i] != '\0'; i++) {
		assert_true((unsigned char)s[i] >= 0x20 && (unsigned char)s[i] != 0x7f);
		assert_int_not_equal(textesc_plain_len((const uint8_t *)s + i, strlen(s + i)), 0);
	}
	assert_null(strstr(s, "\xe2\x80\xae"));
	assert_null(strstr(s, "\xc2\x9b"));
	assert_non_null(strstr(s, "red"));
	assert_non_null(strstr(s, "txt end"));
}

/* Long lines are capped, and never in the middle of a UTF-8 sequence. */
static void test_capped_on_a_sequence(void **state)
{
	char s[LIVE_SUMMARY_MAX + 1] = "", text[1024] = "";

	(void)state;
	for (int i = 0; i < 200; i++)
		strcat(text, "\xc3\xa9"); /* é, two bytes */
	strcat(text, "\n");
	assert_true(take(s, text));
	assert_true(strlen(s) <= LIVE_SUMMARY_MAX);
	assert_int_equal(strlen(s) % 2, 0);
	assert_int_equal(textesc_plain_len((const uint8_t *)s + strlen(s) - 2, 2), 2);
}

/* The chunk's escaped form (the exec result's rule) is read back before the line is taken. */
static void test_escaped_chunk(void **state)
{
	char s[LIVE_SUMMARY_MAX + 1] = "";
	const char text[] = "bin\\xffary ok\n";

	(void)state;
	assert_true(live_summary_take(s, text, strlen(text), true));
	assert_string_equal(s, "binary ok");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_last_line_with_something),
		cmocka_unit_test(test_terminal_safe),
		cmocka_unit_test(test_capped_on_a_sequence),
		cmocka_unit_test(test_escaped_chunk),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
