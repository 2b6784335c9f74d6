/* The agent's journal: one file per exec it finished, in its private state (hidden from every
 * command), so a manager that lost its connection can ask what became of an exec instead of
 * guessing. Bounded: the oldest finished entries go first once the total passes a cap.
 * An exec's "accepted, may run" entry goes into one of two fixed slots of a file that exists
 * (.running, created once): overwritten in place, no new name per call. Each slot has an end beside
 * it (.ends, created once): an exec's finished entry, its receipt's bytes inside, written there in
 * place; its two files (the entry, the receipt) are then written too, and a slot is reused only once
 * they are written and the receipt's room given back (the settler, off the call's path). The begin,
 * the end and the two files are page-cache writes (issue 32): they survive every death of the agent,
 * not the machine's. So the journal carries the boot it was written under
 * (.boot, made durable once at open): a journal opened under another boot may have lost any of
 * them, so it is in doubt: a whole record still says what it says (digests, the receipt's HMAC), a
 * missing or damaged one is uncertain, never "unknown", and no exec is accepted on it any more. */
#ifndef SB_JOURNAL_H
#define SB_JOURNAL_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "error.h"
#include "names.h"
#include "privdir.h"
#include "spare_file.h"

#define JOURNAL_MAX_BYTES (64u * 1024u * 1024u)
#define JOURNAL_PRUNE_TO (JOURNAL_MAX_BYTES / 4 * 3) /* what a prune leaves, at most (journal.c) */
/* Pruned entries kept as empty files for the next spares, at most (journal.c journal_prune): a
 * prune of small entries keeps some 13 000; past the bound it removes them as before. */
#define JOURNAL_FREED_MAX 32768u

/* JOURNAL_IN_DOUBT: no record, in a journal from another boot (the record may have been lost). */
enum journal_state { JOURNAL_UNKNOWN, JOURNAL_RUNNING, JOURNAL_FINISHED, JOURNAL_IN_DOUBT };

#define BOOT_ID_LEN 36 /* /proc/sys/kernel/random/boot_id: a UUID's text */

struct journal_slot {
	uint64_t seq;             /* 0: empty */
	char exec_id[EXEC_ID_MAX + 1];
	uint64_t generation;
	bool open;                /* begun, its finished entry not yet written (or, past a big end or a
	                           * fallback file, not yet durable: journal_finish_sync) */
	bool room_pending;        /* ended; its receipt's room not yet given back (the settler) */
};

struct journal {
	const struct privdir *dir;
	const struct privdir *receipts; /* where the ends' receipts are restored and synced, or NULL */
	int slots_fd;             /* dir/.running, two slots */
	int ends_fd;              /* dir/.ends, the slots' ends */
	pthread_mutex_t lock;     /* the slots: Query reads them while an exec runs */
	pthread_cond_t changed;   /* a slot's room given back, or the settler or a prune stopped */
	bool settler_running, settler_stop;
	struct journal_slot slot[2];
	uint64_t bytes;           /* at least the entries' total: a prune's scan runs only past the cap */
	char boot[BOOT_ID_LEN + 1];  /* this boot's id, read once at open */
	struct spare_file spare;  /* dir/.spare.entry, empty, made ahead (journal_spare_make) */
	uint64_t freed_lo, freed_hi; /* dir/.freed.<n> for lo <= n < hi: pruned entries, emptied, kept
				      * for the next spares (journal_prune, journal_spare_make) */
	uint64_t freed_max;       /* JOURNAL_FREED_MAX (tests lower it) */
	bool pruning;             /* the pruner thread runs (journal_prune_start) */
	char prune_keep[EXEC_ID_MAX + 1]; /* the entry it never prunes: the exec that started it */
	bool doubt;               /* opened under another boot than its unsynced records': journal_open */
	char doubt_why[160];      /* why, for the answers it makes uncertain */
};

struct journal_entry {
	enum journal_state state;
	uint64_t generation;
	char *result_json;     /* malloc'd; NULL unless finished */
	char *receipt_text;    /* malloc'd; NULL when no receipt was written */
};

/* dir: the journal directory, held by descriptor (privdir.h), kept open while j is used; receipts:
 * the receipts directory (or NULL: no end keeps a receipt file). A slot whose end is durable has its
 * files made whole and durable from it (a power loss may have lost them). Entries left running by an
 * earlier agent (a slot without a finished entry, or an older agent's running file) are closed as
 * uncertain: that agent died with the exec in flight, and nobody can say how it ended. Starts the
 * settler thread, which gives the receipts' rooms back. */
int journal_open(struct journal *j, const struct privdir *dir, const struct privdir *receipts, struct sb_err *err);

/* The next finished entry's file, made while no exec needs it (serve: after each result), so that
 * journal_end writes into it and renames it (spare_file.h) instead of making a new file on the
 * call's path. Its name, .spare.entry, is no entry's: the open reads only *.json, the prune skips
 * dot names. It is the oldest entry a prune kept (.freed.<n>) while there is one, so that a journal
 * at its cap neither frees nor allocates an inode per call; else a new file. */
int journal_spare_make(struct journal *j, struct sb_err *err);

/* journal_open under a given boot id (BOOT_ID_LEN characters): for tests, which simulate a restart
 * of the machine with another id; journal_open reads the kernel's (journal_boot_id). The journal
 * is in doubt when its .boot names another boot, says it was in doubt already, or is damaged; .boot
 * then names this boot, durably, before anything else is written unsynced. */
int journal_open_boot(struct journal *j, const struct privdir *dir, const struct privdir *receipts,
		      const char *boot, struct sb_err *err);

/* The kernel's boot id (/proc/sys/kernel/random/boot_id), read through one descriptor; in the
 * failpoint build (make failpoints) SB_FAILPOINT_BOOT_ID replaces it, so that a test can restart
 * an agent "after a crash of the machine" without one. */
int journal_boot_id(char out[BOOT_ID_LEN + 1], struct sb_err *err);

/* Stops the settler thread (the rooms it had not given back yet are given back here) and waits
 * for a prune. */
void journal_close(struct journal *j);

/* Record an accepted exec before it runs; refuses an exec id the journal has seen (EEXIST), and
 * every exec on a journal in doubt (EIO: an id it lost may be this one; a new sandbox serves). */
int journal_begin(struct journal *j, const char *exec_id, uint64_t generation, struct sb_err *err);

/* A finished entry written and not yet synced (journal_finish_write). */
struct journal_pending {
	int fd;                   /* the new entry, to fsync, or -1 */
	char *text;               /* or the entry that replaces a running file of its own, or NULL */
	size_t len;
};

/* Record the end in two halves, so that the receipt and the entry are written before either is
 * synced: journal_finish_write writes the entry, journal_finish_sync makes it durable and only then
 * frees the exec's slot; until then the slot says the exec may have run, and a Query says running.
 * An exec that fell back to a running file of its own (both slots open) has that file replaced,
 * durably, in journal_finish_sync: a reader sees it finished only once it is durable. Call
 * journal_finish_sync (or journal_pending_drop) after every journal_finish_write that returned 0. */
int journal_finish_write(struct journal *j, const char *exec_id, uint64_t generation, const char *result_json,
			 const char *receipt_text, struct journal_pending *p, struct sb_err *err);
int journal_finish_sync(struct journal *j, const char *exec_id, struct journal_pending *p, struct sb_err *err);
void journal_pending_drop(struct journal_pending *p);

/* The end with no sync, when the exec's begin is in a slot and its entry fits the slot's end: the
 * entry (receipt_text, the bytes of the receipt file already written as receipts/<id>.json, inside)
 * written into the end, then the entry file written, both unsynced: they hold for this boot, and a
 * crash of the machine makes the journal one in doubt (.boot). Returns 1 when the end is written
 * (the result may be reported; the receipt file must not be synced or removed by the caller: the
 * settler gives its room back, before the slot is reused), 0 when it does not apply or its write
 * failed (nothing relies on the end then: use journal_finish_write/_sync), -1 on a bad result. */
int journal_end(struct journal *j, const char *exec_id, uint64_t generation, const char *result_json,
		const char *receipt_text, struct sb_err *err);

/* Once the journal may be past its cap (JOURNAL_MAX_BYTES), a prune down to JOURNAL_PRUNE_TO on a
 * thread of its own, never keep's entry nor those of the execs in the slots; at most one at a time.
 * Called after an exec's result is sent (serve_conn.c): a prune of some 20 000 entries took 1.5 s,
 * which the call that passed the cap used to wait for. journal_close waits for it. */
void journal_prune_start(struct journal *j, const char *keep);

/* Waits until no prune runs; for tests. */
void journal_prune_wait(struct journal *j);

/* Waits until the settler has given back every ended exec's receipt room; for tests. */
void journal_settle_wait(struct journal *j);

/* Both halves: the result JSON and the receipt's bytes (may be NULL), durable on return. */
int journal_finish(struct journal *j, const char *exec_id, uint64_t generation, const char *result_json,
		   const char *receipt_text, struct sb_err *err);

/* Look an exec up; state JOURNAL_UNKNOWN when there is no entry, JOURNAL_IN_DOUBT when there is
 * none in a journal in doubt (j->doubt_why says why). */
int journal_lookup(struct journal *j, const char *exec_id, struct journal_entry *out, struct sb_err *err);

void journal_entry_free(struct journal_entry *e);

#endif
