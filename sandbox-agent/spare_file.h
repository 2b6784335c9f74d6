/* A file made ahead, while no exec needs it, and renamed into its place by the exec that does
 * (issue 32): the exec then pays a rename instead of a new inode (and its blocks), which on a
 * journal-less ext4 costs a scan of recently deleted inodes on the call's path
 * (docs/performance.md, "Cut: the receipt's room and the entry file made ahead"). The receipt's
 * room (receipt.c) and the journal's finished entry (journal.c) use it.
 * Its name starts with a dot, which no exec id does (names.h), so it never takes an exec's file's
 * name. One spare per directory and name; the lock keeps a take on one connection from racing the
 * make on another, and a take that finds it busy says so (the caller makes its file as before). */
#ifndef SB_SPARE_FILE_H
#define SB_SPARE_FILE_H

#include <pthread.h>
#include <stddef.h>

#include "error.h"
#include "privdir.h"

struct spare_file {
	pthread_mutex_t lock;
	const char *name; /* in the directory: a leading dot */
	int fd;           /* the spare, made and not yet taken; -1 when none */
};

void spare_file_init(struct spare_file *sf, const char *name);
/* Closes the spare (its file stays: the next make replaces it). */
void spare_file_close(struct spare_file *sf);

/* Makes the spare in dir when there is none: created exclusively (no symlink followed), with
 * bytes reserved (fd_reserve: allocated, the size left at 0) when bytes > 0. A spare an earlier life of the agent left is
 * removed first and never used: its blocks and its bytes are not known. 0, or -1 with err. */
int spare_file_make(struct spare_file *sf, const struct privdir *dir, size_t bytes, struct sb_err *err);

/* The spare made from from, a file of dir that nothing else uses (a pruned journal entry kept as an
 * empty file, journal.c journal_spare_make): opened without following a link, refused unless a plain
 * file of one name, emptied, and renamed into the spare's name over one an earlier life left. No
 * inode is allocated and none is freed. 0; 1 when there is a spare already (from untouched); -1
 * with err (err->errnum ENOENT: no such file): the caller makes the spare (spare_file_make). */
int spare_file_adopt(struct spare_file *sf, const struct privdir *dir, const char *from, struct sb_err *err);

/* The spare, with len bytes of text written into it first (so that a reader of name sees the whole
 * file or none), renamed to name in dir, never over an existing name (RENAME_NOREPLACE). Its
 * descriptor, or -1 with errno: EEXIST (name exists; a spare nothing was written into is kept for
 * the next take), EAGAIN (no spare, or the make holds it), or the write's or rename's (the spare is
 * dropped). */
int spare_file_take(struct spare_file *sf, const struct privdir *dir, const char *name, const char *text,
		    size_t len);

#endif
