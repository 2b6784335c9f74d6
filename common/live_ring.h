/* Live output's one buffer: the newest bytes of one output stream, by absolute byte offset, in a
 * fixed ring. A writer never waits and memory never grows past the ring; a reader that falls behind
 * is told how many bytes it lost and where it resumes (skip accounting). The agent's sender and the
 * manager's followers read through it; it never interprets the bytes. */
#ifndef SB_LIVE_RING_H
#define SB_LIVE_RING_H

#include <stddef.h>
#include <stdint.h>

#include "error.h"

#define LIVE_RING_BYTES (64u * 1024u) /* per stream, agent and manager alike */
#define LIVE_CHUNK_MAX (16u * 1024u)  /* one chunk's bytes on the wire */

enum live_stream { LIVE_STDOUT = 0, LIVE_STDERR = 1, LIVE_STREAMS = 2 };

struct live_ring {
	uint8_t *buf;
	size_t cap;
	uint64_t start;   /* offset of the oldest byte held */
	uint64_t end;     /* offset just past the newest byte */
	uint64_t lost;    /* bytes that reached end without ever being held: a writer's gaps */
};

int live_ring_init(struct live_ring *r, size_t cap, struct sb_err *err);
void live_ring_free(struct live_ring *r);

/* Bytes at offset: a gap from end up to offset is counted lost and never served; bytes before end
 * (already held or passed) are dropped; what exceeds the ring pushes its oldest bytes out. */
void live_ring_put(struct live_ring *r, uint64_t offset, const uint8_t *data, size_t len);

/* Up to len bytes from *offset into out; *offset moves past them. Bytes between *offset and the
 * oldest held byte are gone: *skipped says how many (0 when none) and *offset jumps to where
 * the copy resumed. A reader ahead of end (a resume past what was written) gets nothing. */
size_t live_ring_get(const struct live_ring *r, uint64_t *offset, uint8_t *out, size_t len, uint64_t *skipped);

#endif
