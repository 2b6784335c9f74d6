/* Unit tests for manager/front/bash_tool.c: what a model reads of a call. The structured result is
 * exactly the fields of the output schema, its `output` is the content's text, and no exec id,
 * receipt, nonce or host path reaches it, for every outcome. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "bash_tool.h"

static const struct bash_tool_view structured = { .max_output_chars = 1000, .structured = true };
static const struct bash_tool_view text_only = { .max_output_chars = 1000, .structured = false };

/* An exec result as the daemon sends one, with the fields a model must not see. */
static json_t *exec_result(const char *status, json_t *exit_code, const char *out, const char *err)
{
	json_t *r = json_pack("{s:s, s:s, s:o, s:n, s:s, s:s, s:i, s:i, s:b, s:b, s:b, s:b, s:i, s:i, s:{s:s, s:s, s:b}}",
			      "exec_id", "0123456789abcdef01234567", "status", status, "exit_code", exit_code, "signal",
			      "stdout", out, "stderr", err, "stdout_bytes", (int)strlen(out), "stderr_bytes",
			      (int)strlen(err), "stdout_truncated", 0, "stderr_truncated", 0, "stdout_escaped", 0,
			      "stderr_escaped", 0, "duration_ms", 42, "generation", 1, "receipt", "nonce",
			      "feedc0de", "path", "/var/lib/infra-sandbox/receipts/r.json", "verified", 1);

	assert_non_null(r);
	return r;
}

static const char *content_text(json_t *res)
{
	return json_string_value(json_object_get(json_array_get(json_object_get(res, "content"), 0), "text"));
}

/* The structured result's keys are the schema's required ones, nothing more, and it hides the rest. */
static void assert_model_view(json_t *res)
{
	json_t *sc = json_object_get(res, "structuredContent"), *schema = bash_tool_output_schema();
	json_t *req = json_object_get(schema, "required");
	char *dump;

	assert_non_null(sc);
	assert_int_equal(json_object_size(sc), json_array_size(req));
	assert_int_equal(json_object_size(json_object_get(schema, "properties")), json_array_size(req));
	for (size_t i = 0; i < json_array_size(req); i++)
		assert_non_null(json_object_get(sc, json_string_value(json_array_get(req, i))));
	assert_string_equal(json_string_value(json_object_get(sc, "output")), content_text(res));
	dump = json_dumps(sc, JSON_COMPACT);
	assert_non_null(dump);
	assert_null(strstr(dump, "0123456789abcdef"));
	assert_null(strstr(dump, "feedc0de"));
	assert_null(strstr(dump, "receipt"));
	assert_null(strstr(dump, "/var/lib"));
	free(dump);
	json_decref(schema);
}

static void test_exit_code(void **state)
{
	json_t *res = bash_tool_result(&structured, exec_result("exited", json_integer(3), "out\n", "err\n"), 10);
	char *dump;

	(void)state;
	assert_string_equal(content_text(res), "out\n[stderr]\nerr\nexit code 3");
	assert_true(json_is_false(json_object_get(res, "isError")));
	assert_model_view(res);
	dump = json_dumps(json_object_get(res, "structuredContent"), JSON_COMPACT);
	assert_string_equal(dump, "{\"status\":\"exited\",\"exit_code\":3,\"signal\":null,\"timed_out\":false,"
				  "\"duration_ms\":42,\"output\":\"out\\n[stderr]\\nerr\\nexit code 3\",\"stdout_bytes\":4,"
				  "\"stderr_bytes\":4,\"truncated\":false,\"output_files\":{}}");
	free(dump);
	json_decref(res);
}

static void test_timeout(void **state)
{
	json_t *res = bash_tool_result(&structured, exec_result("timed_out", json_null(), "started\n", ""), 7);
	json_t *sc = json_object_get(res, "structuredContent");

	(void)state;
	assert_string_equal(content_text(res), "started\ntimed out after 7 s");
	assert_true(json_is_true(json_object_get(res, "isError")));
	assert_true(json_is_true(json_object_get(sc, "timed_out")));
	assert_true(json_is_null(json_object_get(sc, "exit_code")));
	assert_model_view(res);
	json_decref(res);
}

static void test_refused_and_lost(void **state)
{
	json_t *res = bash_tool_refusal(&structured, "sandbox-manager unavailable: down");
	json_t *sc = json_object_get(res, "structuredContent");

	(void)state;
	assert_string_equal(content_text(res), "refused: sandbox-manager unavailable: down");
	assert_true(json_is_true(json_object_get(res, "isError")));
	assert_string_equal(json_string_value(json_object_get(sc, "status")), "refused");
	assert_true(json_is_null(json_object_get(sc, "duration_ms")));
	assert_model_view(res);
	json_decref(res);

	res = bash_tool_lost(&structured, "the connection broke", 10);
	assert_string_equal(content_text(res), "outcome uncertain: the connection broke");
	assert_string_equal(json_string_value(json_object_get(json_object_get(res, "structuredContent"), "status")),
			    "uncertain");
	assert_model_view(res);
	json_decref(res);
}

/* A cut stream: the same head, marker and tail in both, the kept file named, truncated true. */
static void test_truncated(void **state)
{
	char big[5000];
	json_t *r, *res, *sc;

	(void)state;
	for (size_t i = 0; i < sizeof big - 1; i++)
		big[i] = i % 10 == 9 ? '\n' : 'a';
	big[sizeof big - 1] = '\0';
	r = exec_result("exited", json_integer(0), big, "");
	json_object_set_new(r, "output_kept", json_pack("{s:s}", "stdout", "/wt/.sandbox-tmp/.outputs/exec-x.stdout"));
	res = bash_tool_result(&structured, r, 10);
	sc = json_object_get(res, "structuredContent");
	assert_true(strlen(content_text(res)) <= 1000);
	assert_non_null(strstr(content_text(res), "in /wt/.sandbox-tmp/.outputs/exec-x.stdout ...]"));
	assert_true(json_is_true(json_object_get(sc, "truncated")));
	assert_int_equal(json_integer_value(json_object_get(sc, "stdout_bytes")), sizeof big - 1);
	assert_string_equal(json_string_value(json_object_get(json_object_get(sc, "output_files"), "stdout")),
			    "/wt/.sandbox-tmp/.outputs/exec-x.stdout");
	assert_model_view(res);
	json_decref(res);
}

/* An agent-cut stream within the limit: truncated, and no file (none was written). */
static void test_agent_cut(void **state)
{
	json_t *r = exec_result("exited", json_integer(0), "head\ntail\n", ""), *res, *sc;

	(void)state;
	json_object_set_new(r, "stdout_truncated", json_true());
	json_object_set_new(r, "stdout_bytes", json_integer(9000000));
	res = bash_tool_result(&structured, r, 10);
	sc = json_object_get(res, "structuredContent");
	assert_true(json_is_true(json_object_get(sc, "truncated")));
	assert_int_equal(json_object_size(json_object_get(sc, "output_files")), 0);
	assert_model_view(res);
	json_decref(res);
}

/* A client before 2025-06-18: the text alone; and no outputSchema in its tools/list. */
static void test_text_only(void **state)
{
	json_t *res = bash_tool_result(&text_only, exec_result("exited", json_integer(0), "hi\n", ""), 10);
	json_t *tool = bash_tool_describe(&text_only, 600, 120);

	(void)state;
	assert_string_equal(content_text(res), "hi\nexit code 0");
	assert_null(json_object_get(res, "structuredContent"));
	assert_null(json_object_get(tool, "outputSchema"));
	json_decref(res);
	json_decref(tool);
	tool = bash_tool_describe(&structured, 600, 120);
	assert_non_null(json_object_get(tool, "outputSchema"));
	json_decref(tool);
}

/* One call to bash_tool_args on JSON text: its return, the command it kept and why it refused. */
static int args_of(const char *text, char **command, int *given, char *msg, size_t cap)
{
	json_t *args = json_loads(text, 0, NULL);
	int rc;

	assert_non_null(args);
	*command = NULL;
	msg[0] = '\0';
	rc = bash_tool_args(args, 600, command, given, msg, cap);
	json_decref(args);
	return rc;
}

/* The input schema says additionalProperties false: an argument the tool does not know (a model's
 * guess at "cwd" or "env") is refused by name, never ignored (mutation M12). */
static void test_args_refused(void **state)
{
	static const char *const bad[][2] = {
		{ "{\"command\": \"ls\", \"cwd\": \"/\"}", "unknown argument 'cwd'" },
		{ "{\"command\": \"ls\", \"timeout_seconds\": 5, \"env\": {}}", "unknown argument 'env'" },
		{ "{\"timeout_seconds\": 5}", "command is required" },
		{ "{\"command\": 1}", "command must be a string" },
		{ "{\"command\": \"\"}", "command must not be empty" },
		{ "{\"command\": \"ls\", \"timeout_seconds\": 601}", "timeout_seconds must be a whole number" },
		{ "{\"command\": \"ls\", \"timeout_seconds\": 0}", "timeout_seconds must be a whole number" },
		{ "[\"ls\"]", "the arguments must be an object" },
	};
	char msg[256], *command;
	int given;

	(void)state;
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		assert_int_equal(args_of(bad[i][0], &command, &given, msg, sizeof msg), -1);
		assert_null(command);
		if (strstr(msg, bad[i][1]) == NULL)
			fail_msg("%s: '%s' does not say '%s'", bad[i][0], msg, bad[i][1]);
	}
}

static void test_args_kept(void **state)
{
	char msg[256], *command;
	int given;

	(void)state;
	assert_int_equal(args_of("{\"command\": \"ls -l\", \"timeout_seconds\": 600}", &command, &given, msg,
				 sizeof msg), 0);
	assert_string_equal(command, "ls -l");
	assert_int_equal(given, 1);
	free(command);
	assert_int_equal(args_of("{\"command\": \"true\"}", &command, &given, msg, sizeof msg), 0);
	assert_int_equal(given, 0);
	free(command);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_exit_code),     cmocka_unit_test(test_timeout),   cmocka_unit_test(test_refused_and_lost),
		cmocka_unit_test(test_truncated),     cmocka_unit_test(test_agent_cut), cmocka_unit_test(test_text_only),
		cmocka_unit_test(test_args_refused), cmocka_unit_test(test_args_kept),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
