/* agent, outside: creates a command's namespaces, writes the id maps, reads the output, keeps
 * the deadline and reaps init (see boundary.h). The command's side is in init.c. Everything
 * init and the command need is prepared here before clone(), because after it they allocate
 * nothing. */
#include "boundary.h"

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
#include <grp.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "clock.h"
#include "init.h"
#include "landlock.h"
#include "seccomp.h"
#include "mountfd.h"
#include "nsspawn.h"
#include "privdir.h"

#ifndef P_PIDFD
#define P_PIDFD 3
#endif

#define DEFAULT_TEARDOWN_MS 5000
#define READ_CHUNK 65536

static const char *const status_names[] = {
	[EXEC_EXITED] = "exited",       [EXEC_SIGNALED] = "signaled", [EXEC_TIMED_OUT] = "timed_out",
	[EXEC_CANCELLED] = "cancelled", [EXEC_UNCERTAIN] = "uncertain", [EXEC_REFUSED] = "refused",
};

const char *exec_status_name(enum exec_status s)
{
	return status_names[s];
}

/* ---- preparation, once per agent ---- */

void hidden_dir_from_privdir(struct hidden_dir *h, const struct privdir *d)
{
	memcpy(h->path, d->path, sizeof h->path);
	h->dev = d->dev;
	h->ino = d->ino;
}

int hidden_dir_from_path(struct hidden_dir *h, const char *path, struct sb_err *err)
{
	struct stat st;
	int fd;

	/* Resolved once, now: a symlink swapped in later cannot redirect the hiding mount, and
	 * init covers only the directory with this identity. */
	if (realpath(path, h->path) == NULL)
		return sb_fail_errno(err, "directory to hide %s", path);
	fd = mfd_open_nofollow(AT_FDCWD, h->path, O_PATH | O_DIRECTORY);
	if (fd < 0 || fstat(fd, &st) < 0) {
		sb_fail_errno(err, "directory to hide %s", h->path);
		if (fd >= 0)
			close(fd);
		return -1;
	}
	close(fd);
	h->dev = st.st_dev;
	h->ino = st.st_ino;
	return 0;
}

static bool path_within(const char *path, const char *dir)
{
	size_t n = strlen(dir);

	return strncmp(path, dir, n) == 0 && (path[n] == '/' || path[n] == '\0' || n == 1);
}

/* A writable root and a protected path (a hidden directory, the agent binary) must not nest
 * either way: inside a writable root the command could rename the protected path's ancestors
 * (and put its own directory in their place) or replace the binary the next exec runs. */
static int writable_check(const struct boundary *b, const char *root, struct sb_err *err)
{
	/* The kernel's own trees are never a command's to write: a copy of the host's /dev would
	 * bring back every terminal the fresh one leaves out, /proc and /sys are the machine's. The
	 * private /dev/shm may hold a writable root of its own. */
	if (path_within(root, "/proc") || path_within(root, "/sys") ||
	    (path_within(root, "/dev") && !path_within(root, "/dev/shm")) || strcmp(root, "/dev/shm") == 0)
		return sb_fail(err, EACCES, "%s cannot be a writable root: /proc, /sys and /dev belong to the kernel "
			       "(a directory under /dev/shm can)", root);
	for (size_t i = 0; i < b->n_hidden; i++)
		if (path_within(b->hidden[i].path, root) || path_within(root, b->hidden[i].path))
			return sb_fail(err, EACCES, "the agent's private directory %s lies %s the writable %s: choose a "
				       "private directory outside every writable root", b->hidden[i].path,
				       path_within(root, b->hidden[i].path) ? "around" : "inside", root);
	if (b->agent_exe[0] != '\0' && path_within(b->agent_exe, root))
		return sb_fail(err, EACCES, "the agent binary %s lies inside the writable %s, where a command could "
			       "replace it: install it outside (e.g. /usr/local/bin)", b->agent_exe, root);
	return 0;
}

static int writable_add(struct boundary *b, const char *path, struct sb_err *err)
{
	char *real;

	if (b->n_writable >= BOUNDARY_MAX_WRITABLE)
		return sb_fail(err, E2BIG, "more than %d writable roots", BOUNDARY_MAX_WRITABLE);
	real = realpath(path, NULL);
	if (real == NULL)
		return sb_fail_errno(err, "writable root %s", path);
	b->writable[b->n_writable++] = real;
	return writable_check(b, real, err);
}

static int landlock_prepare(struct boundary *b, const struct boundary_options *opts, struct sb_err *err)
{
	b->landlock_abi = landlock_abi();
	if (opts->n_block_ports == 0) {
		/* No big domain above the command: a per-call layer with scopes only is cheap. */
		b->landlock_per_call = b->landlock_abi >= 6;
		return 0;
	}
	if (opts->n_block_ports > BOUNDARY_MAX_PORTS)
		return sb_fail(err, E2BIG, "more than %d blocked ports", BOUNDARY_MAX_PORTS);
	memcpy(b->block_ports, opts->block_ports, opts->n_block_ports * sizeof(uint16_t));
	b->n_block_ports = opts->n_block_ports;
	/* The agent restricts itself, once: it makes no outbound TCP connections, and every
	 * command inherits the domain for free. A per-call layer under it would cost ~12 ms. */
	b->landlock_per_call = false;
	if (landlock_restrict_ports(b->landlock_abi, b->block_ports, b->n_block_ports, err) < 0) {
		sb_err_prefix(err, "blocking ports for commands");
		return -1;
	}
	return 0;
}

/* Does the agent's euid stand for host root? In the initial user namespace uid_map reads
 * "0 0 4294967295"; a namespace that maps its 0 to host 0 counts the same. */
static bool euid_is_host_root(void)
{
	unsigned long inside, outside, count;
	bool host_root = false;
	FILE *f;

	if (geteuid() != 0)
		return false;
	f = fopen("/proc/self/uid_map", "re");
	if (f == NULL)
		return true; /* cannot tell: assume the worst */
	while (fscanf(f, "%lu %lu %lu", &inside, &outside, &count) == 3)
		if (inside == 0 && outside == 0)
			host_root = true;
	fclose(f);
	return host_root;
}

/* Which ids run commands. Never host root: a process whose uid is host 0 needs no capability
 * to write /proc/sys, /proc/sysrq-trigger, sysfs or root-owned device nodes (the kernel checks
 * ownership there, not capabilities), so a host-root agent runs its commands as an unprivileged
 * uid, mapped 1:1 so that file ownership reads the same inside and out. And never uid 0 of the
 * command's own user namespace, which owns its PID namespace: that namespace's root may write
 * per-namespace sysctls such as pid_max (kernel/pid.c, Linux >= 6.14) and owns init's /proc
 * files once init is not dumpable. So an agent that is uid 0 of a namespace of its own (a
 * rootless container) maps the sandbox uid inside to its own 0 outside: the same kernel uid,
 * with no uid 0 in the command's namespace at all. */
static int command_ids_choose(struct boundary *b, const struct boundary_options *opts, struct sb_err *err)
{
	uid_t sandbox_uid = opts->sandbox_uid ? opts->sandbox_uid : BOUNDARY_SANDBOX_ID_DEFAULT;
	gid_t sandbox_gid = opts->sandbox_gid ? opts->sandbox_gid : BOUNDARY_SANDBOX_ID_DEFAULT;

	b->command_uid = b->command_outside_uid = geteuid();
	b->command_gid = b->command_outside_gid = getegid();
	if (geteuid() == 0) {
		b->command_uid = sandbox_uid;
		b->command_gid = sandbox_gid;
		if (euid_is_host_root()) {
			b->command_outside_uid = sandbox_uid;
			b->command_outside_gid = sandbox_gid;
			/* The command inherits the supplementary groups of its creator, and setgroups is
			 * denied in its namespace, so it could never drop them: a root agent started
			 * with root's groups (a login shell's initgroups) would hand group 0 to nobody.
			 * The agent needs none of them after its keys are loaded: drop them for good. */
			if (setgroups(0, NULL) < 0)
				return sb_fail_errno(err, "dropping the agent's supplementary groups");
		}
	} else if (getegid() == 0) {
		b->command_gid = sandbox_gid; /* gid 0 inside would own the namespace's files too */
	}
	if (b->command_uid == 0 || b->command_gid == 0)
		return sb_fail(err, EPERM, "commands never run as uid 0: choose another sandbox uid and gid");
	return 0;
}

int boundary_prepare(struct boundary *b, const struct boundary_options *opts, struct sb_err *err)
{
	ssize_t n;

	memset(b, 0, sizeof *b);
	b->max_processes = opts->max_processes ? opts->max_processes : BOUNDARY_MAX_PROCESSES_DEFAULT;
	b->teardown_ms = DEFAULT_TEARDOWN_MS;
	b->shell = access("/bin/bash", X_OK) == 0 ? "/bin/bash" : "/bin/sh";
	b->readonly_world = opts->readonly_world;
	b->tmp_bytes = opts->tmp_bytes ? opts->tmp_bytes : BOUNDARY_TMP_BYTES_DEFAULT;
	b->shm_bytes = opts->shm_bytes ? opts->shm_bytes : BOUNDARY_SHM_BYTES_DEFAULT;
	if (command_ids_choose(b, opts, err) < 0)
		return -1;
	if (opts->n_hidden > BOUNDARY_MAX_HIDDEN)
		return sb_fail(err, E2BIG, "more than %d private directories", BOUNDARY_MAX_HIDDEN);
	memcpy(b->hidden, opts->hidden, opts->n_hidden * sizeof opts->hidden[0]);
	b->n_hidden = opts->n_hidden;
	/* The binary the next exec will run: a command must never be able to replace it. */
	n = readlink("/proc/self/exe", b->agent_exe, sizeof b->agent_exe - 1);
	b->agent_exe[n > 0 && (size_t)n < sizeof b->agent_exe - 1 ? n : 0] = '\0';
	for (size_t i = 0; i < opts->n_writable; i++)
		if (writable_add(b, opts->writable[i], err) < 0)
			return -1;
	b->no_caps = cap_init();
	if (b->no_caps == NULL)
		return sb_fail_errno(err, "cap_init");
	if (seccomp_compile(&b->seccomp, err) < 0)
		return -1;
	return landlock_prepare(b, opts, err);
}

void boundary_free(struct boundary *b)
{
	for (size_t i = 0; i < b->n_writable; i++)
		free(b->writable[i]);
	b->n_writable = 0;
	b->n_hidden = 0;
	free(b->seccomp.filter);
	b->seccomp.filter = NULL;
	if (b->no_caps != NULL)
		cap_free(b->no_caps);
	b->no_caps = NULL;
}

/* ---- one command ---- */

static int request_check(const struct boundary *b, const struct exec_request *req, struct sb_err *err)
{
	/* common/names.c: the exec id becomes a file name in the receipt and journal directories. */
	if (!exec_id_valid(req->exec_id))
		return sb_fail(err, EINVAL, "exec id '%s' must be 1-%d characters of [A-Za-z0-9._-], not starting "
			       "with '.' or '-'", req->exec_id, EXEC_ID_MAX);
	if (req->cwd == NULL || req->cwd[0] != '/')
		return sb_fail(err, EINVAL, "working directory must be an absolute path");
	if (req->timeout_seconds == 0)
		return sb_fail(err, EINVAL, "timeout must be at least 1 second");
	if (req->n_env >= BOUNDARY_MAX_ENV)
		return sb_fail(err, E2BIG, "more than %d environment variables", BOUNDARY_MAX_ENV - 1);
	/* The working directory is a writable root like any other. */
	return writable_check(b, req->cwd, err);
}

/* The descriptors between agent and init; index 0 is the agent's end unless noted. */
struct run_fds {
	int out[2], errp[2];   /* output pipes: [0] agent reads, [1] command writes */
	int go[2];             /* [0] init reads, [1] agent writes */
	int report[2];         /* [0] agent reads, [1] init writes */
	int error[2];          /* [0] agent reads, [1] init and command write */
};

static void fd_close(int *fd)
{
	if (*fd >= 0)
		close(*fd);
	*fd = -1;
}

static void run_fds_close(struct run_fds *f)
{
	int *all = (int *)f;

	for (size_t i = 0; i < sizeof *f / sizeof(int); i++)
		fd_close(&all[i]);
}

static int run_fds_open(struct run_fds *f, struct sb_err *err)
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

/* Into the new namespaces with a pidfd. User namespace first among equals: it owns the others,
 * so an unprivileged agent can create them. The command is never PID 1: init is. */
static pid_t init_spawn(const struct init_context *ctx, int *pidfd, struct sb_err *err)
{
	pid_t pid = spawn_clone(CLONE_NEWUSER | CLONE_NEWPID | CLONE_NEWNS | CLONE_NEWIPC | CLONE_NEWUTS, pidfd, err);

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
static int id_maps_write(pid_t pid, const struct boundary *b, struct sb_err *err)
{
	return spawn_id_maps_write(pid, b->command_uid, b->command_outside_uid, b->command_gid,
				   b->command_outside_gid, err);
}

static void pid_namespace_read(pid_t pid, char *out, size_t len)
{
	char path[64];
	ssize_t n;

	snprintf(path, sizeof path, "/proc/%d/ns/pid", (int)pid);
	n = readlink(path, out, len - 1);
	out[n > 0 ? n : 0] = '\0';
}

/* ---- the wait loop ---- */

struct run_state {
	pid_t pid;
	int pidfd;
	bool cmd_done, killed, reaped;
	int poll_failed;          /* errno of a failed poll: the outcome is uncertain */
	int32_t pid_max_set;      /* what init set pid_max to (0: not bounded) */
	int wait_status;
	enum exec_status kill_reason;
	int64_t deadline, teardown_start, teardown_deadline;
};

static void pipe_read(int *fd, struct output_capture *c, bool drain)
{
	uint8_t buf[READ_CHUNK];

	while (*fd >= 0) {
		ssize_t n = read(*fd, buf, sizeof buf);

		if (n > 0) {
			output_feed(c, buf, (size_t)n);
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

	while (read(fd, &r, sizeof r) == (ssize_t)sizeof r) {
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

static int poll_timeout(const struct run_state *st, int64_t now)
{
	int64_t until = st->teardown_start ? st->teardown_deadline : st->deadline;

	return until <= now ? 0 : (int)(until - now > INT_MAX ? INT_MAX : until - now);
}

static void init_try_reap(struct run_state *st)
{
	siginfo_t info;

	memset(&info, 0, sizeof info);
	if (waitid((idtype_t)P_PIDFD, (id_t)st->pidfd, &info, WEXITED | WNOHANG) == 0 && info.si_pid != 0)
		st->reaped = true;
}

static void wait_loop(const struct boundary *b, struct run_fds *f, int cancel_fd, struct run_state *st,
		      struct exec_outcome *out)
{
	while (!st->reaped) {
		struct pollfd p[5] = {
			{ f->out[0], POLLIN, 0 }, { f->errp[0], POLLIN, 0 }, { f->report[0], POLLIN, 0 },
			{ st->pidfd, POLLIN, 0 }, { st->killed ? -1 : cancel_fd, POLLIN, 0 },
		};
		int64_t now = clock_mono_ms();
		int n = poll(p, 5, poll_timeout(st, now));

		now = clock_mono_ms();
		if (n < 0 && errno != EINTR && !st->poll_failed) {
			/* The agent can no longer watch the command: end it, and let the teardown bound
			 * decide the rest. Never return with init alive: the next exec would overlap. */
			st->poll_failed = errno;
			init_kill(b, st, EXEC_UNCERTAIN, now);
		}
		if (p[0].revents)
			pipe_read(&f->out[0], &out->out, false);
		if (p[1].revents)
			pipe_read(&f->errp[0], &out->err, false);
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

static void error_read(int fd, char *msg, size_t len)
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

static int outcome_init(const struct exec_request *req, struct exec_outcome *out, struct sb_err *err)
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

static void run_finish(struct run_fds *f, struct run_state *st, struct exec_outcome *out, int64_t t0)
{
	/* Every writer is gone once init is reaped: take what the pipes hold, without waiting
	 * for an end of file that a descriptor smuggled out of the namespace could withhold. */
	pipe_read(&f->out[0], &out->out, true);
	pipe_read(&f->errp[0], &out->err, true);
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

int boundary_run(const struct boundary *b, const struct exec_request *req, int cancel_fd,
		 struct exec_outcome *out, struct sb_err *err)
{
	char *argv[] = { (char *)b->shell, "-c", (char *)req->command, NULL };
	char *envp[BOUNDARY_MAX_ENV + 1];
	struct run_state st = { .pidfd = -1 };
	struct run_fds f;
	struct init_context ctx;
	int64_t t0;

	if (request_check(b, req, err) < 0 || outcome_init(req, out, err) < 0)
		return -1;
	memcpy(envp, req->env, req->n_env * sizeof(char *));
	envp[req->n_env] = NULL;
	if (run_fds_open(&f, err) < 0) {
		exec_outcome_free(out);
		return -1;
	}
	ctx = (struct init_context){
		.b = b, .cwd = req->cwd, .argv = argv, .envp = envp, .uid = b->command_uid, .gid = b->command_gid,
		.go_fd = f.go[0], .report_fd = f.report[1], .error_fd = f.error[1],
		.stdout_fd = f.out[1], .stderr_fd = f.errp[1],
	};
	out->started_ms = clock_real_ms();
	t0 = clock_mono_ms();
	st.pid = init_spawn(&ctx, &st.pidfd, err);
	/* agent: the child's ends are init's business now. */
	fd_close(&f.go[0]);
	fd_close(&f.report[1]);
	fd_close(&f.error[1]);
	fd_close(&f.out[1]);
	fd_close(&f.errp[1]);
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
	st.deadline = t0 + (int64_t)req->timeout_seconds * 1000;
	wait_loop(b, &f, cancel_fd, &st, out);
	run_finish(&f, &st, out, t0);
	run_fds_close(&f);
	close(st.pidfd);
	return 0;
}
