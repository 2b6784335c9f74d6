/* The spawner (serve's warm path, prebuilt.h): one process, forked from the builder thread before any
 * call, that clones each prebuilt init with CLONE_PARENT, so that the init is the agent's child as
 * before (reaped through its pidfd, its parent-death signal on the builder thread) while the agent
 * itself is never forked on the warm path.
 *
 * Why: an init cloned from the agent shares every writable page of the agent copy-on-write until its
 * call ends, and each first write of the agent to such a page afterwards copies it and interrupts every
 * CPU the agent's threads ran on to flush it: about 0.5 ms of CPU per call, most of it on the call's
 * own path (docs/performance.md). Cloned from the spawner, which writes little, the copies are few.
 *
 * What it holds: a copy of the agent made when `serve` started, before any call (the receipt key's
 * page wiped, as in every clone: secret.c), with only stdin, stdout, stderr and its socket open. It
 * runs nothing but clone3 on the agent's request; a request carries the view the builder checked (the
 * working directory, the hidden places) and init's five pipe ends, exactly what init_main() needs.
 * Its death fails closed: the builder stops it (SIGKILL, reaped) and clones the inits itself from
 * then on, as before the spawner, logged once. */
#ifndef SB_SPAWNER_H
#define SB_SPAWNER_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

#include "boundary.h"
#include "error.h"

struct spawner {
	pid_t pid;  /* > 0 while it serves; -1: none (not started, or stopped) */
	int pidfd;
	int sock;   /* the agent's end of the request channel */
	unsigned bound_ms; /* on each request's send and reply, and on its reaping */
};

/* From the builder thread only: it becomes the parent of every init the spawner clones. b is fixed
 * from here on (boundary_prepare ran). -1 with err: none runs, and s says so. */
int spawner_start(struct spawner *s, const struct boundary *b, struct sb_err *err);

/* A prebuilt init for cwd hiding hidden[0..n_hidden) (the builder's checked view), handed
 * fds = { go[0], report[1], error[1], out[1], errp[1] } (the caller keeps and closes its copies).
 * Its pid and *pidfd; -1 with err when none was made. When the spawner failed rather than the clone
 * (no answer within the bound, an ended channel), it is stopped first: spawner_running() is then
 * false and the caller clones the init itself. */
pid_t spawner_spawn(struct spawner *s, const char *cwd, const struct hidden_dir *hidden, size_t n_hidden,
		    const int fds[5], int *pidfd, struct sb_err *err);

bool spawner_running(const struct spawner *s);

#endif
