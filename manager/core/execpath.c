/* One Bash call through the manager, the six steps of DESIGN.md "One call, end to end":
 * validate; bind to session and turn and record it (accepted); check ownership, workspace and
 * generation; obtain the sandbox and recheck; dispatch once (recorded first) with a fresh nonce;
 * complete only with a Result AND a verified Receipt for this exec and generation, otherwise
 * stop the sandbox, require evidence and record `uncertain`. Never dispatches an exec twice.
 * execpath_run reads top to bottom: the session is read once, under its turn, and held in the
 * call (struct call); the grants once, after the sandbox is marked busy. The path goes down to
 * records/, sandbox.c and the agent and never back up: one warm exec makes 5 calls into records
 * and 1 into sandbox.c (before: 7 and 3; a cold one 9 and 1, before 14 and 3; counted with
 * -finstrument-functions, issue 15). */
#include "manager.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "agent_client.h"
#include "call.h"
#include "clock.h"
#include "control.h"
#include "egress_proxy.h"
#include "failpoint.h"
#include "egress_log.h"
#include "identity_ids.h"
#include "log.h"
#include "metrics.h"
#include "output_keep.h"
#include "pathfmt.h"
#include "random.h"
#include "receipt_mac.h"
#include "result_proof.h"
#include "workspace.h"

#define COMMAND_MAX (1024 * 1024)
#define CONNECT_MS 10000
#define RESULT_MARGIN_MS 30000   /* beyond the command's timeout: teardown, receipt, transfer */
#define QUERY_TRIES 5            /* tries that reach nobody; an agent that says "running" uses none */
#define QUERY_WAIT_MS 1000       /* between two tries; doubled while the agent says "running" ... */
#define QUERY_WAIT_MAX_MS 8000   /* ... up to this */
#define QUERY_SLICE_MS 250       /* a cancel is seen within this while waiting */
#define PROBE_MS 2000            /* the runtime's evidence between two tries: a glance, not a wait */
#define EGRESS_DRAIN_MS 2000     /* an exec's requests still closing at its end (egress_log_drain) */

json_t *call_refused_result(const struct call *c, const char *status, const char *why)
{
	return json_pack("{s:s, s:s, s:n, s:n, s:s, s:s, s:i, s:i, s:b, s:b, s:s, s:n}", "exec_id", c->exec_id,
			 "status", status, "exit_code", "signal", "stdout", "", "stderr", "", "stdout_bytes", 0,
			 "stderr_bytes", 0, "stdout_truncated", 0, "stderr_truncated", 0, "error", why, "receipt");
}

int call_record_end(struct manager *m, struct call *c, const char *status, json_t *result,
			   struct sb_err *err)
{
	char *result_text;
	json_t *egress;
	int rc;

	/* Policy proxy: what left the sandbox while this exec ran goes with its record (and answer). */
	if (c->sandbox != NULL && c->sandbox->egress_log != NULL && json_is_object(result) &&
	    (egress = egress_log_drain(c->sandbox->egress_log, EGRESS_DRAIN_MS)) != NULL)
		json_object_set_new(result, "egress", egress);
	result_text = result ? json_dumps(result, JSON_COMPACT) : NULL;
	if (result != NULL && result_text == NULL)
		return sb_fail(err, ENOMEM, "serialising the result of exec %s", c->exec_id);
	rc = records_exec_finish(m->rec, c->exec_id, status, result_text, c->reply.receipt,
				 c->reason[0] ? c->reason : NULL, err);
	free(result_text);
	return rc;
}

/* Record the end and build the response. "ok" means the record is committed (R7): when the
 * final record cannot be written the call is not reported complete. The exec then stays
 * `dispatched` (or `accepted`) in the records, which a restart settles as uncertain at worst, and
 * the client hears that its outcome is not on record. */
static json_t *call_finish(struct manager *m, struct call *c, const char *status, json_t *result)
{
	struct sb_err err;
	json_t *resp;

	metrics_lap_start(&c->lap);
	if (call_record_end(m, c, status, result, &err) < 0) {
		sb_error("exec %s (session %s): its end (%s) is not on record: %s", c->exec_id, c->session, status,
			 err.msg);
		resp = control_error("uncertain", "exec %s ended %s, but that could not be recorded (%s): it is not "
				     "reported complete; `sandbox-manager records --exec %s` shows what the records hold",
				     c->exec_id, status, err.msg, c->exec_id);
		json_decref(result); /* last: status may point into it */
		return resp;
	}
	FAILPOINT("manager.exec.recorded"); /* committed, not yet answered */
	sb_info("exec %s (session %s): %s%s%s", c->exec_id, c->session, status, c->reason[0] ? ": " : "", c->reason);
	metrics_lap(&c->lap, METRICS_STEP_RECORD);
	metrics_exec_ended(status);
	return json_pack("{s:b, s:o}", "ok", 1, "result", result);
}

/* ---- steps 1-3: validate, record, check ---- */

static json_t *call_validate(struct manager *m, json_t *req, struct call *c)
{
	json_t *timeout = json_object_get(req, "timeout_seconds"), *turn = json_object_get(req, "turn");
	json_t *tag = json_object_get(req, "tag"), *keep = json_object_get(req, "keep_output");
	const char *session = json_string_value(json_object_get(req, "session"));
	struct sb_err err;

	c->command = json_string_value(json_object_get(req, "command"));
	if (session == NULL || strlen(session) >= sizeof c->session)
		return control_error("invalid", "exec needs a session");
	if (c->command == NULL || c->command[0] == '\0')
		return control_error("invalid", "exec needs a non-empty command");
	if (strlen(c->command) > COMMAND_MAX)
		return control_error("invalid", "the command is over %d bytes", COMMAND_MAX);
	if (timeout != NULL && (!json_is_integer(timeout) || json_integer_value(timeout) < 1))
		return control_error("invalid", "timeout_seconds must be a whole number of seconds, at least 1");
	if (timeout != NULL && json_integer_value(timeout) > m->cfg.max_timeout)
		return control_error("refused", "timeout_seconds %lld is over the configured maximum of %u seconds",
				     (long long)json_integer_value(timeout), m->cfg.max_timeout);
	if (turn != NULL && (!json_is_integer(turn) || json_integer_value(turn) < 0))
		return control_error("invalid", "turn must be a non-negative number");
	if (tag != NULL && (!json_is_string(tag) || json_string_length(tag) == 0 || json_string_length(tag) > 64 ||
			    strspn(json_string_value(tag), "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789._:-") !=
				    json_string_length(tag)))
		return control_error("invalid", "tag must be 1-64 characters of [A-Za-z0-9._:-]");
	if (keep != NULL && (!json_is_integer(keep) || json_integer_value(keep) < 0))
		return control_error("invalid", "keep_output must be a whole number of bytes, at least 0");
	c->keep_over = keep ? json_integer_value(keep) : -1;
	snprintf(c->tag, sizeof c->tag, "%s", tag ? json_string_value(tag) : "");
	snprintf(c->session, sizeof c->session, "%s", session);
	c->timeout = timeout ? (unsigned)json_integer_value(timeout) : m->cfg.default_timeout;
	c->turn = turn ? json_integer_value(turn) : -1;
	if (sb_random_hex(c->exec_id, 12, &err) < 0)
		return control_error_from("internal", &err);
	return NULL;
}

static int call_record(struct manager *m, struct call *c, struct sb_err *err)
{
	const struct session_row *s = &c->s;
	struct exec_row e;

	memset(&e, 0, sizeof e);
	snprintf(e.id, sizeof e.id, "%s", c->exec_id);
	snprintf(e.session, sizeof e.session, "%s", c->session);
	e.turn = c->turn >= 0 ? c->turn : s->turn;
	snprintf(e.state, sizeof e.state, "accepted");
	snprintf(e.command, sizeof e.command, "%s", c->command);
	e.timeout_seconds = c->timeout;
	e.accepted_ms = clock_real_ms();
	if (c->turn >= 0 && c->turn != s->turn && records_session_set_turn(m->rec, c->session, c->turn, err) < 0)
		return -1;
	return records_exec_insert(m->rec, &e, err);
}

/* The stop's phase (stop.c daemon_stop): once the manager is stopping no call takes a turn, and
 * once its grace is over none is dispatched. */
static bool stop_reached(struct manager *m, enum stop_phase phase)
{
	bool reached;

	pthread_mutex_lock(&m->lock);
	reached = m->stop_phase >= phase;
	pthread_mutex_unlock(&m->lock);
	return reached;
}

static int call_stop_check(struct manager *m, struct sb_err *err)
{
	if (!stop_reached(m, STOP_CANCELLING))
		return 0;
	return sb_fail(err, ECANCELED, "the manager stopped before the call was dispatched: it never ran");
}

/* Step 2: the session's turn (calls of one session never overlap), then its record, read once
 * for the whole call. Once is enough: every write of a session's state is made under its turn
 * (a delete, a retire's "reserved"), so nothing but this call's own steps can change it until the
 * turn is left, and each of those that does (a retire that fails) refuses the call. Its grants
 * are written without the turn (sessions_grant): they are read after the sandbox is marked busy
 * (authority_current). A call that comes once the manager is stopping takes no turn (the running
 * call may hold it for the whole grace); one that waited for its turn meanwhile is refused when
 * it gets it (call_steps). */
static json_t *call_bind(struct manager *m, struct call *c)
{
	struct sb_err err;
	int rc;

	sb_err_clear(&err);
	metrics_lap_start(&c->lap);
	c->has_turn = !stop_reached(m, STOP_REFUSING);
	if (c->has_turn)
		queue_enter(m->queue, c->session);
	metrics_lap(&c->lap, METRICS_STEP_QUEUE);
	rc = records_session_get(m->rec, c->session, &c->s, &err);
	if (rc < 0)
		return control_error_from("internal", &err);
	/* A deleted session is no session to call: refused before anything is recorded. */
	if (rc != RECORDS_FOUND || strcmp(c->s.state, "deleted") == 0)
		return control_error("not_found", "no session '%s'", c->session);
	/* Reserved for an earlier sandbox's unproven end: asked again under the turn, so a transient
	 * fault (a runtime that did not answer at a takeover) ends at the next call, not the next start
	 * (sandbox.c sandbox_reserved_retry). Without the turn (stopping) the call is refused anyway. */
	if (c->has_turn && strcmp(c->s.state, "reserved") == 0)
		(void)sandbox_reserved_retry(m, c->session, &c->s);
	return NULL;
}

/* Step 3, from the row held (call_bind). The workspace's own check (the git refusal list) runs
 * when a sandbox is prepared (sandbox_acquire -> workspace_open), as the design asks, not on every
 * call: it starts several git processes. */
static int session_check(const struct call *c, struct sb_err *err)
{
	if (strcmp(c->s.state, "reserved") == 0)
		return sb_fail(err, EPERM, "session %s is reserved: no calls run on it until what reserved it is settled "
			       "(session show says what; an earlier sandbox whose end is not proven is asked about "
			       "again at each call)", c->session);
	if (strcmp(c->s.state, "active") != 0)
		return sb_fail(err, EPERM, "session %s is %s: no calls run on it", c->session, c->s.state);
	return 0;
}

/* ---- steps 5-6: dispatch once, then insist on evidence ---- */

/* Policy proxy: every client that honours the convention goes through the manager's egress proxy
 * on the sandbox's loopback; the loopback itself stays direct (a command's own servers). */
static void env_proxy(struct agent_env *env, size_t *n)
{
	static const char url[] = "http://127.0.0.1:" EGRESS_PROXY_PORT_TEXT;
	static const char *const names[] = { "HTTPS_PROXY", "HTTP_PROXY", "https_proxy", "http_proxy" };

	for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
		env[(*n)++] = (struct agent_env){ names[i], url };
	env[(*n)++] = (struct agent_env){ "NO_PROXY", "localhost,127.0.0.1" };
	env[(*n)++] = (struct agent_env){ "no_proxy", "localhost,127.0.0.1" };
}

static void env_fill(struct agent_env *env, size_t *n, const char *scratch, const char *worktree,
		     const char *kubeconfig, enum sandbox_network network)
{
	static const char path[] = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

	env[0] = (struct agent_env){ "PATH", path };
	env[1] = (struct agent_env){ "LANG", "C.UTF-8" };
	env[2] = (struct agent_env){ "HOME", scratch };
	env[3] = (struct agent_env){ "TMPDIR", scratch };
	env[4] = (struct agent_env){ "TMP", scratch };
	env[5] = (struct agent_env){ "TEMP", scratch };
	env[6] = (struct agent_env){ "PWD", worktree };
	*n = 7;
	/* The snapshot's credentials, read-only outside the worktree (grants.c). */
	if (kubeconfig[0] != '\0')
		env[(*n)++] = (struct agent_env){ "KUBECONFIG", kubeconfig };
	if (network == SANDBOX_NETWORK_PROXY)
		env_proxy(env, n);
}

/* A result without a receipt, with the agent's own words when it said why (a receipt it could not
 * write: "receipt not written: ... No space left on device"), cut to fit on purpose. */
static int call_no_receipt(const struct call *c, struct sb_err *err)
{
	json_t *result = json_loads(c->reply.result_json, 0, NULL);
	const char *why = json_string_value(json_object_get(result, "error"));
	int rc;

	rc = why ? sb_refuse(err, EPROTO, "a result without a receipt (the agent says: %.300s): the namespace's end "
			     "is not proven", why) :
		   sb_fail(err, EPROTO, "a result without a receipt: the namespace's end is not proven");
	json_decref(result);
	return rc;
}

int call_result_verify(struct call *c, struct sb_err *err)
{
	json_t *receipt, *result;
	int rc;

	if (c->reply.result_json == NULL)
		return sb_fail(err, EPROTO, "no result");
	if (c->reply.receipt == NULL)
		return call_no_receipt(c, err);
	/* agent_client verified it with the key already; verify again here, where the record is
	 * written, so no path can complete an exec on an unverified receipt. */
	receipt = receipt_mac_verify(c->reply.receipt, c->reply.receipt_len, c->sandbox->receipt_key, c->nonce_hex,
				     c->exec_id, (int64_t)c->sandbox->generation, err);
	if (receipt == NULL)
		return -1;
	/* The result travels unsigned: it is recorded only as far as the receipt proves it, the
	 * namespace's end first (result_proof.c). A mismatch, or an end not confirmed, is uncertain, the
	 * sandbox retired (the caller). */
	result = json_loads(c->reply.result_json, JSON_REJECT_DUPLICATES, NULL);
	rc = result_proof_check(result, receipt, err);
	json_decref(result);
	json_decref(receipt);
	return rc;
}

/* A cancel found the call's sandbox busy (cancel.c): it is being stopped. */
static bool call_cancel_reason(struct manager *m, const struct call *c)
{
	bool set;

	pthread_mutex_lock(&m->lock);
	set = c->sandbox->cancel_reason[0] != '\0';
	pthread_mutex_unlock(&m->lock);
	return set;
}

/* Between two tries that reached no agent: does the runtime prove the sandbox gone? A pod deleted
 * from outside takes its IP with it, so a connect there fails only after its own timeout, try after
 * try (about 20 s in all), where the API server already holds the pod's end. Only the evidence
 * counts (invariant 9): "could not connect" alone proves nothing, and without evidence the asking
 * goes on. Recovery's sandbox carries only an address (recovery.c recover_query): no handle to ask. */
bool call_sandbox_proven_gone(struct manager *m, struct call *c)
{
	struct sb_err why;

	struct live_sandbox *l = c->sandbox;
	struct sb_err stop_err;
	bool gone;

	if (l->h.runtime_id[0] == '\0')
		return false;
	/* One user of the handle at a time: a cancel that comes during the probe leaves its stop to us
	 * (cancel.c cancel_locked), so stop() and evidence() never run on it at once. */
	pthread_mutex_lock(&m->lock);
	if (l->cancel_reason[0] != '\0') {
		pthread_mutex_unlock(&m->lock);
		return false; /* the cancel's own stop and the retire's evidence decide */
	}
	l->probing = true;
	pthread_mutex_unlock(&m->lock);
	gone = m->backend->ops->evidence(m->backend, &l->h, PROBE_MS, &why) == 0;
	pthread_mutex_lock(&m->lock);
	l->probing = false;
	if (l->stop_deferred) {
		l->stop_deferred = false;
		/* Proven gone: there is nothing left to stop, and its handle is released. */
		if (!gone && sandbox_interrupt(m, l, &stop_err) < 0)
			sb_warn("exec %s: stopping its sandbox for the cancel: %s; its evidence decides", c->exec_id,
				stop_err.msg);
	}
	pthread_mutex_unlock(&m->lock);
	if (!gone) {
		sb_debug("exec %s: the agent does not answer, and its sandbox is not proven gone: %s", c->exec_id, why.msg);
		return false;
	}
	sb_info("exec %s: the agent does not answer, and its sandbox is gone: %s", c->exec_id, l->h.evidence);
	return true;
}

/* Wait ms between two tries, or less when the deadline comes first; false when a cancel came. */
static bool reconcile_wait(struct manager *m, struct call *c, int64_t ms, int64_t deadline)
{
	int64_t until = tls_deadline_after(ms);

	if (until > deadline)
		until = deadline;
	while (tls_deadline_after(0) < until) {
		if (call_cancel_reason(m, c))
			return false;
		int64_t left = until - tls_deadline_after(0);

		usleep((useconds_t)(left < QUERY_SLICE_MS ? left : QUERY_SLICE_MS) * 1000);
	}
	return true;
}

/* What one Query of a call's exec came to. */
enum reconcile_asked {
	ASKED_ANSWERED = 0,        /* c->reply filled: its state says what the agent knows */
	ASKED_NO_ANSWER = -1,      /* connected, but the Query got no answer (err) */
	ASKED_NO_CONNECTION = -2,  /* no connection was made (err: its errno says why) */
};

/* One connection, one Query. */
static enum reconcile_asked reconcile_ask(struct call *c, const struct agent_expect *want, struct sb_err *err)
{
	struct agent_conn *conn = NULL;
	int rc;

	if (agent_connect(c->sandbox->tls, c->sandbox->h.address, tls_deadline_after(CONNECT_MS), &conn, err) < 0)
		return ASKED_NO_CONNECTION;
	agent_reply_free(&c->reply);
	rc = agent_query(conn, want, tls_deadline_after(CONNECT_MS), &c->reply, err);
	agent_close(conn);
	return rc < 0 ? ASKED_NO_ANSWER : ASKED_ANSWERED;
}

/* The call may still be running when its connection drops (issue 27: a 20-minute command cut at
 * minute 2 used to be uncertain within 5 s, its sandbox retired). So while the agent answers that
 * the exec runs, the asking goes on, with backoff, until deadline (the call's own deadline, which
 * holds its timeout and the teardown margin: the agent ends the command by then); only tries that
 * reach nobody count against QUERY_TRIES. */
int call_reconcile(struct manager *m, struct call *c, int64_t deadline, struct sb_err *err)
{
	struct agent_expect want = { c->exec_id, c->sandbox->generation, c->nonce, c->sandbox->receipt_key };
	int64_t wait_ms = QUERY_WAIT_MS;
	bool running = false;

	for (int missed = 0; missed < QUERY_TRIES && tls_deadline_after(0) < deadline;) {
		/* A cancel stopped the sandbox on purpose: there is nobody left to ask. */
		if (call_cancel_reason(m, c))
			return sb_fail(err, ECANCELED, "cancelled");
		enum reconcile_asked asked = reconcile_ask(c, &want, err);

		running = asked == ASKED_ANSWERED && c->reply.state == AGENT_EXEC_RUNNING;
		if (asked == ASKED_ANSWERED && c->reply.state == AGENT_EXEC_FINISHED)
			return 0;
		if (asked == ASKED_ANSWERED && c->reply.state == AGENT_EXEC_UNKNOWN)
			return sb_fail(err, ENOENT, "the agent has no record of the exec");
		if (asked == ASKED_NO_CONNECTION && (err->errnum == ECONNREFUSED || err->errnum == ENOENT)) {
			/* Nothing listens where the agent did: it is gone, and with it the sandbox (the agent is
			 * its PID 1), ended from outside during the call. Asking again would only wait. */
			c->agent_gone = true;
			return sb_fail(err, 0, "the sandbox ended during the call (its agent no longer accepts "
				       "connections)");
		}
		/* No answer (an agent that answered "running" is alive): the runtime's word, as above. */
		if (asked != ASKED_ANSWERED && call_sandbox_proven_gone(m, c)) {
			c->agent_gone = true;
			return sb_fail(err, 0, "the sandbox ended during the call (its agent could not be reached, and "
				       "its runtime proved it gone)");
		}
		if (running) {
			sb_debug("exec %s: the agent says it is still running; asking again in %lld ms", c->exec_id,
				 (long long)wait_ms);
		} else {
			missed++;
			wait_ms = QUERY_WAIT_MS;
		}
		if (!reconcile_wait(m, c, wait_ms, deadline))
			return sb_fail(err, ECANCELED, "cancelled");
		if (running)
			wait_ms = wait_ms * 2 > QUERY_WAIT_MAX_MS ? QUERY_WAIT_MAX_MS : wait_ms * 2;
	}
	if (running)
		return sb_fail(err, ETIMEDOUT, "the agent still said the exec was running when the time allowed for "
			       "its end ran out");
	return sb_fail(err, ETIMEDOUT, "the agent could not say how the exec ended");
}

/* l->conn changes under m->lock (a cancel may interrupt it from another thread); the old one is
 * closed outside it, once no other thread can see it. */
static void conn_swap(struct manager *m, struct live_sandbox *l, struct agent_conn *conn)
{
	struct agent_conn *old;

	pthread_mutex_lock(&m->lock);
	old = l->conn;
	l->conn = conn;
	pthread_mutex_unlock(&m->lock);
	if (old != conn)
		agent_close(old);
}

/* The sandbox's kept connection, else a new one: a TLS handshake per call would cost more than the
 * command. Kept: when its last call ended less than CONN_QUIET_MS ago (well inside the agent's idle
 * limit, SERVE_IDLE_MS in sandbox-agent/serve.c, 15 min) and nothing came on it since (an agent
 * killed or gone leaves its close there), as is; otherwise when a Ping shows it alive. The Ping was a
 * round trip to the agent on every call (issue 18). An agent alive but hung within that window is
 * found by the exec's own deadline (uncertain) instead of the Ping's. */
#define CONN_QUIET_MS 60000
static int conn_get(struct manager *m, struct live_sandbox *l, struct agent_conn **out, struct sb_err *err)
{
	int64_t last;

	pthread_mutex_lock(&m->lock);
	last = l->last_used_ms;
	pthread_mutex_unlock(&m->lock);
	if (l->conn != NULL && clock_real_ms() - last < CONN_QUIET_MS && agent_conn_quiet(l->conn)) {
		*out = l->conn;
		return 0;
	}
	if (l->conn != NULL && agent_ping(l->conn, tls_deadline_after(2000), err) == 0) {
		*out = l->conn;
		return 0;
	}
	conn_swap(m, l, NULL);
	if (agent_connect(l->tls, l->h.address, tls_deadline_after(CONNECT_MS), out, err) < 0)
		return -1;
	conn_swap(m, l, *out);
	return 0;
}

/* What a call's attempt on one sandbox came to (call_dispatch, call_attempt); call_run branches on it.
 * Negative is a failure, as everywhere (common/error.h): err says why. */
enum call_outcome {
	CALL_DONE = 0,              /* a result and receipt, verified: c->reply */
	CALL_UNCERTAIN = -1,        /* dispatched (or cancelled while busy), the outcome not established */
	CALL_REFUSED = -2,          /* refused before anything was sent */
	CALL_AGENT_REFUSED = -3,    /* the agent refused it: it did not run */
	CALL_AGENT_SILENT = -4,     /* the agent does not answer; nothing was sent: the exec never ran */
	CALL_CANCELLED_FIRST = -5,  /* a cancel that came first was taken: nothing was sent */
};

static void live_output(void *ctx, int stream, uint64_t offset, const uint8_t *data, size_t len)
{
	live_exec_put(ctx, stream ? LIVE_STDERR : LIVE_STDOUT, offset, data, len);
}

/* Every dispatched exec can be followed: its hub lives from before the Exec to the agent's answer. */
static struct live_exec *call_live_begin(const struct call *c, struct agent_exec_request *req)
{
	struct live_exec *h = live_exec_begin(c->exec_id, c->s.identity);

	if (h == NULL)
		return NULL;
	req->on_output = live_output;
	req->output_ctx = h;
	if (c->watch != NULL)
		c->watch->began(c->watch->ctx, h);
	return h;
}

static enum call_outcome call_dispatch(struct manager *m, struct call *c, struct sb_err *err)
{
	struct live_exec *live;
	struct agent_env env[14 + SNAPSHOT_EDGES_MAX]; /* env_fill: 7, KUBECONFIG, 6 of env_proxy, http: edges */
	struct agent_exec_request req = { 0 };
	struct agent_conn *conn = NULL;
	int64_t deadline = tls_deadline_after((int64_t)c->timeout * 1000 + RESULT_MARGIN_MS);
	int rc;

	env_fill(env, &req.n_env, c->sandbox->scratch, c->sandbox->workdir, c->sandbox->kubeconfig, c->sandbox->network);
	/* Each http: grant's edge (policy proxy only: sandbox.c credentials_make): an address, no token. */
	for (size_t i = 0; i < c->sandbox->http_env_n; i++)
		env[req.n_env++] = (struct agent_env){ c->sandbox->http_env[i].name, c->sandbox->http_env[i].url };
	req.exec_id = c->exec_id;
	req.generation = c->sandbox->generation;
	memcpy(req.nonce, c->nonce, sizeof c->nonce);
	req.command = c->command;
	req.cwd = c->sandbox->workdir;
	req.timeout_seconds = c->timeout;
	req.output_limit = m->cfg.output_limit;
	req.env = env;
	req.receipt_key = c->sandbox->receipt_key;
	if (conn_get(m, c->sandbox, &conn, err) < 0)
		return CALL_AGENT_SILENT;
	/* Recorded before a byte goes out: after this, the exec is never dispatched again. */
	if (records_exec_dispatched(m->rec, c->exec_id, c->sandbox->generation, c->nonce_hex, c->sandbox->h.runtime_id,
				    c->sandbox->authority, err) < 0)
		return CALL_REFUSED;
	FAILPOINT("manager.exec.dispatched"); /* recorded dispatched; not a byte sent */
	metrics_lap(&c->lap, METRICS_STEP_DISPATCH);
	live = call_live_begin(c, &req);
	rc = agent_exec(conn, &req, deadline, &c->reply, err);
	live_exec_end(live);
	metrics_lap(&c->lap, METRICS_STEP_COMMAND);
	if (rc < 0) {
		/* A failed exchange leaves the connection unusable: the next call makes a new one. */
		conn_swap(m, c->sandbox, NULL);
	}
	if (rc < 0 && c->reply.agent_error != 0)
		return CALL_AGENT_REFUSED;
	if (rc < 0)
		rc = call_reconcile(m, c, deadline, err);
	FAILPOINT("manager.exec.receipt_received"); /* the exchange is over; nothing verified or recorded */
	rc = rc < 0 || call_result_verify(c, err) < 0 ? CALL_UNCERTAIN : CALL_DONE;
	metrics_lap(&c->lap, METRICS_STEP_RECEIPT);
	return rc;
}

json_t *call_result_parse(const struct call *c)
{
	json_error_t jerr;
	json_t *r = json_loads(c->reply.result_json, 0, &jerr);

	if (!json_is_object(r)) {
		json_decref(r);
		return NULL;
	}
	return r;
}

/* Missing evidence: stop the sandbox, require evidence, record uncertain. */
static json_t *call_uncertain(struct manager *m, struct call *c, const char *why)
{
	struct sb_err err;
	const char *cancel = c->sandbox ? c->sandbox->cancel_reason : "";
	int cancelled = cancel[0] != '\0';
	struct sandbox_row *gone = c->agent_gone && !cancelled ? calloc(1, sizeof *gone) : NULL;
	uint64_t generation = c->sandbox ? c->sandbox->generation : 0;

	snprintf(c->reason, sizeof c->reason, "%s", cancelled ? cancel : why);
	if (c->sandbox != NULL && sandbox_retire(m, c->sandbox, why, &err) < 0) {
		char first[sizeof c->reason];

		/* c->reason, not cancel: the retire freed the sandbox that held it. */
		snprintf(first, sizeof first, "%s", c->reason);
		/* A message for people: each half is kept within the reason, never the exec's state. */
		snprintf(c->reason, sizeof c->reason, "%.480s; and the sandbox's end is not proven: %.480s", first,
			 err.msg);
		cancelled = 0;
	} else if (gone != NULL && records_sandbox_get(m->rec, c->session, gone, &err) == RECORDS_FOUND &&
		   gone->generation == generation && strcmp(gone->state, "gone") == 0) {
		/* Ended from outside: the runtime's own word for it, as the retire recorded it. */
		snprintf(c->reason, sizeof c->reason, "the sandbox ended during the call: %.900s", gone->evidence);
	}
	free(gone);
	c->sandbox = NULL;
	/* A cancel stops the sandbox on purpose: with evidence of its end, that is `cancelled`. */
	return call_finish(m, c, cancelled ? "cancelled" : "uncertain",
			   call_refused_result(c, cancelled ? "cancelled" : "uncertain", c->reason));
}

/* The grants now, against the snapshot the sandbox holds. Called with the sandbox marked busy: a
 * change recorded before this read is seen here; one recorded after it finds the sandbox busy and
 * stops it (sessions.c authority_changed), so no call runs on authority that was revoked. */
static int authority_current(struct manager *m, struct call *c, struct sb_err *err)
{
	json_t *grants = records_grants(m->rec, c->session, err);
	char *text = grants ? json_dumps(grants, JSON_COMPACT | JSON_SORT_KEYS) : NULL;
	int same = text != NULL && strcmp(text, c->sandbox->authority) == 0;

	json_decref(grants);
	free(text);
	if (grants == NULL)
		return -1;
	return same ? 0 : 1;
}

static void sandbox_mark(struct manager *m, struct call *c, bool busy)
{
	pthread_mutex_lock(&m->lock);
	c->sandbox->busy = busy;
	if (busy) {
		snprintf(c->sandbox->running_exec, sizeof c->sandbox->running_exec, "%s", c->exec_id);
		snprintf(c->sandbox->running_tag, sizeof c->sandbox->running_tag, "%s", c->tag);
		/* In the hold that sets the tag: a cancel finds the call running, or is found here. */
		if (cancel_pending_take(m, c->session, c->tag, c->exec_id))
			c->cancelled_first = true;
	} else {
		c->sandbox->last_used_ms = clock_real_ms();
	}
	pthread_mutex_unlock(&m->lock);
}

/* A call that took a cancel before it ran: recorded cancelled, never dispatched. */
static json_t *call_cancelled_first(struct manager *m, struct call *c)
{
	snprintf(c->reason, sizeof c->reason, "cancelled by request before it ran");
	return call_finish(m, c, "cancelled", call_refused_result(c, "cancelled", c->reason));
}

/* Step 4: the sandbox, marked busy, holding exactly the session's current grants. */
static int sandbox_ready(struct manager *m, struct call *c, struct sb_err *err)
{
	for (int tries = 0; tries < 3; tries++) {
		int rc;

		if (sandbox_acquire(m, &c->s, ACQUIRE_FOR_CALL, &c->sandbox, err) < 0)
			return -1;
		sandbox_mark(m, c, true);
		rc = authority_current(m, c, err);
		if (rc <= 0)
			return rc;
		/* The grants changed since it was prepared: a new sandbox with the new snapshot. */
		sandbox_mark(m, c, false);
		rc = sandbox_retire(m, c->sandbox, "grants changed", err);
		c->sandbox = NULL; /* freed either way */
		if (rc < 0)
			return -1;
	}
	return sb_fail(err, EAGAIN, "the session's grants keep changing; try again");
}

/* After a command ran: what it planted where git never makes such things (a link or FIFO in the
 * identity's shared refs/, logs/, packed-refs.d/, or in its worktree metadata) is removed now and
 * logged with this session and exec, so it never refuses the identity's other sessions and its maker
 * is on record (workspace_sweep). Sessions of the identity with a call running meanwhile share those
 * directories and are named too. A sweep that cannot run is logged; every preparation sweeps again. */
static void call_sweep(struct manager *m, const struct call *c)
{
	char who[1024];
	size_t n = (size_t)snprintf(who, sizeof who, "a command of session %s (exec %s)", c->session, c->exec_id);
	struct sb_err err;

	if (c->sandbox->repo_dir[0] == '\0')
		return; /* no workspace behind it (none is made without one): nothing to sweep */
	pthread_mutex_lock(&m->lock);
	for (const struct live_sandbox *l = m->live; l != NULL && n < sizeof who; l = l->next)
		if (l != c->sandbox && l->busy && strcmp(l->identity, c->sandbox->identity) == 0)
			n += (size_t)snprintf(who + n, sizeof who - n, ", or of session %s (exec %s, running meanwhile)",
					      l->session, l->running_exec);
	pthread_mutex_unlock(&m->lock);
	if (workspace_sweep(c->sandbox->repo_dir, c->sandbox->worktree_name, who, &err) < 0)
		sb_warn("exec %s (session %s): the sweep after the call could not run: %s", c->exec_id, c->session,
			err.msg);
}

/* Steps 3 to 5 on one sandbox: check, obtain it (marked busy, with the grants rechecked), send.
 * Returns call_dispatch()'s outcome, CALL_CANCELLED_FIRST, or CALL_REFUSED (err says why) before
 * anything was sent. */
static enum call_outcome call_attempt(struct manager *m, struct call *c, struct sb_err *err)
{
	enum call_outcome rc;

	FAILPOINT("manager.exec.accepted"); /* recorded accepted; no sandbox touched yet */
	if (call_stop_check(m, err) < 0 || session_check(c, err) < 0 || sandbox_ready(m, c, err) < 0) {
		if (c->sandbox != NULL)
			sandbox_mark(m, c, false);
		return CALL_REFUSED;
	}
	metrics_lap(&c->lap, METRICS_STEP_SANDBOX);
	/* The session needs no second read after the slow step 4 (call_bind says why); the grants
	 * were read with the sandbox busy (sandbox_ready). The sandbox was marked busy under m->lock
	 * before the phase is read here: the stop's cancel (cancel_stop_calls) either finds it busy
	 * and cancels the call, or this check refuses it. */
	if (call_stop_check(m, err) < 0 || sb_random_bytes(c->nonce, sizeof c->nonce, err) < 0) {
		sandbox_mark(m, c, false);
		return CALL_REFUSED;
	}
	/* A cancel before the dispatch: nothing is sent. One that waited for the call
	 * (CALL_CANCELLED_FIRST); or one that found it busy and is stopping its sandbox (CALL_UNCERTAIN:
	 * call_uncertain gets the evidence). */
	if (c->cancelled_first) {
		sandbox_mark(m, c, false);
		return CALL_CANCELLED_FIRST;
	}
	if (call_cancel_reason(m, c)) {
		sandbox_mark(m, c, false);
		sb_fail(err, ECANCELED, "cancelled before it was dispatched");
		return CALL_UNCERTAIN;
	}
	sb_hex_encode(c->nonce, sizeof c->nonce, c->nonce_hex);
	rc = call_dispatch(m, c, err);
	if (rc == CALL_DONE || rc == CALL_UNCERTAIN)
		call_sweep(m, c);
	sandbox_mark(m, c, false);
	return rc;
}

static json_t *call_run(struct manager *m, struct call *c)
{
	struct sb_err err, retire_err;
	json_t *result;
	enum call_outcome rc = call_attempt(m, c, &err);

	if (rc == CALL_CANCELLED_FIRST)
		return call_cancelled_first(m, c);
	/* Cancelled while it was being sent (the cancel stopped the sandbox): not run again elsewhere. */
	if (rc == CALL_AGENT_SILENT && call_cancel_reason(m, c))
		return call_uncertain(m, c, err.msg);
	/* A sandbox whose agent does not answer (its init killed between two calls) would otherwise
	 * refuse every later call of the session for good. Nothing was sent, so the exec is still
	 * only accepted: the sandbox is retired, its end proven as always, and the call tries once
	 * more on a new generation. No evidence: refused, and the session is reserved (sandbox.c). */
	if (rc == CALL_AGENT_SILENT) {
		sb_warn("exec %s: the sandbox of session %s does not answer (%s); replacing it", c->exec_id, c->session,
			err.msg);
		int retired = sandbox_retire(m, c->sandbox, "its agent does not answer", &retire_err);

		c->sandbox = NULL; /* freed either way */
		if (retired < 0) {
			err = retire_err;
			rc = CALL_REFUSED;
		} else {
			rc = call_attempt(m, c, &err);
		}
	}
	if (rc == CALL_REFUSED || rc == CALL_AGENT_REFUSED || rc == CALL_AGENT_SILENT) {
		snprintf(c->reason, sizeof c->reason, "%s", err.msg);
		return call_finish(m, c, "refused", call_refused_result(c, "refused", err.msg));
	}
	if (rc < 0 || (result = call_result_parse(c)) == NULL)
		return call_uncertain(m, c, rc < 0 ? err.msg : "the result is not JSON");
	return call_finish(m, c, json_string_value(json_object_get(result, "status")) ?: "uncertain", result);
}

/* A call that would take its turn once the manager is stopping: recorded refused (it never ran),
 * as every refusal after step 2, and answered unavailable. */
static json_t *call_refuse_stopping(struct manager *m, struct call *c)
{
	struct sb_err err;
	json_t *resp;

	snprintf(c->reason, sizeof c->reason, "the manager is stopping: the call never ran");
	if (call_record(m, c, &err) < 0)
		return control_error_from("internal", &err);
	resp = call_finish(m, c, "refused", call_refused_result(c, "refused", c->reason));
	if (!json_is_true(json_object_get(resp, "ok")))
		return resp; /* its refusal is not on record: call_finish says so */
	json_decref(resp);
	return control_error("unavailable", "the manager is stopping: exec %s was refused and never ran; run it again "
			     "once the manager is back", c->exec_id);
}

/* The output over keep_over goes to a file in the worktree, the identity's own (rule N2). */
static void call_output_keep(struct manager *m, const struct call *c, json_t *resp)
{
	struct workspace_owner ids;
	struct sb_err err;

	if (identity_ids_of(m, c->s.identity, &ids, &err) < 0) {
		sb_warn("exec %s: its output is not kept in the worktree: %s", c->exec_id, err.msg);
		return;
	}
	output_keep(resp, c->s.worktree, c->exec_id, (size_t)c->keep_over, ids.uid, ids.gid);
}

/* Steps 2 (its record) to 6, in the session's turn: recorded accepted, then run to its end. */
static json_t *call_steps(struct manager *m, struct call *c)
{
	struct sb_err err;
	json_t *resp;

	if (stop_reached(m, STOP_REFUSING))
		return call_refuse_stopping(m, c);
	/* Its disk reserve given back, the filesystem full: nothing is recorded or run until it is
	 * held again, so that every call accepted can be recorded to its end (rule N4). */
	if (disk_bound_admit(&m->disk, &err) < 0)
		return control_error("unavailable", "exec not run: %s", err.msg);
	/* Not on record, so not run: the answer says so (a full records volume ends here). */
	if (call_record(m, c, &err) < 0)
		return control_error("unavailable", "exec not run: it could not be recorded (%s)", err.msg);
	pthread_mutex_lock(&m->lock);
	c->cancelled_first = cancel_pending_take(m, c->session, c->tag, c->exec_id);
	pthread_mutex_unlock(&m->lock);
	/* its cancel came while it waited: no sandbox is touched */
	resp = c->cancelled_first ? call_cancelled_first(m, c) : call_run(m, c);
	/* Its record is final: a cancel that crosses the answer hears this exec, and is not kept. */
	cancel_call_ended(m, c->session, c->tag, c->exec_id);
	return resp;
}

json_t *execpath_run(struct manager *m, json_t *req, const struct live_watch *watch)
{
	struct call *c = calloc(1, sizeof *c);
	json_t *resp;

	if (c == NULL)
		return control_error("internal", "out of memory");
	c->watch = watch;
	resp = call_validate(m, req, c);      /* step 1: nothing taken yet */
	if (resp == NULL)
		resp = call_bind(m, c);       /* step 2: the turn, the session read once */
	if (resp == NULL) {
		resp = call_steps(m, c);
		/* After the record is committed, still in the session's turn (no other call writes
		 * there); a call refused without a turn keeps nothing. */
		if (c->has_turn && c->keep_over >= 0)
			call_output_keep(m, c, resp);
	}
	if (c->has_turn)
		queue_leave(m->queue, c->session);
	agent_reply_free(&c->reply);
	free(c);
	return resp;
}
