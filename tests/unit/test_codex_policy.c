/* Unit tests for manager/front/codex_policy.c: the Codex bridge keeps Codex's own shell off in
 * thread/resume and thread/fork (thread/start adds the bash tool too, which needs the daemon: the
 * integration tests, manager_codex.sh), refuses what could turn it back on, and names the methods
 * that run a command on the host. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "codex_policy.h"

static const struct bash_tool_view view = { 30000, false };
static const struct follow_list managers = { .n = 1, .path = { "/nonexistent/manager.sock" }, .owned_wait_ms = 0 };
static const struct daemon_peer peer = { &managers, "s", "test" };

/* codex_policy_thread for a resume of text (a JSON request): its return, the request after, why. */
static int resume(const char *text, json_t **request, char *why, size_t cap)
{
	*request = json_loads(text, 0, NULL);
	assert_non_null(*request);
	why[0] = '\0';
	return codex_policy_thread(*request, 0, &view, &peer, why, cap);
}

static void test_shell_forced_off(void **state)
{
	json_t *req;
	char why[512];

	(void)state;
	/* No params at all: the shell is turned off in a config made for it. */
	assert_int_equal(resume("{\"method\":\"thread/resume\",\"id\":1}", &req, why, sizeof why), 0);
	assert_true(json_is_false(json_object_get(json_object_get(json_object_get(req, "params"), "config"),
						  "features.shell_tool")));
	assert_true(json_is_false(json_object_get(json_object_get(json_object_get(req, "params"), "config"),
						  "features.unified_exec")));
	json_decref(req);
	/* A config of the caller's keeps its own keys beside ours. */
	assert_int_equal(resume("{\"params\":{\"config\":{\"model\":\"m\",\"features.unified_exec\":false}}}", &req, why,
				sizeof why), 0);
	assert_string_equal(json_string_value(json_object_get(json_object_get(json_object_get(req, "params"), "config"),
							      "model")), "m");
	json_decref(req);
}

static void test_shell_on_refused(void **state)
{
	static const char *const refused[][2] = {
		{ "{\"params\":{\"config\":{\"features.shell_tool\":true}}}", "features.shell_tool must stay false" },
		{ "{\"params\":{\"config\":{\"features\":{\"unified_exec\":true}}}}", "features.unified_exec must stay false" },
		{ "{\"params\":{\"config\":{\"profile\":\"p\"}}}", "config key 'profile' is refused" },
		{ "{\"params\":{\"config\":{\"features\":[]}}}", "config.features must be an object" },
		{ "{\"params\":{\"config\":[]}}", "params.config must be an object" },
		{ "{\"params\":[]}", "params must be an object" },
	};
	json_t *req;
	char why[512];

	(void)state;
	for (size_t i = 0; i < sizeof refused / sizeof refused[0]; i++) {
		assert_int_equal(resume(refused[i][0], &req, why, sizeof why), -1);
		if (strstr(why, refused[i][1]) == NULL)
			fail_msg("%s: '%s' does not say '%s'", refused[i][0], why, refused[i][1]);
		json_decref(req);
	}
}

static void test_host_exec_methods(void **state)
{
	(void)state;
	assert_true(codex_policy_host_exec("thread/shellCommand"));
	assert_true(codex_policy_host_exec("command/exec"));
	assert_true(codex_policy_host_exec("process/spawn"));
	assert_false(codex_policy_host_exec("thread/start"));
	assert_false(codex_policy_host_exec("command/exec/x"));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_shell_forced_off),
		cmocka_unit_test(test_shell_on_refused),
		cmocka_unit_test(test_host_exec_methods),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
