/* The Streamable HTTP transport of `sandbox-manager mcp` (see mcp_http.h), served by libmicrohttpd
 * (MHD) with a thread per connection. One request per connection (every answer says
 * Connection: close), at most MAX_CONNS at once, of which at most UNAUTH_MAX before their token
 * (common/http_budget.c: the oldest shed). MHD reads the head within its memory pool and the body
 * as it comes; each request is checked (path, Origin, bearer token, method, content type, length)
 * as soon as its head is read, and must be whole within READ_DEADLINE_MS of its connection (the
 * watchdog below answers 408). The body goes to the protocol (mcp_proto.c); its answer is one JSON
 * object, or an SSE stream when a progress notification comes first and the client accepts one.
 * A client that closes its connection cancels its request (2026-07-28, transports
 * "Cancellation"). A client that stops reading its answer is closed after SEND_IDLE_SECONDS
 * without progress: a stalled client holds nothing but its own thread. */
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

#include <microhttpd.h>

#include "clock.h"
#include "http_budget.h"
#include "log.h"
#include "mcp_proto.h"
#include "thread.h"

/* MHD's pool per connection: a head of 16 KiB and the answer's header lines. A head over it is
 * answered 431 by MHD itself (measured on 0.9.75: a pool of N bytes takes a head of about N - 150). */
#define HEAD_MEMORY (16384 + 512)
#define BODY_CAP (4u * 1024u * 1024u)   /* one JSON-RPC message, as on stdio */
#define READ_DEADLINE_MS 10000          /* the whole request, from accept (the watchdog) */
/* MHD's idle timeout: while the request is read, only a backstop behind the watchdog; once it is
 * read, each connection's is set to SEND_IDLE_SECONDS, the bound on a client that stops reading. */
#define READ_IDLE_SECONDS 12
#define SEND_IDLE_SECONDS 10
/* An SSE stream says something at least this often (a comment line, which clients ignore), so
 * that a quiet call is not taken for a stalled client by the idle timeout above. */
#define SSE_QUIET_MS 5000
#define MAX_CONNS 32
/* Connections that have not shown the bearer token yet: a budget of their own, the oldest evicted
 * by a new one (issue 26, N1). Anyone who can connect can open one, and 32 held idle filled every
 * slot, so the token's holders got 503; now idle ones hold at most these, and only until newer
 * ones come, while a client with the token leaves them as soon as its head is read. */
#define UNAUTH_MAX 8

static struct http_budget unauth = HTTP_BUDGET_INIT("mcp: http", UNAUTH_MAX);

/* One connection and the request it carries; sink first (the protocol hands it back). Freed when
 * both MHD (NOTIFY_CLOSED) and, for a request handed to it, the protocol (done) let it go. */
struct conn {
	struct mcp_sink sink;
	const struct mcp_http *h;
	struct MHD_Connection *mc;
	int fd;
	int64_t deadline_ms;
	struct conn *next;      /* the watchdog's list, under conns_lock */
	pthread_mutex_t lock;
	pthread_cond_t changed;
	int refs;               /* under lock */
	enum { C_READING, C_READ, C_EXPIRED } phase; /* under conns_lock: the watchdog's view */
	int over;               /* past MAX_CONNS: answered 503 */
	int checked;            /* its head was checked (the first call of the handler) */
	json_t *pending;        /* messages the protocol sent, not yet written */
	int done, cancelled;
	int sse_ok, sse_final, modern;
	char *body;
	size_t body_len, body_have;
	char *out;              /* SSE: the event being written */
	size_t out_len, out_off;
};

static void conn_send(struct mcp_sink *s, json_t *msg);
static void conn_done(struct mcp_sink *s);

static pthread_mutex_t conns_lock = PTHREAD_MUTEX_INITIALIZER;
static struct conn *conns_list;
static int conns;

static void conn_unref(struct conn *c)
{
	int last;

	pthread_mutex_lock(&c->lock);
	last = --c->refs == 0;
	pthread_mutex_unlock(&c->lock);
	if (!last)
		return;
	json_decref(c->pending);
	free(c->body);
	free(c->out);
	pthread_cond_destroy(&c->changed);
	pthread_mutex_destroy(&c->lock);
	free(c);
}

/* ---- the read deadline ---- */

/* MHD's timeout is an idle one, and when it fires MHD closes without an answer; the transport
 * promises a whole request within READ_DEADLINE_MS and a 408. Until the handler has the whole body
 * (C_READ) nothing of ours writes to the connection, so the watchdog may: a fixed 408, then the
 * socket shut down (MHD reads the end and closes it). MHD itself writes in that phase only its own
 * refusals of a bad head and "100 Continue"; one of those at the very deadline could interleave. */
#define TIMEOUT_BODY "{\"jsonrpc\":\"2.0\",\"id\":null,\"error\":{\"code\":-32600,\"message\":" \
		     "\"the request did not arrive in time\"}}"

static void *watchdog_main(void *arg)
{
	char timeout[256];
	int len = snprintf(timeout, sizeof timeout, "HTTP/1.1 408 Request Timeout\r\nContent-Type: application/json\r\n"
			   "Content-Length: %zu\r\nCache-Control: no-store\r\nConnection: close\r\n\r\n%s",
			   sizeof TIMEOUT_BODY - 1, TIMEOUT_BODY);

	(void)arg;
	for (;;) {
		int64_t now = clock_mono_ms();

		pthread_mutex_lock(&conns_lock);
		for (struct conn *c = conns_list; c != NULL; c = c->next) {
			if (c->phase != C_READING || now < c->deadline_ms)
				continue;
			c->phase = C_EXPIRED;
			if (send(c->fd, timeout, (size_t)len, MSG_DONTWAIT | MSG_NOSIGNAL) < 0)
				sb_debug("mcp: http: answering 408: %s", strerror(errno));
			shutdown(c->fd, SHUT_RDWR);
		}
		pthread_mutex_unlock(&conns_lock);
		usleep(250 * 1000);
	}
	return NULL;
}

/* The body is whole: from here on the answer is ours. 0, or -1 when the watchdog answered first. */
static int conn_read_done(struct conn *c)
{
	int rc = 0;

	pthread_mutex_lock(&conns_lock);
	if (c->phase == C_EXPIRED)
		rc = -1;
	else
		c->phase = C_READ;
	pthread_mutex_unlock(&conns_lock);
	return rc;
}

/* ---- connections: MHD's callback ---- */

static void conn_opened(const struct mcp_http *h, struct MHD_Connection *mc, void **ctx)
{
	const union MHD_ConnectionInfo *fd = MHD_get_connection_info(mc, MHD_CONNECTION_INFO_CONNECTION_FD);
	struct conn *c = calloc(1, sizeof *c);

	if (c == NULL || fd == NULL || (c->pending = json_array()) == NULL) {
		/* No state to serve it with: the handler refuses a connection without one (MHD_NO). */
		free(c);
		return;
	}
	c->sink = (struct mcp_sink){ conn_send, conn_done };
	c->h = h;
	c->mc = mc;
	c->fd = fd->connect_fd;
	c->refs = 1;
	c->deadline_ms = clock_mono_ms() + READ_DEADLINE_MS;
	pthread_mutex_init(&c->lock, NULL);
	pthread_cond_init(&c->changed, NULL);
	pthread_mutex_lock(&conns_lock);
	c->over = conns >= MAX_CONNS;
	conns++;
	c->next = conns_list;
	conns_list = c;
	pthread_mutex_unlock(&conns_lock);
	http_budget_enter(&unauth, c, c->fd);
	*ctx = c;
}

/* Before MHD closes the descriptor: out of the budget and the watchdog's list, so neither ever
 * shuts down a reused descriptor; a request still running is cancelled (the client is gone). */
static void conn_closed(struct conn *c)
{
	struct conn **p;
	int running;

	http_budget_leave(&unauth, c);
	pthread_mutex_lock(&conns_lock);
	for (p = &conns_list; *p != NULL && *p != c; p = &(*p)->next)
		;
	if (*p != NULL)
		*p = c->next;
	conns--;
	pthread_mutex_unlock(&conns_lock);
	pthread_mutex_lock(&c->lock);
	running = c->refs > 1 && !c->done && !c->cancelled;
	c->cancelled = 1;
	pthread_mutex_unlock(&c->lock);
	if (running) {
		sb_info("mcp: http: the client closed its connection: cancelling its request");
		mcp_proto_cancel_sink(&c->sink);
	}
	conn_unref(c);
}

static void conn_notify(void *cls, struct MHD_Connection *mc, void **ctx, enum MHD_ConnectionNotificationCode toe)
{
	if (toe == MHD_CONNECTION_NOTIFY_STARTED)
		conn_opened(cls, mc, ctx);
	else if (*ctx != NULL)
		conn_closed(*ctx);
}

/* ---- the checks ---- */

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

/* The headers read here: each at most once (a duplicate could say two things). */
static const char *const once[] = { "authorization", "origin", "content-type", "accept", "mcp-protocol-version",
				    "mcp-method", "mcp-name", "transfer-encoding", "expect", "content-length" };
#define ONCE (sizeof once / sizeof once[0])

static enum MHD_Result count_header(void *cls, enum MHD_ValueKind kind, const char *key, const char *value)
{
	unsigned *seen = cls;

	(void)kind;
	(void)value;
	for (size_t i = 0; i < ONCE; i++)
		if (strcasecmp(key, once[i]) == 0)
			seen[i]++;
	return MHD_YES;
}

static int headers_once(struct MHD_Connection *mc)
{
	unsigned seen[ONCE] = { 0 };

	MHD_get_connection_values(mc, MHD_HEADER_KIND, count_header, seen);
	for (size_t i = 0; i < ONCE; i++)
		if (seen[i] > 1)
			return 0;
	return 1;
}

static const char *header(struct MHD_Connection *mc, const char *name)
{
	return MHD_lookup_connection_value(mc, MHD_HEADER_KIND, name);
}

/* ---- answers ---- */

/* A whole answer: status, one extra header or none, a JSON body (consumed) or none. */
static enum MHD_Result reply(struct MHD_Connection *mc, unsigned status, const char *name, const char *value,
			     json_t *body)
{
	char *text = body ? json_dumps(body, JSON_COMPACT) : NULL;
	struct MHD_Response *r;
	enum MHD_Result rc;

	json_decref(body);
	r = MHD_create_response_from_buffer(text ? strlen(text) : 0, text ? text : "",
					    text ? MHD_RESPMEM_MUST_FREE : MHD_RESPMEM_PERSISTENT);
	if (r == NULL) {
		free(text);
		return MHD_NO;
	}
	if (text != NULL)
		MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, "application/json");
	MHD_add_response_header(r, MHD_HTTP_HEADER_CACHE_CONTROL, "no-store");
	MHD_add_response_header(r, MHD_HTTP_HEADER_CONNECTION, "close");
	if (name != NULL)
		MHD_add_response_header(r, name, value);
	rc = MHD_queue_response(mc, status, r);
	MHD_destroy_response(r);
	return rc;
}

/* A refusal while the request is read: the answer becomes ours first (unless the watchdog's 408
 * went out already: then MHD closes). c is NULL for a connection MHD could not give state to. */
static enum MHD_Result refuse(struct conn *c, struct MHD_Connection *mc, unsigned status, const char *name,
			      const char *value, int code, const char *msg)
{
	if (c != NULL && conn_read_done(c) < 0)
		return MHD_NO;
	return reply(mc, status, name, value, mcp_error_msg(NULL, code, NULL, "%s", msg));
}

/* The status of a request's final answer (transports "Protocol Version Header", basic/index). */
static unsigned answer_status(json_t *msg, int modern)
{
	json_int_t code = json_integer_value(json_object_get(json_object_get(msg, "error"), "code"));

	if (json_object_get(msg, "error") == NULL)
		return MHD_HTTP_OK;
	if (code == RPC_PARSE || code == RPC_INVALID_REQUEST)
		return MHD_HTTP_BAD_REQUEST;
	if (modern && code == RPC_NO_METHOD)
		return MHD_HTTP_NOT_FOUND;
	if (modern && (code == RPC_INVALID_PARAMS || code == RPC_HEADER_MISMATCH || code == RPC_MISSING_CAPABILITY ||
		       code == RPC_UNSUPPORTED_VERSION))
		return MHD_HTTP_BAD_REQUEST;
	return MHD_HTTP_OK;
}

/* The head, checked on the handler's first call, before any of the body is read: a refusal is
 * queued at once (MHD then sends no "100 Continue" and reads no body); else the body's buffer is
 * made and MHD answers "Expect: 100-continue" (curl waits for it over 1 KiB). */
static enum MHD_Result conn_check(struct conn *c, struct MHD_Connection *mc, const char *url, const char *method)
{
	const char *auth = header(mc, MHD_HTTP_HEADER_AUTHORIZATION), *ctype = header(mc, MHD_HTTP_HEADER_CONTENT_TYPE);
	const char *clen = header(mc, MHD_HTTP_HEADER_CONTENT_LENGTH);
	long long n;
	char *end = NULL;

	c->checked = 1;
	if (c->over)
		return refuse(c, mc, MHD_HTTP_SERVICE_UNAVAILABLE, MHD_HTTP_HEADER_RETRY_AFTER, "1", RPC_INTERNAL,
			      "too many connections");
	if (!headers_once(mc))
		return refuse(c, mc, MHD_HTTP_BAD_REQUEST, NULL, NULL, RPC_INVALID_REQUEST, "malformed HTTP request");
	if (strcmp(url, "/mcp") != 0 && strcmp(url, "/") != 0)
		return refuse(c, mc, MHD_HTTP_NOT_FOUND, NULL, NULL, RPC_INVALID_REQUEST, "the MCP endpoint is /mcp");
	if (!origin_ok(header(mc, "Origin")))
		return refuse(c, mc, MHD_HTTP_FORBIDDEN, NULL, NULL, RPC_INVALID_REQUEST,
			      "Origin is not a page of this machine");
	if (!token_ok(c->h, auth))
		return refuse(c, mc, MHD_HTTP_UNAUTHORIZED, MHD_HTTP_HEADER_WWW_AUTHENTICATE,
			      auth ? "Bearer error=\"invalid_token\"" : "Bearer", RPC_INVALID_REQUEST,
			      "a bearer token is required (sandbox-manager mcp --token-file)");
	http_budget_leave(&unauth, c); /* from here on it holds one of the MAX_CONNS, as the token's holder */
	if (strcmp(method, "POST") != 0)
		return refuse(c, mc, MHD_HTTP_METHOD_NOT_ALLOWED, MHD_HTTP_HEADER_ALLOW, "POST", RPC_INVALID_REQUEST,
			      "only POST: no sessions, no GET stream (2026-07-28)");
	if (ctype == NULL || strncasecmp(ctype, "application/json", 16) != 0 ||
	    (ctype[16] != '\0' && ctype[16] != ';' && ctype[16] != ' '))
		return refuse(c, mc, MHD_HTTP_UNSUPPORTED_MEDIA_TYPE, NULL, NULL, RPC_INVALID_REQUEST,
			      "Content-Type must be application/json");
	errno = 0;
	n = clen != NULL ? strtoll(clen, &end, 10) : -1;
	/* chunked included: MHD would take it, the transport does not */
	if (header(mc, MHD_HTTP_HEADER_TRANSFER_ENCODING) != NULL || clen == NULL || clen[0] < '0' || clen[0] > '9' ||
	    *end != '\0' || errno != 0)
		return refuse(c, mc, MHD_HTTP_LENGTH_REQUIRED, NULL, NULL, RPC_INVALID_REQUEST,
			      "a Content-Length body is required");
	if (n > (long long)BODY_CAP)
		return refuse(c, mc, MHD_HTTP_CONTENT_TOO_LARGE, NULL, NULL, RPC_INVALID_REQUEST,
			      "the message is over 4194304 bytes");
	c->body_len = (size_t)n;
	if ((c->body = malloc(c->body_len + 1)) == NULL)
		return refuse(c, mc, MHD_HTTP_SERVICE_UNAVAILABLE, NULL, NULL, RPC_INTERNAL, "out of memory");
	return MHD_YES;
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
	conn_unref(c); /* the protocol's reference */
}

/* Has the client closed its end? (it sends nothing more after its one request; MHD does not read
 * while the handler or the stream's reader runs, so the peek sees what the client did) */
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

/* Wait (c->lock held) up to ms for a message or the end; a client gone meanwhile cancels the
 * request. 0, or -1 once cancelled. */
static int conn_wait(struct conn *c, int64_t ms)
{
	int64_t until = clock_mono_ms() + ms;

	while (json_array_size(c->pending) == 0 && !c->done && !c->cancelled && clock_mono_ms() < until) {
		struct timespec t;

		clock_gettime(CLOCK_REALTIME, &t);
		t.tv_nsec += 250 * 1000000L;
		if (t.tv_nsec >= 1000000000L)
			t.tv_sec++, t.tv_nsec -= 1000000000L;
		pthread_cond_timedwait(&c->changed, &c->lock, &t);
		if (!c->cancelled && !c->done && client_gone(c->fd)) {
			c->cancelled = 1;
			pthread_mutex_unlock(&c->lock);
			sb_info("mcp: http: the client closed its connection: cancelling its request");
			mcp_proto_cancel_sink(&c->sink);
			pthread_mutex_lock(&c->lock);
		}
	}
	return c->cancelled ? -1 : 0;
}

/* The next message (c->lock held), NULL when none is pending. */
static json_t *conn_next(struct conn *c)
{
	json_t *m = json_incref(json_array_get(c->pending, 0));

	if (m != NULL)
		json_array_remove(c->pending, 0);
	return m;
}

/* ---- the SSE stream ---- */

/* The next event into c->out (NULL when out of memory); no message: a comment line, for a quiet call. */
static void sse_event(struct conn *c, json_t *msg)
{
	char *text = msg ? json_dumps(msg, JSON_COMPACT) : NULL;

	free(c->out);
	c->out = NULL;
	c->out_off = 0;
	if (msg == NULL || text == NULL || asprintf(&c->out, "event: message\ndata: %s\n\n", text) < 0)
		c->out = strdup(":\n\n");
	c->out_len = c->out ? strlen(c->out) : 0;
	free(text);
}

/* MHD asks for more of the stream (on the connection's thread: blocking here holds only it). */
static ssize_t sse_read(void *cls, uint64_t pos, char *buf, size_t max)
{
	struct conn *c = cls;
	size_t n;

	(void)pos;
	if (c->out_off == c->out_len) {
		json_t *m;

		if (c->sse_final)
			return MHD_CONTENT_READER_END_OF_STREAM;
		pthread_mutex_lock(&c->lock);
		if (conn_wait(c, SSE_QUIET_MS) < 0) {
			pthread_mutex_unlock(&c->lock);
			return MHD_CONTENT_READER_END_WITH_ERROR; /* the spec: nothing more for a cancelled request */
		}
		m = conn_next(c);
		if (m == NULL && c->done) {
			pthread_mutex_unlock(&c->lock);
			return MHD_CONTENT_READER_END_OF_STREAM; /* ended without a response */
		}
		pthread_mutex_unlock(&c->lock);
		c->sse_final = m != NULL && json_object_get(m, "method") == NULL;
		sse_event(c, m);
		json_decref(m);
		if (c->out == NULL)
			return MHD_CONTENT_READER_END_WITH_ERROR;
	}
	n = c->out_len - c->out_off < max ? c->out_len - c->out_off : max;
	memcpy(buf, c->out + c->out_off, n);
	c->out_off += n;
	return (ssize_t)n;
}

static enum MHD_Result sse_start(struct conn *c, struct MHD_Connection *mc, json_t *first)
{
	struct MHD_Response *r;
	enum MHD_Result rc;

	sse_event(c, first);
	json_decref(first);
	r = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 4096, sse_read, c, NULL);
	if (r == NULL || c->out == NULL)
		return MHD_NO;
	MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, "text/event-stream");
	MHD_add_response_header(r, MHD_HTTP_HEADER_CACHE_CONTROL, "no-store");
	MHD_add_response_header(r, "X-Accel-Buffering", "no");
	MHD_add_response_header(r, MHD_HTTP_HEADER_CONNECTION, "close");
	rc = MHD_queue_response(mc, MHD_HTTP_OK, r);
	MHD_destroy_response(r);
	return rc;
}

/* ---- one request ---- */

/* Wait for the protocol's answer: notifications start an SSE stream when the client takes one
 * (else they are dropped); the response is the body. A client that left cancels (no answer). */
static enum MHD_Result conn_answer(struct conn *c, struct MHD_Connection *mc)
{
	json_t *m = NULL;

	pthread_mutex_lock(&c->lock);
	for (;;) {
		if (conn_wait(c, INT64_MAX / 2) < 0)
			break;
		m = conn_next(c);
		if (m == NULL && c->done)
			break;
		if (m != NULL && json_object_get(m, "method") == NULL)
			break; /* the response */
		if (m != NULL && c->sse_ok) {
			pthread_mutex_unlock(&c->lock);
			return sse_start(c, mc, m);
		}
		json_decref(m); /* a notification the client does not take */
		m = NULL;
	}
	pthread_mutex_unlock(&c->lock);
	if (c->cancelled || m == NULL) {
		json_decref(m);
		return MHD_NO; /* the spec: nothing more for a cancelled request; MHD closes */
	}
	return reply(mc, answer_status(m, c->modern), NULL, NULL, m);
}

/* The whole body read: hand it to the protocol and answer. */
static enum MHD_Result conn_handle(struct conn *c, struct MHD_Connection *mc)
{
	const char *accept = header(mc, MHD_HTTP_HEADER_ACCEPT);
	struct mcp_origin o = { .sink = &c->sink, .http = 1, .hdr_version = header(mc, "MCP-Protocol-Version"),
				.hdr_method = header(mc, "Mcp-Method"), .hdr_name = header(mc, "Mcp-Name"),
				.legacy_proto = -1 };
	enum mcp_kind kind;

	if (conn_read_done(c) < 0)
		return MHD_NO; /* the watchdog answered 408 */
	/* Writes from here on are bounded by MHD's idle timeout: a client that stops reading. */
	MHD_set_connection_option(mc, MHD_CONNECTION_OPTION_TIMEOUT, (unsigned)SEND_IDLE_SECONDS);
	c->sse_ok = accept != NULL && strstr(accept, "text/event-stream") != NULL;
	pthread_mutex_lock(&c->lock);
	c->refs++; /* the protocol's, given back by done (requests only: mcp_proto.h) */
	pthread_mutex_unlock(&c->lock);
	kind = mcp_proto_message(c->body, c->body_len, &o);
	c->modern = o.modern;
	if (kind != MCP_REQUEST)
		conn_unref(c);
	if (kind == MCP_REQUEST)
		return conn_answer(c, mc);
	if (kind == MCP_BAD)
		return reply(mc, MHD_HTTP_BAD_REQUEST, NULL, NULL, json_incref(json_array_get(c->pending, 0)));
	return reply(mc, MHD_HTTP_ACCEPTED, NULL, NULL, NULL);
}

/* MHD's handler: first with the head, then with each piece of the body, then once with none. */
static enum MHD_Result mcp_http_handler(void *cls, struct MHD_Connection *mc, const char *url, const char *method,
					const char *version, const char *upload, size_t *upload_len, void **req_cls)
{
	const union MHD_ConnectionInfo *ci = MHD_get_connection_info(mc, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
	struct conn *c = ci != NULL ? ci->socket_context : NULL;
	size_t n;

	(void)cls;
	(void)version;
	(void)req_cls;
	if (c == NULL)
		return refuse(NULL, mc, MHD_HTTP_SERVICE_UNAVAILABLE, MHD_HTTP_HEADER_RETRY_AFTER, "1", RPC_INTERNAL,
			      "out of memory");
	if (!c->checked)
		return conn_check(c, mc, url, method);
	if (*upload_len == 0)
		return conn_handle(c, mc);
	/* MHD passes no more than Content-Length; the bound is kept here too. */
	n = *upload_len < c->body_len - c->body_have ? *upload_len : c->body_len - c->body_have;
	memcpy(c->body + c->body_have, upload, n);
	c->body_have += n;
	*upload_len = 0;
	return MHD_YES;
}

/* The listener's daemon (see the file's head for the bounds). MHD answers what it refuses itself
 * with a status of its own: a malformed head 400 (an HTTP/1.1 one without Host too, which the
 * hand-written parser took), a head over HEAD_MEMORY 431 (or a reset, as the rest is never read),
 * HTTP/2's preface 505. Bytes it cannot read as a request line at all it waits on without an
 * answer (0.9.75): the watchdog's 408 at READ_DEADLINE_MS is theirs (measured by hand). Past MAX_CONNS + UNAUTH_MAX at once (only when a
 * flood outruns the budget's shedding) MHD closes a new connection without an answer; from
 * MAX_CONNS to there, the handler answers 503. */
int mcp_http_start(struct mcp_http *h, struct sb_err *err)
{
	if (sb_thread_detached(watchdog_main, NULL, err) < 0)
		return -1;
	h->mhd = MHD_start_daemon(MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_THREAD_PER_CONNECTION | MHD_USE_POLL |
				  MHD_USE_ITC | MHD_USE_ERROR_LOG, 0, NULL, NULL, mcp_http_handler, h,
				  MHD_OPTION_LISTEN_SOCKET, h->fd,
				  MHD_OPTION_CONNECTION_LIMIT, (unsigned)(MAX_CONNS + UNAUTH_MAX),
				  MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)READ_IDLE_SECONDS,
				  MHD_OPTION_CONNECTION_MEMORY_LIMIT, (size_t)HEAD_MEMORY,
				  MHD_OPTION_NOTIFY_CONNECTION, conn_notify, h,
				  MHD_OPTION_EXTERNAL_LOGGER, http_mhd_log, "mcp", MHD_OPTION_END);
	if (h->mhd == NULL)
		return sb_fail(err, EIO, "mcp: http: the HTTP server (libmicrohttpd) did not start");
	return 0;
}

/* Stop taking connections (the listening socket is closed); those open go on. */
void mcp_http_quiesce(struct mcp_http *h)
{
	int fd = MHD_quiesce_daemon(h->mhd);

	if (fd >= 0)
		close(fd);
	h->fd = -1;
}
