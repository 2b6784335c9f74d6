/* One prepare() of the process backend (process.h), manager, outside: the agent's private directory,
 * the planned root, the pipes, the clone into new user, PID, mount, IPC, UTS and network namespaces
 * (into the sandbox's cgroup), the id maps, the network (process_net.c), the release of sandbox
 * init, then bounded waits for its setup and for the agent's socket. A failed launch leaves nothing running, or says that its end is not proven.
 * Must never allocate or call glibc fork/malloc in the clone (sandbox_init.c runs there). */
#include "process.h"

#include "clock.h"
#include "log.h"
#include "nsspawn.h"
#include "pathfmt.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/sched.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>

#define SETUP_MS 10000        /* sandbox init: from release to execve of the agent */
#define READY_MS 10000        /* the agent: from execve to a socket that accepts (ASan builds are slow) */
#define ABORT_MS 5000         /* a failed prepare: from SIGKILL to the reaped init */
#define LOG_TAIL_BYTES 600    /* of agent.log, in the message of a failed prepare */

struct launch {
	const struct process_settings *set;
	struct agent_dir d;             /* private directory, the agent's argv and envp (agent_dir.h) */
	char root[PATH_MAX];            /* <private_dir>/root: the new root's mount point on the host */
	char users[PATH_MAX];           /* <private_dir>/etc: the sandbox's passwd and group (process_users.c) */
	char agent[PATH_MAX];
	const char *workdir;
	struct steps steps;
	off_t log_start;                /* agent.log's size before this launch: its tail is ours */
	int go[2], error[2];            /* [0] read, [1] write; go: manager -> init, error: init -> manager */
	int log_fd, null_fd;
	int net_ready;                  /* slirp4netns's ready pipe until it said ready, -1 when none */
	int cgroup_fd;                  /* the sandbox's own cgroup, -1 when none */
	char cgroup_name[CGROUP_NAME_MAX]; /* its name under the delegated parent, "" when none */
	bool groups_drop;               /* a root manager: init drops the supplementary groups it inherited */
	enum sandbox_network network;   /* the session's policy (process_net.c) */
};

static void fd_close(int *fd)
{
	if (*fd >= 0)
		close(*fd);
	*fd = -1;
}

static void launch_free(struct launch **lp)
{
	struct launch *l = *lp;

	if (l == NULL)
		return;
	steps_free(&l->steps);
	fd_close(&l->go[0]);
	fd_close(&l->go[1]);
	fd_close(&l->error[0]);
	fd_close(&l->error[1]);
	fd_close(&l->log_fd);
	fd_close(&l->null_fd);
	fd_close(&l->cgroup_fd);
	fd_close(&l->net_ready);
	free(l);
}

static int launch_paths(struct launch *l, const struct sandbox_spec *spec, struct sb_err *err)
{
	struct stat st;

	/* Canonical from here on: the root is built without following any symbolic link. */
	if (realpath(spec->agent_path, l->agent) == NULL)
		return sb_fail_errno(err, "agent binary %s", spec->agent_path);
	if (stat(l->agent, &st) < 0 || !S_ISREG(st.st_mode) || access(l->agent, X_OK) < 0)
		return sb_fail(err, ENOEXEC, "agent binary %s is not an executable file", l->agent);
	if (agent_dir_prepare(&l->d, spec, err) < 0 ||
	    path_fmt(l->root, sizeof l->root, err, "%s/root", l->d.private_dir) < 0 ||
	    path_fmt(l->users, sizeof l->users, err, "%s/etc", l->d.private_dir) < 0)
		return -1;
	if (mkdir(l->root, 0700) < 0 && errno != EEXIST)
		return sb_fail_errno(err, "creating %s", l->root);
	/* HOME is the scratch folder (execpath.c): the user's home says the same. */
	return users_files_write(l->users, "/etc", l->d.host_uid, l->d.host_gid, spec->plan->scratch, err);
}

static int launch_command(struct launch *l, const struct sandbox_spec *spec)
{
	l->workdir = spec->plan->workdir;
	l->network = spec->network;
	return 0;
}

/* Descriptors 0-2 are sandbox init's stdio-to-be: none of ours may sit there, or a dup2 onto
 * them would clobber it. */
static int fd_above_stdio(int *fd, struct sb_err *err)
{
	int high;

	if (*fd > 2)
		return 0;
	high = fcntl(*fd, F_DUPFD_CLOEXEC, 3);
	if (high < 0)
		return sb_fail_errno(err, "moving a descriptor above 2");
	close(*fd);
	*fd = high;
	return 0;
}

static int launch_fds(struct launch *l, struct sb_err *err)
{
	struct stat st;

	/* Every descriptor close-on-exec: other threads of the manager may fork at any time. */
	if (pipe2(l->go, O_CLOEXEC) < 0 || pipe2(l->error, O_CLOEXEC) < 0)
		return sb_fail_errno(err, "creating pipes");
	l->log_fd = open(l->d.log, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC | O_NOFOLLOW, 0600);
	if (l->log_fd < 0)
		return sb_fail_errno(err, "opening the agent's log %s", l->d.log);
	if (fstat(l->log_fd, &st) < 0)
		return sb_fail_errno(err, "inspecting %s", l->d.log);
	l->log_start = st.st_size;
	l->null_fd = open("/dev/null", O_RDWR | O_CLOEXEC);
	if (l->null_fd < 0)
		return sb_fail_errno(err, "opening /dev/null");
	if (fd_above_stdio(&l->go[0], err) < 0 || fd_above_stdio(&l->go[1], err) < 0 ||
	    fd_above_stdio(&l->error[0], err) < 0 || fd_above_stdio(&l->error[1], err) < 0 ||
	    fd_above_stdio(&l->log_fd, err) < 0 || fd_above_stdio(&l->null_fd, err) < 0)
		return -1;
	/* Release a non-blocking error pipe: the manager polls it with a deadline. */
	if (fcntl(l->error[0], F_SETFL, O_NONBLOCK) < 0)
		return sb_fail_errno(err, "making the error pipe non-blocking");
	return 0;
}

/* clone3 into the sandbox's namespaces with a pidfd; clone() where clone3 is missing. The user
 * namespace owns the others, so an unprivileged manager can create them too. The child runs
 * sandbox_init_main and never returns. */
static pid_t sandbox_clone(struct launch *l, int *pidfd, struct sb_err *err)
{
	struct sandbox_init init = {
		.root = l->root, .steps = &l->steps, .workdir = l->workdir, .agent = l->agent, .log = l->d.log,
		.argv = l->d.argv, .envp = l->d.envp, .uid = l->d.host_uid, .gid = l->d.host_gid,
		.groups_drop = l->groups_drop, .go_fd = l->go[0], .error_fd = l->error[1], .log_fd = l->log_fd,
		.null_fd = l->null_fd,
	};
	/* A network namespace of its own (issue 26, N1): the host's loopback services, the manager's
	 * listeners among them, and its abstract unix sockets are out of every command's reach. */
	pid_t pid = spawn_clone_into(CLONE_NEWUSER | CLONE_NEWPID | CLONE_NEWNS | CLONE_NEWIPC | CLONE_NEWUTS |
					     CLONE_NEWNET,
				     l->cgroup_fd, pidfd, err);

	if (pid == 0)
		sandbox_init_main(&init);
	if (pid < 0)
		sb_err_prefix(err, "creating the sandbox's user, PID, mount, IPC, UTS and network namespaces");
	return pid;
}


/* The last LOG_TAIL_BYTES of what the agent wrote in this launch, on one line. */
static void log_tail(const struct launch *l, char *out, size_t len)
{
	cleanup_close int fd = open(l->d.log, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
	char buf[LOG_TAIL_BYTES + 1];
	struct stat st;
	off_t from;
	ssize_t n;

	out[0] = '\0';
	if (fd < 0 || fstat(fd, &st) < 0 || st.st_size <= l->log_start)
		return;
	from = st.st_size - l->log_start > LOG_TAIL_BYTES ? st.st_size - LOG_TAIL_BYTES : l->log_start;
	n = pread(fd, buf, sizeof buf - 1, from);
	if (n <= 0)
		return;
	while (n > 0 && (buf[n - 1] == '\n' || buf[n - 1] == ' '))
		n--;
	buf[n] = '\0';
	for (ssize_t i = 0; i < n; i++)
		if (buf[i] == '\n')
			buf[i] = ' ';
	snprintf(out, len, "; agent.log: %s", buf);
}

/* A failed prepare leaves nothing running: SIGKILL to the sandbox's init, then its end, bounded.
 * err already says what failed; this adds whether the end was proven. */
static void sandbox_abort(struct sandbox_handle *h, struct sb_err *err)
{
	struct process_handle *ph = process_handle_of(h);

	if (ph->pidfd < 0)
		return;
	syscall(SYS_pidfd_send_signal, ph->pidfd, SIGKILL, NULL, 0);
	if (!init_wait_exit(ph->pidfd, ABORT_MS, NULL)) {
		size_t len = strlen(err->msg);

		snprintf(err->msg + len, sizeof err->msg - len,
			 " (and the sandbox's init, pid %d, did not exit within %d ms of SIGKILL: its end is NOT "
			 "proven; the handle keeps its pidfd for evidence())", (int)ph->pid, ABORT_MS);
		return;
	}
	close(ph->pidfd);
	process_net_reap(&ph->net_pid);
	handle_clear(h);
}

/* Until sandbox init reports a failed step or its execve closes the error pipe. */
static int setup_wait(struct launch *l, struct sb_err *err)
{
	int64_t deadline = clock_mono_ms() + SETUP_MS;
	char msg[SB_ERR_MSG_MAX];
	size_t have = 0;

	for (;;) {
		struct pollfd p = { .fd = l->error[0], .events = POLLIN };
		int n = poll(&p, 1, clock_remaining_ms(deadline));
		ssize_t r;

		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return sb_fail(err, n == 0 ? ETIMEDOUT : errno, "sandbox init did not finish building the root "
				       "within %d ms", SETUP_MS);
		r = read(l->error[0], msg + have, sizeof msg - 1 - have);
		if (r < 0 && (errno == EINTR || errno == EAGAIN))
			continue;
		if (r > 0 && have + (size_t)r < sizeof msg - 1) {
			have += (size_t)r;
			continue;
		}
		if (r > 0)
			have += (size_t)r;
		msg[have] = '\0';
		/* Its message ends with its own cause (sandbox_init.c): no second one after it. */
		if (have > 0)
			return sb_refuse(err, EPERM, "%s", msg);
		return 0; /* end of file: the agent is executing (or init died; the next wait sees it) */
	}
}

/* Until the agent serves on its socket, or dies (its log says why). */
static int ready_wait(struct launch *l, struct sandbox_handle *h, struct sb_err *err)
{
	struct process_handle *ph = process_handle_of(h);
	int64_t deadline = clock_mono_ms() + READY_MS;
	char tail[LOG_TAIL_BYTES + 32];
	int pause_ms = 1;

	for (;;) {
		struct pollfd p = { .fd = ph->pidfd, .events = POLLIN };
		siginfo_t info;

		if (agent_serving(l->d.sock, deadline) == 1)
			return 0;
		/* A probe of a socket that is not there yet costs microseconds, and the agent listens
		 * some 10-20 ms after its execve: probe after 1, 2, 4 ms, then every 4 ms, so the first
		 * call does not wait up to a whole fixed 20 ms step for a socket that is ready. */
		if (poll(&p, 1, pause_ms) > 0) {
			memset(&info, 0, sizeof info);
			if (waitid((idtype_t)P_PIDFD, (id_t)ph->pidfd, &info, WEXITED) == 0) {
				close(ph->pidfd);
				process_net_reap(&ph->net_pid);
				handle_clear(h);
			}
			log_tail(l, tail, sizeof tail);
			if (info.si_code == CLD_EXITED)
				return sb_fail(err, ECHILD, "the agent exited with status %d before serving%s",
					       info.si_status, tail);
			return sb_fail(err, ECHILD, "the agent was killed by signal %d before serving%s",
				       info.si_status, tail);
		}
		if (clock_remaining_ms(deadline) == 0) {
			log_tail(l, tail, sizeof tail);
			return sb_fail(err, ETIMEDOUT, "the agent did not serve on %s within %d ms%s", l->d.sock,
				       READY_MS, tail);
		}
		pause_ms = pause_ms < 4 ? pause_ms * 2 : 4;
	}
}

/* manager, outside: clone, maps, release, then wait for the setup and the socket. */
static int sandbox_start(struct launch *l, struct sandbox_handle *h, struct sb_err *err)
{
	struct process_handle *ph = process_handle_of(h);
	unsigned long long start;
	pid_t pid = sandbox_clone(l, &ph->pidfd, err);

	/* Init's ends of the pipes and its stdio are its own now (the log stays ours until the
	 * network's helper has it too). */
	fd_close(&l->go[0]);
	fd_close(&l->error[1]);
	fd_close(&l->null_fd);
	if (pid < 0) {
		ph->pidfd = -1;
		return -1;
	}
	ph->pid = pid;
	/* Read while init waits for us: the start time pins this pid to this process. */
	if (starttime_read(pid, &start) < 0) {
		sb_fail_errno(err, "reading the start time of the sandbox's init (pid %d)", (int)pid);
		sandbox_abort(h, err);
		return -1;
	}
	/* A cut address would name another socket: refused like any path (common/pathfmt.c). */
	if (path_fmt(h->runtime_id, sizeof h->runtime_id, err, "process:%d:%llu", (int)pid, start) < 0 ||
	    path_fmt(h->address, sizeof h->address, err, "%s", l->d.listen) < 0) {
		sandbox_abort(h, err);
		return -1;
	}
	/* 1:1, the sandbox's uid and gid only: host_uid N is N inside, and nothing maps to the
	 * namespace's uid 0. So no process of the sandbox is ever uid 0 of any user namespace: not of
	 * this one, and not of the agent's per-command ones, which map N to N again. That is what
	 * keeps the namespace's root-only files out of a command's reach: pid_max of a PID namespace
	 * is writable by euid make_kuid(its user namespace, 0) (kernel/pid.c,
	 * pid_table_root_permissions), and a non-dumpable process's /proc files belong to
	 * make_kuid(mm->user_ns, 0) (task_dump_owner): unmapped, both fall to the global root. An
	 * unprivileged manager may map only its own ids anyway; a root manager maps the configured
	 * sandbox ids, never 0 (agent_dir_prepare refuses it), and leaves setgroups open for init to
	 * drop the supplementary groups the clone inherited from it (root's group 0 among them). */
	if ((l->groups_drop ? spawn_id_maps_write_groups_open : spawn_id_maps_write)(pid, l->d.host_uid, l->d.host_uid,
										     l->d.host_gid, l->d.host_gid, err) < 0) {
		sb_err_prefix(err, "writing the sandbox's id maps");
		sandbox_abort(h, err);
		return -1;
	}
	/* The network's helper before init goes on; its ready is waited for below, after the agent's,
	 * so that slirp4netns configures the device while init builds the root and the agent starts
	 * (docs/performance.md). Neither needs the network, and no command runs before prepare()
	 * returns: the agent runs one only on a call, and calls come after the ready below. */
	if (process_net_start(l->set, l->network, pid, ph->pidfd, l->log_fd, &ph->net_pid, &l->net_ready, err) < 0) {
		sandbox_abort(h, err);
		return -1;
	}
	fd_close(&l->log_fd);
	if (write(l->go[1], "1", 1) != 1) {
		sb_fail_errno(err, "releasing sandbox init");
		sandbox_abort(h, err);
		return -1;
	}
	fd_close(&l->go[1]);
	if (setup_wait(l, err) < 0 || ready_wait(l, h, err) < 0 || process_net_ready(l->set, &l->net_ready, err) < 0) {
		sandbox_abort(h, err);
		return -1;
	}
	return 0;
}

static int spec_check(const struct sandbox_spec *spec, struct sb_err *err)
{
	if (spec == NULL || spec->session == NULL || spec->plan == NULL || spec->private_dir == NULL ||
	    spec->agent_path == NULL || spec->manager_name == NULL)
		return sb_invalid(err, "the sandbox spec needs a session, a mount plan, a private directory, "
				  "the agent's path and the manager's name");
	if (spec->plan->workdir == NULL || !path_plain(spec->plan->workdir))
		return sb_invalid(err, "the mount plan has no plain absolute working directory");
	if (spec->manager_name[0] == '\0' || spec->manager_name[0] == '-')
		return sb_invalid(err, "bad manager name '%s'", spec->manager_name);
	return 0;
}

int process_launch(struct process *p, const struct sandbox_spec *spec, struct sandbox_handle *h,
		      struct sb_err *err)
{
	__attribute__((cleanup(launch_free))) struct launch *l = calloc(1, sizeof *l);
	struct process_handle *ph = process_handle_of(h);
	struct sb_err ignored;
	int rc;

	if (spec_check(spec, err) < 0)
		return -1;
	if (l == NULL)
		return sb_fail(err, ENOMEM, "preparing a launch");
	l->set = &p->set;
	l->groups_drop = geteuid() == 0;
	l->go[0] = l->go[1] = l->error[0] = l->error[1] = l->log_fd = l->null_fd = l->cgroup_fd = l->net_ready = -1;
	rc = launch_paths(l, spec, err) < 0 || root_plan(&l->steps, spec, &l->d, l->agent, l->users, l->set, err) < 0 ||
	     launch_command(l, spec) < 0 || launch_fds(l, err) < 0 ||
	     cgroup_make(p, spec, l->cgroup_name, &l->cgroup_fd, err) < 0 ? -1 : 0;
	if (rc == 0) {
		snprintf(ph->cgroup, sizeof ph->cgroup, "%s", l->cgroup_name);
		rc = sandbox_start(l, h, err);
	}
	/* Failed, and the init is proven gone (or never was): its cgroup goes too. Otherwise the
	 * handle keeps the name, and evidence() removes it. */
	if (rc < 0 && ph->pidfd < 0 && l->cgroup_name[0] != '\0') {
		if (cgroup_remove(p, l->cgroup_name, &ignored) < 0)
			sb_warn("%s", ignored.msg);
		ph->cgroup[0] = '\0';
	}
	return rc;
}
