/* JSON text in one allocation of its exact size. json_dumps grows its text by doubling, an
 * allocation and a copy each time (seven for a receipt, three dumps per receipt written); in a
 * process that lives one call, each growth can map and unmap a fresh page of the allocator's
 * (docs/performance.md, "Cut: JSON text written once"). No I/O. */
#ifndef SB_JSON_TEXT_H
#define SB_JSON_TEXT_H

#include <stddef.h>

#include <jansson.h>

/* What most texts fit in: a receipt, a result without output, a journal entry, a log line. Written
 * there first, on the stack; a longer text is written a second time into its own room. */
#define JSON_TEXT_SCRATCH 2048

/* json_dumps(j, flags), and its length in *len when len is not NULL. malloc'd, NUL-terminated;
 * NULL on failure (out of memory, or what json_dumps refuses). */
char *sb_json_dumps(const json_t *j, size_t flags, size_t *len);

#endif
