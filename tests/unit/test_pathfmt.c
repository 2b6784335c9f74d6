/* Unit tests for common/pathfmt.c and common/clock.c: a path that does not fit is ENAMETOOLONG and
 * leaves no usable path; the clock helpers clamp as poll() needs. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>
#include <errno.h>
#include <limits.h>

#include "clock.h"
#include "pathfmt.h"

static void test_path_fits(void **state)
{
	char out[8];
	struct sb_err err;

	(void)state;
	assert_int_equal(path_fmt(out, sizeof out, &err, "%s/%s", "abc", "def"), 0); /* 7 bytes + NUL */
	assert_string_equal(out, "abc/def");
}

static void test_path_too_long(void **state)
{
	char out[8];
	struct sb_err err;

	(void)state;
	assert_int_equal(path_fmt(out, sizeof out, &err, "%s/%s", "abc", "defg"), -1);
	assert_int_equal(err.errnum, ENAMETOOLONG);
	assert_string_equal(out, ""); /* never a shorter path that names something else */
	assert_non_null(strstr(err.msg, "path too long"));
}

static void test_clock(void **state)
{
	int64_t a, b;

	(void)state;
	a = clock_mono_ms();
	b = clock_mono_ms();
	assert_true(b >= a);
	assert_true(clock_real_ms() > 1600000000000LL); /* after 2020: the real-time clock */
	assert_int_equal(clock_remaining_ms(a - 1), 0);
	assert_int_equal(clock_remaining_ms(INT64_MAX / 2), INT_MAX);
	assert_true(clock_remaining_ms(clock_deadline_after(60000)) > 50000);
	assert_true(clock_deadline_after(-5) <= clock_mono_ms());
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_path_fits),
		cmocka_unit_test(test_path_too_long),
		cmocka_unit_test(test_clock),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
