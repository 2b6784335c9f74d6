/* The exec result's escaping rule, both ways, and the one guard on everything the project prints that
 * a command wrote (docs/operations.md, "the exec result"): no byte a terminal acts on (C0 controls but
 * newline and tab, DEL, C1, the bidi formatting characters, the line and paragraph separators) and no
 * byte that is not UTF-8 reaches a reader raw. textesc_encode writes the rule (the agent, for each
 * stream), textesc_decode reads it back (the CLI prints the bytes with it, the manager keeps them in
 * files with it), textesc_json_dumps writes JSON for a terminal. No I/O. */
#ifndef SB_TEXTESC_H
#define SB_TEXTESC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

/* Bytes of the sequence at p (avail >= 1 bytes remain) that travels as itself: valid UTF-8 that no
 * terminal acts on. 0 when the byte at p must be escaped: a byte that is not UTF-8, NUL, another C0
 * control but '\n' and '\t', DEL, a C1 control (U+0080-U+009F), a bidi formatting character (U+061C,
 * U+200E, U+200F, U+202A-U+202E, U+2066-U+2069) or U+2028/U+2029. */
size_t textesc_plain_len(const uint8_t *p, size_t avail);

/* Make arbitrary bytes into text safe to print: when every sequence is plain (textesc_plain_len), the
 * bytes as they are; otherwise every byte of each sequence that is not (a C1 control's two, a bidi
 * character's three) becomes the four characters \xNN and every backslash is doubled, so that
 * textesc_decode gives the bytes back exactly. *escaped says which form was used. The result is
 * valid UTF-8 without NUL: strlen is its length. malloc'd; NULL when out of memory. */
char *textesc_encode(const uint8_t *in, size_t len, size_t *out_len, bool *escaped);

/* A message for a terminal line (one may quote what a command wrote: a path, git's words): s as
 * textesc_encode makes it, or NULL for NULL or out of memory. malloc'd. */
char *textesc_str(const char *s);

/* Decode len bytes of escaped text into out, which has room for len bytes (decoding never
 * lengthens); returns the decoded length. A backslash that starts neither escape stands for itself,
 * as the CLI always printed it. */
size_t textesc_decode(const char *text, size_t len, uint8_t *out);

/* Bytes of the token at text[i] (i < len), read as textesc_decode reads it: in escaped text a
 * "\\\\" or a "\\xNN", else one UTF-8 sequence, and 1 for a byte that starts none. A cut between
 * tokens keeps text UTF-8 and every escape whole (the records' bounds, the MCP text's shape). */
size_t textesc_token_len(const char *text, size_t len, size_t i, bool escaped);

/* json_dumps(j, flags) for a terminal or a log: jansson escapes C0 in strings itself; every DEL, C1,
 * bidi or separator character that a string holds (text stored before the agent escaped them, a
 * field the agent never escapes) is written as \uXXXX too. Still valid JSON, read back by any parser
 * to the same strings. malloc'd; NULL on failure. */
char *textesc_json_dumps(const json_t *j, size_t flags);

#endif
