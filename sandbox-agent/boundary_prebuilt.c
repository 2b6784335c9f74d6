/* agent, outside: an init started ahead of its call (serve: prebuilt.h): started for one working
 * directory, checked against the call's own checks, handed the command over its go pipe, ended.
 * The run itself, once init holds the call, is boundary_run.c's. */
#include "boundary_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <unistd.h>

#include "aliases.h"
#include "clock.h"
#include "init.h"
#include "spawner.h"
#include "steptime.h"

/* ---- an init started ahead of its call (serve: prebuilt.h) ---- */

static void init_view_free(struct boundary_init *bi)
{
	free(bi->hidden);
	bi->hidden = NULL;
	if (bi->mi != NULL)
		mountinfo_free(bi->mi);
	free(bi->mi);
	bi->mi = NULL;
}

static void init_ends_close(struct boundary_init *bi)
{
	fd_close(&bi->out);
	fd_close(&bi->errp);
	fd_close(&bi->report);
	fd_close(&bi->error);
	fd_close(&bi->go);
}

/* A reference to init's mount namespace, taken while init waits for its release (its own until then:
 * not yet dumpable-off, its unreaped pid not reusable). Why: the last reference to a mount namespace
 * tears its tree down (every mount unmounted, an RCU grace period waited for) in the dropper's
 * context. Unheld, that is init's exit, which the kernel finishes before the pidfd says init is
 * gone: 0.2-0.3 ms of every call's end here. Held, init's exit is quicker and the tree is torn down
 * where the holder closes it, after the result (prebuilt.c). What is proven at the call's end is
 * unchanged: init reaped means its PID namespace is empty; a mount namespace holds no process, and
 * no process can enter this one (the descriptor is close-on-exec, and every init keeps only its own
 * five descriptors from its first step). Not held (the open failed): the tree is torn down in init's
 * exit, as before. */
static void mnt_ns_hold(struct boundary_init *bi)
{
	char path[64];

	snprintf(path, sizeof path, "/proc/%d/ns/mnt", (int)bi->pid);
	bi->mnt_ns = open(path, O_RDONLY | O_CLOEXEC);
}

/* The first record of a prebuilt init: what it bound. Bounded by the teardown bound; init's failure
 * (its message on the error pipe) fails the start. */
static int bound_wait(const struct boundary *b, struct boundary_init *bi, struct sb_err *err)
{
	int64_t until = clock_mono_ms() + b->teardown_ms;
	struct init_bound r;
	char msg[SB_ERR_MSG_MAX];

	for (;;) {
		struct pollfd p[2] = { { bi->report, POLLIN, 0 }, { bi->pidfd, POLLIN, 0 } };
		int64_t left = until - clock_mono_ms();
		int n;

		if (left <= 0)
			return sb_fail(err, ETIMEDOUT, "the prebuilt init did not report within %u ms", b->teardown_ms);
		n = poll(p, 2, (int)left);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return sb_fail_errno(err, "waiting for the prebuilt init");
		if (p[0].revents & POLLIN)
			break;
		if (p[0].revents || p[1].revents) {
			error_read(bi->error, msg, sizeof msg);
			return sb_fail(err, EPIPE, "the prebuilt init ended before its call: %s",
				       msg[0] ? msg : "no message");
		}
	}
	/* One write of at most PIPE_BUF bytes: it arrives whole. */
	if (read(bi->report, &r, sizeof r) != (ssize_t)sizeof r || r.kind != INIT_REPORT_BOUND ||
	    r.n > BOUNDARY_MAX_WRITABLE + 2)
		return sb_fail(err, EPROTO, "the prebuilt init's first report is not what it bound");
	bi->n_bound = r.n;
	for (size_t i = 0; i < r.n; i++)
	{
		bi->bound[i].dev = (dev_t)r.id[i].dev;
		bi->bound[i].ino = (ino_t)r.id[i].ino;
	}
	return 0;
}

/* Cloned by the spawner while it runs; by this thread when there is none, or when it failed just now
 * (stopped then: spawner_spawn). A clone that failed in a running spawner fails the build. */
static pid_t init_clone(struct spawner *sp, const struct init_context *ctx, const struct run_fds *f, int *pidfd,
			struct sb_err *err)
{
	const int fds[5] = { f->go[0], f->report[1], f->error[1], f->out[1], f->errp[1] };
	pid_t pid;

	if (sp == NULL || !spawner_running(sp))
		return init_spawn(ctx, pidfd, err);
	pid = spawner_spawn(sp, ctx->cwd, ctx->b->hidden, ctx->b->n_hidden, fds, pidfd, err);
	if (pid < 0 && !spawner_running(sp))
		return init_spawn(ctx, pidfd, err);
	return pid;
}

int boundary_init_start(const struct boundary *b, const char *cwd, const struct mountinfo *mi, struct spawner *sp,
			struct boundary_init *bi, struct sb_err *err)
{
	char *argv[] = { (char *)b->shell, "-c", NULL, NULL };
	struct run_view view;
	struct run_fds f;
	struct boundary run;
	struct init_context ctx;
	int64_t ms;

	memset(bi, 0, sizeof *bi);
	bi->pid = -1;
	bi->pidfd = bi->out = bi->errp = bi->report = bi->error = bi->go = bi->mnt_ns = -1;
	if ((size_t)snprintf(bi->cwd, sizeof bi->cwd, "%s", cwd) >= sizeof bi->cwd)
		return sb_fail(err, ENAMETOOLONG, "working directory too long");
	/* The same checks as a call's, for the view this init will hide; the call checks again. */
	if (run_view_build(b, cwd, mi, &view, err) < 0) {
		run_view_free(&view);
		return -1;
	}
	bi->hidden = calloc(view.n_hidden + 1, sizeof bi->hidden[0]);
	bi->mi = calloc(1, sizeof *bi->mi);
	if (bi->hidden == NULL || bi->mi == NULL || (mi != NULL && mountinfo_copy(bi->mi, mi, err) < 0) ||
	    run_fds_open(&f, err) < 0) {
		if (bi->hidden == NULL || bi->mi == NULL)
			sb_fail(err, ENOMEM, "recording the prebuilt view");
		free(bi->hidden);
		bi->hidden = NULL;
		if (bi->mi != NULL)
			mountinfo_free(bi->mi);
		free(bi->mi);
		bi->mi = NULL;
		run_view_free(&view);
		return -1;
	}
	/* The table this view was read from, the init's own (a copy of the caller's): the call's checks
	 * use it again while the agent's mount table has not changed (prebuilt.c take()). */
	if (mi == NULL) {
		*bi->mi = view.mi;
		view.mi_borrowed = true;
	}
	memcpy(bi->hidden, view.hidden, view.n_hidden * sizeof view.hidden[0]);
	bi->n_hidden = view.n_hidden;
	run = *b;
	run.hidden = view.hidden;
	run.n_hidden = view.n_hidden;
	ctx = (struct init_context){
		.b = &run, .cwd = bi->cwd, .argv = argv, .envp = NULL, .uid = b->command_uid, .gid = b->command_gid,
		.go_fd = f.go[0], .report_fd = f.report[1], .error_fd = f.error[1],
		.stdout_fd = f.out[1], .stderr_fd = f.errp[1], .prebuilt = true,
	};
	bi->pid = init_clone(sp, &ctx, &f, &bi->pidfd, err);
	fd_close(&f.go[0]);
	fd_close(&f.report[1]);
	fd_close(&f.error[1]);
	fd_close(&f.out[1]);
	fd_close(&f.errp[1]);
	run_view_free(&view);
	bi->out = f.out[0];
	bi->errp = f.errp[0];
	bi->report = f.report[0];
	bi->error = f.error[0];
	bi->go = f.go[1];
	if (bi->pid < 0) {
		init_ends_close(bi);
		init_view_free(bi);
		return -1;
	}
	pid_namespace_read(bi->pid, bi->pid_namespace, sizeof bi->pid_namespace);
	mnt_ns_hold(bi);
	if (id_maps_write(bi->pid, b, err) == 0) {
		if (write(bi->go, "1", 1) != 1)
			sb_fail_errno(err, "releasing the prebuilt init");
		else if (bound_wait(b, bi, err) == 0)
			return 0;
	}
	/* Not reaped within the bound: it still holds no call, and its parent-death signal ends it with
	 * the agent; the caller never starts another before the next call's own init is reaped. */
	(void)boundary_init_end(b, bi, &ms, NULL);
	return -1;
}

bool boundary_init_alive(const struct boundary_init *bi)
{
	struct pollfd p[2] = { { bi->pidfd, POLLIN, 0 }, { bi->report, POLLIN, 0 } };

	/* Gone, or anything on its report pipe before the call (it writes nothing there while it waits,
	 * so a byte or an end of file means it is not waiting any more). */
	return poll(p, 2, 0) == 0;
}

static bool bound_is(const struct boundary_init *bi, size_t i, struct ident id)
{
	return bi->bound[i].dev == id.dev && bi->bound[i].ino == id.ino;
}

int boundary_init_check(const struct boundary *b, const struct boundary_init *bi, const struct exec_request *req,
			char *why, size_t len, struct sb_err *err)
{
	struct run_view view;
	int usable = 0;

	if (request_check(req, err) < 0)
		return -1;
	/* The call's own checks, in full, as boundary_run makes them (a refusal is the call's), on the mount
	 * table init copied, which the caller knows is still the agent's. */
	if (run_view_build(b, req->cwd, bi->mi, &view, err) < 0) {
		run_view_free(&view);
		return -1;
	}
	if (strcmp(req->cwd, bi->cwd) != 0) {
		snprintf(why, len, "built for the working directory %s, the call's is %s", bi->cwd, req->cwd);
	} else if (view.n_hidden != bi->n_hidden) {
		snprintf(why, len, "the private directories show at %zu places now, at %zu when it was built",
			 view.n_hidden, bi->n_hidden);
	} else if (bi->n_bound != (b->readonly_world ? 1 + view.n_roots : 1)) {
		snprintf(why, len, "it bound %zu directories, the call checks %zu", bi->n_bound, view.n_roots);
	} else {
		usable = 1;
		for (size_t i = 0; i < view.n_hidden && usable; i++)
			if (strcmp(view.hidden[i].path, bi->hidden[i].path) != 0 || view.hidden[i].dev != bi->hidden[i].dev ||
			    view.hidden[i].ino != bi->hidden[i].ino) {
				snprintf(why, len, "the private directory shown at %s is another one now", view.hidden[i].path);
				usable = 0;
			}
		/* What init entered and copied is, by identity, what the call's checks just passed. */
		if (usable && !bound_is(bi, 0, view.roots[0])) {
			snprintf(why, len, "the working directory %s is another directory now", req->cwd);
			usable = 0;
		}
		for (size_t i = 1; i < bi->n_bound && usable; i++)
			if (!bound_is(bi, i, view.roots[i - 1])) {
				snprintf(why, len, "the writable root %s is another directory now",
					 i == 1 ? req->cwd : b->writable[i - 2]);
				usable = 0;
			}
	}
	run_view_free(&view);
	return usable;
}

int boundary_init_end(const struct boundary *b, struct boundary_init *bi, int64_t *ms, struct sb_err *err)
{
	struct run_state st = { .pid = bi->pid, .pidfd = bi->pidfd };
	int64_t t0 = clock_mono_ms(), until = t0 + b->teardown_ms;

	init_ends_close(bi);
	if (bi->pidfd >= 0) {
		/* The same end as a call's: SIGKILL from outside, then the pidfd says init is gone, which
		 * is the kernel's word that its namespace is empty. */
		syscall(SYS_pidfd_send_signal, bi->pidfd, SIGKILL, NULL, 0);
		init_try_reap(&st);
		while (!st.reaped) {
			struct pollfd p = { bi->pidfd, POLLIN, 0 };
			int64_t left = until - clock_mono_ms();

			if (left <= 0)
				break;
			if (poll(&p, 1, (int)left) > 0)
				init_try_reap(&st);
		}
		if (!st.reaped) {
			if (err != NULL)
				sb_fail(err, ETIMEDOUT, "the prebuilt init %d (%s) did not end within %u ms of SIGKILL",
					(int)bi->pid, bi->pid_namespace, b->teardown_ms);
			return -1;
		}
		close(bi->pidfd);
		bi->pidfd = -1;
	}
	*ms = clock_mono_ms() - t0;
	fd_close(&bi->mnt_ns); /* reaped: its tree is torn down here */
	init_view_free(bi);
	bi->pid = -1;
	return 0;
}

/* All of iov to the non-blocking go pipe by until: an init that stopped reading (stopped, or gone)
 * cannot hold the call. One writev for the whole call when the pipe has room (init then wakes once,
 * with all of it to read), resumed where a partial write stopped. */
static int go_writev(int fd, struct iovec *iov, int n, int64_t until)
{
	while (n > 0) {
		ssize_t done = writev(fd, iov, n);

		if (done < 0 && errno == EINTR)
			continue;
		if (done < 0 && errno == EAGAIN) {
			struct pollfd w = { fd, POLLOUT, 0 };
			int64_t left = until - clock_mono_ms();

			if (left <= 0 || poll(&w, 1, (int)left) < 0 || (w.revents & (POLLERR | POLLHUP)))
				return -1;
			continue;
		}
		if (done <= 0)
			return -1;
		for (; n > 0 && (size_t)done >= iov->iov_len; iov++, n--)
			done -= (ssize_t)iov->iov_len;
		if (n > 0) {
			iov->iov_base = (char *)iov->iov_base + done;
			iov->iov_len -= (size_t)done;
		}
	}
	return 0;
}

/* The command and environment, to the waiting init: one header, then the bytes (init.h). */
static int call_send(const struct boundary *b, int fd, const struct exec_request *req)
{
	size_t command_len = strlen(req->command), env_len = 0;
	struct init_call h = { .command_len = (uint32_t)command_len, .n_env = (uint32_t)req->n_env };
	struct iovec iov[2 + BOUNDARY_MAX_ENV];
	int64_t until = clock_mono_ms() + b->teardown_ms;

	if (req->n_env > BOUNDARY_MAX_ENV)
		return -1;
	for (size_t i = 0; i < req->n_env; i++) {
		iov[2 + i] = (struct iovec){ (char *)req->env[i], strlen(req->env[i]) + 1 };
		env_len += iov[2 + i].iov_len;
	}
	if (command_len > INIT_CALL_COMMAND_MAX || env_len > INIT_CALL_ENV_MAX)
		return -1;
	h.env_len = (uint32_t)env_len;
	iov[0] = (struct iovec){ &h, sizeof h };
	iov[1] = (struct iovec){ (char *)req->command, h.command_len };
	if (fcntl(fd, F_SETFL, O_NONBLOCK) < 0)
		return -1;
	return go_writev(fd, iov, (int)(2 + req->n_env), until);
}

/* The waiting init took the call: its READY, which it writes only once it holds the whole call and
 * before the command exists. An init killed at the hand-off ends without it: then nothing ran. */
static int call_taken(const struct boundary *b, struct boundary_init *bi, struct run_state *st,
		      struct exec_outcome *out)
{
	int64_t until = clock_mono_ms() + b->teardown_ms;
	struct init_report r;

	for (;;) {
		struct pollfd p = { bi->report, POLLIN, 0 };
		int64_t left = until - clock_mono_ms();
		int n;

		if (left <= 0)
			return -1;
		n = poll(&p, 1, (int)left);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return -1;
		break;
	}
	if (read(bi->report, &r, sizeof r) != (ssize_t)sizeof r || r.kind != INIT_REPORT_READY)
		return -1;
	st->pid_max_set = r.value;
	out->pid_max_bounded = r.value != 0;
	return 0;
}

int boundary_run_prebuilt(const struct boundary *b, struct boundary_init *bi, const struct exec_request *req,
			  int cancel_fd, struct exec_outcome *out, struct sb_err *err)
{
	struct run_state st = { .pid = bi->pid, .pidfd = bi->pidfd };
	struct run_fds f;
	int64_t t0;

	/* No room for the outcome: nothing ran, and bi is the caller's to end (the fresh run then
	 * refuses the call with this same error), never left waiting with its pipes and namespace. */
	if (outcome_init(req, out, err) < 0)
		return -2;
	snprintf(out->pid_namespace, sizeof out->pid_namespace, "%s", bi->pid_namespace);
	out->started_ms = clock_real_ms();
	t0 = clock_mono_ms();
	if (call_send(b, bi->go, req) < 0 || call_taken(b, bi, &st, out) < 0) {
		/* Nothing ran: init is gone (or the call does not fit). The caller ends it and builds anew. */
		exec_outcome_free(out);
		return -2;
	}
	fd_close(&bi->go);
	steptime_mark(STEP_RELEASED);
	f = (struct run_fds){ .out = { bi->out, -1 }, .errp = { bi->errp, -1 }, .go = { -1, -1 },
			      .report = { bi->report, -1 }, .error = { bi->error, -1 } };
	bi->out = bi->errp = bi->report = bi->error = -1;
	run_to_end(b, req, cancel_fd, &f, &st, out, t0);
	bi->pidfd = -1;
	bi->pid = -1;
	init_view_free(bi);
	return 0;
}
