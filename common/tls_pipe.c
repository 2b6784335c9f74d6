/* One plain connection carried inside a verified TLS session, both ways, until both ends closed
 * (policy `proxy` on the kubernetes backend: the agent's side in the pod, the manager's beside its
 * egress proxy; tls_pipe.h). Never reads a byte's meaning; never leaves a half it closed open. */
#include "tls_pipe.h"

#include <errno.h>
#include <poll.h>
#include <stdbool.h>
#include <sys/socket.h>
#include <unistd.h>

#include "fdio.h"

#define TLS_PIPE_BUF 16384

/* All of buf into the session, each write bounded by idle_ms. 0, or -1 with errno. */
static int pipe_tls_write(struct tls_session *s, const struct sb_stream *st, const char *buf, size_t len,
			  int idle_ms)
{
	while (len > 0) {
		ssize_t n;

		tls_session_set_deadline(s, tls_deadline_after(idle_ms));
		n = st->write(st->ctx, buf, len);
		if (n <= 0)
			return -1;
		buf += n;
		len -= (size_t)n;
	}
	return 0;
}

/* One step from the session to plain_fd: 1 while that way is open, 0 once the peer's close_notify
 * came (plain_fd's writing half is closed with it), -1 on error. */
static int pipe_in(struct tls_session *s, const struct sb_stream *st, int plain_fd, char *buf, int idle_ms)
{
	ssize_t n;

	/* A record arriving in parts blocks the read until its end: bounded like an idle pipe. */
	tls_session_set_deadline(s, tls_deadline_after(idle_ms));
	n = st->read(st->ctx, buf, TLS_PIPE_BUF);
	if (n < 0)
		return -1;
	if (n == 0) {
		(void)shutdown(plain_fd, SHUT_WR);
		return 0;
	}
	return fd_write_all(plain_fd, buf, (size_t)n) < 0 ? -1 : 1;
}

/* One step from plain_fd into the session: 1 while open, 0 once plain_fd's peer closed its
 * writing half (the session's close_notify follows), -1 on error. */
static int pipe_out(struct tls_session *s, const struct sb_stream *st, int plain_fd, char *buf, int idle_ms)
{
	ssize_t n = read(plain_fd, buf, TLS_PIPE_BUF);

	if (n < 0)
		return errno == EINTR || errno == EAGAIN ? 1 : -1;
	if (n == 0)
		return tls_session_close_write(s) < 0 ? -1 : 0;
	return pipe_tls_write(s, st, buf, (size_t)n, idle_ms) < 0 ? -1 : 1;
}

int tls_pipe(struct tls_session *s, int net_fd, int plain_fd, int idle_ms)
{
	struct sb_stream st;
	char buf[TLS_PIPE_BUF];
	int in = 1, out = 1; /* 1: that way is open */

	tls_session_stream(s, &st);
	while (in == 1 || out == 1) {
		struct pollfd p[2] = { { .fd = in == 1 ? net_fd : -1, .events = POLLIN },
				       { .fd = out == 1 ? plain_fd : -1, .events = POLLIN } };

		/* Bytes already decrypted are invisible to poll(2): take them first. */
		if (in == 1 && tls_session_pending(s) > 0) {
			p[0].revents = POLLIN;
		} else {
			int rc = poll(p, 2, idle_ms);

			if (rc == 0) {
				errno = ETIMEDOUT;
				return -1;
			}
			if (rc < 0 && errno != EINTR)
				return -1;
			if (rc < 0)
				continue;
		}
		if (p[0].revents != 0 && (in = pipe_in(s, &st, plain_fd, buf, idle_ms)) < 0)
			return -1;
		if (p[1].revents != 0 && (out = pipe_out(s, &st, plain_fd, buf, idle_ms)) < 0)
			return -1;
	}
	return 0;
}
