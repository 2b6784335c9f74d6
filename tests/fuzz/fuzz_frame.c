/* libFuzzer target: frame_read over an in-memory stream with a small cap. The first input byte sets
 * how many bytes each read returns (short reads), the rest is the stream. Checks that every frame
 * is within the cap and equals the stream's bytes, and that an oversized header is refused as such.
 * Must never touch files, sockets or the network. */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "frame.h"

#define FUZZ_CAP 4096

struct mem {
	const uint8_t *p;
	size_t len, pos, chunk;
};

static ssize_t mem_read(void *ctx, void *buf, size_t len)
{
	struct mem *m = ctx;
	size_t n = m->len - m->pos;

	if (n > len)
		n = len;
	if (n > m->chunk)
		n = m->chunk;
	memcpy(buf, m->p + m->pos, n);
	m->pos += n;
	return (ssize_t)n;
}

static ssize_t mem_write(void *ctx, const void *buf, size_t len)
{
	(void)ctx;
	(void)buf;
	return (ssize_t)len;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct mem m = { .p = data + 1, .len = size > 0 ? size - 1 : 0, .chunk = size > 0 ? (data[0] % 16) + 1 : 1 };
	struct sb_stream s = { .ctx = &m, .read = mem_read, .write = mem_write };

	for (;;) {
		size_t start = m.pos, len;
		struct sb_err err;
		uint8_t *buf;
		int rc = frame_read(&s, FUZZ_CAP, &buf, &len, &err);

		if (rc <= 0) {
			/* An announced length over the cap must be refused as oversized, nothing else. */
			if (m.len - start >= 4 && frame_decode_header(m.p + start) > FUZZ_CAP &&
			    (rc != -1 || err.errnum != EMSGSIZE))
				abort();
			if (rc == 0 && start != m.len)
				abort();
			return 0;
		}
		if (len > FUZZ_CAP || start + 4 + len != m.pos || memcmp(buf, m.p + start + 4, len) != 0)
			abort();
		free(buf);
	}
}
