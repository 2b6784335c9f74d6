/* A listener on a sandbox's own 127.0.0.1, received from whoever made it there (backend.h
 * net_listen): the manager's forked child that joined the namespace (process_net.c) or the agent
 * of a container the manager cannot enter (podman_net_listen, sandbox-agent/serve_netsock.c). The
 * manager believes neither: what comes is checked to be a listening TCP socket on 127.0.0.1:port
 * before it is served. Never reads or writes anything but the one-byte answer. */
#include "backend_internal.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "sock.h"

/* 1 when fd is a listening TCP socket bound to 127.0.0.1:port. */
static int listener_is(int fd, uint16_t port)
{
	struct sockaddr_in sa;
	socklen_t len = sizeof sa, ilen = sizeof(int);
	int listening = 0, type = 0;

	if (getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &listening, &ilen) < 0 || listening != 1)
		return 0;
	ilen = sizeof(int);
	if (getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &ilen) < 0 || type != SOCK_STREAM)
		return 0;
	if (getsockname(fd, (struct sockaddr *)&sa, &len) < 0 || len != sizeof sa || sa.sin_family != AF_INET)
		return 0;
	return sa.sin_addr.s_addr == htonl(INADDR_LOOPBACK) && ntohs(sa.sin_port) == port;
}

int net_listener_receive(int chan, uint16_t port, int timeout_ms)
{
	struct pollfd p = { .fd = chan, .events = POLLIN };
	int fds[SOCK_FDS_MAX];
	size_t n = 0;
	char byte = 0;

	/* Close-on-exec as it arrives (sock_recv_fds): no window where another thread's fork could
	 * inherit it. Exactly one descriptor, the listener asked for, or none is taken. */
	if (poll(&p, 1, timeout_ms) != 1 || sock_recv_fds(chan, &byte, 1, 0, fds, &n) != 1 || byte != 'L' ||
	    n != 1 || !listener_is(fds[0], port)) {
		for (size_t i = 0; i < n; i++)
			close(fds[i]);
		return -1;
	}
	return fds[0];
}
