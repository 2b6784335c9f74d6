/* Bounded output capture (see output.h). Owns the rule that the agent's memory does not grow
 * with what a command writes: two fixed buffers per stream, allocated once. */
#include "output.h"

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The buffers of ended captures, kept for the next ones (issue 32). A warm agent runs one exec
 * after another with the same limit: four buffers of half the limit each (a head and a tail per
 * stream), 512 KiB at the default. musl's allocator gives a buffer that large back to the kernel
 * at free and maps a new one at the next malloc, and each unmap of a page this process touched
 * sends a TLB shoot-down to the other CPU (strace: 4 of a warm call's 18 unmaps). Kept, memory
 * is never above one capture's own: at most OUTPUT_KEPT_MAX buffers, each one the last capture
 * held, freed when a capture asks for another size. A capture reads only bytes it wrote itself
 * (head_len, tail_len): an earlier command's bytes in a kept buffer are never rendered
 * (test_kept_buffers_show_no_earlier_bytes). */
#define OUTPUT_KEPT_MAX 4

static struct {
	pthread_mutex_t lock;
	uint8_t *buf[OUTPUT_KEPT_MAX];
	size_t cap[OUTPUT_KEPT_MAX];
} kept = { .lock = PTHREAD_MUTEX_INITIALIZER };

/* A buffer of exactly cap + 1 bytes: a kept one, or a new one. NULL when out of memory. When none of
 * that size is kept, the limit changed: the kept ones are freed, and this capture's are kept next. */
static uint8_t *buffer_get(size_t cap)
{
	uint8_t *b = NULL, *stale[OUTPUT_KEPT_MAX] = { NULL };

	pthread_mutex_lock(&kept.lock);
	for (size_t i = 0; i < OUTPUT_KEPT_MAX && b == NULL; i++) {
		if (kept.buf[i] != NULL && kept.cap[i] == cap) {
			b = kept.buf[i];
			kept.buf[i] = NULL;
		}
	}
	for (size_t i = 0; i < OUTPUT_KEPT_MAX && b == NULL; i++) {
		stale[i] = kept.buf[i];
		kept.buf[i] = NULL;
	}
	pthread_mutex_unlock(&kept.lock);
	for (size_t i = 0; i < OUTPUT_KEPT_MAX; i++)
		free(stale[i]);
	return b != NULL ? b : malloc(cap + 1);
}

/* Keeps b (cap + 1 bytes) for the next capture while there is a free place, frees it otherwise. */
static void buffer_put(uint8_t *b, size_t cap)
{
	if (b == NULL)
		return;
	pthread_mutex_lock(&kept.lock);
	for (size_t i = 0; i < OUTPUT_KEPT_MAX && b != NULL; i++) {
		if (kept.buf[i] == NULL) {
			kept.buf[i] = b;
			kept.cap[i] = cap;
			b = NULL;
		}
	}
	pthread_mutex_unlock(&kept.lock);
	free(b);
}

size_t output_kept_bytes(void)
{
	size_t n = 0;

	pthread_mutex_lock(&kept.lock);
	for (size_t i = 0; i < OUTPUT_KEPT_MAX; i++)
		n += kept.buf[i] != NULL ? kept.cap[i] + 1 : 0;
	pthread_mutex_unlock(&kept.lock);
	return n;
}

int output_init(struct output_capture *c, size_t limit, struct sb_err *err)
{
	memset(c, 0, sizeof *c);
	if (limit > OUTPUT_LIMIT_MAX)
		return sb_invalid(err, "output limit %zu is over the maximum of %u bytes", limit,
				  OUTPUT_LIMIT_MAX);
	c->head_cap = limit / 2;
	c->tail_cap = limit - c->head_cap;
	c->head = buffer_get(c->head_cap);
	c->tail = buffer_get(c->tail_cap);
	if (c->head == NULL || c->tail == NULL) {
		output_free(c);
		return sb_fail(err, ENOMEM, "allocating %zu bytes of output buffer", limit);
	}
	mbedtls_sha256_init(&c->sha);
	if (mbedtls_sha256_starts_ret(&c->sha, 0) != 0) {
		output_free(c);
		return sb_invalid(err, "starting SHA-256");
	}
	return 0;
}

void output_feed(struct output_capture *c, const uint8_t *buf, size_t len)
{
	size_t n;

	/* mbedtls_sha256_update_ret only fails on bad input pointers. */
	(void)mbedtls_sha256_update_ret(&c->sha, buf, len);
	c->total += len;
	n = c->head_cap - c->head_len < len ? c->head_cap - c->head_len : len;
	memcpy(c->head + c->head_len, buf, n);
	c->head_len += n;
	buf += n;
	len -= n;
	if (c->tail_cap == 0 || len == 0)
		return;
	/* Only the last tail_cap bytes of this chunk can survive in the ring. */
	if (len > c->tail_cap) {
		buf += len - c->tail_cap;
		len = c->tail_cap;
	}
	while (len > 0) {
		size_t room = c->tail_cap - c->tail_pos;
		size_t k = len < room ? len : room;

		memcpy(c->tail + c->tail_pos, buf, k);
		c->tail_pos = (c->tail_pos + k) % c->tail_cap;
		c->tail_len = c->tail_len + k > c->tail_cap ? c->tail_cap : c->tail_len + k;
		buf += k;
		len -= k;
	}
}

void output_finish(struct output_capture *c)
{
	(void)mbedtls_sha256_finish_ret(&c->sha, c->digest);
}

bool output_truncated(const struct output_capture *c)
{
	return c->total > (uint64_t)c->head_len + c->tail_len;
}

uint8_t *output_render(const struct output_capture *c, size_t *len)
{
	char marker[80];
	size_t mlen = 0, pos, start;
	uint8_t *out;

	if (output_truncated(c))
		mlen = (size_t)snprintf(marker, sizeof marker, "\n[... %" PRIu64 " bytes omitted ...]\n",
					c->total - c->head_len - c->tail_len);
	out = malloc(c->head_len + mlen + c->tail_len + 1);
	if (out == NULL)
		return NULL;
	memcpy(out, c->head, c->head_len);
	memcpy(out + c->head_len, marker, mlen);
	pos = c->head_len + mlen;
	/* The ring's oldest byte sits at tail_pos once it has wrapped, at 0 before. */
	start = c->tail_len == c->tail_cap ? c->tail_pos : 0;
	for (size_t i = 0; i < c->tail_len; i++)
		out[pos + i] = c->tail[(start + i) % c->tail_cap];
	*len = pos + c->tail_len;
	out[*len] = '\0';
	return out;
}

void output_free(struct output_capture *c)
{
	buffer_put(c->head, c->head_cap);
	buffer_put(c->tail, c->tail_cap);
	c->head = c->tail = NULL;
	mbedtls_sha256_free(&c->sha);
}
