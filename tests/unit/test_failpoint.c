/* Unit tests for common/failpoint.c, compiled here with SB_FAILPOINTS (the library's copy is empty
 * in every normal build): the spec grammar, exactly one firing at the Nth hit of the armed name, and
 * the firing is a SIGKILL of the whole process (":stop" a SIGSTOP). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#define SB_FAILPOINTS 1
#include "failpoint.c"

static void test_spec_grammar(void **state)
{
	(void)state;
	assert_int_equal(failpoint_arm("manager.exec.sent"), 0);
	assert_int_equal(failpoint_arm("manager.exec.sent:3"), 0);
	assert_int_equal(failpoint_arm("manager.exec.sent:3:stop"), 0);
	assert_int_equal(failpoint_arm("manager.exec.sent:stop"), 0);
	assert_int_equal(failpoint_arm(""), -1);
	assert_int_equal(failpoint_arm(":2"), -1);
	assert_int_equal(failpoint_arm("a:"), -1);
	assert_int_equal(failpoint_arm("a:0"), -1);
	assert_int_equal(failpoint_arm("a:-1"), -1);
	assert_int_equal(failpoint_arm("a:2x"), -1);
	assert_int_equal(failpoint_arm("a:2:kill"), -1);
	assert_int_equal(failpoint_arm("a:99999999999999999999999"), -1);
	/* a refused spec leaves nothing armed */
	assert_false(failpoint_hit("a"));
}

static void test_nth_hit_only(void **state)
{
	(void)state;
	assert_int_equal(failpoint_arm("p.q"), 0);
	assert_false(failpoint_hit("p.other"));
	assert_true(failpoint_hit("p.q"));
	assert_false(failpoint_hit("p.q"));
	assert_int_equal(failpoint_arm("p.q:3"), 0);
	assert_false(failpoint_hit("p.q"));
	assert_false(failpoint_hit("p.qq"));
	assert_false(failpoint_hit("p.q"));
	assert_true(failpoint_hit("p.q"));
	assert_false(failpoint_hit("p.q"));
}

/* The action, in a child: SIGKILL by default, SIGSTOP with ":stop"; another name does nothing. */
static int fire_in_child(const char *spec, int options)
{
	int status = 0;
	pid_t pid = fork();

	if (pid == 0) {
		if (failpoint_arm(spec) < 0)
			_exit(3);
		failpoint_fire("p.other");
		failpoint_fire("p.q");
		_exit(0);
	}
	assert_true(pid > 0);
	assert_int_equal(waitpid(pid, &status, options), pid);
	if (WIFSTOPPED(status)) {
		kill(pid, SIGKILL);
		waitpid(pid, NULL, 0);
	}
	return status;
}

static void test_fire_actions(void **state)
{
	int status;

	(void)state;
	status = fire_in_child("p.q", 0);
	assert_true(WIFSIGNALED(status));
	assert_int_equal(WTERMSIG(status), SIGKILL);
	status = fire_in_child("p.q:stop", WUNTRACED);
	assert_true(WIFSTOPPED(status));
	assert_int_equal(WSTOPSIG(status), SIGSTOP);
	status = fire_in_child("p.q:2", 0); /* only one hit: never fires */
	assert_true(WIFEXITED(status));
	assert_int_equal(WEXITSTATUS(status), 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_spec_grammar),
		cmocka_unit_test(test_nth_hit_only),
		cmocka_unit_test(test_fire_actions),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
