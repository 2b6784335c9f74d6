/* Envelope encoding over frames and the version handshake (see proto.h). Treats every received
 * byte as hostile: sizes are checked before allocation (frame_read) and anything protobuf-c
 * cannot unpack completely, required fields included, is refused as a whole. */
#include "proto.h"

#include <errno.h>
#include <stdint.h>
#include <stdlib.h>

static const char *const proto_body_names[] = {
	[SANDBOX__ENVELOPE__BODY__NOT_SET] = "none",
	[SANDBOX__ENVELOPE__BODY_HELLO] = "hello",
	[SANDBOX__ENVELOPE__BODY_EXEC] = "exec",
	[SANDBOX__ENVELOPE__BODY_RESULT] = "result",
	[SANDBOX__ENVELOPE__BODY_RECEIPT] = "receipt",
	[SANDBOX__ENVELOPE__BODY_CANCEL] = "cancel",
	[SANDBOX__ENVELOPE__BODY_QUERY] = "query",
	[SANDBOX__ENVELOPE__BODY_QUERY_REPLY] = "query_reply",
	[SANDBOX__ENVELOPE__BODY_ERROR] = "error",
	[SANDBOX__ENVELOPE__BODY_PING] = "ping",
	[SANDBOX__ENVELOPE__BODY_PONG] = "pong",
	[SANDBOX__ENVELOPE__BODY_OUTPUT] = "output",
	[SANDBOX__ENVELOPE__BODY_NET_ACCEPT] = "net_accept",
	[SANDBOX__ENVELOPE__BODY_NET_LISTENING] = "net_listening",
	[SANDBOX__ENVELOPE__BODY_NET_ACCEPTED] = "net_accepted",
};

#define PROTO_BODY_COUNT (sizeof proto_body_names / sizeof proto_body_names[0])

const char *proto_body_name(Sandbox__Envelope__BodyCase body)
{
	if ((size_t)body >= PROTO_BODY_COUNT || proto_body_names[body] == NULL)
		return "unknown";
	return proto_body_names[body];
}

/* A body this build knows; anything else (NOT_SET included) cannot be handled. */
static int body_known(Sandbox__Envelope__BodyCase body)
{
	return body != SANDBOX__ENVELOPE__BODY__NOT_SET && (size_t)body < PROTO_BODY_COUNT;
}

/* The envelope's packed size, or -1 (nothing written yet) for one that must not be sent. */
static int send_check(const Sandbox__Envelope *env, size_t cap, size_t *len, struct sb_err *err)
{
	const char *name = proto_body_name(env->body_case);

	if (!body_known(env->body_case))
		return sb_invalid(err, "refusing to send an envelope without a known message");
	/* protobuf-c would silently encode a NULL required string as ""; refuse it here instead. */
	if (!protobuf_c_message_check(&env->base))
		return sb_invalid(err, "refusing to send a %s message with a required field missing", name);
	*len = protobuf_c_message_get_packed_size(&env->base);
	if (*len > cap)
		return sb_fail(err, EMSGSIZE, "%s message of %zu bytes exceeds the cap of %zu bytes", name, *len, cap);
	return 0;
}

int proto_send_many(struct sb_stream *s, const Sandbox__Envelope *const *envs, size_t n, size_t cap,
		    struct sb_err *err)
{
	const char *name = n > 0 ? proto_body_name(envs[0]->body_case) : "none";
	size_t lens[PROTO_SEND_MAX], total = 0, at = 0;
	uint8_t *buf;
	int rc;

	if (n == 0 || n > PROTO_SEND_MAX)
		return sb_invalid(err, "refusing to send %zu envelopes at once (1 to %d)", n, PROTO_SEND_MAX);
	for (size_t i = 0; i < n; i++) {
		if (send_check(envs[i], cap, &lens[i], err) < 0)
			return -1;
		/* Each is at most cap (checked, cap is a size_t the caller holds): no sum of at most
		 * PROTO_SEND_MAX of them wraps unless cap is near SIZE_MAX, refused here too. */
		if (total > SIZE_MAX - FRAME_ROOM - lens[i])
			return sb_fail(err, EMSGSIZE, "%zu envelopes too large to send together", n);
		total += FRAME_ROOM + lens[i];
	}
	/* Each frame's header goes in before its message: one write, one TLS record (frame.h). */
	buf = malloc(total);
	if (buf == NULL)
		return sb_fail(err, ENOMEM, "encoding a %s message of %zu bytes", name, total);
	for (size_t i = 0; i < n; i++) {
		protobuf_c_message_pack(&envs[i]->base, buf + at + FRAME_ROOM);
		at += FRAME_ROOM + lens[i];
	}
	rc = frame_write_rooms(s, buf, lens, n, cap, err);
	free(buf);
	if (rc < 0)
		sb_err_prefix(err, "sending %s message", name);
	return rc;
}

int proto_send(struct sb_stream *s, const Sandbox__Envelope *env, size_t cap, struct sb_err *err)
{
	return proto_send_many(s, &env, 1, cap, err);
}

int proto_decode(const uint8_t *buf, size_t len, Sandbox__Envelope **out, struct sb_err *err)
{
	Sandbox__Envelope *env;

	*out = NULL;
	/* NULL for anything malformed: bad varints, lengths past the end, wrong wire types, and
	 * messages missing a required field. */
	env = sandbox__envelope__unpack(NULL, len, buf);
	if (env == NULL)
		return sb_fail(err, EBADMSG, "malformed message: %zu bytes that are not a complete protocol "
			       "envelope (bad encoding or a required field missing)", len);
	if (!body_known(env->body_case)) {
		sandbox__envelope__free_unpacked(env, NULL);
		return sb_fail(err, EBADMSG, "malformed message: the envelope carries no message this protocol "
			       "version knows");
	}
	*out = env;
	return 0;
}

int proto_recv(struct sb_stream *s, size_t cap, Sandbox__Envelope **out, struct sb_err *err)
{
	uint8_t *buf;
	size_t len;
	int rc;

	*out = NULL;
	rc = frame_read(s, cap, &buf, &len, err);
	if (rc <= 0)
		return rc;
	rc = proto_decode(buf, len, out, err);
	free(buf);
	return rc < 0 ? -1 : 1;
}

void proto_free(Sandbox__Envelope *env)
{
	if (env != NULL)
		sandbox__envelope__free_unpacked(env, NULL);
}

void proto_hello_init(Sandbox__Hello *hello)
{
	sandbox__hello__init(hello);
	hello->min_version = SB_PROTO_VERSION_MIN;
	hello->max_version = SB_PROTO_VERSION_MAX;
}

int proto_negotiate_range(uint32_t our_min, uint32_t our_max, const Sandbox__Hello *peer, uint32_t *version,
			  struct sb_err *err)
{
	uint32_t low, high;

	*version = 0;
	if (peer->min_version > peer->max_version)
		return sb_fail(err, EBADMSG, "malformed hello: min_version %u is above max_version %u",
			       peer->min_version, peer->max_version);
	low = peer->min_version > our_min ? peer->min_version : our_min;
	high = peer->max_version < our_max ? peer->max_version : our_max;
	if (low > high)
		return sb_fail(err, EPROTONOSUPPORT, "protocol version refused: the peer speaks versions %u to %u, "
			       "this side speaks %u to %u; upgrade the older of sandbox-manager and sandbox-agent",
			       peer->min_version, peer->max_version, our_min, our_max);
	*version = high;
	return 0;
}

int proto_negotiate(const Sandbox__Hello *peer, uint32_t *version, struct sb_err *err)
{
	return proto_negotiate_range(SB_PROTO_VERSION_MIN, SB_PROTO_VERSION_MAX, peer, version, err);
}
