/* Completion receipts: written only after init is reaped, in a directory outside every
 * command's mount view, created exclusively, and kept before the result is reported: fsynced
 * (file and directory: `exec`, whose readers know no boot), or (serve) their bytes inside the
 * journal's end, kept for this boot (a crash of the machine leaves the journal in doubt: journal.h),
 * the file synced after. */
#ifndef SB_RECEIPT_H
#define SB_RECEIPT_H

#include <limits.h>
#include <stdbool.h>

#include "boundary.h"
#include "error.h"
#include "privdir.h"
#include "secret.h"
#include "spare_file.h"

struct receipt_info {
	char path[PATH_MAX];
	char nonce_hex[2 * SECRET_NONCE_BYTES + 1];
	bool written, verified;
	bool boundary_confirmed;
	char *text;              /* the file's exact bytes (malloc'd), for the protocol */
	size_t text_len;
	bool unsynced;           /* written by receipt_write_unsynced, receipt_sync not yet done */
	int fd;                  /* the file, while unsynced */
	bool has_room;           /* receipt_room_take: room_fd is the receipt's room, not yet used */
	int room_fd;
};

/* Room for the receipt, taken before the command runs: <exec_id>.room in dir, RECEIPT_ROOM_BYTES
 * allocated (posix_fallocate), so that a filesystem filled while the command runs (by another
 * tenant, when the volume shares it: rule N4) cannot keep the receipt from being written; the
 * receipt is written into it and renamed into place (receipt_write_unsynced). -1 with err (ENOSPC:
 * no room now; the exec is refused before it runs); info is then as it was. */
#define RECEIPT_ROOM_BYTES 8192
int receipt_room_take(const struct privdir *dir, const char *exec_id, struct receipt_info *info, struct sb_err *err);

/* receipt_room_take through the spare made ahead (spare_file.h: RECEIPT_SPARE_NAME in dir, made with
 * RECEIPT_ROOM_BYTES allocated, at start and after each result), renamed to the exec's room, never
 * over an existing name (refused then, with EEXIST, as receipt_room_take refuses it); without a
 * spare, as receipt_room_take. */
#define RECEIPT_SPARE_NAME ".spare.room"
int receipt_room_take_spare(struct spare_file *spare, const struct privdir *dir, const char *exec_id,
			    struct receipt_info *info, struct sb_err *err);

/* A room that was not used (the exec ended without a receipt, or was refused): removed. */
void receipt_room_drop(const struct privdir *dir, const char *exec_id, struct receipt_info *info);

/* Fail when a receipt for this exec id exists already: checked before the command runs, so
 * a reused id is refused instead of running a command that can never get its receipt. */
int receipt_reserve_check(const struct privdir *dir, const char *exec_id, struct sb_err *err);

/* Build, sign, write (O_CREAT|O_EXCL|O_NOFOLLOW|O_CLOEXEC, 0600) and fsync the receipt, then
 * read it back and verify it. dir was opened before the command ran. info comes zeroed, or with
 * the room receipt_room_take put in it (then the receipt is written there). */
int receipt_write(const struct privdir *dir, const struct exec_request *req, const struct exec_outcome *out,
		  const struct secrets *sec, struct receipt_info *info, struct sb_err *err);

/* receipt_write without the fsyncs: the file written and kept open (info->unsynced), so that the
 * caller writes its other files before syncing them all (serve: the journal's finished entry).
 * Nothing may rely on the receipt, and no result may be reported, before receipt_sync, or before
 * journal_end made its bytes durable (then the journal's settler syncs the file, and
 * receipt_info_free only closes it). */
int receipt_write_unsynced(const struct privdir *dir, const struct exec_request *req, const struct exec_outcome *out,
			   const struct secrets *sec, struct receipt_info *info, struct sb_err *err);

/* The file, then its directory, fsynced. On -1 the file is removed and info->written is false:
 * a receipt that may not survive is no receipt. No-op unless info->unsynced. */
int receipt_sync(const struct privdir *dir, struct receipt_info *info, struct sb_err *err);

/* Frees the text; closes the file of a receipt never synced. */
void receipt_info_free(struct receipt_info *info);

#endif
