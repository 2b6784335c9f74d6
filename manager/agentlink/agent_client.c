/* The manager's agent-protocol client (see agent_client.h): connecting, Hello, and each request's
 * exchange, split into I/O (conn_*) and pure judgement of what came back (*_accept). Must never
 * deliver a reply it did not match to its request, nor reuse a connection whose stream position
 * it can no longer vouch for. Everything the agent sends is untrusted text for messages. */
#include "agent_client.h"
#include "agent_client_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <jansson.h>

#include "ca.h"
#include "clock.h"
#include "failpoint.h"
#include "log.h"
#include "random.h"
#include "receipt_mac.h"
#include "sock.h"
#include "tls_pipe.h"

#define AGENT_FRAME_CAP SB_FRAME_CAP_DEFAULT
#define AGENT_ADDRESS_MAX 160
#define AGENT_CONNECT_RETRY_MS 10 /* a unix listener with a full backlog answers EAGAIN */

struct agent_conn {
	int fd;
	struct tls_session *tls;
	struct sb_stream stream;
	struct agent_peer peer;
	char *features_json;
	char address[AGENT_ADDRESS_MAX];
	bool broken;  /* the stream position is unknown (transport failure, refused reply): unusable */
};

/* ---------- connecting ---------- */

static int unix_addr(const char *path, struct sockaddr_storage *ss, socklen_t *len, struct sb_err *err)
{
	struct sockaddr_un *sun = (struct sockaddr_un *)ss;

	if (path[0] == '\0' || strlen(path) >= sizeof sun->sun_path)
		return sb_fail(err, ENAMETOOLONG, "agent address unix:%s: the path is empty or too long", path);
	sun->sun_family = AF_UNIX;
	strcpy(sun->sun_path, path);
	*len = sizeof *sun;
	return 0;
}

static int address_parse(const char *address, struct sockaddr_storage *ss, socklen_t *len, struct sb_err *err)
{
	memset(ss, 0, sizeof *ss);
	if (strncmp(address, "unix:", 5) == 0)
		return unix_addr(address + 5, ss, len, err);
	/* Numeric addresses only, as the agent's --listen: no resolver between us and the sandbox. */
	if (sock_hostport_parse(address, ss, len, NULL, err) < 0) {
		sb_err_prefix(err, "agent address");
		return -1;
	}
	return 0;
}

/* Waits for a non-blocking connect to finish; 0 or -1 with errno. */
static int connect_finish(int fd, int64_t deadline_ms)
{
	struct pollfd p = { .fd = fd, .events = POLLOUT };
	socklen_t len = sizeof(int);
	int64_t left;
	int so_error = 0, n;

	do {
		left = deadline_ms - clock_mono_ms();
		if (left <= 0) {
			errno = ETIMEDOUT;
			return -1;
		}
		n = poll(&p, 1, left > 60000 ? 60000 : (int)left);
	} while ((n < 0 && errno == EINTR) || n == 0);
	if (n < 0 || getsockopt(fd, SOL_SOCKET, SO_ERROR, &so_error, &len) < 0)
		return -1;
	errno = so_error;
	return so_error == 0 ? 0 : -1;
}

/* A connected stream socket (close-on-exec, blocking again) to address, or -1. */
static int address_connect(const char *address, int64_t deadline_ms, struct sb_err *err)
{
	struct sockaddr_storage ss;
	socklen_t len = 0;
	int fd, rc, one = 1;

	if (address_parse(address, &ss, &len, err) < 0)
		return -1;
	fd = socket(ss.ss_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	if (fd < 0)
		return sb_fail_errno(err, "connecting to sandbox-agent at %s: socket", address);
	for (;;) {
		rc = connect(fd, (struct sockaddr *)&ss, len);
		if (rc == 0 || errno != EAGAIN || clock_mono_ms() >= deadline_ms)
			break;
		/* A unix listener whose backlog is full: wait for it to accept, within the deadline. */
		poll(NULL, 0, AGENT_CONNECT_RETRY_MS);
	}
	if (rc < 0 && errno == EINPROGRESS)
		rc = connect_finish(fd, deadline_ms);
	if (rc < 0 && errno == EAGAIN)
		errno = ETIMEDOUT;
	/* Small request and reply frames: do not let Nagle hold the second TLS record of a frame. */
	if (rc == 0 && ss.ss_family != AF_UNIX)
		rc = setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
	if (rc == 0)
		rc = fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK);
	if (rc < 0) {
		sb_fail_errno(err, "connecting to sandbox-agent at %s", address);
		close(fd);
		return -1;
	}
	return fd;
}

/* ---------- I/O on a connection ---------- */

/* A failed read or write: the TLS layer's story when it has one (it knows about truncation and
 * deadlines), the frame layer's otherwise. The connection is unusable from here on. */
static int conn_io_fail(struct agent_conn *c, const char *doing, struct sb_err *err)
{
	const char *tls_why = tls_session_last_error(c->tls);

	c->broken = true;
	if (tls_why[0] != '\0' && err->errnum != EMSGSIZE && err->errnum != EBADMSG)
		return sb_fail(err, err->errnum, "%s sandbox-agent at %s: %s", doing, c->address, tls_why);
	sb_err_prefix(err, "%s sandbox-agent at %s", doing, c->address);
	return -1;
}

static int conn_usable(const struct agent_conn *c, struct sb_err *err)
{
	if (c->broken)
		return sb_fail(err, EPIPE, "the connection to sandbox-agent at %s failed earlier and cannot be "
			       "reused: connect again (and Query any exec whose outcome was lost)", c->address);
	return 0;
}

static int conn_send(struct agent_conn *c, const Sandbox__Envelope *m, int64_t deadline_ms, struct sb_err *err)
{
	char doing[64];

	if (conn_usable(c, err) < 0)
		return -1;
	tls_session_set_deadline(c->tls, deadline_ms);
	if (proto_send(&c->stream, m, AGENT_FRAME_CAP, err) == 0)
		return 0;
	snprintf(doing, sizeof doing, "sending %s to", proto_body_name(m->body_case));
	return conn_io_fail(c, doing, err);
}

/* One envelope (free with proto_free), or -1; an end of stream is an error here, since every
 * read waits for an answer the agent owes us. */
static int conn_recv(struct agent_conn *c, int64_t deadline_ms, const char *waiting_for, Sandbox__Envelope **m,
		     struct sb_err *err)
{
	char doing[160];
	int rc;

	*m = NULL;
	if (conn_usable(c, err) < 0)
		return -1;
	tls_session_set_deadline(c->tls, deadline_ms);
	rc = proto_recv(&c->stream, AGENT_FRAME_CAP, m, err);
	if (rc == 1)
		return 0;
	if (rc == 0) {
		c->broken = true;
		return sb_fail(err, ECONNRESET, "waiting for %s: sandbox-agent at %s closed the connection", waiting_for,
			       c->address);
	}
	snprintf(doing, sizeof doing, "waiting for %s from", waiting_for);
	return conn_io_fail(c, doing, err);
}

static int conn_hello(struct agent_conn *c, int64_t deadline_ms, struct sb_err *err)
{
	Sandbox__Envelope out = SANDBOX__ENVELOPE__INIT, *in;
	Sandbox__Hello h;
	int rc;

	proto_hello_init(&h);
	out.body_case = SANDBOX__ENVELOPE__BODY_HELLO;
	out.hello = &h;
	if (conn_send(c, &out, deadline_ms, err) < 0 || conn_recv(c, deadline_ms, "the agent's hello", &in, err) < 0)
		return -1;
	rc = agent_hello_accept(in, &c->peer, &c->features_json, err);
	proto_free(in);
	if (rc < 0)
		sb_err_prefix(err, "sandbox-agent at %s", c->address);
	return rc;
}

int agent_client_config(struct tls_config **out, const char *cert, const char *key, const char *ca,
			const char *sandbox_id, uint64_t generation, struct sb_err *err)
{
	char name[TLS_NAME_MAX + 1];

	*out = NULL;
	if (ca_format_sandbox_name(name, sizeof name, sandbox_id, generation, err) < 0 ||
	    tls_config_client(out, cert, key, ca, name, err) < 0)
		return -1;
	tls_config_set_peer_label(*out, "sandbox-agent");
	return 0;
}

int agent_connect(struct tls_config *config, const char *address, int64_t deadline_ms, struct agent_conn **out,
		  struct sb_err *err)
{
	struct agent_conn *c = calloc(1, sizeof *c);

	*out = NULL;
	if (c == NULL)
		return sb_fail(err, ENOMEM, "connecting to sandbox-agent at %s", address);
	/* For messages only (address_connect uses the caller's whole string): cut on purpose. */
	snprintf(c->address, sizeof c->address, "%.*s", (int)sizeof c->address - 1, address);
	c->fd = address_connect(address, deadline_ms, err);
	if (c->fd < 0) {
		free(c);
		return -1;
	}
	if (tls_session_open(config, c->fd, deadline_ms, &c->tls, err) < 0) {
		sb_err_prefix(err, "connecting to %s", address);
		close(c->fd);
		free(c);
		return -1;
	}
	tls_session_stream(c->tls, &c->stream);
	if (conn_hello(c, deadline_ms, err) < 0) {
		agent_close(c);
		return -1;
	}
	*out = c;
	return 0;
}

const struct agent_peer *agent_conn_peer(const struct agent_conn *conn)
{
	return &conn->peer;
}

void agent_interrupt(struct agent_conn *conn)
{
	if (conn != NULL)
		(void)shutdown(conn->fd, SHUT_RDWR);
}

void agent_close(struct agent_conn *conn)
{
	struct sb_err err;

	if (conn == NULL)
		return;
	/* close_notify is a courtesy on a healthy connection; a broken one has nothing to close. */
	if (conn->broken)
		tls_session_free(conn->tls);
	else
		(void)tls_session_close(conn->tls, &err);
	close(conn->fd);
	free(conn->features_json);
	free(conn);
}

#ifdef SB_FAILPOINTS
/* Test builds only (failpoint manager.agent.cut_result): the connection is cut after the first
 * bytes of an exec's Result frame, as a network failing mid-answer would; a stand-in for a proxy
 * between manager and agent (docs/reliability.md). One exec per process is ever cut, so one static
 * wrapper is enough. */
#define CUT_AFTER_BYTES 6 /* the frame's 4-byte length and 2 bytes of the Result */

static struct {
	struct sb_stream inner;
	int fd;
	size_t left;
} cut;

static ssize_t cut_read(void *ctx, void *buf, size_t len)
{
	ssize_t n;

	(void)ctx;
	if (cut.left == 0) {
		(void)shutdown(cut.fd, SHUT_RDWR);
		errno = ECONNRESET;
		return -1;
	}
	n = cut.inner.read(cut.inner.ctx, buf, len < cut.left ? len : cut.left);
	if (n > 0)
		cut.left -= (size_t)n;
	return n;
}

static void conn_cut_arm(struct agent_conn *c)
{
	cut.inner = c->stream;
	cut.fd = c->fd;
	cut.left = CUT_AFTER_BYTES;
	c->stream.read = cut_read;
	sb_warn("failpoint manager.agent.cut_result reached: the connection to %s is cut after %d bytes of the "
		"result", c->address, CUT_AFTER_BYTES);
}

/* Test builds only (failpoint manager.agent.cut_waiting): the connection is cut CUT_WAITING_MS into
 * the wait for an exec's Result, while its command still runs, as a network dropping the link
 * would (docs/reliability.md). The wait ends there as a failed read, and the connection is shut. */
#define CUT_WAITING_MS 2000

static int64_t cut_waiting_deadline(struct agent_conn *c, int64_t deadline_ms, bool *armed)
{
	int64_t at = tls_deadline_after(CUT_WAITING_MS);

	*armed = at < deadline_ms && failpoint_hit("manager.agent.cut_waiting");
	if (!*armed)
		return deadline_ms;
	sb_warn("failpoint manager.agent.cut_waiting reached: the connection to %s is cut in %d ms unless the result "
		"comes first", c->address, CUT_WAITING_MS);
	return at;
}
#endif

/* ---------- requests ---------- */

static void expect_from_request(const struct agent_exec_request *req, struct agent_expect *want)
{
	want->exec_id = req->exec_id;
	want->generation = req->generation;
	want->nonce = req->nonce;
	want->receipt_key = req->receipt_key;
}

/* Builds the Exec envelope over caller memory; *vars and *ptrs are malloc'd for the environment. */
static int exec_envelope(const struct agent_exec_request *req, Sandbox__Envelope *env, Sandbox__Exec *e,
			 Sandbox__EnvVar **vars, Sandbox__EnvVar ***ptrs, struct sb_err *err)
{
	*vars = calloc(req->n_env > 0 ? req->n_env : 1, sizeof **vars);
	*ptrs = calloc(req->n_env > 0 ? req->n_env : 1, sizeof **ptrs);
	if (*vars == NULL || *ptrs == NULL)
		return sb_fail(err, ENOMEM, "building exec %s", req->exec_id);
	for (size_t i = 0; i < req->n_env; i++) {
		sandbox__env_var__init(&(*vars)[i]);
		(*vars)[i].name = (char *)req->env[i].name;
		(*vars)[i].value = (char *)req->env[i].value;
		(*ptrs)[i] = &(*vars)[i];
	}
	sandbox__exec__init(e);
	e->exec_id = (char *)req->exec_id;
	e->generation = req->generation;
	e->nonce.data = (uint8_t *)req->nonce;
	e->nonce.len = AGENT_NONCE_BYTES;
	e->command = (char *)req->command;
	e->cwd = (char *)req->cwd;
	e->timeout_seconds = req->timeout_seconds;
	e->output_limit = req->output_limit;
	e->n_env = req->n_env;
	e->env = *ptrs;
	e->has_stream_output = req->on_output != NULL;
	e->stream_output = req->on_output != NULL;
	env->body_case = SANDBOX__ENVELOPE__BODY_EXEC;
	env->exec = e;
	/* Refused here, the exec was never dispatched; proto_send would only say so after we marked it. */
	if (!protobuf_c_message_check(&env->base))
		return sb_invalid(err, "exec %s: a required field (exec id, command, cwd, env name or value) is "
				  "missing", req->exec_id ? req->exec_id : "(none)");
	if (protobuf_c_message_get_packed_size(&env->base) > AGENT_FRAME_CAP)
		return sb_fail(err, EMSGSIZE, "exec %s: the request is over the %u-byte frame cap", req->exec_id,
			       AGENT_FRAME_CAP);
	return 0;
}

int agent_exec_send(struct agent_conn *conn, const struct agent_exec_request *req, int64_t deadline_ms,
		    struct agent_reply *out, struct sb_err *err)
{
	Sandbox__Envelope env = SANDBOX__ENVELOPE__INIT;
	Sandbox__Exec e;
	Sandbox__EnvVar *vars = NULL, **ptrs = NULL;
	int rc;

	memset(out, 0, sizeof *out);
	rc = conn_usable(conn, err);
	if (rc == 0)
		rc = exec_envelope(req, &env, &e, &vars, &ptrs, err);
	if (rc == 0) {
		out->dispatched = true;
		rc = conn_send(conn, &env, deadline_ms, err);
	}
	free(vars);
	free(ptrs);
	if (rc < 0)
		sb_err_prefix(err, "exec %s", req->exec_id ? req->exec_id : "(none)");
	return rc;
}

int agent_exec_wait(struct agent_conn *conn, const struct agent_exec_request *req, int64_t deadline_ms,
		    struct agent_reply *out, struct sb_err *err)
{
	struct agent_exec_wait w = { 0 };
	struct agent_expect want;

	expect_from_request(req, &want);
#ifdef SB_FAILPOINTS
	/* Once per exec, not per message: live Output chunks come before the Result. */
	bool cut_waiting = false;
	int64_t cut_until;

	if (failpoint_hit("manager.agent.cut_result"))
		conn_cut_arm(conn);
	cut_until = cut_waiting_deadline(conn, deadline_ms, &cut_waiting);
#endif
	for (;;) {
		Sandbox__Envelope *m;
		int rc;

		int64_t wait_until = deadline_ms;
#ifdef SB_FAILPOINTS
		if (!w.have_result)
			wait_until = cut_until;
#endif
		if (conn_recv(conn, wait_until, w.have_result ? "the exec's receipt" : "the exec's result", &m, err) < 0) {
#ifdef SB_FAILPOINTS
			if (cut_waiting)
				(void)shutdown(conn->fd, SHUT_RDWR);
#endif
			agent_reply_free(out);
			break;
		}
		/* Live chunks before the Result, for this exec only: anything else is judged below. */
		if (req->on_output != NULL && !w.have_result && m->body_case == SANDBOX__ENVELOPE__BODY_OUTPUT &&
		    strcmp(m->output->exec_id, req->exec_id) == 0) {
			req->on_output(req->output_ctx, m->output->stream == SANDBOX__OUTPUT__STREAM__STDERR,
				       m->output->offset, m->output->data.data, m->output->data.len);
			proto_free(m);
			continue;
		}
		rc = agent_exec_accept(&w, &want, m, out, err);
		proto_free(m);
		if (rc == 0 && w.have_result)
			FAILPOINT("manager.agent.result_read"); /* the Result read, its Receipt not yet */
		if (rc == 1)
			return 0;
		if (rc < 0) {
			/* An agent's Error is a complete answer; anything else leaves the stream suspect. */
			if (out->agent_error == 0)
				conn->broken = true;
			break;
		}
	}
	sb_err_prefix(err, "exec %s", req->exec_id);
	return -1;
}

int agent_exec(struct agent_conn *conn, const struct agent_exec_request *req, int64_t deadline_ms,
	       struct agent_reply *out, struct sb_err *err)
{
	if (agent_exec_send(conn, req, deadline_ms, out, err) < 0)
		return -1;
	FAILPOINT("manager.agent.sent"); /* the Exec written, no answer read (the volume probe too) */
	return agent_exec_wait(conn, req, deadline_ms, out, err);
}

/* Send a Query or Cancel for want->exec_id and judge the QueryReply. */
static int conn_ask(struct agent_conn *conn, Sandbox__Envelope *m, const struct agent_expect *want,
		    int64_t deadline_ms, struct agent_reply *out, struct sb_err *err)
{
	Sandbox__Envelope *in;
	int rc;

	memset(out, 0, sizeof *out);
	if (conn_send(conn, m, deadline_ms, err) < 0 || conn_recv(conn, deadline_ms, "a query reply", &in, err) < 0)
		return -1;
	rc = agent_query_accept(want, in, out, err);
	proto_free(in);
	if (rc < 0 && out->agent_error == 0)
		conn->broken = true;
	return rc;
}

int agent_query(struct agent_conn *conn, const struct agent_expect *want, int64_t deadline_ms,
		struct agent_reply *out, struct sb_err *err)
{
	Sandbox__Envelope m = SANDBOX__ENVELOPE__INIT;
	Sandbox__Query q = SANDBOX__QUERY__INIT;

	q.exec_id = (char *)want->exec_id;
	m.body_case = SANDBOX__ENVELOPE__BODY_QUERY;
	m.query = &q;
	if (conn_ask(conn, &m, want, deadline_ms, out, err) < 0) {
		sb_err_prefix(err, "querying exec %s", want->exec_id ? want->exec_id : "(none)");
		return -1;
	}
	return 0;
}

int agent_cancel(struct tls_config *config, const char *address, const char *exec_id, int64_t deadline_ms,
		 struct agent_reply *out, struct sb_err *err)
{
	Sandbox__Envelope m = SANDBOX__ENVELOPE__INIT;
	Sandbox__Cancel cancel = SANDBOX__CANCEL__INIT;
	struct agent_expect want = { .exec_id = exec_id };
	struct agent_conn *conn;
	int rc;

	memset(out, 0, sizeof *out);
	if (agent_connect(config, address, deadline_ms, &conn, err) < 0) {
		sb_err_prefix(err, "cancelling exec %s", exec_id);
		return -1;
	}
	/* The certificate pinned the agent's generation, and an agent runs only its own generation. */
	want.generation = conn->peer.generation;
	cancel.exec_id = (char *)exec_id;
	m.body_case = SANDBOX__ENVELOPE__BODY_CANCEL;
	m.cancel = &cancel;
	rc = conn_ask(conn, &m, &want, deadline_ms, out, err);
	agent_close(conn);
	/* The outcome belongs to the exec's own connection (or a Query), not to the canceller. */
	agent_reply_free(out);
	if (rc < 0)
		sb_err_prefix(err, "cancelling exec %s", exec_id);
	return rc;
}

bool agent_conn_quiet(const struct agent_conn *conn)
{
	struct pollfd p = { conn->fd, POLLIN, 0 };

	return !conn->broken && poll(&p, 1, 0) == 0;
}

int agent_ping(struct agent_conn *conn, int64_t deadline_ms, struct sb_err *err)
{
	Sandbox__Envelope m = SANDBOX__ENVELOPE__INIT, *in;
	Sandbox__Ping ping = SANDBOX__PING__INIT;
	uint32_t code = 0;
	int rc = 0;

	if (sb_random_bytes(&ping.token, sizeof ping.token, err) < 0)
		return -1;
	m.body_case = SANDBOX__ENVELOPE__BODY_PING;
	m.ping = &ping;
	if (conn_send(conn, &m, deadline_ms, err) < 0 || conn_recv(conn, deadline_ms, "a pong", &in, err) < 0)
		return -1;
	if (in->body_case == SANDBOX__ENVELOPE__BODY_ERROR)
		rc = agent_error_fail(in->error, "a ping", &code, err);
	else if (in->body_case != SANDBOX__ENVELOPE__BODY_PONG)
		rc = unexpected(in, "a pong", err);
	else if (in->pong->token != ping.token)
		rc = sb_fail(err, EPROTO, "sandbox-agent at %s answered a ping with another token", conn->address);
	if (rc < 0 && code == 0)
		conn->broken = true;
	proto_free(in);
	return rc;
}

/* ---------- tunnels (policy `proxy` through the agent, agent_relay.c) ---------- */

/* The agent's answer to a NetAccept or what follows it: 0 when it is `want` for port, else -1. */
static int net_answer(struct agent_conn *conn, Sandbox__Envelope__BodyCase want, uint16_t port, int64_t deadline_ms,
		      struct sb_err *err)
{
	const char *what = want == SANDBOX__ENVELOPE__BODY_NET_LISTENING ? "net_listening" : "net_accepted";
	Sandbox__Envelope *in;
	uint32_t code = 0;
	int rc = 0;

	if (conn_recv(conn, deadline_ms, what, &in, err) < 0)
		return -1;
	if (in->body_case == SANDBOX__ENVELOPE__BODY_ERROR)
		rc = agent_error_fail(in->error, "a net accept", &code, err);
	else if (in->body_case != want)
		rc = unexpected(in, what, err);
	else if ((want == SANDBOX__ENVELOPE__BODY_NET_LISTENING ? in->net_listening->port : in->net_accepted->port) !=
		 port)
		rc = sb_fail(err, EPROTO, "sandbox-agent at %s answered a net accept for another port", conn->address);
	/* Whatever came, the connection is a tunnel's or nothing now: never reused for requests. */
	conn->broken = conn->broken || rc < 0;
	proto_free(in);
	return rc;
}

int agent_net_accept(struct agent_conn *conn, uint16_t port, int64_t deadline_ms, struct sb_err *err)
{
	Sandbox__Envelope m = SANDBOX__ENVELOPE__INIT;
	Sandbox__NetAccept na = SANDBOX__NET_ACCEPT__INIT;

	na.port = port;
	m.body_case = SANDBOX__ENVELOPE__BODY_NET_ACCEPT;
	m.net_accept = &na;
	if (conn_send(conn, &m, deadline_ms, err) < 0)
		return -1;
	return net_answer(conn, SANDBOX__ENVELOPE__BODY_NET_LISTENING, port, deadline_ms, err);
}

int agent_net_wait(struct agent_conn *conn, uint16_t port, int stop_fd, struct sb_err *err)
{
	struct pollfd p[2] = { { .fd = conn->fd, .events = POLLIN }, { .fd = stop_fd, .events = POLLIN } };

	while (tls_session_pending(conn->tls) == 0 && poll(p, 2, -1) < 0)
		if (errno != EINTR)
			return sb_fail_errno(err, "waiting for a connection through sandbox-agent at %s", conn->address);
	if (tls_session_pending(conn->tls) == 0 && p[1].revents != 0)
		return 0;
	/* The answer's frame follows at once: its bytes are bounded like any answer's. */
	return net_answer(conn, SANDBOX__ENVELOPE__BODY_NET_ACCEPTED, port, tls_deadline_after(10000), err) < 0 ? -1 : 1;
}

int agent_net_pipe(struct agent_conn *conn, int plain_fd, int idle_ms)
{
	conn->broken = true; /* no frame follows a tunnel's bytes */
	return tls_pipe(conn->tls, conn->fd, plain_fd, idle_ms);
}
