/* Length-prefixed framing (see frame.h). Owns the rule that no frame is allocated before its
 * announced length has been checked against the cap. */
#include "frame.h"

#include <errno.h>
#include <stdlib.h>
#include <unistd.h>

static ssize_t fd_read(void *ctx, void *buf, size_t len)
{
	return read(*(int *)ctx, buf, len);
}

static ssize_t fd_write(void *ctx, const void *buf, size_t len)
{
	return write(*(int *)ctx, buf, len);
}

void sb_stream_fd(struct sb_stream *s, int *fd)
{
	s->ctx = fd;
	s->read = fd_read;
	s->write = fd_write;
}

void frame_encode_header(uint8_t hdr[4], uint32_t len)
{
	hdr[0] = (uint8_t)(len >> 24);
	hdr[1] = (uint8_t)(len >> 16);
	hdr[2] = (uint8_t)(len >> 8);
	hdr[3] = (uint8_t)len;
}

uint32_t frame_decode_header(const uint8_t hdr[4])
{
	return (uint32_t)hdr[0] << 24 | (uint32_t)hdr[1] << 16 | (uint32_t)hdr[2] << 8 | hdr[3];
}

static int write_all(struct sb_stream *s, const uint8_t *p, size_t len, struct sb_err *err)
{
	while (len > 0) {
		ssize_t n = s->write(s->ctx, p, len);

		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return sb_fail(err, n < 0 ? errno : EPIPE, "writing frame");
		p += n;
		len -= (size_t)n;
	}
	return 0;
}

/* Returns the bytes read before end of stream (== len unless the stream ended), or -1. */
static ssize_t read_full(struct sb_stream *s, uint8_t *p, size_t len, struct sb_err *err)
{
	size_t got = 0;

	while (got < len) {
		ssize_t n = s->read(s->ctx, p + got, len - got);

		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return sb_fail_errno(err, "reading frame");
		if (n == 0)
			break;
		got += (size_t)n;
	}
	return (ssize_t)got;
}

int frame_write(struct sb_stream *s, const void *buf, size_t len, size_t cap, struct sb_err *err)
{
	uint8_t hdr[4];

	if (len > cap || len > UINT32_MAX)
		return sb_fail(err, EMSGSIZE, "frame of %zu bytes exceeds the cap of %zu bytes", len, cap);
	frame_encode_header(hdr, (uint32_t)len);
	if (write_all(s, hdr, sizeof hdr, err) < 0)
		return -1;
	return write_all(s, buf, len, err);
}

int frame_write_rooms(struct sb_stream *s, uint8_t *buf, const size_t *lens, size_t n, size_t cap,
		      struct sb_err *err)
{
	size_t at = 0;

	for (size_t i = 0; i < n; i++)
		if (lens[i] > cap || lens[i] > UINT32_MAX)
			return sb_fail(err, EMSGSIZE, "frame of %zu bytes exceeds the cap of %zu bytes", lens[i], cap);
	for (size_t i = 0; i < n; i++) {
		frame_encode_header(buf + at, (uint32_t)lens[i]);
		at += FRAME_ROOM + lens[i];
	}
	return write_all(s, buf, at, err);
}

int frame_read(struct sb_stream *s, size_t cap, uint8_t **out, size_t *out_len, struct sb_err *err)
{
	uint8_t hdr[4];
	uint8_t *buf;
	uint32_t len;
	ssize_t n;

	*out = NULL;
	*out_len = 0;
	n = read_full(s, hdr, sizeof hdr, err);
	if (n < 0)
		return -1;
	if (n == 0)
		return 0;
	if (n < (ssize_t)sizeof hdr)
		return sb_fail(err, EPROTO, "stream ended inside a frame header");
	len = frame_decode_header(hdr);
	if (len > cap)
		return sb_fail(err, EMSGSIZE, "peer announced a frame of %u bytes, over the cap of %zu bytes",
			       len, cap);
	buf = malloc(len > 0 ? len : 1);
	if (buf == NULL)
		return sb_fail(err, ENOMEM, "allocating a frame of %u bytes", len);
	n = read_full(s, buf, len, err);
	if (n < 0 || (size_t)n < len) {
		free(buf);
		return n < 0 ? -1 : sb_fail(err, EPROTO, "stream ended inside a frame (%zd of %u bytes)", n, len);
	}
	*out = buf;
	*out_len = len;
	return 1;
}
