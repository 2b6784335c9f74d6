/* Live output hubs (live_exec.h): a list of the running execs' hubs under one lock, each hub's
 * rings under its own. Memory per exec is fixed (two rings); a reader holds no buffer here. */
#include "live_exec.h"

#include <errno.h>
#include <stdio.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "clock.h"
#include "metrics.h"
#include "names.h"

struct live_exec {
	char exec_id[EXEC_ID_MAX + 1];
	char identity[65];
	pthread_mutex_t lock;
	pthread_cond_t cond;
	struct live_ring ring[LIVE_STREAMS];
	bool ended;
	struct live_reader *readers; /* those reading now, under lock */
	unsigned followers, refs; /* refs: the begin's and each reader's */
	struct live_exec *next;
};

static pthread_mutex_t hubs_lock = PTHREAD_MUTEX_INITIALIZER;
static struct live_exec *hubs;

struct live_exec *live_exec_begin(const char *exec_id, const char *identity)
{
	struct live_exec *h = calloc(1, sizeof *h);
	struct sb_err err;
	pthread_condattr_t ca;

	if (h == NULL)
		return NULL;
	if (live_ring_init(&h->ring[LIVE_STDOUT], LIVE_RING_BYTES, &err) < 0 ||
	    live_ring_init(&h->ring[LIVE_STDERR], LIVE_RING_BYTES, &err) < 0) {
		live_ring_free(&h->ring[LIVE_STDOUT]);
		free(h);
		return NULL;
	}
	snprintf(h->exec_id, sizeof h->exec_id, "%s", exec_id);
	snprintf(h->identity, sizeof h->identity, "%s", identity);
	pthread_mutex_init(&h->lock, NULL);
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&h->cond, &ca);
	pthread_condattr_destroy(&ca);
	h->refs = 1;
	pthread_mutex_lock(&hubs_lock);
	h->next = hubs;
	hubs = h;
	pthread_mutex_unlock(&hubs_lock);
	return h;
}

/* The bytes of stream s that r lost to the ring and are not counted yet, counted now; h->lock held. */
static void reader_skips_count(struct live_reader *r, enum live_stream s, uint64_t upto)
{
	uint64_t from = r->off[s] > r->counted[s] ? r->off[s] : r->counted[s];

	if (upto <= from)
		return;
	metrics_live_output(0, upto - from);
	r->counted[s] = upto;
}

void live_exec_put(struct live_exec *h, enum live_stream stream, uint64_t offset, const uint8_t *data, size_t len)
{
	pthread_mutex_lock(&h->lock);
	live_ring_put(&h->ring[stream], offset, data, len);
	for (struct live_reader *r = h->readers; r != NULL; r = r->next)
		reader_skips_count(r, stream, h->ring[stream].start);
	pthread_cond_broadcast(&h->cond);
	pthread_mutex_unlock(&h->lock);
}

static void hub_unref(struct live_exec *h)
{
	bool last;

	pthread_mutex_lock(&hubs_lock);
	last = --h->refs == 0;
	pthread_mutex_unlock(&hubs_lock);
	if (!last)
		return;
	live_ring_free(&h->ring[LIVE_STDOUT]);
	live_ring_free(&h->ring[LIVE_STDERR]);
	pthread_mutex_destroy(&h->lock);
	pthread_cond_destroy(&h->cond);
	free(h);
}

void live_exec_end(struct live_exec *h)
{
	if (h == NULL)
		return;
	pthread_mutex_lock(&hubs_lock);
	for (struct live_exec **p = &hubs; *p != NULL; p = &(*p)->next)
		if (*p == h) {
			*p = h->next;
			break;
		}
	pthread_mutex_unlock(&hubs_lock);
	pthread_mutex_lock(&h->lock);
	h->ended = true;
	pthread_cond_broadcast(&h->cond);
	pthread_mutex_unlock(&h->lock);
	hub_unref(h);
}

/* Followers of every running exec of identity; hubs_lock held. */
static unsigned identity_followers(const char *identity)
{
	unsigned n = 0;

	for (struct live_exec *h = hubs; h != NULL; h = h->next)
		if (strcmp(h->identity, identity) == 0)
			n += h->followers;
	return n;
}

int live_exec_attach(const char *exec_id, bool counted, struct live_exec **out, struct sb_err *err)
{
	struct live_exec *h;

	pthread_mutex_lock(&hubs_lock);
	for (h = hubs; h != NULL && strcmp(h->exec_id, exec_id) != 0; h = h->next) {
	}
	if (h != NULL && counted && h->followers >= LIVE_FOLLOWERS_MAX) {
		pthread_mutex_unlock(&hubs_lock);
		return sb_fail(err, EBUSY, "exec %s has %u followers already, the most it takes; try again when one "
			       "has left", exec_id, LIVE_FOLLOWERS_MAX);
	}
	if (h != NULL && counted && identity_followers(h->identity) >= LIVE_FOLLOWERS_IDENTITY_MAX) {
		pthread_mutex_unlock(&hubs_lock);
		return sb_fail(err, EBUSY, "the execs of identity %s have %u followers already, the most they take; try "
			       "again when one has left", h->identity, LIVE_FOLLOWERS_IDENTITY_MAX);
	}
	if (h != NULL) {
		h->refs++;
		h->followers += counted;
	}
	pthread_mutex_unlock(&hubs_lock);
	if (h == NULL)
		return sb_fail(err, ENOENT, "exec %s is not running on this manager", exec_id);
	*out = h;
	return 0;
}

struct live_exec *live_exec_ref(struct live_exec *h)
{
	pthread_mutex_lock(&hubs_lock);
	h->refs++;
	pthread_mutex_unlock(&hubs_lock);
	return h;
}

void live_exec_detach(struct live_exec *h, bool counted)
{
	if (h == NULL)
		return;
	pthread_mutex_lock(&hubs_lock);
	h->followers -= counted;
	pthread_mutex_unlock(&hubs_lock);
	hub_unref(h);
}

void live_exec_read_begin(struct live_exec *h, struct live_reader *r, const uint64_t off[LIVE_STREAMS])
{
	memset(r, 0, sizeof *r);
	memcpy(r->off, off, sizeof r->off);
	pthread_mutex_lock(&h->lock);
	r->next = h->readers;
	h->readers = r;
	pthread_mutex_unlock(&h->lock);
}

void live_exec_read_end(struct live_exec *h, struct live_reader *r)
{
	pthread_mutex_lock(&h->lock);
	for (struct live_reader **p = &h->readers; *p != NULL; p = &(*p)->next)
		if (*p == r) {
			*p = r->next;
			break;
		}
	for (int s = 0; s < LIVE_STREAMS; s++)
		reader_skips_count(r, (enum live_stream)s, h->ring[s].end);
	pthread_mutex_unlock(&h->lock);
}

/* The skip a chunk reports is the reader's whole gap before it; the metrics have it already
 * (reader_skips_count, as the ring dropped it), or get it here (a resume from an old offset). */
static int hub_take(struct live_exec *h, struct live_reader *r, uint8_t *buf, enum live_stream *stream,
		    uint64_t *offset, size_t *len, uint64_t *skipped)
{
	for (int s = 0; s < LIVE_STREAMS; s++) {
		uint64_t at = r->off[s];
		size_t n;

		reader_skips_count(r, (enum live_stream)s, h->ring[s].start);
		n = live_ring_get(&h->ring[s], &at, buf, LIVE_CHUNK_MAX, skipped);
		if (n == 0 && *skipped == 0)
			continue;
		*stream = (enum live_stream)s;
		*offset = at - n;
		*len = n;
		r->off[s] = at;
		return 1;
	}
	return 0;
}

int live_exec_next(struct live_exec *h, struct live_reader *r, uint8_t *buf, enum live_stream *stream,
		   uint64_t *offset, size_t *len, uint64_t *skipped, int wait_ms)
{
	struct timespec until;
	int rc;

	clock_mono_timespec_after(wait_ms, &until);
	pthread_mutex_lock(&h->lock);
	while ((rc = hub_take(h, r, buf, stream, offset, len, skipped)) == 0 && !h->ended)
		if (pthread_cond_timedwait(&h->cond, &h->lock, &until) == ETIMEDOUT)
			break;
	if (rc == 0 && h->ended)
		rc = -1;
	pthread_mutex_unlock(&h->lock);
	if (rc == 1)
		metrics_live_output(*len, 0);
	return rc;
}
