/* libFuzzer target: proto_decode of arbitrary bytes. What decodes must encode again, and decode
 * again to the same encoding (no field lost or invented on the way). Pure: no I/O at all.
 * Known exception, not ours: protobuf-c 1.4 accepts a non-minimal tag of field number 0 (80 00) as
 * an unknown field, then packs it as 00, which it refuses; so messages that kept unknown fields
 * are exempt from the "decodes again" check (they are ignored by every handler anyway). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "proto.h"

/* Whether msg or any message inside it kept unknown fields. */
static int has_unknown(const ProtobufCMessage *msg)
{
	const ProtobufCMessageDescriptor *d = msg->descriptor;

	if (msg->n_unknown_fields > 0)
		return 1;
	for (unsigned i = 0; i < d->n_fields; i++) {
		const ProtobufCFieldDescriptor *f = &d->fields[i];
		const char *base = (const char *)msg + f->offset;

		if (f->type != PROTOBUF_C_TYPE_MESSAGE)
			continue;
		if (f->label == PROTOBUF_C_LABEL_REPEATED) {
			size_t n = *(const size_t *)((const char *)msg + f->quantifier_offset);
			ProtobufCMessage *const *items = *(ProtobufCMessage *const *const *)base;

			for (size_t j = 0; j < n; j++)
				if (has_unknown(items[j]))
					return 1;
		} else if (*(ProtobufCMessage *const *)base != NULL && has_unknown(*(ProtobufCMessage *const *)base)) {
			return 1;
		}
	}
	return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	Sandbox__Envelope *env, *again;
	struct sb_err err;
	uint8_t *first, *second;
	size_t n1, n2;

	if (proto_decode(data, size, &env, &err) < 0)
		return 0;
	(void)proto_body_name(env->body_case);
	n1 = protobuf_c_message_get_packed_size(&env->base);
	first = malloc(n1 + 1);
	if (first == NULL)
		abort();
	if (protobuf_c_message_pack(&env->base, first) != n1)
		abort();
	if (proto_decode(first, n1, &again, &err) < 0) {
		/* We accepted it once: its re-encoding must be acceptable too. */
		if (!has_unknown(&env->base))
			abort();
		free(first);
		proto_free(env);
		return 0;
	}
	if (again->body_case != env->body_case)
		abort();
	n2 = protobuf_c_message_get_packed_size(&again->base);
	second = malloc(n2 + 1);
	if (second == NULL)
		abort();
	protobuf_c_message_pack(&again->base, second);
	if (n1 != n2 || memcmp(first, second, n1) != 0)
		abort();
	if (env->body_case == SANDBOX__ENVELOPE__BODY_HELLO) {
		uint32_t version;

		(void)proto_negotiate(env->hello, &version, &err);
	}
	free(first);
	free(second);
	proto_free(env);
	proto_free(again);
	return 0;
}
