/* The agent's journal: one file per exec it accepted, in its private state (hidden from every
 * command), so a manager that lost its connection can ask what became of an exec instead of
 * guessing. Bounded: the oldest finished entries go first once the total passes a cap. */
#ifndef SB_JOURNAL_H
#define SB_JOURNAL_H

#include <stddef.h>
#include <stdint.h>

#include "error.h"
#include "privdir.h"

#define JOURNAL_MAX_BYTES (64u * 1024u * 1024u)

enum journal_state { JOURNAL_UNKNOWN, JOURNAL_RUNNING, JOURNAL_FINISHED };

struct journal_entry {
	enum journal_state state;
	uint64_t generation;
	char *result_json;     /* malloc'd; NULL unless finished */
	char *receipt_text;    /* malloc'd; NULL when no receipt was written */
};

/* dir: the journal directory, held by descriptor (privdir.h). Entries left "running" by an earlier agent are closed as
 * uncertain: that agent died with the exec in flight, and nobody can say how it ended. */
int journal_open(const struct privdir *dir, struct sb_err *err);

/* Record an accepted exec before it runs; refuses an exec id the journal has seen (EEXIST). */
int journal_begin(const struct privdir *dir, const char *exec_id, uint64_t generation, struct sb_err *err);

/* Record the end: the result JSON and the receipt's bytes (may be NULL). */
int journal_finish(const struct privdir *dir, const char *exec_id, uint64_t generation, const char *result_json,
		   const char *receipt_text, struct sb_err *err);

/* Look an exec up; state JOURNAL_UNKNOWN when there is no entry. */
int journal_lookup(const struct privdir *dir, const char *exec_id, struct journal_entry *out, struct sb_err *err);

void journal_entry_free(struct journal_entry *e);

#endif
