/* The network of a process-backend sandbox (issue 26, N1), manager, outside. The sandbox is cloned
 * into a network namespace of its own (process_launch.c), so no loopback service of the host, the
 * manager's listeners among them, is a command's to reach; sandbox init brings its loopback up.
 * Policy `none` stops there. Policy `open` attaches slirp4netns, Debian's user-mode NAT: a tap
 * device in the sandbox's namespace whose traffic leaves through the host's sockets of an
 * unprivileged process, with --disable-host-loopback (10.0.2.2 and 127.0.0.0/8 of the host refused).
 * slirp4netns lives exactly as long as the sandbox: its exit descriptor is a pidfd of the sandbox's
 * init, readable once init is gone, whoever ends it and whether or not this manager still runs; the
 * manager reaps it once that end is proven (process_evidence.c). Policy `proxy` is `none` plus a
 * listener the manager makes inside the namespace and holds (process_net_listen), served by its
 * egress proxy (manager/egress/). */
#include "process.h"
#include "sock.h"

#include "backend_internal.h"

#include "clock.h"
#include "log.h"

#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sched.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "cleanup.h"

#define NET_READY_MS 5000           /* slirp4netns: from its start to the tap device configured */
#define NET_EXIT_MS 2000            /* and from the end of the sandbox's init to its own */
#define SLIRP_DEFAULT "/usr/bin/slirp4netns"
#define SLIRP_EXIT_FD 3             /* where the grandchild finds the init's pidfd */
#define SLIRP_READY_FD 4            /* where it writes "1" once the device is up */

/* The grandchild, between fork() and execve(): only async-signal-safe calls. Its descriptors 3 and
 * 4 become the pidfd and the ready pipe and 1-2 the agent's log; every other one closes at execve:
 * the manager's are all close-on-exec, and so are the temporaries below (dup2 clears the flag on
 * the copies slirp4netns keeps). */
__attribute__((noreturn)) static void slirp_exec(const char *path, char *const argv[], int pidfd, int ready_fd,
						 int log_fd)
{
	/* Above 4 first, so that the dup2s below cannot clobber one another. */
	int p = fcntl(pidfd, F_DUPFD_CLOEXEC, 10), r = fcntl(ready_fd, F_DUPFD_CLOEXEC, 10),
	    l = fcntl(log_fd, F_DUPFD_CLOEXEC, 10);

	if (p < 0 || r < 0 || l < 0 || dup2(p, SLIRP_EXIT_FD) < 0 || dup2(r, SLIRP_READY_FD) < 0 ||
	    dup2(l, 1) < 0 || dup2(l, 2) < 0)
		_exit(127);
	execve(path, argv, (char *const[]){ "PATH=/usr/sbin:/usr/bin:/sbin:/bin", NULL });
	_exit(127);
}

/* Starts slirp4netns as this manager's child: reaped when the sandbox's end is proven
 * (process_net_reap). After a manager restart the helpers of the sandboxes it left are the old
 * run's orphans, reaped by whoever inherited them, as their sandboxes' inits are. *pid, or -1 with err. */
static int slirp_spawn(const char *path, pid_t init_pid, int pidfd, int ready_fd, int log_fd, pid_t *pid,
		       struct sb_err *err)
{
	char pid_text[16], exit_arg[24], ready_arg[24];
	char *argv[] = { (char *)path, "--configure", "--mtu=65520", "--disable-host-loopback", exit_arg, ready_arg,
			 pid_text, "tap0", NULL };

	snprintf(pid_text, sizeof pid_text, "%d", (int)init_pid);
	snprintf(exit_arg, sizeof exit_arg, "--exit-fd=%d", SLIRP_EXIT_FD);
	snprintf(ready_arg, sizeof ready_arg, "--ready-fd=%d", SLIRP_READY_FD);
	*pid = fork();
	if (*pid < 0)
		return sb_fail_errno(err, "forking to start %s", path);
	if (*pid == 0)
		slirp_exec(path, argv, pidfd, ready_fd, log_fd);
	return 0;
}

/* Until slirp4netns writes its "1" (the tap device, its address and route are up), or gives up
 * (end of file: it exited; agent.log has its words). */
static int slirp_ready(int fd, const char *path, struct sb_err *err)
{
	int64_t deadline = clock_mono_ms() + NET_READY_MS;
	char c;

	for (;;) {
		struct pollfd p = { .fd = fd, .events = POLLIN };
		int n = poll(&p, 1, clock_remaining_ms(deadline));
		ssize_t r;

		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return sb_fail(err, n == 0 ? ETIMEDOUT : errno, "%s did not configure the sandbox's network "
				       "within %d ms", path, NET_READY_MS);
		r = read(fd, &c, 1);
		if (r < 0 && errno == EINTR)
			continue;
		if (r == 1 && c == '1')
			return 0;
		return sb_fail(err, r < 0 ? errno : 0, "%s failed to configure the sandbox's network (agent.log says "
			       "why; unprivileged, it needs /dev/net/tun open to every user, 0666 as udev makes it)",
			       path);
	}
}

/* Reaps our child pid within NET_EXIT_MS; 0, or -1 (ETIMEDOUT: it has not exited, or ECHILD...). */
static int net_wait_bounded(pid_t pid)
{
	int64_t deadline = clock_mono_ms() + NET_EXIT_MS;
	siginfo_t info;

	for (;;) {
		memset(&info, 0, sizeof info);
		if (waitid(P_PID, (id_t)pid, &info, WEXITED | WNOHANG) < 0) {
			if (errno == EINTR)
				continue;
			return -1;
		}
		if (info.si_pid == pid)
			return 0;
		if (clock_remaining_ms(deadline) <= 0) {
			errno = ETIMEDOUT;
			return -1;
		}
		nanosleep(&(struct timespec){ .tv_nsec = 5 * 1000 * 1000 }, NULL);
	}
}

void process_net_reap(pid_t *net_pid)
{
	cleanup_close int fd = -1;
	struct pollfd p;

	if (*net_pid <= 0)
		return;
	/* Our unreaped child: its pid cannot name another process until it is reaped, so pidfd_open
	 * and kill() below reach slirp4netns and nothing else. */
	fd = (int)syscall(SYS_pidfd_open, *net_pid, 0);
	if (fd < 0) {
		/* No descriptor to wait on (EMFILE, ENOMEM): the sandbox is gone, so its helper has no
		 * more work; killed at once rather than waited for without a bound. */
		sb_warn("slirp4netns (pid %d): no pidfd to wait on (%s): killed", (int)*net_pid, strerror(errno));
		kill(*net_pid, SIGKILL);
	} else {
		p = (struct pollfd){ .fd = fd, .events = POLLIN };
		/* It leaves by itself once the init is gone (its exit descriptor is the init's pidfd). */
		if (poll(&p, 1, NET_EXIT_MS) != 1) {
			sb_warn("slirp4netns (pid %d) still runs %d ms after its sandbox ended: killed", (int)*net_pid,
				NET_EXIT_MS);
			syscall(SYS_pidfd_send_signal, fd, SIGKILL, NULL, 0);
		}
	}
	/* Killed or gone: only a process stuck in the kernel outlives SIGKILL for long. It is then
	 * left unreaped (a zombie of this manager until it exits) rather than holding the caller. */
	if (net_wait_bounded(*net_pid) < 0)
		sb_warn("slirp4netns (pid %d) not reaped within %d ms of SIGKILL: %s", (int)*net_pid, NET_EXIT_MS,
			strerror(errno));
	*net_pid = 0;
}

int process_net_start(const struct process_settings *set, enum sandbox_network network, pid_t init_pid,
		      int init_pidfd, int log_fd, pid_t *net_pid, int *ready_fd, struct sb_err *err)
{
	const char *path = set->slirp4netns[0] != '\0' ? set->slirp4netns : SLIRP_DEFAULT;
	int ready[2], rc;

	*ready_fd = -1;
	if (network == SANDBOX_NETWORK_NONE || network == SANDBOX_NETWORK_PROXY)
		return 0; /* loopback only: sandbox init brings it up (proxy: the core adds the listener) */
	if (pipe2(ready, O_CLOEXEC) < 0)
		return sb_fail_errno(err, "creating the network's ready pipe");
	rc = slirp_spawn(path, init_pid, init_pidfd, ready[1], log_fd, net_pid, err);
	close(ready[1]); /* ours: the end of file then means slirp4netns is gone */
	if (rc < 0) {
		close(ready[0]);
		sb_err_prefix(err, "the sandbox's network (policy open)");
		return -1;
	}
	*ready_fd = ready[0];
	return 0;
}

int process_net_ready(const struct process_settings *set, int *ready_fd, struct sb_err *err)
{
	const char *path = set->slirp4netns[0] != '\0' ? set->slirp4netns : SLIRP_DEFAULT;
	int rc;

	if (*ready_fd < 0)
		return 0;
	rc = slirp_ready(*ready_fd, path, err);
	close(*ready_fd);
	*ready_fd = -1;
	if (rc < 0)
		sb_err_prefix(err, "the sandbox's network (policy open)");
	return rc;
}

/* ---- the egress proxy's listener inside the sandbox's network namespace (policy `proxy`) ---- */

#define LISTEN_MS 5000              /* the forked child: from fork to its exit */

/* Child of the manager, outside the sandbox, between fork and _exit: only async-signal-safe
 * calls (the manager has other threads). It enters the sandbox's network namespace, makes the
 * socket there, hands it to the manager and exits; it never runs anything of the sandbox's, and
 * nothing of the sandbox's can reach it: it stays in the manager's PID namespace (no pid of the
 * sandbox's names it), and an unprivileged manager's child, once in the sandbox's user namespace,
 * holds every capability there, which no command has (ptrace of it is refused on that alone). */
__attribute__((noreturn)) static void listen_child(int pidfd, uint16_t port, int chan)
{
	int fd;

	/* Joining the network namespace needs CAP_SYS_ADMIN over the user namespace that owns it (the
	 * sandbox's) and over our own. A root manager has it over every namespace it made: it joins
	 * the network namespace alone and keeps its credentials. An unprivileged one has it nowhere
	 * of its own, so it joins the sandbox's user namespace first, which setns() allows as that
	 * namespace's owner in its parent, and which gives it every capability there; the kernel
	 * joins the user namespace before the others, so the network namespace's check then holds.
	 * Single-threaded after fork, as setns(CLONE_NEWUSER) requires. */
	if (setns(pidfd, CLONE_NEWNET) < 0 && (errno != EPERM || setns(pidfd, CLONE_NEWUSER | CLONE_NEWNET) < 0))
		_exit(10);
	/* The socket is the sandbox's namespace's for good (a socket keeps the namespace it was made
	 * in): bound to 127.0.0.1 there, the sandbox's own loopback, and nowhere else. */
	fd = sock_listen_loopback(0, port);
	if (fd < 0)
		_exit(11);
	_exit(sock_send_fds(chan, "L", 1, &fd, 1) == 1 ? 0 : 12);
}

static const char *listen_child_step(int status)
{
	if (!WIFEXITED(status))
		return "it was killed";
	switch (WEXITSTATUS(status)) {
	case 10: return "joining the sandbox's network namespace failed";
	case 11: return "making the socket in it failed (is the sandbox's loopback up?)";
	case 12: return "sending the socket failed";
	default: return "it failed";
	}
}

int process_net_listen(struct backend *be, const struct sandbox_handle *h, uint16_t port, int *fd, struct sb_err *err)
{
	const struct process_handle *ph = process_handle_get(h);
	int chan[2], status = 0;
	pid_t pid;

	(void)be;
	*fd = -1;
	if (ph->magic != PROCESS_HANDLE_MAGIC || ph->pidfd < 0)
		return sb_fail(err, ESRCH, "the sandbox's init is not held: no network namespace to listen in");
	if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, chan) < 0)
		return sb_fail_errno(err, "creating the listener's channel");
	pid = fork();
	if (pid == 0) {
		close(chan[0]);
		listen_child(ph->pidfd, port, chan[1]);
	}
	close(chan[1]);
	if (pid < 0) {
		close(chan[0]);
		return sb_fail_errno(err, "forking to make the egress listener");
	}
	*fd = net_listener_receive(chan[0], port, LISTEN_MS);
	close(chan[0]);
	/* Its one step is bounded; a child that outlives it is killed, never waited for without end. */
	if (*fd < 0)
		kill(pid, SIGKILL);
	while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
	}
	if (*fd < 0)
		return sb_refuse(err, EPROTO, "making 127.0.0.1:%u in the sandbox's network namespace: %s", port,
				 listen_child_step(status));
	return 0;
}
