/* The Codex app-server bridge (see codex_bridge.h): JSON lines between a supervisor (our stdin and
 * stdout) and `codex app-server` (a child, its stdin and stdout), passed through untouched except
 * where the managed `bash` tool is concerned: thread/start gets the tool and loses the shell,
 * thread/resume and thread/fork keep the shell off (codex_policy.c), and Codex's item/tool/call for
 * `bash` is answered here, through the daemon (daemon_call.c), with the text of front/bash_tool.h.
 * It must never run a command itself: no shell, no exec but Codex's, no fallback when the daemon
 * is unreachable.
 *
 * Threads: the main thread reads the supervisor; one reads Codex; each `bash` call has its own
 * (the daemon runs a session's calls one at a time anyway), so a turn/interrupt is acted on while
 * a call blocks on the daemon. Each peer's writes are whole lines under that peer's lock. */
#include "codex_bridge.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include "bash_tool.h"
#include "cleanup.h"
#include "cli.h"
#include "cli_flags.h"
#include "codex_policy.h"
#include "control.h"
#include "daemon_call.h"
#include "fdio.h"
#include "lines.h"
#include "log.h"
#include "mcp_shape.h"
#include "thread.h"

#define LINE_CAP (64u * 1024u * 1024u) /* one message: from Codex a larger one passes unread, from the supervisor it is refused */
#define CALLS_MAX 64                   /* bash calls in flight at once; more are refused */
#define FAILED_EXIT 125

enum { RPC_PARSE = -32700, RPC_INVALID_REQUEST = -32600, RPC_INTERNAL = -32603 };

/* One `bash` call of Codex's, from item/tool/call to its answer. */
struct bridge_call {
	json_t *id;            /* Codex's request id */
	json_t *args;          /* params.arguments */
	char *thread_id, *turn_id;
	int cancel_requested;  /* under br.lock: its turn was interrupted */
	struct daemon_exec exec; /* its tag: "codex-<pid>-<n>" */
	struct bridge_call *next;
};

static struct {
	struct daemon_peer peer;    /* the daemon and the session; set before any thread starts */
	struct bash_tool_view view; /* set before any thread starts, then only read */
	int to_codex, from_codex;   /* to_codex is -1 once closed, under codex_lock */
	pid_t codex;
	pthread_mutex_t lock;  /* the fields below, up to codex_lock */
	struct bridge_call *calls;
	unsigned ncalls;
	json_t *asked;         /* ids of Codex's requests passed to the supervisor, not yet answered */
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

/* ---- the supervisor's thread/start, thread/resume, thread/fork ---- */

/* thread/start, thread/resume or thread/fork (msg, borrowed): edited and sent on, or refused. */
static void thread_request(json_t *msg, int is_start)
{
	char why[512];

	if (codex_policy_thread(msg, is_start, view(), &br.peer, why, sizeof why) < 0) {
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
			sb_info("codex-bridge: turn %s interrupted: cancelling its call %s in the manager", c->turn_id, c->exec.tag);
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

/* One line from the supervisor; one over LINE_CAP (overlong) is refused unread. */
static void supervisor_line(const char *line, size_t len, int overlong)
{
	json_t *msg = overlong ? NULL : json_loadb(line, len, JSON_REJECT_DUPLICATES, NULL);
	const char *method = json_string_value(json_object_get(msg, "method"));

	if (msg == NULL || !json_is_object(msg)) {
		/* Unread, it could be a thread/start that keeps the shell: not passed on. */
		send_json(0, json_pack("{s:n, s:{s:i, s:s}}", "id", "error", "code", RPC_PARSE, "message",
				       overlong ? "sandbox-manager codex-bridge: a message over 64 MiB is refused" :
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
		if (codex_policy_host_exec(method)) {
			refuse(msg, "%s runs a command outside the sandbox: run it with `sandbox-manager exec --session %s`",
			       method, br.peer.session);
			json_decref(msg);
			return;
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
	free(c->exec.command);
	free(c);
}

/* The call's tool result ({content, isError}, front/bash_tool.h). */
static json_t *call_run(struct bridge_call *c)
{
	struct daemon_wait w = { &br.lock, &c->cancel_requested, NULL, NULL, NULL };
	json_t *refusal;

	if (daemon_call_args(&br.peer, view(), c->args, &c->exec, &refusal) < 0)
		return refusal;
	return daemon_call_bash(&br.peer, view(), &c->exec, &w);
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
	snprintf(c->exec.tag, sizeof c->exec.tag, "codex-%d-%lu", (int)getpid(), ++calls);
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
static void codex_line(const char *line, size_t len, int overlong)
{
	json_t *msg, *params, *ns;

	if (overlong) {
		/* Lines from Codex have no cap: this one could not be held in memory. */
		sb_error("codex-bridge: out of memory: a line of Codex's not passed on");
		return;
	}
	msg = len <= LINE_CAP ? json_loadb(line, len, 0, NULL) : NULL;
	params = json_object_get(msg, "params");
	ns = json_object_get(params, "namespace");

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
	if (lines_read(br.from_codex, SIZE_MAX, codex_line) < 0)
		sb_warn("codex-bridge: reading codex: %s", strerror(errno));
	rc = codex_wait();
	sb_info("codex-bridge: codex exited (%d)", rc);
	pthread_mutex_lock(&br.sup_lock); /* no half-written line on the way out */
	_exit(rc);
}

/* ---- the command ---- */

static const struct command cmd_bridge = {
	"codex-bridge",
	"usage: sandbox-manager codex-bridge --session S [--socket PATH]... [--max-output-chars N]\n"
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
	SOCKET_HELP OUTPUT_CHARS_HELP HELP_HELP
	"\n"
	"Exit: Codex's own exit code; 2 a usage error; 125 Codex could not be started.\n",
};

int codex_bridge_serve(int argc, char **argv)
{
	const struct command *c = &cmd_bridge;
	static struct follow_list managers; /* for the whole process: the calls' threads use them */
	json_t *sockets cleanup_json = json_array(); /* --socket, in order */
	struct flag f[] = { { "session", 1, NULL, NULL, 0 }, { "socket", 1, NULL, sockets, 0 },
			    { "max-output-chars", 1, NULL, NULL, 0 } };
	static char *default_command[] = { "codex", "app-server", NULL };
	char **command = default_command;
	struct sb_err err;
	pthread_t reader;
	int code = 0, i = flags_parse(c, argc, argv, f, 3, &code);

	/* Codex's tool results are text for the model: plain content, no structured copy. */
	br.view.max_output_chars = MCP_OUTPUT_CHARS_DEFAULT;
	br.view.structured = false;
	if (i == FLAGS_DONE || (f[2].set && (code = flag_output_chars(c, f[2].value, &br.view.max_output_chars)) != 0))
		return code;
	/* flags_parse stops at "--" (and at the first operand): what follows is Codex's command. */
	if (i < argc && strcmp(argv[i - 1], "--") != 0)
		return usage_error(c, "unexpected argument '%s' (Codex's command goes after --)", argv[i]);
	if (i < argc)
		command = argv + i;
	if (f[0].value == NULL || f[0].value[0] == '\0')
		return usage_error(c, "--session is required");
	if (follow_list_parse(&managers, sockets, &err) < 0) {
		fprintf(stderr, "sandbox-manager codex-bridge: %s\n", err.msg);
		return MCLI_USAGE;
	}
	br.peer = (struct daemon_peer){ &managers, f[0].value, "codex-bridge" };
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
	sb_info("codex-bridge: %s for session %s (manager at %s; %zu sockets listed)", command[0], br.peer.session,
		managers.path[0], managers.n);
	if (lines_read(STDIN_FILENO, LINE_CAP, supervisor_line) < 0)
		sb_warn("codex-bridge: reading stdin: %s", strerror(errno));
	/* The supervisor is done: Codex sees the end of its input and exits; the reader ends the bridge. */
	pthread_mutex_lock(&br.codex_lock);
	close(br.to_codex);
	br.to_codex = -1;
	pthread_mutex_unlock(&br.codex_lock);
	pthread_join(reader, NULL);
	return FAILED_EXIT; /* not reached: the reader exits */
}
