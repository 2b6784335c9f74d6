/* init: PID 1 of a command's PID namespace, in the spirit of tini: single-threaded, default
 * signal dispositions, no handlers, reaps everything. Also the command's last steps.
 * Runs in a clone() of the agent: no allocation, no stdio, no libc fork() (whose atfork
 * handlers take locks another agent thread may have held at clone time). The static agent is
 * built against musl (issue 32); the libc functions used here take no lock and broadcast nothing
 * in either libc: system call wrappers (setrlimit is prlimit64 in both; musl broadcasts to its
 * threads only where the kernel lacks prlimit64, before Linux 2.6.36) and string and memory
 * functions on init's own buffers (an error's text: vsnprintf, no FILE lock). Signals and
 * credentials go through bare system calls (nsspawn.h says why). */
#include "init.h"

#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "fdio.h"
#include "landlock.h"
#include "mounts.h"
#include "privileges.h"
#include "seccomp.h"
#include "steptime.h"
#include "nsspawn.h"

/* Report a failed setup step to the agent and die at once: the agent turns the message into
 * a refused outcome, so "child exited 125" is never all that anybody learns. */
__attribute__((noreturn)) static void die_report(int error_fd, const char *role, const struct sb_err *err)
{
	spawn_die(error_fd, role, err, INIT_EXIT_SETUP_FAILED);
}

/* Fails only when the agent is gone (nobody holds the read end any more). */
static int report(int fd, enum init_report_kind kind, int32_t value)
{
	struct init_report r = { .kind = kind, .value = value };

	return fd_write_all(fd, &r, sizeof r);
}

/* If the agent dies, so does init, and with it the namespace. */
static void parent_death_arm(const struct init_context *ctx)
{
	struct sb_err err;

	if (prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0) < 0) {
		sb_fail_errno(&err, "PR_SET_PDEATHSIG");
		die_report(ctx->error_fd, "init", &err);
	}
}

static int stdio_attach(const struct init_context *ctx, struct sb_err *err)
{
	int null_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);

	/* stdin from /dev/null: commands are not interactive, and a terminal would let them
	 * inject input elsewhere. init closed 0-2, so the open may land there: move it above 2
	 * first, or a dup2 below would overwrite it. dup2 leaves 0-2 without close-on-exec, as
	 * execve needs. The pipe ends are above 2 (the agent keeps 0-2 open from its start). */
	if (null_fd >= 0 && null_fd < 3) {
		int high = fcntl(null_fd, F_DUPFD_CLOEXEC, 3);

		close(null_fd);
		null_fd = high;
	}
	if (null_fd < 0)
		return sb_fail_errno(err, "opening /dev/null");
	if (dup2(null_fd, 0) < 0 || dup2(ctx->stdout_fd, 1) < 0 || dup2(ctx->stderr_fd, 2) < 0)
		return sb_fail_errno(err, "attaching stdin, stdout and stderr");
	close(null_fd);
	return 0;
}

/* command: one Landlock layer with the per-call scopes and, in the read-only world, writes only
 * beneath the writable roots, the private /tmp, the fresh /dev and /proc: a FIFO of the host
 * (which a read-only mount leaves writable) stays shut. */
static int landlock_command(const struct init_context *ctx, struct sb_err *err)
{
	const struct boundary *b = ctx->b;
	const char *roots[BOUNDARY_MAX_WRITABLE + 4];
	size_t n = 0;

	if (b->readonly_world) {
		roots[n++] = ctx->cwd;
		for (size_t i = 0; i < b->n_writable; i++)
			roots[n++] = b->writable[i];
		roots[n++] = "/tmp";
		roots[n++] = "/dev";
		roots[n++] = "/proc";
	}
	return landlock_restrict_command(b->landlock_abi, b->landlock_per_call, roots, n, err);
}

/* command, PID 2: the remaining steps in ISOLATION.md's order, seccomp last, then the shell. */
__attribute__((noreturn)) static void command_main(const struct init_context *ctx)
{
	const struct boundary *b = ctx->b;
	struct sb_err err;

	steptime_mark(STEP_CMD_START);
	/* A session of its own: no controlling terminal, and no signal aimed at the agent's
	 * process group can reach it (nor the reverse). */
	if (setsid() < 0) {
		sb_fail_errno(&err, "setsid");
		die_report(ctx->error_fd, "command", &err);
	}
	if (stdio_attach(ctx, &err) < 0 || privileges_limit_command(b->max_processes, &err) < 0)
		die_report(ctx->error_fd, "command", &err);
	/* What the command creates is its own uid's alone (rule N3): the worktree and the repository's
	 * shared objects are read by no other user, and a file a command writes must not be either. Per
	 * process (no CLONE_FS), so init's umask is unchanged. */
	umask(077);
	if (landlock_command(ctx, &err) < 0)
		die_report(ctx->error_fd, "command", &err);
	steptime_mark(STEP_CMD_LANDLOCK);
	/* Everything above 2 closes at execve (the error pipe stays usable until then), so the
	 * command starts with exactly stdin, stdout and stderr. */
	if (spawn_fds_cloexec_above_stdio(&err) < 0)
		die_report(ctx->error_fd, "command", &err);
	/* Seccomp last: it denies calls that the steps above make. A prebuilt init loaded the same
	 * program into itself before its call existed (init_main()); the command inherited it with the
	 * clone, and loading it again would only stack a second copy. */
	if (!ctx->prebuilt && seccomp_load_prog(b->seccomp, &err) < 0)
		die_report(ctx->error_fd, "command", &err);
	steptime_mark(STEP_CMD_EXEC);
	execve(ctx->argv[0], ctx->argv, ctx->envp);
	sb_fail_errno(&err, "executing %s", ctx->argv[0]);
	die_report(ctx->error_fd, "command", &err);
}

static int command_entry(void *arg)
{
	command_main(arg);
}

/* The command's stack until its execve: init's own memory (init is a copy of the agent per command),
 * never the agent's, and used by one command at a time. */
static char command_stack[64 * 1024] __attribute__((aligned(16)));

/* init: the command as a vfork-style clone. CLONE_VM shares init's memory until the command's execve
 * or death, so init's page tables are not copied (the copy was most of a fork's cost); CLONE_VFORK
 * suspends init for that time, so the two never run on the same memory at once. Safe because the
 * command's steps before execve allocate nothing and write only their own stack (command_stack), the
 * pipes and their own kernel state: the session, descriptors, limits, Landlock and seccomp are per
 * process (no CLONE_THREAD, CLONE_FILES or CLONE_SIGHAND), so none of them reaches init. Neither
 * glibc's clone() nor musl's runs atfork handlers. */
static pid_t command_start(const struct init_context *ctx)
{
	return (pid_t)clone(command_entry, command_stack + sizeof command_stack, CLONE_VM | CLONE_VFORK | SIGCHLD,
			    (void *)ctx);
}

/* A prebuilt init's call: the command and its environment, into init's own memory (static: init
 * allocates nothing). Init is a copy of the agent made before the call existed, so this is the only
 * way the call reaches it; every length is bounded before a byte is stored. */
static char call_text[INIT_CALL_COMMAND_MAX + 1 + INIT_CALL_ENV_MAX];
static char *call_argv[4];
static char *call_envp[BOUNDARY_MAX_ENV + 1];

/* -1: the agent closed the pipe (discarded this init) or sent something out of bounds. */
static int call_receive(const struct init_context *ctx, struct init_context *run)
{
	struct init_call h;
	char *env, *end;
	size_t n = 0;

	if (fd_read_exact(ctx->go_fd, &h, sizeof h) < 0 || h.command_len > INIT_CALL_COMMAND_MAX ||
	    h.env_len > INIT_CALL_ENV_MAX || h.n_env > BOUNDARY_MAX_ENV ||
	    fd_read_exact(ctx->go_fd, call_text, h.command_len) < 0)
		return -1;
	call_text[h.command_len] = '\0';
	env = call_text + h.command_len + 1;
	if (fd_read_exact(ctx->go_fd, env, h.env_len) < 0)
		return -1;
	end = env + h.env_len;
	while (n < h.n_env) {
		char *nul = memchr(env, '\0', (size_t)(end - env));

		if (nul == NULL)
			return -1;
		call_envp[n++] = env;
		env = nul + 1;
	}
	if (env != end)
		return -1;
	call_envp[n] = NULL;
	call_argv[0] = ctx->argv[0];
	call_argv[1] = ctx->argv[1];
	call_argv[2] = call_text;
	call_argv[3] = NULL;
	run->argv = call_argv;
	run->envp = call_envp;
	return 0;
}

/* Reap every process re-parented to us; return when the command itself ends. */
static int reap_until_command_ends(pid_t command)
{
	for (;;) {
		int status;
		pid_t pid = waitpid(-1, &status, 0);

		if (pid == command)
			return status;
		if (pid < 0 && errno != EINTR)
			return -1;
	}
}

void init_main(const struct init_context *ctx)
{
	static struct init_bound bound = { .kind = INIT_REPORT_BOUND };
	struct steptime *marks = steptime_page;
	struct init_context run = *ctx;
	struct sb_err err;
	unsigned long pid_max_set = 0;
	char go;
	pid_t command;
	int status;

	/* init, inside. Armed before waiting for the release: an agent that died earlier shows as
	 * end of file below. */
	parent_death_arm(ctx);
	/* A prebuilt init is built before its call exists: a call that came back to back is claimed (its
	 * marks reset) before the build ends and waits for it, and the build's marks would land in that
	 * call's line. It marks its call's steps only (init's own copy of the pointer; the agent's is
	 * untouched). */
	if (ctx->prebuilt)
		steptime_page = NULL;
	/* Clean signal state (a handler would make init signalable from inside), and only init's
	 * own five descriptors: nothing of the agent's stays open while a command runs. */
	unsigned keep[5] = { (unsigned)ctx->go_fd, (unsigned)ctx->report_fd, (unsigned)ctx->error_fd,
			     (unsigned)ctx->stdout_fd, (unsigned)ctx->stderr_fd };

	if (spawn_signals_default(&err) < 0 || spawn_fds_keep(keep, 5, &err) < 0)
		die_report(ctx->error_fd, "init", &err);
	if (read(ctx->go_fd, &go, 1) != 1)
		_exit(INIT_EXIT_SETUP_FAILED);
	if (!ctx->prebuilt)
		close(ctx->go_fd);
	steptime_mark(STEP_INIT_GO);
	/* The view first, while init holds the namespace's CAP_SYS_ADMIN. */
	if (mounts_build_view(ctx->b, ctx->cwd, ctx->uid, ctx->gid, &pid_max_set, &bound, &err) < 0)
		die_report(ctx->error_fd, "init", &err);
	/* Then init gives up every capability; the command inherits the empty sets. */
	if (privileges_drop(ctx->uid, ctx->gid, ctx->b->no_caps, &err) < 0)
		die_report(ctx->error_fd, "init", &err);
	/* Not dumpable after the last credential change (which resets it), and before the
	 * command exists: a same-uid command can then neither ptrace init nor open /proc/1/mem,
	 * environ or exe. bubblewrap's init misses this (its issue #367). */
	if (prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) < 0) {
		sb_fail_errno(&err, "PR_SET_DUMPABLE");
		die_report(ctx->error_fd, "init", &err);
	}
	/* The credential change also cleared the parent-death signal whenever it changed the
	 * effective uid in kernel terms: under a root agent, host 0 became the mapped uid. Re-arm
	 * it. An agent that died in between no longer holds the report pipe, so the report below
	 * fails and init leaves before any command exists: no window is left unguarded. */
	parent_death_arm(ctx);
	steptime_mark(STEP_INIT_DROPPED);
	/* Prebuilt (prebuilt.h): from here on init holds nothing a call could change but its command
	 * and environment, which it waits for, unprivileged, with what it bound reported first.
	 * It loads the command's seccomp filter into itself first (docs/isolation.md, "The prebuilt
	 * init loads the command's filter"): the same program the command would load, inherited by
	 * the command through the clone, never removable; init's own remaining calls (read, write,
	 * close, clone without CLONE_NEWUSER, wait4, openat, exit_group) are none that it denies. So
	 * the load is off the call's path, and init itself is under the filter too. no_new_privs is
	 * what allows the load without privilege (the command sets it again; it stays set). */
	if (ctx->prebuilt) {
		if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0) {
			sb_fail_errno(&err, "setting no_new_privs");
			die_report(ctx->error_fd, "init", &err);
		}
		if (seccomp_load_prog(ctx->b->seccomp, &err) < 0)
			die_report(ctx->error_fd, "init", &err);
		if (fd_write_all(ctx->report_fd, &bound, sizeof bound) < 0 || call_receive(ctx, &run) < 0)
			_exit(INIT_EXIT_SETUP_FAILED);
		close(ctx->go_fd);
		steptime_page = marks;
	}
	if (report(ctx->report_fd, INIT_REPORT_READY, (int32_t)pid_max_set) < 0)
		_exit(INIT_EXIT_SETUP_FAILED);
	command = command_start(&run);
	if (command < 0) {
		sb_fail_errno(&err, "starting the command");
		die_report(ctx->error_fd, "init", &err);
	}
	/* Init keeps no end of the output pipes: once the namespace is empty they reach EOF. */
	close(ctx->stdout_fd);
	close(ctx->stderr_fd);
	close(ctx->error_fd);
	status = reap_until_command_ends(command);
	steptime_mark(STEP_INIT_REAPED);
	/* The receipt states what was measured: pid_max as the command left it, read before the
	 * status so the agent holds both when it decides. A failed report means the agent is
	 * gone; exiting below is the teardown either way. */
	if (report(ctx->report_fd, INIT_REPORT_PID_MAX_AFTER, (int32_t)mounts_pid_max_read()) < 0 ||
	    (status >= 0 && report(ctx->report_fd, INIT_REPORT_COMMAND, status) < 0))
		_exit(INIT_EXIT_SETUP_FAILED);
	/* init's exit is the teardown: the kernel SIGKILLs everything left in the namespace,
	 * nested namespaces included, and only then lets the agent reap init. */
	_exit(status >= 0 ? 0 : INIT_EXIT_SETUP_FAILED);
}
