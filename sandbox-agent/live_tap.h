/* agent: a running command's live output on its way to the manager. The wait loop feeds each read
 * into a fixed ring per stream (never waiting: a slow manager costs skipped bytes, not the command's
 * time or the agent's memory); a sender thread of its own takes chunks out and sends them. The
 * record (output.h) is fed from the same read and is never affected by what the sender skips. */
#ifndef SB_LIVE_TAP_H
#define SB_LIVE_TAP_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "error.h"
#include "live_ring.h"

/* Send one chunk (skipped: bytes just before offset the sender lost); -1 ends the sending. */
typedef int (*live_tap_send)(void *ctx, enum live_stream stream, uint64_t offset, const uint8_t *data, size_t len,
			     uint64_t skipped);

struct live_tap {
	pthread_mutex_t lock;
	pthread_cond_t cond;
	struct live_ring ring[LIVE_STREAMS];
	uint64_t sent[LIVE_STREAMS];    /* the sender's offsets */
	uint64_t skipped;               /* bytes the sender lost, both streams */
	bool done, failed, started;
	pthread_t thread;
	live_tap_send send;
	void *ctx;
};

/* Rings allocated, the sender started. 0, or -1 with nothing left running. */
int live_tap_start(struct live_tap *t, live_tap_send send, void *ctx, struct sb_err *err);
/* From the wait loop: bytes just read from stream. Takes the lock for a copy; never waits on I/O. */
void live_tap_feed(struct live_tap *t, enum live_stream stream, const uint8_t *buf, size_t len);
/* The command's output ended: the sender sends what the rings still hold, then stops; joined and
 * freed here. */
void live_tap_stop(struct live_tap *t);

/* One step of the sender, for tests: the next chunk of either stream into buf (LIVE_CHUNK_MAX).
 * 1 with *stream, *offset, *len, *skipped; 0 when nothing is waiting. Caller holds t->lock. */
int live_tap_next(struct live_tap *t, uint8_t *buf, enum live_stream *stream, uint64_t *offset, size_t *len,
		  uint64_t *skipped);

#endif
