/* `sandbox-agent serve`: the long-running agent. Accepts mutual-TLS connections from the one
 * manager its CA and --manager-name allow, and runs Exec requests through the same boundary as
 * `exec`, one at a time. Every request that reaches a handler passed mTLS and is STILL treated
 * as untrusted: each field is checked before use, because a compromised manager must not turn
 * the agent against its own boundary. One thread per connection; all TLS I/O of a connection
 * stays on its thread. Cancel and Query arrive on their own connections while an Exec runs. */
#include "cli.h"

#include <errno.h>
#include <libgen.h>
#include <limits.h>
#include <malloc.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "boundary.h"
#include "prebuilt.h"
#include "privdir.h"
#include "journal.h"
#include "log.h"
#include "names.h"
#include "opts.h"
#include "proto.h"
#include "receipt.h"
#include "result.h"
#include "secret.h"
#include "thread.h"
#include "steptime.h"
#include "tls.h"

#define SERVE_FRAME_CAP SB_FRAME_CAP_DEFAULT
#define SERVE_MAX_CONNECTIONS 16
#define SERVE_HANDSHAKE_MS 10000
#define SERVE_IDLE_MS (15 * 60 * 1000)
#define SERVE_COMMAND_MAX (1024 * 1024)
#define SERVE_OUTPUT_LIMIT_MAX (1024 * 1024) /* escaped output of both streams must fit a frame */
#define ENV_VALUE_MAX 4000
#define ENV_ENTRY_MAX (ENV_NAME_MAX + 1 + ENV_VALUE_MAX) /* NAME=VALUE and the NUL */
#define SERVE_BUILD "sandbox-agent 0.1.0"

struct serve_config {
	const char *listen, *cert, *key, *ca, *manager_name, *state_dir;
	const char *receipt_key;   /* --receipt-key, or NULL: state_dir/receipt.key */
	uint16_t ports[BOUNDARY_MAX_PORTS];
	size_t n_ports;
	uint64_t generation;
};

struct agent {
	struct boundary b;
	struct prebuilt pre;       /* the next call's init, built while idle (prebuilt.h) */
	struct secrets *sec;
	struct tls_config *tls;
	struct privdir state, receipts, journal_dir; /* held from start (R1): every write goes through them */
	struct journal journal;
	uint64_t generation;
	char *features_json;
	pthread_mutex_t lock;      /* guards the fields below */
	bool busy;
	char running_id[EXEC_ID_MAX + 1];
	int cancel_efd;            /* written by a Cancel, read by the running exec's boundary */
	int connections;
};

struct conn {
	struct agent *agent;
	int fd;
	struct tls_session *tls;
	struct sb_stream stream;
};

/* ---- answers ---- */

static int send_envelope(struct conn *c, Sandbox__Envelope *env)
{
	struct sb_err err;

	if (proto_send(&c->stream, env, SERVE_FRAME_CAP, &err) < 0) {
		sb_warn("sending %s: %s", proto_body_name(env->body_case), err.msg);
		return -1;
	}
	return 0;
}

static int send_error(struct conn *c, Sandbox__ErrorCode code, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

static int send_error(struct conn *c, Sandbox__ErrorCode code, const char *fmt, ...)
{
	Sandbox__Envelope env = SANDBOX__ENVELOPE__INIT;
	Sandbox__Error e = SANDBOX__ERROR__INIT;
	char msg[SB_ERR_MSG_MAX];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof msg, fmt, ap);
	va_end(ap);
	e.code = (uint32_t)code;
	e.message = msg;
	env.body_case = SANDBOX__ENVELOPE__BODY_ERROR;
	env.error = &e;
	sb_info("answering error %d: %s", (int)code, msg);
	return send_envelope(c, &env);
}

/* ---- Exec ---- */

static bool env_entry_valid(const Sandbox__EnvVar *v)
{
	/* common/names.c: the shell's rule, at most ENV_NAME_MAX bytes. */
	return env_name_valid(v->name, strlen(v->name)) && strlen(v->value) < ENV_VALUE_MAX;
}

/* Every field of an Exec, checked before anything runs. Returns NULL or the reason. */
static const char *exec_refusal(const struct agent *a, const Sandbox__Exec *e)
{
	if (e->generation != a->generation)
		return "the exec is for another generation than this agent serves";
	if (e->nonce.len != SECRET_NONCE_BYTES)
		return "the nonce must be 32 bytes";
	if (!exec_id_valid(e->exec_id))
		return "the exec id must be 1-64 characters of [A-Za-z0-9._-], not starting with '.' or '-'";
	if (strlen(e->command) > SERVE_COMMAND_MAX)
		return "the command is over 1 MiB";
	if (e->cwd[0] != '/')
		return "the working directory must be absolute";
	if (e->timeout_seconds == 0 || e->timeout_seconds > 86400)
		return "the timeout must be 1 to 86400 seconds";
	if (e->output_limit > SERVE_OUTPUT_LIMIT_MAX)
		return "the output limit is over 1 MiB";
	if (e->n_env >= BOUNDARY_MAX_ENV)
		return "too many environment variables";
	for (size_t i = 0; i < e->n_env; i++)
		if (!env_entry_valid(e->env[i]))
			return "an environment variable has an invalid name or an oversized value";
	return NULL;
}

static int exec_claim(struct agent *a, const char *exec_id, char *running, size_t len)
{
	uint64_t drained;
	int claimed;

	pthread_mutex_lock(&a->lock);
	claimed = !a->busy;
	if (claimed) {
		a->busy = true;
		snprintf(a->running_id, sizeof a->running_id, "%s", exec_id);
		/* A Cancel aimed at an earlier exec must not stop this one. */
		while (read(a->cancel_efd, &drained, sizeof drained) == sizeof drained) {
		}
	} else {
		snprintf(running, len, "%s", a->running_id);
	}
	pthread_mutex_unlock(&a->lock);
	return claimed;
}

static void exec_release(struct agent *a)
{
	pthread_mutex_lock(&a->lock);
	a->busy = false;
	a->running_id[0] = '\0';
	pthread_mutex_unlock(&a->lock);
}

static void request_from_exec(const Sandbox__Exec *e, struct exec_request *req, char env_store[][ENV_ENTRY_MAX])
{
	memset(req, 0, sizeof *req);
	snprintf(req->exec_id, sizeof req->exec_id, "%s", e->exec_id);
	req->generation = e->generation;
	req->command = e->command;
	req->cwd = e->cwd;
	req->timeout_seconds = e->timeout_seconds;
	req->output_limit = e->output_limit;
	for (size_t i = 0; i < e->n_env; i++) {
		/* exec_refusal bounded name and value, so the entry fits whole. */
		snprintf(env_store[i], ENV_ENTRY_MAX, "%s=%s", e->env[i]->name, e->env[i]->value);
		req->env[req->n_env++] = env_store[i];
	}
}

/* Run the exec and produce its result and receipt texts (malloc'd); the receipt's file is
 * written, not yet synced (info, exec_settle). */
static void exec_run(struct agent *a, const struct exec_request *req, struct receipt_info *info, char **result,
		     char **receipt)
{
	struct exec_outcome out;
	struct sb_err err;
	json_t *obj;

	sb_err_clear(&err);
	if (prebuilt_run(&a->pre, req, a->cancel_efd, &out, &err) < 0) {
		obj = json_pack("{s:s, s:I, s:s, s:n, s:n, s:s, s:n}", "exec_id", req->exec_id, "generation",
				(json_int_t)req->generation, "status", "refused", "exit_code", "signal", "error",
				err.msg, "receipt");
		*result = obj ? json_dumps(obj, JSON_COMPACT) : NULL;
		*receipt = NULL;
		json_decref(obj);
		return;
	}
	if (receipt_write_unsynced(&a->receipts, req, &out, a->sec, info, &err) < 0) {
		sb_warn("exec %s: %s", req->exec_id, err.msg);
		out.status = EXEC_UNCERTAIN;
		/* For people: the cause is cut to fit detail on purpose. */
		snprintf(out.detail, sizeof out.detail, "receipt not written: %.1000s", err.msg);
	}
	steptime_mark(STEP_RECEIPT);
	obj = result_to_json(req, &out, info);
	/* The captured bytes are in obj now: free them before the dump makes one more copy. */
	exec_outcome_free(&out);
	*result = obj ? json_dumps(obj, JSON_COMPACT) : NULL;
	steptime_mark(STEP_RESULT);
	/* A Receipt follows the Result exactly when the result names one (written to disk). */
	if (info->written) {
		*receipt = info->text;
		info->text = NULL;
	}
	json_decref(obj);
}

/* The result when the receipt, written and checked, could not be made durable: no receipt, so the
 * outcome cannot stand as reported (as when the write itself fails). Rare: the one path that
 * parses a result again. */
static char *result_without_receipt(const char *result, const char *why)
{
	json_t *obj = json_loads(result, 0, NULL);
	char detail[1100], *text;

	if (obj == NULL)
		return NULL;
	snprintf(detail, sizeof detail, "receipt not written: %.1000s", why);
	json_object_set_new(obj, "status", json_string(exec_status_name(EXEC_UNCERTAIN)));
	json_object_set_new(obj, "exit_code", json_null());
	json_object_set_new(obj, "signal", json_null());
	json_object_set_new(obj, "receipt", json_null());
	json_object_set_new(obj, "error", json_string(detail));
	text = json_dumps(obj, JSON_COMPACT);
	json_decref(obj);
	return text;
}

/* The call's durability point, before anything is reported. Mostly one fdatasync: the finished
 * entry, the receipt's bytes inside, into the exec's slot's end (journal_end); the settler syncs
 * the two files after. Else (a big result) the receipt and the journal's finished entry, both
 * written already, are synced together (the first fsync commits most of what the others need).
 * A receipt that cannot be made durable is no receipt: the result becomes uncertain and the entry
 * is written again, durably, to say so. */
static void exec_settle(struct agent *a, const char *exec_id, uint64_t gen, struct receipt_info *info, char **result,
			char **receipt)
{
	struct journal_pending p = { .fd = -1 };
	struct sb_err err, rerr;
	int written;

	/* The receipt's file written whole, or none: the end names it only then. */
	written = info->written == (*receipt != NULL) ?
			  journal_end(&a->journal, exec_id, gen, *result, *receipt, &err) : 0;
	if (written != 0) {
		if (written < 0)
			sb_error("exec %s: journal: %s", exec_id, err.msg);
		return;
	}
	written = journal_finish_write(&a->journal, exec_id, gen, *result, *receipt, &p, &err);
	if (receipt_sync(&a->receipts, info, &rerr) < 0) {
		char *again = result_without_receipt(*result, rerr.msg);

		sb_warn("exec %s: %s", exec_id, rerr.msg);
		free(*receipt);
		*receipt = NULL;
		free(*result);
		*result = again;
		/* The entry just written says otherwise: replaced below, whole and durably. */
		if (written == 0)
			journal_pending_drop(&p);
		written = *result == NULL ? -1 :
			  journal_finish(&a->journal, exec_id, gen, *result, NULL, &err);
		if (written < 0)
			sb_error("exec %s: journal: %s", exec_id, *result ? err.msg : "no result");
		return;
	}
	if (written < 0 || journal_finish_sync(&a->journal, exec_id, &p, &err) < 0)
		sb_error("exec %s: journal: %s", exec_id, err.msg);
}

static int send_result(struct conn *c, const char *exec_id, uint64_t gen, const char *result, const char *receipt)
{
	Sandbox__Envelope env = SANDBOX__ENVELOPE__INIT;
	Sandbox__Result r = SANDBOX__RESULT__INIT;
	Sandbox__Receipt rc = SANDBOX__RECEIPT__INIT;

	r.exec_id = (char *)exec_id;
	r.generation = gen;
	r.result_json = (char *)result;
	env.body_case = SANDBOX__ENVELOPE__BODY_RESULT;
	env.result = &r;
	if (send_envelope(c, &env) < 0)
		return -1;
	if (receipt == NULL)
		return 0;
	rc.exec_id = (char *)exec_id;
	rc.generation = gen;
	rc.receipt_json.data = (uint8_t *)receipt;
	rc.receipt_json.len = strlen(receipt);
	env.body_case = SANDBOX__ENVELOPE__BODY_RECEIPT;
	env.receipt = &rc;
	return send_envelope(c, &env);
}

static int handle_exec(struct conn *c, Sandbox__Exec *e)
{
	/* One exec at a time (exec_claim), so one store serves them all. */
	static char env_store[BOUNDARY_MAX_ENV][ENV_ENTRY_MAX];
	struct agent *a = c->agent;
	const char *refusal = exec_refusal(a, e);
	char running[EXEC_ID_MAX + 1], *result = NULL, *receipt = NULL;
	struct receipt_info info = { 0 };
	struct exec_request req;
	struct sb_err err;
	int rc;

	if (refusal != NULL)
		return send_error(c, SANDBOX__ERROR_CODE__ERR_REFUSED, "exec refused: %s", refusal);
	if (!exec_claim(a, e->exec_id, running, sizeof running))
		return send_error(c, SANDBOX__ERROR_CODE__ERR_BUSY, "busy: exec '%s' is running; one exec at a time",
				  running);
	steptime_reset();
	steptime_mark(STEP_REQUEST);
	/* Never reused: the journal prunes its oldest entries, the receipts stay, so both are asked
	 * before anything runs (a receipt that exists already means this id ran). */
	if (receipt_reserve_check(&a->receipts, e->exec_id, &err) < 0 ||
	    journal_begin(&a->journal, e->exec_id, e->generation, &err) < 0) {
		exec_release(a);
		return send_error(c, SANDBOX__ERROR_CODE__ERR_REFUSED, "exec refused: %s", err.msg);
	}
	/* Into the page that clone() wipes, out of the message's heap memory. */
	memcpy(a->sec->nonce, e->nonce.data, SECRET_NONCE_BYTES);
	explicit_bzero(e->nonce.data, e->nonce.len);
	steptime_mark(STEP_BEGUN);
	request_from_exec(e, &req, env_store);
	steptime_mark(STEP_PREPARED);
	sb_info("exec %s: running", e->exec_id);
	exec_run(a, &req, &info, &result, &receipt);
	if (result != NULL)
		exec_settle(a, e->exec_id, e->generation, &info, &result, &receipt);
	else {
		/* Nothing to report; the receipt still says this id ran. */
		(void)receipt_sync(&a->receipts, &info, &err);
		sb_error("exec %s: journal: no result", e->exec_id);
	}
	receipt_info_free(&info);
	steptime_mark(STEP_JOURNAL);
	exec_release(a);
	/* The connection may be gone by now; the journal answers a later Query either way. */
	rc = result ? send_result(c, e->exec_id, e->generation, result, receipt) : -1;
	steptime_mark(STEP_END);
	steptime_report("serve exec");
	prebuilt_idle(&a->pre);
	free(result);
	free(receipt);
	return rc;
}

/* ---- Cancel, Query, Ping ---- */

static int send_query_reply(struct conn *c, const char *exec_id, const struct journal_entry *j)
{
	Sandbox__Envelope env = SANDBOX__ENVELOPE__INIT;
	Sandbox__QueryReply q = SANDBOX__QUERY_REPLY__INIT;
	Sandbox__Result r = SANDBOX__RESULT__INIT;
	Sandbox__Receipt rc = SANDBOX__RECEIPT__INIT;

	q.exec_id = (char *)exec_id;
	q.state = j->state == JOURNAL_FINISHED ? SANDBOX__QUERY_REPLY__STATE__FINISHED :
		  j->state == JOURNAL_RUNNING ? SANDBOX__QUERY_REPLY__STATE__RUNNING : SANDBOX__QUERY_REPLY__STATE__UNKNOWN;
	if (j->result_json != NULL) {
		r.exec_id = (char *)exec_id;
		r.generation = j->generation;
		r.result_json = j->result_json;
		q.result = &r;
	}
	if (j->receipt_text != NULL) {
		rc.exec_id = (char *)exec_id;
		rc.generation = j->generation;
		rc.receipt_json.data = (uint8_t *)j->receipt_text;
		rc.receipt_json.len = strlen(j->receipt_text);
		q.receipt = &rc;
	}
	env.body_case = SANDBOX__ENVELOPE__BODY_QUERY_REPLY;
	env.query_reply = &q;
	return send_envelope(c, &env);
}

static int handle_query(struct conn *c, const char *exec_id)
{
	struct journal_entry j;
	struct sb_err err;
	int rc;

	/* The id names a journal file: the same rule as an Exec's (common/names.c). */
	if (!exec_id_valid(exec_id))
		return send_error(c, SANDBOX__ERROR_CODE__ERR_MALFORMED, "query refused: invalid exec id");
	if (journal_lookup(&c->agent->journal, exec_id, &j, &err) < 0)
		return send_error(c, SANDBOX__ERROR_CODE__ERR_INTERNAL, "query: %s", err.msg);
	rc = send_query_reply(c, exec_id, &j);
	journal_entry_free(&j);
	return rc;
}

static int handle_cancel(struct conn *c, const char *exec_id)
{
	struct agent *a = c->agent;
	uint64_t one = 1;
	bool hit;

	pthread_mutex_lock(&a->lock);
	hit = a->busy && strcmp(a->running_id, exec_id) == 0;
	if (hit && write(a->cancel_efd, &one, sizeof one) != sizeof one)
		hit = false;
	pthread_mutex_unlock(&a->lock);
	if (!hit)
		return send_error(c, SANDBOX__ERROR_CODE__ERR_UNKNOWN_EXEC, "cancel: exec '%s' is not running", exec_id);
	sb_info("exec %s: cancel delivered", exec_id);
	/* The answer is the exec's state as the cancel found it; its Result follows on the exec's
	 * own connection (or from a Query). */
	return handle_query(c, exec_id);
}

static int handle_ping(struct conn *c, uint64_t token)
{
	Sandbox__Envelope env = SANDBOX__ENVELOPE__INIT;
	Sandbox__Pong p = SANDBOX__PONG__INIT;

	p.token = token;
	env.body_case = SANDBOX__ENVELOPE__BODY_PONG;
	env.pong = &p;
	return send_envelope(c, &env);
}

/* ---- a connection ---- */

static int hello_exchange(struct conn *c)
{
	Sandbox__Envelope *in = NULL, out = SANDBOX__ENVELOPE__INIT;
	Sandbox__Hello h = SANDBOX__HELLO__INIT;
	struct sb_err err;
	uint32_t version;
	int rc = proto_recv(&c->stream, SERVE_FRAME_CAP, &in, &err);

	if (rc < 0 && (err.errnum == EBADMSG || err.errnum == EMSGSIZE))
		send_error(c, SANDBOX__ERROR_CODE__ERR_MALFORMED, "%s", err.msg);
	if (rc <= 0 || in->body_case != SANDBOX__ENVELOPE__BODY_HELLO) {
		if (rc > 0)
			send_error(c, SANDBOX__ERROR_CODE__ERR_MALFORMED, "the first message must be a Hello, not %s",
				   proto_body_name(in->body_case));
		proto_free(in);
		return -1;
	}
	rc = proto_negotiate(in->hello, &version, &err);
	proto_free(in);
	if (rc < 0) {
		send_error(c, SANDBOX__ERROR_CODE__ERR_VERSION, "%s", err.msg);
		return -1;
	}
	proto_hello_init(&h);
	h.build = SERVE_BUILD;
	h.features_json = c->agent->features_json;
	h.has_generation = true;
	h.generation = c->agent->generation;
	out.body_case = SANDBOX__ENVELOPE__BODY_HELLO;
	out.hello = &h;
	return send_envelope(c, &out);
}

static int conn_dispatch(struct conn *c, Sandbox__Envelope *m)
{
	switch (m->body_case) {
	case SANDBOX__ENVELOPE__BODY_EXEC:
		return handle_exec(c, m->exec);
	case SANDBOX__ENVELOPE__BODY_CANCEL:
		return handle_cancel(c, m->cancel->exec_id);
	case SANDBOX__ENVELOPE__BODY_QUERY:
		return handle_query(c, m->query->exec_id);
	case SANDBOX__ENVELOPE__BODY_PING:
		return handle_ping(c, m->ping->token);
	default:
		return send_error(c, SANDBOX__ERROR_CODE__ERR_MALFORMED, "unexpected %s message",
				  proto_body_name(m->body_case));
	}
}

static void conn_serve(struct conn *c)
{
	for (;;) {
		Sandbox__Envelope *m = NULL;
		struct sb_err err;
		int rc;

		tls_session_set_deadline(c->tls, tls_deadline_after(SERVE_IDLE_MS));
		rc = proto_recv(&c->stream, SERVE_FRAME_CAP, &m, &err);
		if (rc == 0)
			return;
		if (rc < 0 && err.errnum == EBADMSG) {
			/* Still at a frame boundary: answer and keep the connection. */
			if (send_error(c, SANDBOX__ERROR_CODE__ERR_MALFORMED, "%s", err.msg) < 0)
				return;
			continue;
		}
		if (rc < 0) {
			if (err.errnum == EMSGSIZE)
				send_error(c, SANDBOX__ERROR_CODE__ERR_MALFORMED, "%s", err.msg);
			sb_info("connection closed: %s", err.msg);
			return;
		}
		tls_session_set_deadline(c->tls, TLS_NO_DEADLINE);
		rc = conn_dispatch(c, m);
		proto_free(m);
		if (rc < 0)
			return;
	}
}

static void *conn_thread(void *arg)
{
	struct conn *c = arg;
	struct agent *a = c->agent;
	struct sb_err err;

	if (tls_session_open(a->tls, c->fd, tls_deadline_after(SERVE_HANDSHAKE_MS), &c->tls, &err) < 0) {
		sb_warn("refused a connection: %s", err.msg);
	} else {
		tls_session_stream(c->tls, &c->stream);
		if (hello_exchange(c) == 0)
			conn_serve(c);
		tls_session_close(c->tls, &err);
	}
	close(c->fd);
	free(c);
	pthread_mutex_lock(&a->lock);
	a->connections--;
	pthread_mutex_unlock(&a->lock);
	return NULL;
}

static void conn_start(struct agent *a, int fd)
{
	struct conn *c = calloc(1, sizeof *c);
	struct sb_err err;
	bool room;

	pthread_mutex_lock(&a->lock);
	room = a->connections < SERVE_MAX_CONNECTIONS;
	if (room && c != NULL)
		a->connections++;
	pthread_mutex_unlock(&a->lock);
	if (!room || c == NULL) {
		sb_warn("refused a connection: %s", c ? "too many connections" : "out of memory");
		free(c);
		close(fd);
		return;
	}
	c->agent = a;
	c->fd = fd;
	if (sb_thread_detached(conn_thread, c, &err) < 0) {
		sb_error("refused a connection: %s", err.msg);
		close(fd);
		free(c);
		pthread_mutex_lock(&a->lock);
		a->connections--;
		pthread_mutex_unlock(&a->lock);
	}
}

/* ---- the listener ---- */

static int listen_unix(const char *path, struct sb_err *err)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	struct stat st;
	int fd;

	if (strlen(path) >= sizeof sa.sun_path)
		return sb_fail(err, ENAMETOOLONG, "socket path %s is too long", path);
	strcpy(sa.sun_path, path);
	/* A stale socket from an earlier agent is replaced; anything else is left alone. */
	if (lstat(path, &st) == 0 && S_ISSOCK(st.st_mode))
		unlink(path);
	fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return sb_fail_errno(err, "creating the unix socket");
	if (bind(fd, (struct sockaddr *)&sa, sizeof sa) < 0 || chmod(path, 0600) < 0 || listen(fd, 16) < 0) {
		sb_fail_errno(err, "listening on %s", path);
		close(fd);
		return -1;
	}
	return fd;
}

/* Numeric addresses only, parsed with inet_pton: getaddrinfo would pull glibc's NSS modules
 * into a static binary at run time. IPv6 is written [addr]:port. */
static int sockaddr_parse(const char *hostport, struct sockaddr_storage *ss, socklen_t *len, uint16_t *port,
			  struct sb_err *err)
{
	char host[INET6_ADDRSTRLEN + 2];
	const char *colon = strrchr(hostport, ':');
	struct sockaddr_in *v4 = (struct sockaddr_in *)ss;
	struct sockaddr_in6 *v6 = (struct sockaddr_in6 *)ss;
	unsigned long p;
	char *end;
	size_t hlen;

	if (colon == NULL || (hlen = (size_t)(colon - hostport)) >= sizeof host || hlen == 0)
		return sb_invalid(err, "--listen %s: expected HOST:PORT or unix:PATH", hostport);
	p = strtoul(colon + 1, &end, 10);
	if (*end != '\0' || p == 0 || p > 65535)
		return sb_invalid(err, "--listen %s: bad port", hostport);
	memcpy(host, hostport, hlen);
	host[hlen] = '\0';
	memset(ss, 0, sizeof *ss);
	*port = (uint16_t)p;
	if (host[0] == '[' && host[hlen - 1] == ']') {
		host[hlen - 1] = '\0';
		v6->sin6_family = AF_INET6;
		v6->sin6_port = htons(*port);
		*len = sizeof *v6;
		if (inet_pton(AF_INET6, host + 1, &v6->sin6_addr) == 1)
			return 0;
	} else {
		v4->sin_family = AF_INET;
		v4->sin_port = htons(*port);
		*len = sizeof *v4;
		if (inet_pton(AF_INET, host, &v4->sin_addr) == 1)
			return 0;
	}
	return sb_invalid(err, "--listen %s: the host must be a numeric address", hostport);
}

static int listen_tcp(const char *hostport, uint16_t *port, struct sb_err *err)
{
	struct sockaddr_storage ss;
	socklen_t len = 0;
	int fd, one = 1;

	if (sockaddr_parse(hostport, &ss, &len, port, err) < 0)
		return -1;
	fd = socket(ss.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0 || setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) < 0 ||
	    bind(fd, (struct sockaddr *)&ss, len) < 0 || listen(fd, 16) < 0) {
		sb_fail_errno(err, "listening on %s", hostport);
		if (fd >= 0)
			close(fd);
		return -1;
	}
	return fd;
}

/* A directory to hide from commands: it must be private to us, or hiding it is theatre. The
 * directory of a key is the one its file really lies in (follow): a Secret volume's names are
 * links into the kubelet's ..<timestamp> directory, which is what must be hidden (sealed.c). */
static int hidden_add_dirname(const char *path, bool follow, struct boundary_options *bo, struct sb_err *err)
{
	char copy[PATH_MAX], real[PATH_MAX];
	struct privdir d;

	if ((size_t)snprintf(copy, sizeof copy, "%s", path) >= sizeof copy)
		return sb_fail(err, ENAMETOOLONG, "path too long: %s", path);
	if (follow) {
		if (realpath(path, real) == NULL)
			return sb_fail_errno(err, "resolving %s", path);
		snprintf(copy, sizeof copy, "%s", dirname(real));
		snprintf(real, sizeof real, "%s", copy);
	} else if (realpath(dirname(copy), real) == NULL) {
		return sb_fail_errno(err, "resolving the directory of %s", path);
	}
	for (size_t i = 0; i < bo->n_hidden; i++)
		if (strcmp(bo->hidden[i].path, real) == 0)
			return 0;
	if (bo->n_hidden >= BOUNDARY_MAX_HIDDEN)
		return sb_fail(err, E2BIG, "too many private directories");
	/* The directory of the keys or socket: a directory of its own, ours, not writable by others
	 * (hiding / or a shared directory would break every command). */
	if (strcmp(real, "/") == 0)
		return sb_fail(err, EPERM, "%s holds the agent's keys or socket: it must be a directory of its own", path);
	if (privdir_open_readable(&d, real, err) < 0)
		return -1;
	hidden_dir_from_privdir(&bo->hidden[bo->n_hidden++], &d);
	privdir_close(&d);
	return 0;
}

static int agent_paths(struct agent *a, const struct serve_config *cfg, struct sb_err *err)
{
	char real[PATH_MAX];

	if (mkdir(cfg->state_dir, 0700) < 0 && errno != EEXIST)
		return sb_fail_errno(err, "creating state directory %s", cfg->state_dir);
	if (realpath(cfg->state_dir, real) == NULL)
		return sb_fail_errno(err, "state directory %s", cfg->state_dir);
	if (strcmp(real, "/") == 0)
		return sb_fail(err, EPERM, "the state directory must be a directory of its own, not /");
	if (privdir_open(&a->state, real, false, 022, err) < 0 ||
	    privdir_open_at(&a->receipts, &a->state, "receipts", true, 077, err) < 0 ||
	    privdir_open_at(&a->journal_dir, &a->state, "journal", true, 077, err) < 0)
		return -1;
	return journal_open(&a->journal, &a->journal_dir, &a->receipts, err);
}

static int agent_prepare(struct agent *a, struct serve_config *cfg, int *listen_fd, struct sb_err *err)
{
	static struct boundary_options bo;
	bool ok;
	json_t *features;
	uint16_t port = 0;

	a->generation = cfg->generation;
	bo.block_ports = cfg->ports;
	if (agent_paths(a, cfg, err) < 0)
		return -1;
	hidden_dir_from_privdir(&bo.hidden[bo.n_hidden++], &a->state);
	if (hidden_add_dirname(cfg->key, true, &bo, err) < 0 ||
	    (cfg->receipt_key != NULL && hidden_add_dirname(cfg->receipt_key, true, &bo, err) < 0))
		return -1;
	if (strncmp(cfg->listen, "unix:", 5) == 0) {
		if (hidden_add_dirname(cfg->listen + 5, false, &bo, err) < 0)
			return -1;
	} else {
		struct sockaddr_storage ss;
		socklen_t len;

		if (sockaddr_parse(cfg->listen, &ss, &len, &port, err) < 0)
			return -1;
		/* The agent's own port is always out of the commands' reach. */
		if (cfg->n_ports < BOUNDARY_MAX_PORTS)
			cfg->ports[cfg->n_ports++] = port;
	}
	bo.n_block_ports = cfg->n_ports;
	a->sec = secrets_alloc(err);
	/* --receipt-key: the manager's copy (a Secret on Kubernetes); else state/receipt.key. */
	if (a->sec == NULL || (cfg->receipt_key != NULL ? secrets_key_load_file(a->sec, cfg->receipt_key, err) :
			       secrets_key_load(a->sec, &a->state, err)) < 0)
		return -1;
	if (tls_config_server(&a->tls, cfg->cert, cfg->key, cfg->ca, cfg->manager_name, err) < 0)
		return -1;
	tls_config_set_peer_label(a->tls, "manager");
	features = check_report(&ok);
	a->features_json = features ? json_dumps(features, JSON_COMPACT) : NULL;
	json_decref(features);
	if (!ok)
		return sb_fail(err, EOPNOTSUPP, "the boundary cannot be established here: run `sandbox-agent check`");
	a->cancel_efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	if (a->cancel_efd < 0)
		return sb_fail_errno(err, "eventfd");
	pthread_mutex_init(&a->lock, NULL);
	/* With blocked ports, this restricts the agent itself (Landlock, connect only) for good. */
	if (boundary_prepare(&a->b, &bo, err) < 0 || prebuilt_start(&a->pre, &a->b, err) < 0)
		return -1;
	/* Listen last: a connection that succeeds means an agent that is ready to serve, never one
	 * that is still loading its keys (or about to fail doing so). */
	*listen_fd = strncmp(cfg->listen, "unix:", 5) == 0 ? listen_unix(cfg->listen + 5, err) :
							     listen_tcp(cfg->listen, &port, err);
	return *listen_fd < 0 ? -1 : 0;
}

static int serve_usage(const char *msg)
{
	fprintf(stderr, "sandbox-agent serve: %s\n"
			"usage: sandbox-agent serve --listen HOST:PORT|unix:PATH --tls-cert F --tls-key F --tls-ca F\n"
			"         --manager-name NAME --state-dir DIR [--receipt-key F] [--generation N] [--block-port PORT]...\n", msg);
	return CLI_USAGE;
}

static int serve_parse(struct serve_config *cfg, int argc, char **argv)
{
	static const struct option longopts[] = {
		{ "listen", required_argument, NULL, 'l' },   { "tls-cert", required_argument, NULL, 'c' },
		{ "tls-key", required_argument, NULL, 'k' },  { "tls-ca", required_argument, NULL, 'a' },
		{ "manager-name", required_argument, NULL, 'm' }, { "state-dir", required_argument, NULL, 's' },
		{ "block-port", required_argument, NULL, 'p' }, { "generation", required_argument, NULL, 'g' },
		{ "receipt-key", required_argument, NULL, 'r' },
		{ NULL, 0, NULL, 0 },
	};
	unsigned long v;
	char *end;
	struct sb_err err;
	int opt;

	opts_reset();
	while ((opt = opts_next(argc, argv, "", longopts, NULL, &err)) != OPTS_END) {
		switch (opt) {
		case 'l': cfg->listen = optarg; break;
		case 'c': cfg->cert = optarg; break;
		case 'k': cfg->key = optarg; break;
		case 'a': cfg->ca = optarg; break;
		case 'm': cfg->manager_name = optarg; break;
		case 's': cfg->state_dir = optarg; break;
		case 'r': cfg->receipt_key = optarg; break;
		case 'p':
			v = strtoul(optarg, &end, 10);
			if (*end != '\0' || v == 0 || v > 65535 || cfg->n_ports >= BOUNDARY_MAX_PORTS - 1)
				return serve_usage("--block-port: expected a port from 1 to 65535 (at most 63)");
			cfg->ports[cfg->n_ports++] = (uint16_t)v;
			break;
		case 'g':
			cfg->generation = strtoull(optarg, &end, 10);
			if (*end != '\0' || optarg[0] < '0' || optarg[0] > '9')
				return serve_usage("--generation: expected a number");
			break;
		default:
			return serve_usage(err.msg);
		}
	}
	if (!cfg->listen || !cfg->cert || !cfg->key || !cfg->ca || !cfg->manager_name || !cfg->state_dir)
		return serve_usage("--listen, --tls-cert, --tls-key, --tls-ca, --manager-name and --state-dir are required");
	if (optind != argc)
		return serve_usage("unexpected arguments");
	return 0;
}

/* An exec's result passes through a few buffers of up to 2 MiB each (capture, render, JSON, frame),
 * allocated and freed once per exec, on the connection's thread. glibc would serve them from a
 * per-thread arena and, after the first free of a mapped chunk, raise its mmap threshold so that
 * later ones stay in that arena's heap: the agent then keeps its peak for good (8-9 MB after one
 * flood). A fixed threshold keeps every large buffer a mapping of its own, returned whole on
 * free; one arena because execs run one at a time. Refusals change nothing but memory use. */
static void memory_bound(void)
{
	(void)mallopt(M_MMAP_THRESHOLD, 64 * 1024);
	(void)mallopt(M_ARENA_MAX, 1);
}

int cli_serve(int argc, char **argv)
{
	static struct agent a;
	struct serve_config cfg = { 0 };
	struct sb_err err;
	int fd = -1, rc;

	if ((rc = serve_parse(&cfg, argc, argv)) != 0)
		return rc;
	/* Writes to a connection the manager closed must fail with EPIPE, not kill the agent.
	 * init puts every disposition back to the default before a command exists. */
	signal(SIGPIPE, SIG_IGN);
	memory_bound();
	sb_err_clear(&err);
	if (agent_prepare(&a, &cfg, &fd, &err) < 0) {
		sb_error("cannot serve: %s", err.msg);
		fprintf(stderr, "sandbox-agent serve: %s\n", err.msg);
		return CLI_FAILED;
	}
	sb_info("serving on %s for %s, generation %llu", cfg.listen, cfg.manager_name,
		(unsigned long long)cfg.generation);
	for (;;) {
		int conn = accept4(fd, NULL, NULL, SOCK_CLOEXEC);

		if (conn < 0) {
			if (errno != EINTR && errno != ECONNABORTED)
				sb_warn("accept: %s", strerror(errno));
			if (errno == EMFILE || errno == ENFILE)
				sleep(1);
			continue;
		}
		/* Frames go out as two TLS records (header, body): without TCP_NODELAY, Nagle
		 * would hold the second for up to 40 ms. Not a socket option on unix sockets. */
		if (strncmp(cfg.listen, "unix:", 5) != 0 &&
		    setsockopt(conn, IPPROTO_TCP, TCP_NODELAY, &(int){ 1 }, sizeof(int)) < 0)
			sb_warn("TCP_NODELAY: %s", strerror(errno));
		conn_start(&a, conn);
	}
}
