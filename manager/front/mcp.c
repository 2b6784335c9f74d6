/* The MCP server of `sandbox-manager mcp` (see mcp.h): JSON-RPC lines on stdin/stdout, strict
 * validation of the `bash` tool's input, and the mapping of the daemon's exec results to tool
 * results. It must never run a command itself: no shell, no exec, no fallback when the daemon is
 * unreachable. Only protocol goes to stdout; logs go to stderr.
 *
 * Threads: the main thread reads stdin and answers everything but tools/call at once; one worker
 * runs the queued tools/call requests in order of arrival (the session runs them one at a time
 * anyway), so a cancellation is read and acted on while a call blocks on the daemon. */
#include "mcp.h"

#include <errno.h>
#include <getopt.h>
#include <jansson.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "clock.h"
#include "control.h"
#include "control_limits.h"
#include "fdio.h"
#include "bash_tool.h"
#include "log.h"
#include "mcp_shape.h"

#define LINE_CAP (4u * 1024u * 1024u)   /* one JSON-RPC message; larger ones are refused */
#define QUICK_CALL_MS 10000             /* config and cancel: the daemon answers these at once */
#define ANSWER_MARGIN_S 300             /* beyond a call's timeout: the daemon's own margins and reconcile */
#define CANCEL_RETRY_MS 1000            /* a cancel that found nothing running yet is sent again */
#define PROGRESS_EVERY_MS 15000
#define DRAIN_SECONDS 10                /* after stdin ends, how long the calls received are waited for */
#define POLL_MS 250

static const char *const mcp_versions[] = { "2025-11-25", "2025-06-18", "2025-03-26", "2024-11-05" };
#define MCP_VERSIONS (sizeof mcp_versions / sizeof mcp_versions[0])
#define STRUCTURED_SINCE 1 /* outputSchema and structuredContent exist from 2025-06-18 on */

enum { RPC_PARSE = -32700, RPC_INVALID_REQUEST = -32600, RPC_NO_METHOD = -32601, RPC_INVALID_PARAMS = -32602,
       RPC_INTERNAL = -32603 };

/* One tools/call that passed validation. */
struct mcp_job {
	json_t *id;             /* the request's id */
	json_t *progress_token; /* params._meta.progressToken, or NULL */
	char *command;
	long long timeout;      /* what the daemon applies: asked for, else its default */
	int timeout_given;
	int cancel_requested;   /* under srv.lock */
	char tag[40];           /* sent with the exec and its cancel: "mcp-<pid>-<n>" */
	struct mcp_job *next;
};

static struct {
	const char *session, *socket_path, *version;
	pthread_mutex_t lock;   /* the fields below, up to out_lock */
	pthread_cond_t changed;
	struct mcp_job *head, *tail; /* waiting for the worker */
	struct mcp_job *running;
	int closing;
	int have_config;
	long long max_timeout, default_timeout;
	size_t max_output_chars; /* set before the worker starts, then only read */
	size_t proto;           /* index in mcp_versions */
	pthread_mutex_t out_lock; /* one message at a time on stdout */
} srv = { .lock = PTHREAD_MUTEX_INITIALIZER, .changed = PTHREAD_COND_INITIALIZER,
	  .out_lock = PTHREAD_MUTEX_INITIALIZER };

/* outputSchema and structuredContent only for clients that know them. Any thread. */
static int structured_output(void)
{
	int yes;

	pthread_mutex_lock(&srv.lock);
	yes = srv.proto <= STRUCTURED_SINCE;
	pthread_mutex_unlock(&srv.lock);
	return yes;
}

/* How this client is answered: the text's bound, and structured results when its protocol has them. */
static const struct bash_tool_view *view(void)
{
	static struct bash_tool_view v;

	v.max_output_chars = srv.max_output_chars;
	v.structured = structured_output();
	return &v;
}

/* ---- stdout: whole messages, one per line ---- */

static void out_message(json_t *msg)
{
	char *text = json_dumps(msg, JSON_COMPACT);
	size_t len;

	json_decref(msg);
	if (text == NULL) {
		sb_error("mcp: could not serialise a message (out of memory)");
		return;
	}
	len = strlen(text);
	text[len] = '\n'; /* replaces the terminator: written with an explicit length */
	pthread_mutex_lock(&srv.out_lock);
	if (fd_write_all(STDOUT_FILENO, text, len + 1) < 0)
		sb_warn("mcp: writing to stdout: %s (the client is gone?)", strerror(errno));
	pthread_mutex_unlock(&srv.out_lock);
	free(text);
}

static void out_result(json_t *id, json_t *result)
{
	out_message(json_pack("{s:s, s:O, s:o}", "jsonrpc", "2.0", "id", id, "result", result));
}

/* id may be NULL: JSON-RPC answers an error it cannot tie to a request with id null. */
static void out_error(json_t *id, int code, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void out_error(json_t *id, int code, const char *fmt, ...)
{
	char msg[SB_ERR_MSG_MAX];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof msg, fmt, ap);
	va_end(ap);
	out_message(json_pack("{s:s, s:O, s:{s:i, s:s}}", "jsonrpc", "2.0", "id", id ? id : json_null(), "error",
			      "code", code, "message", msg));
}

/* ---- the daemon ---- */

static int socket_timeout(int fd, int ms, struct sb_err *err)
{
	struct timeval tv = { ms / 1000, (ms % 1000) * 1000 };

	if (setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv) < 0 ||
	    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv) < 0)
		return sb_fail_errno(err, "setting a timeout on the manager connection");
	return 0;
}

/* Connect and send one request (consumed). -1: nothing reached the daemon, so nothing ran. */
static int daemon_open(json_t *req, struct sb_err *err)
{
	int fd = control_connect(srv.socket_path, err);

	if (fd >= 0 && control_send(fd, req, CONTROL_REQUEST_CAP, err) < 0) {
		close(fd);
		fd = -1;
	}
	json_decref(req);
	return fd;
}

/* A request the daemon answers at once (config, cancel); bounded so stdin is never held up. */
static json_t *daemon_quick(json_t *req, struct sb_err *err)
{
	json_t *resp = NULL;
	int fd = daemon_open(req, err), rc;

	if (fd < 0)
		return NULL;
	rc = socket_timeout(fd, QUICK_CALL_MS, err);
	if (rc == 0 && (rc = control_recv(fd, CONTROL_RESPONSE_CAP, &resp, err)) == 0)
		sb_fail(err, EPIPE, "the manager closed the connection without answering");
	close(fd);
	return rc > 0 ? resp : NULL;
}

/* The daemon's timeout settings, once: the tool's schema states the maximum. */
static int config_ensure(struct sb_err *err)
{
	json_t *resp;
	int ok;

	pthread_mutex_lock(&srv.lock);
	ok = srv.have_config;
	pthread_mutex_unlock(&srv.lock);
	if (ok)
		return 0;
	resp = daemon_quick(json_pack("{s:s}", "op", "config"), err);
	if (resp == NULL)
		return -1;
	ok = json_is_true(json_object_get(resp, "ok")) &&
	     json_is_integer(json_object_get(resp, "max_timeout_seconds")) &&
	     json_is_integer(json_object_get(resp, "default_timeout_seconds"));
	pthread_mutex_lock(&srv.lock);
	if (ok) {
		srv.max_timeout = json_integer_value(json_object_get(resp, "max_timeout_seconds"));
		srv.default_timeout = json_integer_value(json_object_get(resp, "default_timeout_seconds"));
		srv.have_config = 1;
	}
	pthread_mutex_unlock(&srv.lock);
	json_decref(resp);
	return ok ? 0 : sb_fail(err, EPROTO, "the manager's config answer has no timeout settings");
}

/* ---- tools/call: validation (main thread) ---- */

static void job_free(struct mcp_job *j)
{
	if (j == NULL)
		return;
	json_decref(j->id);
	json_decref(j->progress_token);
	free(j->command);
	free(j);
}

/* Same id as a request still in flight? (the spec forbids reusing one). Under srv.lock. */
static int id_in_flight(json_t *id)
{
	if (srv.running != NULL && json_equal(srv.running->id, id))
		return 1;
	for (struct mcp_job *j = srv.head; j != NULL; j = j->next)
		if (json_equal(j->id, id))
			return 1;
	return 0;
}

static void job_enqueue(struct mcp_job *j, json_t *id)
{
	pthread_mutex_lock(&srv.lock);
	if (id_in_flight(id)) {
		pthread_mutex_unlock(&srv.lock);
		out_error(id, RPC_INVALID_REQUEST, "request id already in use by a call in flight");
		job_free(j);
		return;
	}
	if (srv.tail != NULL)
		srv.tail->next = j;
	else
		srv.head = j;
	srv.tail = j;
	pthread_cond_broadcast(&srv.changed);
	pthread_mutex_unlock(&srv.lock);
}

/* A validated call, ready for the worker; NULL with the answer already sent. */
static struct mcp_job *call_prepare(json_t *id, json_t *params)
{
	json_t *args = json_object_get(params, "arguments");
	struct mcp_job *j = calloc(1, sizeof *j);
	char msg[512], why[600];

	if (j == NULL) {
		out_error(id, RPC_INTERNAL, "out of memory");
		return NULL;
	}
	if (bash_tool_args(args, srv.max_timeout, &j->command, &j->timeout_given, msg, sizeof msg) < 0) {
		sb_info("mcp: a call refused before reaching the manager: %s", msg);
		job_free(j);
		snprintf(why, sizeof why, "invalid arguments: %s", msg);
		out_result(id, bash_tool_refusal(view(), why));
		return NULL;
	}
	j->timeout = j->timeout_given ? json_integer_value(json_object_get(args, "timeout_seconds")) : srv.default_timeout;
	j->id = json_incref(id);
	j->progress_token = json_incref(json_object_get(json_object_get(params, "_meta"), "progressToken"));
	/* Only the reader thread prepares calls: a plain counter is enough. */
	static unsigned long calls;
	snprintf(j->tag, sizeof j->tag, "mcp-%d-%lu", (int)getpid(), ++calls);
	return j;
}

static void rpc_tools_call(json_t *id, json_t *params)
{
	const char *name = json_string_value(json_object_get(params, "name"));
	struct mcp_job *j;
	struct sb_err err;
	char why[SB_ERR_MSG_MAX + 64];

	if (name == NULL) {
		out_error(id, RPC_INVALID_PARAMS, "tools/call needs params.name");
	} else if (strcmp(name, "bash") != 0) {
		out_error(id, RPC_INVALID_PARAMS, "Unknown tool: %.200s (the only tool is bash)", name);
	} else if (config_ensure(&err) < 0) {
		snprintf(why, sizeof why, "sandbox-manager unavailable: %s", err.msg);
		out_result(id, bash_tool_refusal(view(), why));
	} else if ((j = call_prepare(id, params)) != NULL) {
		job_enqueue(j, id);
	}
}

/* ---- tools/call: the worker ---- */

/* A cancellation was asked for: tell the daemon, again while it finds nothing running yet (the
 * call may still be starting its sandbox). Worker thread. */
static void job_cancel_send(const struct mcp_job *j, int64_t *next_ms)
{
	struct sb_err err;
	json_t *resp;

	if (*next_ms < 0 || clock_mono_ms() < *next_ms)
		return;
	/* Tagged: only this call is cancelled, never another client's call on the same session. */
	resp = daemon_quick(json_pack("{s:s, s:s, s:s}", "op", "cancel", "session", srv.session, "tag", j->tag), &err);
	if (resp == NULL) {
		sb_warn("mcp: cancel: %s", err.msg);
		*next_ms = clock_mono_ms() + CANCEL_RETRY_MS;
	} else if (!json_is_true(json_object_get(resp, "ok"))) {
		sb_warn("mcp: cancel refused: %s",
			json_string_value(json_object_get(json_object_get(resp, "error"), "message")) ?: "no reason");
		*next_ms = clock_mono_ms() + CANCEL_RETRY_MS;
	} else if (json_is_string(json_object_get(resp, "cancelled"))) {
		sb_info("mcp: cancelled exec %s", json_string_value(json_object_get(resp, "cancelled")));
		*next_ms = -1;
	} else {
		*next_ms = clock_mono_ms() + CANCEL_RETRY_MS;
	}
	json_decref(resp);
}

static void job_progress(struct mcp_job *j, int64_t started, int64_t *next_ms)
{
	int64_t now = clock_mono_ms();

	if (j->progress_token == NULL || now < *next_ms)
		return;
	*next_ms = now + PROGRESS_EVERY_MS;
	out_message(json_pack("{s:s, s:s, s:{s:O, s:I, s:I, s:s}}", "jsonrpc", "2.0", "method", "notifications/progress",
			      "params", "progressToken", j->progress_token, "progress", (json_int_t)((now - started) / 1000),
			      "total", (json_int_t)j->timeout, "message", "the command is still running"));
}

/* Wait for the exec's answer on fd while acting on cancellation; 1 with *resp, else -1. */
static int job_wait(struct mcp_job *j, int fd, json_t **resp, struct sb_err *err)
{
	int64_t started = clock_mono_ms(), deadline = started + (j->timeout + ANSWER_MARGIN_S) * 1000;
	int64_t cancel_next = 0, progress_next = started + PROGRESS_EVERY_MS;

	for (;;) {
		struct pollfd p = { fd, POLLIN, 0 };
		int n = poll(&p, 1, POLL_MS), cancel;

		if (n < 0 && errno != EINTR)
			return sb_fail_errno(err, "waiting for the manager");
		if (n > 0) {
			n = control_recv(fd, CONTROL_RESPONSE_CAP, resp, err);
			return n > 0 ? 1 : n == 0 ? sb_fail(err, EPIPE, "the manager closed the connection") : -1;
		}
		pthread_mutex_lock(&srv.lock);
		cancel = j->cancel_requested;
		pthread_mutex_unlock(&srv.lock);
		if (cancel)
			job_cancel_send(j, &cancel_next);
		job_progress(j, started, &progress_next);
		if (clock_mono_ms() > deadline)
			return sb_fail(err, ETIMEDOUT, "no answer from the manager %d s after the call's timeout",
				       ANSWER_MARGIN_S);
	}
}

/* The daemon's answer (consumed) as a tool result. */
static json_t *job_run(struct mcp_job *j)
{
	json_t *req = json_pack("{s:s, s:s, s:s, s:s}", "op", "exec", "session", srv.session, "command", j->command,
				"tag", j->tag);
	json_t *resp = NULL;
	struct sb_err err;
	char why[SB_ERR_MSG_MAX + 160];
	int fd;

	if (req != NULL && j->timeout_given)
		json_object_set_new(req, "timeout_seconds", json_integer(j->timeout));
	/* Beyond what the text can show whole, the manager keeps the whole output for the model. */
	if (req != NULL && json_object_set_new(req, "keep_output",
					       json_integer((json_int_t)mcp_shape_budget(srv.max_output_chars))) != 0) {
		json_decref(req);
		req = NULL;
	}
	fd = req ? daemon_open(req, &err) : (sb_fail(&err, ENOMEM, "out of memory"), -1);
	if (fd < 0) {
		/* Nothing reached the daemon, so nothing ran; and nothing runs here instead. */
		snprintf(why, sizeof why, "sandbox-manager unavailable: %s", err.msg);
		return bash_tool_refusal(view(), why);
	}
	if (job_wait(j, fd, &resp, &err) < 0) {
		close(fd);
		/* The request was sent: the command may have run. Say so, never guess. */
		snprintf(why, sizeof why, "sandbox-manager unavailable: %s before the result arrived; the command may "
			 "have run: check `sandbox-manager records --session %s` before running it again", err.msg,
			 srv.session);
		return bash_tool_lost(view(), why, j->timeout);
	}
	close(fd);
	return bash_tool_answer(view(), resp, j->timeout);
}

static void *worker_main(void *arg)
{
	(void)arg;
	for (;;) {
		struct mcp_job *j;
		json_t *result;
		int cancelled;

		pthread_mutex_lock(&srv.lock);
		while (srv.head == NULL && !srv.closing)
			pthread_cond_wait(&srv.changed, &srv.lock);
		j = srv.head;
		if (j == NULL) {
			pthread_mutex_unlock(&srv.lock);
			return NULL;
		}
		srv.head = j->next;
		if (srv.head == NULL)
			srv.tail = NULL;
		srv.running = j;
		pthread_mutex_unlock(&srv.lock);

		result = job_run(j);
		pthread_mutex_lock(&srv.lock);
		cancelled = j->cancel_requested;
		srv.running = NULL;
		pthread_cond_broadcast(&srv.changed);
		pthread_mutex_unlock(&srv.lock);
		/* The spec: no response to a cancelled request (its sender ignores one anyway). */
		if (cancelled)
			json_decref(result);
		else if (result == NULL)
			out_error(j->id, RPC_INTERNAL, "out of memory building the result");
		else
			out_result(j->id, result);
		job_free(j);
	}
}

/* notifications/cancelled: a queued call is dropped (it never reached the daemon); the running
 * one is cancelled in the daemon by the worker. Unknown or finished ids are ignored. */
static void rpc_cancelled(json_t *params)
{
	json_t *id = json_object_get(params, "requestId");
	struct mcp_job **p, now = { .tag = "" };
	int64_t at_once = 0;

	if (id == NULL)
		return;
	pthread_mutex_lock(&srv.lock);
	if (srv.running != NULL && json_equal(srv.running->id, id)) {
		srv.running->cancel_requested = 1;
		memcpy(now.tag, srv.running->tag, sizeof now.tag);
		sb_info("mcp: the client cancelled the running call: cancelling it in the manager");
	}
	for (p = &srv.head; *p != NULL; p = &(*p)->next) {
		if (json_equal((*p)->id, id)) {
			struct mcp_job *j = *p;

			*p = j->next;
			srv.tail = NULL;
			for (struct mcp_job *t = srv.head; t != NULL; t = t->next)
				srv.tail = t;
			job_free(j);
			sb_info("mcp: the client cancelled a queued call: dropped before it reached the manager");
			break;
		}
	}
	pthread_mutex_unlock(&srv.lock);
	/* Sent at once from here too: a client that cancels often stops this server right after (Claude
	 * Code does, within the worker's poll), and the call would then run on to its timeout. The
	 * worker repeats it while the daemon finds nothing running yet. */
	if (now.tag[0] != '\0')
		job_cancel_send(&now, &at_once);
}

/* ---- the other methods ---- */

static void rpc_initialize(json_t *id, json_t *params)
{
	const char *asked = json_string_value(json_object_get(params, "protocolVersion"));
	size_t v = 0;

	if (asked == NULL) {
		out_error(id, RPC_INVALID_PARAMS, "initialize needs params.protocolVersion");
		return;
	}
	while (v < MCP_VERSIONS && strcmp(mcp_versions[v], asked) != 0)
		v++;
	v = v < MCP_VERSIONS ? v : 0; /* unsupported: offer the latest, the client decides */
	pthread_mutex_lock(&srv.lock);
	srv.proto = v;
	pthread_mutex_unlock(&srv.lock);
	out_result(id, json_pack("{s:s, s:{s:{s:b}}, s:{s:s, s:s}, s:s}", "protocolVersion", mcp_versions[v],
				 "capabilities", "tools", "listChanged", 0, "serverInfo", "name", "sandbox-manager",
				 "version", srv.version, "instructions",
				 "Use the bash tool for every shell command: it runs in this session's sandbox."));
}

static void rpc_tools_list(json_t *id)
{
	struct sb_err err;

	if (config_ensure(&err) < 0)
		out_error(id, RPC_INTERNAL, "sandbox-manager unavailable: %s", err.msg);
	else
		out_result(id, json_pack("{s:[o]}", "tools", bash_tool_describe(view(), srv.max_timeout, srv.default_timeout)));
}

static void rpc_request(json_t *id, const char *method, json_t *params)
{
	if (strcmp(method, "initialize") == 0)
		rpc_initialize(id, params);
	else if (strcmp(method, "ping") == 0)
		out_result(id, json_object());
	else if (strcmp(method, "tools/list") == 0)
		rpc_tools_list(id);
	else if (strcmp(method, "tools/call") == 0)
		rpc_tools_call(id, params);
	else
		out_error(id, RPC_NO_METHOD, "Method not found: %.200s", method);
}

static void rpc_notification(const char *method, json_t *params)
{
	if (strcmp(method, "notifications/cancelled") == 0)
		rpc_cancelled(params);
	else if (strcmp(method, "notifications/initialized") != 0)
		sb_debug("mcp: ignored notification %.200s", method);
}

/* One line: a JSON-RPC request, notification or (ignored) response. */
static void rpc_line(const char *line, size_t len)
{
	json_error_t jerr;
	json_t *msg = json_loadb(line, len, JSON_REJECT_DUPLICATES, &jerr), *id, *params;
	const char *method;

	if (msg == NULL) {
		out_error(NULL, RPC_PARSE, "Parse error: %s (column %d)", jerr.text, jerr.column);
		return;
	}
	id = json_object_get(msg, "id");
	params = json_object_get(msg, "params");
	method = json_string_value(json_object_get(msg, "method"));
	if (!json_is_object(msg))
		out_error(NULL, RPC_INVALID_REQUEST, "Invalid Request: a message is one JSON object (batches are not supported)");
	else if (id != NULL && !json_is_string(id) && !json_is_integer(id))
		out_error(NULL, RPC_INVALID_REQUEST, "Invalid Request: id must be a string or an integer");
	else if (strcmp(json_string_value(json_object_get(msg, "jsonrpc")) ?: "", "2.0") != 0)
		out_error(id, RPC_INVALID_REQUEST, "Invalid Request: jsonrpc must be \"2.0\"");
	else if (method == NULL && (json_object_get(msg, "result") || json_object_get(msg, "error")))
		sb_debug("mcp: ignored a response: this server sends no requests");
	else if (method == NULL)
		out_error(id, RPC_INVALID_REQUEST, "Invalid Request: method must be a string");
	else if (params != NULL && !json_is_object(params) && id != NULL)
		out_error(id, RPC_INVALID_PARAMS, "params must be an object");
	else if (id != NULL)
		rpc_request(id, method, params);
	else if (params == NULL || json_is_object(params))
		rpc_notification(method, params);
	json_decref(msg);
}

/* ---- stdin: lines, bounded ---- */

struct line_reader {
	char *buf;
	size_t len, cap;
	int overlong; /* the current line passed LINE_CAP: skipped up to its newline */
};

static void line_end(struct line_reader *r)
{
	size_t i = 0;

	while (i < r->len && strchr(" \t\r", r->buf[i]) != NULL)
		i++;
	if (r->overlong)
		out_error(NULL, RPC_INVALID_REQUEST, "Invalid Request: the message is over %u bytes", LINE_CAP);
	else if (i < r->len)
		rpc_line(r->buf, r->len);
	r->len = 0;
	r->overlong = 0;
}

static int line_append(struct line_reader *r, const char *data, size_t n)
{
	if (r->overlong)
		return 0;
	if (r->len + n > LINE_CAP) {
		r->overlong = 1;
		r->len = 0;
		return 0;
	}
	if (r->len + n > r->cap) {
		size_t cap = r->cap ? r->cap : 65536;
		char *p;

		while (cap < r->len + n)
			cap *= 2;
		p = realloc(r->buf, cap);
		if (p == NULL)
			return -1;
		r->buf = p;
		r->cap = cap;
	}
	memcpy(r->buf + r->len, data, n);
	r->len += n;
	return 0;
}

/* Read stdin to its end, handling each line; -1 on a read error. */
static int stdin_serve(void)
{
	struct line_reader r = { 0 };
	char chunk[65536];
	int rc = 0;

	for (;;) {
		ssize_t n = read(STDIN_FILENO, chunk, sizeof chunk);
		size_t off = 0;

		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0) {
			rc = n < 0 ? -1 : 0;
			break;
		}
		while (off < (size_t)n) {
			char *nl = memchr(chunk + off, '\n', (size_t)n - off);
			size_t seg = nl ? (size_t)(nl - (chunk + off)) : (size_t)n - off;

			if (line_append(&r, chunk + off, seg) < 0) {
				r.overlong = 1; /* out of memory: answer it as too large, keep serving */
				r.len = 0;
			}
			off += seg + (nl != NULL);
			if (nl != NULL)
				line_end(&r);
		}
	}
	if (r.len > 0 || r.overlong)
		line_end(&r); /* a last message without its newline */
	free(r.buf);
	return rc;
}

/* ---- the command ---- */

/* Drop the calls the worker has not started (they never reached the daemon). Under srv.lock. */
static void queue_drop(void)
{
	while (srv.head != NULL) {
		struct mcp_job *j = srv.head;

		srv.head = j->next;
		job_free(j);
	}
	srv.tail = NULL;
}

/* stdin ended: the calls already received are answered for a while (a client may close its end
 * and still read); then the ones not started are dropped and a running one is left to the
 * daemon, which finishes and records it. */
static int drain(pthread_t worker)
{
	struct timespec until;
	int rc = 0;

	clock_gettime(CLOCK_REALTIME, &until);
	until.tv_sec += DRAIN_SECONDS;
	pthread_mutex_lock(&srv.lock);
	srv.closing = 1;
	pthread_cond_broadcast(&srv.changed);
	while ((srv.head != NULL || srv.running != NULL) && rc == 0)
		rc = pthread_cond_timedwait(&srv.changed, &srv.lock, &until);
	queue_drop();
	if (srv.running != NULL) {
		sb_warn("mcp: stdin closed and a call is still running after %d s: leaving it to the manager, which "
			"records its end", DRAIN_SECONDS);
		pthread_mutex_lock(&srv.out_lock); /* no half-written line on the way out */
		_exit(0);
	}
	pthread_mutex_unlock(&srv.lock);
	return pthread_join(worker, NULL) == 0 ? 0 : -1;
}

static const char mcp_usage[] =
	"usage: sandbox-manager mcp --session S [--socket PATH] [--max-output-chars N]\n"
	"\n"
	"Serves MCP on stdin and stdout: one tool, bash ({command, timeout_seconds}), whose calls run in\n"
	"the session's sandbox through the manager. Logs go to stderr.\n"
	"\n"
	"  --session S            the session the tool runs in (required)\n"
	"  --socket PATH          the manager's control socket (default $SANDBOX_MANAGER_SOCKET)\n"
	"  --max-output-chars N   the tool result's text, about N bytes at most (500 to 4194304;\n"
	"                         default 30000); the whole output is kept in a file it names\n"
	"  -h, --help             this text\n";

/* A usage error: one line saying what, then the usage, on stderr. */
static int usage_error(const char *what, const char *arg)
{
	fprintf(stderr, "sandbox-manager mcp: %s%s%s%s\n%s", what, arg ? " '" : "", arg ? arg : "", arg ? "'" : "",
		mcp_usage);
	return 2;
}

_Static_assert(MCP_OUTPUT_CHARS_MIN == 500 && MCP_OUTPUT_CHARS_MAX == 4194304 && MCP_OUTPUT_CHARS_DEFAULT == 30000,
	       "mcp_usage and the --max-output-chars message state these bounds");

/* --max-output-chars: digits only, within the bounds. */
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

int mcp_serve(int argc, char **argv, const char *version)
{
	static const struct option opts[] = { { "session", 1, NULL, 's' }, { "socket", 1, NULL, 'k' },
					      { "max-output-chars", 1, NULL, 'o' }, { "help", 0, NULL, 'h' },
					      { NULL, 0, NULL, 0 } };
	const char *socket_flag = NULL;
	pthread_t worker;
	int opt, rc;

	opterr = 0;
	optind = 1;
	while ((opt = getopt_long(argc, argv, "+:h", opts, NULL)) != -1) {
		if (opt == 's')
			srv.session = optarg;
		else if (opt == 'k')
			socket_flag = optarg;
		else if (opt == 'o') {
			if (chars_parse(optarg, &srv.max_output_chars) < 0)
				return usage_error("--max-output-chars takes a number from 500 to 4194304, not", optarg);
		} else if (opt == 'h') {
			fputs(mcp_usage, stdout);
			return 0;
		} else
			return usage_error(opt == ':' ? "a value is missing after option" : "unknown option", argv[optind - 1]);
	}
	if (optind != argc)
		return usage_error("unexpected argument", argv[optind]);
	if (srv.session == NULL || srv.session[0] == '\0')
		return usage_error("--session is required", NULL);
	srv.socket_path = control_socket_path(socket_flag);
	srv.version = version;
	if (srv.max_output_chars == 0)
		srv.max_output_chars = MCP_OUTPUT_CHARS_DEFAULT;
	if (srv.socket_path == NULL) {
		fprintf(stderr, "sandbox-manager mcp: no manager socket: pass --socket PATH or set SANDBOX_MANAGER_SOCKET\n");
		return 2;
	}
	/* A client that went away must not kill us mid-write: writes fail with EPIPE instead. */
	signal(SIGPIPE, SIG_IGN);
	if (pthread_create(&worker, NULL, worker_main, NULL) != 0) {
		sb_error("mcp: could not start the worker thread");
		return 1;
	}
	sb_info("mcp: serving the bash tool for session %s (manager at %s)", srv.session, srv.socket_path);
	rc = stdin_serve();
	if (rc < 0)
		sb_warn("mcp: reading stdin: %s", strerror(errno));
	return drain(worker) < 0 ? 1 : 0;
}
