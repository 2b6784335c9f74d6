/* The egress proxy of one sandbox (egress_proxy.h): one thread per sandbox, one poll loop over its
 * listener and connections. Per connection: the request head, bounded in size and time
 * (egress_head.c); a CONNECT to an allowed destination (egress_allow.c) is connected from the
 * manager's own network namespace, answered 200, then tunnelled both ways unread through two
 * bounded buffers (a side is not read while the other side's buffer is full: backpressure);
 * anything else gets a clear HTTP error and is closed. Everything a connection sends is a
 * command's: nothing in it is trusted beyond the checked head. A slow name lookup holds only this
 * sandbox's loop, never another sandbox's. */
#include "egress_proxy.h"

#include "clock.h"
#include "egress_head.h"
#include "log.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

enum conn_state { CONN_FREE = 0, CONN_HEAD, CONN_CONNECTING, CONN_TUNNEL };

/* One direction of a tunnel: bytes read from its source, not yet written to its sink. */
struct flow {
	char data[EGRESS_BUF_BYTES];
	size_t off, len;
	bool eof;                      /* the source sent its end */
	bool shut;                     /* and the sink was told (shutdown SHUT_WR) */
	uint64_t total;                /* every byte read from the source, for the record */
};

struct conn {
	enum conn_state state;
	int client, upstream;
	char head[EGRESS_HEAD_MAX];
	size_t head_len;
	char target[EGRESS_TARGET_MAX + 1];
	int64_t deadline_ms;           /* HEAD, CONNECTING: that step's end; TUNNEL: the total limit */
	int64_t active_ms;             /* TUNNEL: the last byte either way */
	struct flow up, down;          /* client -> destination, destination -> client */
	/* The record (egress_log.h): the request's method once its head is read, the status the
	 * sandbox got, since when. */
	struct egress_log *log;
	char method[EGRESS_METHOD_MAX + 1];
	int status;
	int64_t t0_ms;
};

struct egress_proxy {
	pthread_t thread;
	int listen_fd;
	int wake[2];                   /* egress_proxy_stop writes a byte: the loop ends */
	int64_t accept_after_ms;       /* out of descriptors: the listener rests until then */
	int64_t log_window_ms;         /* the second the log budget counts in */
	unsigned log_lines, log_dropped;
	char session[65];
	struct egress_allow allow;
	struct egress_log *log;        /* the sandbox's: every request, as it ends (not owned) */
	struct conn conns[EGRESS_CONN_MAX];
	struct pollfd fds[2 + 2 * EGRESS_CONN_MAX];
	int fd_conn[2 + 2 * EGRESS_CONN_MAX]; /* which connection a pollfd belongs to */
};

/* A request that was read goes into the sandbox's egress log as it ends, whatever ended it. */
static void conn_record(struct conn *c)
{
	struct egress_request r = {
		.method = c->method, .host = c->target, .refused = c->status == 403, .status = c->status,
		.bytes_up = c->up.total, .bytes_down = c->down.total,
		.duration_ms = (uint64_t)(clock_mono_ms() - c->t0_ms), .begun = true,
	};

	if (c->log != NULL && c->method[0] != '\0')
		egress_log_append(c->log, &r);
}

static void conn_close(struct conn *c)
{
	conn_record(c);
	if (c->client >= 0)
		close(c->client);
	if (c->upstream >= 0)
		close(c->upstream);
	c->state = CONN_FREE;
	c->client = c->upstream = -1;
}

/* At most EGRESS_LOG_PER_S lines a second per sandbox: a command opening connections as fast as it
 * can must not fill the manager's log; what is left out is counted and said once the second ends. */
#define EGRESS_LOG_PER_S 20

static bool log_budget(struct egress_proxy *p)
{
	int64_t now = clock_mono_ms();

	if (now - p->log_window_ms >= 1000) {
		if (p->log_dropped > 0)
			sb_info("session %s: egress: %u more lines left out of the log in a second", p->session,
				p->log_dropped);
		p->log_window_ms = now;
		p->log_lines = p->log_dropped = 0;
	}
	if (p->log_lines >= EGRESS_LOG_PER_S) {
		p->log_dropped++;
		return false;
	}
	p->log_lines++;
	return true;
}

/* Best effort, then closed: an error answer to a connection that is going away either way. The
 * client's socket is fresh and the answer short, so one send fits its buffer. */
static void respond_close(struct egress_proxy *p, struct conn *c, int status, const char *reason, const char *body)
{
	char text[EGRESS_HEAD_MAX];
	int n = snprintf(text, sizeof text,
			 "HTTP/1.1 %d %s\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: %zu\r\n"
			 "Connection: close\r\n\r\n%s\n", status, reason, strlen(body) + 1, body);

	if (log_budget(p))
		sb_info("session %s: egress %d: %s", p->session, status, body);
	c->status = status;
	if (n > 0)
		(void)send(c->client, text, (size_t)n < sizeof text ? (size_t)n : sizeof text - 1, MSG_NOSIGNAL | MSG_DONTWAIT);
	conn_close(c);
}

static void conn_refuse_full(struct egress_proxy *p, int fd)
{
	struct conn c = { .client = fd, .upstream = -1 };
	char body[256];

	snprintf(body, sizeof body, "infra-sandbox egress: session %s has %d connections open, the most one sandbox "
		 "may hold", p->session, EGRESS_CONN_MAX);
	respond_close(p, &c, 503, "Service Unavailable", body);
}

static void listener_accept(struct egress_proxy *p)
{
	for (;;) {
		int fd = accept4(p->listen_fd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
		size_t i;

		if (fd < 0) {
			/* EAGAIN: none left. Out of descriptors (EMFILE, ENFILE): the pending connection stays
			 * in the backlog and the listener stays readable, so it rests a moment rather than
			 * waking the loop at once, again and again. */
			if (errno != EAGAIN && errno != EINTR && errno != ECONNABORTED)
				p->accept_after_ms = clock_mono_ms() + 100;
			return;
		}
		for (i = 0; i < EGRESS_CONN_MAX && p->conns[i].state != CONN_FREE; i++) {
		}
		if (i == EGRESS_CONN_MAX) {
			conn_refuse_full(p, fd);
			continue;
		}
		p->conns[i] = (struct conn){ .state = CONN_HEAD, .client = fd, .upstream = -1, .log = p->log,
					     .t0_ms = clock_mono_ms(), .deadline_ms = clock_mono_ms() + EGRESS_HEAD_MS };
	}
}

/* A checked CONNECT target: the allow-list's rule, then a non-blocking connection from this
 * (the manager's) network namespace. 0: connecting; -1: answered and closed. */
static int connect_start(struct egress_proxy *p, struct conn *c)
{
	char host[EGRESS_HOST_MAX + 1], body[SB_ERR_MSG_MAX + 512], allowed[512];
	const struct egress_rule *rule;
	struct sockaddr_storage sa;
	socklen_t sa_len;
	struct sb_err err;
	uint16_t port;
	bool literal;

	if (egress_target_parse(c->target, host, &port, &literal, &err) < 0) {
		snprintf(body, sizeof body, "infra-sandbox egress: CONNECT %s: %s", c->target, err.msg);
		respond_close(p, c, 400, "Bad Request", body);
		return -1;
	}
	rule = egress_allow_match(&p->allow, host, port, literal);
	if (rule == NULL) {
		egress_allow_describe(&p->allow, allowed, sizeof allowed);
		snprintf(body, sizeof body, "infra-sandbox egress: \"%s\" is not allowed for session %s (allowed: %s)",
			 c->target, p->session, allowed);
		respond_close(p, c, 403, "Forbidden", body);
		return -1;
	}
	if (egress_resolve(rule, host, port, &sa, &sa_len, &err) < 0) {
		snprintf(body, sizeof body, "infra-sandbox egress: \"%s\" is refused for session %s: %s", c->target,
			 p->session, err.msg);
		respond_close(p, c, err.errnum == EACCES ? 403 : 502, err.errnum == EACCES ? "Forbidden" : "Bad Gateway",
			      body);
		return -1;
	}
	c->upstream = socket(sa.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (c->upstream < 0 || (connect(c->upstream, (struct sockaddr *)&sa, sa_len) < 0 && errno != EINPROGRESS)) {
		snprintf(body, sizeof body, "infra-sandbox egress: connecting to \"%s\": %s", c->target, strerror(errno));
		respond_close(p, c, 502, "Bad Gateway", body);
		return -1;
	}
	c->state = CONN_CONNECTING;
	c->deadline_ms = clock_mono_ms() + EGRESS_CONNECT_MS;
	return 0;
}

static void head_read(struct egress_proxy *p, struct conn *c)
{
	struct egress_head h;
	struct sb_err err;
	char body[SB_ERR_MSG_MAX + 512];
	size_t used = 0;
	ssize_t n = recv(c->client, c->head + c->head_len, sizeof c->head - c->head_len, 0);
	int rc;

	if (n <= 0) {
		if (n == 0 || (errno != EAGAIN && errno != EINTR))
			conn_close(c);
		return;
	}
	c->head_len += (size_t)n;
	rc = egress_head_parse(c->head, c->head_len, &h, &used, &err);
	if (rc == 0)
		return;
	if (rc < 0) {
		snprintf(body, sizeof body, "infra-sandbox egress: %s", err.msg);
		respond_close(p, c, err.errnum == E2BIG ? 431 : 400,
			      err.errnum == E2BIG ? "Request Header Fields Too Large" : "Bad Request", body);
		return;
	}
	snprintf(c->method, sizeof c->method, "%s", h.method);
	if (c->log != NULL)
		egress_log_begin(c->log);
	snprintf(c->target, sizeof c->target, "%s", h.target);
	if (strcmp(h.method, "CONNECT") != 0) {
		snprintf(body, sizeof body, "infra-sandbox egress: %s %s is not served for session %s: only CONNECT "
			 "HOST:PORT to an allowed destination is (set HTTPS_PROXY, and use https)", h.method, h.target,
			 p->session);
		respond_close(p, c, 403, "Forbidden", body);
		return;
	}
	/* Bytes sent after the head (a client that does not wait for the 200) are the tunnel's. */
	c->up.len = c->head_len - used;
	memcpy(c->up.data, c->head + used, c->up.len);
	c->up.total = c->up.len;
	connect_start(p, c);
}

static void connect_done(struct egress_proxy *p, struct conn *c)
{
	static const char ok[] = "HTTP/1.1 200 Connection established\r\n\r\n";
	char body[512];
	int e = 0;
	socklen_t len = sizeof e;

	if (getsockopt(c->upstream, SOL_SOCKET, SO_ERROR, &e, &len) < 0)
		e = errno;
	if (e == EINPROGRESS)
		return;
	if (e != 0) {
		snprintf(body, sizeof body, "infra-sandbox egress: connecting to \"%s\": %s", c->target, strerror(e));
		respond_close(p, c, 502, "Bad Gateway", body);
		return;
	}
	if (log_budget(p))
		sb_info("session %s: egress tunnel to %s", p->session, c->target);
	/* The 200 goes first through the client's direction, as the tunnel's first bytes. */
	memcpy(c->down.data, ok, sizeof ok - 1);
	c->down.len = sizeof ok - 1;
	c->state = CONN_TUNNEL;
	c->status = 200;
	c->active_ms = clock_mono_ms();
	c->deadline_ms = c->active_ms + EGRESS_TOTAL_MS;
}

/* Reads from src into f while it has room. -1: the connection failed. */
static int flow_fill(struct flow *f, int src)
{
	ssize_t n;

	if (f->off > 0) {
		memmove(f->data, f->data + f->off, f->len);
		f->off = 0;
	}
	n = recv(src, f->data + f->len, sizeof f->data - f->len, 0);
	if (n == 0)
		f->eof = true;
	if (n < 0)
		return errno == EAGAIN || errno == EINTR ? 0 : -1;
	f->len += (size_t)n;
	f->total += (uint64_t)n;
	return 0;
}

static int flow_drain(struct flow *f, int sink)
{
	ssize_t n = send(sink, f->data + f->off, f->len, MSG_NOSIGNAL);

	if (n < 0)
		return errno == EAGAIN || errno == EINTR ? 0 : -1;
	f->off += (size_t)n;
	f->len -= (size_t)n;
	return 0;
}

/* Once a source's end is written through, its sink hears it: a half-close passes both ways. */
static void flow_settle(struct flow *f, int sink)
{
	if (f->eof && f->len == 0 && !f->shut) {
		shutdown(sink, SHUT_WR);
		f->shut = true;
	}
}

static void tunnel_events(struct conn *c, short cev, short uev)
{
	int rc = 0;

	if (cev & POLLIN)
		rc |= flow_fill(&c->up, c->client);
	if (uev & POLLIN)
		rc |= flow_fill(&c->down, c->upstream);
	if ((uev & POLLOUT) && c->up.len > 0)
		rc |= flow_drain(&c->up, c->upstream);
	if ((cev & POLLOUT) && c->down.len > 0)
		rc |= flow_drain(&c->down, c->client);
	/* An error (a reset: whatever was pending is lost anyway) ends the tunnel. A hang-up does not:
	 * what the peer sent before it is still to be read, once there is room for it, and its end
	 * is seen as a read of 0 (poll_build stops asking a side that has nothing to wait for). */
	if (rc < 0 || ((cev | uev) & POLLERR)) {
		conn_close(c);
		return;
	}
	if (cev | uev)
		c->active_ms = clock_mono_ms();
	flow_settle(&c->up, c->upstream);
	flow_settle(&c->down, c->client);
	if (c->up.shut && c->down.shut)
		conn_close(c);
}

static void conn_timers(struct egress_proxy *p, struct conn *c, int64_t now)
{
	char body[512];

	if (c->state == CONN_HEAD && now >= c->deadline_ms) {
		snprintf(body, sizeof body, "infra-sandbox egress: no complete request head within %d ms", EGRESS_HEAD_MS);
		respond_close(p, c, 408, "Request Timeout", body);
	} else if (c->state == CONN_CONNECTING && now >= c->deadline_ms) {
		snprintf(body, sizeof body, "infra-sandbox egress: \"%s\" did not accept within %d ms", c->target,
			 EGRESS_CONNECT_MS);
		respond_close(p, c, 504, "Gateway Timeout", body);
	} else if (c->state == CONN_TUNNEL && (now >= c->deadline_ms || now - c->active_ms >= EGRESS_IDLE_MS)) {
		if (log_budget(p))
			sb_info("session %s: egress tunnel to %s closed: %s", p->session, c->target,
				now >= c->deadline_ms ? "its total time limit" : "idle");
		conn_close(c);
	}
}

static void fd_add(struct egress_proxy *p, nfds_t *n, int fd, short events, int conn)
{
	/* No event asked for: left out of this poll (a negative fd), or its hang-up would wake the
	 * loop again and again while the other side's buffer is full. */
	p->fds[*n] = (struct pollfd){ .fd = events != 0 ? fd : -fd - 1, .events = events };
	p->fd_conn[*n] = conn;
	(*n)++;
}

/* What each connection waits for now: a full buffer stops reading its source (backpressure). */
static nfds_t poll_build(struct egress_proxy *p)
{
	nfds_t n = 0;

	fd_add(p, &n, p->wake[0], POLLIN, -1);
	fd_add(p, &n, p->listen_fd, clock_mono_ms() >= p->accept_after_ms ? POLLIN : 0, -1);
	for (int i = 0; i < EGRESS_CONN_MAX; i++) {
		struct conn *c = &p->conns[i];

		if (c->state == CONN_HEAD)
			fd_add(p, &n, c->client, POLLIN, i);
		if (c->state == CONN_CONNECTING)
			fd_add(p, &n, c->upstream, POLLOUT, i);
		if (c->state != CONN_TUNNEL)
			continue;
		fd_add(p, &n, c->client, (short)((!c->up.eof && c->up.len < sizeof c->up.data ? POLLIN : 0) |
						 (c->down.len > 0 ? POLLOUT : 0)), i);
		fd_add(p, &n, c->upstream, (short)((!c->down.eof && c->down.len < sizeof c->down.data ? POLLIN : 0) |
						   (c->up.len > 0 ? POLLOUT : 0)), i);
	}
	return n;
}

static void poll_dispatch(struct egress_proxy *p, nfds_t n)
{
	for (nfds_t k = 2; k < n; k++) {
		struct conn *c = &p->conns[p->fd_conn[k]];
		short ev = p->fds[k].revents;

		if (c->state == CONN_HEAD && ev)
			head_read(p, c);
		else if (c->state == CONN_CONNECTING && ev && p->fds[k].fd == c->upstream)
			connect_done(p, c);
		else if (c->state == CONN_TUNNEL && (p->fds[k].fd == c->client || p->fds[k].fd == -c->client - 1) &&
			 k + 1 < n) {
			tunnel_events(c, ev, p->fds[k + 1].revents);
			k++;
		}
	}
}

static void *proxy_loop(void *arg)
{
	struct egress_proxy *p = arg;

	for (;;) {
		nfds_t n = poll_build(p);
		int rc = poll(p->fds, n, clock_mono_ms() < p->accept_after_ms ? 100 : 1000);
		int64_t now;

		if (rc < 0 && errno != EINTR) {
			sb_error("session %s: the egress proxy's poll failed: %s; it stops", p->session, strerror(errno));
			break;
		}
		if (rc > 0 && (p->fds[0].revents & POLLIN))
			break;
		if (rc > 0)
			poll_dispatch(p, n);
		if (rc > 0 && (p->fds[1].revents & POLLIN))
			listener_accept(p);
		now = clock_mono_ms();
		for (int i = 0; i < EGRESS_CONN_MAX; i++)
			if (p->conns[i].state != CONN_FREE)
				conn_timers(p, &p->conns[i], now);
	}
	return NULL;
}

int egress_proxy_start(int listen_fd, const char *session, const struct egress_allow *a, struct egress_log *log,
		       struct egress_proxy **out, struct sb_err *err)
{
	struct egress_proxy *p = calloc(1, sizeof *p);
	int rc;

	*out = NULL;
	if (p == NULL) {
		close(listen_fd);
		return sb_fail(err, ENOMEM, "allocating the egress proxy");
	}
	p->listen_fd = listen_fd;
	p->wake[0] = p->wake[1] = -1;
	snprintf(p->session, sizeof p->session, "%s", session);
	p->allow = *a;
	p->log = log;
	for (int i = 0; i < EGRESS_CONN_MAX; i++)
		p->conns[i].client = p->conns[i].upstream = -1;
	if (fcntl(listen_fd, F_SETFL, O_NONBLOCK) < 0 || pipe2(p->wake, O_CLOEXEC) < 0) {
		sb_fail_errno(err, "preparing the egress proxy's listener");
		egress_proxy_stop(&p);
		return -1;
	}
	rc = pthread_create(&p->thread, NULL, proxy_loop, p);
	if (rc != 0) {
		close(p->wake[1]);
		p->wake[1] = -1; /* no thread to wake: stop only closes */
		sb_fail(err, rc, "starting the egress proxy's thread");
		egress_proxy_stop(&p);
		return -1;
	}
	*out = p;
	return 0;
}

void egress_proxy_stop(struct egress_proxy **pp)
{
	struct egress_proxy *p = *pp;

	if (p == NULL)
		return;
	*pp = NULL;
	if (p->wake[1] >= 0) {
		/* A byte the loop reads at its next poll; the pipe's buffer is empty, so this cannot block. */
		(void)!write(p->wake[1], "x", 1);
		pthread_join(p->thread, NULL);
		close(p->wake[1]);
	}
	if (p->wake[0] >= 0)
		close(p->wake[0]);
	for (int i = 0; i < EGRESS_CONN_MAX; i++)
		if (p->conns[i].state != CONN_FREE)
			conn_close(&p->conns[i]);
	close(p->listen_fd);
	free(p);
}
