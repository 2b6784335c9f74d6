/* The MCP progress notification's view of live output: the last non-empty line of a chunk, made
 * terminal-safe (no control character, no escape sequence, no bidi character: textesc.h's rule, the
 * bytes dropped instead of escaped, since the summary is only a glance) and capped at a length that
 * never cuts a UTF-8 sequence. The whole output stays in the tool's result; this is never the record. */
#ifndef SB_LIVE_SUMMARY_H
#define SB_LIVE_SUMMARY_H

#include <stdbool.h>
#include <stddef.h>

#define LIVE_SUMMARY_MAX 120 /* bytes of a summary, without its NUL */

/* From a chunk's text (escaped by the exec result's rule when escaped): its last line that still has
 * something to show replaces summary; a chunk without one leaves summary as it was. true when it
 * changed. */
bool live_summary_take(char summary[LIVE_SUMMARY_MAX + 1], const char *text, size_t len, bool escaped);

#endif
