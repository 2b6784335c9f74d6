/* A Kubernetes or HTTP API grant served at the edge (egress_edge.h). One libmicrohttpd daemon per grant of a
 * sandbox, on the listener the manager made inside the sandbox's network namespace; one thread per
 * connection, so that an answer is pumped from the API server to the sandbox by the thread that
 * serves it: libcurl's multi interface driven from the response's content reader, the transfer
 * paused while the sandbox has not taken what came (a slow reader holds EDGE_BUF_BYTES, never
 * more), and ended when the sandbox goes. The request's attributes are judged before anything
 * leaves (k8s_request_decide; for an http: grant its method, http_decide); the sandbox's own
 * Authorization, cookies and impersonation headers never pass: only the headers named in
 * forwarded_headers do, and the grant's token (or http: header) is added by libcurl itself. */
#include "egress_edge.h"

#include "curl_handle.h"
#include "k8s_request.h"
#include "log.h"

#include <errno.h>
#include <microhttpd.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <jansson.h>

struct egress_edge {
	struct MHD_Daemon *mhd;
	atomic_bool stopping;
	char session[64];
	char grant[128];
	char access[8];
	char server[512];
	char ca_file[4096];
	char *token;
	char *header;             /* an http: grant's "Name: value"; NULL for a Kubernetes grant */
	struct egress_log *log;
	void (*note)(void *ctx, const char *key, const struct egress_request *req);
	void *note_ctx;
	atomic_ulong seq;         /* the requests' keys for note */
};

/* The answer on its way: what the API server sent that the sandbox has not taken yet. */
struct pump {
	CURLM *multi;
	CURL *easy;
	struct curl_slist *headers;
	char buf[EDGE_BUF_BYTES];
	size_t len, off;
	bool paused;     /* the write callback asked libcurl to hold the rest */
	bool head_done;  /* the status and headers are in */
	bool done;
	int client_fd;     /* the sandbox's connection, watched for its end while the answer is awaited; -1: not */
	bool client_gone;  /* the sandbox closed it: the transfer ends, the API server is not kept waiting */
	CURLcode result;
	long status;
	char content_type[256];
	char warning[1024];
	char audit_id[128];
	uint64_t bytes_down;
};

/* One request, from its head to its completion (MHD's con_cls). */
struct edge_req {
	struct egress_edge *edge;
	struct k8s_request k8s;
	bool parsed;        /* k8s holds the request's attributes */
	char method[K8S_REQ_METHOD_MAX]; /* an http: grant's request: its method ("" over the bound) */
	int refusal;        /* 0, or the status the sandbox gets without anything leaving */
	char message[1024]; /* the refusal's words */
	char target[K8S_REQ_PATH_MAX + K8S_REQ_QUERY_MAX + 2]; /* path?query as sent */
	char *body;
	size_t body_len;
	struct pump *pump;
	int status;         /* what the sandbox got */
	int64_t t0;
	char key[160];      /* "" unless noted (a mutating request that left): its key for note */
};

static int64_t now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* ---- the answer the edge gives itself ---- */

/* A Kubernetes Status (kubectl prints its message as "Error from server (Forbidden): ..."). */
static enum MHD_Result status_queue(struct MHD_Connection *c, struct edge_req *r, int code, const char *reason,
				    const char *message)
{
	json_t *doc = json_pack("{s:s, s:s, s:{}, s:s, s:s, s:s, s:i}", "kind", "Status", "apiVersion", "v1", "metadata",
				"status", "Failure", "message", message, "reason", reason, "code", code);
	char *text = doc != NULL ? json_dumps(doc, JSON_COMPACT) : NULL;
	struct MHD_Response *resp;
	enum MHD_Result rc;

	json_decref(doc);
	resp = MHD_create_response_from_buffer(text ? strlen(text) : 0, text ? text : (char *)"", MHD_RESPMEM_MUST_COPY);
	free(text);
	if (resp == NULL)
		return MHD_NO;
	MHD_add_response_header(resp, "Content-Type", "application/json");
	rc = MHD_queue_response(c, (unsigned)code, resp);
	MHD_destroy_response(resp);
	r->status = code;
	return rc;
}

/* ---- the request's head ---- */

/* MHD's unescape callback: keep every byte as sent. The path and the query are judged as the API
 * server reads them (k8s_request_parse decodes), and forwarded as they came. */
static size_t keep_raw(void *cls, struct MHD_Connection *c, char *s)
{
	(void)cls;
	(void)c;
	return strlen(s);
}

struct query_build {
	char *out;
	size_t len, cap;
	bool over;
};

/* One query argument, back in "k=v" form, in the order sent (MHD keeps it). */
static enum MHD_Result query_arg(void *cls, enum MHD_ValueKind kind, const char *key, size_t key_size,
				 const char *value, size_t value_size)
{
	struct query_build *q = cls;
	size_t need = (q->len ? 1 : 0) + key_size + (value ? 1 + value_size : 0);

	(void)kind;
	if (q->len + need >= q->cap) {
		q->over = true;
		return MHD_NO;
	}
	if (q->len)
		q->out[q->len++] = '&';
	memcpy(q->out + q->len, key, key_size);
	q->len += key_size;
	if (value != NULL) {
		q->out[q->len++] = '=';
		memcpy(q->out + q->len, value, value_size);
		q->len += value_size;
	}
	q->out[q->len] = '\0';
	return MHD_YES;
}

/* The methods a `read` grant to an HTTP API passes: those RFC 9110 defines as safe (TRACE aside,
 * which echoes the request, the edge's added header included). */
static bool http_safe(const char *method)
{
	return strcmp(method, "GET") == 0 || strcmp(method, "HEAD") == 0 || strcmp(method, "OPTIONS") == 0;
}

/* An http: grant's request, judged by its method alone: `read` passes the safe ones, `write` all. */
static void http_judge(struct edge_req *r, const char *method)
{
	const struct egress_edge *e = r->edge;

	if (strlen(method) >= sizeof r->method || strspn(method, "ABCDEFGHIJKLMNOPQRSTUVWXYZ") != strlen(method)) {
		r->refusal = MHD_HTTP_BAD_REQUEST;
		snprintf(r->message, sizeof r->message, "infra-sandbox edge: grant %s: a method of up to %zu capital "
			 "letters only", e->grant, sizeof r->method - 1);
		return;
	}
	snprintf(r->method, sizeof r->method, "%s", method);
	if (strcmp(e->access, "write") != 0 && !http_safe(method)) {
		r->refusal = MHD_HTTP_FORBIDDEN;
		snprintf(r->message, sizeof r->message, "infra-sandbox edge: refused by grant \"%s\" (%s): method %s; "
			 "a read grant passes GET, HEAD and OPTIONS only", e->grant, e->access, method);
	}
}

/* Judges the head: r->refusal set when nothing may leave. */
static void head_judge(struct edge_req *r, struct MHD_Connection *c, const char *url, const char *method)
{
	char query[K8S_REQ_QUERY_MAX + 1] = "";
	struct query_build q = { .out = query, .cap = sizeof query };
	struct sb_err err;
	size_t ulen = strlen(url);

	sb_err_clear(&err);
	MHD_get_connection_values_n(c, MHD_GET_ARGUMENT_KIND, query_arg, &q);
	if (q.over || ulen > K8S_REQ_PATH_MAX) {
		r->refusal = MHD_HTTP_URI_TOO_LONG;
		snprintf(r->message, sizeof r->message, "infra-sandbox edge: the request's path or query is over its bound");
		return;
	}
	snprintf(r->target, sizeof r->target, "%s%s%s", url, q.len ? "?" : "", query);
	if (r->edge->header != NULL) {
		http_judge(r, method);
		return;
	}
	if (k8s_request_parse(method, url, ulen, query, q.len, &r->k8s, &err) < 0) {
		r->refusal = MHD_HTTP_BAD_REQUEST;
		snprintf(r->message, sizeof r->message, "infra-sandbox edge: %.900s", err.msg); /* words: a cut is fine */
		return;
	}
	r->parsed = true;
	if (k8s_request_decide(r->edge->grant, r->edge->access, &r->k8s, &err) < 0) {
		r->refusal = MHD_HTTP_FORBIDDEN;
		snprintf(r->message, sizeof r->message, "infra-sandbox edge: %.900s", err.msg); /* words: a cut is fine */
		return;
	}
	/* A stream into a workload would need the connection handed over both ways: not carried. */
	if (MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_UPGRADE) != NULL) {
		r->refusal = MHD_HTTP_FORBIDDEN;
		snprintf(r->message, sizeof r->message, "infra-sandbox edge: grant %s: connection upgrades (exec, attach, "
			 "port-forward) are not carried through the edge", r->edge->grant);
	}
}

/* ---- the upstream transfer ---- */

static size_t pump_write(char *data, size_t size, size_t n, void *arg)
{
	struct pump *p = arg;
	size_t len = size * n;

	p->head_done = true;
	if (len > sizeof p->buf - p->len) {
		/* Held by libcurl until the sandbox takes what is here (pump_take). */
		p->paused = true;
		return CURL_WRITEFUNC_PAUSE;
	}
	memcpy(p->buf + p->len, data, len);
	p->len += len;
	return len;
}

/* "Name: value\r\n" into out when the line is that header. */
static void header_keep(const char *line, size_t len, const char *name, char *out, size_t cap)
{
	size_t nlen = strlen(name), v;

	if (len <= nlen + 1 || strncasecmp(line, name, nlen) != 0 || line[nlen] != ':')
		return;
	for (v = nlen + 1; v < len && line[v] == ' '; v++)
		;
	while (len > v && (line[len - 1] == '\r' || line[len - 1] == '\n'))
		len--;
	snprintf(out, cap, "%.*s", (int)(len - v), line + v);
}

static size_t pump_header(char *data, size_t size, size_t n, void *arg)
{
	struct pump *p = arg;
	size_t len = size * n;

	if (len >= 5 && strncmp(data, "HTTP/", 5) == 0) {
		/* A new status line: a 100 Continue's headers are not the answer's. */
		p->content_type[0] = p->warning[0] = p->audit_id[0] = '\0';
		return len;
	}
	header_keep(data, len, "Content-Type", p->content_type, sizeof p->content_type);
	header_keep(data, len, "Warning", p->warning, sizeof p->warning);
	header_keep(data, len, "Audit-Id", p->audit_id, sizeof p->audit_id);
	if ((len == 2 && data[0] == '\r') || (len == 1 && data[0] == '\n')) {
		curl_easy_getinfo(p->easy, CURLINFO_RESPONSE_CODE, &p->status);
		if (p->status >= 200)
			p->head_done = true;
	}
	return len;
}

/* The headers a request may carry upstream; everything else stays behind (the sandbox's
 * Authorization, Cookie, Impersonate-*, Proxy-*, hop-by-hop headers). */
static const char *const forwarded_headers[] = { "Accept", "Content-Type", "User-Agent", "Kubectl-Command",
						  "Kubectl-Session", NULL };

static struct curl_slist *headers_for(struct MHD_Connection *c)
{
	struct curl_slist *h = curl_slist_append(NULL, "Expect:"), *next;
	char line[1024];

	for (size_t i = 0; h != NULL && forwarded_headers[i] != NULL; i++) {
		const char *v = MHD_lookup_connection_value(c, MHD_HEADER_KIND, forwarded_headers[i]);

		if (v == NULL || snprintf(line, sizeof line, "%s: %s", forwarded_headers[i], v) >= (int)sizeof line)
			continue;
		next = curl_slist_append(h, line);
		if (next == NULL) {
			curl_slist_free_all(h);
			return NULL;
		}
		h = next;
	}
	return h;
}

static void pump_free(struct pump *p)
{
	if (p == NULL)
		return;
	if (p->multi != NULL && p->easy != NULL)
		curl_multi_remove_handle(p->multi, p->easy);
	if (p->easy != NULL)
		curl_easy_cleanup(p->easy);
	if (p->multi != NULL)
		curl_multi_cleanup(p->multi);
	curl_slist_free_all(p->headers);
	free(p);
}

static struct pump *pump_start(struct edge_req *r, struct MHD_Connection *c, const char *method)
{
	struct egress_edge *e = r->edge;
	struct pump *p = calloc(1, sizeof *p);
	const union MHD_ConnectionInfo *ci;
	char url[sizeof e->server + sizeof r->target];

	if (p == NULL || snprintf(url, sizeof url, "%s%s", e->server, r->target) >= (int)sizeof url ||
	    (p->easy = sb_curl_new()) == NULL || (p->multi = curl_multi_init()) == NULL ||
	    (p->headers = headers_for(c)) == NULL) {
		pump_free(p);
		return NULL;
	}
	ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
	p->client_fd = ci != NULL ? ci->connect_fd : -1;
	curl_easy_setopt(p->easy, CURLOPT_URL, url);
	curl_easy_setopt(p->easy, CURLOPT_CUSTOMREQUEST, method);
	curl_easy_setopt(p->easy, CURLOPT_PROTOCOLS_STR, "https");
	curl_easy_setopt(p->easy, CURLOPT_FOLLOWLOCATION, 0L);
	curl_easy_setopt(p->easy, CURLOPT_CONNECTTIMEOUT_MS, (long)EDGE_CONNECT_MS);
	curl_easy_setopt(p->easy, CURLOPT_SSL_VERIFYPEER, 1L);
	curl_easy_setopt(p->easy, CURLOPT_SSL_VERIFYHOST, 2L);
	if (e->ca_file[0] != '\0')
		curl_easy_setopt(p->easy, CURLOPT_CAINFO, e->ca_file);
	/* The grant's token, or an http: grant's header, on this request to its server only (never on
	 * a redirect: none is followed). */
	if (e->header != NULL) {
		struct curl_slist *h = curl_slist_append(p->headers, e->header);

		if (h == NULL) {
			pump_free(p);
			return NULL;
		}
		p->headers = h;
	} else {
		curl_easy_setopt(p->easy, CURLOPT_HTTPAUTH, CURLAUTH_BEARER);
		curl_easy_setopt(p->easy, CURLOPT_XOAUTH2_BEARER, e->token);
	}
	curl_easy_setopt(p->easy, CURLOPT_HTTPHEADER, p->headers);
	if (strcmp(method, "HEAD") == 0)
		curl_easy_setopt(p->easy, CURLOPT_NOBODY, 1L);
	if (r->body_len > 0 || strcmp(method, "POST") == 0 || strcmp(method, "PUT") == 0 ||
	    strcmp(method, "PATCH") == 0) {
		curl_easy_setopt(p->easy, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)r->body_len);
		curl_easy_setopt(p->easy, CURLOPT_POSTFIELDS, r->body ? r->body : "");
		curl_easy_setopt(p->easy, CURLOPT_CUSTOMREQUEST, method);
	}
	curl_easy_setopt(p->easy, CURLOPT_WRITEFUNCTION, pump_write);
	curl_easy_setopt(p->easy, CURLOPT_WRITEDATA, p);
	curl_easy_setopt(p->easy, CURLOPT_HEADERFUNCTION, pump_header);
	curl_easy_setopt(p->easy, CURLOPT_HEADERDATA, p);
	if (curl_multi_add_handle(p->multi, p->easy) != CURLM_OK) {
		pump_free(p);
		return NULL;
	}
	return p;
}

/* The sandbox's connection became readable while its answer is awaited: its end (EOF or a reset),
 * or bytes of a next request, which MHD reads after this answer; then it is watched no more, lest
 * the wait spin on them. Only peeked: the bytes stay for MHD. */
static void client_check(struct pump *p)
{
	char b;
	ssize_t n = recv(p->client_fd, &b, 1, MSG_PEEK | MSG_DONTWAIT);

	if (n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR))
		p->client_gone = true;
	else if (n > 0)
		p->client_fd = -1;
}

/* One step of the transfer: what is ready is done, then up to a second's wait for more or for
 * the sandbox's end (a watch cut by its client would otherwise hold the API server's stream and
 * this connection until the server ends it, and its record would wait as long). */
static void pump_step(struct pump *p)
{
	struct curl_waitfd w = { .fd = p->client_fd, .events = CURL_WAIT_POLLIN };
	int running = 0, left;
	CURLMsg *msg;

	curl_multi_perform(p->multi, &running);
	while ((msg = curl_multi_info_read(p->multi, &left)) != NULL)
		if (msg->msg == CURLMSG_DONE) {
			p->done = true;
			p->result = msg->data.result;
			curl_easy_getinfo(p->easy, CURLINFO_RESPONSE_CODE, &p->status);
		}
	if (p->done || (p->paused && p->off < p->len))
		return;
	curl_multi_poll(p->multi, p->client_fd >= 0 ? &w : NULL, p->client_fd >= 0 ? 1 : 0, 1000, NULL);
	if (p->client_fd >= 0 && (w.revents & CURL_WAIT_POLLIN))
		client_check(p);
}

/* MHD's content reader: what came, else a step of the transfer, until its end. */
static ssize_t pump_take(void *cls, uint64_t pos, char *buf, size_t max)
{
	struct edge_req *r = cls;
	struct pump *p = r->pump;

	(void)pos;
	for (;;) {
		if (p->off < p->len) {
			size_t n = p->len - p->off < max ? p->len - p->off : max;

			memcpy(buf, p->buf + p->off, n);
			p->off += n;
			p->bytes_down += n;
			if (p->off == p->len) {
				p->off = p->len = 0;
				if (p->paused) {
					p->paused = false;
					curl_easy_pause(p->easy, CURLPAUSE_CONT);
				}
			}
			return (ssize_t)n;
		}
		if (p->done)
			return p->result == CURLE_OK ? MHD_CONTENT_READER_END_OF_STREAM :
			       MHD_CONTENT_READER_END_WITH_ERROR;
		if (atomic_load(&r->edge->stopping) || p->client_gone)
			return MHD_CONTENT_READER_END_WITH_ERROR;
		pump_step(p);
	}
}

/* The request as the egress log and the notes take it. */
static struct egress_request edge_record(const struct edge_req *r)
{
	return (struct egress_request){
		.method = r->parsed ? r->k8s.method : r->method[0] != '\0' ? r->method : "?",
		.host = r->edge->server,
		.path = r->target,
		.k8s = r->parsed ? &r->k8s : NULL,
		.refused = r->refusal != 0,
		/* a transfer cut before its end: the sandbox saw a status, the API server's whole answer not */
		.status = r->status,
		.bytes_up = r->body_len,
		.bytes_down = r->pump ? r->pump->bytes_down : 0,
		.duration_ms = (uint64_t)(now_ms() - r->t0),
		.begun = true,
	};
}

/* The request leaves: its answer's head awaited, then its body streamed by pump_take. */
static enum MHD_Result forward(struct edge_req *r, struct MHD_Connection *c, const char *method)
{
	struct MHD_Response *resp;
	struct pump *p;
	enum MHD_Result rc;
	char msg[1024];
	struct egress_request rec;

	/* On record before it leaves: if the manager dies now, the exec's record says it was sent. */
	if (r->edge->note != NULL &&
	    (r->edge->header != NULL ? !http_safe(r->method) : k8s_request_mutating(&r->k8s))) {
		snprintf(r->key, sizeof r->key, "%.127s#%lu", r->edge->grant, atomic_fetch_add(&r->edge->seq, 1) + 1);
		rec = edge_record(r);
		r->edge->note(r->edge->note_ctx, r->key, &rec);
	}

	p = r->pump = pump_start(r, c, method);
	if (p == NULL)
		return status_queue(c, r, MHD_HTTP_INTERNAL_SERVER_ERROR, "InternalError",
				    "infra-sandbox edge: out of memory starting the request");
	while (!p->head_done && !p->done && !p->client_gone && !atomic_load(&r->edge->stopping))
		pump_step(p);
	if (p->client_gone)
		return MHD_NO; /* nobody to answer: the connection is closed, the request logged unanswered */
	if (!p->head_done || p->status < 200) {
		snprintf(msg, sizeof msg, "infra-sandbox edge: grant %.128s: the API server %.512s did not answer: %.200s",
			 r->edge->grant, r->edge->server, curl_easy_strerror(p->done ? p->result : CURLE_ABORTED_BY_CALLBACK));
		return status_queue(c, r, MHD_HTTP_BAD_GATEWAY, "ServiceUnavailable", msg);
	}
	resp = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 16384, pump_take, r, NULL);
	if (resp == NULL)
		return MHD_NO;
	if (p->content_type[0])
		MHD_add_response_header(resp, "Content-Type", p->content_type);
	if (p->warning[0])
		MHD_add_response_header(resp, "Warning", p->warning);
	if (p->audit_id[0])
		MHD_add_response_header(resp, "Audit-Id", p->audit_id);
	r->status = (int)p->status;
	rc = MHD_queue_response(c, (unsigned)p->status, resp);
	MHD_destroy_response(resp);
	return rc;
}

/* ---- the daemon ---- */

static enum MHD_Result on_request(void *cls, struct MHD_Connection *c, const char *url, const char *method,
				  const char *version, const char *upload, size_t *upload_size, void **con_cls)
{
	struct edge_req *r = *con_cls;

	(void)version;
	if (r == NULL) {
		r = calloc(1, sizeof *r);
		if (r == NULL)
			return MHD_NO;
		r->edge = cls;
		r->t0 = now_ms();
		*con_cls = r;
		if (r->edge->log != NULL)
			egress_log_begin(r->edge->log);
		head_judge(r, c, url, method);
		return MHD_YES;
	}
	if (*upload_size != 0) {
		/* Bounded before it is kept: a body over the API server's own limit is refused whole. */
		if (r->refusal == 0 && r->body_len + *upload_size > EDGE_BODY_MAX) {
			r->refusal = 413;
			snprintf(r->message, sizeof r->message, "infra-sandbox edge: a request body over %d bytes",
				 EDGE_BODY_MAX);
		}
		if (r->refusal == 0) {
			char *grown = realloc(r->body, r->body_len + *upload_size + 1);

			if (grown == NULL)
				return MHD_NO;
			r->body = grown;
			memcpy(r->body + r->body_len, upload, *upload_size);
			r->body_len += *upload_size;
		}
		*upload_size = 0;
		return MHD_YES;
	}
	if (r->refusal != 0)
		return status_queue(c, r, r->refusal, r->refusal == MHD_HTTP_FORBIDDEN ? "Forbidden" : "BadRequest",
				    r->message);
	return forward(r, c, method);
}

/* Every request ends here, answered or cut: its line in the sandbox's egress log. */
static void on_completed(void *cls, struct MHD_Connection *c, void **con_cls, enum MHD_RequestTerminationCode toe)
{
	struct egress_edge *e = cls;
	struct edge_req *r = *con_cls;
	struct egress_request rec;

	(void)c;
	(void)toe;
	if (r == NULL)
		return;
	rec = edge_record(r);
	if (r->key[0] != '\0')
		e->note(e->note_ctx, r->key, &rec);
	if (e->log != NULL)
		egress_log_append(e->log, &rec);
	pump_free(r->pump);
	free(r->body);
	free(r);
	*con_cls = NULL;
}

int egress_edge_start(const struct egress_edge_spec *spec, struct egress_edge **out, struct sb_err *err)
{
	struct egress_edge *e = calloc(1, sizeof *e);

	*out = NULL;
	if (e == NULL || (spec->token != NULL && (e->token = strdup(spec->token)) == NULL) ||
	    (spec->header != NULL && (e->header = strdup(spec->header)) == NULL)) {
		egress_edge_stop(&e);
		close(spec->listen_fd);
		return sb_fail(err, ENOMEM, "grant %s: its edge", spec->grant);
	}
	snprintf(e->session, sizeof e->session, "%s", spec->session);
	snprintf(e->access, sizeof e->access, "%s", spec->access);
	if (snprintf(e->grant, sizeof e->grant, "%s", spec->grant) >= (int)sizeof e->grant ||
	    snprintf(e->server, sizeof e->server, "%s", spec->server) >= (int)sizeof e->server ||
	    snprintf(e->ca_file, sizeof e->ca_file, "%s", spec->ca_file) >= (int)sizeof e->ca_file) {
		egress_edge_stop(&e);
		close(spec->listen_fd);
		return sb_fail(err, ENAMETOOLONG, "grant %s: its server or CA file is too long for the edge", spec->grant);
	}
	e->log = spec->log;
	e->note = spec->note;
	e->note_ctx = spec->note_ctx;
	e->mhd = MHD_start_daemon(MHD_USE_THREAD_PER_CONNECTION | MHD_USE_INTERNAL_POLLING_THREAD, 0, NULL, NULL,
				  on_request, e, MHD_OPTION_LISTEN_SOCKET, spec->listen_fd, MHD_OPTION_CONNECTION_LIMIT,
				  (unsigned)EDGE_CONN_MAX, MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)EDGE_IDLE_S,
				  MHD_OPTION_NOTIFY_COMPLETED, on_completed, e, MHD_OPTION_UNESCAPE_CALLBACK, keep_raw,
				  NULL, MHD_OPTION_END);
	if (e->mhd == NULL) {
		close(spec->listen_fd);
		egress_edge_stop(&e);
		return sb_fail(err, EIO, "grant %s: serving its edge (libmicrohttpd)", spec->grant);
	}
	*out = e;
	return 0;
}

void egress_edge_stop(struct egress_edge **ep)
{
	struct egress_edge *e = *ep;

	if (e == NULL)
		return;
	/* Every connection's pump sees it within its second's wait, and ends its transfer. */
	atomic_store(&e->stopping, true);
	if (e->mhd != NULL)
		MHD_stop_daemon(e->mhd);
	if (e->token != NULL) {
		explicit_bzero(e->token, strlen(e->token));
		free(e->token);
	}
	if (e->header != NULL) {
		explicit_bzero(e->header, strlen(e->header));
		free(e->header);
	}
	free(e);
	*ep = NULL;
}
