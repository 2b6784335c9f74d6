/* The spawner's channel (sandbox-agent/spawner.c): a request it cannot take whole ends it, every length
 * is bounded before a byte is stored, and a spawner that died or stopped answering is stopped (reaped)
 * by the agent's side within the bound, which then says it is not running. The inits it clones are
 * the integration tests' (test_agent_serve, test_prebuilt_*). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "spawner.h"

#ifndef P_PIDFD
#define P_PIDFD 3
#endif

/* The wire layout spawner.c reads (struct spawn_request, struct spawn_hidden). */
struct req {
	uint32_t cwd_len, n_hidden;
};
struct hid {
	uint64_t dev, ino;
	uint32_t path_len, pad;
};

static struct boundary b = { .teardown_ms = 400, .shell = "/bin/sh" };

static void start(struct spawner *s)
{
	struct sb_err err;

	assert_int_equal(spawner_start(s, &b, &err), 0);
	assert_true(spawner_running(s));
}

/* Its exit status, waited for at most 5 s. */
static int exit_status(struct spawner *s)
{
	struct pollfd p = { s->pidfd, POLLIN, 0 };
	siginfo_t info;

	assert_int_equal(poll(&p, 1, 5000), 1);
	memset(&info, 0, sizeof info);
	assert_int_equal(waitid((idtype_t)P_PIDFD, (id_t)s->pidfd, &info, WEXITED), 0);
	close(s->pidfd);
	close(s->sock);
	s->pid = -1;
	assert_int_equal(info.si_code, CLD_EXITED);
	return info.si_status;
}

/* hdr (and more bytes) with n descriptors (pipe ends, closed here after the send). */
static void send_raw(struct spawner *s, const void *buf, size_t len, int n)
{
	union {
		char buf[CMSG_SPACE(sizeof(int) * 8)];
		struct cmsghdr align;
	} c;
	struct iovec iov = { (void *)buf, len };
	struct msghdr m = { .msg_iov = &iov, .msg_iovlen = 1 };
	int fds[8];

	for (int i = 0; i < n; i += 2) {
		int p[2];

		assert_int_equal(pipe2(p, O_CLOEXEC), 0);
		fds[i] = p[0];
		fds[i + 1] = p[1];
	}
	if (n > 0) {
		struct cmsghdr *cm;

		memset(c.buf, 0, sizeof c.buf);
		m.msg_control = c.buf;
		m.msg_controllen = CMSG_SPACE(sizeof(int) * (size_t)n);
		cm = CMSG_FIRSTHDR(&m);
		cm->cmsg_level = SOL_SOCKET;
		cm->cmsg_type = SCM_RIGHTS;
		cm->cmsg_len = CMSG_LEN(sizeof(int) * (size_t)n);
		memcpy(CMSG_DATA(cm), fds, sizeof(int) * (size_t)n);
	}
	assert_int_equal(sendmsg(s->sock, &m, MSG_NOSIGNAL), (ssize_t)len);
	for (int i = 0; i < n + (n & 1); i++)
		close(fds[i]);
}

static void test_channel_end_ends_it(void **state)
{
	struct spawner s;

	(void)state;
	start(&s);
	shutdown(s.sock, SHUT_WR);
	assert_int_equal(exit_status(&s), 0);
}

static void test_refuses_other_than_five_descriptors(void **state)
{
	struct req r = { .cwd_len = 1, .n_hidden = 0 };
	struct spawner s;

	(void)state;
	start(&s);
	send_raw(&s, &r, sizeof r, 4);
	assert_int_equal(exit_status(&s), 1);
	start(&s);
	send_raw(&s, &r, sizeof r, 0);
	assert_int_equal(exit_status(&s), 1);
}

static void test_refuses_lengths_out_of_bounds(void **state)
{
	struct req r = { .cwd_len = PATH_MAX, .n_hidden = 0 };
	struct spawner s;
	struct {
		struct req r;
		char cwd[1];
		struct hid h;
	} __attribute__((packed)) one = { { 1, 1 }, "/", { 1, 2, PATH_MAX, 0 } };

	(void)state;
	/* a working directory as long as the buffer: no room for its NUL */
	start(&s);
	send_raw(&s, &r, sizeof r, 5);
	assert_int_equal(exit_status(&s), 1);
	/* more hidden places than a view may have */
	r = (struct req){ .cwd_len = 0, .n_hidden = BOUNDARY_MAX_HIDDEN_VIEW + 1 };
	start(&s);
	send_raw(&s, &r, sizeof r, 5);
	assert_int_equal(exit_status(&s), 1);
	/* a hidden place's path as long as the buffer */
	start(&s);
	send_raw(&s, &one, sizeof one, 5);
	assert_int_equal(exit_status(&s), 1);
}

/* A spawner that is gone, or that stops answering, is stopped and reaped by the request within the
 * bound; the caller then clones inits itself (spawner_running false). */
static void test_dead_or_silent_spawner_is_stopped(void **state)
{
	int p[2], fds[5];
	struct spawner s;
	struct sb_err err;
	pid_t pid;
	int pidfd = -1;

	(void)state;
	assert_int_equal(pipe2(p, O_CLOEXEC), 0);
	for (int i = 0; i < 5; i++)
		fds[i] = p[i & 1];
	for (int sig = 0; sig < 2; sig++) {
		start(&s);
		pid = s.pid;
		assert_int_equal(kill(pid, sig == 0 ? SIGKILL : SIGSTOP), 0);
		assert_int_equal(spawner_spawn(&s, "/", NULL, 0, fds, &pidfd, &err), -1);
		assert_false(spawner_running(&s));
		assert_int_equal(pidfd, -1);
		assert_non_null(strstr(err.msg, "the spawner ended"));
		if (sig == 1)
			assert_non_null(strstr(err.msg, "no answer within 400 ms"));
		/* reaped: no such child any more */
		assert_int_equal(waitpid(pid, NULL, WNOHANG), -1);
		assert_int_equal(errno, ECHILD);
	}
	close(p[0]);
	close(p[1]);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_channel_end_ends_it),
		cmocka_unit_test(test_refuses_other_than_five_descriptors),
		cmocka_unit_test(test_refuses_lengths_out_of_bounds),
		cmocka_unit_test(test_dead_or_silent_spawner_is_stopped),
	};

	return cmocka_run_group_tests_name("spawner", tests, NULL, NULL);
}
