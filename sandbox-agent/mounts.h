/* The command's mount view, built by init inside its own mount namespace: nothing here
 * propagates back to the host, and nothing here runs after the command exists. */
#ifndef SB_MOUNTS_H
#define SB_MOUNTS_H

#include <stdbool.h>
#include <stddef.h>

#include "boundary.h"
#include "error.h"
#include "init.h"

/* Private propagation; for a read-only world (`sandbox-agent exec`) the whole host view turned
 * read-only but for the writable roots (cwd first), with a fresh minimal /dev and a private
 * size-bounded /tmp and /dev/shm; a fresh /proc for the new PID namespace and the pid_max bound;
 * an empty read-only tmpfs over each hidden directory, checked to be the very directory the agent
 * holds; then the working directory (checked). *pid_max_set: the bound written, 0 when the
 * kernel refused it. Creates what it must as fs_uid/fs_gid (the
 * command's ids inside), the only ids a new tmpfs of this namespace can store. *bound: the identities
 * of what was bound and entered (init.h), from the descriptors used. */
int mounts_build_view(const struct boundary *b, const char *cwd, uid_t fs_uid, gid_t fs_gid,
		      unsigned long *pid_max_set, struct init_bound *bound, struct sb_err *err);

/* The namespace's pid_max as it reads now (0 when it cannot be read). */
unsigned long mounts_pid_max_read(void);

#endif
