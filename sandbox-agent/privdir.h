/* The agent's private directories (receipts and key, state, journal, socket), held by descriptor
 * from before the first command. Once a command can act, a path it shares a uid with may lead
 * elsewhere (an ancestor renamed, an empty directory put in its place): every later use goes
 * through the descriptor, and the hiding mounts check the directory's identity (rule R1). */
#ifndef SB_PRIVDIR_H
#define SB_PRIVDIR_H

#include <limits.h>
#include <stdbool.h>
#include <sys/types.h>

#include "error.h"

struct privdir {
	int fd;              /* O_DIRECTORY | O_CLOEXEC, opened without following any link */
	dev_t dev;           /* its identity, for the hiding mount (init compares) */
	ino_t ino;
	char path[PATH_MAX]; /* absolute, as opened: for messages and for the hiding mount */
};

/* Open the absolute directory path (creating it 0700 when create), without following any
 * symbolic link on the way, and check it is a directory owned by this uid with none of the bits
 * in forbidden_mode (e.g. 077: private; 022: not writable by others). */
int privdir_open(struct privdir *d, const char *path, bool create, mode_t forbidden_mode, struct sb_err *err);

/* The same for the directory `name` inside parent. */
int privdir_open_at(struct privdir *d, const struct privdir *parent, const char *name, bool create,
		    mode_t forbidden_mode, struct sb_err *err);

/* A directory the agent only reads and hides (the one holding its TLS key): privdir_open with
 * 022, or, when it is not this uid's, one under a read-only mount that sealed.c accepts. */
int privdir_open_readable(struct privdir *d, const char *path, struct sb_err *err);
void privdir_close(struct privdir *d);

/* Write len bytes to a new file name in dir (O_CREAT|O_EXCL|O_NOFOLLOW, mode 0600), fsync it
 * and the directory: the one way the agent creates a private file. */
int privdir_file_create(const struct privdir *dir, const char *name, const void *data, size_t len,
			struct sb_err *err);

#endif
