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

/* What a child exits with after writing a setup failure to its error pipe (spawn_die). */
#define SPAWN_EXIT_SETUP_FAILED 125

/* clone3 with CLONE_PIDFD into ns_flags (CLONE_NEW*, and CLONE_PARENT for a sibling), clone() where clone3 is missing. Returns 0
 * in the child (which must _exit or execve, never return), the pid in the parent, -1 with err. */
pid_t spawn_clone(uint64_t ns_flags, int *pidfd, struct sb_err *err);

/* The same, born in the cgroup of the directory descriptor cgroup_fd (clone3 CLONE_INTO_CGROUP):
 * the child never runs outside it, not even for its first instruction. cgroup_fd < 0: as
 * spawn_clone. No clone() fallback with a cgroup: ENOSYS is an error then. */
pid_t spawn_clone_into(uint64_t ns_flags, int cgroup_fd, int *pidfd, struct sb_err *err);

/* Parent side: write /proc/<pid>/<name> (setgroups, uid_map, gid_map) in one write. */
int spawn_proc_write(pid_t pid, const char *name, const char *text, struct sb_err *err);

/* Parent side: the id maps of the new user namespace of pid, one id each: setgroups "deny", then
 * gid_map "inside_gid outside_gid 1", then uid_map "inside_uid outside_uid 1". Every write is
 * checked whole; 0, or -1 with err naming the file. */
int spawn_id_maps_write(pid_t pid, uid_t inside_uid, uid_t outside_uid, gid_t inside_gid, gid_t outside_gid,
			struct sb_err *err);

/* The same maps with setgroups left allowed, for a privileged writer (CAP_SETGID over the
 * namespace) whose child must drop the supplementary groups it inherited (setgroups(0, NULL),
 * which a denied namespace refuses) before its last capability goes. Never for an unprivileged
 * writer, whose gid_map the kernel refuses this way. */
int spawn_id_maps_write_groups_open(pid_t pid, uid_t inside_uid, uid_t outside_uid, gid_t inside_gid,
				    gid_t outside_gid, struct sb_err *err);

/* Child side: default dispositions for every signal and an empty mask. A handler inherited from
 * the parent would let processes inside signal a namespace's init, which the kernel otherwise
 * protects; blocked signals would carry over into the command, and so would ignored ones (execve
 * keeps SIG_IGN). Every signal the kernel has, the libc's own included: sigaction() refuses those
 * (glibc's 32 and 33, musl's 32 to 34), and musl leaves its 34 ignored after a call that
 * broadcast to the agent's threads (setgroups, __synccall). */
int spawn_signals_default(struct sb_err *err);

/* Child side: close every descriptor but the n in keep (sorted in place). A clone holds a copy
 * of each of the parent's descriptors, sockets of other connections included. */
int spawn_fds_keep(unsigned *keep, size_t n, struct sb_err *err);

/* Child side: become uid and gid (real, effective and saved; gid first, while the uid may still
 * change it). Raw syscalls: the libc wrappers broadcast the change to every thread the libc
 * remembers (glibc's setxid signal, musl's __synccall), and a clone of a multi-threaded parent has
 * only one (the broadcast would signal it forever, or signal unrelated tids). */
int spawn_ids_set(uid_t uid, gid_t gid, struct sb_err *err);

/* Child side, just before execve: every descriptor above 2 close-on-exec (the error pipe stays
 * usable until the execve succeeds), so the program starts with stdin, stdout and stderr only. */
int spawn_fds_cloexec_above_stdio(struct sb_err *err);

/* Child side: "ROLE: message" to fd, then _exit(status) at once, so the parent fails with that
 * message and never with a bare exit status. */
__attribute__((noreturn)) void spawn_die(int fd, const char *role, const struct sb_err *err, int status);

#endif
