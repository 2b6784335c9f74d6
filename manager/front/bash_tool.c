/* The managed `bash` tool as every front end shows it to a model (see bash_tool.h): its schemas and
 * description, the check of its arguments, and what the model sees of an exec result. */
#include "bash_tool.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "control_limits.h"
#include "error.h"
#include "mcp_shape.h"


json_t *bash_tool_input_schema(long long max)
{
	return json_pack("{s:s, s:{s:{s:s, s:s}, s:{s:s, s:s, s:i, s:I}}, s:[s], s:b}", "type", "object", "properties",
			 "command", "type", "string", "description", "The Bash command to run (bash -c).",
			 "timeout_seconds", "type", "integer", "description",
			 "Seconds before the command and everything it started are stopped.", "minimum", 1, "maximum",
			 (json_int_t)max, "required", "command", "additionalProperties", 0);
}

/* What the model reads of a call (bash_tool_result), every field always present; nothing else is
 * sent, so a client that shows only structuredContent shows the same output and outcome line. */
json_t *bash_tool_output_schema(void)
{
	json_t *props = json_pack(
		"{s:{s:s, s:[s,s,s,s,s,s]}, s:{s:[s,s]}, s:{s:[s,s]}, s:{s:s}, s:{s:[s,s]}, s:{s:s}, s:{s:s, s:i},"
		" s:{s:s, s:i}, s:{s:s}, s:{s:s, s:{s:s}}}",
		"status", "type", "string", "enum", "exited", "signaled", "timed_out", "cancelled", "uncertain", "refused",
		"exit_code", "type", "integer", "null", "signal", "type", "integer", "null", "timed_out", "type",
		"boolean", "duration_ms", "type", "integer", "null", "output", "type", "string", "stdout_bytes", "type",
		"integer", "minimum", 0, "stderr_bytes", "type", "integer", "minimum", 0, "truncated", "type", "boolean",
		"output_files", "type", "object", "properties", "stdout", "type", "string");

	if (props != NULL)
		json_object_set_new(json_object_get(json_object_get(props, "output_files"), "properties"), "stderr",
				    json_pack("{s:s}", "type", "string"));
	return json_pack("{s:s, s:o, s:[s,s,s,s,s,s,s,s,s,s], s:b}", "type", "object", "properties", props,
			 "required", "status", "exit_code", "signal", "timed_out", "duration_ms", "output",
			 "stdout_bytes", "stderr_bytes", "truncated", "output_files", "additionalProperties", 0);
}

json_t *bash_tool_describe(const struct bash_tool_view *v, long long max, long long dflt)
{
	char text[2048];
	json_t *tool;

	snprintf(text, sizeof text,
		 "Run a Bash command in this session's sandbox, at the root of the session's git worktree. "
		 "Each call is a fresh `bash -c` there: cd, variables, functions and aliases do not persist between "
		 "calls, so chain dependent steps in one command. There is no stdin (reads get end-of-file) and "
		 "nothing interactive. No background process survives the call: everything the command started is "
		 "stopped when it ends. TMPDIR (also TMP, TEMP and HOME) is a scratch folder inside the worktree, "
		 "ignored by git and shared with your file tools. Output is bounded to about %zu characters: when "
		 "stdout and stderr do not fit, each keeps its head and tail with a marker between that names a "
		 "file under $TMPDIR/" CONTROL_KEEP_DIR " holding the whole output (the newest %d such files are "
		 "kept); read it in parts with sed -n, grep or tail in the next call. The result ends with "
		 "\"exit code N\", or says the command timed out (timeout_seconds: default %lld, at most %lld), "
		 "was refused, or that its outcome is uncertain (then check what it changed before running it "
		 "again).",
		 v->max_output_chars, CONTROL_KEEP_FILES, dflt, max);
	tool = json_pack("{s:s, s:s, s:s, s:o, s:{s:b, s:b, s:b, s:b}}", "name", "bash", "title", "Bash (sandboxed)",
			 "description", text, "inputSchema", bash_tool_input_schema(max), "annotations", "readOnlyHint", 0,
			 "destructiveHint", 1, "idempotentHint", 0, "openWorldHint", 1);
	if (tool != NULL && v->structured)
		json_object_set_new(tool, "outputSchema", bash_tool_output_schema());
	return tool;
}

/* An exec-result-shaped object for a call the daemon never ran (status refused) or whose
 * answer was lost (uncertain): no output, no duration. */
static json_t *result_synth(const char *status, const char *why)
{
	return json_pack("{s:s, s:n, s:n, s:s, s:s, s:i, s:i, s:b, s:b, s:n, s:s}", "status", status, "exit_code",
			 "signal", "stdout", "", "stderr", "", "stdout_bytes", 0, "stderr_bytes", 0, "stdout_truncated", 0,
			 "stderr_truncated", 0, "duration_ms", "error", why);
}

/* The last line, and whether the call counts as an error for the model. */
static int text_outcome(FILE *f, json_t *result, long long timeout)
{
	const char *status = json_string_value(json_object_get(result, "status")) ?: "";
	const char *why = json_string_value(json_object_get(result, "error")) ?: "no reason given";

	if (strcmp(status, "exited") == 0) {
		fprintf(f, "exit code %lld", (long long)json_integer_value(json_object_get(result, "exit_code")));
		return 0;
	}
	if (strcmp(status, "signaled") == 0) {
		fprintf(f, "killed by signal %lld", (long long)json_integer_value(json_object_get(result, "signal")));
		return 0;
	}
	if (strcmp(status, "timed_out") == 0)
		fprintf(f, "timed out after %lld s", timeout);
	else if (strcmp(status, "refused") == 0)
		fprintf(f, "refused: %s", why);
	else if (strcmp(status, "cancelled") == 0)
		fprintf(f, "cancelled: %s", why);
	else if (strcmp(status, "uncertain") == 0)
		fprintf(f, "outcome uncertain: %s", why);
	else
		fprintf(f, "outcome uncertain: the manager reported status '%s'", status);
	return 1;
}

static void stream_from(struct mcp_stream *st, json_t *result, const char *name)
{
	char key[32];
	json_t *text = json_object_get(result, name);

	st->name = name;
	st->text = json_string_value(text) ?: "";
	st->len = json_string_length(text);
	snprintf(key, sizeof key, "%s_bytes", name);
	st->bytes = (long long)json_integer_value(json_object_get(result, key));
	snprintf(key, sizeof key, "%s_truncated", name);
	st->truncated = json_is_true(json_object_get(result, key));
	snprintf(key, sizeof key, "%s_escaped", name);
	st->escaped = json_is_true(json_object_get(result, key));
	st->kept = json_string_value(json_object_get(json_object_get(result, "output_kept"), name));
}

/* An integer field of the exec result, or null when it has none. */
static json_t *int_or_null(json_t *result, const char *key)
{
	json_t *v = json_object_get(result, key);

	return json_is_integer(v) ? json_integer(json_integer_value(v)) : json_null();
}

/* The structured result: the outcome as fields, the text itself, and where a cut stream is whole.
 * Only what a model can act on: the exec id, the receipt and its host paths are for the records. */
static json_t *structured(json_t *result, const struct mcp_stream s[2], const size_t share[2], const char *text,
			  size_t len)
{
	json_t *files = json_object(), *out;
	int truncated = 0;

	for (int i = 0; i < 2; i++) {
		truncated |= s[i].truncated || s[i].len > share[i];
		if (files != NULL && s[i].len > share[i] && s[i].kept != NULL &&
		    json_object_set_new(files, s[i].name, json_string(s[i].kept)) != 0) {
			json_decref(files);
			files = NULL;
		}
	}
	if (files == NULL)
		return NULL;
	out = json_pack("{s:s, s:o, s:o, s:b, s:o, s:s%, s:I, s:I, s:b, s:o}", "status",
			json_string_value(json_object_get(result, "status")) ?: "uncertain", "exit_code",
			int_or_null(result, "exit_code"), "signal", int_or_null(result, "signal"), "timed_out",
			strcmp(json_string_value(json_object_get(result, "status")) ?: "", "timed_out") == 0,
			"duration_ms", int_or_null(result, "duration_ms"), "output", text, len, "stdout_bytes",
			(json_int_t)s[0].bytes, "stderr_bytes", (json_int_t)s[1].bytes, "truncated", truncated,
			"output_files", files);
	return out;
}

/* The tool result for an exec result (consumed): its text shaped to the limit (mcp_shape.h):
 * output, stderr labelled, then the outcome; structured, the same text and the outcome's fields. */
json_t *bash_tool_result(const struct bash_tool_view *v, json_t *result, long long timeout)
{
	char *outcome = NULL, *text = NULL;
	size_t outcome_len = 0, len = 0, share[2];
	FILE *f = open_memstream(&outcome, &outcome_len);
	const char *why = json_string_value(json_object_get(result, "output_kept_error"));
	struct mcp_stream s[2];
	int is_error = 0;
	json_t *out = NULL;

	if (f != NULL) {
		is_error = text_outcome(f, result, timeout);
		/* Write errors of a memstream surface at fclose. */
		if (fclose(f) != 0) {
			free(outcome);
			outcome = NULL;
		}
	}
	stream_from(&s[0], result, "stdout");
	stream_from(&s[1], result, "stderr");
	if (outcome != NULL)
		text = mcp_shape(s, why, outcome, v->max_output_chars, &len);
	if (text != NULL)
		out = json_pack("{s:[{s:s, s:s%}], s:b}", "content", "type", "text", "text", text, len, "isError", is_error);
	if (out != NULL && v->structured) {
		mcp_shape_shares(s, why, outcome, v->max_output_chars, share);
		/* set_new takes the object whatever it returns. */
		if (json_object_set_new(out, "structuredContent", structured(result, s, share, text, len)) != 0) {
			json_decref(out);
			out = NULL;
		}
	}
	free(outcome);
	free(text);
	json_decref(result);
	return out;
}

json_t *bash_tool_refusal(const struct bash_tool_view *v, const char *why)
{
	return bash_tool_result(v, result_synth("refused", why), 0);
}

json_t *bash_tool_lost(const struct bash_tool_view *v, const char *why, long long timeout)
{
	return bash_tool_result(v, result_synth("uncertain", why), timeout);
}

/* The arguments against the input schema; on failure, why in msg (for the model to read). */
int bash_tool_args(json_t *args, long long max, char **command, int *timeout_given, char *msg, size_t cap)
{
	const char *key;
	json_t *v, *cmd, *tmo;

	if (args == NULL || !json_is_object(args)) {
		snprintf(msg, cap, "the arguments must be an object: {\"command\": string, \"timeout_seconds\": integer}");
		return -1;
	}
	json_object_foreach (args, key, v) {
		if (strcmp(key, "command") != 0 && strcmp(key, "timeout_seconds") != 0) {
			snprintf(msg, cap, "unknown argument '%.100s': the bash tool takes only command and timeout_seconds",
				 key);
			return -1;
		}
	}
	cmd = json_object_get(args, "command");
	tmo = json_object_get(args, "timeout_seconds");
	if (cmd == NULL || !json_is_string(cmd) || json_string_length(cmd) == 0) {
		snprintf(msg, cap, "command %s", cmd == NULL ? "is required: the Bash command to run" :
						   !json_is_string(cmd) ? "must be a string" : "must not be empty");
		return -1;
	}
	if (tmo != NULL && (!json_is_integer(tmo) || json_integer_value(tmo) < 1 || json_integer_value(tmo) > max)) {
		snprintf(msg, cap, "timeout_seconds must be a whole number of seconds from 1 to %lld (the configured "
			 "maximum)", max);
		return -1;
	}
	*command = strdup(json_string_value(cmd));
	*timeout_given = tmo != NULL;
	if (*command == NULL) {
		snprintf(msg, cap, "out of memory");
		return -1;
	}
	return 0;
}

json_t *bash_tool_answer(const struct bash_tool_view *v, json_t *resp, long long timeout)
{
	json_t *result = json_object_get(resp, "result"), *e = json_object_get(resp, "error");
	char why[SB_ERR_MSG_MAX + 64];

	if (json_is_true(json_object_get(resp, "ok")) && json_is_object(result)) {
		json_incref(result);
		json_decref(resp);
		return bash_tool_result(v, result, timeout);
	}
	/* Refused before it was recorded or ran (bad input, no such session, over the cap). */
	snprintf(why, sizeof why, "%s%s",
		 strcmp(json_string_value(json_object_get(e, "kind")) ?: "", "unavailable") == 0 ?
			 "sandbox-manager unavailable: " : "",
		 json_string_value(json_object_get(e, "message")) ?: "the manager refused the call");
	json_decref(resp);
	return bash_tool_refusal(v, why);
}
