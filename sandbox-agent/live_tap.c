/* agent: live output's tap and its sender thread (live_tap.h). The wait loop only copies into a ring
 * under a lock held for that copy; every write to the manager happens on the sender's thread, so a
 * manager that stops reading stalls the sender alone. */
#include "live_tap.h"

#include <errno.h>
#include <string.h>

#include "log.h"
#include "thread.h"

int live_tap_next(struct live_tap *t, uint8_t *buf, enum live_stream *stream, uint64_t *offset, size_t *len,
		  uint64_t *skipped)
{
	for (int s = 0; s < LIVE_STREAMS; s++) {
		uint64_t at = t->sent[s];
		size_t n = live_ring_get(&t->ring[s], &at, buf, LIVE_CHUNK_MAX, skipped);

		if (n == 0 && *skipped == 0)
			continue;
		*stream = (enum live_stream)s;
		*offset = at - n;
		*len = n;
		t->sent[s] = at;
		t->skipped += *skipped;
		return 1;
	}
	return 0;
}

/* The sender: one per tap, for every exec of its owner. It writes only between an exec's
 * live_tap_begin and that exec's stop, and only through the exec's own send and ctx, read under the
 * lock; a failed send gives up this exec's rest (the feed stops copying) and never the thread. */
static void *tap_thread(void *arg)
{
	uint8_t buf[LIVE_CHUNK_MAX]; /* on this thread's own stack (default size) */
	struct live_tap *t = arg;

	pthread_mutex_lock(&t->lock);
	while (!t->closing) {
		enum live_stream stream;
		uint64_t offset, skipped;
		size_t len;

		if (!t->running) {
			pthread_cond_wait(&t->cond, &t->lock);
			continue;
		}
		if (!t->failed && live_tap_next(t, buf, &stream, &offset, &len, &skipped)) {
			live_tap_send send = t->send;
			void *ctx = t->ctx;
			int rc;

			/* The write may wait on the manager: the lock is the wait loop's meanwhile. */
			t->sending = true;
			pthread_mutex_unlock(&t->lock);
			rc = send(ctx, stream, offset, buf, len, skipped);
			pthread_mutex_lock(&t->lock);
			t->sending = false;
			if (rc < 0)
				t->failed = true;
			continue;
		}
		if (t->done) {
			/* Everything of this exec is out, or given up: the stop may return. */
			t->running = false;
			pthread_cond_signal(&t->idle);
			continue;
		}
		pthread_cond_wait(&t->cond, &t->lock);
	}
	pthread_mutex_unlock(&t->lock);
	return NULL;
}

static int tap_make(struct live_tap *t, struct sb_err *err)
{
	memset(t, 0, sizeof *t);
	if (live_ring_init(&t->ring[LIVE_STDOUT], LIVE_RING_BYTES, err) < 0 ||
	    live_ring_init(&t->ring[LIVE_STDERR], LIVE_RING_BYTES, err) < 0) {
		live_ring_free(&t->ring[LIVE_STDOUT]);
		return -1;
	}
	pthread_mutex_init(&t->lock, NULL);
	pthread_cond_init(&t->cond, NULL);
	pthread_cond_init(&t->idle, NULL);
	if (pthread_create(&t->thread, NULL, tap_thread, t) != 0) {
		live_ring_free(&t->ring[LIVE_STDOUT]);
		live_ring_free(&t->ring[LIVE_STDERR]);
		pthread_mutex_destroy(&t->lock);
		pthread_cond_destroy(&t->cond);
		pthread_cond_destroy(&t->idle);
		memset(t, 0, sizeof *t);
		return sb_fail(err, EAGAIN, "starting the live output sender");
	}
	t->started = true;
	return 0;
}

int live_tap_begin(struct live_tap *t, live_tap_send send, void *ctx, struct sb_err *err)
{
	if (!t->started && tap_make(t, err) < 0)
		return -1;
	pthread_mutex_lock(&t->lock);
	/* The previous exec's stop returned only with the sender idle (running false): nothing of it is
	 * held or in flight, so its bytes cannot reach this exec's offsets. */
	for (int s = 0; s < LIVE_STREAMS; s++) {
		t->ring[s].start = t->ring[s].end = t->ring[s].lost = 0;
		t->sent[s] = 0;
	}
	t->skipped = 0;
	t->done = t->failed = false;
	t->send = send;
	t->ctx = ctx;
	t->running = true;
	pthread_mutex_unlock(&t->lock);
	return 0;
}

void live_tap_feed(struct live_tap *t, enum live_stream stream, const uint8_t *buf, size_t len)
{
	pthread_mutex_lock(&t->lock);
	if (t->running && !t->failed) {
		live_ring_put(&t->ring[stream], t->ring[stream].end, buf, len);
		pthread_cond_signal(&t->cond);
	}
	pthread_mutex_unlock(&t->lock);
}

/* Under the lock: a byte, or a loss, the sender has not passed on yet (start <= end, so a reader
 * behind start is behind end too). */
static bool tap_pending(const struct live_tap *t)
{
	for (int s = 0; s < LIVE_STREAMS; s++)
		if (t->sent[s] < t->ring[s].end)
			return true;
	return false;
}

void live_tap_stop(struct live_tap *t)
{
	uint64_t skipped;

	if (!t->started)
		return;
	pthread_mutex_lock(&t->lock);
	if (!t->running) {
		pthread_mutex_unlock(&t->lock);
		return;
	}
	if (!t->sending && (t->failed || !tap_pending(t))) {
		/* Nothing to send and no send under way: the sender is waiting for the lock or on cond,
		 * and finds this exec over either way. Ending it here spares the call a wake-up of the
		 * sender and its answer, two hops between CPUs (docs/performance.md). */
		t->running = false;
	} else {
		t->done = true;
		pthread_cond_signal(&t->cond);
		while (t->running)
			pthread_cond_wait(&t->idle, &t->lock);
	}
	t->send = NULL;
	t->ctx = NULL;
	skipped = t->skipped;
	pthread_mutex_unlock(&t->lock);
	if (skipped > 0)
		sb_info("live output: %llu bytes skipped (the manager read slower than the command wrote)",
			(unsigned long long)skipped);
}

void live_tap_close(struct live_tap *t)
{
	if (!t->started)
		return;
	live_tap_stop(t);
	pthread_mutex_lock(&t->lock);
	t->closing = true;
	pthread_cond_signal(&t->cond);
	pthread_mutex_unlock(&t->lock);
	pthread_join(t->thread, NULL);
	live_ring_free(&t->ring[LIVE_STDOUT]);
	live_ring_free(&t->ring[LIVE_STDERR]);
	pthread_mutex_destroy(&t->lock);
	pthread_cond_destroy(&t->cond);
	pthread_cond_destroy(&t->idle);
	memset(t, 0, sizeof *t);
}
