/* Unit tests for sandbox-agent/seccomp.c: the compiled filter, loaded in a child process,
 * refuses each denied call with its exact errno and leaves ordinary calls alone. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <errno.h>
#include <linux/sched.h>
#include <netinet/in.h>
#include <sched.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "seccomp.h"

/* Runs `probe` in a child under the filter; returns the errno it saw (0 = success). */
static int errno_under_filter(long (*probe)(void))
{
	struct sock_fprog prog;
	struct sb_err err;
	int fds[2], seen = -1, status;
	pid_t pid;

	assert_int_equal(seccomp_compile(&prog, &err), 0);
	assert_int_equal(pipe(fds), 0);
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		int e;

		if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0 || seccomp_load_prog(&prog, &err) < 0)
			_exit(90);
		errno = 0;
		e = probe() < 0 ? errno : 0;
		_exit(write(fds[1], &e, sizeof e) == sizeof e ? 0 : 91);
	}
	close(fds[1]);
	assert_int_equal(read(fds[0], &seen, sizeof seen), sizeof seen);
	close(fds[0]);
	assert_int_equal(waitpid(pid, &status, 0), pid);
	assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
	free(prog.filter);
	return seen;
}

static long do_mount(void) { return mount("none", "/tmp", "tmpfs", 0, NULL); }
static long do_unshare_user(void) { return unshare(CLONE_NEWUSER); }
static long do_clone3(void)
{
	struct clone_args a = { .flags = CLONE_NEWUSER, .exit_signal = SIGCHLD };

	return syscall(SYS_clone3, &a, sizeof a);
}
static long do_clone_newuser(void) { return syscall(SYS_clone, CLONE_NEWUSER | SIGCHLD, 0, 0, 0, 0); }
static long do_prlimit_init(void)
{
	struct rlimit r = { 1, 1 };

	return prlimit(1, RLIMIT_CPU, &r, NULL);
}
static long do_prlimit_self(void)
{
	struct rlimit r;

	return prlimit(0, RLIMIT_CPU, NULL, &r);
}
static long do_ptrace(void) { return syscall(SYS_ptrace, 16 /* PTRACE_ATTACH */, 1, 0, 0); }
static long do_tiocsti(void)
{
	char c = 'x';

	/* The high bits set: the rule compares 32 bits, like the kernel. */
	return syscall(SYS_ioctl, 0, 0x100000000UL | TIOCSTI, &c);
}
static long do_mptcp(void) { return socket(AF_INET, SOCK_STREAM, 262); }
static long do_fastopen(void)
{
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons(9), .sin_addr.s_addr = htonl(0x7f000001) };
	int fd = socket(AF_INET, SOCK_STREAM, 0);

	return sendto(fd, "x", 1, MSG_FASTOPEN, (struct sockaddr *)&a, sizeof a);
}
/* The kernel reads int arguments as 32 bits: high bits must not dodge a rule. */
static long do_mptcp_highbits(void) { return syscall(SYS_socket, AF_INET, SOCK_STREAM, (1UL << 32) | 262); }
static long do_tfo_connect_highbits(void)
{
	int one = 1, fd = socket(AF_INET, SOCK_STREAM, 0);

	return syscall(SYS_setsockopt, fd, (1UL << 32) | IPPROTO_TCP, (1UL << 32) | 30, &one, sizeof one);
}
static long do_tcp_socket(void) { return socket(AF_INET, SOCK_STREAM, 0) < 0 ? -1 : 0; }
static long do_bpf(void) { return syscall(SYS_bpf, 0, NULL, 0); }
static long do_keyctl(void) { return syscall(SYS_keyctl, 0, 0, 0, 0, 0); }
static long do_io_uring(void) { return syscall(SYS_io_uring_setup, 1, NULL); }

static void test_denied_calls(void **state)
{
	(void)state;
	assert_int_equal(errno_under_filter(do_mount), EPERM);
	assert_int_equal(errno_under_filter(do_unshare_user), EPERM);
	assert_int_equal(errno_under_filter(do_clone_newuser), EPERM);
	assert_int_equal(errno_under_filter(do_clone3), ENOSYS);
	assert_int_equal(errno_under_filter(do_prlimit_init), EPERM);
	assert_int_equal(errno_under_filter(do_ptrace), EPERM);
	assert_int_equal(errno_under_filter(do_tiocsti), EPERM);
	assert_int_equal(errno_under_filter(do_mptcp), EPERM);
	assert_int_equal(errno_under_filter(do_mptcp_highbits), EPERM);
	assert_int_equal(errno_under_filter(do_tfo_connect_highbits), EPERM);
	assert_int_equal(errno_under_filter(do_fastopen), EPERM);
	assert_int_equal(errno_under_filter(do_bpf), EPERM);
	assert_int_equal(errno_under_filter(do_keyctl), EPERM);
	assert_int_equal(errno_under_filter(do_io_uring), EPERM);
}

static void test_ordinary_calls_allowed(void **state)
{
	(void)state;
	assert_int_equal(errno_under_filter(do_prlimit_self), 0);
	assert_int_equal(errno_under_filter(do_tcp_socket), 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_denied_calls),
		cmocka_unit_test(test_ordinary_calls_allowed),
	};
	return cmocka_run_group_tests_name("seccomp", tests, NULL, NULL);
}
