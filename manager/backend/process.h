/* The process backend's parts (backend_process.c), one concern per file, and what they share:
 *   process_root.c      the root the sandbox will see, planned as steps for sandbox init
 *   process_users.c     its /etc/passwd and /etc/group: the host's, and an entry for its own ids
 *   process_launch.c    one prepare(): paths, pipes, clone, id maps, release, the waits
 *   process_cgroup.c    the sandbox's own cgroup v2 under the delegated parent, its limits
 *   process_evidence.c  the sandbox's init seen from outside: its identity, stop, the evidence
 *   backend_process.c   the operations of backend.h over those parts
 * Sandbox init itself (inside, between clone and execve) is sandbox-agent/sandbox_init.c. Nothing
 * here is visible outside manager/backend/. */
#ifndef SB_PROCESS_H
#define SB_PROCESS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include "agent_dir.h"
#include "backend.h"
#include "cleanup.h"
#include "error.h"
#include "sandbox_init.h"

/* waitid() on a pidfd; older headers lack the name (after <sys/wait.h>, where newer ones have it). */
#ifndef P_PIDFD
#define P_PIDFD 3
#endif

#define CGROUP_NAME_MAX 128

/* The backend: its settings and, when the host delegates one, the cgroup v2 directory every
 * sandbox's own cgroup is made in. */
struct process {
	struct backend be;
	struct process_settings set;
	int cgroup_fd;                  /* the delegated parent (O_DIRECTORY), -1 when none */
};

static inline struct process *process_of(struct backend *be)
{
	return (struct process *)be;
}

/* What a sandbox_handle's runtime bytes hold for this backend (backend.h: nobody else reads them). */
#define PROCESS_HANDLE_MAGIC 0x70726f63u /* "proc": filled by prepare(), adopt() */

struct process_handle {
	uint32_t magic;                 /* PROCESS_HANDLE_MAGIC; anything else: the handle holds nothing */
	pid_t pid;                      /* the sandbox's init on the host */
	int pidfd;                      /* -1 when not held */
	char cgroup[CGROUP_NAME_MAX];   /* its cgroup under the delegated parent, or "" */
	pid_t net_pid;                  /* its slirp4netns, this manager's child; 0: none (or not ours) */
};

_Static_assert(sizeof(struct process_handle) <= SANDBOX_RUNTIME_BYTES, "struct process_handle outgrew the handle");

static inline struct process_handle *process_handle_of(struct sandbox_handle *h)
{
	return (struct process_handle *)h->runtime.bytes;
}

static inline const struct process_handle *process_handle_get(const struct sandbox_handle *h)
{
	return (const struct process_handle *)h->runtime.bytes;
}

/* ---- process_root.c ---- */

/* A sandbox path we mount at must be plain: '..' or '.' could climb out of what the plan meant. */
bool path_plain(const char *p);

/* The whole root into s, in mount order (a parent always before what is mounted inside it): the
 * host's system directories, /etc (its passwd and group from users_dir: process_users.c), /dev,
 * /proc, /tmp, the agent, the mount plan, the credentials and the agent's private directories d,
 * each anchored (steps_anchor). agent and users_dir: canonical. */
int root_plan(struct steps *s, const struct sandbox_spec *spec, const struct agent_dir *d, const char *agent,
	      const char *users_dir, const struct process_settings *set, struct sb_err *err);

void steps_free(struct steps *s);

/* ---- process_users.c ---- */

/* dir (made here, 0755, the manager's) gets `passwd` and `group` for the sandbox's /etc: those of
 * host_etc ("/etc"; when others may read them, at most 4 MiB each), with an entry "sandbox" for uid,
 * whose home is home, and one for gid, each put first where the host's file has no entry for the
 * id. Each file is replaced whole. 0, or -1 with err. */
int users_files_write(const char *dir, const char *host_etc, uid_t uid, gid_t gid, const char *home,
		      struct sb_err *err);

/* ---- process_launch.c ---- */

/* prepare(): check the spec, start the sandbox, wait for its agent (bounded); on failure nothing
 * is left running, or err says that its end is not proven. */
int process_launch(struct process *p, const struct sandbox_spec *spec, struct sandbox_handle *h, struct sb_err *err);

/* ---- process_net.c ---- */

/* The network policy on a sandbox whose init (init_pid, init_pidfd) is cloned into its own network
 * namespace and not yet released: `none` (and `proxy`), nothing more; `open`, slirp4netns attached
 * and its device configured (bounded), its words to log_fd. In two halves, so that the wait for
 * slirp4netns's ready overlaps sandbox init's setup and the agent's start (process_launch.c): start
 * spawns it and gives the read end of its ready pipe (-1 when the policy needs no helper); ready
 * waits for its ready (bounded) and closes the pipe. The launch calls ready before prepare() returns, so no
 * call, and so no command, ever runs before the network is configured. 0, or -1 with err. */
int process_net_start(const struct process_settings *set, enum sandbox_network network, pid_t init_pid,
		      int init_pidfd, int log_fd, pid_t *net_pid, int *ready_fd, struct sb_err *err);
int process_net_ready(const struct process_settings *set, int *ready_fd, struct sb_err *err);

/* backend_ops.net_listen: a TCP socket bound and listening on 127.0.0.1:port inside the sandbox's
 * network namespace, made by a short-lived child of the manager that joins that namespace, and
 * handed to the manager (close-on-exec) over SCM_RIGHTS; nothing inside the sandbox ever holds it. */
int process_net_listen(struct backend *be, const struct sandbox_handle *h, uint16_t port, int *fd, struct sb_err *err);

/* Once the sandbox's init is proven gone: its network helper (a child of this manager, or 0 for
 * none) has left by itself, or is killed, and is reaped, within a bound. *net_pid becomes 0. */
void process_net_reap(pid_t *net_pid);

/* ---- process_cgroup.c ---- */

/* The sandbox's own cgroup with the configured limits, before anything runs in it: *fd (for
 * clone3's CLONE_INTO_CGROUP) and its name (CGROUP_NAME_MAX) under the parent. No parent: 0, *fd -1,
 * name "". */
int cgroup_make(const struct process *p, const struct sandbox_spec *spec, char *name, int *fd, struct sb_err *err);

/* Removes an empty cgroup of ours (retrying: it empties a moment after its last process was reaped). */
int cgroup_remove(const struct process *p, const char *name, struct sb_err *err);

/* The delegated parent, checked once at start (cgroup v2, the controllers the limits need). */
int cgroup_parent_open(struct process *p, struct sb_err *err);

/* Sandboxes' cgroups a killed manager left behind: the empty ones go. */
void cgroup_sweep(const struct process *p);

/* What the host offers, for the start-up line when no cgroup-parent is configured. */
void cgroup_describe_host(char *out, size_t len);

/* The limits of cgroup `name` into out (memory_max, pids_max, cpu, cgroup), when it holds pid. */
int cgroup_limits_read(const struct process *p, const char *name, pid_t pid, struct sandbox_limits *out,
		       struct sb_err *err);

/* ---- process_evidence.c ---- */

/* Field 22 of /proc/<pid>/stat, the start time in clock ticks since boot. 0, or -1 with errno
 * (ENOENT/ESRCH: no such process). */
int starttime_read(pid_t pid, unsigned long long *out);

/* Wait up to timeout_ms for the init behind pidfd to exit (and reap it when it is our child:
 * *reaped, which may be NULL). 1: exited; 0: still running. */
int init_wait_exit(int pidfd, int timeout_ms, bool *reaped);

/* An empty handle of this backend: no runtime id, no pidfd, no cgroup (and the magic set). */
void handle_clear(struct sandbox_handle *h);

int process_stop(struct backend *be, struct sandbox_handle *h, struct sb_err *err);
int process_evidence(struct backend *be, struct sandbox_handle *h, int timeout_ms, struct sb_err *err);
int process_adopt(struct backend *be, const char *runtime_id, const char *address, struct sandbox_handle *h,
		  struct sb_err *err);

#endif
