/* Unit tests of the process backend's network helper (manager/backend/process_net.c), with stand-ins
 * for slirp4netns (this program's children, and a shell script in its place): the helper is given
 * exactly its descriptors 0-4 and no temporary of the manager's, and its reap is bounded whether it
 * leaves by itself, stays, or cannot be watched through a pidfd. The real slirp4netns is exercised by
 * tests/integration/manager_network.sh. The egress listener (process_net_listen) is made inside a
 * stand-in sandbox's own user and network namespaces, as root or not: its namespace is the stand-in's
 * (SIOCGSKNS), it serves the stand-in's loopback, and nothing is left behind. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <linux/sockios.h>
#include <net/if.h>
#include <netinet/in.h>
#include <poll.h>
#include <sched.h>
#include <sys/ioctl.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "process.h"
#include "testutil.h"

#define HANG_GUARD_S 8 /* a reap that waits without a bound ends the program: the case fails */

/* A stand-in helper: leaves after ms milliseconds, or never (ms < 0); SIGTERM ignored, as a
 * helper that does not listen. Before it leaves by itself it writes 'L' to *left (when given): the
 * cases tell "it left" from "it was killed" by that byte, never by a clock. */
static pid_t helper_start(int ms, int *left)
{
	int p[2] = { -1, -1 };
	pid_t pid;

	if (left != NULL)
		assert_int_equal(pipe2(p, O_CLOEXEC), 0);
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		/* gone with this program, should a case fail (the hang guard's SIGALRM among them) */
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		signal(SIGTERM, SIG_IGN);
		if (ms >= 0) {
			nanosleep(&(struct timespec){ .tv_sec = ms / 1000, .tv_nsec = (ms % 1000) * 1000000L }, NULL);
			_exit(p[1] >= 0 && write(p[1], "L", 1) != 1);
		}
		for (;;)
			pause();
	}
	if (left != NULL) {
		close(p[1]);
		*left = p[0];
	}
	return pid;
}

/* After the helper is reaped: whether it wrote its 'L' (left by itself) before it ended. */
static bool helper_left(int left)
{
	char c = 0;
	bool yes = read(left, &c, 1) == 1 && c == 'L';

	close(left);
	return yes;
}

/* After a reap: pid is no child of ours any more (reaped, not a zombie left behind). */
static void assert_reaped(pid_t pid)
{
	assert_int_equal(waitpid(pid, NULL, WNOHANG), -1);
	assert_int_equal(errno, ECHILD);
	assert_int_equal(kill(pid, 0), -1);
	assert_int_equal(errno, ESRCH);
}

static void reap_waits_for_a_helper_that_leaves(void **state)
{
	int left;
	pid_t pid = helper_start(100, &left), net = pid;

	(void)state;
	alarm(HANG_GUARD_S);
	process_net_reap(&net);
	alarm(0);
	assert_int_equal(net, 0);
	/* it was given its time to leave by itself (its 2 s), and took it */
	assert_true(helper_left(left));
	assert_reaped(pid);
}

static void reap_kills_a_helper_that_stays(void **state)
{
	int left;
	pid_t pid = helper_start(-1, &left), net = pid;

	(void)state;
	/* its 2 s to leave by itself, then SIGKILL; without the kill the hang guard ends the case */
	alarm(HANG_GUARD_S);
	process_net_reap(&net);
	alarm(0);
	assert_int_equal(net, 0);
	assert_false(helper_left(left));
	assert_reaped(pid);
}

/* Every descriptor below the lowest free one is open and RLIMIT_NOFILE is that one: pidfd_open fails
 * with EMFILE. The reap kills at once and reaps within its bound (it waited without one: a helper
 * that stays hung the manager's caller). */
static void reap_without_a_pidfd_kills_then_waits(void **state)
{
	int left;
	/* it would leave by itself after 1.5 s, within the reap's 2 s: killed at once, it never does */
	pid_t pid = helper_start(1500, &left), net = pid;
	struct rlimit old, low;
	int fds[64], n = 0, probe;

	(void)state;
	assert_int_equal(getrlimit(RLIMIT_NOFILE, &old), 0);
	while (n < 64 && (fds[n] = open("/dev/null", O_RDONLY | O_CLOEXEC)) >= 0 && fds[n] < 32)
		n++;
	assert_true(n < 64 && fds[n] >= 32);
	n++;
	low = old;
	low.rlim_cur = (rlim_t)fds[n - 1] + 1;
	/* every descriptor below the limit is taken (the loop fills the lowest free ones first) */
	assert_int_equal(setrlimit(RLIMIT_NOFILE, &low), 0);
	probe = (int)syscall(SYS_pidfd_open, pid, 0);
	assert_int_equal(probe, -1);
	assert_int_equal(errno, EMFILE);
	alarm(HANG_GUARD_S);
	process_net_reap(&net);
	alarm(0);
	assert_int_equal(setrlimit(RLIMIT_NOFILE, &old), 0);
	while (n > 0)
		close(fds[--n]);
	assert_int_equal(net, 0);
	assert_false(helper_left(left));
	assert_reaped(pid);
}

/* The descriptors a process has, as a bit set of 0..63 (any higher one counts as 63). */
static uint64_t fds_of(pid_t pid)
{
	char path[64];
	uint64_t set = 0;
	struct dirent *e;
	DIR *d;

	snprintf(path, sizeof path, "/proc/%d/fd", (int)pid);
	d = opendir(path);
	assert_non_null(d);
	while ((e = readdir(d)) != NULL) {
		int fd;

		if (e->d_name[0] == '.')
			continue;
		fd = atoi(e->d_name);
		set |= fd < 64 ? 1ULL << fd : 1ULL << 63; /* 63: any descriptor that high */
	}
	closedir(d);
	return set;
}

/* The manager's rule, made this program's: every descriptor above 2 close-on-exec (a test runner may
 * pass some on without the flag, which the helper would then inherit through no fault of slirp_exec). */
static void cloexec_all(void)
{
	struct dirent *e;
	DIR *d = opendir("/proc/self/fd");

	assert_non_null(d);
	while ((e = readdir(d)) != NULL) {
		int fd = atoi(e->d_name);

		if (e->d_name[0] != '.' && fd > 2 && fd != dirfd(d))
			assert_int_equal(fcntl(fd, F_SETFD, FD_CLOEXEC), 0);
	}
	closedir(d);
}

/* Until pid runs prog (its execve done), bounded: true, or false once the bound has passed. */
static bool wait_exec(pid_t pid, const char *prog)
{
	char path[64], cmd[256];

	snprintf(path, sizeof path, "/proc/%d/cmdline", (int)pid);
	for (int i = 0; i < 400; i++) {
		FILE *f = fopen(path, "r");
		size_t len = f != NULL ? fread(cmd, 1, sizeof cmd - 1, f) : 0;

		if (f != NULL)
			fclose(f);
		cmd[len] = '\0';
		if (strcmp(cmd, prog) == 0)
			return true;
		usleep(5000);
	}
	fprintf(stderr, "pid %d did not exec %s (cmdline '%s')\n", (int)pid, prog, cmd);
	return false;
}

/* The launch's two halves in a row (process_launch.c runs the sandbox's setup between them). */
static int net_attach(const struct process_settings *set, enum sandbox_network network, pid_t init_pid,
		      int init_pidfd, int log_fd, pid_t *net_pid, struct sb_err *err)
{
	int ready_fd;

	if (process_net_start(set, network, init_pid, init_pidfd, log_fd, net_pid, &ready_fd, err) < 0)
		return -1;
	return process_net_ready(set, &ready_fd, err);
}

/* slirp4netns gets 0-2, its exit descriptor 3 and ready descriptor 4, and nothing else: the copies
 * slirp_exec makes above 9 to shuffle them close at execve (they were F_DUPFD, not close-on-exec,
 * and the helper held a second pidfd, ready pipe and log). */
static void attach_gives_the_helper_only_its_descriptors(void **state)
{
	char dir[] = "/tmp/test_process_net.XXXXXX", script[128], logp[128];
	struct process_settings set = { 0 };
	struct sb_err err = { 0 };
	pid_t init = helper_start(-1, NULL), net = 0;
	int init_pidfd, log_fd, rc;
	uint64_t fds = 0;
	FILE *f;

	(void)state;
	cloexec_all();
	assert_non_null(mkdtemp(dir));
	snprintf(script, sizeof script, "%s/slirp", dir);
	snprintf(logp, sizeof logp, "%s/log", dir);
	f = fopen(script, "w");
	assert_non_null(f);
	/* ready at once, then a program whose descriptors are exactly what it inherited */
	fputs("#!/bin/sh\nprintf 1 >&4\nexec sleep 30\n", f);
	fclose(f);
	assert_int_equal(chmod(script, 0700), 0);
	snprintf(set.slirp4netns, sizeof set.slirp4netns, "%s", script);
	init_pidfd = (int)syscall(SYS_pidfd_open, init, 0);
	assert_true(init_pidfd >= 0);
	log_fd = open(logp, O_WRONLY | O_CREAT | O_CLOEXEC, 0600);
	assert_true(log_fd >= 0);
	rc = net_attach(&set, SANDBOX_NETWORK_OPEN, init, init_pidfd, log_fd, &net, &err);
	if (rc == 0) {
		fds = wait_exec(net, "sleep") ? fds_of(net) : ~0ULL;
		kill(net, SIGKILL);
		process_net_reap(&net);
	}
	kill(init, SIGKILL);
	waitpid(init, NULL, 0);
	close(init_pidfd);
	close(log_fd);
	unlink(script);
	unlink(logp);
	rmdir(dir);
	if (rc < 0)
		fail_msg("%s", err.msg);
	/* 0 is whatever this program's stdin is (it may be closed); 1-4 exactly, nothing above */
	if ((fds & ~1ULL) != 0x1eULL)
		fail_msg("the helper held descriptors 0x%llx, not 1-4 (0x1e)", (unsigned long long)fds);
}

/* Policy none starts no helper. */
static void attach_none_starts_nothing(void **state)
{
	struct process_settings set = { 0 };
	struct sb_err err = { 0 };
	pid_t net = 0;

	(void)state;
	snprintf(set.slirp4netns, sizeof set.slirp4netns, "/nonexistent/slirp4netns");
	assert_int_equal(net_attach(&set, SANDBOX_NETWORK_NONE, 1, -1, -1, &net, &err), 0);
	assert_int_equal(net, 0);
}

/* A stand-in sandbox init: its own user and network namespaces (as process_launch.c clones them),
 * loopback up; once told "c" on cmd, connects to 127.0.0.1:port there and says '1' or '0' on res. */
static pid_t sandbox_standin(int cmd, int res, uint16_t port)
{
	pid_t pid = fork();

	assert_true(pid >= 0);
	if (pid == 0) {
		struct ifreq ifr = { 0 };
		struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = htons(port),
					  .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
		int s;
		char c = '0';

		prctl(PR_SET_PDEATHSIG, SIGKILL);
		snprintf(ifr.ifr_name, sizeof ifr.ifr_name, "lo");
		ifr.ifr_flags = IFF_UP;
		if (unshare(CLONE_NEWUSER | CLONE_NEWNET) < 0 || (s = socket(AF_INET, SOCK_DGRAM, 0)) < 0 ||
		    ioctl(s, SIOCSIFFLAGS, &ifr) < 0 || write(res, "r", 1) != 1)
			_exit(1);
		if (read(cmd, &c, 1) != 1)
			_exit(1);
		s = socket(AF_INET, SOCK_STREAM, 0);
		c = connect(s, (struct sockaddr *)&sa, sizeof sa) == 0 ? '1' : '0';
		(void)!write(res, &c, 1);
		pause();
		_exit(0);
	}
	return pid;
}

static ino_t ns_inode(const char *path)
{
	struct stat st;

	assert_int_equal(stat(path, &st), 0);
	return st.st_ino;
}

/* The egress listener of policy proxy: made in the stand-in's network namespace, close-on-exec,
 * accepting the stand-in's own connection to its 127.0.0.1; the forked maker reaped and its channel
 * closed (the descriptors are as before once the listener is closed). */
static void listen_in_the_sandbox_namespace(void **state)
{
	struct sandbox_handle h = { 0 };
	struct process_handle *ph = process_handle_of(&h);
	struct sb_err err = { 0 };
	int cmd[2], res[2], fd = -1, before, nsfd, conn;
	struct sockaddr_in sa;
	socklen_t len = sizeof sa;
	char c = 0, path[64];
	pid_t pid;
	struct stat st;

	(void)state;
	assert_int_equal(pipe2(cmd, O_CLOEXEC), 0);
	assert_int_equal(pipe2(res, O_CLOEXEC), 0);
	pid = sandbox_standin(cmd[0], res[1], 3128);
	assert_int_equal(read(res[0], &c, 1), 1);
	assert_int_equal(c, 'r');
	ph->magic = PROCESS_HANDLE_MAGIC;
	ph->pid = pid;
	ph->pidfd = (int)syscall(SYS_pidfd_open, pid, 0);
	assert_true(ph->pidfd >= 0);
	before = test_fd_count();
	if (process_net_listen(NULL, &h, 3128, &fd, &err) < 0)
		fail_msg("process_net_listen: %s", err.msg);
	assert_int_equal(fcntl(fd, F_GETFD) & FD_CLOEXEC, FD_CLOEXEC);
	assert_int_equal(getsockname(fd, (struct sockaddr *)&sa, &len), 0);
	assert_int_equal(ntohl(sa.sin_addr.s_addr), INADDR_LOOPBACK);
	assert_int_equal(ntohs(sa.sin_port), 3128);
	/* the socket's network namespace is the stand-in's, not ours */
	nsfd = ioctl(fd, SIOCGSKNS);
	assert_true(nsfd >= 0);
	assert_int_equal(fstat(nsfd, &st), 0);
	close(nsfd);
	snprintf(path, sizeof path, "/proc/%d/ns/net", (int)pid);
	assert_true(st.st_ino == ns_inode(path));
	assert_true(st.st_ino != ns_inode("/proc/self/ns/net"));
	/* and it serves the stand-in's loopback */
	assert_int_equal(write(cmd[1], "c", 1), 1);
	assert_int_equal(poll(&(struct pollfd){ .fd = fd, .events = POLLIN }, 1, 5000), 1);
	conn = accept4(fd, NULL, NULL, SOCK_CLOEXEC);
	assert_true(conn >= 0);
	assert_int_equal(read(res[0], &c, 1), 1);
	assert_int_equal(c, '1');
	close(conn);
	close(fd);
	assert_int_equal(test_fd_count(), before); /* the listener closed: nothing else of the maker's stays */
	kill(pid, SIGKILL);
	waitpid(pid, NULL, 0);
	close(ph->pidfd);
	/* the maker was reaped: no child of ours is left */
	assert_int_equal(waitpid(-1, NULL, WNOHANG), -1);
	close(cmd[0]);
	close(cmd[1]);
	close(res[0]);
	close(res[1]);
}

/* No init held: no namespace to listen in, and nothing forked. */
static void listen_without_a_pidfd_is_refused(void **state)
{
	struct sandbox_handle h = { 0 };
	struct sb_err err = { 0 };
	int fd = 7;

	(void)state;
	process_handle_of(&h)->magic = PROCESS_HANDLE_MAGIC;
	process_handle_of(&h)->pidfd = -1;
	assert_int_equal(process_net_listen(NULL, &h, 3128, &fd, &err), -1);
	assert_int_equal(fd, -1);
	assert_int_equal(err.errnum, ESRCH);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(reap_waits_for_a_helper_that_leaves),
		cmocka_unit_test(reap_kills_a_helper_that_stays),
		cmocka_unit_test(reap_without_a_pidfd_kills_then_waits),
		cmocka_unit_test(attach_gives_the_helper_only_its_descriptors),
		cmocka_unit_test(attach_none_starts_nothing),
		cmocka_unit_test(listen_in_the_sandbox_namespace),
		cmocka_unit_test(listen_without_a_pidfd_is_refused),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
