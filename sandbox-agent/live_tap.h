/* agent: a running command's live output on its way to the manager. The wait loop feeds each read
 * into a fixed ring per stream (never waiting: a slow manager costs skipped bytes, not the command's
 * time or the agent's memory); a sender thread of its own takes chunks out and sends them. The
 * record (output.h) is fed from the same read and is never affected by what the sender skips.
 *
 * The tap is one per connection and outlives its execs: the sender thread and its rings are made on
 * the connection's first exec that asks for live output, reset by each later one, and joined and
 * freed when the connection ends (live_tap_close). Between an exec's live_tap_stop and the next
 * live_tap_begin the sender holds no chunk and does not write. */
#ifndef SB_LIVE_TAP_H
#define SB_LIVE_TAP_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "error.h"
#include "live_ring.h"

/* Send one chunk (skipped: bytes just before offset the sender lost); -1 gives up the rest of this
 * exec's output (the sender then waits for the next exec). */
typedef int (*live_tap_send)(void *ctx, enum live_stream stream, uint64_t offset, const uint8_t *data, size_t len,
			     uint64_t skipped);

struct live_tap {
	pthread_mutex_t lock;
	pthread_cond_t cond;            /* the sender's: a chunk, the exec's end, or the close */
	pthread_cond_t idle;            /* live_tap_stop's: the sender finished this exec */
	struct live_ring ring[LIVE_STREAMS];
	uint64_t sent[LIVE_STREAMS];    /* the sender's offsets, this exec */
	uint64_t skipped;               /* bytes the sender lost, both streams, this exec */
	bool running;                   /* an exec is tapped: between live_tap_begin and its stop's return */
	bool done, failed;              /* this exec: its output ended; a send failed */
	bool sending;                   /* the sender is writing a chunk, outside the lock */
	bool closing;                   /* live_tap_close: the sender returns */
	bool started;                   /* the thread and rings exist (the conn thread's alone) */
	pthread_t thread;
	live_tap_send send;
	void *ctx;
};

/* One exec's tap: the rings and the sender made on first use, else reset (offsets from 0, nothing
 * held, nothing failed). 0, or -1 with the tap as it was (never started: nothing left running). */
int live_tap_begin(struct live_tap *t, live_tap_send send, void *ctx, struct sb_err *err);
/* From the wait loop: bytes just read from stream. Takes the lock for a copy; never waits on I/O. */
void live_tap_feed(struct live_tap *t, enum live_stream stream, const uint8_t *buf, size_t len);
/* The exec's output ended: returns once the sender sent what the rings still hold (or a send failed
 * and the rest was given up) and is waiting again; it no longer uses send or ctx. A no-op unless an
 * exec is tapped. */
void live_tap_stop(struct live_tap *t);
/* The owner (the connection) ends: the sender joined, the rings freed. A no-op if never started. */
void live_tap_close(struct live_tap *t);

/* One step of the sender, for tests: the next chunk of either stream into buf (LIVE_CHUNK_MAX).
 * 1 with *stream, *offset, *len, *skipped; 0 when nothing is waiting. Caller holds t->lock. */
int live_tap_next(struct live_tap *t, uint8_t *buf, enum live_stream *stream, uint64_t *offset, size_t *len,
		  uint64_t *skipped);

#endif
