/* Client commands of sandbox-manager (see cli.h). Thin: parse flags, one request, print. Each
 * command's usage text (synopsis, flags) is its `struct command` below and exists nowhere else;
 * `-h`/`--help` prints it on stdout, a usage error prints one line that says what was wrong and
 * then the usage on stderr. Every failure is printed once, by whoever finds it. */
#include "cli.h"

#include <errno.h>
#include <jansson.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cleanup.h"
#include "cli_flags.h"
#include "control.h"
#include "control_client.h"
#include "control_limits.h"
#include "follow.h"
#include "textesc.h"
#include "utf8.h"

/* Live output (op "exec" with "stream", op "follow"): the frames before the answer, printed as they
 * come, each stream to its own descriptor; offsets[] end past the last byte printed. */
struct cli_live {
	unsigned long long offsets[2];
	unsigned long long skipped;
};

static size_t stream_write(FILE *out, const char *text, size_t len, int escaped);

static void live_print(struct cli_live *lv, json_t *o)
{
	const char *name = json_string_value(json_object_get(o, "stream")) ?: "";
	json_t *text = json_object_get(o, "text");
	int err = strcmp(name, "stderr") == 0;
	json_int_t skipped = json_integer_value(json_object_get(o, "skipped"));

	if (skipped > 0) {
		lv->skipped += (unsigned long long)skipped;
		fprintf(stderr, "sandbox-manager: %lld bytes of %s skipped here (this reader was slower than the "
			"command)\n", (long long)skipped, err ? "stderr" : "stdout");
	}
	lv->offsets[err] = (unsigned long long)json_integer_value(json_object_get(o, "offset"));
	lv->offsets[err] += stream_write(err ? stderr : stdout, json_string_value(text) ?: "",
					 json_string_length(text), json_is_true(json_object_get(o, "escaped")));
}

/* The answer, after the live frames (ctx: struct cli_live, or NULL when none were asked for). */
static int exchange_recv(struct control_conn *c, struct cli_live *lv, json_t **resp, struct sb_err *err)
{
	for (;;) {
		int rc = control_conn_recv(c, resp, err);
		json_t *o;

		if (rc <= 0 || lv == NULL || json_object_get(*resp, "ok") != NULL ||
		    !json_is_object(o = json_object_get(*resp, "output")))
			return rc;
		live_print(lv, o);
		json_decref(*resp);
		*resp = NULL;
	}
}

/* One manager asked on a connection of its own. A manager at its connection limit answers and
 * closes, maybe before the request is written: the write then fails (EPIPE, not a signal) and the
 * answer is still there to read; with nothing to read, nothing was delivered whole. */
static int cli_exchange(void *ctx, const char *path, json_t *req, json_t **resp, struct sb_err *err)
{
	struct control_conn c;
	struct sb_err send_err;
	int rc;

	sb_err_clear(&send_err);
	if (control_conn_open(&c, path, err) < 0)
		return FOLLOW_NOT_SENT;
	if (control_conn_send(&c, req, &send_err) < 0 && send_err.errnum != EPIPE) {
		*err = send_err;
		control_conn_close(&c);
		return FOLLOW_NOT_SENT;
	}
	rc = exchange_recv(&c, ctx, resp, err);
	control_conn_close(&c);
	if (rc > 0)
		return FOLLOW_ANSWERED;
	/* Nothing to read after a failed write: the write's error is the one to say. */
	if (send_err.msg[0] != '\0') {
		*err = send_err;
		return FOLLOW_NOT_SENT;
	}
	/* Said as it is, with no errno's words after it: scripts and docs/reliability.md match it. */
	if (rc == 0)
		sb_fail(err, 0, "the manager closed the connection without answering");
	return FOLLOW_LOST;
}

static json_t *cli_call_live(const json_t *sockets, json_t *request, struct cli_live *lv)
{
	struct follow_list l;
	json_t *response = NULL;
	struct sb_err err;

	signal(SIGPIPE, SIG_IGN);
	if (request == NULL)
		sb_fail(&err, ENOMEM, "cannot build the request (out of memory)");
	if (request == NULL || follow_list_parse(&l, sockets, &err) < 0 ||
	    follow_call(&l, request, cli_exchange, NULL, lv, &response, &err) != FOLLOW_ANSWERED)
		fprintf(stderr, "sandbox-manager: %s\n", err.msg);
	json_decref(request);
	return response;
}

struct json_t *mcli_call(const json_t *sockets, json_t *request)
{
	return cli_call_live(sockets, request, NULL);
}

/* The manager's refusal, on one line: "sandbox-manager: KIND: MESSAGE". */
static int print_error(json_t *response)
{
	json_t *e = json_object_get(response, "error");
	char *kind = textesc_str(json_string_value(json_object_get(e, "kind")));
	char *msg = textesc_str(json_string_value(json_object_get(e, "message")));

	fprintf(stderr, "sandbox-manager: %s: %s\n", kind ?: "error", msg ?: "(no message)");
	free(kind);
	free(msg);
	json_decref(response);
	return MCLI_FAILED;
}

/* A response: its error (exit 125), or the object without "ok" as JSON. NULL: mcli_call has
 * already said why, so nothing more is printed. */
static int print_response(json_t *response)
{
	char *text;

	if (response == NULL)
		return MCLI_FAILED;
	if (!json_is_true(json_object_get(response, "ok")))
		return print_error(response);
	json_object_del(response, "ok");
	text = textesc_json_dumps(response, JSON_INDENT(2) | JSON_SORT_KEYS);
	printf("%s\n", text ? text : "{}");
	free(text);
	json_decref(response);
	return 0;
}

/* A request that could not be built whole is not sent: a missing member would change what it asks. */
static int request_fail(json_t *req)
{
	json_decref(req);
	fprintf(stderr, "sandbox-manager: cannot build the request (out of memory)\n");
	return MCLI_FAILED;
}

/* ---- usage: each command's text, here and nowhere else ---- */

static const struct command cmd_session = {
	"session",
	"usage: sandbox-manager session create|show|delete|list [FLAGS]\n"
	"\n"
	"  create   a session: a worktree of a repository for an identity\n"
	"  show     a session, its sandbox and the limits that hold for it\n"
	"  delete   a session and its worktree, once its sandbox is proven gone\n"
	"  list     every session, newest first\n"
	"\n"
	"sandbox-manager session SUBCOMMAND --help shows its flags.\n",
};

static const struct command cmd_session_create = {
	"session create",
	"usage: sandbox-manager session create --identity ID --repo PATH_OR_URL [--branch B] [--grant RES=ACCESS]...\n"
	"                                      [--network open|none|proxy] [--egress-allow HOST[:PORT]]...\n"
	"                                      [--socket PATH]...\n"
	"\n"
	"Creates a session and its worktree; prints {\"session\", \"worktree\", \"branch\", \"network\"}.\n"
	"\n"
	"  --identity ID          whose session (required)\n"
	"  --repo PATH_OR_URL     the repository to work on (required)\n"
	"  --branch B             the worktree's branch (default: a new sandbox/<session> branch)\n"
	"  --grant RES=ACCESS     a declared resource, read or write (repeatable)\n"
	"  --network open|none|proxy  its sandboxes' network (default: the manager's, open unless configured):\n"
	"                         open reaches out through a NAT that keeps the host's loopback out;\n"
	"                         none has loopback only; proxy has loopback only and the manager's egress\n"
	"                         proxy on 127.0.0.1:3128 there (serve --egress-allow; process and podman)\n"
	"  --egress-allow HOST[:PORT]  network proxy: a destination this session's proxy also tunnels to,\n"
	"                         beside the manager's (serve --egress-allow's rules; repeatable)\n"
	SOCKET_HELP HELP_HELP,
};

static const struct command cmd_session_show = {
	"session show",
	"usage: sandbox-manager session show --session S [--socket PATH]...\n"
	"\n"
	"Prints the session: identity, worktree, branch, grants, generation, sandbox, limits, state.\n"
	"\n"
	"  --session S            the session (required)\n"
	SOCKET_HELP HELP_HELP,
};

static const struct command cmd_session_delete = {
	"session delete",
	"usage: sandbox-manager session delete --session S [--delete-branch] [--socket PATH]...\n"
	"\n"
	"Deletes the session's worktree once its sandbox is proven gone; its records stay.\n"
	"\n"
	"  --session S            the session (required)\n"
	"  --delete-branch        delete its branch too (kept by default)\n"
	SOCKET_HELP HELP_HELP,
};

static const struct command cmd_session_list = {
	"session list",
	"usage: sandbox-manager session list [--identity ID] [--state STATE] [--all] [--limit N] [--before S]\n"
	"                                    [--socket PATH]...\n"
	"\n"
	"Prints {\"sessions\": [{session, identity, state, sandbox, generation, created_ms, last_exec}],\n"
	"\"next_before\"}, newest first; \"next_before\", when present, is what --before takes next.\n"
	"\n"
	"  --identity ID          only this identity's sessions\n"
	"  --state STATE          only sessions in this state: active, reserved, deleting, deleted\n"
	"  --all                  deleted sessions too (left out unless named by --all or --state)\n"
	"  --limit N              at most N sessions (default 100, at most 1000)\n"
	"  --before S             only sessions created before session S (the next page)\n"
	SOCKET_HELP HELP_HELP,
};

static const struct command cmd_exec = {
	"exec",
	"usage: sandbox-manager exec --session S [--timeout-seconds N] [--turn N] [--json] [--socket PATH]... -- COMMAND\n"
	"\n"
	"Runs COMMAND (one argument, a bash command line) in the session's sandbox, prints its output\n"
	"as it comes (`follow --exec ID` shows it elsewhere too) and exits with its exit code:\n"
	"124 when it timed out, 128+N when signal N ended it, 125 when it\n"
	"was refused, cancelled, could not run, or its outcome is uncertain.\n"
	"\n"
	"  --session S            the session (required)\n"
	"  --timeout-seconds N    stop it after N seconds (default: the manager's)\n"
	"  --turn N               the agent framework's turn it belongs to\n"
	"  --json                 print the exec result as JSON at the end instead of the output\n"
	SOCKET_HELP HELP_HELP,
};

static const struct command cmd_status = {
	"status",
	"usage: sandbox-manager status [--json] [--socket PATH]...\n"
	"\n"
	"The manager's backend, version, sandboxes, sessions and execs by state, and its health. Exits 0\n"
	"healthy, 1 degraded (uncertain execs or reserved sessions await an operator: it says which),\n"
	"125 unreachable.\n"
	"\n"
	"  --json                 the answer as JSON\n"
	SOCKET_HELP HELP_HELP,
};

static const struct command cmd_metrics = {
	"metrics",
	"usage: sandbox-manager metrics [--socket PATH]...\n"
	"\n"
	"The manager's metrics in the Prometheus text format (also: serve --metrics-listen ADDR).\n"
	"\n"
	SOCKET_HELP HELP_HELP,
};

static const struct command cmd_cancel = {
	"cancel",
	"usage: sandbox-manager cancel --session S [--socket PATH]...\n"
	"\n"
	"Stops the session's running command and answers once it is recorded: {\"cancelled\": EXEC, \"state\"},\n"
	"or {\"cancelled\": null} when nothing was running.\n"
	"\n"
	"  --session S            the session (required)\n"
	SOCKET_HELP HELP_HELP,
};

static const struct command cmd_grant = {
	"grant",
	"usage: sandbox-manager grant --session S (--set RES=ACCESS | --revoke RES) [--socket PATH]...\n"
	"\n"
	"Changes the session's authority (its sandbox is retired first) and prints the session.\n"
	"\n"
	"  --session S            the session (required)\n"
	"  --set RES=ACCESS       grant a declared resource, read or write\n"
	"  --revoke RES           revoke it (the running command is stopped)\n"
	SOCKET_HELP HELP_HELP,
};

static const struct command cmd_records = {
	"records",
	"usage: sandbox-manager records --session S [--limit N] [--before EXEC] [--state STATE] [--socket PATH]...\n"
	"       sandbox-manager records --exec ID [--socket PATH]...\n"
	"\n"
	"Prints {\"records\": [...], \"next_before\"}: a page of the session's execs, newest first, or one exec.\n"
	"\n"
	"  --session S            the session's execs\n"
	"  --exec ID              this one exec\n"
	"  --limit N              at most N records (default 20, at most 200)\n"
	"  --before EXEC          only execs older than EXEC (the next page: the answer's next_before)\n"
	"  --state STATE          only execs in STATE (accepted, dispatched, exited, signaled, timed_out,\n"
	"                         cancelled, uncertain, refused), or unresolved: uncertain, not yet resolved\n"
	SOCKET_HELP HELP_HELP,
};

static const struct command cmd_follow = {
	"follow",
	"usage: sandbox-manager follow --exec ID [--offset N] [--stderr-offset N] [--socket PATH]...\n"
	"\n"
	"Prints a running exec's output as it comes, each stream to its own, from another terminal; ends\n"
	"when the exec ends. An exec that is not running (any more) here: what its record keeps is printed.\n"
	"Bytes this reader could not take in time are skipped, and said on stderr (the record keeps its\n"
	"head and tail). At most 8 followers per exec.\n"
	"\n"
	"  --exec ID              the exec (required)\n"
	"  --offset N             start at stdout's byte N (resume after a disconnect)\n"
	"  --stderr-offset N      start at stderr's byte N\n"
	"  --socket PATH          the manager's control socket (default $SANDBOX_MANAGER_SOCKET)\n",
};

static const struct command cmd_resolve = {
	"resolve",
	"usage: sandbox-manager resolve --exec ID --outcome ran|not-ran|unknown --note TEXT [--socket PATH]...\n"
	"\n"
	"Records an operator's word on an exec recorded uncertain: what they found it did and why. The\n"
	"exec stays uncertain and is never run again; the resolution (outcome, note, by_uid, by_name,\n"
	"at_ms) is shown in its record. Once only: a second resolve is refused.\n"
	"\n"
	"  --exec ID              the uncertain exec (required)\n"
	"  --outcome OUTCOME      ran, not-ran or unknown (required)\n"
	"  --note TEXT            what was checked (required, 1 to 4096 bytes of UTF-8)\n"
	SOCKET_HELP HELP_HELP,
};

/* The values of flags f[0..n) that were given, each as UTF-8 text: 0, or the usage error. */
static int flags_utf8(const struct command *c, const struct flag *f, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (f[i].set && f[i].has_arg && !utf8_valid_str(f[i].value))
			return usage_error(c, "--%s '%s' is not UTF-8 text", f[i].name, f[i].value);
	return 0;
}

/* ---- session ---- */

static int session_create(int argc, char **argv)
{
	const struct command *c = &cmd_session_create;
	json_t *sockets cleanup_json = json_array(); /* --socket, in order */
	struct flag f[] = { { "identity", 1, NULL, NULL, 0 }, { "repo", 1, NULL, NULL, 0 },
			    { "branch", 1, NULL, NULL, 0 },   { "grant", 1, NULL, json_array(), 0 },
			    { "socket", 1, NULL, sockets, 0 }, { "network", 1, NULL, NULL, 0 },
			    { "egress-allow", 1, NULL, json_array(), 0 } };
	json_t *req;
	int code = 0;

	if (f[3].values == NULL || f[6].values == NULL) {
		json_decref(f[3].values);
		json_decref(f[6].values);
		return request_fail(NULL);
	}
	if (flags_only(c, argc, argv, f, 7, &code) == FLAGS_DONE || (code = flag_required(c, &f[0])) != 0 ||
	    (code = flag_required(c, &f[1])) != 0 || (code = flags_utf8(c, f, 3)) != 0) {
		json_decref(f[3].values);
		json_decref(f[6].values);
		return code;
	}
	req = json_pack("{s:s, s:s, s:s, s:s?, s:o, s:s*, s:o}", "op", "session.create", "identity", f[0].value, "repo",
			f[1].value, "branch", f[2].value, "grants", f[3].values, "network", f[5].value, "egress_allow",
			f[6].values);
	if (req == NULL)
		return request_fail(NULL);
	return print_response(mcli_call(sockets, req));
}

/* session show, session delete and cancel: one session, one op. */
static int session_simple(const struct command *c, int argc, char **argv, const char *op, bool delete_flag)
{
	json_t *sockets cleanup_json = json_array(); /* --socket, in order */
	struct flag f[] = { { "session", 1, NULL, NULL, 0 }, { "socket", 1, NULL, sockets, 0 },
			    { "delete-branch", 0, NULL, NULL, 0 } };
	json_t *req;
	int code = 0;

	if (flags_only(c, argc, argv, f, delete_flag ? 3 : 2, &code) == FLAGS_DONE || (code = flag_required(c, &f[0])) != 0 ||
	    (code = flags_utf8(c, f, 1)) != 0)
		return code;
	req = json_pack("{s:s, s:s}", "op", op, "session", f[0].value);
	if (req == NULL || (delete_flag && json_object_set_new(req, "delete_branch", json_boolean(f[2].set)) != 0))
		return request_fail(req);
	return print_response(mcli_call(sockets, req));
}

static int session_list(int argc, char **argv)
{
	const struct command *c = &cmd_session_list;
	json_t *sockets cleanup_json = json_array(); /* --socket, in order */
	struct flag f[] = { { "identity", 1, NULL, NULL, 0 }, { "state", 1, NULL, NULL, 0 },
			    { "all", 0, NULL, NULL, 0 },      { "limit", 1, NULL, NULL, 0 },
			    { "before", 1, NULL, NULL, 0 },   { "socket", 1, NULL, sockets, 0 } };
	long limit = 0;
	json_t *req;
	int code = 0;

	/* The state is the manager's to check, as for records: it knows the states. */
	if (flags_only(c, argc, argv, f, 6, &code) == FLAGS_DONE)
		return code;
	if (f[3].set && (limit = flag_number(f[3].value, 1, CONTROL_SESSIONS_LIMIT_MAX)) < 0)
		return usage_error(c, "--limit takes a whole number from 1 to %u, not '%s'", CONTROL_SESSIONS_LIMIT_MAX,
				   f[3].value);
	if ((code = flags_utf8(c, f, 5)) != 0)
		return code;
	req = json_pack("{s:s, s:s*, s:s*, s:s*, s:b}", "op", "session.list", "identity", f[0].value, "state",
			f[1].value, "before", f[4].value, "all", f[2].set);
	/* A request without its limit would ask for another page than the one named: not sent. */
	if (req == NULL || (limit > 0 && json_object_set_new(req, "limit", json_integer(limit)) != 0))
		return request_fail(req);
	return print_response(mcli_call(sockets, req));
}

int mcli_session(int argc, char **argv)
{
	const char *sub = argc >= 2 ? argv[1] : "";

	if (strcmp(sub, "create") == 0)
		return session_create(argc - 1, argv + 1);
	if (strcmp(sub, "show") == 0)
		return session_simple(&cmd_session_show, argc - 1, argv + 1, "session.show", false);
	if (strcmp(sub, "delete") == 0)
		return session_simple(&cmd_session_delete, argc - 1, argv + 1, "session.delete", true);
	if (strcmp(sub, "list") == 0)
		return session_list(argc - 1, argv + 1);
	if (strcmp(sub, "-h") == 0 || strcmp(sub, "--help") == 0) {
		fputs(cmd_session.usage, stdout);
		return 0;
	}
	if (sub[0] == '\0')
		return usage_error(&cmd_session, "a subcommand is required");
	return usage_error(&cmd_session, "unknown subcommand '%s'", sub);
}

/* ---- exec ---- */

/* The result's text back to the command's bytes, by the exec result's one rule (common/textesc.h,
 * docs/operations.md). Written with its length: plain text may hold control bytes (never NUL).
 * Returns how many bytes of the command's that is. */
static size_t stream_write(FILE *out, const char *text, size_t len, int escaped)
{
	uint8_t *raw;
	size_t n = len;

	if (!escaped) {
		fwrite(text, 1, len, out);
	} else if ((raw = malloc(len + 1)) == NULL) {
		fprintf(stderr, "sandbox-manager: out of memory decoding %zu bytes of output\n", len);
		n = 0;
	} else {
		n = textesc_decode(text, len, raw);
		fwrite(raw, 1, n, out);
		free(raw);
	}
	fflush(out);
	return n;
}

static int exec_exit_code(json_t *result)
{
	const char *status = json_string_value(json_object_get(result, "status")) ?: "";

	if (strcmp(status, "exited") == 0)
		return (int)json_integer_value(json_object_get(result, "exit_code"));
	if (strcmp(status, "signaled") == 0)
		return 128 + (int)json_integer_value(json_object_get(result, "signal"));
	if (strcmp(status, "timed_out") == 0)
		return MCLI_TIMEOUT;
	return MCLI_FAILED;
}

static void record_stream_print(json_t *result, int err, unsigned long long from, bool whole);

/* streamed (the answer says "streamed"): the output was printed as it came, up to lv's offsets;
 * only what did not arrive live is printed now (a cut agent link, answered by the manager's query). */
static int exec_print(json_t *result, int as_json, const struct cli_live *streamed)
{
	json_t *out = json_object_get(result, "stdout"), *err = json_object_get(result, "stderr");
	const char *status = json_string_value(json_object_get(result, "status")) ?: "?";
	int code = exec_exit_code(result);

	if (as_json) {
		char *text = textesc_json_dumps(result, JSON_COMPACT);

		printf("%s\n", text ? text : "{}");
		free(text);
		return code;
	}
	if (streamed != NULL) {
		record_stream_print(result, 0, streamed->offsets[0], false);
		record_stream_print(result, 1, streamed->offsets[1], false);
	} else {
		stream_write(stdout, json_string_value(out) ?: "", json_string_length(out),
			     json_is_true(json_object_get(result, "stdout_escaped")));
		stream_write(stderr, json_string_value(err) ?: "", json_string_length(err),
			     json_is_true(json_object_get(result, "stderr_escaped")));
	}
	if (strcmp(status, "timed_out") == 0) {
		fprintf(stderr, "sandbox-manager: the command timed out\n");
	} else if (code == MCLI_FAILED) {
		/* the reason may quote what the command wrote (a path it made) */
		char *why = textesc_str(json_string_value(json_object_get(result, "error")));

		fprintf(stderr, "sandbox-manager: the command's outcome is %s%s%s\n", status, why ? ": " : "", why ?: "");
		free(why);
	}
	return code;
}

int mcli_exec(int argc, char **argv)
{
	const struct command *c = &cmd_exec;
	json_t *sockets cleanup_json = json_array(); /* --socket, in order */
	struct flag f[] = { { "session", 1, NULL, NULL, 0 }, { "timeout-seconds", 1, NULL, NULL, 0 },
			    { "json", 0, NULL, NULL, 0 },    { "socket", 1, NULL, sockets, 0 },
			    { "turn", 1, NULL, NULL, 0 } };
	json_t *req, *resp, *result;
	struct cli_live lv = { { 0, 0 }, 0 };
	long timeout = 0, turn = -1;
	int code = 0, i = flags_parse(c, argc, argv, f, 5, &code);

	if (i == FLAGS_DONE || (code = flag_required(c, &f[0])) != 0)
		return code;
	if (i == argc || strcmp(argv[i - 1], "--") != 0)
		return usage_error(c, "the command goes after --, as one argument (quote it)");
	if (i != argc - 1)
		return usage_error(c, "the command after -- is one argument (quote it), not %d", argc - i);
	if (f[1].set && (timeout = flag_number(f[1].value, 1, 86400)) < 0)
		return usage_error(c, "--timeout-seconds takes a whole number of seconds from 1 to 86400, not '%s'",
				   f[1].value);
	if (f[4].set && (turn = flag_number(f[4].value, 0, 1L << 53)) < 0)
		return usage_error(c, "--turn takes a whole number, at least 0, not '%s'", f[4].value);
	if (!utf8_valid_str(f[0].value) || !utf8_valid_str(argv[i]))
		return usage_error(c, "the session and the command must be UTF-8 text");
	req = json_pack("{s:s, s:s, s:s}", "op", "exec", "session", f[0].value, "command", argv[i]);
	/* Unset, the manager would use its default timeout (or turn) instead of the one asked for. */
	if (req == NULL || (timeout > 0 && json_object_set_new(req, "timeout_seconds", json_integer(timeout)) != 0) ||
	    (turn >= 0 && json_object_set_new(req, "turn", json_integer(turn)) != 0) ||
	    (!f[2].set && json_object_set_new(req, "stream", json_true()) != 0))
		return request_fail(req);
	/* --json keeps stdout one JSON object: its output is in it, not printed as it comes. */
	resp = cli_call_live(sockets, req, f[2].set ? NULL : &lv);
	if (resp == NULL)
		return MCLI_FAILED;
	result = json_object_get(resp, "result");
	if (!json_is_true(json_object_get(resp, "ok")) || !json_is_object(result))
		return print_response(resp);
	/* Nothing came live (an agent that does not stream, a command that printed nothing): the result
	 * is printed whole, as without live output. */
	code = exec_print(result, f[2].set,
			  json_is_true(json_object_get(resp, "streamed")) && lv.offsets[0] + lv.offsets[1] + lv.skipped > 0 ?
				  &lv : NULL);
	json_decref(resp);
	return code;
}

/* ---- cancel, grant, records, resolve ---- */

int mcli_cancel(int argc, char **argv)
{
	return session_simple(&cmd_cancel, argc, argv, "cancel", false);
}

int mcli_grant(int argc, char **argv)
{
	const struct command *c = &cmd_grant;
	json_t *sockets cleanup_json = json_array(); /* --socket, in order */
	struct flag f[] = { { "session", 1, NULL, NULL, 0 }, { "set", 1, NULL, NULL, 0 },
			    { "revoke", 1, NULL, NULL, 0 },  { "socket", 1, NULL, sockets, 0 } };
	json_t *req;
	int code = 0;

	if (flags_only(c, argc, argv, f, 4, &code) == FLAGS_DONE || (code = flag_required(c, &f[0])) != 0)
		return code;
	if (f[1].set == f[2].set)
		return usage_error(c, "give exactly one of --set RES=ACCESS and --revoke RES");
	if (!utf8_valid_str(f[0].value) || !utf8_valid_str(f[1].set ? f[1].value : f[2].value))
		return usage_error(c, "the session and the resource must be UTF-8 text");
	req = json_pack("{s:s, s:s, s:s?, s:s?}", "op", "grant", "session", f[0].value, "set", f[1].value, "revoke",
			f[2].value);
	if (req == NULL)
		return request_fail(NULL);
	return print_response(mcli_call(sockets, req));
}

/* A page of records: newest first; the answer's "next_before", when present, is what --before
 * takes for the next page (DESIGN.md; the manager bounds every page, invariant 13). */
int mcli_records(int argc, char **argv)
{
	const struct command *c = &cmd_records;
	json_t *sockets cleanup_json = json_array(); /* --socket, in order */
	struct flag f[] = { { "session", 1, NULL, NULL, 0 }, { "exec", 1, NULL, NULL, 0 },
			    { "limit", 1, NULL, NULL, 0 },   { "before", 1, NULL, NULL, 0 },
			    { "state", 1, NULL, NULL, 0 },   { "socket", 1, NULL, sockets, 0 } };
	json_t *req;
	long limit = 0;
	int code = 0;

	if (flags_only(c, argc, argv, f, 6, &code) == FLAGS_DONE)
		return code;
	if (f[0].set == f[1].set)
		return usage_error(c, "give exactly one of --session S and --exec ID");
	if (f[1].set && (f[2].set || f[3].set || f[4].set))
		return usage_error(c, "--limit, --before and --state page a session's records, not one exec's");
	if (f[2].set && (limit = flag_number(f[2].value, 1, CONTROL_RECORDS_LIMIT_MAX)) < 0)
		return usage_error(c, "--limit takes a whole number of records from 1 to %u, not '%s'",
				   CONTROL_RECORDS_LIMIT_MAX, f[2].value);
	if ((code = flags_utf8(c, f, 5)) != 0)
		return code;
	req = json_pack("{s:s, s:s*, s:s*, s:s*, s:s*}", "op", "records", "session", f[0].value, "exec", f[1].value,
			"before", f[3].value, "state", f[4].value);
	/* A request without its limit would ask for another page than the one named: not sent. */
	if (req == NULL || (limit > 0 && json_object_set_new(req, "limit", json_integer(limit)) != 0))
		return request_fail(req);
	return print_response(mcli_call(sockets, req));
}

/* What a result keeps of one stream past byte `from` (what live output printed already): the rest
 * of the text when it is the command's whole output. A truncated one (head and tail) cannot be
 * placed by offset: with whole, all of it is printed (follow), else a note says what was not shown
 * (exec, which printed from the start). */
static void record_stream_print(json_t *result, int err, unsigned long long from, bool whole)
{
	const char *name = err ? "stderr" : "stdout";
	char key[32];
	json_t *text = json_object_get(result, name);
	const char *t = json_string_value(text) ?: "";
	size_t len = json_string_length(text);
	unsigned long long total;
	uint8_t *raw;
	size_t n;

	snprintf(key, sizeof key, "%s_escaped", name);
	if (!json_is_true(json_object_get(result, key))) {
		raw = (uint8_t *)strndup(t, len);
		n = len;
	} else if ((raw = malloc(len + 1)) != NULL) {
		n = textesc_decode(t, len, raw);
	}
	if (raw == NULL)
		return;
	snprintf(key, sizeof key, "%s_bytes", name);
	total = (unsigned long long)json_integer_value(json_object_get(result, key));
	snprintf(key, sizeof key, "%s_truncated", name);
	if (json_is_true(json_object_get(result, key)) && from < total) {
		if (!whole)
			fprintf(stderr, "sandbox-manager: %llu bytes of %s were not shown live; `records --exec` keeps its "
				"head and tail\n", total - from, name);
		from = whole ? 0 : n;
	}
	if (from < n)
		fwrite(raw + from, 1, n - from, err ? stderr : stdout);
	fflush(err ? stderr : stdout);
	free(raw);
}

/* The exec is not running here: its record, when it has a result, from the offsets on. */
static int follow_record(const json_t *sockets, const char *exec_id, const struct cli_live *lv)
{
	json_t *resp = mcli_call(sockets, json_pack("{s:s, s:s}", "op", "records", "exec", exec_id));
	json_t *rec = json_array_get(json_object_get(resp, "records"), 0);
	json_t *result = json_object_get(rec, "result");

	if (resp == NULL)
		return MCLI_FAILED;
	if (!json_is_true(json_object_get(resp, "ok")))
		return print_error(resp);
	if (json_is_object(result)) {
		record_stream_print(result, 0, lv->offsets[0], true);
		record_stream_print(result, 1, lv->offsets[1], true);
	} else {
		char *state = textesc_str(json_string_value(json_object_get(rec, "state")));

		fprintf(stderr, "sandbox-manager: exec %s is not running here; its record is %s, with no output kept\n",
			exec_id, state ?: "unknown");
		free(state);
	}
	json_decref(resp);
	return 0;
}

int mcli_follow(int argc, char **argv)
{
	const struct command *c = &cmd_follow;
	json_t *sockets cleanup_json = json_array(); /* --socket, in order */
	struct flag f[] = { { "exec", 1, NULL, NULL, 0 }, { "offset", 1, NULL, NULL, 0 },
			    { "stderr-offset", 1, NULL, NULL, 0 }, { "socket", 1, NULL, sockets, 0 } };
	struct cli_live lv = { { 0, 0 }, 0 };
	json_t *req, *resp;
	long off[2] = { 0, 0 };
	int code = 0;

	if (flags_only(c, argc, argv, f, 4, &code) == FLAGS_DONE || (code = flag_required(c, &f[0])) != 0)
		return code;
	for (int i = 0; i < 2; i++)
		if (f[1 + i].set && (off[i] = flag_number(f[1 + i].value, 0, 1L << 53)) < 0)
			return usage_error(c, "--%s takes a whole number of bytes, at least 0, not '%s'", f[1 + i].name,
					   f[1 + i].value);
	if ((code = flags_utf8(c, f, 1)) != 0)
		return code;
	lv.offsets[0] = (unsigned long long)off[0];
	lv.offsets[1] = (unsigned long long)off[1];
	req = json_pack("{s:s, s:s, s:I, s:I}", "op", "follow", "exec", f[0].value, "offset", (json_int_t)off[0],
			"stderr_offset", (json_int_t)off[1]);
	if (req == NULL)
		return request_fail(NULL);
	resp = cli_call_live(sockets, req, &lv);
	if (resp == NULL)
		return MCLI_FAILED;
	if (!json_is_true(json_object_get(resp, "ok")))
		return print_error(resp);
	code = json_is_true(json_object_get(resp, "running")) ? 0 : follow_record(sockets, f[0].value, &lv);
	json_decref(resp);
	return code;
}

int mcli_resolve(int argc, char **argv)
{
	const struct command *c = &cmd_resolve;
	json_t *sockets cleanup_json = json_array(); /* --socket, in order */
	struct flag f[] = { { "exec", 1, NULL, NULL, 0 }, { "outcome", 1, NULL, NULL, 0 },
			    { "note", 1, NULL, NULL, 0 }, { "socket", 1, NULL, sockets, 0 } };
	const char *o;
	json_t *req;
	int code = 0;

	if (flags_only(c, argc, argv, f, 4, &code) == FLAGS_DONE || (code = flag_required(c, &f[0])) != 0 ||
	    (code = flag_required(c, &f[1])) != 0 || (code = flag_required(c, &f[2])) != 0)
		return code;
	o = f[1].value;
	if (strcmp(o, "ran") != 0 && strcmp(o, "not-ran") != 0 && strcmp(o, "unknown") != 0)
		return usage_error(c, "--outcome takes ran, not-ran or unknown, not '%s'", o);
	if (f[2].value[0] == '\0' || strlen(f[2].value) > CONTROL_NOTE_MAX || !utf8_valid_str(f[2].value))
		return usage_error(c, "--note takes 1 to %u bytes of UTF-8 text (what was checked)", CONTROL_NOTE_MAX);
	if ((code = flags_utf8(c, f, 1)) != 0)
		return code;
	req = json_pack("{s:s, s:s, s:s, s:s}", "op", "resolve", "exec", f[0].value, "outcome", o, "note", f[2].value);
	if (req == NULL)
		return request_fail(NULL);
	return print_response(mcli_call(sockets, req));
}

int mcli_version(int argc, char **argv, const char *version)
{
	static const struct command c = { "version", "usage: sandbox-manager version\n"
						     "       sandbox-manager --version\n"
						     "\n"
						     "Prints the version of this sandbox-manager.\n" HELP_HELP };
	int code = 0;

	if (flags_only(&c, argc, argv, NULL, 0, &code) == FLAGS_DONE)
		return code;
	printf("sandbox-manager %s\n", version);
	return 0;
}

/* ---- status, metrics ---- */

int mcli_status(int argc, char **argv)
{
	bool metrics = strcmp(argv[0], "metrics") == 0;
	const struct command *c = metrics ? &cmd_metrics : &cmd_status;
	json_t *sockets cleanup_json = json_array(); /* --socket, in order */
	struct flag f[] = { { "socket", 1, NULL, sockets, 0 }, { "json", 0, NULL, NULL, 0 } };
	int code = 0;

	if (flags_only(c, argc, argv, f, metrics ? 1 : 2, &code) == FLAGS_DONE)
		return code;
	return metrics ? mcli_metrics_run(sockets) : mcli_status_run(sockets, f[1].set);
}
