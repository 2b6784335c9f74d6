/* Whole writes to a descriptor, and the one copy of private-file creation: a new file beneath a
 * held directory, written whole and made durable, or no file at all; and a private file that
 * lives on (opened or created 0600, never through a link). fd_write_all is safe between
 * clone() and execve() (no allocation, no locks), so the namespace inits use it as well as ordinary
 * code; the file functions are for ordinary code (they format messages into a struct sb_err). */
#ifndef SB_FDIO_H
#define SB_FDIO_H

#include <stddef.h>
#include <sys/types.h>

#include "error.h"

/* Descriptors 0, 1 and 2 made sure of, each closed one opened on /dev/null (read-write), before a
 * program opens anything else: a program started with one closed (`2>&-`, a careless supervisor) would
 * otherwise get its first file there, and a log line or a child's stderr would land in it (the
 * manager's lock file or records, the agent's keys). Every program's first step. 0, or -1 with
 * errno (no /dev/null). */
int fd_stdio_ensure(void);

/* All of buf to fd, through EINTR and short writes. 0 once everything is written; -1 with errno
 * set otherwise (EPIPE when the reader is gone and SIGPIPE is ignored, or for a write of 0). */
int fd_write_all(int fd, const void *buf, size_t len);

/* Exactly len bytes from fd into buf, through EINTR and short reads; safe between clone() and execve()
 * as fd_write_all. 0, or -1 at an end of file before len bytes (errno unchanged) or a failed read. */
int fd_read_exact(int fd, void *buf, size_t len);

/* Blocks for bytes reserved in fd, its size unchanged (FALLOC_FL_KEEP_SIZE): a write within them
 * later allocates nothing, and the file reads as before. Where the filesystem cannot reserve past
 * the end, posix_fallocate instead (the size grows to bytes; the writer cuts it). 0, or an errno
 * value (ENOSPC when the room is not there). */
int fd_reserve(int fd, size_t bytes);

/* The blocks fd_reserve left past the file's end given back (a truncate to the file's own size;
 * ext4 and tmpfs free them, nothing the file holds changes). 0, or -1 with errno. */
int fd_reserve_release(int fd);

/* Create name (one component: no '/') beneath dirfd with mode, exclusively (O_EXCL: never opens
 * an existing file) and without following a symlink (O_NOFOLLOW); hand it to uid:gid unless they
 * are (uid_t)-1 and (gid_t)-1; write all of data; fsync the file, then dirfd so the entry itself
 * survives a crash. dir is dirfd's path, for messages only. On -1 nothing is left behind (a file
 * this call created is unlinked) and err->errnum is the failing call's errno: EEXIST when name
 * existed (a symlink included), EIO when a call failed without one. */
int fd_file_create(int dirfd, const char *dir, const char *name, mode_t mode, uid_t uid, gid_t gid,
		   const void *data, size_t len, struct sb_err *err);

/* fd_file_create without its fsyncs, for a caller that writes several files and then syncs them
 * together (the later fsyncs find most of their work committed by the first): name created as
 * fd_file_create does and written whole; the open descriptor (O_CLOEXEC), not yet synced. The
 * caller fsyncs it and then dirfd before anyone relies on the file. On -1 nothing is left. */
int fd_file_write_new(int dirfd, const char *dir, const char *name, mode_t mode, const void *data, size_t len,
		      struct sb_err *err);

/* fd_file_create for an absolute or relative path: its parent directory is opened (following
 * symlinks in the ancestors, as open(2) would) and the last component created beneath it. */
int fd_file_create_path(const char *path, mode_t mode, uid_t uid, gid_t gid, const void *data, size_t len,
			struct sb_err *err);

/* A private file that lives on (a database, a lock file): path opened read-write, created 0600
 * when missing, never through a final symbolic link (O_NOFOLLOW); it must be a regular file, and
 * any other mode is tightened to 0600 (fchmod: the umask does not matter). The descriptor
 * (O_CLOEXEC), or -1 with err: ENOENT when its directory does not exist, ELOOP for a link. */
int fd_private_open(const char *path, struct sb_err *err);

/* The check and tightening of fd_private_open for a file opened otherwise (path for messages). */
int fd_private_tighten(int fd, const char *path, struct sb_err *err);

/* Replace name beneath dirfd atomically: data goes to tmp (a stale tmp from a crash is removed
 * first) as fd_file_create writes it, file fsynced (not dirfd: the tmp's name need not survive),
 * tmp is renamed over name and dirfd fsynced: two fsyncs. A reader sees the old file or the new
 * one, never half of one. On -1, tmp is gone and name is unchanged. */
int fd_file_replace(int dirfd, const char *dir, const char *name, const char *tmp, mode_t mode,
		    const void *data, size_t len, struct sb_err *err);

#endif
