/* Unit tests for sandbox-agent/steptime.c: what the timing line of a call on a prebuilt init counts.
 * A call that waited for its init's build found the build's marks in the shared page (they came after
 * the call's reset); without steptime_forget_build() its cmd_fork was counted from the build's last mark,
 * which is how a wait for the build once read as a slow start of the command (docs/performance.md). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include <cmocka.h>

#include "steptime.h"

static void test_forget_build_keeps_the_calls_marks(void **state)
{
	(void)state;
	assert_int_equal(setenv("SANDBOX_AGENT_TIMING", "1", 1), 0);
	steptime_init();
	assert_non_null(steptime_page);
	steptime_reset();
	for (int s = STEP_REQUEST; s < STEP_COUNT; s++)
		steptime_page->ns[s] = 1000 + s;
	steptime_forget_build();
	for (int s = STEP_REQUEST; s < STEP_COUNT; s++) {
		if (s >= STEP_INIT_GO && s <= STEP_INIT_DROPPED)
			assert_int_equal(steptime_page->ns[s], 0);
		else
			assert_int_equal(steptime_page->ns[s], 1000 + s);
	}
	/* The build's steps are exactly those between the release and the command's start. */
	assert_int_equal(STEP_INIT_GO, STEP_RELEASED + 1);
	assert_int_equal(STEP_CMD_START, STEP_INIT_DROPPED + 1);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_forget_build_keeps_the_calls_marks),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
