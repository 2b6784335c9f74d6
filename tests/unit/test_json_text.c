/* Unit tests for common/json_text.c: sb_json_dumps writes what json_dumps writes, byte for byte, with
 * every flag the project passes, on both sides of its scratch (a text that fits, one exactly its size,
 * one a byte past it, one far past it, which is written a second time), and its length; and it refuses
 * what json_dumps refuses. A receipt's HMAC is computed over this text (common/receipt_mac.c): a byte
 * that differed from json_dumps' would fail every receipt signed before. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "json_text.h"

#define SCRATCH JSON_TEXT_SCRATCH /* the boundary the cases below stand on */

static void same_as_json_dumps(const json_t *j, size_t flags)
{
	char *want = json_dumps(j, flags);
	size_t len = 0;
	char *got = sb_json_dumps(j, flags, &len);

	assert_non_null(want);
	assert_non_null(got);
	assert_string_equal(got, want);
	assert_int_equal(len, strlen(want));
	free(want);
	free(got);
}

/* {"s":"xxx..."} whose compact text is exactly total bytes long ({"s":""} is 8). */
static json_t *object_of_length(size_t total)
{
	char *fill = malloc(total - 8 + 1);
	json_t *j;

	assert_non_null(fill);
	memset(fill, 'x', total - 8);
	fill[total - 8] = '\0';
	j = json_pack("{s:s}", "s", fill);
	free(fill);
	assert_non_null(j);
	return j;
}

static void test_around_the_scratch(void **state)
{
	static const size_t lengths[] = { 8, SCRATCH - 1, SCRATCH, SCRATCH + 1, 3 * SCRATCH, 1 << 20 };

	(void)state;
	for (size_t i = 0; i < sizeof lengths / sizeof lengths[0]; i++) {
		json_t *j = object_of_length(lengths[i]);
		size_t len = 0;
		char *text = sb_json_dumps(j, JSON_COMPACT, &len);

		assert_non_null(text);
		assert_int_equal(len, lengths[i]);
		assert_int_equal(strlen(text), lengths[i]);
		assert_memory_equal(text, "{\"s\":\"", 6);
		assert_string_equal(text + len - 2, "\"}");
		free(text);
		same_as_json_dumps(j, JSON_COMPACT);
		json_decref(j);
	}
}

/* A receipt's flags: sorted keys, ASCII only (escapes lengthen the text past the scratch), nested. */
static void test_receipt_flags(void **state)
{
	json_t *j = json_pack("{s:s, s:i, s:{s:b, s:n}, s:[i, s], s:s}", "zeta", "caf\xc3\xa9 \xe2\x80\xae", "alpha", 1,
			      "mid", "t", 1, "f", "list", 2, "\x01\t\"\\", "big", "");
	char big[SCRATCH];

	(void)state;
	assert_non_null(j);
	same_as_json_dumps(j, JSON_COMPACT | JSON_SORT_KEYS | JSON_ENSURE_ASCII);
	same_as_json_dumps(j, JSON_COMPACT);
	same_as_json_dumps(j, JSON_INDENT(2));
	/* Each é is two bytes in and six out: the measured length, not the input's, sizes the room. */
	for (size_t i = 0; i + 2 < sizeof big; i += 2)
		memcpy(big + i, "\xc3\xa9", 2);
	big[sizeof big - 2] = '\0';
	json_object_set_new(j, "big", json_string(big));
	same_as_json_dumps(j, JSON_COMPACT | JSON_SORT_KEYS | JSON_ENSURE_ASCII);
	json_decref(j);
}

static void test_refuses_what_json_dumps_refuses(void **state)
{
	json_t *n = json_integer(7);
	size_t len = 99;
	char *text;

	(void)state;
	assert_null(json_dumps(n, JSON_COMPACT));
	assert_null(sb_json_dumps(n, JSON_COMPACT, &len));
	assert_int_equal(len, 99); /* untouched on failure */
	text = sb_json_dumps(n, JSON_COMPACT | JSON_ENCODE_ANY, NULL);
	assert_non_null(text);
	assert_string_equal(text, "7");
	free(text);
	json_decref(n);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_around_the_scratch),
		cmocka_unit_test(test_receipt_flags),
		cmocka_unit_test(test_refuses_what_json_dumps_refuses),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
