/* Taking privileges away, in minijail's order: securebits, uid/gid, capabilities, then
 * no_new_privs. Runs between clone() and execve(): no allocation, errors into sb_err. */
#ifndef SB_PRIVILEGES_H
#define SB_PRIVILEGES_H

#include <sys/capability.h>
#include <sys/types.h>

#include "error.h"

/* In init, while it still holds the namespace's full capability set: lock the securebits,
 * settle on uid/gid, empty the bounding and ambient sets, then all of permitted, effective
 * and inheritable. Everything init forks inherits the result. */
int privileges_drop(uid_t uid, gid_t gid, cap_t no_caps, struct sb_err *err);

/* In the command: no_new_privs (needed before Landlock and seccomp) and the rlimits. */
int privileges_limit_command(unsigned long max_processes, struct sb_err *err);

#endif
