/* Writes the seed corpora of the fuzz targets into tests/fuzz/corpus/<target>/: valid envelopes of
 * every type (raw and framed), request and reply sequences, and a signed receipt. Not a fuzz target
 * (the Makefile builds only fuzz_*.c); rebuild the committed seeds after a protocol change with:
 *   cc -std=gnu11 -D_GNU_SOURCE -Icommon -Ibuild/gen -Imanager -o /tmp/make_seeds tests/fuzz/make_seeds.c \
 *      build/libcommon.a -lmbedtls -lmbedx509 -lmbedcrypto -lprotobuf-c -ljansson && /tmp/make_seeds tests/fuzz/corpus
 * Writes only under the directory it is given. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "frame.h"
#include "proto.h"
#include "receipt_mac.h"

static const uint8_t fuzz_key[RECEIPT_KEY_BYTES] = "infra-sandbox fuzzing key 32 by";
#define FUZZ_NONCE "00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff"

static const char *root;

struct buf {
	uint8_t data[65536];
	size_t len;
};

static void die(const char *what)
{
	fprintf(stderr, "make_seeds: %s: %s\n", what, strerror(errno));
	exit(1);
}

static void put(const char *target, const char *name, const struct buf *b)
{
	char path[512];
	FILE *f;

	snprintf(path, sizeof path, "%s/%s", root, target);
	if (mkdir(path, 0755) < 0 && errno != EEXIST)
		die(path);
	snprintf(path, sizeof path, "%s/%s/%s", root, target, name);
	f = fopen(path, "wb");
	if (f == NULL || fwrite(b->data, 1, b->len, f) != b->len || fclose(f) != 0)
		die(path);
}

static void raw(struct buf *b, const Sandbox__Envelope *env)
{
	b->len = protobuf_c_message_pack(&env->base, b->data);
}

static void framed(struct buf *b, const Sandbox__Envelope *env)
{
	size_t n = protobuf_c_message_get_packed_size(&env->base);

	frame_encode_header(b->data + b->len, (uint32_t)n);
	protobuf_c_message_pack(&env->base, b->data + b->len + 4);
	b->len += 4 + n;
}

static char *receipt_text(const char *exec_id)
{
	struct sb_err err;
	json_t *obj = json_pack("{s:i, s:s, s:i, s:s, s:s, s:i, s:n}", "version", 1, "exec_id", exec_id, "generation", 1,
				"nonce", FUZZ_NONCE, "status", "exited", "exit_code", 0, "signal");
	char *text;

	if (obj == NULL || receipt_mac_sign(obj, fuzz_key, &err) < 0)
		die("signing the seed receipt");
	text = json_dumps(obj, JSON_COMPACT | JSON_SORT_KEYS | JSON_ENSURE_ASCII);
	json_decref(obj);
	return text;
}

/* Every message type, filled with plausible values. */
struct all {
	Sandbox__Envelope hello, exec, result, receipt, cancel, query, query_reply, error, ping, pong;
	Sandbox__Hello h;
	Sandbox__Exec e;
	Sandbox__EnvVar v, *vp;
	Sandbox__Result r;
	Sandbox__Receipt rc;
	Sandbox__Cancel c;
	Sandbox__Query q;
	Sandbox__QueryReply qr;
	Sandbox__Error err;
	Sandbox__Ping pi;
	Sandbox__Pong po;
	uint8_t nonce[32];
};

static void all_init(struct all *a, char *receipt)
{
	static char result[] = "{\"exec_id\":\"fuzz-1\",\"generation\":1,\"status\":\"exited\",\"exit_code\":0,"
			       "\"signal\":null,\"stdout\":\"hi\\n\",\"stderr\":\"\",\"receipt\":{\"verified\":true}}";

	memset(a, 0, sizeof *a);
	for (int i = 0; i < 32; i++)
		a->nonce[i] = (uint8_t)((i % 16) * 0x11);
	proto_hello_init(&a->h);
	a->h.build = "sandbox-agent 0.1.0";
	a->h.features_json = "{\"ok\":true}";
	a->h.has_generation = 1;
	a->h.generation = 1;
	sandbox__env_var__init(&a->v);
	a->v.name = "LANG";
	a->v.value = "C.UTF-8";
	a->vp = &a->v;
	sandbox__exec__init(&a->e);
	a->e.exec_id = "fuzz-1";
	a->e.generation = 1;
	a->e.nonce.data = a->nonce;
	a->e.nonce.len = 32;
	a->e.command = "echo hi";
	a->e.cwd = "/tmp";
	a->e.timeout_seconds = 10;
	a->e.output_limit = 65536;
	a->e.n_env = 1;
	a->e.env = &a->vp;
	sandbox__result__init(&a->r);
	a->r.exec_id = "fuzz-1";
	a->r.generation = 1;
	a->r.result_json = result;
	sandbox__receipt__init(&a->rc);
	a->rc.exec_id = "fuzz-1";
	a->rc.generation = 1;
	a->rc.receipt_json.data = (uint8_t *)receipt;
	a->rc.receipt_json.len = strlen(receipt);
	sandbox__cancel__init(&a->c);
	a->c.exec_id = "run-1";
	sandbox__query__init(&a->q);
	a->q.exec_id = "done-1";
	sandbox__query_reply__init(&a->qr);
	a->qr.exec_id = "fuzz-1";
	a->qr.state = SANDBOX__QUERY_REPLY__STATE__FINISHED;
	a->qr.result = &a->r;
	a->qr.receipt = &a->rc;
	sandbox__error__init(&a->err);
	a->err.code = SANDBOX__ERROR_CODE__ERR_BUSY;
	a->err.message = "busy: exec 'x' is running; one exec at a time";
	sandbox__ping__init(&a->pi);
	a->pi.token = 42;
	sandbox__pong__init(&a->po);
	a->po.token = 42;
	sandbox__envelope__init(&a->hello);
	a->hello.body_case = SANDBOX__ENVELOPE__BODY_HELLO;
	a->hello.hello = &a->h;
	sandbox__envelope__init(&a->exec);
	a->exec.body_case = SANDBOX__ENVELOPE__BODY_EXEC;
	a->exec.exec = &a->e;
	sandbox__envelope__init(&a->result);
	a->result.body_case = SANDBOX__ENVELOPE__BODY_RESULT;
	a->result.result = &a->r;
	sandbox__envelope__init(&a->receipt);
	a->receipt.body_case = SANDBOX__ENVELOPE__BODY_RECEIPT;
	a->receipt.receipt = &a->rc;
	sandbox__envelope__init(&a->cancel);
	a->cancel.body_case = SANDBOX__ENVELOPE__BODY_CANCEL;
	a->cancel.cancel = &a->c;
	sandbox__envelope__init(&a->query);
	a->query.body_case = SANDBOX__ENVELOPE__BODY_QUERY;
	a->query.query = &a->q;
	sandbox__envelope__init(&a->query_reply);
	a->query_reply.body_case = SANDBOX__ENVELOPE__BODY_QUERY_REPLY;
	a->query_reply.query_reply = &a->qr;
	sandbox__envelope__init(&a->error);
	a->error.body_case = SANDBOX__ENVELOPE__BODY_ERROR;
	a->error.error = &a->err;
	sandbox__envelope__init(&a->ping);
	a->ping.body_case = SANDBOX__ENVELOPE__BODY_PING;
	a->ping.ping = &a->pi;
	sandbox__envelope__init(&a->pong);
	a->pong.body_case = SANDBOX__ENVELOPE__BODY_PONG;
	a->pong.pong = &a->po;
}

/* fuzz_proto: each message alone; fuzz_frame: each framed, behind the short-read byte. */
static void seeds_single(struct all *a)
{
	const struct { const char *name; const Sandbox__Envelope *env; } each[] = {
		{ "hello", &a->hello }, { "exec", &a->exec }, { "result", &a->result }, { "receipt", &a->receipt },
		{ "cancel", &a->cancel }, { "query", &a->query }, { "query_reply", &a->query_reply },
		{ "error", &a->error }, { "ping", &a->ping }, { "pong", &a->pong },
	};
	static struct buf b;

	for (size_t i = 0; i < sizeof each / sizeof each[0]; i++) {
		raw(&b, each[i].env);
		put("fuzz_proto", each[i].name, &b);
		b.data[0] = (uint8_t)i;
		b.len = 1;
		framed(&b, each[i].env);
		framed(&b, &a->ping);
		put("fuzz_frame", each[i].name, &b);
	}
	b.len = 5;
	memcpy(b.data, "\x03\x02\x00\x00\x00", 5);  /* announces 32 MiB */
	put("fuzz_frame", "oversized", &b);
}

/* fuzz_handlers: what a manager sends; fuzz_client: what an agent answers. */
static void seeds_sequences(struct all *a)
{
	static const uint8_t garbage[] = { 0, 0, 0, 4, 0x0a, 0xff, 0xff, 0x0f };
	static struct buf b;

	b.len = 0;
	framed(&b, &a->query);
	a->q.exec_id = "run-1";
	framed(&b, &a->query);
	a->q.exec_id = "never";
	framed(&b, &a->query);
	framed(&b, &a->cancel);
	framed(&b, &a->ping);
	framed(&b, &a->exec);
	framed(&b, &a->pong);
	memcpy(b.data + b.len, garbage, sizeof garbage);
	b.len += sizeof garbage;
	framed(&b, &a->hello);
	put("fuzz_handlers", "requests", &b);
	b.len = 0;
	a->e.timeout_seconds = 0;
	framed(&b, &a->exec);
	put("fuzz_handlers", "exec_refused", &b);

	b.len = 0;
	framed(&b, &a->hello);
	framed(&b, &a->result);
	framed(&b, &a->receipt);
	framed(&b, &a->query_reply);
	framed(&b, &a->error);
	framed(&b, &a->pong);
	put("fuzz_client", "replies", &b);
	b.len = 0;
	a->qr.state = SANDBOX__QUERY_REPLY__STATE__RUNNING;
	a->qr.result = NULL;
	a->qr.receipt = NULL;
	framed(&b, &a->query_reply);
	put("fuzz_client", "running", &b);
}

int main(int argc, char **argv)
{
	static struct all a;
	static struct buf b;
	char *receipt;

	if (argc != 2) {
		fprintf(stderr, "usage: make_seeds CORPUS_DIR\n");
		return 2;
	}
	root = argv[1];
	if (mkdir(root, 0755) < 0 && errno != EEXIST)
		die(root);
	receipt = receipt_text("fuzz-1");
	all_init(&a, receipt);
	seeds_single(&a);
	seeds_sequences(&a);
	b.len = strlen(receipt);
	memcpy(b.data, receipt, b.len);
	put("fuzz_receipt", "signed", &b);
	put("fuzz_receipt", "unsigned", &(struct buf){ .data = "{\"exec_id\":\"fuzz-1\",\"generation\":1}", .len = 35 });
	free(receipt);
	return 0;
}
