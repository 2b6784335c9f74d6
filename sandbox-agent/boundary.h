/* The per-command isolation boundary: everything from "run this command" to "its namespace is
 * empty". Used by `sandbox-agent exec` and by `serve`. Three roles, labelled in the code:
 *   agent   - this process, outside: creates the namespaces, writes the id maps, reads output,
 *             enforces the deadline, reaps init.
 *   init    - PID 1 of the new PID namespace (init.c): mounts the view, drops its privileges,
 *             starts the command, reaps, reports the command's status, exits.
 *   command - PID 2 (init.c): the last privilege steps, then execve of the shell.
 */
#ifndef SB_BOUNDARY_H
#define SB_BOUNDARY_H

struct live_tap;
struct spawner;

#include <limits.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/capability.h>
#include <sys/types.h>
#include <linux/filter.h>

#define BOUNDARY_SANDBOX_ID_DEFAULT 65534 /* nobody / nogroup */

#include "error.h"
#include "names.h" /* EXEC_ID_MAX */
#include "output.h"

#define BOUNDARY_MAX_HIDDEN 16         /* private directories an agent is given */
#define BOUNDARY_MAX_HIDDEN_VIEW 256   /* and the places they show in a command's view, their aliases too */
#define BOUNDARY_MAX_WRITABLE 16
#define BOUNDARY_MAX_PROCESSES_DEFAULT 1024 /* RLIMIT_NPROC and pid_max when none is given */
#define BOUNDARY_TMP_BYTES_DEFAULT (256ull << 20) /* the read-only world's private /tmp */
#define BOUNDARY_SHM_BYTES_DEFAULT (64ull << 20)  /* and its /dev/shm */
#define BOUNDARY_MAX_PORTS 64
#define BOUNDARY_MAX_ENV 64
#define NONCE_BYTES 32

/* A directory the command must not see, by the identity of the descriptor the agent holds
 * (privdir.h): init covers exactly that directory or refuses (mounts.c hide_dir()). */
struct hidden_dir {
	char path[PATH_MAX];
	dev_t dev;
	ino_t ino;
};

/* What the agent prepares once and every command reuses (ISOLATION.md "Cost"). */
struct boundary {
	/* What init hides: the agent's private directories (boundary_prepare); boundary_run hands init
	 * a copy of the boundary whose list also holds every other path where one of them shows
	 * through another mount (aliases.h), found again before each command. */
	struct hidden_dir *hidden;
	size_t n_hidden;
	char *writable[BOUNDARY_MAX_WRITABLE]; /* read-only world: roots besides cwd (resolved) */
	size_t n_writable;
	bool readonly_world;               /* `exec`: the host view read-only but cwd and writable[] */
	uint64_t tmp_bytes, shm_bytes;     /* read-only world: sizes of the private /tmp and /dev/shm */
	char agent_exe[PATH_MAX];          /* this binary: never inside a writable root, by identity */
	uint16_t block_ports[BOUNDARY_MAX_PORTS];
	size_t n_block_ports;
	unsigned long max_processes;       /* RLIMIT_NPROC and the namespace's pid_max */
	unsigned teardown_ms;              /* bound on waiting for an emptied namespace */
	const char *shell;                 /* /bin/bash, or /bin/sh where there is no bash */
	const struct sock_fprog *seccomp;  /* compiled at build time (seccomp.h) */
	int landlock_abi;                  /* 0 when Landlock is unavailable */
	bool landlock_per_call;            /* scope layer per command (no agent-wide domain) */
	cap_t no_caps;                     /* empty capability state, made before any clone */
	uid_t command_uid;                 /* the uid and gid commands have inside their namespace: */
	gid_t command_gid;                 /* never 0 there (command_ids_choose) */
	uid_t command_outside_uid;         /* what they map to in the agent's namespace */
	gid_t command_outside_gid;
	/* `serve --user-home` (command_user.c): the agent's copies of /etc/passwd and /etc/group that
	 * gained an entry for the command's ids, each bound read-only over the view's own file by
	 * init (mounts.c users_bind()); none when the view's files already name the ids. */
	struct user_file {
		char source[PATH_MAX];     /* in the state directory, hidden from commands */
		const char *target;        /* "/etc/passwd" or "/etc/group" */
		dev_t dev;                 /* the identity the agent wrote, compared by init */
		ino_t ino;
	} users[2];
	size_t n_users;
};

enum exec_status {
	EXEC_EXITED,
	EXEC_SIGNALED,
	EXEC_TIMED_OUT,
	EXEC_CANCELLED,
	EXEC_UNCERTAIN,
	EXEC_REFUSED,
};

struct exec_request {
	char exec_id[EXEC_ID_MAX + 1];
	uint64_t generation;
	const char *command;
	const char *cwd;                   /* absolute; the command starts here, same path as outside */
	unsigned timeout_seconds;
	size_t output_limit;
	const char *env[BOUNDARY_MAX_ENV]; /* "NAME=VALUE", the whole environment of the command */
	size_t n_env;
	struct live_tap *tap;              /* live output (live_tap.h), or NULL */
};

struct exec_outcome {
	enum exec_status status;
	int exit_code;                     /* valid for EXEC_EXITED */
	int signal;                        /* valid for EXEC_SIGNALED */
	struct output_capture out, err;
	int64_t started_ms, ended_ms;      /* wall clock, for the receipt */
	int64_t duration_ms;               /* monotonic */
	bool init_reaped;                  /* the namespace's init was reaped: all processes gone */
	bool pid_max_bounded;              /* pid_max held max_processes from before the command to after it */
	int64_t teardown_ms;               /* from the command's end (or the kill) to init reaped */
	char pid_namespace[64];            /* "pid:[inode]" of the command's namespace */
	char detail[SB_ERR_MSG_MAX];       /* why refused / uncertain, for people */
};

struct boundary_options {
	struct hidden_dir hidden[BOUNDARY_MAX_HIDDEN]; /* from hidden_dir_from_*() */
	size_t n_hidden;
	const char *writable[BOUNDARY_MAX_WRITABLE];
	size_t n_writable;
	bool readonly_world;
	uint64_t tmp_bytes, shm_bytes;     /* 0: the defaults above */
	const uint16_t *block_ports;
	size_t n_block_ports;
	unsigned long max_processes;
	uid_t sandbox_uid;                 /* for a host-root agent; 0 means the default, 65534 */
	gid_t sandbox_gid;
};

/* The identity of a directory to hide: one the agent holds (privdir.h), or a path it opens now
 * without following links. */
struct privdir;
struct mountinfo;
void hidden_dir_from_privdir(struct hidden_dir *h, const struct privdir *d);
int hidden_dir_from_path(struct hidden_dir *h, const char *path, struct sb_err *err);

/* Prepare once: record hidden directories and writable roots, compile seccomp, set up Landlock (an agent-wide
 * TCP domain when ports are blocked: the agent itself is restricted from then on). Whether a writable root
 * and a protected directory nest is decided per command (boundary_run), by identity, with the mounts as
 * they are then. */
int boundary_prepare(struct boundary *b, const struct boundary_options *opts, struct sb_err *err);

void boundary_free(struct boundary *b);

/* Run one command to the end. Returns 0 when an outcome was established (any status, including
 * refused and uncertain, with out->detail saying why), -1 when nothing could be started: among
 * others when the working directory or a writable root holds or lies inside a private directory or
 * holds the agent binary, at any of the paths where they show. cancel_fd (or -1): readable means
 * "cancel now". */
int boundary_run(const struct boundary *b, const struct exec_request *req, int cancel_fd,
		 struct exec_outcome *out, struct sb_err *err);

void exec_outcome_free(struct exec_outcome *out);

/* An init started ahead of its call (`serve`, prebuilt.h): its namespaces and view built for one
 * working directory, its privileges dropped, waiting for a command and an environment. Used at most
 * once. */
struct boundary_init {
	pid_t pid;
	int pidfd;
	int out, errp, report, error, go;  /* the agent's ends of init's pipes */
	char cwd[PATH_MAX];                /* what it was built for */
	struct hidden_dir *hidden;         /* the view it hides: the private directories and their aliases */
	size_t n_hidden;
	struct mountinfo *mi;              /* the mount table that view was found in (aliases.h) */
	struct { dev_t dev; ino_t ino; } bound[BOUNDARY_MAX_WRITABLE + 2]; /* init.h struct init_bound */
	size_t n_bound;
	char pid_namespace[64];
	int mnt_ns;                        /* init's mount namespace, held (or -1): see boundary_run_prebuilt */
};

/* Check the view for cwd as a call would, start init and wait (bounded) until it has built it and
 * reported what it bound. mi: the agent's mount table, which the caller knows is still the agent's
 * (prebuilt.c's, unchanged since it was read: POLLPRI), or NULL to read it now; every open, identity
 * and walk of the checks runs now either way. sp: the spawner that clones init (spawner.h), or NULL
 * (or one no longer running) to clone it here. -1: nothing is left running. */
int boundary_init_start(const struct boundary *b, const char *cwd, const struct mountinfo *mi, struct spawner *sp,
			struct boundary_init *bi, struct sb_err *err);

/* Still waiting for its call? */
bool boundary_init_alive(const struct boundary_init *bi);

/* The call's own checks (as boundary_run makes them: every open, identity and `..` walk now, on bi's
 * mount table, which the caller must know to be unchanged: POLLPRI, prebuilt.c), then whether bi was
 * built for exactly this:
 * the same working directory, the same hidden places with the same identities, and what init bound
 * the very directories those checks passed. 1: usable; 0: not (why says which); -1: the call itself
 * is refused (err, as from boundary_run). */
int boundary_init_check(const struct boundary *b, const struct boundary_init *bi, const struct exec_request *req,
			char *why, size_t len, struct sb_err *err);

/* Run req on bi (consumed, used once), as boundary_run. -2: nothing ran (init gone before it took the
 * call, the call does not fit init's buffers, or no memory for its outcome): end bi and run the
 * call afresh. On 0, bi->mnt_ns is
 * still held: the caller closes it once the result is sent, and that close is the mount tree's
 * teardown (prebuilt.c). */
int boundary_run_prebuilt(const struct boundary *b, struct boundary_init *bi, const struct exec_request *req,
			  int cancel_fd, struct exec_outcome *out, struct sb_err *err);

/* SIGKILL and reap, bounded by the teardown bound. 0 and *ms: reaped, its namespace empty; -1: init
 * did not end in time (bi keeps its pidfd: try again). err may be NULL. */
int boundary_init_end(const struct boundary *b, struct boundary_init *bi, int64_t *ms, struct sb_err *err);
const char *exec_status_name(enum exec_status s);

#endif
