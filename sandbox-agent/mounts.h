/* The command's mount view, built by init inside its own mount namespace: nothing here
 * propagates back to the host, and nothing here runs after the command exists. */
#ifndef SB_MOUNTS_H
#define SB_MOUNTS_H

#include <stdbool.h>
#include <stddef.h>

#include "error.h"

/* Private propagation, a fresh /proc for the new PID namespace, the pid_max bound, an empty
 * read-only tmpfs over each hidden directory, then the working directory (checked). */
int mounts_build_view(char *const *hidden, size_t n_hidden, unsigned long max_processes,
		      const char *cwd, bool *pid_max_applied, struct sb_err *err);

#endif
