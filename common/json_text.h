/* JSON text in one allocation of its exact size. json_dumps grows its text by doubling, an
 * allocation and a copy each time (seven for a receipt, three dumps per receipt written); in a
 * process that lives one call, each growth can map and unmap a fresh page of the allocator's
 * (docs/performance.md, "Cut: JSON text written once"). No I/O. */
#ifndef SB_JSON_TEXT_H
#define SB_JSON_TEXT_H

#include <stddef.h>

#include <jansson.h>

#include "error.h"

/* What most texts fit in: a receipt, a result without output, a journal entry, a log line. Written
 * there first, on the stack; a longer text is written a second time into its own room. */
#define JSON_TEXT_SCRATCH 2048

/* json_dumps(j, flags), and its length in *len when len is not NULL. malloc'd, NUL-terminated;
 * NULL on failure (out of memory, or what json_dumps refuses). */
char *sb_json_dumps(const json_t *j, size_t flags, size_t *len);

/* The same text after room bytes the caller fills (a frame's header: control.c), in one allocation
 * of room + the text + its NUL; the text's length (without room) in *len. */
char *sb_json_dumps_after(const json_t *j, size_t flags, size_t room, size_t *len);

/* Seeds jansson's object hashes from getrandom(2). Called first in each program's main, before any
 * JSON value exists and before any thread: jansson otherwise seeds itself on its first object from
 * /dev/urandom, opened without O_CLOEXEC, so a process that clones or forks on another thread at that
 * moment (the manager's workers, the agent's spawner) would hand the descriptor to its child; and a
 * one-shot call pays that open, read and close. Never a 0 seed: jansson reads /dev/urandom for 0. */
int sb_json_seed(struct sb_err *err);

#endif
