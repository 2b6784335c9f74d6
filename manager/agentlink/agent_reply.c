/* The agent-protocol client's pure judgement of what an agent sent back (agent_client.h *_accept):
 * whether a reply matches its request (exec id, generation, the result and receipt it must carry).
 * No I/O. Everything the agent sends is untrusted text for messages. */
#include "agent_client.h"
#include "agent_client_internal.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "failpoint.h"
#include "log.h"
#include "random.h"
#include "receipt_mac.h"

#define AGENT_TEXT_MAX 512        /* how much of an agent's error message we repeat */

/* ---------- small helpers ---------- */

/* Peer-controlled text into a message: printable ASCII only, bounded. */
static void text_clean(char *out, size_t out_len, const char *in, size_t in_len)
{
	size_t used = 0;

	for (size_t i = 0; i < in_len && in[i] != '\0' && used + 1 < out_len; i++) {
		unsigned char c = (unsigned char)in[i];

		out[used++] = (c >= 0x20 && c < 0x7f) ? (char)c : '?';
	}
	out[used] = '\0';
}

const char *agent_error_name(uint32_t code)
{
	switch (code) {
	case SANDBOX__ERROR_CODE__ERR_MALFORMED: return "malformed";
	case SANDBOX__ERROR_CODE__ERR_VERSION: return "version";
	case SANDBOX__ERROR_CODE__ERR_BUSY: return "busy";
	case SANDBOX__ERROR_CODE__ERR_REFUSED: return "refused";
	case SANDBOX__ERROR_CODE__ERR_INTERNAL: return "internal";
	case SANDBOX__ERROR_CODE__ERR_UNKNOWN_EXEC: return "unknown exec";
	default: return "unknown";
	}
}

/* The errno that tells callers which agent error it was, so sb_err alone is enough to act on. */
static int agent_error_errno(uint32_t code)
{
	switch (code) {
	case SANDBOX__ERROR_CODE__ERR_MALFORMED: return EBADMSG;
	case SANDBOX__ERROR_CODE__ERR_VERSION: return EPROTONOSUPPORT;
	case SANDBOX__ERROR_CODE__ERR_BUSY: return EBUSY;
	case SANDBOX__ERROR_CODE__ERR_REFUSED: return EPERM;
	case SANDBOX__ERROR_CODE__ERR_INTERNAL: return EIO;
	case SANDBOX__ERROR_CODE__ERR_UNKNOWN_EXEC: return ENOENT;
	default: return EPROTO;
	}
}

/* An Error envelope as our failure: code kept in *code, the agent's words quoted. */
int agent_error_fail(const Sandbox__Error *e, const char *what, uint32_t *code, struct sb_err *err)
{
	char text[AGENT_TEXT_MAX];

	text_clean(text, sizeof text, e->message, strlen(e->message));
	*code = e->code != 0 ? e->code : SANDBOX__ERROR_CODE__ERR_INTERNAL;
	return sb_fail(err, agent_error_errno(e->code), "sandbox-agent answered %s with error '%s': %s", what,
		       agent_error_name(e->code), text);
}

int unexpected(const Sandbox__Envelope *m, const char *waiting_for, struct sb_err *err)
{
	return sb_fail(err, EPROTO, "sandbox-agent sent a %s message while we waited for %s: protocol violation",
		       proto_body_name(m->body_case), waiting_for);
}

void agent_reply_free(struct agent_reply *r)
{
	free(r->result_json);
	free(r->receipt);
	r->result_json = NULL;
	r->receipt = NULL;
	r->receipt_len = 0;
	r->receipt_verified = false;
}

/* ---------- pure judgement of replies ---------- */

static int id_match(const char *what, const char *exec_id, const struct agent_expect *want, struct sb_err *err)
{
	char got[AGENT_TEXT_MAX];

	if (strcmp(exec_id, want->exec_id) == 0)
		return 0;
	text_clean(got, sizeof got, exec_id, strlen(exec_id));
	return sb_fail(err, EPROTO, "%s refused: it is for exec '%s', not '%s'", what, got, want->exec_id);
}

/* A reply must be about the exec we asked for, in the generation we asked for (invariant 6). */
static int ids_match(const char *what, const char *exec_id, uint64_t generation, const struct agent_expect *want,
		     struct sb_err *err)
{
	if (id_match(what, exec_id, want, err) < 0)
		return -1;
	if (generation != want->generation)
		return sb_fail(err, EPROTO, "%s refused: it is from generation %llu, not %llu", what,
			       (unsigned long long)generation, (unsigned long long)want->generation);
	return 0;
}

/* The result JSON must say the same exec and generation as its envelope; *has_receipt tells
 * whether the agent wrote a receipt (then a Receipt message follows the Result). Parsed without
 * JSON_ALLOW_NUL, like every reader of the result: the agent escapes NUL (common/textesc.c
 * textesc_encode), so a \u0000 is a malformed result. */
static int result_json_check(const char *text, const struct agent_expect *want, bool *has_receipt,
			     struct sb_err *err)
{
	json_error_t jerr;
	json_t *obj = json_loads(text, JSON_REJECT_DUPLICATES, &jerr);
	json_t *id, *gen, *status, *receipt;
	int rc = 0;

	if (!json_is_object(obj)) {
		json_decref(obj);
		return sb_fail(err, EPROTO, "result refused: not a JSON object (%s)", jerr.text);
	}
	id = json_object_get(obj, "exec_id");
	gen = json_object_get(obj, "generation");
	status = json_object_get(obj, "status");
	receipt = json_object_get(obj, "receipt");
	if (!json_is_string(id) || strcmp(json_string_value(id), want->exec_id) != 0)
		rc = sb_fail(err, EPROTO, "result refused: its JSON names another exec than '%s'", want->exec_id);
	else if (!json_is_integer(gen) || json_integer_value(gen) < 0 ||
		 (uint64_t)json_integer_value(gen) != want->generation)
		rc = sb_fail(err, EPROTO, "result refused: its JSON names another generation than %llu",
			     (unsigned long long)want->generation);
	else if (!json_is_string(status))
		rc = sb_fail(err, EPROTO, "result refused: it has no status");
	else if (receipt != NULL && !json_is_null(receipt) && !json_is_object(receipt))
		rc = sb_fail(err, EPROTO, "result refused: its receipt member is neither null nor an object");
	*has_receipt = receipt != NULL && json_is_object(receipt);
	json_decref(obj);
	return rc;
}

#ifdef SB_FAILPOINTS
/* Test builds only (failpoints manager.agent.result_running, manager.agent.result_exit_code): the
 * Result as a compromised agent would send it, a non-final status or an exit code its receipt does
 * not carry; what the manager then records is the test (result_proof.c, docs/reliability.md). */
static void result_forge(char **text)
{
	bool running = failpoint_hit("manager.agent.result_running");
	bool code = !running && failpoint_hit("manager.agent.result_exit_code");
	json_t *obj = running || code ? json_loads(*text, 0, NULL) : NULL;
	char *forged;

	if (obj == NULL)
		return;
	if (running)
		json_object_set_new(obj, "status", json_string("running"));
	else
		json_object_set_new(obj, "exit_code", json_integer(json_integer_value(json_object_get(obj, "exit_code")) + 1));
	forged = json_dumps(obj, JSON_COMPACT);
	json_decref(obj);
	if (forged != NULL) {
		free(*text);
		*text = forged;
	}
}
#endif

static int result_take(const Sandbox__Result *r, const struct agent_expect *want, bool *has_receipt,
		       struct agent_reply *out, struct sb_err *err)
{
	if (ids_match("result", r->exec_id, r->generation, want, err) < 0 ||
	    result_json_check(r->result_json, want, has_receipt, err) < 0)
		return -1;
	out->result_json = strdup(r->result_json);
	if (out->result_json == NULL)
		return sb_fail(err, ENOMEM, "keeping the result of exec %s", want->exec_id);
#ifdef SB_FAILPOINTS
	result_forge(&out->result_json);
#endif
	return 0;
}

static int receipt_take(const Sandbox__Receipt *r, const struct agent_expect *want, struct agent_reply *out,
			struct sb_err *err)
{
	char nonce_hex[2 * AGENT_NONCE_BYTES + 1];
	json_t *verified;

	if (ids_match("receipt", r->exec_id, r->generation, want, err) < 0)
		return -1;
	if (want->receipt_key != NULL) {
		if (want->nonce != NULL)
			sb_hex_encode(want->nonce, AGENT_NONCE_BYTES, nonce_hex);
		verified = receipt_mac_verify((const char *)r->receipt_json.data, r->receipt_json.len, want->receipt_key,
					      want->nonce != NULL ? nonce_hex : NULL, want->exec_id,
					      (int64_t)want->generation, err);
		if (verified == NULL)
			return -1;
		json_decref(verified);
	}
	out->receipt = malloc(r->receipt_json.len + 1);
	if (out->receipt == NULL)
		return sb_fail(err, ENOMEM, "keeping the receipt of exec %s", want->exec_id);
	if (r->receipt_json.len > 0)
		memcpy(out->receipt, r->receipt_json.data, r->receipt_json.len);
	out->receipt[r->receipt_json.len] = '\0';
	out->receipt_len = r->receipt_json.len;
	out->receipt_verified = want->receipt_key != NULL;
	return 0;
}

/* On refusal nothing of the exchange is kept: a half-accepted reply must not be delivered. */
static int exec_refuse(struct agent_reply *out)
{
	agent_reply_free(out);
	return -1;
}

int agent_exec_accept(struct agent_exec_wait *w, const struct agent_expect *want, const Sandbox__Envelope *m,
		      struct agent_reply *out, struct sb_err *err)
{
	if (m->body_case == SANDBOX__ENVELOPE__BODY_ERROR) {
		agent_error_fail(m->error, "the exec", &out->agent_error, err);
		return exec_refuse(out);
	}
	if (!w->have_result) {
		if (m->body_case != SANDBOX__ENVELOPE__BODY_RESULT) {
			unexpected(m, "the exec's result", err);
			return exec_refuse(out);
		}
		if (result_take(m->result, want, &w->expect_receipt, out, err) < 0)
			return exec_refuse(out);
		w->have_result = true;
		out->state = AGENT_EXEC_FINISHED;
		/* The agent sends a Receipt after the Result exactly when the result names one. */
		return w->expect_receipt ? 0 : 1;
	}
	if (m->body_case != SANDBOX__ENVELOPE__BODY_RECEIPT) {
		unexpected(m, "the exec's receipt", err);
		return exec_refuse(out);
	}
	if (receipt_take(m->receipt, want, out, err) < 0)
		return exec_refuse(out);
	return 1;
}

static int query_state(Sandbox__QueryReply__State s, enum agent_exec_state *out, struct sb_err *err)
{
	switch (s) {
	case SANDBOX__QUERY_REPLY__STATE__UNKNOWN: *out = AGENT_EXEC_UNKNOWN; return 0;
	case SANDBOX__QUERY_REPLY__STATE__RUNNING: *out = AGENT_EXEC_RUNNING; return 0;
	case SANDBOX__QUERY_REPLY__STATE__FINISHED: *out = AGENT_EXEC_FINISHED; return 0;
	default: return sb_fail(err, EPROTO, "query reply refused: unknown exec state %d", (int)s);
	}
}

int agent_query_accept(const struct agent_expect *want, const Sandbox__Envelope *m, struct agent_reply *out,
		       struct sb_err *err)
{
	const Sandbox__QueryReply *q;
	bool has_receipt = false;

	if (m->body_case == SANDBOX__ENVELOPE__BODY_ERROR)
		return agent_error_fail(m->error, "the query", &out->agent_error, err);
	if (m->body_case != SANDBOX__ENVELOPE__BODY_QUERY_REPLY)
		return unexpected(m, "a query reply", err);
	q = m->query_reply;
	if (id_match("query reply", q->exec_id, want, err) < 0 ||
	    query_state(q->state, &out->state, err) < 0)
		return -1;
	/* Only a finished exec has an outcome; anything attached to another state is not one. */
	if (out->state != AGENT_EXEC_FINISHED)
		return 0;
	if (q->result == NULL)
		return sb_fail(err, EPROTO, "query reply refused: exec '%s' is finished but no result came with it",
			       want->exec_id);
	if (result_take(q->result, want, &has_receipt, out, err) < 0 ||
	    (q->receipt != NULL && receipt_take(q->receipt, want, out, err) < 0))
		return exec_refuse(out);
	return 0;
}

int agent_hello_accept(const Sandbox__Envelope *m, struct agent_peer *peer, char **features_json,
		       struct sb_err *err)
{
	uint32_t code = 0;

	memset(peer, 0, sizeof *peer);
	*features_json = NULL;
	if (m->body_case == SANDBOX__ENVELOPE__BODY_ERROR)
		return agent_error_fail(m->error, "our hello", &code, err);
	if (m->body_case != SANDBOX__ENVELOPE__BODY_HELLO)
		return unexpected(m, "the agent's hello", err);
	if (proto_negotiate(m->hello, &peer->version, err) < 0)
		return -1;
	peer->has_generation = m->hello->has_generation;
	peer->generation = m->hello->generation;
	if (m->hello->build != NULL)
		text_clean(peer->build, sizeof peer->build, m->hello->build, strlen(m->hello->build));
	if (m->hello->features_json != NULL) {
		*features_json = strdup(m->hello->features_json);
		if (*features_json == NULL)
			return sb_fail(err, ENOMEM, "keeping the agent's features");
	}
	peer->features_json = *features_json;
	return 0;
}

