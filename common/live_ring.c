/* Live output's ring (live_ring.h): fixed memory, absolute offsets, skips counted for each reader.
 * Allocates only at init; never blocks. */
#include "live_ring.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

int live_ring_init(struct live_ring *r, size_t cap, struct sb_err *err)
{
	memset(r, 0, sizeof *r);
	if (cap == 0)
		return sb_invalid(err, "a live output ring needs room");
	r->buf = malloc(cap);
	if (r->buf == NULL)
		return sb_fail(err, ENOMEM, "allocating a live output ring of %zu bytes", cap);
	r->cap = cap;
	return 0;
}

void live_ring_free(struct live_ring *r)
{
	free(r->buf);
	memset(r, 0, sizeof *r);
}

static void ring_copy_in(struct live_ring *r, const uint8_t *data, size_t len)
{
	size_t at = (size_t)(r->end % r->cap), first = len < r->cap - at ? len : r->cap - at;

	memcpy(r->buf + at, data, first);
	memcpy(r->buf, data + first, len - first);
	r->end += len;
	if (r->end - r->start > r->cap)
		r->start = r->end - r->cap;
}

void live_ring_put(struct live_ring *r, uint64_t offset, const uint8_t *data, size_t len)
{
	if (offset > r->end) {
		/* Nothing of the gap was ever here: no reader may be served it. */
		r->lost += offset - r->end;
		r->end = r->start = offset;
	}
	if (offset + len <= r->end)
		return;
	data += r->end - offset;
	len -= (size_t)(r->end - offset);
	/* Only the newest cap bytes can stay. */
	if (len > r->cap) {
		r->end += len - r->cap;
		r->start = r->end;
		data += len - r->cap;
		len = r->cap;
	}
	ring_copy_in(r, data, len);
}

size_t live_ring_get(const struct live_ring *r, uint64_t *offset, uint8_t *out, size_t len, uint64_t *skipped)
{
	size_t n, at, first;

	*skipped = 0;
	if (*offset < r->start) {
		*skipped = r->start - *offset;
		*offset = r->start;
	}
	if (*offset >= r->end)
		return 0;
	n = r->end - *offset < len ? (size_t)(r->end - *offset) : len;
	at = (size_t)(*offset % r->cap);
	first = n < r->cap - at ? n : r->cap - at;
	memcpy(out, r->buf + at, first);
	memcpy(out + first, r->buf, n - first);
	*offset += n;
	return n;
}
