/* `sandbox-agent serve`, agent, the network policy `proxy` where the manager cannot listen in the
 * sandbox's network itself (a pod: the kubernetes backend). The agent holds the listeners on this
 * network's 127.0.0.1 (the egress proxy's port and the edges') and carries each connection to the
 * manager inside the mTLS session the manager opened to it (NetAccept, sandbox.proto): the manager
 * dials in, as it does for every exec, so a sandbox pod needs no way out at all (its NetworkPolicy
 * allows none, k8s_pod.c) and no new credential is made. The agent never reads a tunnel's bytes'
 * meaning, never connects anywhere, and never makes anything but a loopback listener on one of
 * SERVE_NET_PORTS ports, only when the verified manager asks. */
#include "serve_internal.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "log.h"
#include "proto.h"
#include "sock.h"
#include "tls_pipe.h"

#define NET_FRAME_CAP 256
#define NET_IDLE_MS (300 * 1000 + 5000) /* the manager's own bound (EGRESS_IDLE_MS) ends it first */

/* Untrusted although it passed mTLS: the port is one of the table's, the count bounded. The
 * listener is made once and kept for the agent's life: a command cannot take the port between
 * two requests, and every tunnel to it is the manager's. */
const char *serve_net_listen(struct agent *a, uint32_t port, int *listen_fd)
{
	static __thread char why[128]; /* each connection has a thread */
	const char *refusal = NULL;
	size_t i = port - SERVE_NET_PORT_FIRST;

	if (port < SERVE_NET_PORT_FIRST || i >= SERVE_NET_PORTS)
		return "the port is not one of the proxy's or the edges'";
	pthread_mutex_lock(&a->lock);
	if (a->net_connections >= SERVE_NET_CONNECTIONS_MAX) {
		refusal = "too many tunnels";
	} else if (a->net_listeners[i] < 0 && (a->net_listeners[i] = sock_listen_loopback(SOCK_NONBLOCK, (uint16_t)port)) < 0) {
		snprintf(why, sizeof why, "cannot listen on 127.0.0.1:%u: %s", port, strerror(errno));
		refusal = why;
	} else {
		a->net_connections++;
		a->connections--; /* a tunnel leaves room for execs, cancels and queries */
		*listen_fd = a->net_listeners[i];
	}
	pthread_mutex_unlock(&a->lock);
	return refusal;
}

static int net_send(struct sb_stream *stream, Sandbox__Envelope *env)
{
	struct sb_err err;

	if (proto_send(stream, env, NET_FRAME_CAP, &err) < 0) {
		sb_warn("net accept: %s", err.msg);
		return -1;
	}
	return 0;
}

/* The next connection to listen_fd (shared by every waiting tunnel of the port: non-blocking, so
 * that the one that loses the race waits again). -1 once the manager closed or sent anything:
 * nothing may come before NetAccepted. */
static int net_wait(struct tls_session *tls, int fd, int listen_fd)
{
	for (;;) {
		struct pollfd p[2] = { { .fd = listen_fd, .events = POLLIN }, { .fd = fd, .events = POLLIN } };
		int conn;

		if (tls_session_pending(tls) > 0)
			return -1;
		if (poll(p, 2, -1) < 0) {
			if (errno == EINTR)
				continue;
			return -1;
		}
		if (p[1].revents != 0)
			return -1;
		conn = accept4(listen_fd, NULL, NULL, SOCK_CLOEXEC);
		if (conn >= 0)
			return conn;
		if (errno == EMFILE || errno == ENFILE)
			sleep(1);
	}
}

void serve_net_tunnel(struct tls_session *tls, int fd, struct sb_stream *stream, int listen_fd, uint32_t port)
{
	Sandbox__Envelope env = SANDBOX__ENVELOPE__INIT;
	Sandbox__NetAccepted acc = SANDBOX__NET_ACCEPTED__INIT;
	int conn = net_wait(tls, fd, listen_fd);

	if (conn < 0)
		return;
	acc.port = port;
	env.body_case = SANDBOX__ENVELOPE__BODY_NET_ACCEPTED;
	env.net_accepted = &acc;
	/* accept4 gave a blocking socket (the flag is not inherited): the pipe polls before reading. */
	if (net_send(stream, &env) == 0 && tls_pipe(tls, fd, conn, NET_IDLE_MS) < 0 && errno != ETIMEDOUT)
		sb_info("a tunnel to 127.0.0.1:%u ended: %s", port, strerror(errno));
	close(conn);
}
