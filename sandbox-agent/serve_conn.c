/* `sandbox-agent serve`, one connection (serve.c owns the listener and the agent's setup): its
 * thread, the TLS handshake and Hello, and each request's handler. Every request that reaches a
 * handler passed mTLS and is STILL treated as untrusted: each field is checked before use, because a
 * compromised manager must not turn the agent against its own boundary. */
#include "serve_internal.h"

#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

#include "live_tap.h"
#include "log.h"
#include "json_text.h"
#include "names.h"
#include "opts.h"
#include "proto.h"
#include "receipt.h"
#include "result.h"
#include "secret.h"
#include "thread.h"
#include "steptime.h"

#define SERVE_FRAME_CAP SB_FRAME_CAP_DEFAULT
#define SERVE_MAX_CONNECTIONS 16 /* verified connections (the manager's) */
#define SERVE_HANDSHAKES_MAX 16  /* connections in their handshake: anyone who reaches the listener */
#define SERVE_HANDSHAKE_MS 10000
#define SERVE_IDLE_MS (15 * 60 * 1000)
#define SERVE_COMMAND_MAX (1024 * 1024)
#define SERVE_OUTPUT_LIMIT_MAX (1024 * 1024) /* escaped output of both streams must fit a frame */
#define ENV_VALUE_MAX 4000
#define ENV_ENTRY_MAX (ENV_NAME_MAX + 1 + ENV_VALUE_MAX) /* NAME=VALUE and the NUL */
#define SERVE_BUILD "sandbox-agent 0.1.0"
#define SERVE_CHUNK_SEND_MS 30000 /* a live chunk the manager does not take in this long ends the stream */

struct conn {
	struct agent *agent;
	int fd;
	struct tls_session *tls;
	struct sb_stream stream;
	bool tunnel;   /* a NetAccept made it a tunnel: it counts in net_connections (serve_net.c) */
	bool counted;  /* verified, and counted in connections (or net_connections once a tunnel) */
	struct handshake_ticket ticket;
	/* Live output's sender and rings, made on this connection's first exec that asks for it and
	 * kept for its later ones (live_tap.h): a warm call no longer pays a thread's start and join and
	 * two fresh rings. One per connection rather than one per agent: the sender writes to this
	 * connection's session alone and is joined before that session is closed, so it can never
	 * outlive the session it writes to, and a session a failed send broke (tls.c marks it) stays
	 * this connection's, never met by an exec on another. Its cost is bounded by
	 * SERVE_MAX_CONNECTIONS, and a tunnel or a connection that never asks for live output pays
	 * nothing. */
	struct live_tap tap;
};

/* ---- answers ---- */

/* n envelopes in one write (proto_send_many): a Result and its Receipt reach the manager together. */
static int send_envelopes(struct conn *c, const Sandbox__Envelope *const *envs, size_t n)
{
	struct sb_err err;

	if (proto_send_many(&c->stream, envs, n, SERVE_FRAME_CAP, &err) < 0) {
		sb_warn("sending %s: %s", proto_body_name(envs[0]->body_case), err.msg);
		return -1;
	}
	return 0;
}

static int send_envelope(struct conn *c, const Sandbox__Envelope *env)
{
	return send_envelopes(c, &env, 1);
}

static int send_error(struct conn *c, Sandbox__ErrorCode code, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

static int send_error(struct conn *c, Sandbox__ErrorCode code, const char *fmt, ...)
{
	Sandbox__Envelope env = SANDBOX__ENVELOPE__INIT;
	Sandbox__Error e = SANDBOX__ERROR__INIT;
	char msg[SB_ERR_MSG_MAX];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof msg, fmt, ap);
	va_end(ap);
	e.code = (uint32_t)code;
	e.message = msg;
	env.body_case = SANDBOX__ENVELOPE__BODY_ERROR;
	env.error = &e;
	sb_info("answering error %d: %s", (int)code, msg);
	return send_envelope(c, &env);
}

/* ---- Exec ---- */

static bool env_entry_valid(const Sandbox__EnvVar *v)
{
	/* common/names.c: the shell's rule, at most ENV_NAME_MAX bytes. */
	return env_name_valid(v->name, strlen(v->name)) && strlen(v->value) < ENV_VALUE_MAX;
}

/* Every field of an Exec, checked before anything runs. Returns NULL or the reason. */
static const char *exec_refusal(const struct agent *a, const Sandbox__Exec *e)
{
	if (e->generation != a->generation)
		return "the exec is for another generation than this agent serves";
	if (e->nonce.len != SECRET_NONCE_BYTES)
		return "the nonce must be 32 bytes";
	if (!exec_id_valid(e->exec_id))
		return "the exec id must be 1-64 characters of [A-Za-z0-9._-], not starting with '.' or '-'";
	if (strlen(e->command) > SERVE_COMMAND_MAX)
		return "the command is over 1 MiB";
	if (e->cwd[0] != '/')
		return "the working directory must be absolute";
	if (e->timeout_seconds == 0 || e->timeout_seconds > 86400)
		return "the timeout must be 1 to 86400 seconds";
	if (e->output_limit > SERVE_OUTPUT_LIMIT_MAX)
		return "the output limit is over 1 MiB";
	if (e->n_env >= BOUNDARY_MAX_ENV - 1) /* request_from_exec adds SHELL */
		return "too many environment variables";
	for (size_t i = 0; i < e->n_env; i++)
		if (!env_entry_valid(e->env[i]))
			return "an environment variable has an invalid name or an oversized value";
	return NULL;
}

static int exec_claim(struct agent *a, const char *exec_id, char *running, size_t len)
{
	uint64_t drained;
	int claimed;

	pthread_mutex_lock(&a->lock);
	claimed = !a->busy;
	if (claimed) {
		a->busy = true;
		snprintf(a->running_id, sizeof a->running_id, "%s", exec_id);
		/* A Cancel aimed at an earlier exec must not stop this one. */
		while (read(a->cancel_efd, &drained, sizeof drained) == sizeof drained) {
		}
	} else {
		snprintf(running, len, "%s", a->running_id);
	}
	pthread_mutex_unlock(&a->lock);
	return claimed;
}

static void exec_release(struct agent *a)
{
	pthread_mutex_lock(&a->lock);
	a->busy = false;
	a->running_id[0] = '\0';
	pthread_mutex_unlock(&a->lock);
}

/* The command's environment is the Exec's, after SHELL: the shell the agent runs it with, as the
 * one-shot's (cli_exec.c env_build). Without it bash looks the uid up in the user database at every
 * start, for its SHELL variable: a root manager's identity uid is in no /etc/passwd the sandbox sees,
 * so each bash a command starts loads and asks every NSS module (~0.5 ms per bash on a VM, see
 * docs/performance.md), and ends up with SHELL=/bin/sh. An Exec's own SHELL comes later and wins. */
static void request_from_exec(const Sandbox__Exec *e, const char *shell, struct exec_request *req,
			      char env_store[][ENV_ENTRY_MAX])
{
	memset(req, 0, sizeof *req);
	snprintf(req->exec_id, sizeof req->exec_id, "%s", e->exec_id);
	req->generation = e->generation;
	req->command = e->command;
	req->cwd = e->cwd;
	req->timeout_seconds = e->timeout_seconds;
	req->output_limit = e->output_limit;
	snprintf(env_store[0], ENV_ENTRY_MAX, "SHELL=%s", shell);
	req->env[req->n_env++] = env_store[0];
	for (size_t i = 0; i < e->n_env; i++) {
		/* exec_refusal bounded their count, names and values, so each entry fits whole. */
		snprintf(env_store[i + 1], ENV_ENTRY_MAX, "%s=%s", e->env[i]->name, e->env[i]->value);
		req->env[req->n_env++] = env_store[i + 1];
	}
}

/* Run the exec and produce its result and receipt texts (malloc'd); the receipt's file is
 * written, not yet synced (info, exec_settle). */
static void exec_run(struct agent *a, const struct exec_request *req, struct receipt_info *info, char **result,
		     char **receipt)
{
	struct exec_outcome out;
	struct sb_err err;
	json_t *obj;

	sb_err_clear(&err);
	if (prebuilt_run(&a->pre, req, a->cancel_efd, &out, &err) < 0) {
		obj = json_pack("{s:s, s:I, s:s, s:n, s:n, s:s, s:n}", "exec_id", req->exec_id, "generation",
				(json_int_t)req->generation, "status", "refused", "exit_code", "signal", "error",
				err.msg, "receipt");
		*result = obj ? json_dumps(obj, JSON_COMPACT) : NULL;
		*receipt = NULL;
		json_decref(obj);
		return;
	}
	if (receipt_write_unsynced(&a->receipts, req, &out, a->sec, info, &err) < 0) {
		sb_warn("exec %s: %s", req->exec_id, err.msg);
		out.status = EXEC_UNCERTAIN;
		/* For people: the cause is cut to fit detail on purpose. */
		snprintf(out.detail, sizeof out.detail, "receipt not written: %.1000s", err.msg);
	}
	steptime_mark(STEP_RECEIPT);
	obj = result_to_json(req, &out, info);
	/* The captured bytes are in obj now: free them before the dump makes one more copy. */
	exec_outcome_free(&out);
	*result = obj ? sb_json_dumps(obj, JSON_COMPACT, NULL) : NULL;
	steptime_mark(STEP_RESULT);
	/* A Receipt follows the Result exactly when the result names one (written to disk). */
	if (info->written) {
		*receipt = info->text;
		info->text = NULL;
	}
	json_decref(obj);
}

/* The result when the receipt, written and checked, could not be made durable: no receipt, so the
 * outcome cannot stand as reported (as when the write itself fails). Rare: the one path that
 * parses a result again. */
static char *result_without_receipt(const char *result, const char *why)
{
	json_t *obj = json_loads(result, 0, NULL);
	char detail[1100], *text;

	if (obj == NULL)
		return NULL;
	snprintf(detail, sizeof detail, "receipt not written: %.1000s", why);
	json_object_set_new(obj, "status", json_string(exec_status_name(EXEC_UNCERTAIN)));
	json_object_set_new(obj, "exit_code", json_null());
	json_object_set_new(obj, "signal", json_null());
	json_object_set_new(obj, "receipt", json_null());
	json_object_set_new(obj, "error", json_string(detail));
	text = json_dumps(obj, JSON_COMPACT);
	json_decref(obj);
	return text;
}

/* The call's durability point, before anything is reported. Mostly no sync (issue 32): the
 * finished entry, the receipt's bytes inside, into the exec's slot's end (journal_end), kept through
 * any death of the agent; a crash of the machine leaves the journal in doubt, every missing record
 * then uncertain (journal.h); the two files are written unsynced too. Else (a big result) the
 * receipt and the journal's finished entry, both written already, are synced together (the first
 * fsync commits most of what the others need).
 * A receipt that cannot be made durable is no receipt: the result becomes uncertain and the entry
 * is written again, durably, to say so. */
static void exec_settle(struct agent *a, const char *exec_id, uint64_t gen, struct receipt_info *info, char **result,
			char **receipt)
{
	struct journal_pending p = { .fd = -1 };
	struct sb_err err, rerr;
	int written;

	/* The receipt's file written whole, or none: the end names it only then. */
	written = info->written == (*receipt != NULL) ?
			  journal_end(&a->journal, exec_id, gen, *result, *receipt, &err) : 0;
	if (written != 0) {
		if (written < 0)
			sb_error("exec %s: journal: %s", exec_id, err.msg);
		return;
	}
	written = journal_finish_write(&a->journal, exec_id, gen, *result, *receipt, &p, &err);
	if (receipt_sync(&a->receipts, info, &rerr) < 0) {
		char *again = result_without_receipt(*result, rerr.msg);

		sb_warn("exec %s: %s", exec_id, rerr.msg);
		free(*receipt);
		*receipt = NULL;
		free(*result);
		*result = again;
		/* The entry just written says otherwise: replaced below, whole and durably. */
		if (written == 0)
			journal_pending_drop(&p);
		written = *result == NULL ? -1 :
			  journal_finish(&a->journal, exec_id, gen, *result, NULL, &err);
		if (written < 0)
			sb_error("exec %s: journal: %s", exec_id, *result ? err.msg : "no result");
		return;
	}
	if (written < 0 || journal_finish_sync(&a->journal, exec_id, &p, &err) < 0)
		sb_error("exec %s: journal: %s", exec_id, err.msg);
}

/* The Result, and its Receipt when the result names one, in one write: the manager wakes once for
 * both (a second record a moment later would find it asleep again; docs/performance.md). */
static int send_result(struct conn *c, const char *exec_id, uint64_t gen, const char *result, const char *receipt)
{
	Sandbox__Envelope env = SANDBOX__ENVELOPE__INIT, renv = SANDBOX__ENVELOPE__INIT;
	Sandbox__Result r = SANDBOX__RESULT__INIT;
	Sandbox__Receipt rc = SANDBOX__RECEIPT__INIT;
	const Sandbox__Envelope *both[2] = { &env, &renv };

	r.exec_id = (char *)exec_id;
	r.generation = gen;
	r.result_json = (char *)result;
	env.body_case = SANDBOX__ENVELOPE__BODY_RESULT;
	env.result = &r;
	if (receipt != NULL) {
		rc.exec_id = (char *)exec_id;
		rc.generation = gen;
		rc.receipt_json.data = (uint8_t *)receipt;
		rc.receipt_json.len = strlen(receipt);
		renv.body_case = SANDBOX__ENVELOPE__BODY_RECEIPT;
		renv.receipt = &rc;
	}
	return send_envelopes(c, both, receipt != NULL ? 2 : 1);
}

/* The sender thread's write (live_tap.h): the conn thread is inside the exec meanwhile and does not
 * touch the session until live_tap_stop has seen the sender finish this exec's chunks. */
struct output_to {
	struct conn *c;
	const char *exec_id;
};

static int send_output(void *ctx, enum live_stream stream, uint64_t offset, const uint8_t *data, size_t len,
		       uint64_t skipped)
{
	struct output_to *to = ctx;
	struct conn *c = to->c;
	Sandbox__Envelope env = SANDBOX__ENVELOPE__INIT;
	Sandbox__Output o = SANDBOX__OUTPUT__INIT;
	int rc;

	o.exec_id = (char *)to->exec_id;
	o.stream = stream == LIVE_STDOUT ? SANDBOX__OUTPUT__STREAM__STDOUT : SANDBOX__OUTPUT__STREAM__STDERR;
	o.offset = offset;
	o.data.data = (uint8_t *)data;
	o.data.len = len;
	o.has_skipped = skipped > 0;
	o.skipped = skipped;
	env.body_case = SANDBOX__ENVELOPE__BODY_OUTPUT;
	env.output = &o;
	tls_session_set_deadline(c->tls, tls_deadline_after(SERVE_CHUNK_SEND_MS));
	rc = send_envelope(c, &env);
	tls_session_set_deadline(c->tls, TLS_NO_DEADLINE);
	return rc;
}

void serve_spare_make(struct agent *a)
{
	struct sb_err err;

	/* Without it (a full disk, say) the exec makes its own room, and is refused there when none is
	 * left (rule N4): nothing else depends on the spare. */
	if (spare_file_make(&a->spare, &a->receipts, RECEIPT_ROOM_BYTES, &err) < 0)
		sb_info("no spare receipt room: %s (the next exec makes its own)", err.msg);
	if (journal_spare_make(&a->journal, &err) < 0)
		sb_info("no spare journal entry: %s (the next exec writes a new file)", err.msg);
}

static int handle_exec(struct conn *c, Sandbox__Exec *e)
{
	/* One exec at a time (exec_claim), so one store serves them all. */
	static char env_store[BOUNDARY_MAX_ENV][ENV_ENTRY_MAX];
	struct agent *a = c->agent;
	const char *refusal = exec_refusal(a, e);
	char running[EXEC_ID_MAX + 1], *result = NULL, *receipt = NULL;
	struct receipt_info info = { 0 };
	struct exec_request req;
	struct output_to to = { c, e->exec_id };
	struct sb_err err;
	int rc;

	if (refusal != NULL)
		return send_error(c, SANDBOX__ERROR_CODE__ERR_REFUSED, "exec refused: %s", refusal);
	if (!exec_claim(a, e->exec_id, running, sizeof running))
		return send_error(c, SANDBOX__ERROR_CODE__ERR_BUSY, "busy: exec '%s' is running; one exec at a time",
				  running);
	steptime_reset();
	steptime_mark(STEP_REQUEST);
	/* Never reused: the journal prunes its oldest entries, the receipts stay, so both are asked
	 * before anything runs (a receipt that exists already means this id ran). The receipt's room
	 * before the begin: a begin is never left for an exec refused for want of room (rule N4). */
	if (receipt_reserve_check(&a->receipts, e->exec_id, &err) < 0 ||
	    receipt_room_take_spare(&a->spare, &a->receipts, e->exec_id, &info, &err) < 0 ||
	    journal_begin(&a->journal, e->exec_id, e->generation, &err) < 0) {
		receipt_room_drop(&a->receipts, e->exec_id, &info);
		exec_release(a);
		return send_error(c, SANDBOX__ERROR_CODE__ERR_REFUSED, "exec refused: %s", err.msg);
	}
	/* Into the page that clone() wipes, out of the message's heap memory. */
	memcpy(a->sec->nonce, e->nonce.data, SECRET_NONCE_BYTES);
	explicit_bzero(e->nonce.data, e->nonce.len);
	steptime_mark(STEP_BEGUN);
	request_from_exec(e, a->b.shell, &req, env_store);
	steptime_mark(STEP_PREPARED);
	sb_info("exec %s: running", e->exec_id);
	/* Live output is a view: without it the exec runs as it would, never refused for it. */
	if (e->has_stream_output && e->stream_output && live_tap_begin(&c->tap, send_output, &to, &err) == 0)
		req.tap = &c->tap;
	else if (e->has_stream_output && e->stream_output)
		sb_warn("exec %s: no live output: %s", e->exec_id, err.msg);
	exec_run(a, &req, &info, &result, &receipt);
	/* Every chunk is out (or given up) before the Result: the stream is the conn's again. */
	live_tap_stop(&c->tap);
	if (result != NULL)
		exec_settle(a, e->exec_id, e->generation, &info, &result, &receipt);
	else {
		/* Nothing to report; the receipt still says this id ran. */
		(void)receipt_sync(&a->receipts, &info, &err);
		sb_error("exec %s: journal: no result", e->exec_id);
	}
	receipt_room_drop(&a->receipts, e->exec_id, &info);
	receipt_info_free(&info);
	steptime_mark(STEP_JOURNAL);
	exec_release(a);
	/* The connection may be gone by now; the journal answers a later Query either way. */
	rc = result ? send_result(c, e->exec_id, e->generation, result, receipt) : -1;
	steptime_mark(STEP_END);
	steptime_report("serve exec");
	/* After the result, off the call's path: the journal's prune when it is due (on a thread of
	 * its own), the next exec's receipt room and journal entry, then its init. */
	journal_prune_start(&a->journal, e->exec_id);
	serve_spare_make(a);
	prebuilt_idle(&a->pre);
	free(result);
	free(receipt);
	return rc;
}

/* ---- Cancel, Query, Ping ---- */

static int send_query_reply(struct conn *c, const char *exec_id, const struct journal_entry *j)
{
	Sandbox__Envelope env = SANDBOX__ENVELOPE__INIT;
	Sandbox__QueryReply q = SANDBOX__QUERY_REPLY__INIT;
	Sandbox__Result r = SANDBOX__RESULT__INIT;
	Sandbox__Receipt rc = SANDBOX__RECEIPT__INIT;

	q.exec_id = (char *)exec_id;
	q.state = j->state == JOURNAL_FINISHED ? SANDBOX__QUERY_REPLY__STATE__FINISHED :
		  j->state == JOURNAL_RUNNING ? SANDBOX__QUERY_REPLY__STATE__RUNNING : SANDBOX__QUERY_REPLY__STATE__UNKNOWN;
	if (j->result_json != NULL) {
		r.exec_id = (char *)exec_id;
		r.generation = j->generation;
		r.result_json = j->result_json;
		q.result = &r;
	}
	if (j->receipt_text != NULL) {
		rc.exec_id = (char *)exec_id;
		rc.generation = j->generation;
		rc.receipt_json.data = (uint8_t *)j->receipt_text;
		rc.receipt_json.len = strlen(j->receipt_text);
		q.receipt = &rc;
	}
	env.body_case = SANDBOX__ENVELOPE__BODY_QUERY_REPLY;
	env.query_reply = &q;
	return send_envelope(c, &env);
}

/* No record in a journal from another boot (journal.h): the exec may have run, its begin and end
 * lost with the machine's crash. Finished, uncertain, without a receipt: the answer recovery
 * settles as uncertain, never "unknown" (which a reader could take for "never ran"). */
static int doubt_result(const struct agent *a, const char *exec_id, struct journal_entry *j)
{
	json_t *obj = json_pack("{s:s, s:I, s:s, s:n, s:n, s:n, s:s}", "exec_id", exec_id, "generation",
				(json_int_t)a->generation, "status", exec_status_name(EXEC_UNCERTAIN), "exit_code",
				"signal", "receipt", "error", a->journal.doubt_why);

	j->state = JOURNAL_FINISHED;
	j->generation = a->generation;
	j->result_json = obj ? json_dumps(obj, JSON_COMPACT) : NULL;
	json_decref(obj);
	return j->result_json ? 0 : -1;
}

static int handle_query(struct conn *c, const char *exec_id)
{
	struct journal_entry j;
	struct sb_err err;
	int rc;

	/* The id names a journal file: the same rule as an Exec's (common/names.c). */
	if (!exec_id_valid(exec_id))
		return send_error(c, SANDBOX__ERROR_CODE__ERR_MALFORMED, "query refused: invalid exec id");
	if (journal_lookup(&c->agent->journal, exec_id, &j, &err) < 0)
		return send_error(c, SANDBOX__ERROR_CODE__ERR_INTERNAL, "query: %s", err.msg);
	if (j.state == JOURNAL_IN_DOUBT && doubt_result(c->agent, exec_id, &j) < 0)
		return send_error(c, SANDBOX__ERROR_CODE__ERR_INTERNAL, "query: out of memory");
	rc = send_query_reply(c, exec_id, &j);
	journal_entry_free(&j);
	return rc;
}

static int handle_cancel(struct conn *c, const char *exec_id)
{
	struct agent *a = c->agent;
	uint64_t one = 1;
	bool hit;

	pthread_mutex_lock(&a->lock);
	hit = a->busy && strcmp(a->running_id, exec_id) == 0;
	if (hit && write(a->cancel_efd, &one, sizeof one) != sizeof one)
		hit = false;
	pthread_mutex_unlock(&a->lock);
	if (!hit)
		return send_error(c, SANDBOX__ERROR_CODE__ERR_UNKNOWN_EXEC, "cancel: exec '%s' is not running", exec_id);
	sb_info("exec %s: cancel delivered", exec_id);
	/* The answer is the exec's state as the cancel found it; its Result follows on the exec's
	 * own connection (or from a Query). */
	return handle_query(c, exec_id);
}

static int handle_ping(struct conn *c, uint64_t token)
{
	Sandbox__Envelope env = SANDBOX__ENVELOPE__INIT;
	Sandbox__Pong p = SANDBOX__PONG__INIT;

	p.token = token;
	env.body_case = SANDBOX__ENVELOPE__BODY_PONG;
	env.pong = &p;
	return send_envelope(c, &env);
}

/* ---- NetAccept (serve_net.c) ---- */

/* Answers NetListening once the listener exists, then carries one connection. -1 either way: the
 * connection is a tunnel's, or refused, and carries no more messages. */
static int handle_net_accept(struct conn *c, uint32_t port)
{
	Sandbox__Envelope env = SANDBOX__ENVELOPE__INIT;
	Sandbox__NetListening nl = SANDBOX__NET_LISTENING__INIT;
	const char *refusal;
	int lfd = -1;
	struct sb_err err;

	refusal = serve_net_listen(c->agent, port, &lfd);
	if (refusal != NULL) {
		send_error(c, SANDBOX__ERROR_CODE__ERR_REFUSED, "net accept refused: %s", refusal);
		return -1;
	}
	c->tunnel = true;
	nl.port = port;
	env.body_case = SANDBOX__ENVELOPE__BODY_NET_LISTENING;
	env.net_listening = &nl;
	if (proto_send(&c->stream, &env, SERVE_FRAME_CAP, &err) == 0)
		serve_net_tunnel(c->tls, c->fd, &c->stream, lfd, port);
	return -1;
}

/* ---- a connection ---- */

static int hello_exchange(struct conn *c)
{
	Sandbox__Envelope *in = NULL, out = SANDBOX__ENVELOPE__INIT;
	Sandbox__Hello h = SANDBOX__HELLO__INIT;
	struct sb_err err;
	uint32_t version;
	int rc = proto_recv(&c->stream, SERVE_FRAME_CAP, &in, &err);

	if (rc < 0 && (err.errnum == EBADMSG || err.errnum == EMSGSIZE))
		send_error(c, SANDBOX__ERROR_CODE__ERR_MALFORMED, "%s", err.msg);
	if (rc <= 0 || in->body_case != SANDBOX__ENVELOPE__BODY_HELLO) {
		if (rc > 0)
			send_error(c, SANDBOX__ERROR_CODE__ERR_MALFORMED, "the first message must be a Hello, not %s",
				   proto_body_name(in->body_case));
		proto_free(in);
		return -1;
	}
	rc = proto_negotiate(in->hello, &version, &err);
	proto_free(in);
	if (rc < 0) {
		send_error(c, SANDBOX__ERROR_CODE__ERR_VERSION, "%s", err.msg);
		return -1;
	}
	proto_hello_init(&h);
	h.build = SERVE_BUILD;
	h.features_json = c->agent->features_json;
	h.has_generation = true;
	h.generation = c->agent->generation;
	out.body_case = SANDBOX__ENVELOPE__BODY_HELLO;
	out.hello = &h;
	return send_envelope(c, &out);
}

static int conn_dispatch(struct conn *c, Sandbox__Envelope *m)
{
	switch (m->body_case) {
	case SANDBOX__ENVELOPE__BODY_EXEC:
		return handle_exec(c, m->exec);
	case SANDBOX__ENVELOPE__BODY_CANCEL:
		return handle_cancel(c, m->cancel->exec_id);
	case SANDBOX__ENVELOPE__BODY_QUERY:
		return handle_query(c, m->query->exec_id);
	case SANDBOX__ENVELOPE__BODY_PING:
		return handle_ping(c, m->ping->token);
	case SANDBOX__ENVELOPE__BODY_NET_ACCEPT:
		return handle_net_accept(c, m->net_accept->port);
	default:
		return send_error(c, SANDBOX__ERROR_CODE__ERR_MALFORMED, "unexpected %s message",
				  proto_body_name(m->body_case));
	}
}

static void conn_serve(struct conn *c)
{
	for (;;) {
		Sandbox__Envelope *m = NULL;
		struct sb_err err;
		int rc;

		tls_session_set_deadline(c->tls, tls_deadline_after(SERVE_IDLE_MS));
		rc = proto_recv(&c->stream, SERVE_FRAME_CAP, &m, &err);
		if (rc == 0)
			return;
		if (rc < 0 && err.errnum == EBADMSG) {
			/* Still at a frame boundary: answer and keep the connection. */
			if (send_error(c, SANDBOX__ERROR_CODE__ERR_MALFORMED, "%s", err.msg) < 0)
				return;
			continue;
		}
		if (rc < 0) {
			if (err.errnum == EMSGSIZE)
				send_error(c, SANDBOX__ERROR_CODE__ERR_MALFORMED, "%s", err.msg);
			sb_info("connection closed: %s", err.msg);
			return;
		}
		tls_session_set_deadline(c->tls, TLS_NO_DEADLINE);
		rc = conn_dispatch(c, m);
		proto_free(m);
		if (rc < 0)
			return;
	}
}

/* After a verified handshake: room among the verified connections, or false. */
static bool conn_count(struct conn *c)
{
	struct agent *a = c->agent;

	pthread_mutex_lock(&a->lock);
	c->counted = a->connections < SERVE_MAX_CONNECTIONS;
	if (c->counted)
		a->connections++;
	pthread_mutex_unlock(&a->lock);
	return c->counted;
}

static void *conn_thread(void *arg)
{
	struct conn *c = arg;
	struct agent *a = c->agent;
	struct sb_err err;
	int rc = tls_session_open(a->tls, c->fd, tls_deadline_after(SERVE_HANDSHAKE_MS), &c->tls, &err);

	if (!handshake_slots_give(&a->handshakes, &c->ticket)) {
		sb_warn("closed a connection still in its handshake: the oldest of %u, for a newer one",
			SERVE_HANDSHAKES_MAX);
		tls_session_free(c->tls);
	} else if (rc < 0) {
		sb_warn("refused a connection: %s", err.msg);
	} else if (!conn_count(c)) {
		sb_warn("refused a connection: too many connections");
		tls_session_free(c->tls);
	} else {
		tls_session_stream(c->tls, &c->stream);
		if (hello_exchange(c) == 0)
			conn_serve(c);
		/* The sender joined before its session closes: nothing writes to it after. */
		live_tap_close(&c->tap);
		tls_session_close(c->tls, &err);
	}
	bool tunnel = c->tunnel, counted = c->counted;

	close(c->fd);
	free(c);
	pthread_mutex_lock(&a->lock);
	if (tunnel)
		a->net_connections--;
	else if (counted)
		a->connections--;
	pthread_mutex_unlock(&a->lock);
	return NULL;
}

void serve_conn_init(struct agent *a)
{
	struct handshake_slots init = HANDSHAKE_SLOTS_INIT(SERVE_HANDSHAKES_MAX);

	a->handshakes = init;
}

void serve_conn_start(struct agent *a, int fd)
{
	struct conn *c = calloc(1, sizeof *c);
	struct sb_err err;

	if (c == NULL) {
		sb_warn("refused a connection: out of memory");
		close(fd);
		return;
	}
	c->agent = a;
	c->fd = fd;
	handshake_slots_take(&a->handshakes, fd, &c->ticket);
	if (sb_thread_detached(conn_thread, c, &err) < 0) {
		sb_error("refused a connection: %s", err.msg);
		(void)handshake_slots_give(&a->handshakes, &c->ticket);
		close(fd);
		free(c);
	}
}
