/* libFuzzer target: the manager's judgement of agent replies (manager/agentlink/agent_reply.c, the pure
 * *_accept steps) on a stream of framed envelopes, as if an agent sent them after a Hello, an Exec
 * and a Query. Checks that nothing is delivered for another exec or generation, and that a
 * delivered receipt verified. Pure: no sockets, no files. */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "agent_client.h"
#include "receipt_mac.h"

#define FUZZ_CAP (64u * 1024u)

static const uint8_t fuzz_key[RECEIPT_KEY_BYTES] = "infra-sandbox fuzzing key 32 by";
static const uint8_t fuzz_nonce[AGENT_NONCE_BYTES] = {
	0x00, 0x11, 0x22, 0x33, 0x44, 0x55, 0x66, 0x77, 0x88, 0x99, 0xaa, 0xbb, 0xcc, 0xdd, 0xee, 0xff,
	0x00, 0x11, 0x22, 0x33, 0x44, 0x55, 0x66, 0x77, 0x88, 0x99, 0xaa, 0xbb, 0xcc, 0xdd, 0xee, 0xff,
};

struct mem {
	const uint8_t *p;
	size_t len, pos;
};

static ssize_t mem_read(void *ctx, void *buf, size_t len)
{
	struct mem *m = ctx;
	size_t n = m->len - m->pos < len ? m->len - m->pos : len;

	memcpy(buf, m->p + m->pos, n);
	m->pos += n;
	return (ssize_t)n;
}

static ssize_t mem_write(void *ctx, const void *buf, size_t len)
{
	(void)ctx;
	(void)buf;
	return (ssize_t)len;
}

/* A delivered result must name our exec and generation; a delivered receipt must verify. */
static void delivered_check(const struct agent_reply *r)
{
	struct sb_err err;
	json_t *obj;

	if (r->result_json != NULL) {
		const char *id;

		obj = json_loads(r->result_json, 0, NULL);
		id = json_string_value(json_object_get(obj, "exec_id"));
		if (id == NULL || strcmp(id, "fuzz-1") != 0 || json_integer_value(json_object_get(obj, "generation")) != 1)
			abort();
		json_decref(obj);
	}
	if (r->receipt != NULL) {
		obj = receipt_mac_verify(r->receipt, r->receipt_len, fuzz_key, NULL, "fuzz-1", 1, &err);
		if (obj == NULL || !r->receipt_verified)
			abort();
		json_decref(obj);
	}
}

static void judge(const Sandbox__Envelope *m, struct agent_exec_wait *w, const struct agent_expect *want)
{
	struct agent_reply exec_reply = { 0 }, query_reply = { 0 };
	struct agent_peer peer;
	struct sb_err err;
	char *features = NULL;
	int rc;

	(void)agent_hello_accept(m, &peer, &features, &err);
	free(features);
	rc = agent_exec_accept(w, want, m, &exec_reply, &err);
	if (rc != 0)
		*w = (struct agent_exec_wait){ 0 };
	if (rc < 0 && (exec_reply.result_json != NULL || exec_reply.receipt != NULL))
		abort();  /* refused means nothing delivered */
	delivered_check(&exec_reply);
	agent_reply_free(&exec_reply);
	rc = agent_query_accept(want, m, &query_reply, &err);
	if (rc < 0 && (query_reply.result_json != NULL || query_reply.receipt != NULL))
		abort();
	delivered_check(&query_reply);
	agent_reply_free(&query_reply);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct agent_expect want = { .exec_id = "fuzz-1", .generation = 1, .nonce = fuzz_nonce,
				     .receipt_key = fuzz_key };
	struct mem m = { .p = data, .len = size };
	struct sb_stream s = { .ctx = &m, .read = mem_read, .write = mem_write };
	struct agent_exec_wait w = { 0 };

	for (int i = 0; i < 64; i++) {
		Sandbox__Envelope *env = NULL;
		struct sb_err err;
		int rc = proto_recv(&s, FUZZ_CAP, &env, &err);

		if (rc == 0 || (rc < 0 && err.errnum != EBADMSG))
			break;
		if (rc < 0)
			continue;
		judge(env, &w, &want);
		proto_free(env);
	}
	return 0;
}
