/* The Codex bridge's edits and refusals of the supervisor's requests (see codex_policy.h). Each
 * rule fails closed: a request it cannot read, or cannot edit whole, is refused. */
#include "codex_policy.h"

#include <stdio.h>
#include <string.h>

#include "error.h"

/* Features that give the model a shell of Codex's own; each is forced off, and a request that
 * turns one on is refused: with it, a command could run outside the sandbox. */
static const char *const shell_features[] = { "shell_tool", "unified_exec" };
#define SHELL_FEATURES (sizeof shell_features / sizeof shell_features[0])

/* Requests that have Codex run a command on this host, outside the sandbox. */
static const char *const host_exec_methods[] = { "thread/shellCommand", "command/exec", "process/spawn" };
#define HOST_EXEC_METHODS (sizeof host_exec_methods / sizeof host_exec_methods[0])

/* obj's member key (name: its path in the request), an object or with is_array an array; a new
 * empty one takes its place when absent or null. NULL with why in msg: of another type, or out of
 * memory. */
static json_t *member(json_t *obj, const char *key, int is_array, const char *name, char *msg, size_t cap)
{
	json_t *v = json_object_get(obj, key);

	if (v == NULL || json_is_null(v)) {
		v = is_array ? json_array() : json_object();
		if (v == NULL || json_object_set_new(obj, key, v) != 0)
			return snprintf(msg, cap, "out of memory"), NULL;
	}
	if (is_array ? !json_is_array(v) : !json_is_object(v))
		return snprintf(msg, cap, "%s must be an %s", name, is_array ? "array" : "object"), NULL;
	return v;
}

/* params.config: keep the shell off. 0, or -1 with why in msg. */
static int config_shell_off(json_t *params, char *msg, size_t cap)
{
	json_t *config = member(params, "config", 0, "params.config", msg, cap), *v;
	const char *key;
	char dotted[64];

	if (config == NULL)
		return -1;
	json_object_foreach (config, key, v) {
		/* A profile brings its own features, which Codex applies over these overrides. */
		if (strncmp(key, "profile", 7) == 0)
			return snprintf(msg, cap, "config key '%.100s' is refused: a profile can turn Codex's own shell "
				      "back on; put the settings in config itself", key), -1;
		if (strcmp(key, "features") == 0 && !json_is_object(v))
			return snprintf(msg, cap, "config.features must be an object"), -1;
	}
	for (size_t i = 0; i < SHELL_FEATURES; i++) {
		json_t *nested = json_object_get(json_object_get(config, "features"), shell_features[i]);

		snprintf(dotted, sizeof dotted, "features.%s", shell_features[i]);
		v = json_object_get(config, dotted);
		if ((v != NULL && !json_is_false(v)) || (nested != NULL && !json_is_false(nested)))
			return snprintf(msg, cap, "%s must stay false: Codex's own shell runs commands outside the sandbox; "
				      "the thread's bash tool is the sandboxed one", dotted), -1;
		if (json_object_set_new(config, dotted, json_false()) != 0)
			return snprintf(msg, cap, "out of memory"), -1;
	}
	return 0;
}

/* Does this dynamic tool (or a tool of this namespace) take the name bash? */
static int declares_bash(json_t *tool)
{
	json_t *t;
	size_t i;

	if (strcmp(json_string_value(json_object_get(tool, "name")) ?: "", "bash") == 0)
		return 1;
	json_array_foreach (json_object_get(tool, "tools"), i, t)
		if (strcmp(json_string_value(json_object_get(t, "name")) ?: "", "bash") == 0)
			return 1;
	return 0;
}

/* The managed tool as a dynamic tool: the same description and input schema as MCP's. */
static json_t *bash_dynamic_tool(const struct bash_tool_view *v, long long max_timeout, long long default_timeout)
{
	json_t *d = bash_tool_describe(v, max_timeout, default_timeout), *t;

	if (d == NULL)
		return NULL;
	t = json_pack("{s:s, s:s, s:O, s:O}", "type", "function", "name", "bash", "description",
		      json_object_get(d, "description"), "inputSchema", json_object_get(d, "inputSchema"));
	json_decref(d);
	return t;
}

/* params.dynamicTools plus ours; -1 with why in msg (the supervisor's own bash, say). */
static int tools_add_bash(json_t *params, const struct bash_tool_view *v, const struct daemon_peer *d, char *msg,
			  size_t cap)
{
	json_t *tools = member(params, "dynamicTools", 1, "params.dynamicTools", msg, cap), *t;
	long long max, def;
	struct sb_err err;
	size_t i;

	if (tools == NULL)
		return -1;
	json_array_foreach (tools, i, t) {
		if (!json_is_object(t))
			return snprintf(msg, cap, "params.dynamicTools[%zu] must be an object", i), -1;
		if (declares_bash(t))
			return snprintf(msg, cap, "params.dynamicTools[%zu] declares a tool named bash: the bridge's bash "
				      "is the sandboxed one and no other may take its name", i), -1;
	}
	if (daemon_call_config(d, &max, &def, &err) < 0)
		return snprintf(msg, cap, "sandbox-manager unavailable: %.300s (the thread's bash tool needs the manager)",
				err.msg), -1;
	if (json_array_append_new(tools, bash_dynamic_tool(v, max, def)) != 0)
		return snprintf(msg, cap, "out of memory"), -1;
	return 0;
}

int codex_policy_thread(json_t *request, int is_start, const struct bash_tool_view *v, const struct daemon_peer *d,
			char *msg, size_t cap)
{
	json_t *params = member(request, "params", 0, "params", msg, cap);

	if (params == NULL)
		return -1;
	if (config_shell_off(params, msg, cap) < 0 || (is_start && tools_add_bash(params, v, d, msg, cap) < 0))
		return -1;
	return 0;
}

int codex_policy_host_exec(const char *method)
{
	for (size_t i = 0; i < HOST_EXEC_METHODS; i++)
		if (strcmp(method, host_exec_methods[i]) == 0)
			return 1;
	return 0;
}
