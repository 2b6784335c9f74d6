/* Framing for every byte stream between our programs (agent <-> manager over TLS, client <->
 * manager over the local socket): a 4-byte big-endian length, then that many bytes.
 * The length is checked against the caller's cap BEFORE anything is allocated, so a peer
 * cannot make us allocate by announcing a large frame. */
#ifndef SB_FRAME_H
#define SB_FRAME_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "error.h"

#define SB_FRAME_CAP_DEFAULT (16u * 1024u * 1024u)

/* A byte stream: a plain descriptor or a TLS session. read/write follow read(2)/write(2):
 * they return the count, 0 for end of stream (read only), or -1 with errno set. */
struct sb_stream {
	void *ctx;
	ssize_t (*read)(void *ctx, void *buf, size_t len);
	ssize_t (*write)(void *ctx, const void *buf, size_t len);
};

/* A stream over a descriptor (ctx points at an int holding the fd). */
void sb_stream_fd(struct sb_stream *s, int *fd);

/* Write one frame: its header, then its body, two writes. Fails on len > cap, on a short write or on
 * a write error. A message that must reach its peer whole or not at all (a sender may die between two
 * writes) is written with frame_write_rooms, in one: control.c's. */
int frame_write(struct sb_stream *s, const void *buf, size_t len, size_t cap, struct sb_err *err);

/* Write n frames laid out back to back in buf, each FRAME_ROOM bytes of room and then its body of
 * lens[i] bytes: each header is written into its room and all of them go out in one write (over
 * TLS one record, not one per header and body, up to the record size; the peer reads them on one
 * wake-up). Fails as frame_write does, before writing anything when a body is over cap. */
#define FRAME_ROOM 4
int frame_write_rooms(struct sb_stream *s, uint8_t *buf, const size_t *lens, size_t n, size_t cap,
		      struct sb_err *err);

/* Read one frame into a fresh malloc'd buffer (*out, *out_len); the caller frees it.
 * Returns 1 for a frame, 0 for a clean end of stream before any byte of a frame,
 * -1 on error: an oversized length (nothing allocated), a truncated frame, a read error. */
int frame_read(struct sb_stream *s, size_t cap, uint8_t **out, size_t *out_len, struct sb_err *err);

/* Pure helpers, exposed for tests and fuzzing. */
void frame_encode_header(uint8_t hdr[4], uint32_t len);
uint32_t frame_decode_header(const uint8_t hdr[4]);

#endif
