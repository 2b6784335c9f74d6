/* The journal's two files' shared parts: journal_files.c owns the on-disk records, journal.c the
 * begin, end, settling and lookup built on them. Only journal*.c include it (tests/layering_check.py). */
#ifndef SB_JOURNAL_INTERNAL_H
#define SB_JOURNAL_INTERNAL_H

#include <jansson.h>

#include "journal.h"

#define ENTRY_MAX_BYTES (JOURNAL_MAX_BYTES / 2)
#define SLOTS_NAME ".running" /* a dot: never an exec id's entry, never pruned */
#define SLOT_BYTES 512
#define ENDS_NAME ".ends"
#define END_BYTES (64u * 1024u) /* the larger ends (big outputs) take the files' own syncs */

/* An entry file (dir/<exec id>.json), replaced whole (a temporary, fsynced, renamed). */
int entry_name(const char *exec_id, const char *suffix, char *out, size_t len, struct sb_err *err);
int entry_write(const struct privdir *dir, const char *exec_id, const char *text, size_t len, struct sb_err *err);
int entry_store(const struct privdir *dir, const char *exec_id, json_t *obj, struct sb_err *err);
json_t *entry_load(const struct privdir *dir, const char *exec_id, struct sb_err *err);
void entry_close_lost(const struct privdir *dir, const char *exec_id);
bool entry_exists(const struct privdir *dir, const char *exec_id);

/* The slots (.running) and their ends (.ends). */
int slot_encode(const struct journal_slot *sl, char out[SLOT_BYTES], struct sb_err *err);
void slot_decode(const char buf[SLOT_BYTES], struct journal_slot *sl);
int slot_close_lost(const struct privdir *dir, const struct journal_slot *sl, struct sb_err *err);
int fixed_open(struct journal *j, const char *name, size_t size, int *out, struct sb_err *err);
int end_encode(uint64_t seq, const char *text, size_t len, char **out, size_t *out_len);
json_t *end_load(const struct journal *j, int i, const struct journal_slot *sl);
int file_sync(const struct privdir *dir, const char *name, struct sb_err *err);
/* file_sync for a receipt: the blocks its room reserved past its end given back first (receipt.c
 * room_write leaves them to the journal, off the call's path). */
int receipt_file_sync(const struct privdir *dir, const char *name, struct sb_err *err);
/* Those blocks given back without a sync (the settler); a file that cannot be opened keeps them. */
void receipt_room_release(const struct privdir *dir, const char *name);
int end_restore(struct journal *j, const struct journal_slot *sl, json_t *end, struct sb_err *err);

/* The boot mark (.boot): which boot the unsynced records are from. */
#define BOOT_NAME ".boot"
#define BOOT_BYTES 128
int boot_mark_take(struct journal *j, struct sb_err *err);

#endif
