/* Lines from a descriptor (see lines.h). A line's bytes are gathered in one buffer that grows to
 * the longest line held, never past the cap: an overlong line is dropped as it arrives, not kept
 * until its newline. */
#include "lines.h"

#include <errno.h>
#include <poll.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define CHUNK 65536
#define LINES_AFTER_STOP_MAX (16u * CHUNK) /* what is still read once the stop is seen */

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

/* With a stop descriptor: 1 when fd has bytes to read now (or its end), 0 when the stop was seen
 * and fd has nothing more to give without blocking, -1 on an error (errno). */
static int wait_readable(int fd, int stop_fd, int *stopping, size_t *after_stop)
{
	for (;;) {
		struct pollfd p[2] = { { fd, POLLIN, 0 }, { stop_fd, POLLIN, 0 } };
		int n = poll(p, 2, *stopping ? 0 : -1);

		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return -1;
		if (p[1].revents != 0)
			*stopping = 1;
		if (p[0].revents != 0)
			/* Bounded: a peer that keeps writing after the stop does not keep us reading. */
			return *stopping && *after_stop >= LINES_AFTER_STOP_MAX ? 0 : 1;
		if (*stopping)
			return 0;
	}
}

int lines_read(int fd, size_t cap, lines_fn fn)
{
	return lines_read_until(fd, -1, cap, fn);
}

int lines_read_until(int fd, int stop_fd, size_t cap, lines_fn fn)
{
	struct line_buf r = { .limit = cap };
	char chunk[CHUNK];
	int rc = 0, saved = 0, stopping = 0;
	size_t after_stop = 0;

	for (;;) {
		ssize_t n;
		size_t off = 0;

		if (stop_fd >= 0) {
			int ready = wait_readable(fd, stop_fd, &stopping, &after_stop);

			if (ready <= 0) {
				rc = ready < 0 ? -1 : 1;
				saved = errno;
				break;
			}
		}
		n = read(fd, chunk, sizeof chunk);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0) {
			rc = n < 0 ? -1 : stopping;
			saved = errno;
			break;
		}
		if (stopping)
			after_stop += (size_t)n;
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
		line_end(&r, fn); /* a last line without its newline, at end of file */
	free(r.buf);
	errno = saved;
	return rc;
}
