/* The warm path of `serve` (see prebuilt.h): when a prebuilt init is built, checked, used or
 * discarded. The init itself, and every check, are the boundary's (boundary_prebuilt.c,
 * boundary_view.c). */
#include "prebuilt.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "log.h"
#include "steptime.h"
#include "thread.h"

/* Under the lock. SIGKILL, reaped within the teardown bound, logged: the same evidence as a call's end.
 * Not reaped: STUCK (0 is never returned then). */
static int discard(struct prebuilt *p, const char *why)
{
	struct sb_err err;
	int64_t ms;

	if (p->mountinfo_fd >= 0)
		close(p->mountinfo_fd);
	p->mountinfo_fd = -1;
	if (boundary_init_end(p->b, &p->bi, &ms, &err) < 0) {
		sb_error("prebuilt init %d (%s) discarded (%s) but not reaped: %s; refusing calls until it is",
			 (int)p->bi.pid, p->bi.pid_namespace, why, err.msg);
		p->state = PREBUILT_STUCK;
		return -1;
	}
	sb_info("prebuilt init %d (%s) discarded: %s; reaped after %lld ms, its namespace empty", (int)p->bi.pid,
		p->bi.pid_namespace, why, (long long)ms);
	p->state = PREBUILT_EMPTY;
	return 0;
}

/* Under the lock: the last call's mount namespace let go (its tree torn down by this close), on a
 * path with no next init to build beside it. */
static void spent_close(struct prebuilt *p)
{
	if (p->spent_mnt >= 0)
		close(p->spent_mnt);
	p->spent_mnt = -1;
}

static bool mounts_changed(int fd)
{
	struct pollfd m = { fd, POLLPRI, 0 };

	/* proc_pid_mountinfo(5): POLLPRI (with POLLERR) once the mount table changed since the open. A
	 * poll that fails counts as a change. */
	return poll(&m, 1, 0) != 0 || fd < 0;
}

/* Under the lock, READY: 1 usable, 0 discarded (the call runs afresh), -1 the call is refused (its own
 * checks, or an init that cannot be reaped). */
static int take(struct prebuilt *p, const struct exec_request *req, struct sb_err *err)
{
	char why[SB_ERR_MSG_MAX];
	int usable;

	if (!boundary_init_alive(&p->bi)) {
		if (discard(p, "it ended while waiting (killed or out of memory); the call builds afresh") < 0)
			return sb_fail(err, ETIMEDOUT, "a prebuilt init could not be reaped: the boundary is not confirmed");
		return 0;
	}
	if (mounts_changed(p->mountinfo_fd)) {
		snprintf(why, sizeof why, "the agent's mount table changed since it was built");
		usable = 0;
	} else {
		usable = boundary_init_check(p->b, &p->bi, req, why, sizeof why, err);
	}
	if (usable == 1)
		return 1;
	if (usable < 0)
		snprintf(why, sizeof why, "the call was refused: %.900s", err->msg);
	if (discard(p, why) < 0 && usable == 0)
		return sb_fail(err, ETIMEDOUT, "a prebuilt init could not be reaped: the boundary is not confirmed");
	return usable < 0 ? -1 : 0;
}

int prebuilt_run(struct prebuilt *p, const struct exec_request *req, int cancel_fd, struct exec_outcome *out,
		 struct sb_err *err)
{
	struct boundary_init bi;
	bool have = false;
	int rc, got = 0;

	pthread_mutex_lock(&p->lock);
	while (p->state == PREBUILT_BUILDING || p->state == PREBUILT_WANTED)
		pthread_cond_wait(&p->changed, &p->lock);
	p->armed = false;
	spent_close(p);
	if (p->state == PREBUILT_STUCK && discard(p, "still waiting to be reaped") < 0) {
		pthread_mutex_unlock(&p->lock);
		return sb_fail(err, ETIMEDOUT, "a prebuilt init could not be reaped: the boundary is not confirmed");
	}
	if (p->state == PREBUILT_READY && (got = take(p, req, err)) < 0) {
		pthread_mutex_unlock(&p->lock);
		return -1;
	}
	if (got == 1) {
		/* Used once: it is the call's now, and no other init exists until it is reaped. */
		bi = p->bi;
		have = true;
		close(p->mountinfo_fd);
		p->mountinfo_fd = -1;
	}
	p->state = PREBUILT_IN_CALL;
	pthread_mutex_unlock(&p->lock);

	rc = -2;
	if (have) {
		steptime_mark(STEP_VIEW); /* the call's checks, on the prebuilt view */
		sb_info("exec %s: on the prebuilt init %d (%s)", req->exec_id, (int)bi.pid, bi.pid_namespace);
		rc = boundary_run_prebuilt(p->b, &bi, req, cancel_fd, out, err);
		if (rc == -2) {
			int64_t ms;

			/* It did not take the call (it ended between the check and the hand-off, or the call
			 * could not be handed over): nothing ran; reap it, then afresh. */
			if (boundary_init_end(p->b, &bi, &ms, err) < 0) {
				pthread_mutex_lock(&p->lock);
				p->bi = bi;
				p->state = PREBUILT_STUCK;
				pthread_mutex_unlock(&p->lock);
				return -1;
			}
			sb_info("prebuilt init %d did not take exec %s; reaped after %lld ms; building afresh",
				(int)bi.pid, req->exec_id, (long long)ms);
		}
	}
	if (rc == -2)
		rc = boundary_run(p->b, req, cancel_fd, out, err);

	pthread_mutex_lock(&p->lock);
	p->state = PREBUILT_EMPTY;
	/* Reaped or not, its tree is let go only after the result is sent (prebuilt_idle, the builder):
	 * at most one is held, this call's. */
	if (have && rc == 0)
		p->spent_mnt = bi.mnt_ns;
	/* The next is built only once this call's init is proven gone, and for its working directory. */
	p->armed = rc == 0 && out->init_reaped &&
		   snprintf(p->want_cwd, sizeof p->want_cwd, "%s", req->cwd) < (int)sizeof p->want_cwd;
	pthread_mutex_unlock(&p->lock);
	return rc;
}

/* The builder's: the agent's mount table, read again only when the kernel says it changed since the
 * last read (POLLPRI on table_watch, opened before that read; a poll that fails counts as a change).
 * Reading /proc/self/mountinfo is most of a build's view step (the kernel prints every mount: ~190 us
 * for 59 of them here) and the table is the same from one call to the next: commands cannot mount
 * (seccomp) and each call's init mounts in a namespace of its own. What a build does with the table is
 * unchanged: every open, identity comparison and walk of the checks runs at each build, and again at
 * the call (take()). NULL: none could be read; the build reads its own, and fails with the reason. */
static const struct mountinfo *table_current(struct prebuilt *p)
{
	struct sb_err err;

	if (p->table_watch >= 0 && !mounts_changed(p->table_watch))
		return &p->table;
	if (p->table_watch >= 0) {
		close(p->table_watch);
		mountinfo_free(&p->table);
	}
	p->table_watch = open("/proc/self/mountinfo", O_RDONLY | O_CLOEXEC);
	if (p->table_watch < 0)
		return NULL;
	if (mountinfo_read(&p->table, &err) < 0) {
		close(p->table_watch);
		p->table_watch = -1;
		return NULL;
	}
	return &p->table;
}

void prebuilt_idle(struct prebuilt *p)
{
	pthread_mutex_lock(&p->lock);
	if (p->armed && p->state == PREBUILT_EMPTY) {
		p->armed = false;
		p->state = PREBUILT_WANTED;
		pthread_cond_broadcast(&p->changed);
	} else {
		spent_close(p);
	}
	pthread_mutex_unlock(&p->lock);
}

static void *builder(void *arg)
{
	struct prebuilt *p = arg;
	char cwd[PATH_MAX];
	struct sb_err serr;

	/* Forked here, before any call, so that this thread is the parent of every init it clones (their
	 * parent-death signal follows it: it never ends). Without one, the inits are cloned here. */
	if (spawner_start(&p->spawner, p->b, &serr) < 0)
		sb_error("no spawner: %s; prebuilt inits are cloned by the agent", serr.msg);
	else
		sb_info("spawner %d started", (int)p->spawner.pid);
	for (;;) {
		struct boundary_init bi;
		struct sb_err err;
		int fd, rc, spent;

		pthread_mutex_lock(&p->lock);
		while (p->state != PREBUILT_WANTED)
			pthread_cond_wait(&p->changed, &p->lock);
		p->state = PREBUILT_BUILDING;
		memcpy(cwd, p->want_cwd, sizeof cwd);
		spent = p->spent_mnt;
		p->spent_mnt = -1;
		pthread_mutex_unlock(&p->lock);

		/* Opened before the table is read or found unchanged: any change of the mount table from
		 * here on shows at the call. */
		fd = open("/proc/self/mountinfo", O_RDONLY | O_CLOEXEC);
		rc = fd < 0 ? sb_fail_errno(&err, "opening /proc/self/mountinfo") :
			      boundary_init_start(p->b, cwd, table_current(p), &p->spawner, &bi, &err);

		pthread_mutex_lock(&p->lock);
		if (rc == 0) {
			p->bi = bi;
			p->mountinfo_fd = fd;
			p->state = PREBUILT_READY;
			sb_info("prebuilt init %d ready (%s) for %s", (int)bi.pid, bi.pid_namespace, cwd);
		} else {
			sb_info("no prebuilt init for %s: %s (the next call builds its own)", cwd, err.msg);
			if (fd >= 0)
				close(fd);
			p->state = PREBUILT_EMPTY;
		}
		pthread_cond_broadcast(&p->changed);
		pthread_mutex_unlock(&p->lock);
		/* The last call's mount tree, torn down here: after the next init is ready, beside the next
		 * call rather than in front of it. The new init dropped its inherited copy at its first step
		 * (init.c, spawn_fds_keep) before it reported, so this close is the last reference. */
		if (spent >= 0)
			close(spent);
	}
	return NULL;
}

int prebuilt_start(struct prebuilt *p, const struct boundary *b, struct sb_err *err)
{
	memset(p, 0, sizeof *p);
	p->b = b;
	p->mountinfo_fd = -1;
	p->spent_mnt = -1;
	p->table_watch = -1;
	p->state = PREBUILT_EMPTY;
	if (pthread_mutex_init(&p->lock, NULL) != 0 || pthread_cond_init(&p->changed, NULL) != 0)
		return sb_fail(err, ENOMEM, "the prebuilt init's lock");
	return sb_thread_detached(builder, p, err);
}
