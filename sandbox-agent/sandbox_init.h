/* Sandbox init of the process backend (manager/backend/backend_process.c): PID 1 of a session's
 * sandbox between clone() and execve() of the agent, in a clone of the manager. It builds the root
 * from the steps the manager planned, pivots into it, takes the sandbox's ids and executes the agent.
 * Read beside init.c (the agent's per-command init): the two privileged sequences of the boundary.
 * Must never allocate, use stdio or call glibc fork (the manager is multi-threaded), nor follow a
 * symbolic link while building the root. */
#ifndef SB_SANDBOX_INIT_H
#define SB_SANDBOX_INIT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#define AGENT_INSIDE "/.sandbox/bin/sandbox-agent"
#define EMPTY_INSIDE "/.sandbox/empty"

/* The steps of the root, planned by the manager in mount order (a parent before what is mounted
 * inside it) and run by sandbox init. */
enum step_kind {
	STEP_TMPFS,   /* a fresh tmpfs at path (mode, size), sealed read-only at the end when seal */
	STEP_BIND,    /* source (a host path, or a path inside the new root) at path, recursively */
	STEP_SYMLINK, /* a symbolic link at path whose text is source */
	STEP_FILE,    /* an empty file at path */
	STEP_PROC,    /* a fresh procfs of the sandbox's PID namespace at path */
};

struct step {
	enum step_kind kind;
	char *path;          /* inside the sandbox: absolute, no '.', '..' or empty components */
	char *source;        /* STEP_BIND: where from; STEP_SYMLINK: the link's text */
	bool source_inside;  /* STEP_BIND: source is a path in the new root (resolved beneath it) */
	bool seal;           /* STEP_TMPFS: read-only once the root is complete */
	bool anchor;         /* STEP_BIND: a directory bound onto itself so that it cannot be renamed */
	const char *mode;    /* STEP_TMPFS: mode of its root directory */
	uint64_t size;       /* STEP_TMPFS: bytes (size= and a matching nr_inodes=); 0: sealed, never filled */
	uint64_t attrs;      /* MOUNT_ATTR_* of the new mount (STEP_BIND: recursively) */
	int mnt_fd;          /* sandbox init: the tmpfs, kept until it is sealed */
	int src_fd;          /* sandbox init, STEP_BIND from the host: source as far as the manager's uid searched */
	const char *src_rest; /* ... and the rest of source below src_fd, for the sandbox's uid to open */
};

struct steps {
	struct step *v;
	size_t n, cap;
};
/* What sandbox init reads: the manager's plan, in the clone's copy of its memory. */
struct sandbox_init {
	const char *root;        /* the new root's mount point on the host: <private_dir>/root */
	int root_fd;             /* sandbox init: root opened as sources_open() opens a step's source */
	const char *root_rest;
	struct steps *steps;     /* the root; init sets each sealed tmpfs step's mnt_fd */
	const char *workdir;     /* entered once the view is final; NULL: / */
	const char *agent;       /* the agent binary on the host (named in messages) */
	const char *log;         /* agent.log on the host (named in messages) */
	char *const *argv;       /* the agent's */
	char *const *envp;
	uid_t uid;               /* the sandbox's ids, mapped 1:1 */
	gid_t gid;
	bool groups_drop;        /* a root manager: drop the supplementary groups the clone inherited */
	int go_fd;               /* read end: one byte from the manager once the id maps are written */
	int error_fd;            /* write end: one message when a step fails */
	int log_fd;              /* the agent's stdout and stderr */
	int null_fd;             /* its stdin */
};

/* Never returns: executes the agent, or reports over error_fd and exits. */
__attribute__((noreturn)) void sandbox_init_main(struct sandbox_init *si);

#endif
