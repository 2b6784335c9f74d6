/* Unit tests of the receipt of a listener made in a sandbox's network (manager/backend/net_listener.c,
 * net_listener_receive): only a listening TCP socket bound to 127.0.0.1 and the port asked for is
 * taken, close-on-exec; anything else the sender hands over (a connected socket, another port, a
 * refusal, nothing within the time) is refused and closed, so a confused or hostile sender (the
 * agent of a container, podman_net_listen) can neither give the proxy another socket nor leak one. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>
#include <arpa/inet.h>
#include <fcntl.h>
#include <stdbool.h>
#include <netinet/in.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "backend_internal.h"
#include "testutil.h"

/* A TCP socket on 127.0.0.1 of this test's network (the host's loopback, bound, never connected
 * anywhere else); listening or not. Its port in *port. */
static int tcp_socket(bool listening, uint16_t *port)
{
	struct sockaddr_in sa = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	socklen_t len = sizeof sa;
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);

	assert_true(fd >= 0);
	assert_int_equal(bind(fd, (struct sockaddr *)&sa, sizeof sa), 0);
	if (listening)
		assert_int_equal(listen(fd, 4), 0);
	assert_int_equal(getsockname(fd, (struct sockaddr *)&sa, &len), 0);
	*port = ntohs(sa.sin_port);
	return fd;
}

/* Sends byte, with fd attached when fd >= 0, on chan. */
static void hand_over(int chan, char byte, int fd)
{
	char cmsg_buf[CMSG_SPACE(sizeof(int))] = { 0 };
	struct iovec iov = { .iov_base = &byte, .iov_len = 1 };
	struct msghdr msg = { .msg_iov = &iov, .msg_iovlen = 1 };

	if (fd >= 0) {
		struct cmsghdr *cm;

		msg.msg_control = cmsg_buf;
		msg.msg_controllen = sizeof cmsg_buf;
		cm = CMSG_FIRSTHDR(&msg);
		cm->cmsg_level = SOL_SOCKET;
		cm->cmsg_type = SCM_RIGHTS;
		cm->cmsg_len = CMSG_LEN(sizeof(int));
		memcpy(CMSG_DATA(cm), &fd, sizeof fd);
	}
	assert_int_equal(sendmsg(chan, &msg, MSG_NOSIGNAL), 1);
}

/* What net_listener_receive makes of (byte, fd) asked for port; the sender's copy closed. */
static int receive_of(char byte, int fd, uint16_t port)
{
	int chan[2], got;

	assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, chan), 0);
	hand_over(chan[1], byte, fd);
	if (fd >= 0)
		close(fd);
	got = net_listener_receive(chan[0], port, 1000);
	close(chan[0]);
	close(chan[1]);
	return got;
}

static void test_listener_taken(void **state)
{
	uint16_t port;
	int before = test_fd_count(), fd = tcp_socket(true, &port);

	(void)state;
	fd = receive_of('L', fd, port);
	assert_true(fd >= 0);
	assert_true(fcntl(fd, F_GETFD) & FD_CLOEXEC);
	close(fd);
	assert_int_equal(test_fd_count(), before);
}

static void test_others_refused(void **state)
{
	uint16_t port, other;
	int before = test_fd_count(), fd;

	(void)state;
	/* bound but not listening */
	fd = tcp_socket(false, &port);
	assert_int_equal(receive_of('L', fd, port), -1);
	/* listening on another port than the one asked for */
	fd = tcp_socket(true, &other);
	assert_int_equal(receive_of('L', fd, (uint16_t)(other + 1)), -1);
	/* a unix socket */
	{
		int pair[2];

		assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, pair), 0);
		close(pair[1]);
		assert_int_equal(receive_of('L', pair[0], port), -1);
	}
	/* the sender's refusal, with or without a descriptor */
	assert_int_equal(receive_of('E', -1, port), -1);
	fd = tcp_socket(true, &port);
	assert_int_equal(receive_of('E', fd, port), -1);
	/* nothing at all: the channel closed */
	{
		int chan[2];

		assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, chan), 0);
		close(chan[1]);
		assert_int_equal(net_listener_receive(chan[0], port, 1000), -1);
		close(chan[0]);
	}
	/* every refused descriptor closed, none left open */
	assert_int_equal(test_fd_count(), before);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_listener_taken),
		cmocka_unit_test(test_others_refused),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
