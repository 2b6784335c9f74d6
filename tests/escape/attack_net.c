/* Attack program: tries to reach a blocked TCP port (a management listener) by every route we know:
 * plain connect on IPv4, another loopback address, IPv6 and IPv4-mapped IPv6, TCP Fast Open (sendto,
 * sendmmsg, TCP_FASTOPEN_CONNECT) and MPTCP (also with the protocol's upper bits set);
 * and checks that an open port still connects. Usage (after the guard's two inodes): BLOCKED_PORT
 * OPEN_PORT. Loopback addresses only. Prints one line per probe; exits 0 when all matched.
 * Runs only behind guard_check(). */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "guard.h"

#ifndef TCP_FASTOPEN_CONNECT
#define TCP_FASTOPEN_CONNECT 30
#endif
#ifndef MSG_FASTOPEN
#define MSG_FASTOPEN 0x20000000
#endif
#define IPPROTO_MPTCP_NUM 262

static int failures;

static void report(const char *name, int r, int e, int want)
{
	int got = r < 0 ? e : 0;

	printf("%s errno=%s\n", name, guard_errname(got));
	if (got != want)
		failures++;
}

/* Fills ADDR for IP (v4 or v6 text) and PORT; returns its length. */
static socklen_t make_addr(struct sockaddr_storage *addr, const char *ip, int port)
{
	memset(addr, 0, sizeof(*addr));
	if (strchr(ip, ':')) {
		struct sockaddr_in6 *s6 = (struct sockaddr_in6 *)addr;
		s6->sin6_family = AF_INET6;
		s6->sin6_port = htons((uint16_t)port);
		if (inet_pton(AF_INET6, ip, &s6->sin6_addr) != 1)
			abort();
		return sizeof(*s6);
	}
	struct sockaddr_in *s4 = (struct sockaddr_in *)addr;
	s4->sin_family = AF_INET;
	s4->sin_port = htons((uint16_t)port);
	if (inet_pton(AF_INET, ip, &s4->sin_addr) != 1)
		abort();
	return sizeof(*s4);
}

static void probe_connect(const char *name, const char *ip, int port, int want)
{
	struct sockaddr_storage addr;
	socklen_t len = make_addr(&addr, ip, port);
	int s = socket(addr.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
	int r, e;

	if (s < 0) {
		printf("%s socket_errno=%s\n", name, guard_errname(errno));
		failures++;
		return;
	}
	r = connect(s, (struct sockaddr *)&addr, len);
	e = errno;
	close(s);
	report(name, r, e, want);
}

static void probe_fastopen(int port)
{
	struct sockaddr_storage addr;
	socklen_t len = make_addr(&addr, "127.0.0.1", port);
	int one = 1, r, e;
	int s = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);

	if (s < 0) {
		printf("fastopen socket_errno=%s\n", guard_errname(errno));
		failures++;
		return;
	}
	r = (int)sendto(s, "x", 1, MSG_FASTOPEN, (struct sockaddr *)&addr, len);
	e = errno;
	report("sendto_fastopen_blocked", r, e, EPERM);
	r = setsockopt(s, IPPROTO_TCP, TCP_FASTOPEN_CONNECT, &one, sizeof(one));
	e = errno;
	report("setsockopt_fastopen_connect", r, e, EPERM);
	close(s);
}

/* MPTCP sockets are not TCP to Landlock: the filter must refuse them, also with the upper 32 bits of the
 * protocol set (the kernel drops them). If one is created anyway, show whether it reaches the port. */
static void probe_mptcp(const char *name, unsigned long protocol, int port)
{
	struct sockaddr_storage addr;
	socklen_t len = make_addr(&addr, "127.0.0.1", port);
	char cname[64];
	int s = (int)syscall(SYS_socket, AF_INET, SOCK_STREAM | SOCK_CLOEXEC, protocol);
	int e = errno;

	report(name, s, e, EPERM);
	if (s >= 0) {
		int r = connect(s, (struct sockaddr *)&addr, len);
		e = errno;
		snprintf(cname, sizeof(cname), "connect_%s_blocked", name);
		report(cname, r, e, EACCES);
		close(s);
	}
}

/* sendmmsg with MSG_FASTOPEN connects without connect(), like sendto: refused (EPERM by the filter, or
 * EACCES), never a connection to the blocked port. */
static void probe_sendmmsg_fastopen(int port)
{
	struct sockaddr_storage addr;
	socklen_t len = make_addr(&addr, "127.0.0.1", port);
	struct mmsghdr mm;
	struct iovec iov = { "x", 1 };
	int s = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	int r, e;

	if (s < 0) {
		printf("sendmmsg socket_errno=%s\n", guard_errname(errno));
		failures++;
		return;
	}
	memset(&mm, 0, sizeof(mm));
	mm.msg_hdr.msg_name = &addr;
	mm.msg_hdr.msg_namelen = len;
	mm.msg_hdr.msg_iov = &iov;
	mm.msg_hdr.msg_iovlen = 1;
	r = sendmmsg(s, &mm, 1, MSG_FASTOPEN);
	e = errno;
	close(s);
	printf("sendmmsg_fastopen_blocked errno=%s\n", guard_errname(r < 0 ? e : 0));
	if (r >= 0 || (e != EPERM && e != EACCES))
		failures++;
}

static int parse_port(const char *s)
{
	char *end = NULL;
	long v = strtol(s, &end, 10);

	if (!*s || *end || v < 1 || v > 65535) {
		printf("attack_net: bad port %s\n", s);
		exit(2);
	}
	return (int)v;
}

int main(int argc, char **argv)
{
	int first = guard_check(argc, argv);
	int blocked, open_port;

	setvbuf(stdout, NULL, _IOLBF, 0);
	if (argc - first != 2) {
		printf("usage: attack_net HOST_PIDNS HOST_USERNS BLOCKED_PORT OPEN_PORT\n");
		return 2;
	}
	blocked = parse_port(argv[first]);
	open_port = parse_port(argv[first + 1]);

	probe_connect("connect_blocked_v4", "127.0.0.1", blocked, EACCES);
	probe_connect("connect_blocked_v4_other", "127.0.0.2", blocked, EACCES);
	probe_connect("connect_blocked_v6", "::1", blocked, EACCES);
	probe_connect("connect_blocked_v4mapped", "::ffff:127.0.0.1", blocked, EACCES);
	probe_connect("connect_open_v4", "127.0.0.1", open_port, 0);
	probe_fastopen(blocked);
	probe_sendmmsg_fastopen(blocked);
	probe_mptcp("socket_mptcp", IPPROTO_MPTCP_NUM, blocked);
	probe_mptcp("socket_mptcp_highbits", (1UL << 32) | IPPROTO_MPTCP_NUM, blocked);

	printf("attack_net failures=%d\n", failures);
	return failures ? 1 : 0;
}
