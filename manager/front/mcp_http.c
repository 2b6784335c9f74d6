/* The Streamable HTTP transport of `sandbox-manager mcp` (see mcp_http.h). One request per
 * connection (Connection: close), one detached thread per connection, at most MAX_CONNS at once, of
 * which at most UNAUTH_MAX before their token (the oldest evicted).
 * A request is read whole within READ_DEADLINE_MS and its bounds, checked (path, Origin, bearer
 * token, method, content type), and handed to the protocol (mcp_proto.c); its answer is one JSON
 * object, or an SSE stream when a progress notification comes first and the client accepts one.
 * A client that closes its connection cancels its request (2026-07-28, transports
 * "Cancellation"). Writes to a client are bounded by SEND_TIMEOUT_MS: a stalled client holds
 * nothing but its own thread. */
#include "mcp_http.h"

#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <unistd.h>

#include "clock.h"
#include "fdio.h"
#include "log.h"
#include "mcp_proto.h"
#include "thread.h"

#define HEAD_CAP 16384u                 /* the request line and headers */
#define BODY_CAP (4u * 1024u * 1024u)   /* one JSON-RPC message, as on stdio */
#define READ_DEADLINE_MS 10000          /* the whole request, from accept */
#define SEND_TIMEOUT_MS 10000
#define MAX_CONNS 32
/* Connections that have not shown the bearer token yet: a budget of their own, the oldest evicted
 * by a new one (issue 26, N1). Anyone who can connect can open one, and 32 held idle filled every
 * slot, so the token's holders got 503; now idle ones hold at most these, and only until newer
 * ones come, while a client with the token leaves them within its first packet. */
#define UNAUTH_MAX 8
#define CONTINUE "HTTP/1.1 100 Continue\r\n\r\n"

static pthread_mutex_t conns_lock = PTHREAD_MUTEX_INITIALIZER;
static int conns;

/* One connection and the request it carries; sink first (the protocol hands it back). */
struct conn {
	struct mcp_sink sink;
	const struct mcp_http *h;
	int fd;
	pthread_mutex_t lock;
	pthread_cond_t changed;
	json_t *pending;        /* messages the protocol sent, not yet written */
	int done;
	int sse_ok, sse_started, modern;
	char head[HEAD_CAP + 1];
	char *body;
	size_t body_len;
};

/* The connections not yet authenticated, under conns_lock: each slot's conn and its arrival. */
static struct {
	struct conn *c;
	uint64_t seq;
} unauth[UNAUTH_MAX];
static uint64_t unauth_seq;

/* A new connection takes a free slot, or the oldest one's: that one is shut down (its thread reads
 * the end and leaves). Its descriptor is still open: a conn leaves its slot before it closes it. */
static void unauth_enter(struct conn *c)
{
	size_t pick = 0;

	pthread_mutex_lock(&conns_lock);
	for (size_t i = 0; i < UNAUTH_MAX; i++) {
		if (unauth[i].c == NULL) {
			pick = i;
			break;
		}
		if (unauth[i].seq < unauth[pick].seq)
			pick = i;
	}
	if (unauth[pick].c != NULL) {
		sb_info("mcp: http: %d connections without a token: the oldest is closed", UNAUTH_MAX);
		shutdown(unauth[pick].c->fd, SHUT_RDWR);
	}
	unauth[pick].c = c;
	unauth[pick].seq = ++unauth_seq;
	pthread_mutex_unlock(&conns_lock);
}

/* Its token shown, or its connection ending: the slot is free (if it is still its own). */
static void unauth_leave(struct conn *c)
{
	pthread_mutex_lock(&conns_lock);
	for (size_t i = 0; i < UNAUTH_MAX; i++)
		if (unauth[i].c == c)
			unauth[i].c = NULL;
	pthread_mutex_unlock(&conns_lock);
}

/* ---- the request ---- */

struct req {
	char *method, *path;
	const char *auth, *origin, *ctype, *accept, *version, *mcp_method, *mcp_name, *te, *expect;
	long long clen;
};

/* Read until the deadline: at least `want` bytes past *have into buf (cap); 0, or -1. */
static int read_more(int fd, char *buf, size_t cap, size_t *have, int64_t deadline)
{
	for (;;) {
		int64_t left = deadline - clock_mono_ms();
		struct pollfd p = { fd, POLLIN, 0 };
		ssize_t n;

		if (left <= 0 || *have >= cap)
			return -1;
		if (poll(&p, 1, (int)left) <= 0)
			continue;
		n = recv(fd, buf + *have, cap - *have, 0);
		if (n < 0 && (errno == EINTR || errno == EAGAIN))
			continue;
		if (n <= 0)
			return -1;
		*have += (size_t)n;
		return 0;
	}
}

static char *trim(char *s)
{
	char *e = s + strlen(s);

	while (*s == ' ' || *s == '\t')
		s++;
	while (e > s && (e[-1] == ' ' || e[-1] == '\t'))
		*--e = '\0';
	return s;
}

/* Parse the head (NUL-terminated, "\r\n\r\n" cut off) into r; -1 when malformed. */
static int head_parse(char *head, struct req *r)
{
	char *line = head, *next, *sp;
	const char *clen = NULL;
	/* The headers we read. */
	const struct { const char *name, **slot; } known[] = {
		{ "authorization", &r->auth }, { "origin", &r->origin }, { "content-type", &r->ctype },
		{ "accept", &r->accept }, { "mcp-protocol-version", &r->version }, { "mcp-method", &r->mcp_method },
		{ "mcp-name", &r->mcp_name }, { "transfer-encoding", &r->te }, { "expect", &r->expect },
		{ "content-length", &clen },
	};

	memset(r, 0, sizeof *r);
	r->clen = -1;
	if ((next = strstr(line, "\r\n")) != NULL)
		*next = '\0', next += 2;
	if ((sp = strchr(line, ' ')) == NULL)
		return -1;
	*sp = '\0';
	r->method = line;
	r->path = sp + 1;
	if ((sp = strchr(r->path, ' ')) == NULL || (strcmp(sp + 1, "HTTP/1.1") != 0 && strcmp(sp + 1, "HTTP/1.0") != 0))
		return -1;
	*sp = '\0';
	for (line = next; line != NULL && *line != '\0'; line = next) {
		char *colon, *v;

		if ((next = strstr(line, "\r\n")) != NULL)
			*next = '\0', next += 2;
		if ((colon = strchr(line, ':')) == NULL || colon == line)
			return -1;
		*colon = '\0';
		v = trim(colon + 1);
		for (size_t i = 0; i < sizeof known / sizeof known[0]; i++) {
			if (strcasecmp(line, known[i].name) != 0)
				continue;
			if (*known[i].slot != NULL)
				return -1; /* twice: a duplicate could say two things */
			*known[i].slot = v;
		}
	}
	if (clen != NULL) {
		char *end;

		errno = 0;
		r->clen = strtoll(clen, &end, 10);
		if (clen[0] < '0' || clen[0] > '9' || *end != '\0' || errno != 0)
			return -1;
	}
	return 0;
}

/* Origin: absent (not a browser), or a page of this machine (DNS rebinding, transports
 * "Security"): http or https, host 127.0.0.1, localhost or [::1], any port. */
static int origin_ok(const char *o)
{
	static const char *const hosts[] = { "127.0.0.1", "localhost", "[::1]" };
	const char *h;

	if (o == NULL)
		return 1;
	if (strncmp(o, "http://", 7) == 0)
		h = o + 7;
	else if (strncmp(o, "https://", 8) == 0)
		h = o + 8;
	else
		return 0;
	for (size_t i = 0; i < sizeof hosts / sizeof hosts[0]; i++) {
		size_t n = strlen(hosts[i]);

		if (strncmp(h, hosts[i], n) == 0 && (h[n] == '\0' || (h[n] == ':' && h[n + 1] != '\0' &&
								       strspn(h + n + 1, "0123456789") == strlen(h + n + 1))))
			return 1;
	}
	return 0;
}

/* "Bearer <token>", the token compared in constant time (its length is not a secret). */
static int token_ok(const struct mcp_http *h, const char *auth)
{
	const char *given;
	size_t len;
	unsigned diff;

	if (auth == NULL || strncasecmp(auth, "Bearer ", 7) != 0)
		return 0;
	given = auth + 7;
	len = strlen(given);
	diff = len != h->token_len;
	for (size_t i = 0; i < h->token_len; i++)
		diff |= (unsigned char)h->token[i] ^ (unsigned char)(i < len ? given[i] : 0);
	return diff == 0;
}

/* ---- answers ---- */

static const char *status_text(int status)
{
	switch (status) {
	case 200: return "OK";
	case 202: return "Accepted";
	case 400: return "Bad Request";
	case 401: return "Unauthorized";
	case 403: return "Forbidden";
	case 404: return "Not Found";
	case 405: return "Method Not Allowed";
	case 408: return "Request Timeout";
	case 411: return "Length Required";
	case 413: return "Content Too Large";
	case 415: return "Unsupported Media Type";
	case 503: return "Service Unavailable";
	default: return "Internal Server Error";
	}
}

/* A whole answer: status, extra header lines (each ending "\r\n"), and a JSON body or none. */
static void reply(int fd, int status, const char *extra, json_t *body)
{
	char *text = body ? json_dumps(body, JSON_COMPACT) : NULL;
	char head[512];
	int n;

	json_decref(body);
	n = snprintf(head, sizeof head, "HTTP/1.1 %d %s\r\n%s%sContent-Length: %zu\r\nCache-Control: no-store\r\n"
		     "Connection: close\r\n\r\n", status, status_text(status), extra ? extra : "",
		     text ? "Content-Type: application/json\r\n" : "", text ? strlen(text) : 0);
	if (n > 0 && (size_t)n < sizeof head && fd_write_all(fd, head, (size_t)n) == 0 && text != NULL)
		fd_write_all(fd, text, strlen(text));
	free(text);
}

static void reply_error(int fd, int status, const char *extra, int code, const char *msg)
{
	reply(fd, status, extra, mcp_error_msg(NULL, code, NULL, "%s", msg));
}

/* The status of a request's final answer (transports "Protocol Version Header", basic/index). */
static int answer_status(json_t *msg, int modern)
{
	json_int_t code = json_integer_value(json_object_get(json_object_get(msg, "error"), "code"));

	if (json_object_get(msg, "error") == NULL)
		return 200;
	if (code == RPC_PARSE || code == RPC_INVALID_REQUEST)
		return 400;
	if (modern && code == RPC_NO_METHOD)
		return 404;
	if (modern && (code == RPC_INVALID_PARAMS || code == RPC_HEADER_MISMATCH || code == RPC_MISSING_CAPABILITY ||
		       code == RPC_UNSUPPORTED_VERSION))
		return 400;
	return 200;
}

static void sse_event(struct conn *c, json_t *msg)
{
	static const char head[] = "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nCache-Control: no-store\r\n"
				   "X-Accel-Buffering: no\r\nConnection: close\r\n\r\n";
	char *text = json_dumps(msg, JSON_COMPACT);

	if (text != NULL && !c->sse_started) {
		c->sse_started = 1;
		fd_write_all(c->fd, head, sizeof head - 1);
	}
	if (text != NULL && (fd_write_all(c->fd, "event: message\ndata: ", 21) < 0 ||
			     fd_write_all(c->fd, text, strlen(text)) < 0 || fd_write_all(c->fd, "\n\n", 2) < 0))
		sb_debug("mcp: http: writing an event: %s", strerror(errno));
	free(text);
}

/* ---- the sink: the protocol's messages for this connection's request ---- */

static void conn_send(struct mcp_sink *s, json_t *msg)
{
	struct conn *c = (struct conn *)s;

	pthread_mutex_lock(&c->lock);
	json_array_append_new(c->pending, msg);
	pthread_cond_broadcast(&c->changed);
	pthread_mutex_unlock(&c->lock);
}

static void conn_done(struct mcp_sink *s)
{
	struct conn *c = (struct conn *)s;

	pthread_mutex_lock(&c->lock);
	c->done = 1;
	pthread_cond_broadcast(&c->changed);
	pthread_mutex_unlock(&c->lock);
}

/* Has the client closed its end? (it sends nothing more after its one request) */
static int client_gone(int fd)
{
	struct pollfd p = { fd, POLLIN | POLLRDHUP, 0 };
	char b;

	if (poll(&p, 1, 0) <= 0)
		return 0;
	if (p.revents & (POLLRDHUP | POLLHUP | POLLERR))
		return 1;
	return recv(fd, &b, 1, MSG_PEEK | MSG_DONTWAIT) == 0;
}

/* Write what the protocol sent until the request is done: notifications as SSE events when the
 * client takes them (else dropped), the response as the body. A client that left cancels. */
static void conn_answer(struct conn *c)
{
	json_t *final = NULL;
	int cancelled = 0;

	pthread_mutex_lock(&c->lock);
	for (;;) {
		struct timespec until;

		while (json_array_size(c->pending) > 0) {
			json_t *m = json_incref(json_array_get(c->pending, 0));

			json_array_remove(c->pending, 0);
			pthread_mutex_unlock(&c->lock);
			if (json_object_get(m, "method") != NULL) { /* a notification about the request */
				if (c->sse_ok && !cancelled)
					sse_event(c, m);
				json_decref(m);
			} else {
				json_decref(final);
				final = m;
			}
			pthread_mutex_lock(&c->lock);
		}
		if (c->done)
			break;
		clock_gettime(CLOCK_REALTIME, &until);
		until.tv_nsec += 250 * 1000000L;
		if (until.tv_nsec >= 1000000000L)
			until.tv_sec++, until.tv_nsec -= 1000000000L;
		pthread_cond_timedwait(&c->changed, &c->lock, &until);
		if (!cancelled && !c->done && client_gone(c->fd)) {
			cancelled = 1;
			pthread_mutex_unlock(&c->lock);
			sb_info("mcp: http: the client closed its connection: cancelling its request");
			mcp_proto_cancel_sink(&c->sink);
			pthread_mutex_lock(&c->lock);
		}
	}
	pthread_mutex_unlock(&c->lock);
	if (cancelled || final == NULL) {
		json_decref(final); /* the spec: nothing more for a cancelled request */
	} else if (c->sse_started) {
		sse_event(c, final);
		json_decref(final);
	} else {
		reply(c->fd, answer_status(final, c->modern), NULL, final);
	}
}

/* ---- one connection ---- */

/* Read and check the request; 0 with c->body, or -1 with the refusal already answered. */
static int conn_read(struct conn *c, struct req *r)
{
	int64_t deadline = clock_mono_ms() + READ_DEADLINE_MS;
	size_t have = 0, head_len;
	char *end;

	for (;;) {
		c->head[have] = '\0';
		if ((end = strstr(c->head, "\r\n\r\n")) != NULL)
			break;
		if (read_more(c->fd, c->head, HEAD_CAP, &have, deadline) < 0) {
			if (have >= HEAD_CAP)
				reply_error(c->fd, 400, NULL, RPC_INVALID_REQUEST, "the request head is over 16384 bytes");
			else if (have > 0)
				reply_error(c->fd, 408, NULL, RPC_INVALID_REQUEST, "the request did not arrive in time");
			return -1;
		}
	}
	*end = '\0';
	head_len = (size_t)(end - c->head) + 4;
	if (head_parse(c->head, r) < 0)
		return reply_error(c->fd, 400, NULL, RPC_INVALID_REQUEST, "malformed HTTP request"), -1;
	if (strcmp(r->path, "/mcp") != 0 && strcmp(r->path, "/") != 0)
		return reply_error(c->fd, 404, NULL, RPC_INVALID_REQUEST, "the MCP endpoint is /mcp"), -1;
	if (!origin_ok(r->origin))
		return reply_error(c->fd, 403, NULL, RPC_INVALID_REQUEST, "Origin is not a page of this machine"), -1;
	if (!token_ok(c->h, r->auth))
		return reply_error(c->fd, 401, r->auth ? "WWW-Authenticate: Bearer error=\"invalid_token\"\r\n"
				   : "WWW-Authenticate: Bearer\r\n", RPC_INVALID_REQUEST,
				   "a bearer token is required (sandbox-manager mcp --token-file)"), -1;
	unauth_leave(c); /* from here on it holds one of the MAX_CONNS, as the token's holder */
	if (strcmp(r->method, "POST") != 0)
		return reply_error(c->fd, 405, "Allow: POST\r\n", RPC_INVALID_REQUEST,
				   "only POST: no sessions, no GET stream (2026-07-28)"), -1;
	if (r->ctype == NULL || strncasecmp(r->ctype, "application/json", 16) != 0 ||
	    (r->ctype[16] != '\0' && r->ctype[16] != ';' && r->ctype[16] != ' '))
		return reply_error(c->fd, 415, NULL, RPC_INVALID_REQUEST, "Content-Type must be application/json"), -1;
	if (r->te != NULL || r->clen < 0)
		return reply_error(c->fd, 411, NULL, RPC_INVALID_REQUEST, "a Content-Length body is required"), -1;
	if (r->clen > (long long)BODY_CAP)
		return reply_error(c->fd, 413, NULL, RPC_INVALID_REQUEST, "the message is over 4194304 bytes"), -1;
	c->body_len = (size_t)r->clen;
	/* curl, for one, waits for this before sending a body over 1 KiB. */
	if (r->expect != NULL && strcasecmp(r->expect, "100-continue") == 0 && have == head_len &&
	    fd_write_all(c->fd, CONTINUE, sizeof CONTINUE - 1) < 0)
		return -1;
	if ((c->body = malloc(c->body_len + 1)) == NULL)
		return reply_error(c->fd, 503, NULL, RPC_INTERNAL, "out of memory"), -1;
	have -= head_len;
	memcpy(c->body, end + 4, have < c->body_len ? have : c->body_len);
	have = have < c->body_len ? have : c->body_len;
	while (have < c->body_len)
		if (read_more(c->fd, c->body, c->body_len, &have, deadline) < 0)
			return reply_error(c->fd, 408, NULL, RPC_INVALID_REQUEST, "the body did not arrive in time"), -1;
	return 0;
}

static void *conn_main(void *arg)
{
	struct conn *c = arg;
	struct req r;

	if (conn_read(c, &r) == 0) {
		struct mcp_origin o = { .sink = &c->sink, .http = 1, .hdr_version = r.version,
					.hdr_method = r.mcp_method, .hdr_name = r.mcp_name, .legacy_proto = -1 };
		enum mcp_kind kind;

		c->sse_ok = r.accept != NULL && strstr(r.accept, "text/event-stream") != NULL;
		kind = mcp_proto_message(c->body, c->body_len, &o);
		c->modern = o.modern;
		if (kind == MCP_REQUEST) {
			conn_answer(c);
		} else if (kind == MCP_BAD) {
			json_t *m = json_incref(json_array_get(c->pending, 0));

			reply(c->fd, 400, NULL, m);
		} else {
			reply(c->fd, 202, NULL, NULL);
		}
	}
	unauth_leave(c); /* before the close: an eviction never shuts down a reused descriptor */
	close(c->fd);
	json_decref(c->pending);
	free(c->body);
	pthread_cond_destroy(&c->changed);
	pthread_mutex_destroy(&c->lock);
	free(c);
	pthread_mutex_lock(&conns_lock);
	conns--;
	pthread_mutex_unlock(&conns_lock);
	return NULL;
}

void mcp_http_conn_start(const struct mcp_http *h, int fd)
{
	struct timeval tv = { SEND_TIMEOUT_MS / 1000, (SEND_TIMEOUT_MS % 1000) * 1000 };
	struct sb_err err;
	struct conn *c;
	int full;

	pthread_mutex_lock(&conns_lock);
	full = conns >= MAX_CONNS;
	conns += !full;
	pthread_mutex_unlock(&conns_lock);
	setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
	c = full ? NULL : calloc(1, sizeof *c);
	if (c == NULL || (c->pending = json_array()) == NULL) {
		reply_error(fd, 503, "Retry-After: 1\r\n", RPC_INTERNAL, full ? "too many connections" : "out of memory");
		close(fd);
		free(c);
		goto fail;
	}
	c->sink = (struct mcp_sink){ conn_send, conn_done };
	c->h = h;
	c->fd = fd;
	pthread_mutex_init(&c->lock, NULL);
	pthread_cond_init(&c->changed, NULL);
	unauth_enter(c);
	if (sb_thread_detached(conn_main, c, &err) == 0)
		return;
	sb_warn("mcp: http: %s", err.msg);
	unauth_leave(c);
	close(fd);
	json_decref(c->pending);
	free(c);
fail:
	if (!full) {
		pthread_mutex_lock(&conns_lock);
		conns--;
		pthread_mutex_unlock(&conns_lock);
	}
}
