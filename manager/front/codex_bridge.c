/* The Codex app-server bridge (see codex_bridge.h): JSON lines between a supervisor (our stdin and
 * stdout) and `codex app-server` (a child, its stdin and stdout), passed through untouched except
 * where the managed `bash` tool is concerned: thread/start gets the tool and loses the shell,
 * thread/resume and thread/fork keep the shell off, and Codex's item/tool/call for `bash` is
 * answered here, through the daemon, with the text of front/bash_tool.h. It must never run a
 * command itself: no shell, no exec but Codex's, no fallback when the daemon is unreachable.
 *
 * Threads: the main thread reads the supervisor; one reads Codex; each `bash` call has its own
 * (the daemon runs a session's calls one at a time anyway), so a turn/interrupt is acted on while
 * a call blocks on the daemon. Each peer's writes are whole lines under that peer's lock. */
#include "codex_bridge.h"

#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <jansson.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "bash_tool.h"
#include "clock.h"
#include "control.h"
#include "control_limits.h"
#include "fdio.h"
#include "log.h"
#include "mcp_shape.h"
#include "thread.h"

#define LINE_CAP (64u * 1024u * 1024u) /* one message: from Codex a larger one passes unread, from the supervisor it is refused */
#define QUICK_CALL_MS 10000            /* config and cancel: the daemon answers these at once */
#define ANSWER_MARGIN_S 300            /* beyond a call's timeout: the daemon's own margins and reconcile */
#define CANCEL_RETRY_MS 1000           /* a cancel that found nothing running yet is sent again */
#define POLL_MS 250
#define CALLS_MAX 64                   /* bash calls in flight at once; more are refused */
#define USAGE_EXIT 2
#define FAILED_EXIT 125

enum { RPC_PARSE = -32700, RPC_INVALID_REQUEST = -32600, RPC_INTERNAL = -32603 };

/* One `bash` call of Codex's, from item/tool/call to its answer. */
struct bridge_call {
	json_t *id;            /* Codex's request id */
	json_t *args;          /* params.arguments */
	char *thread_id, *turn_id;
	int cancel_requested;  /* under br.lock: its turn was interrupted */
	char tag[40];          /* sent with the exec and its cancel: "codex-<pid>-<n>" */
	struct bridge_call *next;
};

static struct {
	const char *session, *socket_path;
	size_t max_output_chars;
	struct bash_tool_view view; /* set before any thread starts, then only read */
	int to_codex, from_codex;   /* to_codex is -1 once closed, under codex_lock */
	pid_t codex;
	pthread_mutex_t lock;  /* the fields below, up to codex_lock */
	struct bridge_call *calls;
	unsigned ncalls;
	json_t *asked;         /* ids of Codex's requests passed to the supervisor, not yet answered */
	int have_config;
	long long max_timeout, default_timeout;
	pthread_mutex_t codex_lock, sup_lock; /* one line at a time to each peer */
} br = { .lock = PTHREAD_MUTEX_INITIALIZER, .codex_lock = PTHREAD_MUTEX_INITIALIZER,
	 .sup_lock = PTHREAD_MUTEX_INITIALIZER, .to_codex = -1, .from_codex = -1 };

static const struct bash_tool_view *view(void)
{
	return &br.view;
}

/* ---- writing: whole lines ---- */

/* One line to Codex (to_codex) or the supervisor. Codex's end is read under its lock: once closed
 * it is -1, never a number a new descriptor (a manager connection) may have taken. */
static void write_line(int to_codex, const char *text, size_t len)
{
	static const char nl = '\n';
	pthread_mutex_t *lock = to_codex ? &br.codex_lock : &br.sup_lock;
	int fd;

	pthread_mutex_lock(lock);
	fd = to_codex ? br.to_codex : STDOUT_FILENO;
	if (fd >= 0 && (fd_write_all(fd, text, len) < 0 || fd_write_all(fd, &nl, 1) < 0))
		sb_warn("codex-bridge: writing to %s: %s (is it gone?)", to_codex ? "codex" : "the supervisor",
			strerror(errno));
	pthread_mutex_unlock(lock);
}

/* msg (consumed) as one line to a peer. */
static void send_json(int to_codex, json_t *msg)
{
	char *text = msg ? json_dumps(msg, JSON_COMPACT) : NULL;

	json_decref(msg);
	if (text == NULL) {
		sb_error("codex-bridge: could not serialise a message (out of memory)");
		return;
	}
	write_line(to_codex, text, strlen(text));
	free(text);
}

/* A refusal of the supervisor's request: a JSON-RPC error (with the "jsonrpc" member when its
 * request had one: Codex's wire format omits it). */
static void refuse(json_t *request, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void refuse(json_t *request, const char *fmt, ...)
{
	json_t *id = json_object_get(request, "id"), *msg;
	char text[1024];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(text, sizeof text, fmt, ap);
	va_end(ap);
	sb_info("codex-bridge: refused %s: %s", json_string_value(json_object_get(request, "method")) ?: "a message",
		text);
	if (id == NULL)
		return; /* a notification: nobody to answer */
	msg = json_pack("{s:O, s:{s:i, s:s}}", "id", id, "error", "code", RPC_INVALID_REQUEST, "message", text);
	if (msg != NULL && json_object_get(request, "jsonrpc") != NULL)
		json_object_set_new(msg, "jsonrpc", json_string("2.0"));
	send_json(0, msg);
}

/* ---- the daemon ---- */

/* Connect and send one request (consumed). -1: nothing reached the daemon, so nothing ran. */
static int daemon_open(json_t *req, struct sb_err *err)
{
	int fd = req ? control_connect(br.socket_path, err) : sb_fail(err, ENOMEM, "out of memory");

	if (fd >= 0 && control_send(fd, req, CONTROL_REQUEST_CAP, err) < 0) {
		close(fd);
		fd = -1;
	}
	json_decref(req);
	return fd;
}

/* A request the daemon answers at once (config, cancel), bounded. */
static json_t *daemon_quick(json_t *req, struct sb_err *err)
{
	struct timeval tv = { QUICK_CALL_MS / 1000, 0 };
	json_t *resp = NULL;
	int fd = daemon_open(req, err), rc;

	if (fd < 0)
		return NULL;
	if (setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv) < 0)
		rc = sb_fail_errno(err, "setting a timeout on the manager connection");
	else if ((rc = control_recv(fd, CONTROL_RESPONSE_CAP, &resp, err)) == 0)
		sb_fail(err, EPIPE, "the manager closed the connection without answering");
	close(fd);
	return rc > 0 ? resp : NULL;
}

/* The daemon's timeout settings, once: the tool's schema states the maximum. */
static int config_ensure(struct sb_err *err)
{
	json_t *resp, *max, *dflt;
	int ok;

	pthread_mutex_lock(&br.lock);
	ok = br.have_config;
	pthread_mutex_unlock(&br.lock);
	if (ok)
		return 0;
	resp = daemon_quick(json_pack("{s:s}", "op", "config"), err);
	if (resp == NULL)
		return -1;
	max = json_object_get(resp, "max_timeout_seconds");
	dflt = json_object_get(resp, "default_timeout_seconds");
	ok = json_is_true(json_object_get(resp, "ok")) && json_is_integer(max) && json_is_integer(dflt);
	pthread_mutex_lock(&br.lock);
	if (ok) {
		br.max_timeout = json_integer_value(max);
		br.default_timeout = json_integer_value(dflt);
		br.have_config = 1;
	}
	pthread_mutex_unlock(&br.lock);
	json_decref(resp);
	return ok ? 0 : sb_fail(err, EPROTO, "the manager's config answer has no timeout settings");
}

/* ---- the supervisor's thread/start, thread/resume, thread/fork ---- */

/* Features that give the model a shell of Codex's own; each is forced off, and a request that
 * turns one on is refused: with it, a command could run outside the sandbox. */
static const char *const shell_features[] = { "shell_tool", "unified_exec" };
#define SHELL_FEATURES (sizeof shell_features / sizeof shell_features[0])

/* params.config: keep the shell off. 0, or -1 with why in msg. */
static int config_shell_off(json_t *params, char *msg, size_t cap)
{
	json_t *config = json_object_get(params, "config"), *v;
	const char *key;
	char dotted[64];

	if (config == NULL || json_is_null(config)) {
		config = json_object();
		if (config == NULL || json_object_set_new(params, "config", config) != 0)
			return snprintf(msg, cap, "out of memory"), -1;
	}
	if (!json_is_object(config))
		return snprintf(msg, cap, "params.config must be an object"), -1;
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
static json_t *bash_dynamic_tool(void)
{
	json_t *d = bash_tool_describe(view(), br.max_timeout, br.default_timeout), *t;

	if (d == NULL)
		return NULL;
	t = json_pack("{s:s, s:s, s:O, s:O}", "type", "function", "name", "bash", "description",
		      json_object_get(d, "description"), "inputSchema", json_object_get(d, "inputSchema"));
	json_decref(d);
	return t;
}

/* params.dynamicTools plus ours; -1 with why in msg (the supervisor's own bash, say). */
static int tools_add_bash(json_t *params, char *msg, size_t cap)
{
	json_t *tools = json_object_get(params, "dynamicTools"), *t;
	struct sb_err err;
	size_t i;

	if (tools == NULL || json_is_null(tools)) {
		tools = json_array();
		if (tools == NULL || json_object_set_new(params, "dynamicTools", tools) != 0)
			return snprintf(msg, cap, "out of memory"), -1;
	}
	if (!json_is_array(tools))
		return snprintf(msg, cap, "params.dynamicTools must be an array"), -1;
	json_array_foreach (tools, i, t) {
		if (!json_is_object(t))
			return snprintf(msg, cap, "params.dynamicTools[%zu] must be an object", i), -1;
		if (declares_bash(t))
			return snprintf(msg, cap, "params.dynamicTools[%zu] declares a tool named bash: the bridge's bash "
				      "is the sandboxed one and no other may take its name", i), -1;
	}
	if (config_ensure(&err) < 0)
		return snprintf(msg, cap, "sandbox-manager unavailable: %.300s (the thread's bash tool needs the manager)",
				err.msg), -1;
	if (json_array_append_new(tools, bash_dynamic_tool()) != 0)
		return snprintf(msg, cap, "out of memory"), -1;
	return 0;
}

/* thread/start, thread/resume or thread/fork (msg, borrowed): edited and sent on, or refused. */
static void thread_request(json_t *msg, int is_start)
{
	json_t *params = json_object_get(msg, "params");
	char why[512];

	if (params == NULL || json_is_null(params)) {
		params = json_object();
		if (params == NULL || json_object_set_new(msg, "params", params) != 0) {
			refuse(msg, "out of memory");
			return;
		}
	}
	if (!json_is_object(params)) {
		refuse(msg, "params must be an object");
		return;
	}
	if (config_shell_off(params, why, sizeof why) < 0 || (is_start && tools_add_bash(params, why, sizeof why) < 0)) {
		refuse(msg, "%s", why);
		return;
	}
	send_json(1, json_incref(msg));
}

/* turn/interrupt: the running bash calls of that turn are cancelled in the daemon by their own
 * threads; the request itself goes on to Codex. */
static void turn_interrupt(json_t *params)
{
	const char *thread = json_string_value(json_object_get(params, "threadId"));
	const char *turn = json_string_value(json_object_get(params, "turnId"));

	if (thread == NULL)
		return;
	pthread_mutex_lock(&br.lock);
	for (struct bridge_call *c = br.calls; c != NULL; c = c->next) {
		if (strcmp(c->thread_id, thread) == 0 && (turn == NULL || strcmp(c->turn_id, turn) == 0)) {
			c->cancel_requested = 1;
			sb_info("codex-bridge: turn %s interrupted: cancelling its call %s in the manager", c->turn_id, c->tag);
		}
	}
	pthread_mutex_unlock(&br.lock);
}

/* The supervisor answers only what it was asked: each of Codex's requests passed to it is noted
 * (before it is written), and an answer is passed on once, for a noted id. So no answer of the
 * supervisor's can stand in for the manager's to a bash call, whose request it never saw. */
static int asked_note(json_t *id)
{
	int rc;

	pthread_mutex_lock(&br.lock);
	rc = json_array_append(br.asked, id);
	pthread_mutex_unlock(&br.lock);
	return rc;
}

static int asked_take(json_t *id)
{
	size_t i;
	json_t *v;
	int found = 0;

	if (id == NULL)
		return 0;
	pthread_mutex_lock(&br.lock);
	json_array_foreach (br.asked, i, v) {
		if (json_equal(v, id)) {
			json_array_remove(br.asked, i);
			found = 1;
			break;
		}
	}
	pthread_mutex_unlock(&br.lock);
	return found;
}

/* Requests that have Codex run a command on this host, outside the sandbox. */
static const char *const host_exec_methods[] = { "thread/shellCommand", "command/exec", "process/spawn" };

/* One line from the supervisor. */
static void supervisor_line(const char *line, size_t len)
{
	json_t *msg = len <= LINE_CAP ? json_loadb(line, len, JSON_REJECT_DUPLICATES, NULL) : NULL;
	const char *method = json_string_value(json_object_get(msg, "method"));

	if (msg == NULL || !json_is_object(msg)) {
		/* Unread, it could be a thread/start that keeps the shell: not passed on. */
		send_json(0, json_pack("{s:n, s:{s:i, s:s}}", "id", "error", "code", RPC_PARSE, "message",
				       len > LINE_CAP ? "sandbox-manager codex-bridge: a message over 64 MiB is refused" :
				       "sandbox-manager codex-bridge: parse error: one JSON object per line, no duplicate keys"));
		sb_info("codex-bridge: refused a line from the supervisor that is not one JSON object");
	} else if (method == NULL && !asked_take(json_object_get(msg, "id"))) {
		/* Not an answer to a request of Codex's that it saw: a bash call's, say, which only the
		 * manager answers (a supervisor's answer would be a result of a command that never ran). */
		sb_warn("codex-bridge: dropped an answer of the supervisor's to no request it was given");
	} else if (method == NULL) {
		/* Answers to Codex's other requests. */
		write_line(1, line, len);
	} else if (strcmp(method, "thread/start") == 0) {
		thread_request(msg, 1);
	} else if (strcmp(method, "thread/resume") == 0 || strcmp(method, "thread/fork") == 0) {
		thread_request(msg, 0);
	} else {
		for (size_t i = 0; i < sizeof host_exec_methods / sizeof host_exec_methods[0]; i++) {
			if (strcmp(method, host_exec_methods[i]) == 0) {
				refuse(msg, "%s runs a command outside the sandbox: run it with `sandbox-manager exec "
				       "--session %s`", method, br.session);
				json_decref(msg);
				return;
			}
		}
		if (strcmp(method, "turn/interrupt") == 0)
			turn_interrupt(json_object_get(msg, "params"));
		write_line(1, line, len);
	}
	json_decref(msg);
}

/* ---- Codex's bash calls ---- */

static void call_free(struct bridge_call *c)
{
	if (c == NULL)
		return;
	json_decref(c->id);
	json_decref(c->args);
	free(c->thread_id);
	free(c->turn_id);
	free(c);
}

/* The cancel of an interrupted call: again while the daemon finds nothing running yet (the call
 * may still be queued or starting its sandbox). Tagged: no other call of the session is touched. */
static void call_cancel_send(const struct bridge_call *c, int64_t *next_ms)
{
	struct sb_err err;
	json_t *resp;

	if (*next_ms < 0 || clock_mono_ms() < *next_ms)
		return;
	resp = daemon_quick(json_pack("{s:s, s:s, s:s}", "op", "cancel", "session", br.session, "tag", c->tag), &err);
	*next_ms = clock_mono_ms() + CANCEL_RETRY_MS;
	if (resp == NULL)
		sb_warn("codex-bridge: cancel of %s: %s", c->tag, err.msg);
	else if (json_is_true(json_object_get(resp, "ok")) && json_is_string(json_object_get(resp, "cancelled"))) {
		sb_info("codex-bridge: cancelled exec %s (%s)", json_string_value(json_object_get(resp, "cancelled")), c->tag);
		*next_ms = -1;
	}
	json_decref(resp);
}

/* Wait for the exec's answer on fd, acting on an interruption; 1 with *resp, else -1. */
static int call_wait(struct bridge_call *c, int fd, long long timeout, json_t **resp, struct sb_err *err)
{
	int64_t deadline = clock_mono_ms() + (timeout + ANSWER_MARGIN_S) * 1000, cancel_next = 0;

	for (;;) {
		struct pollfd p = { fd, POLLIN, 0 };
		int n = poll(&p, 1, POLL_MS), cancel;

		if (n < 0 && errno != EINTR)
			return sb_fail_errno(err, "waiting for the manager");
		if (n > 0) {
			n = control_recv(fd, CONTROL_RESPONSE_CAP, resp, err);
			return n > 0 ? 1 : n == 0 ? sb_fail(err, EPIPE, "the manager closed the connection") : -1;
		}
		pthread_mutex_lock(&br.lock);
		cancel = c->cancel_requested;
		pthread_mutex_unlock(&br.lock);
		if (cancel)
			call_cancel_send(c, &cancel_next);
		if (clock_mono_ms() > deadline)
			return sb_fail(err, ETIMEDOUT, "no answer from the manager %d s after the call's timeout",
				       ANSWER_MARGIN_S);
	}
}

/* The call's tool result ({content, isError}, front/bash_tool.h). */
static json_t *call_run(struct bridge_call *c)
{
	char *command = NULL, msg[512], why[SB_ERR_MSG_MAX + 200];
	long long timeout;
	int timeout_given, fd;
	struct sb_err err;
	json_t *req, *resp = NULL;

	if (config_ensure(&err) < 0) {
		snprintf(why, sizeof why, "sandbox-manager unavailable: %s", err.msg);
		return bash_tool_refusal(view(), why);
	}
	if (bash_tool_args(c->args, br.max_timeout, &command, &timeout_given, msg, sizeof msg) < 0) {
		snprintf(why, sizeof why, "invalid arguments: %s", msg);
		return bash_tool_refusal(view(), why);
	}
	timeout = timeout_given ? json_integer_value(json_object_get(c->args, "timeout_seconds")) : br.default_timeout;
	req = json_pack("{s:s, s:s, s:s, s:s, s:I}", "op", "exec", "session", br.session, "command", command, "tag",
			c->tag, "keep_output", (json_int_t)mcp_shape_budget(br.max_output_chars));
	free(command);
	if (req != NULL && timeout_given && json_object_set_new(req, "timeout_seconds", json_integer(timeout)) != 0) {
		json_decref(req);
		req = NULL;
	}
	fd = daemon_open(req, &err);
	if (fd < 0) {
		/* Nothing reached the daemon, so nothing ran; and nothing runs here instead. */
		snprintf(why, sizeof why, "sandbox-manager unavailable: %s", err.msg);
		return bash_tool_refusal(view(), why);
	}
	if (call_wait(c, fd, timeout, &resp, &err) < 0) {
		close(fd);
		/* The request was sent: the command may have run. Say so, never guess. */
		snprintf(why, sizeof why, "sandbox-manager unavailable: %s before the result arrived; the command may "
			 "have run: check `sandbox-manager records --session %s` before running it again", err.msg,
			 br.session);
		return bash_tool_lost(view(), why, timeout);
	}
	close(fd);
	return bash_tool_answer(view(), resp, timeout);
}

/* A tool result as Codex's DynamicToolCallResponse: the text as inputText items, success false
 * for an error; then the answer to Codex's request (id) as one line. */
static void call_answer(json_t *id, json_t *result)
{
	json_t *items = json_array(), *part;
	size_t i;

	if (result == NULL || items == NULL) {
		json_decref(items);
		json_decref(result);
		send_json(1, json_pack("{s:O, s:{s:i, s:s}}", "id", id, "error", "code", RPC_INTERNAL, "message",
				       "sandbox-manager codex-bridge: out of memory building the result"));
		return;
	}
	json_array_foreach (json_object_get(result, "content"), i, part)
		json_array_append_new(items, json_pack("{s:s, s:O}", "type", "inputText", "text",
						       json_object_get(part, "text")));
	send_json(1, json_pack("{s:O, s:{s:o, s:b}}", "id", id, "result", "contentItems", items, "success",
			       !json_is_true(json_object_get(result, "isError"))));
	json_decref(result);
}

static void *call_main(void *arg)
{
	struct bridge_call *c = arg, **p;

	call_answer(c->id, call_run(c));
	pthread_mutex_lock(&br.lock);
	for (p = &br.calls; *p != NULL && *p != c; p = &(*p)->next)
		;
	if (*p != NULL)
		*p = c->next;
	br.ncalls--;
	pthread_mutex_unlock(&br.lock);
	call_free(c);
	return NULL;
}

/* item/tool/call for our bash: a thread of its own runs it. */
static void call_start(json_t *id, json_t *params)
{
	static unsigned long calls; /* only the Codex reader starts calls */
	struct bridge_call *c = calloc(1, sizeof *c);
	const char *thread = json_string_value(json_object_get(params, "threadId"));
	const char *turn = json_string_value(json_object_get(params, "turnId"));
	struct sb_err err;
	int full;

	if (c == NULL || (c->thread_id = strdup(thread ?: "")) == NULL || (c->turn_id = strdup(turn ?: "")) == NULL) {
		call_free(c);
		call_answer(id, bash_tool_refusal(view(), "out of memory in sandbox-manager codex-bridge"));
		return;
	}
	c->id = json_incref(id);
	c->args = json_incref(json_object_get(params, "arguments"));
	snprintf(c->tag, sizeof c->tag, "codex-%d-%lu", (int)getpid(), ++calls);
	pthread_mutex_lock(&br.lock);
	full = br.ncalls >= CALLS_MAX;
	if (!full) {
		c->next = br.calls;
		br.calls = c;
		br.ncalls++;
	}
	pthread_mutex_unlock(&br.lock);
	if (full) {
		call_free(c);
		call_answer(id, bash_tool_refusal(view(), "too many bash calls in flight: wait for one to finish"));
		return;
	}
	if (sb_thread_detached(call_main, c, &err) < 0) {
		pthread_mutex_lock(&br.lock);
		br.calls = c->next; /* still the head: only this thread adds */
		br.ncalls--;
		pthread_mutex_unlock(&br.lock);
		sb_error("codex-bridge: %s", err.msg);
		call_free(c);
		call_answer(id, bash_tool_refusal(view(), "sandbox-manager codex-bridge could not start the call"));
	}
}

/* One line from Codex: our bash calls are answered here, everything else goes to the supervisor. */
static void codex_line(const char *line, size_t len)
{
	json_t *msg = len <= LINE_CAP ? json_loadb(line, len, 0, NULL) : NULL, *params = json_object_get(msg, "params");
	json_t *ns = json_object_get(params, "namespace");

	if (strcmp(json_string_value(json_object_get(msg, "method")) ?: "", "item/tool/call") == 0 &&
	    json_object_get(msg, "id") != NULL &&
	    strcmp(json_string_value(json_object_get(params, "tool")) ?: "", "bash") == 0 && (ns == NULL || json_is_null(ns)))
		call_start(json_object_get(msg, "id"), params);
	else if (json_is_string(json_object_get(msg, "method")) && json_object_get(msg, "id") != NULL &&
		 asked_note(json_object_get(msg, "id")) < 0)
		sb_error("codex-bridge: out of memory: a request of Codex's not passed on");
	else
		write_line(0, line, len);
	json_decref(msg);
}

/* ---- reading lines ---- */

/* Each line read from fd to fn, up to end of file; -1 on a read error. A line over LINE_CAP goes
 * to fn all the same (fn does not parse it). */
static int lines_read(int fd, void (*fn)(const char *line, size_t len))
{
	char *buf = NULL, chunk[65536], *start, *nl;
	size_t len = 0, cap = 0, from;
	int rc = 0;

	for (;;) {
		ssize_t n = read(fd, chunk, sizeof chunk);

		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0) {
			rc = n < 0 ? -1 : 0;
			break;
		}
		if (len + (size_t)n > cap) {
			size_t ncap = cap ? cap : sizeof chunk;
			char *p;

			while (ncap < len + (size_t)n)
				ncap *= 2;
			if ((p = realloc(buf, ncap)) == NULL) {
				errno = ENOMEM;
				rc = -1;
				break;
			}
			buf = p;
			cap = ncap;
		}
		memcpy(buf + len, chunk, (size_t)n);
		from = len;
		len += (size_t)n;
		/* Only the new bytes are searched first: a long line is not scanned again per chunk. */
		if (memchr(buf + from, '\n', (size_t)n) == NULL)
			continue;
		for (start = buf; (nl = memchr(start, '\n', len - (size_t)(start - buf))) != NULL; start = nl + 1)
			if (nl > start)
				fn(start, (size_t)(nl - start));
		len -= (size_t)(start - buf);
		memmove(buf, start, len);
	}
	if (len > 0 && rc == 0)
		fn(buf, len); /* a last line without its newline */
	free(buf);
	return rc;
}

/* ---- Codex, the child ---- */

/* Start argv with our pipes as its stdin and stdout; its stderr is ours. An exec failure comes
 * back over a close-on-exec pipe, so we can say why instead of "exited 127". */
static int codex_start(char **argv, struct sb_err *err)
{
	int in[2], out[2], report[2], child_errno = 0;
	pid_t parent = getpid();
	ssize_t n;

	if (pipe2(in, O_CLOEXEC) < 0 || pipe2(out, O_CLOEXEC) < 0 || pipe2(report, O_CLOEXEC) < 0)
		return sb_fail_errno(err, "creating pipes for codex");
	br.codex = fork();
	if (br.codex < 0)
		return sb_fail_errno(err, "starting codex");
	if (br.codex == 0) {
		/* child, before exec: no allocation. It dies with the bridge, and gets SIGPIPE back
		 * (an ignored signal stays ignored across exec). A bridge that died before prctl is
		 * seen in getppid(). */
		if (dup2(in[0], STDIN_FILENO) >= 0 && dup2(out[1], STDOUT_FILENO) >= 0 &&
		    prctl(PR_SET_PDEATHSIG, SIGTERM) == 0 && getppid() == parent && signal(SIGPIPE, SIG_DFL) != SIG_ERR)
			execvp(argv[0], argv);
		child_errno = errno;
		(void)!write(report[1], &child_errno, sizeof child_errno);
		_exit(127);
	}
	close(in[0]);
	close(out[1]);
	close(report[1]);
	while ((n = read(report[0], &child_errno, sizeof child_errno)) < 0 && errno == EINTR)
		;
	close(report[0]);
	br.to_codex = in[1];
	br.from_codex = out[0];
	if (n > 0) {
		waitpid(br.codex, NULL, 0);
		return sb_fail(err, child_errno, "cannot run '%s': %s", argv[0], strerror(child_errno));
	}
	return 0;
}

/* Codex's exit status as ours. */
static int codex_wait(void)
{
	int status;

	while (waitpid(br.codex, &status, 0) < 0)
		if (errno != EINTR)
			return FAILED_EXIT;
	if (WIFEXITED(status))
		return WEXITSTATUS(status);
	sb_warn("codex-bridge: codex was killed by signal %d", WTERMSIG(status));
	return 128 + WTERMSIG(status);
}

/* Codex's stdout to its end; then the bridge ends with Codex's status. The calls still running
 * are left to the daemon, which finishes and records them. */
static void *codex_reader(void *arg)
{
	int rc;

	(void)arg;
	if (lines_read(br.from_codex, codex_line) < 0)
		sb_warn("codex-bridge: reading codex: %s", strerror(errno));
	rc = codex_wait();
	sb_info("codex-bridge: codex exited (%d)", rc);
	pthread_mutex_lock(&br.sup_lock); /* no half-written line on the way out */
	_exit(rc);
}

/* ---- the command ---- */

static const char bridge_usage[] =
	"usage: sandbox-manager codex-bridge --session S [--socket PATH] [--max-output-chars N]\n"
	"                                    [-- CODEX_COMMAND...]\n"
	"\n"
	"Runs CODEX_COMMAND (default: codex app-server) and passes its JSON-RPC on stdio through, except:\n"
	"every thread/start gets the bash tool ({command, timeout_seconds}), whose calls run in the\n"
	"session's sandbox through the manager, and Codex's own shell is turned off there and in\n"
	"thread/resume and thread/fork; a thread/start that turns the shell back on or declares its own\n"
	"bash is refused, and so are thread/shellCommand, command/exec and process/spawn. A turn/interrupt\n"
	"cancels that turn's running bash call. Logs go to stderr.\n"
	"\n"
	"  --session S            the session the tool runs in (required)\n"
	"  --socket PATH          the manager's control socket (default $SANDBOX_MANAGER_SOCKET)\n"
	"  --max-output-chars N   the tool result's text, about N bytes at most (500 to 4194304;\n"
	"                         default 30000); the whole output is kept in a file it names\n"
	"  -h, --help             this text\n"
	"\n"
	"Exit: Codex's own exit code; 2 a usage error; 125 Codex could not be started.\n";

/* A usage error, as every command words it (cli.c): one line saying what, then the usage, on stderr. */
static int usage_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static int usage_error(const char *fmt, ...)
{
	va_list ap;

	fputs("sandbox-manager codex-bridge: ", stderr);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fprintf(stderr, "\n%s", bridge_usage);
	return USAGE_EXIT;
}

_Static_assert(MCP_OUTPUT_CHARS_MIN == 500 && MCP_OUTPUT_CHARS_MAX == 4194304 && MCP_OUTPUT_CHARS_DEFAULT == 30000,
	       "bridge_usage and the --max-output-chars message state these bounds");

static int chars_parse(const char *arg, size_t *out)
{
	char *end;
	unsigned long v;

	errno = 0;
	v = strtoul(arg, &end, 10);
	if (arg[0] < '0' || arg[0] > '9' || *end != '\0' || errno != 0 || v < MCP_OUTPUT_CHARS_MIN ||
	    v > MCP_OUTPUT_CHARS_MAX)
		return -1;
	*out = v;
	return 0;
}

int codex_bridge_serve(int argc, char **argv)
{
	static const struct option opts[] = { { "session", 1, NULL, 's' }, { "socket", 1, NULL, 'k' },
					      { "max-output-chars", 1, NULL, 'o' }, { "help", 0, NULL, 'h' },
					      { NULL, 0, NULL, 0 } };
	static char *default_command[] = { "codex", "app-server", NULL };
	const char *socket_flag = NULL;
	char **command = default_command;
	struct sb_err err;
	pthread_t reader;
	int opt;

	opterr = 0;
	optind = 1;
	while ((opt = getopt_long(argc, argv, "+:h", opts, NULL)) != -1) {
		if (opt == 's')
			br.session = optarg;
		else if (opt == 'k')
			socket_flag = optarg;
		else if (opt == 'o') {
			if (chars_parse(optarg, &br.max_output_chars) < 0)
				return usage_error("--max-output-chars takes a number from 500 to 4194304, not '%s'", optarg);
		} else if (opt == 'h') {
			fputs(bridge_usage, stdout);
			return 0;
		} else if (opt == ':') {
			return usage_error("option '%s' needs a value", argv[optind - 1]);
		} else {
			/* optopt: 'h' for --help=1 (the one flag without a value), another letter for an
			 * unknown short option, 0 for an unknown long one. */
			return optopt == 'h' ? usage_error("option '--help' takes no value") :
			       optopt > 0    ? usage_error("unknown option '-%c'", optopt) :
					       usage_error("unknown option '%s'", argv[optind - 1]);
		}
	}
	/* getopt stops at "--" (and "+" at the first operand): what follows is Codex's command. */
	if (optind < argc && strcmp(argv[optind - 1], "--") != 0)
		return usage_error("unexpected argument '%s' (Codex's command goes after --)", argv[optind]);
	if (optind < argc)
		command = argv + optind;
	if (br.session == NULL || br.session[0] == '\0')
		return usage_error("--session is required");
	br.socket_path = control_socket_path(socket_flag);
	if (br.socket_path == NULL) {
		fprintf(stderr, "sandbox-manager codex-bridge: no manager socket: pass --socket PATH or set "
				"SANDBOX_MANAGER_SOCKET\n");
		return USAGE_EXIT;
	}
	if (br.max_output_chars == 0)
		br.max_output_chars = MCP_OUTPUT_CHARS_DEFAULT;
	/* Codex's tool results are text for the model: plain content, no structured copy. */
	br.view.max_output_chars = br.max_output_chars;
	br.view.structured = false;
	br.asked = json_array();
	if (br.asked == NULL) {
		fprintf(stderr, "sandbox-manager codex-bridge: out of memory\n");
		return FAILED_EXIT;
	}
	/* A peer that went away must not kill us mid-write: writes fail with EPIPE instead. */
	signal(SIGPIPE, SIG_IGN);
	if (codex_start(command, &err) < 0) {
		fprintf(stderr, "sandbox-manager codex-bridge: %s\n", err.msg);
		return FAILED_EXIT;
	}
	if (pthread_create(&reader, NULL, codex_reader, NULL) != 0) {
		sb_error("codex-bridge: could not start the reader thread");
		return FAILED_EXIT;
	}
	sb_info("codex-bridge: %s for session %s (manager at %s)", command[0], br.session, br.socket_path);
	if (lines_read(STDIN_FILENO, supervisor_line) < 0)
		sb_warn("codex-bridge: reading stdin: %s", strerror(errno));
	/* The supervisor is done: Codex sees the end of its input and exits; the reader ends the bridge. */
	pthread_mutex_lock(&br.codex_lock);
	close(br.to_codex);
	br.to_codex = -1;
	pthread_mutex_unlock(&br.codex_lock);
	pthread_join(reader, NULL);
	return FAILED_EXIT; /* not reached: the reader exits */
}
