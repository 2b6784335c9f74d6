/* `sandbox-agent serve --net-socket unix:PATH`, agent, inside the sandbox's network namespace: hands
 * the manager TCP listeners on this namespace's 127.0.0.1 (the egress proxy's and its edges', policy
 * `proxy`), for a runtime whose namespace the manager cannot enter itself (a container of a rootful
 * service under an unprivileged manager). The manager holds and serves each listener, as it does the
 * one it makes by setns() on the process backend; the agent keeps no copy and never reads a byte of
 * what goes through. It never makes anything but a loopback listener, and only on request over a
 * socket in the agent's own sock/ directory, which no command can reach (hidden as agent.sock is). */
#include "serve_internal.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdint.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include "log.h"
#include "sock.h"
#include "thread.h"

#define NETSOCK_MS 2000 /* one request: the port's two bytes from the manager */

/* One request, untrusted although only the manager reaches this socket: two bytes, a port other
 * than 0; the answer is "L" with the listener attached, or "E" alone. */
static void netsock_serve_one(int conn)
{
	char byte;
	struct pollfd p = { .fd = conn, .events = POLLIN };
	struct timeval tv = { .tv_sec = NETSOCK_MS / 1000 };
	unsigned char req[2];
	uint16_t port = 0;
	int fd = -1;

	/* Bounded both ways: a request cut after its first byte holds this thread no longer. */
	(void)setsockopt(conn, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
	(void)setsockopt(conn, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
	if (poll(&p, 1, NETSOCK_MS) == 1 && recv(conn, req, sizeof req, MSG_WAITALL) == (ssize_t)sizeof req)
		port = (uint16_t)(req[0] << 8 | req[1]);
	if (port != 0 && (fd = sock_listen_loopback(0, port)) < 0)
		sb_warn("net socket: cannot listen on 127.0.0.1:%u: %s", port, strerror(errno));
	byte = fd >= 0 ? 'L' : 'E';
	if (sock_send_fds(conn, &byte, 1, &fd, fd >= 0 ? 1 : 0) != 1)
		sb_warn("net socket: the answer was not sent: %s", strerror(errno));
	/* The manager's now, or nobody's: the agent keeps no copy. */
	if (fd >= 0)
		close(fd);
}

static void *netsock_thread(void *arg)
{
	int lfd = (int)(intptr_t)arg;

	for (;;) {
		int conn = accept4(lfd, NULL, NULL, SOCK_CLOEXEC);

		if (conn < 0) {
			if (errno == EMFILE || errno == ENFILE)
				sleep(1);
			continue;
		}
		netsock_serve_one(conn);
		close(conn);
	}
	return NULL;
}

int serve_netsock_start(const char *listen, struct sb_err *err)
{
	int fd;

	if (strncmp(listen, "unix:", 5) != 0)
		return sb_invalid(err, "--net-socket: expected unix:PATH");
	fd = sock_listen_unix(listen + 5, 0600, 4, err);
	if (fd < 0)
		return -1;
	if (sb_thread_detached(netsock_thread, (void *)(intptr_t)fd, err) < 0) {
		close(fd);
		return -1;
	}
	return 0;
}
