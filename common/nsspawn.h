/* What the agent's per-command init and the manager's sandbox init share: a clone into new
 * namespaces with a pidfd, the id-map writes of the parent, and the child's first steps (clean
 * signal state, only its own descriptors). The child-side helpers run between clone() and
 * execve(): no allocation, no stdio, errors through sb_err. */
#ifndef SB_NSSPAWN_H
#define SB_NSSPAWN_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "error.h"

/* clone3 with CLONE_PIDFD into ns_flags (CLONE_NEW*), clone() where clone3 is missing. Returns 0
 * in the child (which must _exit or execve, never return), the pid in the parent, -1 with err. */
pid_t spawn_clone(uint64_t ns_flags, int *pidfd, struct sb_err *err);

/* Parent side: write /proc/<pid>/<name> (setgroups, uid_map, gid_map) in one write. */
int spawn_proc_write(pid_t pid, const char *name, const char *text, struct sb_err *err);

/* Child side: default dispositions for every signal and an empty mask. A handler inherited from
 * the parent would let processes inside signal a namespace's init, which the kernel otherwise
 * protects; blocked signals would carry over into the command. */
int spawn_signals_default(struct sb_err *err);

/* Child side: close every descriptor but the n in keep (sorted in place). A clone holds a copy
 * of each of the parent's descriptors, sockets of other connections included. */
int spawn_fds_keep(unsigned *keep, size_t n, struct sb_err *err);

/* Child side: "ROLE: message" to fd, then _exit(status) at once, so the parent fails with that
 * message and never with a bare exit status. */
__attribute__((noreturn)) void spawn_die(int fd, const char *role, const struct sb_err *err, int status);

#endif
