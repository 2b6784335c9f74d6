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
	char cmsg_buf[CMSG_SPACE(sizeof(int))] = { 0 }, byte;
	struct iovec iov = { .iov_base = &byte, .iov_len = 1 };
	struct msghdr msg = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = cmsg_buf,
			      .msg_controllen = sizeof cmsg_buf };
	struct cmsghdr *cm;
	struct pollfd p = { .fd = chan, .events = POLLIN };
	int fd = -1;

	/* MSG_CMSG_CLOEXEC: no window where another thread's fork could inherit it. */
	if (poll(&p, 1, timeout_ms) != 1 || recvmsg(chan, &msg, MSG_CMSG_CLOEXEC) != 1)
		return -1;
	cm = CMSG_FIRSTHDR(&msg);
	if (cm != NULL && cm->cmsg_level == SOL_SOCKET && cm->cmsg_type == SCM_RIGHTS &&
	    cm->cmsg_len == CMSG_LEN(sizeof(int)))
		memcpy(&fd, CMSG_DATA(cm), sizeof fd);
	if (byte != 'L' || (msg.msg_flags & MSG_CTRUNC) || (fd >= 0 && !listener_is(fd, port))) {
		if (fd >= 0)
			close(fd);
		return -1;
	}
	return fd;
}
