/* The agent protocol on the wire: one protobuf Envelope per frame (common/proto/sandbox.proto),
 * and the version handshake. Owns encoding and decoding only; never interprets a message's
 * meaning, and never allocates for a frame before its length passed the cap. */
#ifndef SB_PROTO_H
#define SB_PROTO_H

#include <stddef.h>
#include <stdint.h>

#include "error.h"
#include "frame.h"
#include "sandbox.pb-c.h"

/* The protocol versions this build speaks, inclusive. Bump MAX when adding a message; bump MIN
 * only when an old peer can no longer be served. */
#define SB_PROTO_VERSION_MIN 1u
#define SB_PROTO_VERSION_MAX 1u

/* Pack env and write it as one frame. Refuses (before writing anything) an envelope without a
 * body, one missing a required field, and one whose encoding exceeds cap (EMSGSIZE). */
int proto_send(struct sb_stream *s, const Sandbox__Envelope *env, size_t cap, struct sb_err *err);

/* Pack n envelopes (at most PROTO_SEND_MAX) and write them as n frames in one write
 * (frame_write_rooms): the agent's Result and its Receipt reach the manager together, read on one
 * wake-up. Refuses as proto_send does, each envelope checked, before writing anything. */
#define PROTO_SEND_MAX 4
int proto_send_many(struct sb_stream *s, const Sandbox__Envelope *const *envs, size_t n, size_t cap,
		    struct sb_err *err);

/* Read one frame and unpack it into *out (free with proto_free). Returns 1 for a message, 0 for a
 * clean end of stream between messages, -1 for an oversized frame (EMSGSIZE, refused before
 * allocation), a truncated stream or malformed protobuf (EBADMSG), each with a clear message.
 * After EBADMSG the stream is still at a frame boundary: the caller may answer and go on. */
int proto_recv(struct sb_stream *s, size_t cap, Sandbox__Envelope **out, struct sb_err *err);

/* Unpack one frame's bytes; the pure half of proto_recv, also the fuzzing entry point. An
 * envelope with no body, or a body this version does not know, is refused as malformed. */
int proto_decode(const uint8_t *buf, size_t len, Sandbox__Envelope **out, struct sb_err *err);

/* Free an envelope from proto_recv/proto_decode; NULL is a no-op. */
void proto_free(Sandbox__Envelope *env);

/* "hello", "exec", ... for messages and logs; "none" for an unset body. */
const char *proto_body_name(Sandbox__Envelope__BodyCase body);

/* Fill hello with this build's version range (other fields left unset). */
void proto_hello_init(Sandbox__Hello *hello);

/* Pick the highest version both this build and the peer's Hello speak into *version. Refuses
 * (EPROTONOSUPPORT) disjoint ranges with a message naming both ranges, and a Hello whose
 * min_version is above its max_version (EBADMSG). */
int proto_negotiate(const Sandbox__Hello *peer, uint32_t *version, struct sb_err *err);

/* The same against an explicit local range; for tests and for a peer that must pin a version. */
int proto_negotiate_range(uint32_t our_min, uint32_t our_max, const Sandbox__Hello *peer, uint32_t *version,
			  struct sb_err *err);

#endif
