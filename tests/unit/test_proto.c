/* Unit tests for common/proto.c: every Envelope body survives a round trip; garbage, truncated
 * and incomplete protobuf is refused with a clear error; version negotiation. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>
#include <errno.h>

#include "proto.h"
#include "testutil.h"

/* Appends one raw frame, bypassing proto_send, to feed the decoder hostile bytes. */
static void put_frame(struct memstream *m, const void *buf, size_t len)
{
	frame_encode_header(m->data + m->len, (uint32_t)len);
	memcpy(m->data + m->len + 4, buf, len);
	m->len += 4 + len;
}

/* ---------- one example of every body ---------- */

static uint8_t nonce_bytes[32];
static uint8_t receipt_bytes[] = { '{', '"', 'n', '"', ':', 0, 1, 2, '}' };  /* NULs survive */

struct samples {
	Sandbox__Hello hello;
	Sandbox__EnvVar env_a, env_b;
	Sandbox__EnvVar *env[2];
	Sandbox__Exec exec;
	Sandbox__Result result;
	Sandbox__Receipt receipt;
	Sandbox__Cancel cancel;
	Sandbox__Query query;
	Sandbox__QueryReply reply;
	Sandbox__Error error;
	Sandbox__Ping ping;
	Sandbox__Pong pong;
};

static void samples_init(struct samples *x)
{
	for (size_t i = 0; i < sizeof nonce_bytes; i++)
		nonce_bytes[i] = (uint8_t)(i * 7 + 1);
	proto_hello_init(&x->hello);
	x->hello.build = "sandbox-agent test";
	x->hello.features_json = "{\"landlock_abi\": 6}";
	x->hello.has_generation = 1;
	x->hello.generation = 42;

	sandbox__env_var__init(&x->env_a);
	x->env_a.name = "LANG";
	x->env_a.value = "C.UTF-8";
	sandbox__env_var__init(&x->env_b);
	x->env_b.name = "EMPTY";
	x->env_b.value = "";
	x->env[0] = &x->env_a;
	x->env[1] = &x->env_b;
	sandbox__exec__init(&x->exec);
	x->exec.exec_id = "exec-1";
	x->exec.generation = 42;
	x->exec.nonce.data = nonce_bytes;
	x->exec.nonce.len = sizeof nonce_bytes;
	x->exec.command = "echo 'hi' | tr a-z A-Z";
	x->exec.cwd = "/volume/identities/a/workspaces/s1";
	x->exec.timeout_seconds = 30;
	x->exec.output_limit = 1 << 20;
	x->exec.n_env = 2;
	x->exec.env = x->env;

	sandbox__result__init(&x->result);
	x->result.exec_id = "exec-1";
	x->result.generation = 42;
	x->result.result_json = "{\"status\": \"exited\", \"exit_code\": 0}";
	sandbox__receipt__init(&x->receipt);
	x->receipt.exec_id = "exec-1";
	x->receipt.generation = 42;
	x->receipt.receipt_json.data = receipt_bytes;
	x->receipt.receipt_json.len = sizeof receipt_bytes;
	sandbox__cancel__init(&x->cancel);
	x->cancel.exec_id = "exec-1";
	sandbox__query__init(&x->query);
	x->query.exec_id = "exec-1";
	sandbox__query_reply__init(&x->reply);
	x->reply.exec_id = "exec-1";
	x->reply.state = SANDBOX__QUERY_REPLY__STATE__FINISHED;
	x->reply.result = &x->result;
	x->reply.receipt = &x->receipt;
	sandbox__error__init(&x->error);
	x->error.code = SANDBOX__ERROR_CODE__ERR_BUSY;
	x->error.message = "an exec is already running";
	sandbox__ping__init(&x->ping);
	x->ping.token = UINT64_MAX;
	sandbox__pong__init(&x->pong);
	x->pong.token = 0;
}

/* The envelope for body case `body`, pointing into x. */
static void sample_envelope(struct samples *x, Sandbox__Envelope__BodyCase body, Sandbox__Envelope *env)
{
	sandbox__envelope__init(env);
	env->body_case = body;
	switch (body) {
	case SANDBOX__ENVELOPE__BODY_HELLO: env->hello = &x->hello; break;
	case SANDBOX__ENVELOPE__BODY_EXEC: env->exec = &x->exec; break;
	case SANDBOX__ENVELOPE__BODY_RESULT: env->result = &x->result; break;
	case SANDBOX__ENVELOPE__BODY_RECEIPT: env->receipt = &x->receipt; break;
	case SANDBOX__ENVELOPE__BODY_CANCEL: env->cancel = &x->cancel; break;
	case SANDBOX__ENVELOPE__BODY_QUERY: env->query = &x->query; break;
	case SANDBOX__ENVELOPE__BODY_QUERY_REPLY: env->query_reply = &x->reply; break;
	case SANDBOX__ENVELOPE__BODY_ERROR: env->error = &x->error; break;
	case SANDBOX__ENVELOPE__BODY_PING: env->ping = &x->ping; break;
	case SANDBOX__ENVELOPE__BODY_PONG: env->pong = &x->pong; break;
	default: fail_msg("no sample for body %d", body);
	}
}

/* Spot checks that the decoded fields are the sent ones (the byte comparison covers the rest). */
static void check_fields(const Sandbox__Envelope *got)
{
	switch (got->body_case) {
	case SANDBOX__ENVELOPE__BODY_HELLO:
		assert_int_equal(got->hello->min_version, SB_PROTO_VERSION_MIN);
		assert_true(got->hello->has_generation);
		assert_int_equal(got->hello->generation, 42);
		break;
	case SANDBOX__ENVELOPE__BODY_EXEC:
		assert_string_equal(got->exec->command, "echo 'hi' | tr a-z A-Z");
		assert_int_equal(got->exec->nonce.len, 32);
		assert_memory_equal(got->exec->nonce.data, nonce_bytes, 32);
		assert_int_equal(got->exec->n_env, 2);
		assert_string_equal(got->exec->env[1]->name, "EMPTY");
		break;
	case SANDBOX__ENVELOPE__BODY_RECEIPT:
		assert_int_equal(got->receipt->receipt_json.len, sizeof receipt_bytes);
		assert_memory_equal(got->receipt->receipt_json.data, receipt_bytes, sizeof receipt_bytes);
		break;
	case SANDBOX__ENVELOPE__BODY_QUERY_REPLY:
		assert_int_equal(got->query_reply->state, SANDBOX__QUERY_REPLY__STATE__FINISHED);
		assert_non_null(got->query_reply->result);
		assert_non_null(got->query_reply->receipt);
		break;
	case SANDBOX__ENVELOPE__BODY_PING:
		assert_true(got->ping->token == UINT64_MAX);
		break;
	default:
		break;
	}
}

static void test_round_trip_every_body(void **state)
{
	static struct memstream m;
	static struct samples x;
	struct sb_stream s;
	struct sb_err err;
	int body;

	(void)state;
	samples_init(&x);
	for (body = SANDBOX__ENVELOPE__BODY_HELLO; body <= SANDBOX__ENVELOPE__BODY_PONG; body++) {
		Sandbox__Envelope sent, *got = NULL;
		uint8_t a[4096], b[4096];
		size_t alen, blen;

		stream_init(&s, &m);
		sample_envelope(&x, (Sandbox__Envelope__BodyCase)body, &sent);
		assert_int_equal(proto_send(&s, &sent, SB_FRAME_CAP_DEFAULT, &err), 0);
		assert_int_equal(proto_recv(&s, SB_FRAME_CAP_DEFAULT, &got, &err), 1);
		assert_non_null(got);
		assert_int_equal(got->body_case, body);
		assert_string_not_equal(proto_body_name(got->body_case), "unknown");
		check_fields(got);
		/* protobuf-c encodes deterministically: the same bytes mean the same message. */
		alen = protobuf_c_message_get_packed_size(&sent.base);
		blen = protobuf_c_message_get_packed_size(&got->base);
		assert_int_equal(alen, blen);
		assert_true(alen <= sizeof a);
		protobuf_c_message_pack(&sent.base, a);
		protobuf_c_message_pack(&got->base, b);
		assert_memory_equal(a, b, alen);
		proto_free(got);
		/* And the stream then ends cleanly. */
		assert_int_equal(proto_recv(&s, SB_FRAME_CAP_DEFAULT, &got, &err), 0);
		assert_null(got);
	}
}

static void test_garbage_refused_stream_stays_in_sync(void **state)
{
	static struct memstream m;
	static struct samples x;
	static const uint8_t garbage[] = { 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01 };
	Sandbox__Envelope ping, *got = NULL;
	struct sb_stream s;
	struct sb_err err;

	(void)state;
	samples_init(&x);
	stream_init(&s, &m);
	put_frame(&m, garbage, sizeof garbage);
	sample_envelope(&x, SANDBOX__ENVELOPE__BODY_PING, &ping);
	assert_int_equal(proto_send(&s, &ping, 1024, &err), 0);

	assert_int_equal(proto_recv(&s, 1024, &got, &err), -1);
	assert_null(got);
	assert_int_equal(err.errnum, EBADMSG);
	assert_non_null(strstr(err.msg, "malformed message"));
	/* The bad frame was consumed whole: the next message still decodes. */
	assert_int_equal(proto_recv(&s, 1024, &got, &err), 1);
	assert_int_equal(got->body_case, SANDBOX__ENVELOPE__BODY_PING);
	proto_free(got);
}

static void test_truncated_protobuf_refused(void **state)
{
	static struct memstream m;
	static struct samples x;
	Sandbox__Envelope exec, *got = NULL;
	uint8_t buf[4096];
	struct sb_stream s;
	struct sb_err err;
	size_t len;

	(void)state;
	samples_init(&x);
	sample_envelope(&x, SANDBOX__ENVELOPE__BODY_EXEC, &exec);
	len = protobuf_c_message_get_packed_size(&exec.base);
	protobuf_c_message_pack(&exec.base, buf);
	/* Every proper prefix is refused: the nested lengths point past the end, or fields are missing. */
	for (size_t cut = 1; cut < len; cut++) {
		stream_init(&s, &m);
		put_frame(&m, buf, cut);
		assert_int_equal(proto_recv(&s, 4096, &got, &err), -1);
		assert_null(got);
		assert_int_equal(err.errnum, EBADMSG);
	}
}

static void test_incomplete_or_empty_envelope_refused(void **state)
{
	static struct memstream m;
	/* field 5 (cancel), length 0: a Cancel without its required exec_id */
	static const uint8_t missing_required[] = { 0x2a, 0x00 };
	/* field 15, length 0: a body a future version might send */
	static const uint8_t unknown_body[] = { 0x7a, 0x00 };
	Sandbox__Envelope *got = NULL;
	struct sb_stream s;
	struct sb_err err;

	(void)state;
	stream_init(&s, &m);
	put_frame(&m, missing_required, sizeof missing_required);
	put_frame(&m, unknown_body, sizeof unknown_body);
	put_frame(&m, "", 0);
	assert_int_equal(proto_recv(&s, 1024, &got, &err), -1);
	assert_non_null(strstr(err.msg, "required field missing"));
	assert_int_equal(proto_recv(&s, 1024, &got, &err), -1);
	assert_non_null(strstr(err.msg, "no message this protocol version knows"));
	assert_int_equal(proto_recv(&s, 1024, &got, &err), -1);
	assert_int_equal(err.errnum, EBADMSG);
	assert_null(got);
}

static void test_oversized_refused(void **state)
{
	static struct memstream m;
	static struct samples x;
	Sandbox__Envelope exec, *got = NULL;
	struct sb_stream s;
	struct sb_err err;

	(void)state;
	samples_init(&x);
	stream_init(&s, &m);
	sample_envelope(&x, SANDBOX__ENVELOPE__BODY_EXEC, &exec);
	/* Sending over the cap writes nothing. */
	assert_int_equal(proto_send(&s, &exec, 16, &err), -1);
	assert_int_equal(err.errnum, EMSGSIZE);
	assert_int_equal(m.len, 0);
	/* Receiving: the announced length is refused before the body is read. */
	assert_int_equal(proto_send(&s, &exec, 4096, &err), 0);
	assert_int_equal(proto_recv(&s, 16, &got, &err), -1);
	assert_int_equal(err.errnum, EMSGSIZE);
	assert_int_equal(m.pos, 4);
	assert_null(got);
}

static void test_send_refuses_incomplete(void **state)
{
	static struct memstream m;
	Sandbox__Envelope env;
	Sandbox__Cancel cancel;
	struct sb_stream s;
	struct sb_err err;

	(void)state;
	stream_init(&s, &m);
	sandbox__envelope__init(&env);
	assert_int_equal(proto_send(&s, &env, 1024, &err), -1);
	assert_non_null(strstr(err.msg, "without a known message"));

	sandbox__cancel__init(&cancel);  /* exec_id left NULL */
	env.body_case = SANDBOX__ENVELOPE__BODY_CANCEL;
	env.cancel = &cancel;
	assert_int_equal(proto_send(&s, &env, 1024, &err), -1);
	assert_non_null(strstr(err.msg, "cancel message with a required field missing"));
	assert_int_equal(m.len, 0);
}

static void test_write_error_reported(void **state)
{
	static struct memstream m;
	static struct samples x;
	Sandbox__Envelope exec;
	struct sb_stream s;
	struct sb_err err;

	(void)state;
	samples_init(&x);
	stream_init(&s, &m);
	m.len = sizeof m.data - 8;  /* nearly full: the write fails with ENOSPC */
	sample_envelope(&x, SANDBOX__ENVELOPE__BODY_EXEC, &exec);
	assert_int_equal(proto_send(&s, &exec, 4096, &err), -1);
	assert_int_equal(err.errnum, ENOSPC);
	assert_non_null(strstr(err.msg, "sending exec message"));
}

/* A Result and its Receipt sent together: one write carries both frames, read back in order; one
 * envelope over the cap, or a count out of range, writes nothing at all. */
static void test_send_many_one_write(void **state)
{
	static struct memstream m;
	static struct samples x;
	Sandbox__Envelope result, receipt, *got = NULL;
	const Sandbox__Envelope *both[2] = { &result, &receipt };
	struct sb_stream s;
	struct sb_err err;
	size_t big;

	(void)state;
	samples_init(&x);
	stream_init(&s, &m);
	sample_envelope(&x, SANDBOX__ENVELOPE__BODY_RESULT, &result);
	sample_envelope(&x, SANDBOX__ENVELOPE__BODY_RECEIPT, &receipt);
	assert_int_equal(proto_send_many(&s, both, 2, SB_FRAME_CAP_DEFAULT, &err), 0);
	assert_int_equal(m.write_calls, 1);
	assert_int_equal(proto_recv(&s, SB_FRAME_CAP_DEFAULT, &got, &err), 1);
	assert_int_equal(got->body_case, SANDBOX__ENVELOPE__BODY_RESULT);
	check_fields(got);
	proto_free(got);
	assert_int_equal(proto_recv(&s, SB_FRAME_CAP_DEFAULT, &got, &err), 1);
	assert_int_equal(got->body_case, SANDBOX__ENVELOPE__BODY_RECEIPT);
	check_fields(got);
	proto_free(got);
	assert_int_equal(proto_recv(&s, SB_FRAME_CAP_DEFAULT, &got, &err), 0);

	/* The second over the cap the first fits: refused whole, nothing written. */
	stream_init(&s, &m);
	big = protobuf_c_message_get_packed_size(&result.base);
	assert_true(protobuf_c_message_get_packed_size(&receipt.base) < big);
	both[0] = &receipt;
	both[1] = &result;
	assert_int_equal(proto_send_many(&s, both, 2, big - 1, &err), -1);
	assert_int_equal(err.errnum, EMSGSIZE);
	assert_int_equal(m.len, 0);
	assert_int_equal(proto_send_many(&s, both, 0, SB_FRAME_CAP_DEFAULT, &err), -1);
	assert_int_equal(proto_send_many(&s, both, PROTO_SEND_MAX + 1, SB_FRAME_CAP_DEFAULT, &err), -1);
	assert_int_equal(m.len, 0);
	assert_int_equal(m.write_calls, 0);
}

static void hello_range(Sandbox__Hello *h, uint32_t min, uint32_t max)
{
	sandbox__hello__init(h);
	h->min_version = min;
	h->max_version = max;
}

static void test_negotiate(void **state)
{
	Sandbox__Hello h;
	struct sb_err err;
	uint32_t v = 99;

	(void)state;
	/* Our own hello against ourselves. */
	proto_hello_init(&h);
	assert_int_equal(h.min_version, SB_PROTO_VERSION_MIN);
	assert_int_equal(h.max_version, SB_PROTO_VERSION_MAX);
	assert_int_equal(proto_negotiate(&h, &v, &err), 0);
	assert_int_equal(v, SB_PROTO_VERSION_MAX);

	/* Overlap: the highest common version wins. */
	hello_range(&h, 1, 7);
	assert_int_equal(proto_negotiate(&h, &v, &err), 0);
	assert_int_equal(v, 1);
	hello_range(&h, 2, 5);
	assert_int_equal(proto_negotiate_range(1, 3, &h, &v, &err), 0);
	assert_int_equal(v, 3);
	assert_int_equal(proto_negotiate_range(4, 9, &h, &v, &err), 0);
	assert_int_equal(v, 5);

	/* Disjoint: refused, naming both ranges. */
	hello_range(&h, 2, 3);
	assert_int_equal(proto_negotiate(&h, &v, &err), -1);
	assert_int_equal(v, 0);
	assert_int_equal(err.errnum, EPROTONOSUPPORT);
	assert_non_null(strstr(err.msg, "protocol version refused"));
	assert_non_null(strstr(err.msg, "peer speaks versions 2 to 3"));
	assert_non_null(strstr(err.msg, "this side speaks 1 to 1"));
	hello_range(&h, 1, 2);
	assert_int_equal(proto_negotiate_range(3, 4, &h, &v, &err), -1);
	hello_range(&h, 0, 0);
	assert_int_equal(proto_negotiate(&h, &v, &err), -1);

	/* Nonsense range. */
	hello_range(&h, 3, 1);
	assert_int_equal(proto_negotiate(&h, &v, &err), -1);
	assert_int_equal(err.errnum, EBADMSG);
	assert_non_null(strstr(err.msg, "min_version 3 is above max_version 1"));
}

static void test_body_names(void **state)
{
	(void)state;
	assert_string_equal(proto_body_name(SANDBOX__ENVELOPE__BODY__NOT_SET), "none");
	assert_string_equal(proto_body_name(SANDBOX__ENVELOPE__BODY_QUERY_REPLY), "query_reply");
	assert_string_equal(proto_body_name((Sandbox__Envelope__BodyCase)99), "unknown");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_round_trip_every_body),
		cmocka_unit_test(test_garbage_refused_stream_stays_in_sync),
		cmocka_unit_test(test_truncated_protobuf_refused),
		cmocka_unit_test(test_incomplete_or_empty_envelope_refused),
		cmocka_unit_test(test_oversized_refused),
		cmocka_unit_test(test_send_refuses_incomplete),
		cmocka_unit_test(test_write_error_reported),
		cmocka_unit_test(test_send_many_one_write),
		cmocka_unit_test(test_negotiate),
		cmocka_unit_test(test_body_names),
	};
	return cmocka_run_group_tests_name("proto", tests, NULL, NULL);
}
