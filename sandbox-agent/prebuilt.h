/* `serve`'s warm path: the next call's init built while the agent is idle. After a call whose init is
 * proven gone (reaped) and whose result was sent, one init is started for that call's working directory:
 * namespaces, id maps, the private tree, the hiding mounts, the world, /proc, the dropped privileges
 * (boundary.h struct boundary_init). The next call hands it only its command and environment; init then
 * makes the command's own steps (Landlock, seccomp, execve) as always.
 *
 * A prebuilt init is used only when it is exactly what a fresh one would be: the call's own checks run
 * in full (boundary_init_check: the view, the identities of the writable roots and private directories,
 * the `..` walks) and must find the same hidden places with the same identities, the same working
 * directory, and what init entered and copied must be those very directories; the agent's mount table
 * must not have changed since before the view it hides was read (POLLPRI on /proc/self/mountinfo);
 * init must still be waiting. Anything else discards it (SIGKILL, reaped within the teardown bound,
 * logged) and the call builds afresh. Used at most once; never two inits at once. */
#ifndef SB_PREBUILT_H
#define SB_PREBUILT_H

#include <limits.h>
#include <pthread.h>
#include <stdbool.h>

#include "aliases.h"
#include "boundary.h"
#include "error.h"
#include "spawner.h"

enum prebuilt_state {
	PREBUILT_EMPTY,    /* none; nothing asked */
	PREBUILT_WANTED,   /* asked for want_cwd: the builder thread starts it */
	PREBUILT_BUILDING, /* being built: a call waits for it */
	PREBUILT_READY,    /* waiting for its call */
	PREBUILT_IN_CALL,  /* a call runs (on a prebuilt init or a fresh one) */
	PREBUILT_STUCK,    /* discarded but not reaped within the bound: every call is refused until it is */
};

struct prebuilt {
	const struct boundary *b;
	pthread_mutex_t lock;
	pthread_cond_t changed;
	enum prebuilt_state state;
	bool armed;                /* the last call's init was reaped: the next may be built */
	char want_cwd[PATH_MAX];
	struct boundary_init bi;   /* READY or STUCK */
	int mountinfo_fd;          /* READY: opened before the view init hides was read */
	int spent_mnt;             /* the last call's mount namespace, held until its result is sent, or -1 */
	/* The builder thread's alone: the agent's mount table, kept while table_watch (opened before it
	 * was read) shows no change (prebuilt.c table_current). */
	struct mountinfo table;
	int table_watch;
	struct spawner spawner;    /* the builder's: clones each init (spawner.h) */
};

/* The builder thread. Its thread is init's parent for good: init's parent-death signal follows that
 * thread, which never ends, and the agent's death. */
int prebuilt_start(struct prebuilt *p, const struct boundary *b, struct sb_err *err);

/* One call, as boundary_run: on the prebuilt init when it is usable, else afresh. */
int prebuilt_run(struct prebuilt *p, const struct exec_request *req, int cancel_fd, struct exec_outcome *out,
		 struct sb_err *err);

/* The agent is idle (the call's result was sent): build the next init if the last call armed it. The
 * last call's mount namespace is let go then: by the builder once the next init is ready, else here. */
void prebuilt_idle(struct prebuilt *p);

#endif
