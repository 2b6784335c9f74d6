/* The managed `bash` tool, the one way every front end presents it to a model: MCP's tools/list and
 * tools/call (mcp.c) and any other adapter use these and nothing else, so what a model reads of a
 * call is decided in one place. Every result is built from the daemon's exec result (control.h);
 * nothing here runs a command, and an unreachable daemon is a refusal or an uncertain outcome,
 * never a local fallback. */
#ifndef SB_BASH_TOOL_H
#define SB_BASH_TOOL_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

/* How one client is answered. */
struct bash_tool_view {
	size_t max_output_chars; /* the result text's bound (mcp_shape.h) */
	bool structured;         /* the client takes outputSchema and structuredContent */
};

json_t *bash_tool_input_schema(long long max_timeout);
json_t *bash_tool_output_schema(void);
/* The tool's entry: name, title, description, input (and output) schema, annotations. */
json_t *bash_tool_describe(const struct bash_tool_view *v, long long max_timeout, long long default_timeout);

/* The arguments against the input schema: 0 with *command (malloc'd) and whether a timeout was
 * given; -1 with why in msg, for the model to read. */
int bash_tool_args(json_t *args, long long max_timeout, char **command, int *timeout_given, char *msg, size_t cap);

/* Tool results ({content, isError[, structuredContent]}), new references. The content's text is
 * the output shaped to max_output_chars and an outcome line; structuredContent (bash_tool_output_schema)
 * says the same and nothing else: status, exit_code, signal, timed_out, duration_ms, output (that very
 * text), stdout_bytes, stderr_bytes, truncated, output_files (paths inside the sandbox). Never the
 * exec id, the receipt or a host path: a model cannot use them; operators read them in the records.
 * answer consumes the daemon's whole answer to an exec; result consumes an exec result; refusal:
 * nothing ran; lost: the request was sent and no answer came, so the command may have run (uncertain). */
json_t *bash_tool_answer(const struct bash_tool_view *v, json_t *resp, long long timeout);
json_t *bash_tool_result(const struct bash_tool_view *v, json_t *result, long long timeout);
json_t *bash_tool_refusal(const struct bash_tool_view *v, const char *why);
json_t *bash_tool_lost(const struct bash_tool_view *v, const char *why, long long timeout);

#endif
