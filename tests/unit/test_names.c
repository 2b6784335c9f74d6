/* Unit tests for common/names.c: the one exec-id rule and the one environment-name rule, every
 * byte class included, so no copy elsewhere can drift from them. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "names.h"

static bool id_ok_char(int c)
{
	return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' || c == '_' ||
	       c == '-';
}

static void test_exec_id_accepts(void **state)
{
	char longest[EXEC_ID_MAX + 1];

	(void)state;
	assert_true(exec_id_valid("a"));
	assert_true(exec_id_valid("3f2a"));
	assert_true(exec_id_valid("A.b_c-9"));
	assert_true(exec_id_valid("x.."));
	memset(longest, 'z', EXEC_ID_MAX);
	longest[EXEC_ID_MAX] = '\0';
	assert_true(exec_id_valid(longest));
}

static void test_exec_id_refuses_shape(void **state)
{
	char too_long[EXEC_ID_MAX + 2];

	(void)state;
	assert_false(exec_id_valid(NULL));
	assert_false(exec_id_valid(""));
	assert_false(exec_id_valid("."));
	assert_false(exec_id_valid(".."));
	assert_false(exec_id_valid(".hidden"));
	assert_false(exec_id_valid("-rf"));
	memset(too_long, 'z', EXEC_ID_MAX + 1);
	too_long[EXEC_ID_MAX + 1] = '\0';
	assert_false(exec_id_valid(too_long));
}

/* Every byte from 1 to 255, in the middle of an id: exactly [A-Za-z0-9._-] passes; '/', space,
 * controls, quotes and every byte >= 0x80 (UTF-8 or not) do not. */
static void test_exec_id_every_byte(void **state)
{
	char id[4] = "a?b";

	(void)state;
	for (int c = 1; c < 256; c++) {
		id[1] = (char)c;
		if (exec_id_valid(id) != id_ok_char(c))
			fail_msg("byte 0x%02x: exec_id_valid gave %d", c, exec_id_valid(id));
	}
	assert_false(exec_id_valid("a\xc3\xa9"));
	assert_false(exec_id_valid("\x80"));
}

static void test_name_component_max(void **state)
{
	(void)state;
	assert_true(name_component_valid("agent.crt", 200));
	assert_true(name_component_valid("abc", 3));
	assert_false(name_component_valid("abcd", 3));
	assert_false(name_component_valid("a/b", 200));
	assert_false(name_component_valid("-x", 200));
}

static void test_env_name(void **state)
{
	char longest[ENV_NAME_MAX + 2];
	const char *kv = "PATH=/bin";

	(void)state;
	assert_true(env_name_valid("PATH", 4));
	assert_true(env_name_valid("_", 1));
	assert_true(env_name_valid("a1_B2", 5));
	assert_true(env_name_valid(kv, 4)); /* "NAME=value": the length stops at the '=' */
	assert_false(env_name_valid(kv, 5));
	assert_false(env_name_valid(NULL, 0));
	assert_false(env_name_valid("", 0));
	assert_false(env_name_valid("1A", 2));
	assert_false(env_name_valid("A-B", 3));
	assert_false(env_name_valid("A.B", 3));
	memset(longest, 'A', sizeof longest);
	assert_true(env_name_valid(longest, ENV_NAME_MAX));
	assert_false(env_name_valid(longest, ENV_NAME_MAX + 1));
}

static void test_env_name_every_byte(void **state)
{
	char name[3] = "A?";

	(void)state;
	for (int c = 1; c < 256; c++) {
		bool want = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_';

		name[1] = (char)c;
		if (env_name_valid(name, 2) != want)
			fail_msg("byte 0x%02x: env_name_valid gave %d", c, env_name_valid(name, 2));
	}
	/* A NUL inside the counted length is not a name byte either. */
	assert_false(env_name_valid("A\0B", 3));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_exec_id_accepts),
		cmocka_unit_test(test_exec_id_refuses_shape),
		cmocka_unit_test(test_exec_id_every_byte),
		cmocka_unit_test(test_name_component_max),
		cmocka_unit_test(test_env_name),
		cmocka_unit_test(test_env_name_every_byte),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
