/* Randomness from the kernel CSPRNG (getrandom) and hex encoding, for nonces, ids and keys. */
#ifndef SB_RANDOM_H
#define SB_RANDOM_H

#include <stddef.h>
#include <stdint.h>

#include "error.h"

/* Fill buf with len bytes from getrandom(2); blocks only until the pool is initialised. */
int sb_random_bytes(void *buf, size_t len, struct sb_err *err);

/* Write 2*len lowercase hex digits and a NUL into out (which holds 2*len+1 bytes). */
void sb_hex_encode(const uint8_t *in, size_t len, char *out);

/* The value of one hex digit (either case), or -1 when c is not one. */
int sb_hex_value(char c);

/* Decode exactly out_len bytes from hex; fails on odd length, a wrong length or a non-hex digit. */
int sb_hex_decode(const char *hex, uint8_t *out, size_t out_len, struct sb_err *err);

/* A random identifier of `bytes` bytes as hex into out (2*bytes+1 long). */
int sb_random_hex(char *out, size_t bytes, struct sb_err *err);

#endif
