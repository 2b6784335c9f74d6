/* Unit tests for the pure reply matchers of manager/agentlink/agent_reply.c (agent_exec_accept, agent_query_accept,
 * agent_hello_accept): only a Result/Receipt for our exec id, generation and nonce is delivered (invariant 6). */
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <errno.h>
#include <jansson.h>

#include "agent_client.h"
#include "proto.h"
#include "random.h"
#include "receipt_mac.h"

#define EXEC_ID "e1"
#define GEN 7u

static const uint8_t key[RECEIPT_KEY_BYTES] = {
	0x10, 0x11, 0x12, 0x13, 0x14, 0x15, 0x16, 0x17, 0x18, 0x19, 0x1a, 0x1b, 0x1c, 0x1d, 0x1e, 0x1f,
	0x20, 0x21, 0x22, 0x23, 0x24, 0x25, 0x26, 0x27, 0x28, 0x29, 0x2a, 0x2b, 0x2c, 0x2d, 0x2e, 0x2f,
};
static const uint8_t other_key[RECEIPT_KEY_BYTES] = { 0xee };
static const uint8_t nonce[AGENT_NONCE_BYTES] = {
	0x00, 0x11, 0x22, 0x33, 0x44, 0x55, 0x66, 0x77, 0x88, 0x99, 0xaa, 0xbb, 0xcc, 0xdd, 0xee, 0xff,
	0x01, 0x12, 0x23, 0x34, 0x45, 0x56, 0x67, 0x78, 0x89, 0x9a, 0xab, 0xbc, 0xcd, 0xde, 0xef, 0xf0,
};
static const uint8_t other_nonce[AGENT_NONCE_BYTES] = { 0x42 };

/* One received message, built in memory; holds the text it points to. Never copied (self-pointers). */
struct msg {
	Sandbox__Envelope env;
	Sandbox__Result result;
	Sandbox__Receipt receipt;
	Sandbox__QueryReply reply;
	Sandbox__Error error;
	Sandbox__Hello hello;
	Sandbox__Pong pong;
	char *result_text;
	char *receipt_text;
};

static void msg_init(struct msg *m)
{
	Sandbox__Envelope env = SANDBOX__ENVELOPE__INIT;
	Sandbox__Result result = SANDBOX__RESULT__INIT;
	Sandbox__Receipt receipt = SANDBOX__RECEIPT__INIT;
	Sandbox__QueryReply reply = SANDBOX__QUERY_REPLY__INIT;
	Sandbox__Error error = SANDBOX__ERROR__INIT;
	Sandbox__Hello hello = SANDBOX__HELLO__INIT;
	Sandbox__Pong pong = SANDBOX__PONG__INIT;

	memset(m, 0, sizeof *m);
	m->env = env;
	m->result = result;
	m->receipt = receipt;
	m->reply = reply;
	m->error = error;
	m->hello = hello;
	m->pong = pong;
}

static void msg_free(struct msg *m)
{
	free(m->result_text);
	free(m->receipt_text);
	m->result_text = m->receipt_text = NULL;
}

/* The exec result of DESIGN.md as the agent writes it; "receipt" an object or null. */
static char *result_json_text(const char *exec_id, json_int_t generation, bool with_receipt)
{
	char nonce_hex[2 * AGENT_NONCE_BYTES + 1];
	json_t *receipt, *obj;
	char *text;

	sb_hex_encode(nonce, sizeof nonce, nonce_hex);
	receipt = with_receipt ? json_pack("{s:s, s:b, s:s, s:b}", "nonce", nonce_hex, "verified", 1, "path",
					   "/run/receipts/e1.json", "boundary_confirmed", 1)
			       : json_null();
	obj = json_pack("{s:s, s:I, s:s, s:i, s:n, s:I, s:s, s:s, s:o}", "exec_id", exec_id, "generation", generation,
			"status", "exited", "exit_code", 0, "signal", "duration_ms", (json_int_t)12, "stdout", "hi\n",
			"stderr", "", "receipt", receipt);
	assert_non_null(obj);
	text = json_dumps(obj, JSON_COMPACT);
	json_decref(obj);
	assert_non_null(text);
	return text;
}

/* A receipt signed under k, naming exec_id, generation and the nonce n. */
static char *receipt_json_text(const char *exec_id, json_int_t generation, const uint8_t *n, const uint8_t *k)
{
	char nonce_hex[2 * AGENT_NONCE_BYTES + 1];
	struct sb_err err;
	json_t *obj;
	char *text;

	sb_hex_encode(n, AGENT_NONCE_BYTES, nonce_hex);
	obj = json_pack("{s:i, s:s, s:I, s:s, s:s, s:i, s:{s:b}}", "version", 1, "exec_id", exec_id, "generation",
			generation, "nonce", nonce_hex, "status", "exited", "exit_code", 0, "boundary", "confirmed",
			1);
	assert_non_null(obj);
	assert_int_equal(receipt_mac_sign(obj, k, &err), 0);
	text = json_dumps(obj, JSON_COMPACT | JSON_SORT_KEYS);
	json_decref(obj);
	assert_non_null(text);
	return text;
}

/* Fill m->result: env_id/env_gen on the envelope, json_id/json_gen inside result_json. */
static void result_fill(struct msg *m, const char *env_id, uint64_t env_gen, const char *json_id, json_int_t json_gen,
			bool with_receipt)
{
	free(m->result_text);
	m->result_text = result_json_text(json_id, json_gen, with_receipt);
	m->result.exec_id = (char *)env_id;
	m->result.generation = env_gen;
	m->result.result_json = m->result_text;
}

static void receipt_fill(struct msg *m, const char *env_id, uint64_t env_gen, const char *json_id,
			 json_int_t json_gen, const uint8_t *n, const uint8_t *k)
{
	free(m->receipt_text);
	m->receipt_text = receipt_json_text(json_id, json_gen, n, k);
	m->receipt.exec_id = (char *)env_id;
	m->receipt.generation = env_gen;
	m->receipt.receipt_json.data = (uint8_t *)m->receipt_text;
	m->receipt.receipt_json.len = strlen(m->receipt_text);
}

static void as_result(struct msg *m)
{
	m->env.body_case = SANDBOX__ENVELOPE__BODY_RESULT;
	m->env.result = &m->result;
}

static void as_receipt(struct msg *m)
{
	m->env.body_case = SANDBOX__ENVELOPE__BODY_RECEIPT;
	m->env.receipt = &m->receipt;
}

static void as_error(struct msg *m, uint32_t code, const char *text)
{
	m->error.code = code;
	m->error.message = (char *)text;
	m->env.body_case = SANDBOX__ENVELOPE__BODY_ERROR;
	m->env.error = &m->error;
}

static void as_pong(struct msg *m)
{
	m->pong.token = 5;
	m->env.body_case = SANDBOX__ENVELOPE__BODY_PONG;
	m->env.pong = &m->pong;
}

static void as_query_reply(struct msg *m, const char *exec_id, Sandbox__QueryReply__State s, bool with_result,
			   bool with_receipt)
{
	m->reply.exec_id = (char *)exec_id;
	m->reply.state = s;
	m->reply.result = with_result ? &m->result : NULL;
	m->reply.receipt = with_receipt ? &m->receipt : NULL;
	m->env.body_case = SANDBOX__ENVELOPE__BODY_QUERY_REPLY;
	m->env.query_reply = &m->reply;
}

static struct agent_expect want_default(void)
{
	struct agent_expect w = { .exec_id = EXEC_ID, .generation = GEN, .nonce = nonce, .receipt_key = key };

	return w;
}

/* A refused reply delivers nothing. */
static void assert_nothing_delivered(const struct agent_reply *out)
{
	assert_null(out->result_json);
	assert_null(out->receipt);
	assert_int_equal(out->receipt_len, 0);
	assert_false(out->receipt_verified);
}

/* Feed a good Result of EXEC_ID/GEN that names a receipt; the wait then expects the Receipt. */
static void accept_good_result(struct agent_exec_wait *w, const struct agent_expect *want, struct agent_reply *out)
{
	struct msg m;
	struct sb_err err;

	msg_init(&m);
	result_fill(&m, EXEC_ID, GEN, EXEC_ID, GEN, true);
	as_result(&m);
	assert_int_equal(agent_exec_accept(w, want, &m.env, out, &err), 0);
	assert_true(w->have_result);
	assert_true(w->expect_receipt);
	assert_non_null(out->result_json);
	assert_null(out->receipt);
	msg_free(&m);
}

/* Feed one envelope after a good Result; it must be refused with errnum, dropping the result too. */
static void receipt_refused_after_result(struct msg *m, int errnum, const char *msg_part)
{
	struct agent_expect want = want_default();
	struct agent_exec_wait w = { 0 };
	struct agent_reply out = { 0 };
	struct sb_err err = { 0 };

	accept_good_result(&w, &want, &out);
	assert_int_equal(agent_exec_accept(&w, &want, &m->env, &out, &err), -1);
	assert_int_equal(err.errnum, errnum);
	if (msg_part != NULL)
		assert_non_null(strstr(err.msg, msg_part));
	assert_int_equal(out.agent_error, 0);
	assert_nothing_delivered(&out);
	agent_reply_free(&out);
}

/* ---------- agent_exec_accept ---------- */

static void test_exec_result_then_receipt_delivered(void **state)
{
	struct agent_expect want = want_default();
	struct agent_exec_wait w = { 0 };
	struct agent_reply out = { 0 };
	struct sb_err err = { 0 };
	struct msg m;

	(void)state;
	accept_good_result(&w, &want, &out);
	assert_int_equal(out.state, AGENT_EXEC_FINISHED);
	msg_init(&m);
	receipt_fill(&m, EXEC_ID, GEN, EXEC_ID, GEN, nonce, key);
	as_receipt(&m);
	assert_int_equal(agent_exec_accept(&w, &want, &m.env, &out, &err), 1);
	assert_int_equal(out.agent_error, 0);
	assert_int_equal(out.state, AGENT_EXEC_FINISHED);
	assert_non_null(out.result_json);
	assert_non_null(strstr(out.result_json, "\"exec_id\":\"e1\""));
	assert_non_null(out.receipt);
	assert_true(out.receipt_verified);
	assert_int_equal(out.receipt_len, strlen(m.receipt_text));
	assert_memory_equal(out.receipt, m.receipt_text, out.receipt_len);
	assert_int_equal(out.receipt[out.receipt_len], '\0');
	agent_reply_free(&out);
	assert_null(out.result_json);
	msg_free(&m);
}

/* Without a key the receipt is delivered but not claimed verified. */
static void test_exec_receipt_without_key_unverified(void **state)
{
	struct agent_expect want = want_default();
	struct agent_exec_wait w = { 0 };
	struct agent_reply out = { 0 };
	struct sb_err err = { 0 };
	struct msg m;

	(void)state;
	want.receipt_key = NULL;
	want.nonce = NULL;
	accept_good_result(&w, &want, &out);
	msg_init(&m);
	receipt_fill(&m, EXEC_ID, GEN, EXEC_ID, GEN, nonce, other_key);
	as_receipt(&m);
	assert_int_equal(agent_exec_accept(&w, &want, &m.env, &out, &err), 1);
	assert_non_null(out.receipt);
	assert_false(out.receipt_verified);
	agent_reply_free(&out);
	msg_free(&m);
}

/* A Result refused as the first envelope: nothing delivered, the wait does not advance. */
static void result_refused(struct msg *m, int errnum, const char *msg_part)
{
	struct agent_expect want = want_default();
	struct agent_exec_wait w = { 0 };
	struct agent_reply out = { 0 };
	struct sb_err err = { 0 };

	assert_int_equal(agent_exec_accept(&w, &want, &m->env, &out, &err), -1);
	assert_int_equal(err.errnum, errnum);
	if (msg_part != NULL)
		assert_non_null(strstr(err.msg, msg_part));
	assert_int_equal(out.agent_error, 0);
	assert_false(w.have_result);
	assert_nothing_delivered(&out);
	agent_reply_free(&out);
}

static void test_exec_result_other_exec_id_envelope_refused(void **state)
{
	struct msg m;

	(void)state;
	msg_init(&m);
	/* The envelope says e2 while the JSON says e1: still refused. */
	result_fill(&m, "e2", GEN, EXEC_ID, GEN, false);
	as_result(&m);
	result_refused(&m, EPROTO, "for exec 'e2', not 'e1'");
	msg_free(&m);
}

static void test_exec_result_other_exec_id_in_json_refused(void **state)
{
	struct msg m;

	(void)state;
	msg_init(&m);
	result_fill(&m, EXEC_ID, GEN, "e2", GEN, false);
	as_result(&m);
	result_refused(&m, EPROTO, "names another exec");
	msg_free(&m);
}

/* Invariant 6: a stale-generation result is never delivered. */
static void test_exec_result_older_generation_envelope_refused(void **state)
{
	struct msg m;

	(void)state;
	msg_init(&m);
	result_fill(&m, EXEC_ID, GEN - 1, EXEC_ID, GEN, false);
	as_result(&m);
	result_refused(&m, EPROTO, "from generation 6, not 7");
	/* Any other generation, newer included. */
	result_fill(&m, EXEC_ID, GEN + 1, EXEC_ID, GEN, false);
	result_refused(&m, EPROTO, "from generation 8, not 7");
	msg_free(&m);
}

static void test_exec_result_older_generation_in_json_refused(void **state)
{
	struct msg m;

	(void)state;
	msg_init(&m);
	result_fill(&m, EXEC_ID, GEN, EXEC_ID, GEN - 1, false);
	as_result(&m);
	result_refused(&m, EPROTO, "names another generation");
	/* A negative generation must not wrap into a match. */
	result_fill(&m, EXEC_ID, GEN, EXEC_ID, -1, false);
	result_refused(&m, EPROTO, "names another generation");
	msg_free(&m);
}

static void test_exec_result_malformed_json_refused(void **state)
{
	struct msg m;

	(void)state;
	msg_init(&m);
	as_result(&m);
	m.result.exec_id = EXEC_ID;
	m.result.generation = GEN;
	m.result.result_json = "[1,2]";
	result_refused(&m, EPROTO, "not a JSON object");
	m.result.result_json = "{\"exec_id\":\"e1\",\"generation\":\"7\",\"status\":\"exited\",\"receipt\":null}";
	result_refused(&m, EPROTO, "names another generation");
	m.result.result_json = "{\"exec_id\":\"e1\",\"generation\":7,\"receipt\":null}";
	result_refused(&m, EPROTO, "no status");
	m.result.result_json = "{\"exec_id\":\"e1\",\"generation\":7,\"status\":\"exited\",\"receipt\":\"x\"}";
	result_refused(&m, EPROTO, "neither null nor an object");
	/* Two exec ids in one object: which one would count? Refused. */
	m.result.result_json = "{\"exec_id\":\"e2\",\"exec_id\":\"e1\",\"generation\":7,\"status\":\"exited\"}";
	result_refused(&m, EPROTO, "not a JSON object");
}

static void test_exec_receipt_other_exec_id_refused(void **state)
{
	struct msg m;

	(void)state;
	msg_init(&m);
	as_receipt(&m);
	/* On the envelope (even when the signed JSON says e1). */
	receipt_fill(&m, "e2", GEN, EXEC_ID, GEN, nonce, key);
	receipt_refused_after_result(&m, EPROTO, "for exec 'e2', not 'e1'");
	/* Only inside the signed receipt. */
	receipt_fill(&m, EXEC_ID, GEN, "e2", GEN, nonce, key);
	receipt_refused_after_result(&m, EPERM, "not 'e1'");
	msg_free(&m);
}

static void test_exec_receipt_other_generation_refused(void **state)
{
	struct msg m;

	(void)state;
	msg_init(&m);
	as_receipt(&m);
	receipt_fill(&m, EXEC_ID, GEN - 1, EXEC_ID, GEN, nonce, key);
	receipt_refused_after_result(&m, EPROTO, "from generation 6, not 7");
	receipt_fill(&m, EXEC_ID, GEN, EXEC_ID, GEN - 1, nonce, key);
	receipt_refused_after_result(&m, EPERM, "from generation 6, not 7");
	msg_free(&m);
}

static void test_exec_receipt_other_nonce_refused(void **state)
{
	struct msg m;

	(void)state;
	msg_init(&m);
	as_receipt(&m);
	receipt_fill(&m, EXEC_ID, GEN, EXEC_ID, GEN, other_nonce, key);
	receipt_refused_after_result(&m, EPERM, "another nonce");
	msg_free(&m);
}

static void test_exec_receipt_tampered_hmac_refused(void **state)
{
	struct msg m;
	char *p;

	(void)state;
	msg_init(&m);
	as_receipt(&m);
	/* A signed field changed after signing. */
	receipt_fill(&m, EXEC_ID, GEN, EXEC_ID, GEN, nonce, key);
	p = strstr(m.receipt_text, "exited");
	assert_non_null(p);
	memcpy(p, "killed", 6);
	receipt_refused_after_result(&m, EPERM, "HMAC does not verify");
	/* The HMAC itself altered. */
	receipt_fill(&m, EXEC_ID, GEN, EXEC_ID, GEN, nonce, key);
	p = strstr(m.receipt_text, "\"hmac_sha256\":\"");
	assert_non_null(p);
	p += strlen("\"hmac_sha256\":\"");
	*p = *p == '0' ? '1' : '0';
	receipt_refused_after_result(&m, EPERM, "HMAC does not verify");
	/* Signed under another key. */
	receipt_fill(&m, EXEC_ID, GEN, EXEC_ID, GEN, nonce, other_key);
	receipt_refused_after_result(&m, EPERM, "HMAC does not verify");
	/* Not JSON at all. */
	strcpy(m.receipt_text, "not json");
	m.receipt.receipt_json.len = strlen(m.receipt_text);
	receipt_refused_after_result(&m, EINVAL, "not a JSON object");
	msg_free(&m);
}

static void test_exec_receipt_without_result_refused(void **state)
{
	struct msg m;

	(void)state;
	msg_init(&m);
	receipt_fill(&m, EXEC_ID, GEN, EXEC_ID, GEN, nonce, key);
	as_receipt(&m);
	result_refused(&m, EPROTO, "sent a receipt message while we waited for the exec's result");
	msg_free(&m);
}

/* After a Result that names a receipt, anything but the Receipt is a protocol violation. */
static void test_exec_second_result_refused(void **state)
{
	struct msg m;

	(void)state;
	msg_init(&m);
	result_fill(&m, EXEC_ID, GEN, EXEC_ID, GEN, true);
	as_result(&m);
	receipt_refused_after_result(&m, EPROTO, "while we waited for the exec's receipt");
	as_pong(&m);
	receipt_refused_after_result(&m, EPROTO, "sent a pong message");
	msg_free(&m);
}

static void test_exec_unexpected_body_refused(void **state)
{
	struct msg m;

	(void)state;
	msg_init(&m);
	as_pong(&m);
	result_refused(&m, EPROTO, "sent a pong message while we waited for the exec's result");
}

/* A Result whose "receipt" is null: delivered, but without a receipt, so not complete (invariant 5). */
static void test_exec_result_with_null_receipt(void **state)
{
	struct agent_expect want = want_default();
	struct agent_exec_wait w = { 0 };
	struct agent_reply out = { 0 };
	struct sb_err err = { 0 };
	struct msg m;

	(void)state;
	msg_init(&m);
	result_fill(&m, EXEC_ID, GEN, EXEC_ID, GEN, false);
	as_result(&m);
	assert_int_equal(agent_exec_accept(&w, &want, &m.env, &out, &err), 1);
	assert_true(w.have_result);
	assert_false(w.expect_receipt);
	assert_int_equal(out.agent_error, 0);
	assert_int_equal(out.state, AGENT_EXEC_FINISHED);
	assert_non_null(out.result_json);
	assert_string_equal(out.result_json, m.result_text);
	/* The caller must not treat this exec as complete. */
	assert_null(out.receipt);
	assert_int_equal(out.receipt_len, 0);
	assert_false(out.receipt_verified);
	agent_reply_free(&out);
	msg_free(&m);
}

static void test_exec_error_envelope(void **state)
{
	struct agent_expect want = want_default();
	struct agent_exec_wait w = { 0 };
	struct agent_reply out = { 0 };
	struct sb_err err = { 0 };
	struct msg m;

	(void)state;
	msg_init(&m);
	as_error(&m, SANDBOX__ERROR_CODE__ERR_BUSY, "another exec is running\n\x1b[31m");
	assert_int_equal(agent_exec_accept(&w, &want, &m.env, &out, &err), -1);
	assert_int_equal(out.agent_error, SANDBOX__ERROR_CODE__ERR_BUSY);
	assert_int_equal(err.errnum, EBUSY);
	assert_non_null(strstr(err.msg, "error 'busy': another exec is running??[31m"));
	assert_false(w.have_result);
	assert_nothing_delivered(&out);
	agent_reply_free(&out);

	/* An Error after the Result, instead of the Receipt: the result is dropped too. */
	memset(&w, 0, sizeof w);
	memset(&out, 0, sizeof out);
	accept_good_result(&w, &want, &out);
	as_error(&m, SANDBOX__ERROR_CODE__ERR_REFUSED, "no");
	assert_int_equal(agent_exec_accept(&w, &want, &m.env, &out, &err), -1);
	assert_int_equal(out.agent_error, SANDBOX__ERROR_CODE__ERR_REFUSED);
	assert_int_equal(err.errnum, EPERM);
	assert_nothing_delivered(&out);

	/* Code 0 is not "no error": it is kept as an internal error. */
	memset(&w, 0, sizeof w);
	memset(&out, 0, sizeof out);
	as_error(&m, 0, "?");
	assert_int_equal(agent_exec_accept(&w, &want, &m.env, &out, &err), -1);
	assert_int_equal(out.agent_error, SANDBOX__ERROR_CODE__ERR_INTERNAL);
	assert_int_equal(err.errnum, EPROTO);
	assert_nothing_delivered(&out);
}

/* ---------- agent_query_accept ---------- */

static void test_query_finished_delivered(void **state)
{
	struct agent_expect want = want_default();
	struct agent_reply out = { 0 };
	struct sb_err err = { 0 };
	struct msg m;

	(void)state;
	msg_init(&m);
	result_fill(&m, EXEC_ID, GEN, EXEC_ID, GEN, true);
	receipt_fill(&m, EXEC_ID, GEN, EXEC_ID, GEN, nonce, key);
	as_query_reply(&m, EXEC_ID, SANDBOX__QUERY_REPLY__STATE__FINISHED, true, true);
	assert_int_equal(agent_query_accept(&want, &m.env, &out, &err), 0);
	assert_int_equal(out.agent_error, 0);
	assert_int_equal(out.state, AGENT_EXEC_FINISHED);
	assert_non_null(out.result_json);
	assert_string_equal(out.result_json, m.result_text);
	assert_non_null(out.receipt);
	assert_int_equal(out.receipt_len, strlen(m.receipt_text));
	assert_memory_equal(out.receipt, m.receipt_text, out.receipt_len);
	assert_true(out.receipt_verified);
	agent_reply_free(&out);
	msg_free(&m);
}

/* A finished exec whose result says "receipt": null comes without one; not complete. */
static void test_query_finished_without_receipt(void **state)
{
	struct agent_expect want = want_default();
	struct agent_reply out = { 0 };
	struct sb_err err = { 0 };
	struct msg m;

	(void)state;
	msg_init(&m);
	result_fill(&m, EXEC_ID, GEN, EXEC_ID, GEN, false);
	as_query_reply(&m, EXEC_ID, SANDBOX__QUERY_REPLY__STATE__FINISHED, true, false);
	assert_int_equal(agent_query_accept(&want, &m.env, &out, &err), 0);
	assert_int_equal(out.state, AGENT_EXEC_FINISHED);
	assert_non_null(out.result_json);
	assert_null(out.receipt);
	assert_false(out.receipt_verified);
	agent_reply_free(&out);
	msg_free(&m);
}

static void query_refused(struct msg *m, int errnum, const char *msg_part)
{
	struct agent_expect want = want_default();
	struct agent_reply out = { 0 };
	struct sb_err err = { 0 };

	assert_int_equal(agent_query_accept(&want, &m->env, &out, &err), -1);
	assert_int_equal(err.errnum, errnum);
	if (msg_part != NULL)
		assert_non_null(strstr(err.msg, msg_part));
	assert_int_equal(out.agent_error, 0);
	assert_nothing_delivered(&out);
	agent_reply_free(&out);
}

static void test_query_finished_other_exec_refused(void **state)
{
	struct msg m;

	(void)state;
	msg_init(&m);
	receipt_fill(&m, EXEC_ID, GEN, EXEC_ID, GEN, nonce, key);
	as_query_reply(&m, EXEC_ID, SANDBOX__QUERY_REPLY__STATE__FINISHED, true, true);
	/* The reply is for e1, the Result inside for e2. */
	result_fill(&m, "e2", GEN, EXEC_ID, GEN, true);
	query_refused(&m, EPROTO, "result refused: it is for exec 'e2', not 'e1'");
	result_fill(&m, EXEC_ID, GEN, "e2", GEN, true);
	query_refused(&m, EPROTO, "names another exec");
	/* The reply itself is for another exec. */
	result_fill(&m, EXEC_ID, GEN, EXEC_ID, GEN, true);
	as_query_reply(&m, "e2", SANDBOX__QUERY_REPLY__STATE__FINISHED, true, true);
	query_refused(&m, EPROTO, "query reply refused: it is for exec 'e2', not 'e1'");
	/* A good Result with a Receipt for another exec: the result is dropped too. */
	as_query_reply(&m, EXEC_ID, SANDBOX__QUERY_REPLY__STATE__FINISHED, true, true);
	receipt_fill(&m, "e2", GEN, EXEC_ID, GEN, nonce, key);
	query_refused(&m, EPROTO, "receipt refused: it is for exec 'e2'");
	receipt_fill(&m, EXEC_ID, GEN, "e2", GEN, nonce, key);
	query_refused(&m, EPERM, "not 'e1'");
	msg_free(&m);
}

static void test_query_finished_other_generation_refused(void **state)
{
	struct msg m;

	(void)state;
	msg_init(&m);
	receipt_fill(&m, EXEC_ID, GEN, EXEC_ID, GEN, nonce, key);
	as_query_reply(&m, EXEC_ID, SANDBOX__QUERY_REPLY__STATE__FINISHED, true, true);
	result_fill(&m, EXEC_ID, GEN - 1, EXEC_ID, GEN, true);
	query_refused(&m, EPROTO, "from generation 6, not 7");
	result_fill(&m, EXEC_ID, GEN, EXEC_ID, GEN - 1, true);
	query_refused(&m, EPROTO, "names another generation");
	result_fill(&m, EXEC_ID, GEN, EXEC_ID, GEN, true);
	receipt_fill(&m, EXEC_ID, GEN - 1, EXEC_ID, GEN, nonce, key);
	query_refused(&m, EPROTO, "receipt refused: it is from generation 6, not 7");
	receipt_fill(&m, EXEC_ID, GEN, EXEC_ID, GEN - 1, nonce, key);
	query_refused(&m, EPERM, "from generation 6, not 7");
	/* And the receipt's nonce and HMAC are checked as for an exec. */
	receipt_fill(&m, EXEC_ID, GEN, EXEC_ID, GEN, other_nonce, key);
	query_refused(&m, EPERM, "another nonce");
	receipt_fill(&m, EXEC_ID, GEN, EXEC_ID, GEN, nonce, other_key);
	query_refused(&m, EPERM, "HMAC does not verify");
	msg_free(&m);
}

static void test_query_finished_without_result_refused(void **state)
{
	struct msg m;

	(void)state;
	msg_init(&m);
	as_query_reply(&m, EXEC_ID, SANDBOX__QUERY_REPLY__STATE__FINISHED, false, false);
	query_refused(&m, EPROTO, "finished but no result");
}

static void test_query_unknown_and_running(void **state)
{
	struct agent_expect want = want_default();
	struct agent_reply out = { 0 };
	struct sb_err err = { 0 };
	struct msg m;

	(void)state;
	msg_init(&m);
	as_query_reply(&m, EXEC_ID, SANDBOX__QUERY_REPLY__STATE__UNKNOWN, false, false);
	out.state = AGENT_EXEC_FINISHED;
	assert_int_equal(agent_query_accept(&want, &m.env, &out, &err), 0);
	assert_int_equal(out.state, AGENT_EXEC_UNKNOWN);
	assert_int_equal(out.agent_error, 0);
	assert_nothing_delivered(&out);

	as_query_reply(&m, EXEC_ID, SANDBOX__QUERY_REPLY__STATE__RUNNING, false, false);
	assert_int_equal(agent_query_accept(&want, &m.env, &out, &err), 0);
	assert_int_equal(out.state, AGENT_EXEC_RUNNING);
	assert_nothing_delivered(&out);

	/* A result attached to a running exec is not an outcome: not delivered. */
	result_fill(&m, EXEC_ID, GEN, EXEC_ID, GEN, true);
	receipt_fill(&m, EXEC_ID, GEN, EXEC_ID, GEN, nonce, key);
	as_query_reply(&m, EXEC_ID, SANDBOX__QUERY_REPLY__STATE__RUNNING, true, true);
	assert_int_equal(agent_query_accept(&want, &m.env, &out, &err), 0);
	assert_int_equal(out.state, AGENT_EXEC_RUNNING);
	assert_nothing_delivered(&out);

	/* A state this version does not know. */
	as_query_reply(&m, EXEC_ID, (Sandbox__QueryReply__State)9, false, false);
	query_refused(&m, EPROTO, "unknown exec state 9");
	msg_free(&m);
}

static void test_query_error_and_unexpected(void **state)
{
	struct agent_expect want = want_default();
	struct agent_reply out = { 0 };
	struct sb_err err = { 0 };
	struct msg m;

	(void)state;
	msg_init(&m);
	as_error(&m, SANDBOX__ERROR_CODE__ERR_UNKNOWN_EXEC, "no such exec");
	assert_int_equal(agent_query_accept(&want, &m.env, &out, &err), -1);
	assert_int_equal(out.agent_error, SANDBOX__ERROR_CODE__ERR_UNKNOWN_EXEC);
	assert_int_equal(err.errnum, ENOENT);
	assert_nothing_delivered(&out);

	msg_init(&m);
	result_fill(&m, EXEC_ID, GEN, EXEC_ID, GEN, false);
	as_result(&m);
	query_refused(&m, EPROTO, "sent a result message while we waited for a query reply");
	msg_free(&m);
}

/* ---------- agent_hello_accept ---------- */

static void test_hello_compatible_accepted(void **state)
{
	struct agent_peer peer;
	char *features = (char *)"stale";
	struct sb_err err = { 0 };
	struct msg m;

	(void)state;
	msg_init(&m);
	m.hello.min_version = SB_PROTO_VERSION_MIN;
	m.hello.max_version = SB_PROTO_VERSION_MAX + 5;  /* a newer agent that still speaks ours */
	m.hello.build = "sandbox-agent 0.1.0 (abc)\n\x7f";
	m.hello.features_json = "{\"seccomp\":true}";
	m.hello.has_generation = 1;
	m.hello.generation = GEN;
	m.env.body_case = SANDBOX__ENVELOPE__BODY_HELLO;
	m.env.hello = &m.hello;
	assert_int_equal(agent_hello_accept(&m.env, &peer, &features, &err), 0);
	assert_int_equal(peer.version, SB_PROTO_VERSION_MAX);
	assert_true(peer.has_generation);
	assert_int_equal(peer.generation, GEN);
	assert_string_equal(peer.build, "sandbox-agent 0.1.0 (abc)??");
	assert_non_null(features);
	assert_string_equal(features, "{\"seccomp\":true}");
	assert_ptr_equal(peer.features_json, features);
	assert_ptr_not_equal(features, m.hello.features_json);
	free(features);

	/* A minimal Hello: no build, no features, no generation. */
	m.hello.min_version = m.hello.max_version = SB_PROTO_VERSION_MAX;
	m.hello.build = NULL;
	m.hello.features_json = NULL;
	m.hello.has_generation = 0;
	m.hello.generation = 0;
	assert_int_equal(agent_hello_accept(&m.env, &peer, &features, &err), 0);
	assert_int_equal(peer.version, SB_PROTO_VERSION_MAX);
	assert_false(peer.has_generation);
	assert_string_equal(peer.build, "");
	assert_null(features);
	assert_null(peer.features_json);
}

static void hello_refused(const Sandbox__Envelope *env, int errnum, const char *msg_part)
{
	struct agent_peer peer;
	char *features = (char *)"stale";
	struct sb_err err = { 0 };

	assert_int_equal(agent_hello_accept(env, &peer, &features, &err), -1);
	assert_int_equal(err.errnum, errnum);
	if (msg_part != NULL)
		assert_non_null(strstr(err.msg, msg_part));
	assert_null(features);
	assert_int_equal(peer.version, 0);
	assert_null(peer.features_json);
}

static void test_hello_incompatible_refused(void **state)
{
	struct msg m;

	(void)state;
	msg_init(&m);
	m.hello.features_json = "{}";
	m.env.body_case = SANDBOX__ENVELOPE__BODY_HELLO;
	m.env.hello = &m.hello;
	/* Only newer versions than ours. */
	m.hello.min_version = SB_PROTO_VERSION_MAX + 1;
	m.hello.max_version = SB_PROTO_VERSION_MAX + 3;
	hello_refused(&m.env, EPROTONOSUPPORT, "protocol version refused");
	/* Only older ones (version 0 is below every MIN). */
	m.hello.min_version = 0;
	m.hello.max_version = SB_PROTO_VERSION_MIN - 1;
	hello_refused(&m.env, EPROTONOSUPPORT, "protocol version refused");
	/* An inverted range. */
	m.hello.min_version = SB_PROTO_VERSION_MAX + 1;
	m.hello.max_version = SB_PROTO_VERSION_MIN;
	hello_refused(&m.env, EBADMSG, "malformed hello");
}

static void test_hello_non_hello_refused(void **state)
{
	struct msg m;

	(void)state;
	msg_init(&m);
	as_pong(&m);
	hello_refused(&m.env, EPROTO, "sent a pong message while we waited for the agent's hello");
	msg_init(&m);
	result_fill(&m, EXEC_ID, GEN, EXEC_ID, GEN, false);
	as_result(&m);
	hello_refused(&m.env, EPROTO, "sent a result message");
	msg_free(&m);
	as_error(&m, SANDBOX__ERROR_CODE__ERR_VERSION, "too old");
	hello_refused(&m.env, EPROTONOSUPPORT, "error 'version': too old");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_exec_result_then_receipt_delivered),
		cmocka_unit_test(test_exec_receipt_without_key_unverified),
		cmocka_unit_test(test_exec_result_other_exec_id_envelope_refused),
		cmocka_unit_test(test_exec_result_other_exec_id_in_json_refused),
		cmocka_unit_test(test_exec_result_older_generation_envelope_refused),
		cmocka_unit_test(test_exec_result_older_generation_in_json_refused),
		cmocka_unit_test(test_exec_result_malformed_json_refused),
		cmocka_unit_test(test_exec_receipt_other_exec_id_refused),
		cmocka_unit_test(test_exec_receipt_other_generation_refused),
		cmocka_unit_test(test_exec_receipt_other_nonce_refused),
		cmocka_unit_test(test_exec_receipt_tampered_hmac_refused),
		cmocka_unit_test(test_exec_receipt_without_result_refused),
		cmocka_unit_test(test_exec_second_result_refused),
		cmocka_unit_test(test_exec_unexpected_body_refused),
		cmocka_unit_test(test_exec_result_with_null_receipt),
		cmocka_unit_test(test_exec_error_envelope),
		cmocka_unit_test(test_query_finished_delivered),
		cmocka_unit_test(test_query_finished_without_receipt),
		cmocka_unit_test(test_query_finished_other_exec_refused),
		cmocka_unit_test(test_query_finished_other_generation_refused),
		cmocka_unit_test(test_query_finished_without_result_refused),
		cmocka_unit_test(test_query_unknown_and_running),
		cmocka_unit_test(test_query_error_and_unexpected),
		cmocka_unit_test(test_hello_compatible_accepted),
		cmocka_unit_test(test_hello_incompatible_refused),
		cmocka_unit_test(test_hello_non_hello_refused),
	};
	return cmocka_run_group_tests_name("agent_client", tests, NULL, NULL);
}
