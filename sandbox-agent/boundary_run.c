/* agent, outside: one command from clone() to its reaped init: creates the command's namespaces,
 * writes the id maps, releases init, reads the output, keeps the deadline and reaps init (see
 * boundary.h). The command's side is in init.c. Everything init and the command need is prepared
 * before clone(), because after it they allocate nothing. */
#include "boundary_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/sched.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "clock.h"
#include "failpoint.h"
#include "init.h"
#include "live_tap.h"
#include "steptime.h"
#include "nsspawn.h"

#ifndef P_PIDFD
#define P_PIDFD 3
#endif

#define READ_CHUNK 65536

/* How long after its release init's reports may wait while the command's output is open (wait_loop()).
 * It is also how much later, at most, a command's end can be seen when its output is held open after
 * it (a process stuck in the namespace): the teardown bound is counted from what was seen. */
#define REPORTS_QUIET_MS 20

static const char *const status_names[] = {
	[EXEC_EXITED] = "exited",       [EXEC_SIGNALED] = "signaled", [EXEC_TIMED_OUT] = "timed_out",
	[EXEC_CANCELLED] = "cancelled", [EXEC_UNCERTAIN] = "uncertain", [EXEC_REFUSED] = "refused",
};

const char *exec_status_name(enum exec_status s)
{
	return status_names[s];
}


void fd_close(int *fd)
{
	if (*fd >= 0)
		close(*fd);
	*fd = -1;
}

void run_fds_close(struct run_fds *f)
{
	int *all = (int *)f;

	for (size_t i = 0; i < sizeof *f / sizeof(int); i++)
		fd_close(&all[i]);
}

int run_fds_open(struct run_fds *f, struct sb_err *err)
{
	int *all = (int *)f;

	for (size_t i = 0; i < sizeof *f / sizeof(int); i++)
		all[i] = -1;
	if (pipe2(f->out, O_CLOEXEC) < 0 || pipe2(f->errp, O_CLOEXEC) < 0 || pipe2(f->go, O_CLOEXEC) < 0 ||
	    pipe2(f->report, O_CLOEXEC) < 0 || pipe2(f->error, O_CLOEXEC) < 0) {
		sb_fail_errno(err, "creating pipes");
		run_fds_close(f);
		return -1;
	}
	/* The agent never blocks on a read: poll says when, and the final drain stops at EAGAIN. */
	if (fcntl(f->out[0], F_SETFL, O_NONBLOCK) < 0 || fcntl(f->errp[0], F_SETFL, O_NONBLOCK) < 0 ||
	    fcntl(f->report[0], F_SETFL, O_NONBLOCK) < 0 || fcntl(f->error[0], F_SETFL, O_NONBLOCK) < 0) {
		sb_fail_errno(err, "making pipes non-blocking");
		run_fds_close(f);
		return -1;
	}
	return 0;
}

/* Into the new namespaces (init.h INIT_NAMESPACES) with a pidfd. */
pid_t init_spawn(const struct init_context *ctx, int *pidfd, struct sb_err *err)
{
	pid_t pid = spawn_clone(INIT_NAMESPACES, pidfd, err);

	if (pid == 0)
		init_main(ctx);
	if (pid < 0)
		sb_err_prefix(err, "creating the command's user, PID and mount namespaces");
	return pid;
}

/* The maps make the command's uid and gid the agent's own (an unprivileged writer may map only
 * its own ids, and files in the worktree keep their owner), 1:1; under host root the sandbox
 * ids, 1:1; under a root of a namespace of its own, the sandbox ids inside for the agent's own
 * outside (command_ids_choose). setgroups is denied first, as an unprivileged gid_map write
 * requires (user_namespaces(7)); it also keeps the command from ever calling setgroups. */
int id_maps_write(pid_t pid, const struct boundary *b, struct sb_err *err)
{
	return spawn_id_maps_write(pid, b->command_uid, b->command_outside_uid, b->command_gid,
				   b->command_outside_gid, err);
}

void pid_namespace_read(pid_t pid, char *out, size_t len)
{
	char path[64];
	ssize_t n;

	snprintf(path, sizeof path, "/proc/%d/ns/pid", (int)pid);
	n = readlink(path, out, len - 1);
	out[n > 0 ? n : 0] = '\0';
}

/* ---- the wait loop ---- */


/* One read feeds the record and, when asked, the live tap: the tap never holds the read up. */
static void pipe_read(int *fd, struct output_capture *c, struct live_tap *tap, enum live_stream stream, bool drain)
{
	uint8_t buf[READ_CHUNK];

	while (*fd >= 0) {
		ssize_t n = read(*fd, buf, sizeof buf);

		if (n > 0) {
			output_feed(c, buf, (size_t)n);
			if (tap != NULL)
				live_tap_feed(tap, stream, buf, (size_t)n);
			if (!drain)
				return;
			continue;
		}
		if (n < 0 && errno == EINTR)
			continue;
		if (n == 0 || errno != EAGAIN)
			fd_close(fd);
		return;
	}
}

static void reports_read(int fd, struct run_state *st, struct exec_outcome *out)
{
	struct init_report r;
	ssize_t n;

	while ((n = read(fd, &r, sizeof r)) == (ssize_t)sizeof r) {
		if (r.kind == INIT_REPORT_READY) {
			st->pid_max_set = r.value;
			out->pid_max_bounded = r.value != 0;
		}
		/* Measured again after the command: a bound it could have raised is no bound. */
		if (r.kind == INIT_REPORT_PID_MAX_AFTER && r.value != st->pid_max_set)
			out->pid_max_bounded = false;
		if (r.kind == INIT_REPORT_COMMAND && !st->cmd_done) {
			st->cmd_done = true;
			st->wait_status = r.value;
		}
	}
	/* End of file: init has closed its end, i.e. it is exiting. The pipe now polls as hung
	 * up on every call; polled further, the loop would spin on this core while init's exit,
	 * woken on the same core, waits behind it (about 1 ms a call, measured). */
	if (n == 0)
		st->reports_ended = true;
}

static void teardown_begin(const struct boundary *b, struct run_state *st, int64_t now)
{
	if (st->teardown_start == 0) {
		st->teardown_start = now;
		st->teardown_deadline = now + b->teardown_ms;
	}
}

static void init_kill(const struct boundary *b, struct run_state *st, enum exec_status reason, int64_t now)
{
	/* SIGKILL to init from the parent namespace always lands; its death empties the
	 * namespace (zap_pid_ns_processes). */
	if (!st->killed)
		st->kill_reason = reason;
	st->killed = true;
	syscall(SYS_pidfd_send_signal, st->pidfd, SIGKILL, NULL, 0);
	teardown_begin(b, st, now);
}

static int poll_timeout(const struct run_state *st, int64_t now, bool reports_watched)
{
	int64_t until = st->teardown_start ? st->teardown_deadline : st->deadline;

	/* Unwatched reports become watched at reports_from: wake then, to watch them. */
	if (!reports_watched && !st->reports_ended && st->reports_from < until)
		until = st->reports_from;
	return until <= now ? 0 : (int)(until - now > INT_MAX ? INT_MAX : until - now);
}

void init_try_reap(struct run_state *st)
{
	siginfo_t info;

	memset(&info, 0, sizeof info);
	if (waitid((idtype_t)P_PIDFD, (id_t)st->pidfd, &info, WEXITED | WNOHANG) == 0 && info.si_pid != 0)
		st->reaped = true;
}

/* Init's reports while the command runs: watched once its output has ended, or from reports_from on.
 * Why not at once: a fresh init writes READY just before the command starts (init.c), and a loop that
 * woke for it would take a CPU from the command's start (measured: 0.2 ms of a one-shot call here). Its
 * value is only read at the end. What is watched at once either way: the output, init's pidfd (its end
 * and its namespace's) and the cancel. So a command that ends within REPORTS_QUIET_MS is seen by its
 * output's end; one whose output is held open after it (something stuck in the namespace) is seen at
 * most REPORTS_QUIET_MS later than before, and from then on every report is watched, as it always was. */
static bool reports_watched(const struct run_fds *f, const struct run_state *st, int64_t now)
{
	return !st->reports_ended && ((f->out[0] < 0 && f->errp[0] < 0) || now >= st->reports_from);
}

static void wait_loop(const struct boundary *b, struct live_tap *tap, struct run_fds *f, int cancel_fd,
		      struct run_state *st, struct exec_outcome *out)
{
	while (!st->reaped) {
		int64_t now = clock_mono_ms();
		bool watched = reports_watched(f, st, now);
		struct pollfd p[5] = {
			{ f->out[0], POLLIN, 0 },
			{ f->errp[0], POLLIN, 0 },
			{ watched ? f->report[0] : -1, POLLIN, 0 },
			{ st->pidfd, POLLIN, 0 },
			{ st->killed ? -1 : cancel_fd, POLLIN, 0 },
		};
		int n = poll(p, 5, poll_timeout(st, now, watched));

		steptime_wakeup();
		now = clock_mono_ms();
		if (n < 0 && errno != EINTR && !st->poll_failed) {
			/* The agent can no longer watch the command: end it, and let the teardown bound
			 * decide the rest. Never return with init alive: the next exec would overlap. */
			st->poll_failed = errno;
			init_kill(b, st, EXEC_UNCERTAIN, now);
		}
		if (p[0].revents)
			pipe_read(&f->out[0], &out->out, tap, LIVE_STDOUT, false);
		if (p[1].revents)
			pipe_read(&f->errp[0], &out->err, tap, LIVE_STDERR, false);
		if (p[2].revents) {
			reports_read(f->report[0], st, out);
			if (st->cmd_done)
				teardown_begin(b, st, now);
		}
		if (p[4].revents)
			init_kill(b, st, EXEC_CANCELLED, now);
		if (p[3].revents)
			init_try_reap(st);
		if (!st->reaped && !st->killed && !st->cmd_done && now >= st->deadline)
			init_kill(b, st, EXEC_TIMED_OUT, now);
		if (!st->reaped && st->teardown_start && now >= st->teardown_deadline)
			break; /* the namespace did not empty in time: uncertain */
	}
}

void error_read(int fd, char *msg, size_t len)
{
	ssize_t n = read(fd, msg, len - 1);

	msg[n > 0 ? n : 0] = '\0';
}

/* What happened, from what the loop saw. Order matters: a refused setup explains itself
 * first, an unconfirmed boundary overrides everything else. */
static void outcome_decide(const struct run_state *st, struct exec_outcome *out)
{
	out->init_reaped = st->reaped;
	if (!st->reaped) {
		out->status = EXEC_UNCERTAIN;
		snprintf(out->detail, sizeof out->detail,
			 "the namespace did not empty within %lld ms of the command's end; a process may be stuck in "
			 "uninterruptible sleep: the boundary was NOT confirmed",
			 (long long)(clock_mono_ms() - st->teardown_start));
	} else if (st->poll_failed) {
		out->status = EXEC_UNCERTAIN;
		snprintf(out->detail, sizeof out->detail, "the agent lost sight of the command (poll: %s); it was killed "
			 "and its namespace emptied, but its outcome is unknown", strerror(st->poll_failed));
	} else if (out->detail[0] != '\0') {
		out->status = EXEC_REFUSED;
	} else if (st->killed && !st->cmd_done) {
		out->status = st->kill_reason;
	} else if (st->cmd_done && WIFEXITED(st->wait_status)) {
		out->status = EXEC_EXITED;
		out->exit_code = WEXITSTATUS(st->wait_status);
	} else if (st->cmd_done && WIFSIGNALED(st->wait_status)) {
		out->status = EXEC_SIGNALED;
		out->signal = WTERMSIG(st->wait_status);
	} else {
		out->status = EXEC_UNCERTAIN;
		snprintf(out->detail, sizeof out->detail, "init ended without reporting the command's status");
	}
}

int outcome_init(const struct exec_request *req, struct exec_outcome *out, struct sb_err *err)
{
	memset(out, 0, sizeof *out);
	if (output_init(&out->out, req->output_limit, err) < 0)
		return -1;
	if (output_init(&out->err, req->output_limit, err) < 0) {
		output_free(&out->out);
		return -1;
	}
	return 0;
}

void exec_outcome_free(struct exec_outcome *out)
{
	output_free(&out->out);
	output_free(&out->err);
}

static void run_finish(struct live_tap *tap, struct run_fds *f, struct run_state *st, struct exec_outcome *out,
		       int64_t t0)
{
	/* Every writer is gone once init is reaped: take what the pipes hold, without waiting
	 * for an end of file that a descriptor smuggled out of the namespace could withhold. */
	pipe_read(&f->out[0], &out->out, tap, LIVE_STDOUT, true);
	pipe_read(&f->errp[0], &out->err, tap, LIVE_STDERR, true);
	reports_read(f->report[0], st, out);
	if (out->detail[0] == '\0')
		error_read(f->error[0], out->detail, sizeof out->detail);
	outcome_decide(st, out);
	out->ended_ms = clock_real_ms();
	out->duration_ms = clock_mono_ms() - t0;
	/* How long the namespace took to empty, or how long we waited before giving up. */
	if (st->teardown_start)
		out->teardown_ms = clock_mono_ms() - st->teardown_start;
	output_finish(&out->out);
	output_finish(&out->err);
}

/* Init released: the command's run to its end within its timeout, init reaped, everything read;
 * the descriptors and init's pidfd are closed. A fresh init's call and a prebuilt one's share it. */
void run_to_end(const struct boundary *b, const struct exec_request *req, int cancel_fd, struct run_fds *f,
		       struct run_state *st, struct exec_outcome *out, int64_t t0)
{
	st->deadline = t0 + (int64_t)req->timeout_seconds * 1000;
	st->reports_from = t0 + REPORTS_QUIET_MS;
	wait_loop(b, req->tap, f, cancel_fd, st, out);
	steptime_mark(STEP_AGENT_REAPED);
	run_finish(req->tap, f, st, out, t0);
	run_fds_close(f);
	close(st->pidfd);
}

int boundary_run(const struct boundary *b, const struct exec_request *req, int cancel_fd,
		 struct exec_outcome *out, struct sb_err *err)
{
	char *argv[] = { (char *)b->shell, "-c", (char *)req->command, NULL };
	char *envp[BOUNDARY_MAX_ENV + 1];
	struct run_state st = { .pidfd = -1 };
	struct run_fds f;
	struct run_view view;
	struct boundary run;
	struct init_context ctx;
	int64_t t0;

	if (request_check(req, err) < 0)
		return -1;
	if (run_view_build(b, req->cwd, NULL, &view, err) < 0 || outcome_init(req, out, err) < 0) {
		run_view_free(&view);
		return -1;
	}
	steptime_mark(STEP_VIEW);
	/* A test mounts here, after the agent's checks and before init's copy (kernel_fs_mounted_late). */
	FAILPOINT("agent.exec.view_checked");
	/* init hides what this view found: the boundary's own list plus the aliases of now. A shallow
	 * copy: everything else stays the boundary's, and init reads it from clone()'s copy of memory. */
	run = *b;
	run.hidden = view.hidden;
	run.n_hidden = view.n_hidden;
	memcpy(envp, req->env, req->n_env * sizeof(char *));
	envp[req->n_env] = NULL;
	if (run_fds_open(&f, err) < 0) {
		run_view_free(&view);
		exec_outcome_free(out);
		return -1;
	}
	ctx = (struct init_context){
		.b = &run, .cwd = req->cwd, .argv = argv, .envp = envp, .uid = b->command_uid, .gid = b->command_gid,
		.go_fd = f.go[0], .report_fd = f.report[1], .error_fd = f.error[1],
		.stdout_fd = f.out[1], .stderr_fd = f.errp[1],
	};
	out->started_ms = clock_real_ms();
	t0 = clock_mono_ms();
	st.pid = init_spawn(&ctx, &st.pidfd, err);
	steptime_mark(STEP_CLONED);
	/* agent: the child's ends are init's business now. */
	fd_close(&f.go[0]);
	fd_close(&f.report[1]);
	fd_close(&f.error[1]);
	fd_close(&f.out[1]);
	fd_close(&f.errp[1]);
	run_view_free(&view); /* init has its copy (or there is no init) */
	if (st.pid < 0) {
		run_fds_close(&f);
		exec_outcome_free(out);
		return -1;
	}
	pid_namespace_read(st.pid, out->pid_namespace, sizeof out->pid_namespace);
	if (id_maps_write(st.pid, b, err) < 0) {
		/* init is waiting on the go pipe: closing it ends init; reap it below. */
		snprintf(out->detail, sizeof out->detail, "%s", err->msg);
		sb_err_clear(err);
	} else if (write(f.go[1], "1", 1) != 1) {
		sb_fail_errno(err, "releasing init");
		snprintf(out->detail, sizeof out->detail, "%s", err->msg);
	}
	fd_close(&f.go[1]);
	steptime_mark(STEP_RELEASED);
	run_to_end(b, req, cancel_fd, &f, &st, out, t0);
	return 0;
}
