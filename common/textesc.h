/* The exec result's escaping rule, read back: output that is not text travels with each byte that
 * is not UTF-8 (and each NUL) as \xNN and each backslash as \\ (sandbox-agent/output.c
 * output_to_utf8 writes it; docs/operations.md states it). The one decoder: the CLI prints the bytes
 * with it and the manager keeps them in files with it. Pure: no allocation, no I/O. */
#ifndef SB_TEXTESC_H
#define SB_TEXTESC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Decode len bytes of escaped text into out, which has room for len bytes (decoding never
 * lengthens); returns the decoded length. A backslash that starts neither escape stands for itself,
 * as the CLI always printed it. */
size_t textesc_decode(const char *text, size_t len, uint8_t *out);

/* Bytes of the token at text[i] (i < len), read as textesc_decode reads it: in escaped text a
 * "\\\\" or a "\\xNN", else one UTF-8 sequence, and 1 for a byte that starts none. A cut between
 * tokens keeps text UTF-8 and every escape whole (the records' bounds, the MCP text's shape). */
size_t textesc_token_len(const char *text, size_t len, size_t i, bool escaped);

#endif
