/* The one UTF-8 check, for both programs: RFC 3629 (no overlong forms, no surrogates, nothing above
 * U+10FFFF), which is also what jansson accepts in a JSON string. Pure: no allocation, no I/O, so
 * it is safe anywhere. NUL is a valid one-byte sequence here; a caller that must keep NUL out (the
 * agent's output escaping) says so itself. */
#ifndef SB_UTF8_H
#define SB_UTF8_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Bytes of the valid UTF-8 sequence at p (avail bytes remain, at least 1), or 0 when it is not one
 * (a stray continuation byte, an overlong form, a surrogate, a code point above U+10FFFF, or a
 * sequence cut short by the end). */
size_t utf8_seq_len(const uint8_t *p, size_t avail);

/* Are all len bytes at s valid UTF-8? */
bool utf8_valid(const void *s, size_t len);

/* utf8_valid of a NUL-terminated string. */
bool utf8_valid_str(const char *s);

#endif
