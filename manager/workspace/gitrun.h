/* Running git for the manager's own (trusted) operations: clone, worktree, config reads.
 * Owns the argv, environment, descriptors, output bounds, timeout and the write and read
 * confinement of every git child. Must never go through a shell, inherit a GIT_* variable, or let
 * a repository run a program. */
#ifndef SB_GITRUN_H
#define SB_GITRUN_H

#include <stdbool.h>
#include <stddef.h>

#include "error.h"

#define GITRUN_OUTPUT_LIMIT (1024u * 1024u) /* bytes kept per stream; the rest is counted */
#define GITRUN_TIMEOUT_MS 60000u            /* default for one git command */
#define GITRUN_CLONE_TIMEOUT_MS 600000u     /* clones of large repositories take longer */

/* The fixed PATH of every git child; git itself is looked up in it. */
#define GITRUN_PATH "/usr/local/bin:/usr/bin:/bin"

struct gitrun_opts {
	const char *cwd;       /* working directory of git; NULL means "/" (no repository around) */
	unsigned timeout_ms;   /* 0 means GITRUN_TIMEOUT_MS */
	size_t output_limit;   /* per stream; 0 means GITRUN_OUTPUT_LIMIT */
	/* Write confinement (Landlock). NULL: none. Otherwise a NULL-terminated list of existing
	 * directories: git and its children may create, change or delete files only beneath them
	 * (and write /dev/null); an empty list makes git read-only. Trusted git on a repository
	 * that sandboxes can write must use it: a symbolic link a command planted in refs/ or logs/
	 * must not carry a write by the manager out of the repository. Where the kernel has no
	 * Landlock, git runs unconfined and a warning is logged once. */
	const char *const *write_roots;
	/* Read confinement (Landlock). NULL: reads are not confined. Otherwise a NULL-terminated
	 * list of existing directories or files that git may read beneath besides its write roots
	 * and the system's files it needs to run (gitrun.c system_exec, system_read); it may then
	 * execute only the system's programs, nothing in a repository, and writes are confined too
	 * (write_roots NULL then means none). Why: under a root manager trusted git runs as root on
	 * trees a sandbox writes, and a link a command planted (packed-refs.d/packed-refs -> a
	 * root-only file) would make git read that file and print its first line in an error.
	 * Running git as the sandbox's uid instead would not do: the common git dir, config and
	 * worktrees/ are the manager's (git could not write them), a local clone source may be
	 * readable only by root, and every identity's sandboxes share that uid, which can read the
	 * other identities' repositories on the host. The paths are trusted: no component of them
	 * is writable by a sandbox (a final symbolic link is refused). */
	const char *const *read_roots;
};

/* An empty write_roots list: "this git command writes nothing". */
extern const char *const gitrun_read_only[];

struct gitrun_result {
	int exit_code;       /* exit status, or -1 when git was killed by a signal */
	int term_signal;     /* the signal that ended git, or 0 */
	bool timed_out;      /* git (and its process group) was killed at the deadline */
	char *out;           /* stdout, NUL-terminated, at most output_limit bytes */
	size_t out_len;      /* bytes kept in out */
	size_t out_total;    /* bytes git wrote to stdout */
	bool out_truncated;
	char *errout;        /* stderr, same rules */
	size_t err_len;
	size_t err_total;
	bool err_truncated;
};

/* Run `git <protections> args...` (args is NULL-terminated and excludes "git" itself).
 * Returns 0 when git ran to its end, whatever its exit code (see res->exit_code), and -1 when it
 * could not be started or was killed at the deadline (res then holds what was captured).
 * res is always initialised; release it with gitrun_result_free(). */
int gitrun(const char *const args[], const struct gitrun_opts *opts, struct gitrun_result *res,
	   struct sb_err *err);

/* Like gitrun() but also fails when git exits non-zero; the message carries git's own error lines
 * ("git exited with status 128: fatal: ..."). res may be NULL when the output is not needed. */
int gitrun_check(const char *const args[], const struct gitrun_opts *opts, struct gitrun_result *res,
		 struct sb_err *err);

void gitrun_result_free(struct gitrun_result *res);

/* The options put in front of every git command and the environment of every git child,
 * exposed so tests and docs can show them. Both are NULL-terminated. */
extern const char *const gitrun_protections[];
extern const char *const gitrun_env_fixed[];

#endif
