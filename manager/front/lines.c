/* Lines from a descriptor (see lines.h). A line's bytes are gathered in one buffer that grows to
 * the longest line held, never past the cap: an overlong line is dropped as it arrives, not kept
 * until its newline. */
#include "lines.h"

#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define CHUNK 65536

struct line_buf {
	char *buf;
	size_t len, cap, limit;
	int overlong; /* the current line passed the limit (or memory): skipped up to its newline */
};

/* n more bytes of the current line; an overflow of the limit or of memory marks it overlong. */
static void line_append(struct line_buf *r, const char *data, size_t n)
{
	if (r->overlong)
		return;
	if (n > r->limit - r->len) {
		r->overlong = 1;
		r->len = 0;
		return;
	}
	if (r->len + n > r->cap) {
		size_t cap = r->cap ? r->cap : CHUNK;
		char *p;

		while (cap < r->len + n && cap <= SIZE_MAX / 2)
			cap *= 2;
		p = cap >= r->len + n ? realloc(r->buf, cap) : NULL;
		if (p == NULL) {
			r->overlong = 1; /* out of memory: answered as too large, and reading goes on */
			r->len = 0;
			return;
		}
		r->buf = p;
		r->cap = cap;
	}
	memcpy(r->buf + r->len, data, n);
	r->len += n;
}

static void line_end(struct line_buf *r, lines_fn fn)
{
	if (r->overlong)
		fn(NULL, 0, 1);
	else if (r->len > 0)
		fn(r->buf, r->len, 0);
	r->len = 0;
	r->overlong = 0;
}

int lines_read(int fd, size_t cap, lines_fn fn)
{
	struct line_buf r = { .limit = cap };
	char chunk[CHUNK];
	int rc = 0, saved = 0;

	for (;;) {
		ssize_t n = read(fd, chunk, sizeof chunk);
		size_t off = 0;

		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0) {
			rc = n < 0 ? -1 : 0;
			saved = errno;
			break;
		}
		while (off < (size_t)n) {
			char *nl = memchr(chunk + off, '\n', (size_t)n - off);
			size_t seg = nl ? (size_t)(nl - (chunk + off)) : (size_t)n - off;

			line_append(&r, chunk + off, seg);
			off += seg + (nl != NULL);
			if (nl != NULL)
				line_end(&r, fn);
		}
	}
	if (rc == 0)
		line_end(&r, fn); /* a last line without its newline */
	free(r.buf);
	errno = saved;
	return rc;
}
