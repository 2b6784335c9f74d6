/* The control connections of the daemon (daemon.c accepts them): one thread per connection, each
 * request dispatched to its op and answered; what a stalled client can hold is bounded. A
 * connection's peer must be this manager's own uid (or root): the socket's mode is the first fence,
 * SO_PEERCRED the second. */
#include "manager.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "clock.h"
#include "control.h"
#include "control_authz.h"
#include "control_tls.h"
#include "identity_ids.h"
#include "live_send.h"
#include "log.h"
#include "metrics.h"
#include "status.h"
#include "thread.h"

/* An exec; with "stream": true its output goes to the client as it comes (live_send.h), before the
 * answer, which then says "streamed": true so that the client does not print it twice. */
static json_t *exec_answer(struct manager *m, json_t *req, struct sb_stream *s)
{
	struct live_client lc;
	json_t *resp;

	if (!json_is_true(json_object_get(req, "stream")))
		return execpath_run(m, req, NULL);
	live_send_watch(&lc, s);
	resp = execpath_run(m, req, &lc.watch);
	if (live_send_join(&lc) && json_is_object(resp))
		json_object_set_new(resp, "streamed", json_true());
	return resp;
}

/* peer: the connection's uid (SO_PEERCRED), for the ops that record who asked; principal: a TLS
 * connection's (control_tls.h), whose every request is authorised first, NULL on the unix socket. */
static json_t *dispatch(struct manager *m, json_t *req, uid_t peer, const struct principal *principal,
		       struct sb_stream *s)
{
	const char *op = json_string_value(json_object_get(req, "op"));
	const char *session = json_string_value(json_object_get(req, "session"));

	json_t *elsewhere;

	if (op == NULL)
		return control_error("invalid", "the request names no op");
	if (principal != NULL && (elsewhere = control_tls_authorize(m, principal, req)) != NULL)
		return elsewhere;
	/* The ops that act on a session run only at its owner (docs/scaling.md): taken here, before
	 * the op, or answered with where to send it. Reads (show, records) are answered by any. */
	if ((strcmp(op, "exec") == 0 || strcmp(op, "cancel") == 0 || strcmp(op, "session.delete") == 0 ||
	     strcmp(op, "grant") == 0) && (elsewhere = recovery_claim(m, session)) != NULL)
		return elsewhere;
	if (strcmp(op, "exec") == 0)
		return exec_answer(m, req, s);
	if (strcmp(op, "follow") == 0)
		return live_send_follow(s, req);
	if (strcmp(op, "session.create") == 0)
		return sessions_create(m, req);
	if (strcmp(op, "session.show") == 0)
		return sessions_show(m, session);
	if (strcmp(op, "session.delete") == 0)
		return sessions_delete(m, session, json_is_true(json_object_get(req, "delete_branch")));
	if (strcmp(op, "session.list") == 0)
		return pages_sessions(m, req);
	if (strcmp(op, "cancel") == 0)
		return session == NULL ? control_error("invalid", "cancel needs a session") :
					 cancel_call(m, session, json_string_value(json_object_get(req, "tag")));
	if (strcmp(op, "grant") == 0)
		return sessions_grant(m, req);
	if (strcmp(op, "records") == 0)
		return pages_records(m, req);
	if (strcmp(op, "status") == 0)
		return status_answer(m);
	if (strcmp(op, "metrics") == 0)
		return status_metrics_answer(m);
	if (strcmp(op, "resolve") == 0)
		return resolve_answer(m, req, peer);
	if (strcmp(op, "config") == 0)
		return json_pack("{s:b, s:i, s:i, s:s}", "ok", 1, "default_timeout_seconds", m->cfg.default_timeout,
				 "max_timeout_seconds", m->cfg.max_timeout, "backend", m->cfg.backend);
	return control_error("invalid", "unknown op '%s'", op);
}

/* ---- control connections, bounded ----
 * One thread per connection (docs/architecture.md "Threading model"). What a client that stalls
 * can hold is bounded four ways, none of which a well-behaved client meets:
 *  - a connection must start its first request within CONN_FIRST_REQUEST_MS of being accepted
 *    (the CLI and `mcp` send theirs at once: they connect per call);
 *  - a request, once its first byte arrived, must arrive whole within CONN_FRAME_MS;
 *  - an answer's write that makes no progress for CONN_SEND_STALL_MS gives up (the exec's record
 *    is committed before its answer is sent, so a client that never reads loses nothing);
 *  - at most conn_max connections are open at once; one more is answered with a refusal
 *    ("unavailable": nothing ran) and closed, so descriptors and threads cannot run out.
 * Between two requests of one connection there is no bound but the cap: a client may keep a
 * connection for several calls, and a call waiting for a long command holds it as long as the
 * command runs. */
#define CONN_FIRST_REQUEST_MS 10000
#define CONN_FRAME_MS 10000
#define CONN_SEND_STALL_MS 30000
#define CONN_MAX_CEILING 512u
#define CONN_MAX_FLOOR 16u
#define CONN_REFUSAL_LOG_MS 10000

static pthread_mutex_t conn_lock = PTHREAD_MUTEX_INITIALIZER;
static unsigned conn_open, conn_max;
static unsigned long conn_refused;
static int64_t conn_refused_logged_ms = -CONN_REFUSAL_LOG_MS;

struct conn {
	struct manager *m;
	int fd;
	struct tls_session *tls;          /* a TLS connection's session, else NULL (the unix socket) */
	const struct principal *principal; /* its principal */
	struct deny_list *deny;           /* looked at while the connection waits (revocation) */
	int64_t wait_deadline;  /* for the next request's first byte; -1: none */
	int64_t frame_deadline; /* for the rest of a request that has begun; -1: none begun */
};

/* Half the descriptors the manager may open, within [CONN_MAX_FLOOR, CONN_MAX_CEILING]: the
 * other half is for sandboxes (pidfds, agent connections), SQLite, git and podman requests. */
static unsigned conn_limit(void)
{
	struct rlimit rl;
	rlim_t half;

	if (getrlimit(RLIMIT_NOFILE, &rl) < 0 || rl.rlim_cur == RLIM_INFINITY)
		return CONN_MAX_CEILING;
	half = rl.rlim_cur / 2;
	return half > CONN_MAX_CEILING ? CONN_MAX_CEILING : half < CONN_MAX_FLOOR ? CONN_MAX_FLOOR : (unsigned)half;
}

/* A TLS connection's wait for input, in slices of DENY_RECHECK_MS: a certificate revoked while
 * the connection is open is closed within that bound (EACCES). 1 ready, 0 past deadline, -1. */
static int conn_tls_wait(struct conn *c, int64_t deadline)
{
	for (;;) {
		struct pollfd p = { .fd = c->fd, .events = POLLIN };
		int slice = DENY_RECHECK_MS, n;

		if (deny_list_denies(c->deny, c->principal->name, tls_session_serial(c->tls))) {
			sb_warn("closing a TLS control connection of principal %s: its certificate was revoked",
				c->principal->name);
			errno = EACCES;
			return -1;
		}
		if (tls_session_pending(c->tls) > 0)
			return 1;
		if (deadline >= 0 && clock_remaining_ms(deadline) < slice)
			slice = clock_remaining_ms(deadline);
		n = poll(&p, 1, slice);
		if (n != 0)
			return n;
		if (deadline >= 0 && clock_remaining_ms(deadline) == 0)
			return 0;
	}
}

static ssize_t conn_tls_read(struct conn *c, void *buf, size_t len, int64_t deadline)
{
	struct sb_stream s;
	int n = conn_tls_wait(c, deadline);
	ssize_t got;

	if (n <= 0) {
		if (n == 0)
			errno = ETIMEDOUT;
		return -1;
	}
	tls_session_set_deadline(c->tls, deadline < 0 ? clock_deadline_after(CONN_FRAME_MS) : deadline);
	tls_session_stream(c->tls, &s);
	got = s.read(s.ctx, buf, len);
	if (got > 0 && c->frame_deadline < 0)
		c->frame_deadline = clock_deadline_after(CONN_FRAME_MS);
	return got;
}

/* The stream's read for control_recv_stream: waits only until the deadline that applies now. */
static ssize_t conn_read(void *ctx, void *buf, size_t len)
{
	struct conn *c = ctx;
	int64_t deadline = c->frame_deadline >= 0 ? c->frame_deadline : c->wait_deadline;
	struct pollfd p = { .fd = c->fd, .events = POLLIN };
	int n;
	ssize_t got;

	if (c->tls != NULL)
		return conn_tls_read(c, buf, len, deadline);
	n = poll(&p, 1, deadline < 0 ? -1 : clock_remaining_ms(deadline));

	if (n < 0)
		return -1; /* EINTR is retried by the frame reader */
	if (n == 0) {
		errno = ETIMEDOUT;
		return -1;
	}
	got = read(c->fd, buf, len);
	if (got > 0 && c->frame_deadline < 0)
		c->frame_deadline = clock_deadline_after(CONN_FRAME_MS);
	return got;
}

/* The stream's write: what fits now, else a wait for room of at most CONN_SEND_STALL_MS (a
 * blocking write with SO_SNDTIMEO would wait that long once per partial write). */
static ssize_t conn_write(void *ctx, const void *buf, size_t len)
{
	struct conn *c = ctx;

	if (c->tls != NULL) {
		struct sb_stream s;

		/* Per record: a record that makes no progress for the stall bound gives up. */
		tls_session_set_deadline(c->tls, clock_deadline_after(CONN_SEND_STALL_MS));
		tls_session_stream(c->tls, &s);
		return s.write(s.ctx, buf, len);
	}
	for (;;) {
		ssize_t n = send(c->fd, buf, len, MSG_DONTWAIT | MSG_NOSIGNAL);
		struct pollfd p = { .fd = c->fd, .events = POLLOUT };
		int ready;

		if (n >= 0 || (errno != EAGAIN && errno != EWOULDBLOCK))
			return n;
		ready = poll(&p, 1, CONN_SEND_STALL_MS);
		if (ready == 0) {
			errno = ETIMEDOUT;
			return -1;
		}
		if (ready < 0 && errno != EINTR)
			return -1;
	}
}

/* Send resp. An answer that cannot be sent whole (over the cap, or no memory to serialise it)
 * is replaced by an error that says so, and logged: a client never sees a silent close, and an
 * operator learns which op grew too large. -1 only when the connection itself failed. */
static int conn_answer(struct sb_stream *s, const char *op, json_t *resp, struct sb_err *err)
{
	json_t *instead;
	int rc;

	if (control_send_stream(s, resp, CONTROL_RESPONSE_CAP, err) == 0)
		return 0;
	if (err->errnum != EMSGSIZE && err->errnum != ENOMEM)
		return -1;
	sb_error("the answer to %s was not sent: %s", op, err->msg);
	instead = control_error("internal", "the answer to %s could not be sent (%s); the manager logged it. Ask for "
				"less (records: --limit, --before)", op, err->msg);
	if (instead == NULL)
		return sb_fail(err, ENOMEM, "answering %s with an error", op);
	rc = control_send_stream(s, instead, CONTROL_RESPONSE_CAP, err);
	json_decref(instead);
	return rc;
}

/* Counted for the stop, which waits for every answer being made (requests_wait). */
static void request_count(struct manager *m, bool begin)
{
	pthread_mutex_lock(&m->lock);
	if (begin)
		m->requests++;
	else
		m->requests--;
	pthread_mutex_unlock(&m->lock);
}

/* A request that did not come in time: why, for the client and the log. */
static void conn_timed_out(const struct conn *c, struct sb_err *err)
{
	if (c->frame_deadline >= 0)
		sb_fail(err, ETIMEDOUT, "the request did not arrive whole within %d s of its first byte; closing the "
			"connection", CONN_FRAME_MS / 1000);
	else
		sb_fail(err, ETIMEDOUT, "no request within %d s of connecting; closing the connection",
			CONN_FIRST_REQUEST_MS / 1000);
	sb_warn("control connection: %s", err->msg);
}

/* The requests of one connection, until it closes or fails. */
static void conn_loop(struct conn *c, uid_t peer)
{
	struct sb_stream s = { .ctx = c, .read = conn_read, .write = conn_write };
	struct sb_err err;

	sb_err_clear(&err);
	c->wait_deadline = clock_deadline_after(CONN_FIRST_REQUEST_MS);
	for (;;) {
		json_t *req = NULL, *resp;
		char op[64];
		int rc;
		bool lost;

		c->frame_deadline = -1;
		rc = control_recv_stream(&s, CONTROL_REQUEST_CAP, &req, &err);
		if (rc < 0 && err.errnum == ETIMEDOUT)
			conn_timed_out(c, &err);
		/* A revoked certificate: closed, nothing more read or answered. */
		if (rc == 0 || (rc < 0 && err.errnum == EACCES && c->tls != NULL))
			break;
		/* After an oversized, cut or late frame the stream is out of step: answer, then close. */
		lost = rc < 0 && (err.errnum == EMSGSIZE || err.errnum == EPROTO || err.errnum == ETIMEDOUT);
		c->wait_deadline = -1; /* it has spoken: between requests only the cap bounds it */
		snprintf(op, sizeof op, "%s", rc > 0 ? json_string_value(json_object_get(req, "op")) ?: "(no op)" : "a bad request");
		request_count(c->m, true);
		/* Bad input gets a clear answer when the stream still allows one. */
		resp = rc < 0 ? control_error_from("invalid", &err) : dispatch(c->m, req, peer, c->principal, &s);
		json_decref(req);
		if (resp == NULL)
			resp = control_error("internal", "out of memory");
		rc = conn_answer(&s, op, resp, &err);
		json_decref(resp);
		request_count(c->m, false);
		if (rc < 0 && err.errnum == ETIMEDOUT)
			sb_warn("the answer to %s was not read for %d s: closing the connection (an exec's outcome is "
				"on record before its answer is sent)", op, CONN_SEND_STALL_MS / 1000);
		if (rc < 0 || lost)
			break;
	}
}

static void conn_release(void)
{
	metrics_connection_closed();
	pthread_mutex_lock(&conn_lock);
	conn_open--;
	pthread_mutex_unlock(&conn_lock);
}

static void *conn_thread(void *arg)
{
	struct conn *c = arg;
	struct sb_err err;
	uid_t peer;

	metrics_connection_opened();
	sb_err_clear(&err);
	if (control_peer_uid(c->fd, &peer, &err) < 0)
		sb_warn("refused a control connection: %s", err.msg);
	else if (peer != geteuid() && peer != 0)
		sb_warn("refused a control connection from uid %u", (unsigned)peer);
	else
		conn_loop(c, identity_userns_host_uid(&c->m->cfg, peer)); /* as the records name it: the host's */
	close(c->fd);
	free(c);
	conn_release();
	return NULL;
}

/* A TLS connection takes a slot of the same cap as the unix socket's, once verified (control_tls.c
 * bounds it per principal first), and is served on the handshake's thread. Its requests carry the
 * manager's uid where an op records one (resolve: the principal goes into the note). TLS clients
 * together never take the last eighth of the cap: each principal within its own bound, many of them
 * could otherwise fill it and keep the unix socket's peers (the operator's status and resolve, the
 * host's own clients) out. */
int conn_serve_tls(struct manager *m, int fd, struct tls_session *s, const struct principal *p,
		   struct deny_list *deny)
{
	struct conn c = { .m = m, .fd = fd, .tls = s, .principal = p, .deny = deny };
	struct sb_err err;
	bool over;

	pthread_mutex_lock(&conn_lock);
	if (conn_max == 0)
		conn_max = conn_limit();
	over = conn_open >= conn_max - conn_max / 8;
	if (!over)
		conn_open++;
	pthread_mutex_unlock(&conn_lock);
	if (over)
		return -1;
	metrics_connection_opened();
	conn_loop(&c, geteuid());
	conn_release();
	sb_err_clear(&err);
	if (tls_session_close(s, &err) < 0)
		sb_debug("TLS control connection of %s: %s", p->name, err.msg);
	close(fd);
	return 0;
}

/* A connection that gets no thread (over the cap, or none could start): told why and closed,
 * without blocking the accept loop (a fresh socket's buffer holds the short answer; if not, the
 * client sees the close). */
static void conn_refuse(int fd, const char *why)
{
	json_t *e = control_error("unavailable", "%s: nothing ran; try again when fewer clients are connected", why);
	struct sb_err ignored;

	if (e != NULL && fcntl(fd, F_SETFL, O_NONBLOCK) == 0)
		control_send(fd, e, CONTROL_RESPONSE_CAP, &ignored);
	json_decref(e);
	close(fd);
}

/* A flood of refusals at the cap is one log line per CONN_REFUSAL_LOG_MS, with the running count. */
static void conn_refuse_at_cap(int fd, unsigned open_now)
{
	char why[96];
	int64_t now = clock_mono_ms();
	unsigned long refused;
	bool log_now;

	snprintf(why, sizeof why, "the manager has %u control connections open, its limit", open_now);
	conn_refuse(fd, why);
	pthread_mutex_lock(&conn_lock);
	refused = ++conn_refused;
	log_now = now - conn_refused_logged_ms >= CONN_REFUSAL_LOG_MS;
	if (log_now)
		conn_refused_logged_ms = now;
	pthread_mutex_unlock(&conn_lock);
	if (log_now)
		sb_warn("refused a control connection: %u open, the limit (%lu refused since start)", open_now, refused);
}

void conn_start(struct manager *m, int fd)
{
	struct conn *c;
	struct sb_err err;
	unsigned open_now;
	bool over;

	pthread_mutex_lock(&conn_lock);
	if (conn_max == 0)
		conn_max = conn_limit();
	open_now = conn_open;
	over = conn_open >= conn_max;
	if (!over)
		conn_open++;
	pthread_mutex_unlock(&conn_lock);
	if (over) {
		conn_refuse_at_cap(fd, open_now);
		return;
	}
	c = calloc(1, sizeof *c);
	if (c == NULL)
		sb_fail(&err, ENOMEM, "out of memory");
	if (c != NULL) {
		c->m = m;
		c->fd = fd;
		if (sb_thread_detached(conn_thread, c, &err) == 0)
			return;
		free(c);
	}
	sb_error("refused a control connection: %s", err.msg);
	pthread_mutex_lock(&conn_lock);
	conn_open--;
	pthread_mutex_unlock(&conn_lock);
	sb_err_prefix(&err, "the manager cannot serve another connection now");
	conn_refuse(fd, err.msg);
}
