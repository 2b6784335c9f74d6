/* Bounded capture of one output stream: the first and last bytes within a limit, an exact byte
 * count and a SHA-256 of everything, whatever the command writes. Memory is fixed at init. */
#ifndef SB_OUTPUT_H
#define SB_OUTPUT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <mbedtls/sha256.h>

#include "error.h"

#define OUTPUT_LIMIT_MAX (64u * 1024u * 1024u)

struct output_capture {
	uint8_t *head;        /* first head_cap bytes, filled in order */
	size_t head_cap, head_len;
	uint8_t *tail;        /* ring of the last tail_cap bytes after the head filled */
	size_t tail_cap, tail_pos, tail_len;
	uint64_t total;       /* every byte written, kept or not */
	mbedtls_sha256_context sha;
	uint8_t digest[32];
};

int output_init(struct output_capture *c, size_t limit, struct sb_err *err);
void output_feed(struct output_capture *c, const uint8_t *buf, size_t len);
/* Ends the stream: computes the digest. */
void output_finish(struct output_capture *c);
bool output_truncated(const struct output_capture *c);
/* The kept bytes, head + marker + tail when truncated, in a malloc'd buffer (NUL-terminated). */
uint8_t *output_render(const struct output_capture *c, size_t *len);
/* Ends the capture: its buffers are kept for the next one of the same limit (output.c says why). */
void output_free(struct output_capture *c);
/* The bytes held for the next capture: at most one capture's buffers, those of the last ended. */
size_t output_kept_bytes(void);

#endif
