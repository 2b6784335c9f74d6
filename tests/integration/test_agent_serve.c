/* Integration tests of the agent protocol end to end: the REAL `sandbox-agent serve` ($SANDBOX_AGENT)
 * behind mutual TLS on a unix socket, driven by the manager's agent client (manager/agentlink/agent_client.c),
 * plus a scripted fake agent for replies a real agent never sends. Every refusal is followed by a
 * request that must still succeed: the agent keeps serving. Each wait is bounded; the whole file
 * runs in well under a minute. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>
#include <errno.h>
#include <fcntl.h>
#include <dirent.h>
#include <ftw.h>
#include <sched.h>
#include <jansson.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>

#include <mbedtls/net_sockets.h>
#include <mbedtls/ssl.h>

#include "agent_client.h"
#include "agent_relay.h"
#include "ca.h"
#include "clock.h"
#include "fdio.h"
#include "frame.h"
#include "nsspawn.h"
#include "pathfmt.h"
#include "proto.h"
#include "random.h"
#include "receipt_mac.h"
#include "tls.h"
#include "testutil.h"

#define AGENT_NAME "sandbox-s1.g1.agent"
#define GENERATION 1
#define STEP_MS 10000        /* bound on any single connect or request that runs no command */
#define READY_MS 15000       /* bound on the agent's start (ASan builds start slowly) */

extern char **environ;

struct fixture {
	char base[64], pki[128], state[128], sockdir[128], sock[192], work[128], log[128], fake_sock[192];
	char address[200], fake_address[200];
	uint8_t key[RECEIPT_KEY_BYTES];
	pid_t agent;
	struct tls_config *client;  /* the manager: its certificate, expects AGENT_NAME */
	const char *agent_bin;      /* or NULL: SANDBOX_AGENT */
};

/* ---------- small helpers ---------- */

static int64_t step_deadline(void)
{
	return clock_deadline_after(STEP_MS);
}

static void path_join(char *out, size_t len, const char *dir, const char *name)
{
	assert_true((size_t)snprintf(out, len, "%s/%s", dir, name) < len);
}

static void sleep_ms(int ms)
{
	poll(NULL, 0, ms);
}

/* The agent's log, for failure messages and for the refusals it must record. */
static char *log_read(const struct fixture *f)
{
	static char buf[256 * 1024];
	int fd = open(f->log, O_RDONLY | O_CLOEXEC);
	ssize_t n = fd >= 0 ? read(fd, buf, sizeof buf - 1) : -1;

	if (fd >= 0)
		close(fd);
	buf[n > 0 ? n : 0] = '\0';
	return buf;
}

/* Waits (bounded) until the agent's log holds want: its connection threads log after we return. */
static void log_expect(const struct fixture *f, const char *want)
{
	for (int64_t end = clock_mono_ms() + 5000; clock_mono_ms() < end; sleep_ms(20))
		if (strstr(log_read(f), want) != NULL)
			return;
	fail_msg("the agent's log lacks '%s'; log:\n%s", want, log_read(f));
}

static json_t *json_parse(const char *text)
{
	json_error_t jerr;
	json_t *obj = json_loads(text, 0, &jerr);

	if (!json_is_object(obj))
		fail_msg("not a JSON object (%s): %s", jerr.text, text);
	return obj;
}

static const char *jstr(json_t *obj, const char *key)
{
	const char *v = json_string_value(json_object_get(obj, key));

	if (v == NULL)
		fail_msg("no string member %s", key);
	return v;
}

/* ---------- the fixture: a CA, certificates, the real agent ---------- */

static void issue(struct ca *ca, const char *dir, const char *file, const char *dns, enum ca_usage usage,
		  time_t not_before, time_t not_after)
{
	struct ca_leaf leaf = { .dns_name = dns, .usage = usage, .not_before = not_before, .not_after = not_after };
	struct sb_err err;

	must(ca_issue_leaf(ca, &leaf, dir, file, &err), &err, "issuing a certificate");
}

static void pki_make(struct fixture *f)
{
	struct ca *ca, *other;
	struct sb_err err;
	char dir[160];
	time_t now = time(NULL);

	path_join(dir, sizeof dir, f->base, "ca");
	must(ca_open(dir, &ca, &err), &err, "ca_open");
	path_join(dir, sizeof dir, f->base, "other-ca");
	must(ca_open(dir, &other, &err), &err, "ca_open (other CA)");
	must(ca_write_cert(ca, f->pki, "ca.crt", &err), &err, "ca_write_cert");
	issue(ca, f->pki, "agent", AGENT_NAME, CA_USAGE_SERVER, 0, 0);
	issue(ca, f->pki, "manager", CA_MANAGER_NAME, CA_USAGE_CLIENT, 0, 0);
	issue(ca, f->pki, "wrong-name", "other.infra-sandbox", CA_USAGE_CLIENT, 0, 0);
	issue(ca, f->pki, "expired", CA_MANAGER_NAME, CA_USAGE_CLIENT, now - 2 * 86400, now - 86400);
	issue(other, f->pki, "foreign", CA_MANAGER_NAME, CA_USAGE_CLIENT, 0, 0);
	ca_free(ca);
	ca_free(other);
}

/* A manager-side configuration presenting pki/<name>.crt and expecting the server name. */
static struct tls_config *client_config(const struct fixture *f, const char *name, const char *expect)
{
	char crt[256], key[256], ca[256], file[64];
	struct tls_config *c;
	struct sb_err err;

	snprintf(file, sizeof file, "%s.crt", name);
	path_join(crt, sizeof crt, f->pki, file);
	snprintf(file, sizeof file, "%s.key", name);
	path_join(key, sizeof key, f->pki, file);
	path_join(ca, sizeof ca, f->pki, "ca.crt");
	must(tls_config_client(&c, crt, key, ca, expect, &err), &err, "client configuration");
	tls_config_set_peer_label(c, "sandbox-agent");
	return c;
}

/* The receipt key, written by the manager before the agent starts, as in production. */
static void receipt_key_write(struct fixture *f)
{
	char path[192];
	struct sb_err err;

	must(sb_random_bytes(f->key, sizeof f->key, &err), &err, "random key");
	path_join(path, sizeof path, f->state, "receipt.key");
	must(fd_file_create_path(path, 0600, (uid_t)-1, (gid_t)-1, f->key, sizeof f->key, &err), &err, "receipt key");
}

static void agent_spawn(struct fixture *f)
{
	const char *bin = f->agent_bin ? f->agent_bin : getenv("SANDBOX_AGENT");
	char crt[256], key[256], ca[256], listen_arg[256], *argv[20];
	posix_spawn_file_actions_t fa;
	int i = 0;

	if (bin == NULL || bin[0] == '\0')
		fail_msg("SANDBOX_AGENT is not set: run through `make test` or set it to build/sandbox-agent");
	path_join(crt, sizeof crt, f->pki, "agent.crt");
	path_join(key, sizeof key, f->pki, "agent.key");
	path_join(ca, sizeof ca, f->pki, "ca.crt");
	snprintf(listen_arg, sizeof listen_arg, "unix:%s", f->sock);
	argv[i++] = (char *)bin;
	argv[i++] = "serve";
	argv[i++] = "--listen";
	argv[i++] = listen_arg;
	argv[i++] = "--tls-cert";
	argv[i++] = crt;
	argv[i++] = "--tls-key";
	argv[i++] = key;
	argv[i++] = "--tls-ca";
	argv[i++] = ca;
	argv[i++] = "--manager-name";
	argv[i++] = CA_MANAGER_NAME;
	argv[i++] = "--state-dir";
	argv[i++] = f->state;
	argv[i++] = "--generation";
	argv[i++] = "1";
	argv[i] = NULL;
	assert_int_equal(posix_spawn_file_actions_init(&fa), 0);
	assert_int_equal(posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0), 0);
	assert_int_equal(posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0), 0);
	assert_int_equal(posix_spawn_file_actions_addopen(&fa, 2, f->log, O_WRONLY | O_CREAT | O_APPEND, 0600), 0);
	if (posix_spawn(&f->agent, bin, &fa, NULL, argv, environ) != 0)
		fail_msg("cannot start %s: %s", bin, strerror(errno));
	posix_spawn_file_actions_destroy(&fa);
}

/* A plain (not TLS) connection to a unix socket; -1 with errno. */
static int unix_connect(const char *path)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);

	if (fd < 0)
		return -1;
	snprintf(sa.sun_path, sizeof sa.sun_path, "%s", path);
	if (connect(fd, (struct sockaddr *)&sa, sizeof sa) < 0) {
		int e = errno;

		close(fd);
		errno = e;
		return -1;
	}
	return fd;
}

/* Ready when a full TLS + Hello + Ping succeeds; fails early if the agent exited. */
static void agent_wait_ready(struct fixture *f)
{
	struct agent_conn *c;
	struct sb_err err;
	int status;

	for (int64_t end = clock_mono_ms() + READY_MS; clock_mono_ms() < end; sleep_ms(25)) {
		if (waitpid(f->agent, &status, WNOHANG) == f->agent) {
			f->agent = 0;
			fail_msg("sandbox-agent serve exited (status %d) before serving; log:\n%s", status, log_read(f));
		}
		if (access(f->sock, F_OK) < 0)
			continue;
		if (agent_connect(f->client, f->address, step_deadline(), &c, &err) == 0) {
			int rc = agent_ping(c, step_deadline(), &err);

			agent_close(c);
			if (rc == 0)
				return;
		}
	}
	fail_msg("sandbox-agent serve did not serve within %d ms; log:\n%s", READY_MS, log_read(f));
}

static void dir_make(char *out, size_t len, const char *base, const char *name)
{
	path_join(out, len, base, name);
	assert_int_equal(mkdir(out, 0700), 0);
}

static int setup(void **state)
{
	struct fixture *f = calloc(1, sizeof *f);

	assert_non_null(f);
	snprintf(f->base, sizeof f->base, "/tmp/test_agent_serve.XXXXXX");
	assert_non_null(mkdtemp(f->base));  /* mode 0700 */
	dir_make(f->pki, sizeof f->pki, f->base, "pki");
	dir_make(f->state, sizeof f->state, f->base, "state");
	dir_make(f->sockdir, sizeof f->sockdir, f->base, "sock");
	dir_make(f->work, sizeof f->work, f->base, "work");
	path_join(f->sock, sizeof f->sock, f->sockdir, "agent.sock");
	path_join(f->fake_sock, sizeof f->fake_sock, f->base, "fake.sock");
	path_join(f->log, sizeof f->log, f->base, "agent.log");
	snprintf(f->address, sizeof f->address, "unix:%s", f->sock);
	snprintf(f->fake_address, sizeof f->fake_address, "unix:%s", f->fake_sock);
	pki_make(f);
	receipt_key_write(f);
	f->client = client_config(f, "manager", AGENT_NAME);
	*state = f;
	agent_spawn(f);
	agent_wait_ready(f);
	return 0;
}

static void agent_stop(struct fixture *f)
{
	int status;

	if (f->agent <= 0)
		return;
	kill(f->agent, SIGTERM);
	for (int64_t end = clock_mono_ms() + 5000; clock_mono_ms() < end; sleep_ms(20))
		if (waitpid(f->agent, &status, WNOHANG) == f->agent) {
			f->agent = 0;
			return;
		}
	kill(f->agent, SIGKILL);
	waitpid(f->agent, &status, 0);
	f->agent = 0;
}

static int teardown(void **state)
{
	struct fixture *f = *state;

	if (f == NULL)
		return 0;
	agent_stop(f);
	tls_config_free(f->client);
	if (getenv("TEST_AGENT_SERVE_KEEP") != NULL)
		fprintf(stderr, "kept %s\n", f->base);
	else
		test_rmtree(f->base);
	free(f);
	return 0;
}

/* ---------- requests through the manager's client ---------- */

static struct agent_conn *conn_open(struct fixture *f)
{
	struct agent_conn *c;
	struct sb_err err;

	if (agent_connect(f->client, f->address, step_deadline(), &c, &err) < 0)
		fail_msg("the manager cannot reach the agent: %s; log:\n%s", err.msg, log_read(f));
	return c;
}

/* The agent still serves the real manager. */
static void still_serving(struct fixture *f)
{
	struct agent_conn *c = conn_open(f);
	struct sb_err err;

	must(agent_ping(c, step_deadline(), &err), &err, "ping after a refusal");
	agent_close(c);
}

static void exec_request(struct fixture *f, struct agent_exec_request *req, const char *id, const char *command)
{
	struct sb_err err;

	memset(req, 0, sizeof *req);
	req->exec_id = id;
	req->generation = GENERATION;
	must(sb_random_bytes(req->nonce, sizeof req->nonce, &err), &err, "nonce");
	req->command = command;
	req->cwd = f->work;
	req->timeout_seconds = 30;
	req->output_limit = 65536;
	req->receipt_key = f->key;
}

/* The receipt verifies with exactly this exec's nonce, id and generation, and with nothing else. */
static void receipt_check(struct fixture *f, const struct agent_reply *r, const struct agent_exec_request *req)
{
	char nonce_hex[2 * AGENT_NONCE_BYTES + 1], other[2 * AGENT_NONCE_BYTES + 1];
	struct sb_err err;
	json_t *obj;

	assert_non_null(r->receipt);
	assert_true(r->receipt_verified);
	sb_hex_encode(req->nonce, sizeof req->nonce, nonce_hex);
	obj = receipt_mac_verify(r->receipt, r->receipt_len, f->key, nonce_hex, req->exec_id, GENERATION, &err);
	if (obj == NULL)
		fail_msg("receipt of %s does not verify: %s", req->exec_id, err.msg);
	json_decref(obj);
	memcpy(other, nonce_hex, sizeof other);
	other[0] = other[0] == '0' ? '1' : '0';
	assert_null(receipt_mac_verify(r->receipt, r->receipt_len, f->key, other, req->exec_id, GENERATION, &err));
	assert_null(receipt_mac_verify(r->receipt, r->receipt_len, f->key, nonce_hex, req->exec_id, 0, &err));
}

/* Polls Query until the exec reaches state (bounded); the reply is left in *out. */
static void query_until(struct fixture *f, struct agent_conn *c, const struct agent_expect *want,
			enum agent_exec_state state, struct agent_reply *out)
{
	struct sb_err err;

	for (int64_t end = clock_mono_ms() + STEP_MS; clock_mono_ms() < end; sleep_ms(20)) {
		must(agent_query(c, want, step_deadline(), out, &err), &err, "query");
		if (out->state == state)
			return;
		agent_reply_free(out);
	}
	fail_msg("exec %s did not reach state %d in time; log:\n%s", want->exec_id, (int)state, log_read(f));
}

/* ---------- a raw TLS session, for what the client API would never send ---------- */

struct raw {
	int fd;
	struct tls_session *tls;
	struct sb_stream s;
};

static void raw_open(struct fixture *f, struct raw *r, bool hello)
{
	Sandbox__Envelope out = SANDBOX__ENVELOPE__INIT, *in;
	Sandbox__Hello h;
	struct sb_err err;

	r->fd = unix_connect(f->sock);
	assert_true(r->fd >= 0);
	must(tls_session_open(f->client, r->fd, step_deadline(), &r->tls, &err), &err, "raw TLS session");
	tls_session_set_deadline(r->tls, step_deadline());
	tls_session_stream(r->tls, &r->s);
	if (!hello)
		return;
	proto_hello_init(&h);
	out.body_case = SANDBOX__ENVELOPE__BODY_HELLO;
	out.hello = &h;
	must(proto_send(&r->s, &out, SB_FRAME_CAP_DEFAULT, &err), &err, "raw hello");
	assert_int_equal(proto_recv(&r->s, SB_FRAME_CAP_DEFAULT, &in, &err), 1);
	assert_int_equal(in->body_case, SANDBOX__ENVELOPE__BODY_HELLO);
	proto_free(in);
}

static void raw_close(struct raw *r)
{
	struct sb_err err;

	tls_session_close(r->tls, &err);
	close(r->fd);
}

/* The next message must be an Error with this code whose text holds want. */
static void raw_expect_error(struct raw *r, uint32_t code, const char *want)
{
	Sandbox__Envelope *in;
	struct sb_err err;

	if (proto_recv(&r->s, SB_FRAME_CAP_DEFAULT, &in, &err) != 1)
		fail_msg("no answer: %s (%s)", err.msg, tls_session_last_error(r->tls));
	if (in->body_case != SANDBOX__ENVELOPE__BODY_ERROR)
		fail_msg("expected an error, got %s", proto_body_name(in->body_case));
	assert_int_equal(in->error->code, code);
	assert_contains(in->error->message, want);
	proto_free(in);
}

static void raw_ping(struct raw *r, uint64_t token)
{
	Sandbox__Envelope out = SANDBOX__ENVELOPE__INIT, *in;
	Sandbox__Ping p = SANDBOX__PING__INIT;
	struct sb_err err;

	p.token = token;
	out.body_case = SANDBOX__ENVELOPE__BODY_PING;
	out.ping = &p;
	must(proto_send(&r->s, &out, SB_FRAME_CAP_DEFAULT, &err), &err, "raw ping");
	assert_int_equal(proto_recv(&r->s, SB_FRAME_CAP_DEFAULT, &in, &err), 1);
	assert_int_equal(in->body_case, SANDBOX__ENVELOPE__BODY_PONG);
	assert_int_equal(in->pong->token, token);
	proto_free(in);
}

/* ---------- round trips ---------- */

static void test_hello_ping_query_cancel(void **state)
{
	struct fixture *f = *state;
	struct agent_conn *c = conn_open(f);
	const struct agent_peer *peer = agent_conn_peer(c);
	struct agent_expect want = { .exec_id = "never-ran", .generation = GENERATION };
	struct agent_reply r;
	struct sb_err err;
	json_t *features;

	/* Hello: version, build, generation and the `check` report. */
	assert_int_equal(peer->version, SB_PROTO_VERSION_MAX);
	assert_true(peer->has_generation);
	assert_int_equal(peer->generation, GENERATION);
	assert_contains(peer->build, "sandbox-agent");
	assert_non_null(peer->features_json);
	features = json_parse(peer->features_json);
	assert_true(json_is_true(json_object_get(features, "ok")));
	json_decref(features);
	/* Ping / Pong, twice on one connection. */
	must(agent_ping(c, step_deadline(), &err), &err, "ping");
	must(agent_ping(c, step_deadline(), &err), &err, "second ping");
	/* Query of an exec the agent never saw. */
	must(agent_query(c, &want, step_deadline(), &r, &err), &err, "query");
	assert_int_equal(r.state, AGENT_EXEC_UNKNOWN);
	assert_null(r.result_json);
	agent_reply_free(&r);
	/* Cancel of an exec that is not running. */
	assert_int_equal(agent_cancel(f->client, f->address, "never-ran", step_deadline(), &r, &err), -1);
	assert_int_equal(r.agent_error, SANDBOX__ERROR_CODE__ERR_UNKNOWN_EXEC);
	assert_int_equal(err.errnum, ENOENT);
	assert_contains(err.msg, "not running");
	must(agent_ping(c, step_deadline(), &err), &err, "ping after the refusals");
	agent_close(c);
}

static void test_exec_round_trip(void **state)
{
	struct fixture *f = *state;
	struct agent_conn *c = conn_open(f);
	struct agent_exec_request req;
	struct agent_reply r;
	struct sb_err err;
	json_t *res;

	exec_request(f, &req, "round-trip", "echo hi; exit 3");
	if (agent_exec(c, &req, step_deadline(), &r, &err) < 0)
		fail_msg("exec: %s; log:\n%s", err.msg, log_read(f));
	assert_true(r.dispatched);
	assert_int_equal(r.state, AGENT_EXEC_FINISHED);
	res = json_parse(r.result_json);
	assert_string_equal(jstr(res, "exec_id"), "round-trip");
	assert_int_equal(json_integer_value(json_object_get(res, "generation")), GENERATION);
	assert_string_equal(jstr(res, "status"), "exited");
	assert_int_equal(json_integer_value(json_object_get(res, "exit_code")), 3);
	assert_string_equal(jstr(res, "stdout"), "hi\n");
	assert_true(json_is_true(json_object_get(json_object_get(res, "receipt"), "verified")));
	json_decref(res);
	receipt_check(f, &r, &req);
	agent_reply_free(&r);
	/* The same connection serves the next exec. */
	exec_request(f, &req, "round-trip-2", "true");
	must(agent_exec(c, &req, step_deadline(), &r, &err), &err, "second exec");
	receipt_check(f, &r, &req);
	agent_reply_free(&r);
	agent_close(c);
}

/* ---------- live output: the sender kept per connection (live_tap.c) ---------- */

struct live_got {
	char out[64];
	uint64_t end;   /* just past the last stdout byte received */
	bool gap;       /* a chunk that did not start where the last one ended */
};

static void live_record(void *ctx, int stream, uint64_t offset, const uint8_t *data, size_t len)
{
	struct live_got *g = ctx;

	if (stream != 0)
		return;
	if (offset != g->end || offset + len >= sizeof g->out) {
		g->gap = true;
		return;
	}
	memcpy(g->out + offset, data, len);
	g->end = offset + len;
}

/* The agent's threads down to at most want (a closed connection's thread ends after the close),
 * asked again until the step's deadline. */
static int agent_threads_settled(const struct fixture *f, int want)
{
	int n = test_thread_count(f->agent);

	for (int64_t end = step_deadline(); n > want && clock_mono_ms() < end; sleep_ms(10))
		n = test_thread_count(f->agent);
	return n;
}

/* Connections come and go, each with two execs that ask for live output: each exec's chunks are its
 * own from offset 0, and once the connections are closed the agent has the threads it had before
 * (each connection's sender joined at its end, never left behind). */
static void test_live_output_connections_come_and_go(void **state)
{
	struct fixture *f = *state;
	struct agent_exec_request req;
	struct agent_reply r;
	struct sb_err err;
	int base;

	/* With no connection open (the ping's thread may still be ending: at most one more). */
	still_serving(f);
	base = test_thread_count(f->agent);
	for (int round = 0; round < 6; round++) {
		struct agent_conn *c = conn_open(f);

		for (int i = 0; i < 2; i++) {
			struct live_got g = { 0 };
			char id[64], cmd[64], want[48];

			snprintf(id, sizeof id, "live-%d-%d", round, i);
			snprintf(want, sizeof want, "exec %d of %d\n", i, round);
			snprintf(cmd, sizeof cmd, "printf 'exec %d of %d\\n'", i, round);
			exec_request(f, &req, id, cmd);
			req.on_output = live_record;
			req.output_ctx = &g;
			must(agent_exec(c, &req, step_deadline(), &r, &err), &err, "exec with live output");
			assert_int_equal(r.state, AGENT_EXEC_FINISHED);
			agent_reply_free(&r);
			assert_false(g.gap);
			assert_int_equal(g.end, strlen(want));
			assert_memory_equal(g.out, want, strlen(want));
		}
		agent_close(c);
	}
	assert_in_range(agent_threads_settled(f, base), 1, base);
}

/* ---------- NetAccept: policy proxy through the agent's link (serve_net.c, agent_relay.c) ---------- */

#define NET_PORT 3159 /* the last of the agent's ports (SERVE_NET_PORTS from 3128): the host's loopback */

/* A port off the proxy's and the edges' is refused, and the agent still serves; the relay of one
 * fails closed (no listener left behind). */
static void test_net_accept_port_refused(void **state)
{
	struct fixture *f = *state;
	struct agent_conn *c = conn_open(f);
	struct agent_relay *r = NULL;
	char path[220];
	struct sb_err err;
	int fd = -1;

	assert_int_equal(agent_net_accept(c, 80, step_deadline(), &err), -1);
	assert_contains(err.msg, "not one of the proxy's or the edges'");
	agent_close(c);
	path_join(path, sizeof path, f->base, "net-80.sock");
	assert_int_equal(agent_relay_start(f->client, f->address, 80, path, &fd, &r, &err), -1);
	assert_null(r);
	assert_int_equal(fd, -1);
	assert_int_equal(access(path, F_OK), -1);
	still_serving(f);
}

/* A connection to the agent's 127.0.0.1:NET_PORT comes out of the manager's listener with its bytes
 * both ways, and a half-close through; the relay's stop ends it. */
static void test_net_relay_round_trip(void **state)
{
	struct fixture *f = *state;
	struct agent_relay *r = NULL;
	struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = htons(NET_PORT),
				  .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	char path[220], buf[64];
	struct sb_err err;
	int lfd = -1, cfd, mfd;
	ssize_t n;

	path_join(path, sizeof path, f->base, "net.sock");
	if (agent_relay_start(f->client, f->address, NET_PORT, path, &lfd, &r, &err) < 0) {
		if (strstr(err.msg, "Address already in use") != NULL)
			skip();
		fail_msg("%s; log:\n%s", err.msg, log_read(f));
	}
	cfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	assert_int_equal(connect(cfd, (struct sockaddr *)&sa, sizeof sa), 0);
	assert_int_equal(fd_write_all(cfd, "from the sandbox", 16), 0);
	shutdown(cfd, SHUT_WR);
	{
		struct pollfd p = { .fd = lfd, .events = POLLIN };

		if (poll(&p, 1, STEP_MS) != 1)
			fail_msg("no connection came out of the relay within %d ms; log:\n%s", STEP_MS, log_read(f));
	}
	mfd = accept4(lfd, NULL, NULL, SOCK_CLOEXEC);
	assert_true(mfd >= 0);
	n = read(mfd, buf, sizeof buf);
	assert_int_equal(n, 16);
	assert_memory_equal(buf, "from the sandbox", 16);
	assert_int_equal(read(mfd, buf, sizeof buf), 0); /* the half-close came through */
	assert_int_equal(fd_write_all(mfd, "from the proxy", 14), 0);
	close(mfd);
	n = read(cfd, buf, sizeof buf);
	assert_int_equal(n, 14);
	assert_memory_equal(buf, "from the proxy", 14);
	assert_int_equal(read(cfd, buf, sizeof buf), 0);
	close(cfd);
	close(lfd);
	agent_relay_stop(&r);
	assert_null(r);
	assert_int_equal(access(path, F_OK), -1);
	still_serving(f);
}

static void test_hello_refusals(void **state)
{
	struct fixture *f = *state;
	Sandbox__Envelope out = SANDBOX__ENVELOPE__INIT;
	Sandbox__Hello h;
	Sandbox__Ping p = SANDBOX__PING__INIT;
	struct sb_err err;
	struct raw r;

	/* A Hello with no version in common. */
	raw_open(f, &r, false);
	proto_hello_init(&h);
	h.min_version = 99;
	h.max_version = 100;
	out.body_case = SANDBOX__ENVELOPE__BODY_HELLO;
	out.hello = &h;
	must(proto_send(&r.s, &out, SB_FRAME_CAP_DEFAULT, &err), &err, "hello 99");
	raw_expect_error(&r, SANDBOX__ERROR_CODE__ERR_VERSION, "the peer speaks versions 99 to 100");
	raw_close(&r);
	/* Anything but a Hello first. */
	raw_open(f, &r, false);
	out.body_case = SANDBOX__ENVELOPE__BODY_PING;
	out.ping = &p;
	must(proto_send(&r.s, &out, SB_FRAME_CAP_DEFAULT, &err), &err, "ping first");
	raw_expect_error(&r, SANDBOX__ERROR_CODE__ERR_MALFORMED, "the first message must be a Hello");
	raw_close(&r);
	still_serving(f);
}

/* ---------- the handshake matrix against the real agent ---------- */

/* mbedtls_net_send uses write(2): an agent that already hung up would SIGPIPE the test. */
static int raw_send(void *ctx, const unsigned char *buf, size_t len)
{
	ssize_t n = send(*(int *)ctx, buf, len, MSG_NOSIGNAL);

	return n >= 0 ? (int)n : MBEDTLS_ERR_NET_SEND_FAILED;
}

static int raw_recv(void *ctx, unsigned char *buf, size_t len)
{
	struct pollfd p = { .fd = *(int *)ctx, .events = POLLIN };
	ssize_t n;

	if (poll(&p, 1, STEP_MS) != 1)
		return MBEDTLS_ERR_SSL_TIMEOUT;
	n = recv(*(int *)ctx, buf, len, 0);
	return n >= 0 ? (int)n : MBEDTLS_ERR_NET_RECV_FAILED;
}

/* A client outside our policy (plain mbedtls): TLS version range and an optional certificate.
 * Returns mbedtls' verdict on the handshake and a first read. */
static int mbedtls_client(struct fixture *f, int minor, const char *cert)
{
	mbedtls_ssl_config conf;
	mbedtls_ssl_context ssl;
	mbedtls_x509_crt crt;
	mbedtls_pk_context key;
	char path[256], file[64];
	unsigned char byte;
	int fd = unix_connect(f->sock), ret;

	assert_true(fd >= 0);
	mbedtls_ssl_config_init(&conf);
	mbedtls_ssl_init(&ssl);
	mbedtls_x509_crt_init(&crt);
	mbedtls_pk_init(&key);
	assert_int_equal(mbedtls_ssl_config_defaults(&conf, MBEDTLS_SSL_IS_CLIENT, MBEDTLS_SSL_TRANSPORT_STREAM,
						     MBEDTLS_SSL_PRESET_DEFAULT), 0);
	mbedtls_ssl_conf_rng(&conf, tls_rng, NULL);
	mbedtls_ssl_conf_authmode(&conf, MBEDTLS_SSL_VERIFY_NONE);  /* the agent's verdict is under test */
	mbedtls_ssl_conf_min_version(&conf, MBEDTLS_SSL_MAJOR_VERSION_3, minor);
	mbedtls_ssl_conf_max_version(&conf, MBEDTLS_SSL_MAJOR_VERSION_3, minor);
	if (cert != NULL) {
		snprintf(file, sizeof file, "%s.crt", cert);
		path_join(path, sizeof path, f->pki, file);
		assert_int_equal(mbedtls_x509_crt_parse_file(&crt, path), 0);
		snprintf(file, sizeof file, "%s.key", cert);
		path_join(path, sizeof path, f->pki, file);
		assert_int_equal(mbedtls_pk_parse_keyfile(&key, path, NULL), 0);
		assert_int_equal(mbedtls_ssl_conf_own_cert(&conf, &crt, &key), 0);
	}
	assert_int_equal(mbedtls_ssl_setup(&ssl, &conf), 0);
	mbedtls_ssl_set_bio(&ssl, &fd, raw_send, raw_recv, NULL);
	do
		ret = mbedtls_ssl_handshake(&ssl);
	while (ret == MBEDTLS_ERR_SSL_WANT_READ || ret == MBEDTLS_ERR_SSL_WANT_WRITE);
	if (ret == 0)
		ret = mbedtls_ssl_read(&ssl, &byte, 1);  /* the agent's verdict comes after our flight */
	mbedtls_ssl_free(&ssl);
	mbedtls_ssl_config_free(&conf);
	mbedtls_x509_crt_free(&crt);
	mbedtls_pk_free(&key);
	close(fd);
	return ret;
}

/* Our own client with a bad certificate: refused, and the agent logs why. */
static void expect_client_refused(struct fixture *f, const char *cert, const char *agent_says)
{
	struct tls_config *bad = client_config(f, cert, AGENT_NAME);
	struct agent_conn *c = NULL;
	struct sb_err err;

	assert_int_equal(agent_connect(bad, f->address, step_deadline(), &c, &err), -1);
	assert_null(c);
	assert_contains(err.msg, "TLS handshake with sandbox-agent failed");
	tls_config_free(bad);
	log_expect(f, agent_says);
	still_serving(f);
}

static void test_handshake_matrix(void **state)
{
	struct fixture *f = *state;
	uint8_t junk[512], sink[256];
	struct sb_err err;
	int fd;

	assert_true(mbedtls_client(f, MBEDTLS_SSL_MINOR_VERSION_3, NULL) < 0);
	log_expect(f, "the client presented no certificate");
	still_serving(f);

	expect_client_refused(f, "foreign", "client certificate is not signed by the configured CA");
	expect_client_refused(f, "wrong-name", "does not name 'manager.infra-sandbox' (names: other.infra-sandbox)");
	expect_client_refused(f, "expired", "client certificate has expired");

	assert_true(mbedtls_client(f, MBEDTLS_SSL_MINOR_VERSION_2, "manager") < 0);
	log_expect(f, "the client does not speak TLS 1.2");
	still_serving(f);

	fd = unix_connect(f->sock);
	assert_true(fd >= 0);
	must(sb_random_bytes(junk, sizeof junk, &err), &err, "junk");
	junk[0] = 'G';  /* not a handshake record, so the verdict does not depend on luck */
	assert_int_equal(send(fd, junk, sizeof junk, MSG_NOSIGNAL), (ssize_t)sizeof junk);
	assert_int_equal(shutdown(fd, SHUT_WR), 0);
	for (struct pollfd p = { .fd = fd, .events = POLLIN }; poll(&p, 1, STEP_MS) == 1;)
		if (read(fd, sink, sizeof sink) <= 0)
			break;
	close(fd);
	log_expect(f, "not a valid TLS 1.2 handshake");
	still_serving(f);
}

/* N1 on the agent's listener: whoever reaches it (another pod, where the network enforces no
 * NetworkPolicy) holds only handshake slots. 24 connections that never start a handshake are more
 * than the 16 slots: the manager still gets in at once (each newer connection shut the oldest down),
 * and at least 9 of the stallers (8 for their surplus, 1 for the manager's) were closed for it.
 * Before, every connection counted against the 16 the manager's calls need, for 10 s each. */
static void test_stalled_handshakes_do_not_keep_the_manager_out(void **state)
{
	struct fixture *f = *state;
	int fds[24], closed = 0;
	char byte;

	for (size_t i = 0; i < 24; i++) {
		fds[i] = unix_connect(f->sock);
		assert_true(fds[i] >= 0);
	}
	still_serving(f);
	for (size_t i = 0; i < 24; i++) {
		struct pollfd p = { .fd = fds[i], .events = POLLIN };

		/* a shut-down connection reads its end at once; a held one stays silent */
		if (poll(&p, 1, 0) == 1 && recv(fds[i], &byte, 1, MSG_DONTWAIT) <= 0)
			closed++;
		close(fds[i]);
	}
	assert_true(closed >= 9);
	log_expect(f, "closed a connection still in its handshake");
}

static void test_client_refuses_wrong_server_name(void **state)
{
	struct fixture *f = *state;
	char crt[256], key[256], ca[256];
	struct tls_config *old;
	struct agent_conn *c = NULL;
	struct sb_err err;

	/* The manager expects generation 0; the agent's certificate names generation 1. */
	path_join(crt, sizeof crt, f->pki, "manager.crt");
	path_join(key, sizeof key, f->pki, "manager.key");
	path_join(ca, sizeof ca, f->pki, "ca.crt");
	must(agent_client_config(&old, crt, key, ca, "s1", 0, &err), &err, "agent_client_config");
	assert_int_equal(agent_connect(old, f->address, step_deadline(), &c, &err), -1);
	assert_null(c);
	assert_contains(err.msg, "server certificate does not name 'sandbox-s1.g0.agent' (names: sandbox-s1.g1.agent)");
	tls_config_free(old);
	still_serving(f);
}

/* ---------- exec refusals ---------- */

static void test_exec_wrong_generation(void **state)
{
	struct fixture *f = *state;
	struct agent_conn *c = conn_open(f);
	struct agent_exec_request req;
	struct agent_reply r;
	struct sb_err err;

	exec_request(f, &req, "wrong-generation", "echo never");
	req.generation = GENERATION + 1;
	assert_int_equal(agent_exec(c, &req, step_deadline(), &r, &err), -1);
	assert_int_equal(r.agent_error, SANDBOX__ERROR_CODE__ERR_REFUSED);
	assert_int_equal(err.errnum, EPERM);
	assert_contains(err.msg, "another generation");
	assert_null(r.result_json);
	must(agent_ping(c, step_deadline(), &err), &err, "the connection survives a refused exec");
	agent_close(c);
}

/* The agent bounds the output it keeps itself: a manager asking for more than 1 MiB (whose escaped
 * text would not fit a frame) is refused before anything runs (mutation M10). The limit is the agent's
 * own (SERVE_OUTPUT_LIMIT_MAX), so the test states it. */
static void test_exec_output_limit_over(void **state)
{
	struct fixture *f = *state;
	struct agent_conn *c = conn_open(f);
	struct agent_exec_request req;
	struct agent_reply r;
	struct sb_err err;

	exec_request(f, &req, "output-limit-over", "echo never");
	req.output_limit = 1024 * 1024 + 1;
	assert_int_equal(agent_exec(c, &req, step_deadline(), &r, &err), -1);
	assert_int_equal(r.agent_error, SANDBOX__ERROR_CODE__ERR_REFUSED);
	assert_contains(err.msg, "the output limit is over 1 MiB");
	assert_null(r.result_json);
	agent_close(c);
	c = conn_open(f);
	exec_request(f, &req, "output-limit-max", "echo at-the-limit");
	req.output_limit = 1024 * 1024;
	must(agent_exec(c, &req, step_deadline(), &r, &err), &err, "an exec at the 1 MiB limit");
	assert_contains(r.result_json, "at-the-limit");
	agent_reply_free(&r);
	agent_close(c);
}

/* The command's environment: the Exec's entries after SHELL, the shell the agent runs it with, so bash
 * never looks its uid up for SHELL (serve_conn.c request_from_exec; mutations M70, M71). An Exec's own SHELL
 * wins. The agent's bound is its own (BOUNDARY_MAX_ENV 64: a command's environment holds at most 63
 * entries, request_check), so the test states it: the agent adds one, so an Exec may carry 62. */
#define AGENT_ENV_MAX 64
static void test_exec_environment(void **state)
{
	static char names[AGENT_ENV_MAX][16];
	struct fixture *f = *state;
	const char *shell = access("/bin/bash", X_OK) == 0 ? "/bin/bash" : "/bin/sh";
	struct agent_env env[AGENT_ENV_MAX];
	struct agent_conn *c = conn_open(f);
	struct agent_exec_request req;
	struct agent_reply r;
	struct sb_err err;
	char want[64];

	env[0] = (struct agent_env){ "FOO", "bar" };
	exec_request(f, &req, "env-shell", "printf '%s|%s|%s' \"$SHELL\" \"$FOO\" \"$(env | grep -c ^SHELL=)\"");
	req.env = env;
	req.n_env = 1;
	must(agent_exec(c, &req, step_deadline(), &r, &err), &err, "an exec without SHELL");
	snprintf(want, sizeof want, "\"stdout\":\"%s|bar|1\"", shell);
	assert_contains(r.result_json, want);
	agent_reply_free(&r);
	env[1] = (struct agent_env){ "SHELL", "/bin/the-exec-s-own" };
	exec_request(f, &req, "env-shell-own", "printf '%s' \"$SHELL\"");
	req.env = env;
	req.n_env = 2;
	must(agent_exec(c, &req, step_deadline(), &r, &err), &err, "an exec with its own SHELL");
	assert_contains(r.result_json, "\"stdout\":\"/bin/the-exec-s-own\"");
	agent_reply_free(&r);
	for (size_t i = 0; i < AGENT_ENV_MAX; i++) {
		snprintf(names[i], sizeof names[i], "V%zu", i);
		env[i] = (struct agent_env){ names[i], "x" };
	}
	exec_request(f, &req, "env-at-the-bound", "env | grep -c ^V");
	req.env = env;
	req.n_env = AGENT_ENV_MAX - 2;
	must(agent_exec(c, &req, step_deadline(), &r, &err), &err, "an exec at the environment's bound");
	snprintf(want, sizeof want, "\"stdout\":\"%d\\n\"", AGENT_ENV_MAX - 2);
	assert_contains(r.result_json, want);
	agent_reply_free(&r);
	exec_request(f, &req, "env-over-the-bound", "echo never");
	req.env = env;
	req.n_env = AGENT_ENV_MAX - 1;
	assert_int_equal(agent_exec(c, &req, step_deadline(), &r, &err), -1);
	assert_int_equal(r.agent_error, SANDBOX__ERROR_CODE__ERR_REFUSED);
	assert_contains(err.msg, "too many environment variables");
	assert_null(r.result_json);
	agent_close(c);
	still_serving(f);
}

/* PID 1 of the command's namespace is killed at its timeout: a command that would sleep past it
 * ends timed_out within seconds, never as exited (mutation M6: the wait loop's deadline check). */
static void test_exec_timeout_kills(void **state)
{
	struct fixture *f = *state;
	struct agent_conn *c = conn_open(f);
	struct agent_exec_request req;
	struct agent_reply r;
	struct sb_err err;
	json_t *res;

	exec_request(f, &req, "timeout-kills", "sleep 25; echo overslept");
	req.timeout_seconds = 1;
	must(agent_exec(c, &req, clock_deadline_after(20000), &r, &err), &err, "an exec past its timeout");
	res = json_parse(r.result_json);
	assert_string_equal(jstr(res, "status"), "timed_out");
	assert_string_equal(jstr(res, "stdout"), "");
	json_decref(res);
	receipt_check(f, &r, &req);
	agent_reply_free(&r);
	agent_close(c);
}

static void test_exec_id_reuse(void **state)
{
	struct fixture *f = *state;
	struct agent_conn *c = conn_open(f);
	struct agent_exec_request req;
	struct agent_reply r;
	struct sb_err err;

	exec_request(f, &req, "reuse-1", "true");
	must(agent_exec(c, &req, step_deadline(), &r, &err), &err, "first exec");
	agent_reply_free(&r);
	exec_request(f, &req, "reuse-1", "echo again");
	assert_int_equal(agent_exec(c, &req, step_deadline(), &r, &err), -1);
	assert_int_equal(r.agent_error, SANDBOX__ERROR_CODE__ERR_REFUSED);
	assert_contains(err.msg, "exec ids are never reused");
	/* The journal prunes its oldest entries (as a full journal would): the receipt still says
	 * the id ran, and the agent refuses it before running anything. */
	{
		char entry[PATH_MAX];

		assert_true((size_t)snprintf(entry, sizeof entry, "%s/journal/reuse-1.json", f->state) < sizeof entry);
		assert_int_equal(unlink(entry), 0);
	}
	exec_request(f, &req, "reuse-1", "echo pruned");
	assert_int_equal(agent_exec(c, &req, step_deadline(), &r, &err), -1);
	assert_int_equal(r.agent_error, SANDBOX__ERROR_CODE__ERR_REFUSED);
	assert_contains(err.msg, "already has a receipt");
	agent_close(c);
}

struct exec_thread {
	struct fixture *f;
	struct agent_exec_request req;
	struct agent_reply reply;
	struct sb_err err;
	int rc;
	int64_t ended_ms;
	pthread_t thread;
};

static void *exec_main(void *arg)
{
	struct exec_thread *t = arg;
	struct agent_conn *c;

	t->rc = agent_connect(t->f->client, t->f->address, step_deadline(), &c, &t->err);
	if (t->rc == 0) {
		t->rc = agent_exec(c, &t->req, tls_deadline_after(60000), &t->reply, &t->err);
		agent_close(c);
	}
	t->ended_ms = clock_mono_ms();
	return NULL;
}

/* Starts the exec in cwd on its own connection and thread, and returns once the agent reports it
 * running. */
static void exec_start_in(struct fixture *f, struct exec_thread *t, const char *id, const char *cwd,
			  const char *command, struct agent_conn *observer)
{
	struct agent_expect want = { .exec_id = id, .generation = GENERATION };
	struct agent_reply r;

	memset(t, 0, sizeof *t);
	t->f = f;
	exec_request(f, &t->req, id, command);
	t->req.cwd = cwd;
	assert_int_equal(pthread_create(&t->thread, NULL, exec_main, t), 0);
	query_until(f, observer, &want, AGENT_EXEC_RUNNING, &r);
	agent_reply_free(&r);
}

static void exec_start(struct fixture *f, struct exec_thread *t, const char *id, const char *command,
		       struct agent_conn *observer)
{
	exec_start_in(f, t, id, f->work, command, observer);
}

/* Waits for the exec started by exec_start; it must have come back with this status (the reply stays
 * in t for the caller to check further and free). */
static void exec_join(struct exec_thread *t, const char *status)
{
	json_t *res;

	assert_int_equal(pthread_join(t->thread, NULL), 0);
	if (t->rc < 0)
		fail_msg("exec %s: %s", t->req.exec_id, t->err.msg);
	res = json_parse(t->reply.result_json);
	assert_string_equal(jstr(res, "status"), status);
	json_decref(res);
}

static void test_exec_busy(void **state)
{
	struct fixture *f = *state;
	struct agent_conn *c = conn_open(f);
	struct agent_exec_request req;
	struct exec_thread t;
	struct agent_reply r;
	struct sb_err err;

	exec_start(f, &t, "busy-long", "sleep 2", c);
	exec_request(f, &req, "busy-second", "echo never");
	assert_int_equal(agent_exec(c, &req, step_deadline(), &r, &err), -1);
	assert_int_equal(r.agent_error, SANDBOX__ERROR_CODE__ERR_BUSY);
	assert_int_equal(err.errnum, EBUSY);
	assert_contains(err.msg, "exec 'busy-long' is running");
	exec_join(&t, "exited");
	receipt_check(f, &t.reply, &t.req);
	agent_reply_free(&t.reply);
	/* The refused id was never accepted: it can run now. */
	exec_request(f, &req, "busy-second", "true");
	must(agent_exec(c, &req, step_deadline(), &r, &err), &err, "the second exec once the first ended");
	agent_reply_free(&r);
	agent_close(c);
}

static void test_cancel_running_exec(void **state)
{
	struct fixture *f = *state;
	struct agent_conn *c = conn_open(f);
	struct exec_thread t;
	struct agent_reply r;
	struct sb_err err;
	int64_t cancelled_at;

	exec_start(f, &t, "cancel-me", "sleep 30", c);
	cancelled_at = clock_mono_ms();
	must(agent_cancel(f->client, f->address, "cancel-me", step_deadline(), &r, &err), &err, "cancel");
	assert_int_equal(r.state, AGENT_EXEC_RUNNING);
	agent_reply_free(&r);
	exec_join(&t, "cancelled");
	if (t.ended_ms - cancelled_at > 2500)
		fail_msg("the cancelled exec ended %lld ms after the cancel", (long long)(t.ended_ms - cancelled_at));
	receipt_check(f, &t.reply, &t.req);
	agent_reply_free(&t.reply);
	agent_close(c);
}

/* ---------- a lost connection, then reconciliation by Query ---------- */

static void test_connection_dropped_mid_exec(void **state)
{
	struct fixture *f = *state;
	struct agent_conn *c = conn_open(f);
	struct agent_exec_request req;
	struct agent_expect want;
	struct agent_reply r;
	struct sb_err err;
	json_t *res;

	exec_request(f, &req, "dropped", "sleep 1; echo done");
	must(agent_exec_send(c, &req, step_deadline(), &r, &err), &err, "sending the exec");
	assert_true(r.dispatched);
	agent_close(c);  /* the manager goes away while the command runs */

	c = conn_open(f);
	want = (struct agent_expect){ .exec_id = "dropped", .generation = GENERATION, .nonce = req.nonce,
				      .receipt_key = f->key };
	query_until(f, c, &want, AGENT_EXEC_FINISHED, &r);
	res = json_parse(r.result_json);
	assert_string_equal(jstr(res, "status"), "exited");
	assert_string_equal(jstr(res, "stdout"), "done\n");
	json_decref(res);
	receipt_check(f, &r, &req);
	agent_reply_free(&r);
	agent_close(c);
}

/* The end of an exec is durable in its journal slot's end before the result goes out; its files
 * (the finished entry, the receipt) are synced after. A power loss in between may lose them: here
 * the agent is killed (-9) right after the result and the files are taken as that loss leaves
 * them (the entry gone, the receipt torn to nothing). The restarted agent writes both again from
 * the end: a Query answers the reported outcome with the same receipt, and the receipt file on
 * disk is that receipt's bytes; the id stays refused. */
static void test_end_survives_lost_files(void **state)
{
	struct fixture *f = *state;
	struct agent_conn *c = conn_open(f);
	struct agent_exec_request req;
	struct agent_expect want;
	struct agent_reply r, q;
	char path[PATH_MAX], disk[16384];
	struct sb_err err;
	ssize_t len;
	json_t *res;
	int status, fd;

	exec_request(f, &req, "power-1", "echo hi; exit 4");
	must(agent_exec(c, &req, step_deadline(), &r, &err), &err, "the exec");
	agent_close(c);
	kill(f->agent, SIGKILL);
	waitpid(f->agent, &status, 0);
	f->agent = 0;
	path_join(path, sizeof path, f->state, "journal/power-1.json");
	assert_int_equal(unlink(path), 0);
	path_join(path, sizeof path, f->state, "receipts/power-1.json");
	assert_int_equal(truncate(path, 0), 0);
	agent_spawn(f);
	agent_wait_ready(f);
	c = conn_open(f);
	want = (struct agent_expect){ .exec_id = "power-1", .generation = GENERATION, .nonce = req.nonce,
				      .receipt_key = f->key };
	must(agent_query(c, &want, step_deadline(), &q, &err), &err, "the query");
	assert_int_equal(q.state, AGENT_EXEC_FINISHED);
	res = json_parse(q.result_json);
	assert_string_equal(jstr(res, "status"), "exited");
	assert_int_equal(json_integer_value(json_object_get(res, "exit_code")), 4);
	assert_string_equal(jstr(res, "stdout"), "hi\n");
	json_decref(res);
	receipt_check(f, &q, &req);
	assert_int_equal(q.receipt_len, r.receipt_len);
	assert_memory_equal(q.receipt, r.receipt, r.receipt_len);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	assert_true(fd >= 0);
	len = read(fd, disk, sizeof disk);
	close(fd);
	assert_int_equal(len, (ssize_t)r.receipt_len);
	assert_memory_equal(disk, r.receipt, r.receipt_len);
	agent_reply_free(&q);
	agent_reply_free(&r);
	exec_request(f, &req, "power-1", "echo again");
	assert_int_equal(agent_exec(c, &req, step_deadline(), &r, &err), -1);
	assert_int_equal(r.agent_error, SANDBOX__ERROR_CODE__ERR_REFUSED);
	agent_close(c);
}

/* The failpoint agent (`make failpoints`: BUILD/fp/sandbox-agent, beside SANDBOX_AGENT's BUILD) into
 * fp_bin (PATH_MAX bytes), or the case is skipped (failed under CI=true). */
static void fp_agent_path(char *fp_bin)
{
	const char *bin = getenv("SANDBOX_AGENT");
	const char *slash = bin ? strrchr(bin, '/') : NULL;

	if (slash == NULL || (size_t)snprintf(fp_bin, PATH_MAX, "%.*s/fp/sandbox-agent", (int)(slash - bin), bin) >=
				     PATH_MAX || access(fp_bin, X_OK) != 0)
		skip_setup("no failpoint agent beside SANDBOX_AGENT (make failpoints builds BUILD/fp/sandbox-agent)");
}

/* The failpoint agent started on the fixture's state in place of its agent, one failpoint armed
 * (SB_FAILPOINT's syntax) or none. */
static void agent_spawn_fp(struct fixture *f, const char *fp_bin, const char *point)
{
	agent_stop(f);
	f->agent_bin = fp_bin;
	if (point != NULL)
		assert_int_equal(setenv("SB_FAILPOINT", point, 1), 0);
	agent_spawn(f);
	agent_wait_ready(f);
	unsetenv("SB_FAILPOINT");
	f->agent_bin = NULL;
}

/* The agent killed (-9) at each new point of an exec's end (the failpoint agent of `make
 * failpoints`, beside SANDBOX_AGENT in fp/): its end written, then past the end with no file written
 * yet, then the result out and the receipt's room not yet given back. The exec is never lost and its
 * id never runs again: the restarted agent answers it finished with its real outcome and a receipt
 * that verifies (kill -9 keeps every byte written; at the second point the receipt file is taken
 * too, and the restart writes it again from the end). */
static void test_end_killed_at_each_point(void **state)
{
	static const char *const points[] = { "agent.journal.end_written", "agent.journal.end_synced",
					      "agent.journal.settling" };
	struct fixture *f = *state;
	char fp_bin[PATH_MAX], path[PATH_MAX], id[32];

	fp_agent_path(fp_bin);
	for (size_t k = 0; k < sizeof points / sizeof points[0]; k++) {
		struct agent_conn *c;
		struct agent_exec_request req;
		struct agent_expect want;
		struct agent_reply r, q;
		struct sb_err err;
		json_t *res;
		int status;

		agent_spawn_fp(f, fp_bin, points[k]);
		snprintf(id, sizeof id, "killed-%zu", k);
		c = conn_open(f);
		exec_request(f, &req, id, "echo out; exit 3");
		(void)agent_exec(c, &req, step_deadline(), &r, &err); /* the result may or may not come */
		agent_reply_free(&r);
		agent_close(c);
		assert_int_equal(waitpid(f->agent, &status, 0), f->agent);
		f->agent = 0;
		assert_true(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
		if (strcmp(points[k], "agent.journal.end_synced") == 0) {
			snprintf(path, sizeof path, "%s/receipts/%s.json", f->state, id);
			assert_int_equal(unlink(path), 0);
		}
		agent_spawn(f);
		agent_wait_ready(f);
		c = conn_open(f);
		want = (struct agent_expect){ .exec_id = id, .generation = GENERATION, .nonce = req.nonce,
					      .receipt_key = f->key };
		must(agent_query(c, &want, step_deadline(), &q, &err), &err, points[k]);
		assert_int_equal(q.state, AGENT_EXEC_FINISHED);
		res = json_parse(q.result_json);
		assert_string_equal(jstr(res, "status"), "exited");
		assert_int_equal(json_integer_value(json_object_get(res, "exit_code")), 3);
		assert_string_equal(jstr(res, "stdout"), "out\n");
		json_decref(res);
		receipt_check(f, &q, &req);
		agent_reply_free(&q);
		exec_request(f, &req, id, "echo again");
		assert_int_equal(agent_exec(c, &req, step_deadline(), &r, &err), -1);
		assert_int_equal(r.agent_error, SANDBOX__ERROR_CODE__ERR_REFUSED);
		agent_close(c);
	}
}

/* The journal's prune runs after the result is sent, on a thread of its own (issue 32: a prune of
 * some 20 000 entries took 1.5 s, which the call that passed the cap used to wait for). The first
 * call after a start always starts one (the journal's size is unknown until counted), so the
 * failpoint agent, stopped dead (SIGSTOP) at the prune's first step, proves the order: the call that
 * started it already has its result. Continued, the agent serves the next call. */
static void test_prune_after_the_result(void **state)
{
	struct fixture *f = *state;
	char fp_bin[PATH_MAX];
	struct agent_exec_request req;
	struct agent_conn *c;
	struct agent_reply r;
	struct sb_err err;
	json_t *res;
	int status;

	fp_agent_path(fp_bin);
	agent_spawn_fp(f, fp_bin, "agent.journal.pruning:stop");
	c = conn_open(f);
	exec_request(f, &req, "pruned-after-1", "echo out");
	must(agent_exec(c, &req, step_deadline(), &r, &err), &err, "the call that starts the prune");
	res = json_parse(r.result_json);
	assert_string_equal(jstr(res, "stdout"), "out\n");
	json_decref(res);
	agent_reply_free(&r);
	/* The prune did start, after that result: the agent stopped itself there. */
	assert_int_equal(waitpid(f->agent, &status, WUNTRACED), f->agent);
	assert_true(WIFSTOPPED(status));
	assert_int_equal(kill(f->agent, SIGCONT), 0);
	exec_request(f, &req, "pruned-after-2", "echo again");
	must(agent_exec(c, &req, step_deadline(), &r, &err), &err, "the next call");
	agent_reply_free(&r);
	agent_close(c);
	agent_stop(f);
	agent_spawn(f);
	agent_wait_ready(f);
}

/* Zeros over a journal file: what a crash of the machine leaves of a record the page cache held
 * (issue 32: the begin and the end are not synced), here the journal's first exec's. */
static void journal_file_lost(struct fixture *f, const char *name)
{
	char path[PATH_MAX], zeros[4096] = { 0 };
	struct stat st;
	int fd;

	snprintf(path, sizeof path, "%s/journal/%s", f->state, name);
	fd = open(path, O_WRONLY | O_CLOEXEC);
	assert_true(fd >= 0);
	assert_int_equal(fstat(fd, &st), 0);
	for (off_t at = 0; at < st.st_size; at += (off_t)sizeof zeros) {
		size_t n = st.st_size - at < (off_t)sizeof zeros ? (size_t)(st.st_size - at) : sizeof zeros;

		assert_int_equal(pwrite(fd, zeros, n, at), (ssize_t)n);
	}
	close(fd);
}

/* The failpoint agent started on the fixture's state under a boot id of the test's choosing
 * (SB_FAILPOINT_BOOT_ID), and one failpoint armed or none. */
static void agent_spawn_boot(struct fixture *f, const char *fp_bin, const char *boot, const char *point)
{
	assert_int_equal(setenv("SB_FAILPOINT_BOOT_ID", boot, 1), 0);
	agent_spawn_fp(f, fp_bin, point);
	unsetenv("SB_FAILPOINT_BOOT_ID");
}

/* req's exec, asked of an agent whose journal is from another boot and holds no whole record of
 * it: finished, uncertain because the machine restarted, no exit code, no receipt. */
static void expect_in_doubt(struct fixture *f, struct agent_conn *c, const struct agent_exec_request *req)
{
	struct agent_expect want = { .exec_id = req->exec_id, .generation = GENERATION, .nonce = req->nonce,
				     .receipt_key = f->key };
	struct agent_reply q;
	struct sb_err err;
	json_t *res;

	must(agent_query(c, &want, step_deadline(), &q, &err), &err, req->exec_id);
	assert_int_equal(q.state, AGENT_EXEC_FINISHED);
	res = json_parse(q.result_json);
	assert_string_equal(jstr(res, "status"), "uncertain");
	assert_true(json_is_null(json_object_get(res, "exit_code")));
	assert_non_null(strstr(jstr(res, "error"), "the machine restarted"));
	json_decref(res);
	assert_null(q.receipt);
	agent_reply_free(&q);
}

/* A crash of the machine mid-call, simulated: the agent killed with the command run and its end
 * written (agent.journal.end_written), then every record the page cache held taken away (the begin's
 * slot, the end, the receipt file: none was synced), and the agent started again under another boot
 * id. The exec may have run and nothing on disk says so: the Query answers it finished and
 * uncertain, without a receipt (never unknown, never its outcome), and the journal takes no exec
 * any more (an id it lost could run twice). Two execs finished before it, their results sent: one
 * whose files the kernel had written back still answers its real outcome with a receipt that
 * verifies; one whose files the crash took too (nothing syncs them, issue 32) is uncertain, never
 * another outcome. */
static void test_query_after_another_boot(void **state)
{
	static const char boot_b[] = "00000000-0000-4000-8000-00000000000b";
	struct fixture *f = *state;
	char boot_a[64] = "";
	FILE *fb = fopen("/proc/sys/kernel/random/boot_id", "re");
	char fp_bin[PATH_MAX], path[PATH_MAX];
	struct agent_exec_request kept, gone, lost, again;
	struct agent_expect want;
	struct agent_reply r, q;
	struct agent_conn *c;
	struct sb_err err;
	json_t *res;
	int status;

	fp_agent_path(fp_bin);
	/* Boot A is this one: the fixture's agent wrote the journal's mark under it. */
	assert_non_null(fb);
	assert_non_null(fgets(boot_a, sizeof boot_a, fb));
	fclose(fb);
	boot_a[strcspn(boot_a, "\n")] = '\0';
	/* Boot A: two execs finished, the third killed once its end is written (3rd end). */
	agent_spawn_boot(f, fp_bin, boot_a, "agent.journal.end_written:3");
	c = conn_open(f);
	exec_request(f, &kept, "boot-kept", "echo kept; exit 2");
	must(agent_exec(c, &kept, step_deadline(), &r, &err), &err, "the first exec");
	agent_reply_free(&r);
	exec_request(f, &gone, "boot-gone", "echo gone; exit 4");
	must(agent_exec(c, &gone, step_deadline(), &r, &err), &err, "the second exec");
	agent_reply_free(&r);
	exec_request(f, &lost, "boot-lost", "echo lost; exit 3");
	(void)agent_exec(c, &lost, step_deadline(), &r, &err); /* killed before its result */
	agent_reply_free(&r);
	agent_close(c);
	assert_int_equal(waitpid(f->agent, &status, 0), f->agent);
	f->agent = 0;
	assert_true(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
	/* The machine's crash: what was not synced is gone. */
	journal_file_lost(f, ".running");
	journal_file_lost(f, ".ends");
	snprintf(path, sizeof path, "%s/receipts/boot-lost.json", f->state);
	assert_int_equal(unlink(path), 0);
	snprintf(path, sizeof path, "%s/receipts/boot-gone.json", f->state);
	assert_int_equal(unlink(path), 0);
	snprintf(path, sizeof path, "%s/journal/boot-gone.json", f->state);
	assert_int_equal(unlink(path), 0);
	/* Boot B. */
	agent_spawn_boot(f, fp_bin, boot_b, NULL);
	c = conn_open(f);
	expect_in_doubt(f, c, &lost);
	expect_in_doubt(f, c, &gone);
	want = (struct agent_expect){ .exec_id = "boot-kept", .generation = GENERATION, .nonce = kept.nonce,
				      .receipt_key = f->key };
	must(agent_query(c, &want, step_deadline(), &q, &err), &err, "the query of the exec whose files survived");
	assert_int_equal(q.state, AGENT_EXEC_FINISHED);
	res = json_parse(q.result_json);
	assert_string_equal(jstr(res, "status"), "exited");
	assert_int_equal(json_integer_value(json_object_get(res, "exit_code")), 2);
	json_decref(res);
	receipt_check(f, &q, &kept);
	agent_reply_free(&q);
	exec_request(f, &again, "boot-new", "echo new");
	assert_int_equal(agent_exec(c, &again, step_deadline(), &r, &err), -1);
	assert_int_equal(r.agent_error, SANDBOX__ERROR_CODE__ERR_REFUSED);
	assert_non_null(strstr(err.msg, "the machine restarted"));
	agent_reply_free(&r);
	agent_close(c);
	log_expect(f, "no exec is accepted on it");
	/* The doubt never ends for this journal: the next cases get a journal without the mark. */
	agent_stop(f);
	snprintf(path, sizeof path, "%s/journal/.boot", f->state);
	assert_int_equal(unlink(path), 0);
	agent_spawn(f);
	agent_wait_ready(f);
}

/* ---------- bad frames ---------- */

static void test_oversized_frame(void **state)
{
	struct fixture *f = *state;
	uint8_t hdr[4], *buf = NULL;
	struct sb_err err;
	size_t len;
	struct raw r;
	int64_t sent_at;
	int rc;

	raw_open(f, &r, true);
	/* Announce 32 MiB and send none of it: the answer must come from the header alone. */
	frame_encode_header(hdr, 32u * 1024 * 1024);
	assert_int_equal(r.s.write(r.s.ctx, hdr, sizeof hdr), (ssize_t)sizeof hdr);
	sent_at = clock_mono_ms();
	raw_expect_error(&r, SANDBOX__ERROR_CODE__ERR_MALFORMED, "over the cap");
	assert_true(clock_mono_ms() - sent_at < 2000);
	/* Then the agent closes this connection. */
	rc = frame_read(&r.s, SB_FRAME_CAP_DEFAULT, &buf, &len, &err);
	assert_true(rc <= 0);
	free(buf);
	tls_session_free(r.tls);
	close(r.fd);
	still_serving(f);
}

static void test_malformed_frame_keeps_connection(void **state)
{
	struct fixture *f = *state;
	static const uint8_t garbage[] = { 0x0a, 0xff, 0xff, 0xff, 0xff, 0x0f, 0x12, 0x34 };
	Sandbox__Envelope out = SANDBOX__ENVELOPE__INIT;
	Sandbox__Pong pong = SANDBOX__PONG__INIT;
	struct sb_err err;
	struct raw r;

	raw_open(f, &r, true);
	must(frame_write(&r.s, garbage, sizeof garbage, SB_FRAME_CAP_DEFAULT, &err), &err, "garbage frame");
	raw_expect_error(&r, SANDBOX__ERROR_CODE__ERR_MALFORMED, "malformed message");
	raw_ping(&r, 42);
	/* A well-formed message the agent does not take from a manager. */
	out.body_case = SANDBOX__ENVELOPE__BODY_PONG;
	out.pong = &pong;
	must(proto_send(&r.s, &out, SB_FRAME_CAP_DEFAULT, &err), &err, "pong to the agent");
	raw_expect_error(&r, SANDBOX__ERROR_CODE__ERR_MALFORMED, "unexpected pong message");
	raw_ping(&r, 43);
	raw_close(&r);
}

/* ---------- what a command can reach ---------- */

static void test_listener_and_state_hidden(void **state)
{
	struct fixture *f = *state;
	struct agent_conn *c = conn_open(f);
	struct agent_exec_request req;
	struct agent_reply r;
	struct sb_err err;
	struct stat st;
	char command[2048], key_path[256];
	json_t *res;

	/* Outside, they are there: the checks below prove something. */
	path_join(key_path, sizeof key_path, f->state, "receipt.key");
	assert_int_equal(stat(f->sock, &st), 0);
	assert_true(S_ISSOCK(st.st_mode));
	assert_int_equal(access(key_path, F_OK), 0);
	snprintf(command, sizeof command,
		 "test -S '%s' && echo socket-visible; test -e '%s' && echo key-visible;"
		 "ls '%s' >/dev/null 2>&1 && echo state-listed; ls '%s' >/dev/null 2>&1 && echo sockdir-listed;"
		 "ls '%s' >/dev/null 2>&1 && echo pki-listed; echo end",
		 f->sock, key_path, f->state, f->sockdir, f->pki);
	exec_request(f, &req, "hidden", command);
	must(agent_exec(c, &req, step_deadline(), &r, &err), &err, "exec");
	res = json_parse(r.result_json);
	assert_string_equal(jstr(res, "status"), "exited");
	assert_string_equal(jstr(res, "stdout"), "end\n");
	json_decref(res);
	agent_reply_free(&r);
	agent_close(c);
}

/* ---------- a scripted fake agent: replies the real one never sends ---------- */

enum fake_mode {
	FAKE_GOOD,              /* Result + receipt signed with the right key */
	FAKE_NO_RECEIPT,        /* Result whose "receipt" is null, nothing after it */
	FAKE_RESULT_OTHER_ID,
	FAKE_RESULT_OTHER_GEN,
	FAKE_JSON_OTHER_GEN,    /* the envelope is right, the JSON inside names generation 2 */
	FAKE_RECEIPT_OTHER_ID,
	FAKE_RECEIPT_FORGED,    /* right ids, HMAC under another key */
};

struct fake {
	struct fixture *f;
	enum fake_mode mode;
	int listen_fd;
	pthread_t thread;
};

static char *fake_receipt(struct fake *k, const Sandbox__Exec *e)
{
	uint8_t other[RECEIPT_KEY_BYTES] = { 7 };
	char nonce_hex[2 * AGENT_NONCE_BYTES + 1];
	struct sb_err err;
	json_t *obj;
	char *text;

	sb_hex_encode(e->nonce.data, e->nonce.len == AGENT_NONCE_BYTES ? AGENT_NONCE_BYTES : 0, nonce_hex);
	obj = json_pack("{s:i, s:s, s:I, s:s, s:s}", "version", 1, "exec_id", e->exec_id, "generation",
			(json_int_t)e->generation, "nonce", nonce_hex, "status", "exited");
	if (obj == NULL || receipt_mac_sign(obj, k->mode == FAKE_RECEIPT_FORGED ? other : k->f->key, &err) < 0)
		return NULL;
	text = json_dumps(obj, JSON_COMPACT | JSON_SORT_KEYS);
	json_decref(obj);
	return text;
}

static void fake_answer(struct fake *k, struct sb_stream *s, const Sandbox__Exec *e)
{
	Sandbox__Envelope env = SANDBOX__ENVELOPE__INIT;
	Sandbox__Result res = SANDBOX__RESULT__INIT;
	Sandbox__Receipt rc = SANDBOX__RECEIPT__INIT;
	bool with_receipt = k->mode != FAKE_NO_RECEIPT;
	char json[512], *receipt = fake_receipt(k, e);
	struct sb_err err;

	snprintf(json, sizeof json, "{\"exec_id\":\"%s\",\"generation\":%d,\"status\":\"exited\",\"exit_code\":0,"
		 "\"stdout\":\"\",\"receipt\":%s}", e->exec_id, k->mode == FAKE_JSON_OTHER_GEN ? 2 : GENERATION,
		 with_receipt ? "{\"verified\":true}" : "null");
	res.exec_id = k->mode == FAKE_RESULT_OTHER_ID ? "someone-else" : e->exec_id;
	res.generation = k->mode == FAKE_RESULT_OTHER_GEN ? 2 : e->generation;
	res.result_json = json;
	env.body_case = SANDBOX__ENVELOPE__BODY_RESULT;
	env.result = &res;
	if (proto_send(s, &env, SB_FRAME_CAP_DEFAULT, &err) == 0 && with_receipt && receipt != NULL) {
		rc.exec_id = k->mode == FAKE_RECEIPT_OTHER_ID ? "someone-else" : e->exec_id;
		rc.generation = e->generation;
		rc.receipt_json.data = (uint8_t *)receipt;
		rc.receipt_json.len = strlen(receipt);
		env.body_case = SANDBOX__ENVELOPE__BODY_RECEIPT;
		env.receipt = &rc;
		(void)proto_send(s, &env, SB_FRAME_CAP_DEFAULT, &err);
	}
	free(receipt);
}

/* The fake agent's connection: Hello, one Exec answered per mode, then wait for the client to go. */
static void fake_serve(struct fake *k, struct tls_session *tls)
{
	Sandbox__Envelope out = SANDBOX__ENVELOPE__INIT, *in = NULL;
	Sandbox__Hello h;
	struct sb_stream s;
	struct sb_err err;

	tls_session_set_deadline(tls, step_deadline());
	tls_session_stream(tls, &s);
	if (proto_recv(&s, SB_FRAME_CAP_DEFAULT, &in, &err) != 1)
		return;
	proto_free(in);
	proto_hello_init(&h);
	h.has_generation = true;
	h.generation = GENERATION;
	out.body_case = SANDBOX__ENVELOPE__BODY_HELLO;
	out.hello = &h;
	if (proto_send(&s, &out, SB_FRAME_CAP_DEFAULT, &err) < 0 || proto_recv(&s, SB_FRAME_CAP_DEFAULT, &in, &err) != 1)
		return;
	if (in->body_case == SANDBOX__ENVELOPE__BODY_EXEC)
		fake_answer(k, &s, in->exec);
	proto_free(in);
	while (proto_recv(&s, SB_FRAME_CAP_DEFAULT, &in, &err) == 1)
		proto_free(in);
}

static void *fake_main(void *arg)
{
	struct fake *k = arg;
	char crt[256], key[256], ca[256];
	struct tls_config *server;
	struct tls_session *tls;
	struct pollfd p = { .fd = k->listen_fd, .events = POLLIN };
	struct sb_err err;
	int fd;

	path_join(crt, sizeof crt, k->f->pki, "agent.crt");
	path_join(key, sizeof key, k->f->pki, "agent.key");
	path_join(ca, sizeof ca, k->f->pki, "ca.crt");
	if (tls_config_server(&server, crt, key, ca, CA_MANAGER_NAME, &err) < 0)
		return NULL;
	fd = poll(&p, 1, STEP_MS) == 1 ? accept4(k->listen_fd, NULL, NULL, SOCK_CLOEXEC) : -1;
	if (fd >= 0 && tls_session_open(server, fd, step_deadline(), &tls, &err) == 0) {
		fake_serve(k, tls);
		tls_session_close(tls, &err);
	}
	if (fd >= 0)
		close(fd);
	tls_config_free(server);
	return NULL;
}

static void fake_start(struct fixture *f, struct fake *k, enum fake_mode mode)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	struct sb_err err;

	k->f = f;
	k->mode = mode;
	unlink(f->fake_sock);
	must(path_fmt(sa.sun_path, sizeof sa.sun_path, &err, "%s", f->fake_sock), &err, "the fake's socket path");
	k->listen_fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	assert_true(k->listen_fd >= 0);
	assert_int_equal(bind(k->listen_fd, (struct sockaddr *)&sa, sizeof sa), 0);
	assert_int_equal(listen(k->listen_fd, 1), 0);
	assert_int_equal(pthread_create(&k->thread, NULL, fake_main, k), 0);
}

/* One exec against the fake; returns agent_exec's result, reply in *r. */
static int fake_exec(struct fixture *f, enum fake_mode mode, struct agent_reply *r, struct sb_err *err)
{
	struct agent_exec_request req;
	struct agent_conn *c;
	struct fake k;
	int rc;

	fake_start(f, &k, mode);
	must(agent_connect(f->client, f->fake_address, step_deadline(), &c, err), err, "connecting to the fake");
	exec_request(f, &req, "fake-exec", "true");
	rc = agent_exec(c, &req, step_deadline(), r, err);
	if (rc < 0) {
		struct sb_err again;

		/* A refused reply leaves the stream suspect: the connection refuses further use. */
		assert_int_equal(agent_ping(c, step_deadline(), &again), -1);
		assert_contains(again.msg, "cannot be reused");
	}
	agent_close(c);
	assert_int_equal(pthread_join(k.thread, NULL), 0);
	close(k.listen_fd);
	return rc;
}

static void expect_fake_refused(struct fixture *f, enum fake_mode mode, const char *want)
{
	struct agent_reply r;
	struct sb_err err;

	assert_int_equal(fake_exec(f, mode, &r, &err), -1);
	assert_contains(err.msg, want);
	assert_int_equal(r.agent_error, 0);
	assert_null(r.result_json);  /* never delivered */
	assert_null(r.receipt);
}

static void test_client_refuses_mismatched_replies(void **state)
{
	struct fixture *f = *state;
	struct agent_reply r;
	struct sb_err err;

	must(fake_exec(f, FAKE_GOOD, &r, &err), &err, "the fake's good reply");
	assert_true(r.receipt_verified);
	agent_reply_free(&r);
	must(fake_exec(f, FAKE_NO_RECEIPT, &r, &err), &err, "a result without receipt");
	assert_non_null(r.result_json);
	assert_null(r.receipt);  /* delivered as incomplete: the manager must not complete the exec */
	agent_reply_free(&r);
	expect_fake_refused(f, FAKE_RESULT_OTHER_ID, "result refused: it is for exec 'someone-else', not 'fake-exec'");
	expect_fake_refused(f, FAKE_RESULT_OTHER_GEN, "result refused: it is from generation 2, not 1");
	expect_fake_refused(f, FAKE_JSON_OTHER_GEN, "result refused: its JSON names another generation than 1");
	expect_fake_refused(f, FAKE_RECEIPT_OTHER_ID, "receipt refused: it is for exec 'someone-else'");
	expect_fake_refused(f, FAKE_RECEIPT_FORGED, "the HMAC does not verify");
}

/* ---------- the prebuilt init of the warm path (sandbox-agent/prebuilt.h) ---------- */

/* One exec on c in cwd; its result must be "exited" 0. Returns stdout (static, until the next call). */
static const char *exec_in(struct fixture *f, struct agent_conn *c, const char *id, const char *cwd,
			   const char *command)
{
	static char out[4096];
	struct agent_exec_request req;
	struct agent_reply r;
	struct sb_err err;
	json_t *res;

	exec_request(f, &req, id, command);
	req.cwd = cwd;
	if (agent_exec(c, &req, step_deadline(), &r, &err) < 0)
		fail_msg("exec %s: %s; log:\n%s", id, err.msg, log_read(f));
	res = json_parse(r.result_json);
	if (strcmp(jstr(res, "status"), "exited") != 0 || json_integer_value(json_object_get(res, "exit_code")) != 0)
		fail_msg("exec %s: %s; log:\n%s", id, r.result_json, log_read(f));
	snprintf(out, sizeof out, "%s", jstr(res, "stdout"));
	json_decref(res);
	agent_reply_free(&r);
	return out;
}

/* The state letter of /proc/PID/stat ('Z' for a zombie), or 0 when it cannot be read. */
static char proc_state(pid_t pid)
{
	char path[64], text[512], *close_paren;
	int fd;
	ssize_t n;

	snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	n = fd >= 0 ? read(fd, text, sizeof text - 1) : -1;
	if (fd >= 0)
		close(fd);
	if (n <= 0)
		return 0;
	text[n] = '\0';
	close_paren = strrchr(text, ')');
	return close_paren != NULL && close_paren[1] == ' ' ? close_paren[2] : 0;
}

/* Whether pid's PID namespace is the agent's: the spawner's is, an init's never. */
static bool in_agent_pidns(struct fixture *f, pid_t pid)
{
	char path[64], mine[64] = "", its[64] = "";
	ssize_t n;

	snprintf(path, sizeof path, "/proc/%d/ns/pid", (int)f->agent);
	n = readlink(path, mine, sizeof mine - 1);
	assert_true(n > 0);
	snprintf(path, sizeof path, "/proc/%d/ns/pid", (int)pid);
	n = readlink(path, its, sizeof its - 1);
	return n > 0 && strcmp(mine, its) == 0;
}

/* The agent's children now (every thread's), at most max of them. */
static size_t agent_children(struct fixture *f, pid_t *out, size_t max)
{
	char path[512], text[512];
	size_t got = 0;
	DIR *d;
	struct dirent *e;

	snprintf(path, sizeof path, "/proc/%d/task", (int)f->agent);
	d = opendir(path);
	assert_non_null(d);
	while ((e = readdir(d)) != NULL) {
		char *at, *next;
		ssize_t n;
		int fd;

		if (e->d_name[0] == '.')
			continue;
		snprintf(path, sizeof path, "/proc/%d/task/%s/children", (int)f->agent, e->d_name);
		fd = open(path, O_RDONLY | O_CLOEXEC);
		n = fd >= 0 ? read(fd, text, sizeof text - 1) : -1;
		if (fd >= 0)
			close(fd);
		text[n > 0 ? n : 0] = '\0';
		for (at = text; got < max && (out[got] = (pid_t)strtol(at, &next, 10)) > 0; at = next)
			got++;
	}
	closedir(d);
	return got;
}

/* The agent's one child in a PID namespace of its own while it is idle, once it is waiting: the
 * prebuilt init (the builder thread is its parent; the spawner, its other child, cloned it). */
static pid_t prebuilt_wait(struct fixture *f)
{
	for (int64_t end = clock_mono_ms() + 5000; clock_mono_ms() < end; sleep_ms(10)) {
		pid_t kids[8];
		size_t n = agent_children(f, kids, 8);

		for (size_t i = 0; i < n; i++) {
			char ready[64], state = proc_state(kids[i]);

			/* a dead child (the killed spawner, an init not yet reaped: Z, or X while it is
			 * reaped), or one reaped since the list was read (no state): never taken for a
			 * waiting init. (An unreadable namespace is no test: an unprivileged agent's init
			 * is not dumpable, so its namespace cannot be read.) */
			if (state == 0 || state == 'Z' || state == 'X' || in_agent_pidns(f, kids[i]))
				continue;
			/* built and waiting, not still being built */
			snprintf(ready, sizeof ready, "prebuilt init %d ready", (int)kids[i]);
			log_expect(f, ready);
			return kids[i];
		}
	}
	fail_msg("no prebuilt init appeared after a call; log:\n%s", log_read(f));
	return -1;
}

/* The agent's child in its own PID namespace: the spawner (sandbox-agent/spawner.h), or 0 for none. */
static pid_t spawner_find(struct fixture *f)
{
	pid_t kids[8];
	size_t n = agent_children(f, kids, 8);

	for (size_t i = 0; i < n; i++)
		if (in_agent_pidns(f, kids[i]))
			return kids[i];
	return 0;
}

/* Until pid is dead and not yet reaped (the agent reaps it when the next call looks). */
static void zombie_wait(struct fixture *f, pid_t pid)
{
	for (int64_t end = clock_mono_ms() + 5000; clock_mono_ms() < end; sleep_ms(5))
		if (proc_state(pid) == 'Z')
			return;
	fail_msg("the killed init %d did not die; log:\n%s", (int)pid, log_read(f));
}

/* Every call gets a PID namespace of its own: the command is pid 2 of it (a reused namespace would
 * count on), and what an earlier call left running is not there. The warm path is the one taken. */
static void test_prebuilt_fresh_each_call(void **state)
{
	struct fixture *f = *state;
	struct agent_conn *c = conn_open(f);
	char id[32], want[64];
	/* builtins only before the check: no child of bash takes pid 3 first */
	const char *cmd = "echo $$; for p in /proc/[0-9]*/comm; do read -r n < \"$p\"; [ \"$n\" = sleep ] && "
			  "echo leftover; done; setsid sleep 300 </dev/null >/dev/null 2>&1 &";

	for (int i = 0; i < 8; i++) {
		snprintf(id, sizeof id, "pb-fresh-%d", i);
		assert_string_equal(exec_in(f, c, id, f->work, cmd), "2\n");
		if (i > 0) {
			snprintf(want, sizeof want, "exec %s: on the prebuilt init", id);
			log_expect(f, want);
		}
	}
	/* A command much larger than a pipe holds reaches the waiting init whole. */
	{
		size_t n = 120 * 1024; /* under the kernel's 128 KiB for one argument */
		char *big = malloc(n + 32);

		assert_non_null(big);
		memcpy(big, ": ", 2);
		memset(big + 2, 'x', n);
		snprintf(big + 2 + n, 30, "; echo $$ end");
		prebuilt_wait(f);
		assert_string_equal(exec_in(f, c, "pb-fresh-big", f->work, big), "2 end\n");
		log_expect(f, "exec pb-fresh-big: on the prebuilt init");
		free(big);
	}
	agent_close(c);
}

/* The working directory is part of what an init is built for: another one discards it. */
static void test_prebuilt_cwd_changed(void **state)
{
	struct fixture *f = *state;
	struct agent_conn *c = conn_open(f);
	char a[192], b[192], want[512];

	dir_make(a, sizeof a, f->work, "pa");
	dir_make(b, sizeof b, f->work, "pb");
	chmod(a, 0755);
	chmod(b, 0755);
	assert_string_equal(exec_in(f, c, "pb-cwd-1", a, "true"), "");
	prebuilt_wait(f);
	snprintf(want, sizeof want, "%s\n", b);
	assert_string_equal(exec_in(f, c, "pb-cwd-2", b, "pwd -P"), want);
	snprintf(want, sizeof want, "discarded: built for the working directory %s, the call's is %s", a, b);
	log_expect(f, want);
	agent_close(c);
}

/* The working directory renamed away and replaced between two calls, same path: the command runs in
 * the new directory (the one the call's checks passed), never in the one the init entered earlier. */
static void test_prebuilt_cwd_replaced(void **state)
{
	struct fixture *f = *state;
	struct agent_conn *c = conn_open(f);
	char d[192], old[208], want[512];
	struct stat st;

	dir_make(d, sizeof d, f->work, "pr");
	chmod(d, 0755);
	assert_string_equal(exec_in(f, c, "pb-repl-1", d, "true"), "");
	prebuilt_wait(f);
	snprintf(old, sizeof old, "%s.old", d);
	assert_int_equal(rename(d, old), 0);
	assert_int_equal(mkdir(d, 0755), 0);
	assert_int_equal(stat(d, &st), 0);
	snprintf(want, sizeof want, "%lu\n", (unsigned long)st.st_ino);
	assert_string_equal(exec_in(f, c, "pb-repl-2", d, "stat -c %i ."), want);
	snprintf(want, sizeof want, "the working directory %s is another directory now", d);
	log_expect(f, want);
	agent_close(c);
}

/* "Seccomp:" and "Seccomp_filters:" of /proc/PID/status, or -1 each when the line is missing. */
static void seccomp_status(pid_t pid, int *mode, int *filters)
{
	char path[64], text[4096], *p;
	ssize_t n;
	int fd;

	*mode = *filters = -1;
	snprintf(path, sizeof path, "/proc/%d/status", (int)pid);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	assert_true(fd >= 0);
	n = read(fd, text, sizeof text - 1);
	close(fd);
	assert_true(n > 0);
	text[n] = '\0';
	if ((p = strstr(text, "\nSeccomp:")) != NULL)
		*mode = atoi(p + strlen("\nSeccomp:"));
	if ((p = strstr(text, "\nSeccomp_filters:")) != NULL)
		*filters = atoi(p + strlen("\nSeccomp_filters:"));
}

/* The prebuilt init loads the command's filter into itself before its call exists (init.c, docs/isolation.md):
 * the waiting init is already filtered, and the command it starts runs under exactly that one filter, which
 * still denies what it denies (a nested user namespace, ptrace of init). Fails if init stops loading it
 * while the command skips its own load (the command unfiltered), or if both load it (two filters). */
static void test_prebuilt_filtered_before_call(void **state)
{
	struct fixture *f = *state;
	struct agent_conn *c = conn_open(f);
	int mode, filters;
	pid_t init;

	assert_string_equal(exec_in(f, c, "pb-filter-1", f->work, "true"), "");
	init = prebuilt_wait(f);
	seccomp_status(init, &mode, &filters);
	assert_int_equal(mode, 2);
	assert_int_equal(filters, 1);
	assert_string_equal(exec_in(f, c, "pb-filter-2", f->work,
				    "grep -E '^Seccomp(_filters)?:' /proc/self/status | tr -d '\\t'; "
				    "unshare -U true 2>/dev/null && echo userns; "
				    "grep -q '^Seccomp:.*2' /proc/1/status && echo init-filtered"),
			    "Seccomp:2\nSeccomp_filters:1\ninit-filtered\n");
	log_expect(f, "exec pb-filter-2: on the prebuilt init");
	agent_close(c);
}

/* The escape programs against a prebuilt init, whose filter was loaded before its call (agent_prebuilt.sh
 * passes ESCAPE_DIR and ESCAPE_GUARD; agent_boundary.sh runs the same programs through one-shot exec):
 * init's signals, ptrace, /proc files, scheduling and limits, and the denied syscalls, each probe as
 * there. Their last line counts the probes that did not hold. */
static void test_prebuilt_escapes(void **state)
{
	struct fixture *f = *state;
	const char *dir = getenv("ESCAPE_DIR"), *guard = getenv("ESCAPE_GUARD");
	static const char *const programs[] = { "attack_init", "attack_syscalls" };
	struct agent_conn *c;

	if (dir == NULL || guard == NULL || dir[0] == '\0')
		skip();
	c = conn_open(f);
	assert_string_equal(exec_in(f, c, "pb-esc-0", f->work, "true"), "");
	for (size_t i = 0; i < sizeof programs / sizeof programs[0]; i++) {
		char cmd[1024], id[32], want[96];

		prebuilt_wait(f);
		snprintf(id, sizeof id, "pb-esc-%zu", i + 1);
		snprintf(cmd, sizeof cmd, "%s/%s %s | tail -n 1", dir, programs[i], guard);
		snprintf(want, sizeof want, "%s failures=0\n", programs[i]);
		assert_string_equal(exec_in(f, c, id, f->work, cmd), want);
		snprintf(want, sizeof want, "exec %s: on the prebuilt init", id);
		log_expect(f, want);
	}
	agent_close(c);
}

/* How many mount namespaces the agent holds descriptors of, and the last one's link ("mnt:[N]"). */
static int mnt_held(const struct fixture *f, char *link, size_t len)
{
	char path[64], text[64];
	struct dirent *e;
	int n = 0;
	DIR *d;

	snprintf(path, sizeof path, "/proc/%d/fd", (int)f->agent);
	d = opendir(path);
	assert_non_null(d);
	while ((e = readdir(d)) != NULL) {
		char fd_path[64 + sizeof e->d_name];
		ssize_t k;

		snprintf(fd_path, sizeof fd_path, "%s/%s", path, e->d_name);
		k = readlink(fd_path, text, sizeof text - 1);
		if (k <= 0)
			continue;
		text[k] = '\0';
		if (strncmp(text, "mnt:[", 5) == 0) {
			snprintf(link, len, "%s", text);
			n++;
		}
	}
	closedir(d);
	return n;
}

/* Until the agent holds exactly one mount namespace (the builder lets the last call's go just after
 * the next init is ready); its link. */
static void mnt_held_one(struct fixture *f, char *link, size_t len)
{
	int n = -1;

	for (int64_t end = clock_mono_ms() + 5000; clock_mono_ms() < end; sleep_ms(5))
		if ((n = mnt_held(f, link, len)) == 1)
			return;
	fail_msg("the agent holds %d mount namespaces at rest, not 1; log:\n%s", n, log_read(f));
}

/* The agent holds the waiting init's mount namespace, so that a call's mount tree is torn down after
 * its result rather than in init's exit (boundary_prebuilt.c mnt_ns_hold, prebuilt.c): at rest exactly
 * one, the namespace the next call's command then runs in; after calls, still one (the last call's is
 * let go, never piled up). Fails without the hold (none held) and without the let-go (two, then more). */
static void test_prebuilt_holds_one_mount_namespace(void **state)
{
	struct fixture *f = *state;
	struct agent_conn *c = conn_open(f);
	char held[64], want[80], id[32];

	assert_string_equal(exec_in(f, c, "pb-hold-0", f->work, "true"), "");
	for (int i = 1; i <= 4; i++) {
		prebuilt_wait(f);
		mnt_held_one(f, held, sizeof held);
		snprintf(id, sizeof id, "pb-hold-%d", i);
		snprintf(want, sizeof want, "%s\n", held);
		assert_string_equal(exec_in(f, c, id, f->work, "readlink /proc/self/ns/mnt"), want);
		snprintf(want, sizeof want, "exec %s: on the prebuilt init", id);
		log_expect(f, want);
	}
	prebuilt_wait(f);
	mnt_held_one(f, want, sizeof want);
	assert_string_not_equal(want, held);
	agent_close(c);
}

/* The prebuilt init killed while it waits: the next call builds afresh, says so, and succeeds. */
static void test_prebuilt_killed(void **state)
{
	struct fixture *f = *state;
	struct agent_conn *c = conn_open(f);
	pid_t init;

	assert_string_equal(exec_in(f, c, "pb-kill-1", f->work, "true"), "");
	init = prebuilt_wait(f);
	assert_int_equal(kill(init, SIGKILL), 0);
	zombie_wait(f, init);
	assert_string_equal(exec_in(f, c, "pb-kill-2", f->work, "echo $$"), "2\n");
	log_expect(f, "discarded: it ended while waiting");
	agent_close(c);
}

/* The spawner (sandbox-agent/spawner.h) is one process of the agent's own, holding nothing of the agent's
 * open: stdin, stdout, stderr and its end of the channel, no listener, connection, journal or state
 * file. The inits it clones are the agent's children (CLONE_PARENT: reaped and parent-death-signalled
 * by the agent, as before). Fails when the spawner keeps the agent's descriptors. */
static void test_prebuilt_spawner_holds_nothing(void **state)
{
	struct fixture *f = *state;
	struct agent_conn *c = conn_open(f);
	char path[64], link[128], want[64];
	pid_t init, sp;
	size_t n = 0;
	DIR *d;
	struct dirent *e;

	assert_string_equal(exec_in(f, c, "pb-spawner-1", f->work, "true"), "");
	init = prebuilt_wait(f);
	sp = spawner_find(f);
	assert_true(sp > 0);
	snprintf(want, sizeof want, "spawner %d started", (int)sp);
	log_expect(f, want);
	snprintf(path, sizeof path, "/proc/%d/fd", (int)sp);
	d = opendir(path);
	assert_non_null(d);
	while ((e = readdir(d)) != NULL) {
		char fdpath[384];
		ssize_t len;
		int fd;

		if (e->d_name[0] == '.')
			continue;
		fd = atoi(e->d_name);
		snprintf(fdpath, sizeof fdpath, "%s/%s", path, e->d_name);
		len = readlink(fdpath, link, sizeof link - 1);
		link[len > 0 ? len : 0] = '\0';
		if (fd > 2 && strncmp(link, "socket:", 7) != 0)
			fail_msg("the spawner holds descriptor %d: %s", fd, link);
		n++;
	}
	closedir(d);
	assert_int_equal(n, 4);
	/* the init is the agent's child, not the spawner's */
	assert_int_equal(agent_children(f, (pid_t[8]){ 0 }, 8), 2);
	assert_false(in_agent_pidns(f, init));
	assert_string_equal(exec_in(f, c, "pb-spawner-2", f->work, "echo $$"), "2\n");
	log_expect(f, "exec pb-spawner-2: on the prebuilt init");
	agent_close(c);
}

/* The spawner killed: the agent stops it (reaped), says so, clones the next init itself, and every call
 * still runs, on a prebuilt init. Fails when the builder does not fall back (no prebuilt init, or a
 * call that waits on a dead spawner). */
static void test_prebuilt_spawner_killed(void **state)
{
	struct fixture *f = *state;
	struct agent_conn *c = conn_open(f);
	char want[80];
	pid_t sp;

	assert_string_equal(exec_in(f, c, "pb-spk-1", f->work, "true"), "");
	prebuilt_wait(f);
	sp = spawner_find(f);
	assert_true(sp > 0);
	assert_int_equal(kill(sp, SIGKILL), 0);
	zombie_wait(f, sp);
	/* built before the kill: used */
	assert_string_equal(exec_in(f, c, "pb-spk-2", f->work, "echo $$"), "2\n");
	log_expect(f, "exec pb-spk-2: on the prebuilt init");
	/* the next one, cloned by the agent */
	prebuilt_wait(f);
	snprintf(want, sizeof want, "the spawner %d ended", (int)sp);
	log_expect(f, want);
	assert_int_equal(spawner_find(f), 0);
	assert_string_equal(exec_in(f, c, "pb-spk-3", f->work, "echo $$"), "2\n");
	log_expect(f, "exec pb-spk-3: on the prebuilt init");
	agent_close(c);
}

/* How many times needle occurs in the agent's log. */
static int log_count(const struct fixture *f, const char *needle)
{
	int n = 0;

	for (const char *at = strstr(log_read(f), needle); at != NULL; at = strstr(at + 1, needle))
		n++;
	return n;
}

/* Calls back to back: each waits for its prebuilt init's build, which ends after the call was claimed.
 * Every call after the first runs on a prebuilt init, and no call's timing line carries a build's marks:
 * they once made a wait for the build read as a slow start of the command (docs/performance.md). */
static void test_prebuilt_lines_without_build_marks(void **state)
{
	struct fixture *f = *state;
	struct agent_conn *c;
	char id[32], want[96];
	const char *line;
	int lines = 0;

	assert_int_equal(setenv("SANDBOX_AGENT_TIMING", "1", 1), 0);
	agent_stop(f);
	/* this agent's lines only (log_read reads the first 256 KiB) */
	assert_int_equal(truncate(f->log, 0), 0);
	agent_spawn(f);
	agent_wait_ready(f);
	unsetenv("SANDBOX_AGENT_TIMING");
	c = conn_open(f);
	for (int i = 0; i < 12; i++) {
		snprintf(id, sizeof id, "pb-lines-%d", i);
		assert_string_equal(exec_in(f, c, id, f->work, "echo $$"), "2\n");
		snprintf(want, sizeof want, "exec %s: on the prebuilt init", id);
		if (i > 0)
			log_expect(f, want);
	}
	/* each call's line is written after its result is sent */
	for (int64_t end = clock_mono_ms() + 5000;
	     log_count(f, "sandbox-agent timing (serve exec") < 12 && clock_mono_ms() < end; sleep_ms(20))
		;
	/* Only the first call's line has init's steps: its init was its own, built for it. */
	for (line = strstr(log_read(f), "sandbox-agent timing (serve exec"); line != NULL;
	     line = strstr(line + 1, "sandbox-agent timing (serve exec")) {
		const char *end = strchr(line, '\n'), *go = strstr(line, " init_go=");

		if (lines++ > 0 && go != NULL && (end == NULL || go < end))
			fail_msg("a build's marks in a call's timing line: %.300s", line);
	}
	if (lines < 12)
		fail_msg("%d timing lines for 12 calls; log:\n%s", lines, log_read(f));
	agent_close(c);
	agent_stop(f);
	agent_spawn(f);
	agent_wait_ready(f);
}

/* An operator's mounts between two calls (root: main() put the test and the agent in a private mount
 * namespace): a new mount is in the next call's view, and a new alias of a private directory is hidden
 * there, though the prebuilt init had copied the mount table before. */
static void test_prebuilt_mounts_between_calls(void **state)
{
	struct fixture *f = *state;
	struct agent_conn *c;
	char d[192], m[208], alias[192], want[512];

	if (geteuid() != 0)
		skip();
	c = conn_open(f);
	dir_make(d, sizeof d, f->work, "pm");
	dir_make(alias, sizeof alias, f->work, "alias");
	path_join(m, sizeof m, d, "m");
	assert_int_equal(mkdir(m, 0755), 0);
	chmod(d, 0755);
	assert_string_equal(exec_in(f, c, "pb-mnt-1", d, "mountpoint -q m || echo plain"), "plain\n");
	prebuilt_wait(f);
	assert_int_equal(mount("tmpfs", m, "tmpfs", 0, "size=64k"), 0);
	assert_string_equal(exec_in(f, c, "pb-mnt-2", d, "mountpoint -q m && stat -f -c %T m"), "tmpfs\n");
	log_expect(f, "discarded: the agent's mount table changed since it was built");
	prebuilt_wait(f);
	/* the test's base holds the agent's state directory: bound at alias, it shows at alias/state */
	assert_int_equal(mount(f->base, alias, NULL, MS_BIND, NULL), 0);
	/* the command (nobody, under a root agent) may walk to the alias */
	assert_int_equal(chmod(f->base, 0711), 0);
	assert_int_equal(chmod(f->work, 0711), 0);
	snprintf(want, sizeof want, "stat -c %%a %s/state 2>&1; ls -A %s/state 2>/dev/null | wc -l", alias, alias);
	assert_string_equal(exec_in(f, c, "pb-mnt-3", d, want), "0\n0\n");
	assert_int_equal(chmod(f->base, 0700), 0);
	assert_int_equal(chmod(f->work, 0700), 0);
	umount2(alias, MNT_DETACH);
	umount2(m, MNT_DETACH);
	agent_close(c);
}

/* A mount made while a call runs, after the builder last read the agent's mount table: the build after
 * that call reads the table again (its copy is kept only while POLLPRI says it is still the agent's,
 * prebuilt.c table_current), so a new alias of a private directory is hidden in the next call, which
 * runs on that prebuilt init. The call's own check at the hand-off could not catch a stale copy: the
 * mount came before the build, so nothing changed after it. */
static void test_prebuilt_mount_during_call(void **state)
{
	struct fixture *f = *state;
	struct agent_conn *c;
	struct exec_thread t;
	char d[192], alias[192], want[512];

	if (geteuid() != 0)
		skip();
	c = conn_open(f);
	/* the calls' working directory beside the alias, not around it (a private directory showing
	 * inside a writable root refuses the call) */
	dir_make(d, sizeof d, f->work, "pd");
	assert_int_equal(chmod(d, 0755), 0);
	dir_make(alias, sizeof alias, f->work, "alias-during");
	/* two builds: the table read at the first, kept for the second */
	assert_string_equal(exec_in(f, c, "pb-during-1", d, "true"), "");
	prebuilt_wait(f);
	assert_string_equal(exec_in(f, c, "pb-during-2", d, "true"), "");
	prebuilt_wait(f);
	exec_start_in(f, &t, "pb-during-3", d, "sleep 0.5", c);
	/* the test's base holds the agent's state directory: bound at alias, it shows at alias/state */
	assert_int_equal(mount(f->base, alias, NULL, MS_BIND, NULL), 0);
	exec_join(&t, "exited");
	agent_reply_free(&t.reply);
	prebuilt_wait(f);
	/* the command (nobody, under a root agent) may walk to the alias */
	assert_int_equal(chmod(f->base, 0711), 0);
	assert_int_equal(chmod(f->work, 0711), 0);
	snprintf(want, sizeof want, "stat -c %%a %s/state 2>&1; ls -A %s/state 2>/dev/null | wc -l", alias, alias);
	assert_string_equal(exec_in(f, c, "pb-during-4", d, want), "0\n0\n");
	log_expect(f, "exec pb-during-4: on the prebuilt init");
	assert_int_equal(chmod(f->base, 0700), 0);
	assert_int_equal(chmod(f->work, 0700), 0);
	umount2(alias, MNT_DETACH);
	agent_close(c);
}

/* ---------- serve --user-home: the command's user named in a view the agent does not build ---------- */

static void text_put(const char *path, const char *text)
{
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);

	assert_true(fd >= 0);
	assert_int_equal(write(fd, text, strlen(text)), (ssize_t)strlen(text));
	assert_int_equal(fchmod(fd, 0644), 0);
	close(fd);
}

/* src bound at dst as it is: a link is bound as the link, never followed (a view whose /etc/passwd
 * is a link, as some images have it). */
static int bind_nofollow(const char *src, const char *dst)
{
	int fd = open_tree(AT_FDCWD, src, OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC | AT_SYMLINK_NOFOLLOW), rc;

	if (fd < 0)
		return -1;
	rc = move_mount(fd, "", AT_FDCWD, dst, MOVE_MOUNT_F_EMPTY_PATH);
	close(fd);
	return rc;
}

/* In the child: a mount namespace of its own (and, unprivileged, a user namespace mapping only its
 * own ids, to own it) whose /etc/passwd and /etc/group are the test's, as a pod's image's are: no
 * entry for the command's ids. Then the agent. Failures end the child with 127 and a line in the
 * agent's log. */
__attribute__((noreturn)) static void users_child(const struct fixture *f, char **argv, const char *pw, const char *gr)
{
	uid_t uid = getuid();
	gid_t gid = getgid();
	struct sb_err err;
	int fd = open(f->log, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
	int null = open("/dev/null", O_RDWR | O_CLOEXEC);

	if (fd < 0 || null < 0 || dup2(null, 0) < 0 || dup2(null, 1) < 0 || dup2(fd, 2) < 0)
		_exit(127);
	if (uid == 0 ? unshare(CLONE_NEWNS) < 0 : unshare(CLONE_NEWUSER | CLONE_NEWNS) < 0) {
		perror("unshare");
		_exit(127);
	}
	/* Its own ids only, as an unprivileged process may map them (common/nsspawn.c, as init's are). */
	if (uid != 0 && spawn_id_maps_write(getpid(), uid, uid, gid, gid, &err) < 0) {
		fprintf(stderr, "%s\n", err.msg);
		_exit(127);
	}
	if (mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) < 0 || bind_nofollow(pw, "/etc/passwd") < 0 ||
	    bind_nofollow(gr, "/etc/group") < 0) {
		perror("binding the test's passwd and group");
		_exit(127);
	}
	execve(argv[0], argv, environ);
	perror("execve");
	_exit(127);
}

/* The fixture's agent restarted in users_child's view, with `--user-home home` (or without, when
 * home is NULL); with pw_link, the view's /etc/passwd is a link to the test's file. */
static void agent_spawn_users(struct fixture *f, const char *home, bool pw_link)
{
	char crt[256], key[256], ca[256], listen_arg[256], pw[160], gr[160], link[160];
	char *argv[] = { (char *)getenv("SANDBOX_AGENT"), "serve", "--listen", listen_arg, "--tls-cert", crt,
			 "--tls-key", key, "--tls-ca", ca, "--manager-name", CA_MANAGER_NAME, "--state-dir", f->state,
			 "--generation", "1", home ? "--user-home" : NULL, (char *)home, NULL };

	agent_stop(f);
	path_join(crt, sizeof crt, f->pki, "agent.crt");
	path_join(key, sizeof key, f->pki, "agent.key");
	path_join(ca, sizeof ca, f->pki, "ca.crt");
	path_join(pw, sizeof pw, f->base, "image-passwd");
	path_join(gr, sizeof gr, f->base, "image-group");
	snprintf(listen_arg, sizeof listen_arg, "unix:%s", f->sock);
	text_put(pw, "root:x:0:0:root:/root:/bin/bash\nsandbox:x:10001:10001::/home/sandbox:/bin/sh\n");
	text_put(gr, "root:x:0:\nsandbox:x:10001:\n");
	path_join(link, sizeof link, f->base, "image-passwd-link");
	unlink(link);
	assert_int_equal(symlink(pw, link), 0);
	f->agent = fork();
	assert_true(f->agent >= 0);
	if (f->agent == 0)
		users_child(f, argv, pw_link ? link : pw, gr);
	agent_wait_ready(f);
}

/* The command's stdout (the call must run), the agent's log on failure. */
static json_t *user_exec(struct fixture *f, const char *id, const char *command)
{
	struct agent_conn *c = conn_open(f);
	struct agent_exec_request req;
	struct agent_reply r;
	struct sb_err err;
	json_t *res;

	exec_request(f, &req, id, command);
	if (agent_exec(c, &req, step_deadline(), &r, &err) < 0)
		fail_msg("exec %s: %s; log:\n%s", id, err.msg, log_read(f));
	res = json_parse(r.result_json);
	agent_reply_free(&r);
	agent_close(c);
	return res;
}

/* A pod's view (the image's /etc/passwd and /etc/group without the command's ids): with
 * --user-home the command's uid and gid are "sandbox", its home the one given, every line of the
 * view's files still there, and the copies read-only; without it nothing names them "sandbox". A copy
 * replaced in the state directory after the start refuses the calls whose init is built after it,
 * naming the file (mutation M76: the bind left out). */
static void test_user_home_names_the_command(void **state)
{
	struct fixture *f = *state;
	unsigned uid = geteuid() == 0 ? 65534 : (unsigned)geteuid(), gid = geteuid() == 0 ? 65534 : (unsigned)getegid();
	char want[512], path[256], tmp[256], *text;
	json_t *res;

	agent_spawn_users(f, "/home/user-home-test", false);
	res = user_exec(f, "user-1", "id -un; id -gn; getent passwd $(id -u); getent group $(id -g); getent passwd root;"
			" getent passwd 10001 | cut -d: -f1; { echo x >>/etc/passwd; } 2>/dev/null; echo rc=$?;"
			" awk '$5 == \"/etc/passwd\" { p = $6 } $5 == \"/etc/group\" { g = $6 }"
			" END { print substr(p, 1, 3) substr(g, 1, 3) }' /proc/self/mountinfo");
	snprintf(want, sizeof want,
		 "sandbox\nsandbox\nsandbox:x:%u:%u:sandbox:/home/user-home-test:/bin/bash\nsandbox:x:%u:\n"
		 "root:x:0:0:root:/root:/bin/bash\nsandbox\nrc=1\nro,ro,\n", uid, gid, gid);
	assert_string_equal(jstr(res, "status"), "exited");
	assert_string_equal(jstr(res, "stdout"), want);
	json_decref(res);

	/* A copy put in place of the agent's: refused by every init built after it. */
	path_join(path, sizeof path, f->state, "users/passwd");
	path_join(tmp, sizeof tmp, f->state, "users/passwd.swap");
	text_put(tmp, "root:x:0:0:root:/root:/bin/bash\n");
	assert_int_equal(rename(tmp, path), 0);
	json_decref(user_exec(f, "user-2", "true")); /* its init may have been built before the swap */
	res = user_exec(f, "user-3", "echo never");
	text = json_dumps(res, 0);
	assert_string_equal(jstr(res, "status"), "refused");
	assert_contains(text, "was replaced since the agent wrote it");
	free(text);
	json_decref(res);

	agent_spawn_users(f, NULL, false);
	/* (As root the command is 65534, which glibc's systemd module names "nobody" on its own.) */
	res = user_exec(f, "user-4", "id -un 2>&1; echo rc=$?");
	assert_contains(jstr(res, "stdout"), "rc=");
	assert_null(strstr(jstr(res, "stdout"), "sandbox"));
	json_decref(res);
	agent_stop(f);
	agent_spawn(f);
	agent_wait_ready(f);
}

/* A view whose /etc/passwd is a link (some images have one): init makes no mount over a link, so the
 * command keeps the view's link as it is, the agent's log says so, and the group, a plain file, is
 * still named. The calls run. */
static void test_user_home_link_left(void **state)
{
	struct fixture *f = *state;
	char target[160], want[256], *log;
	json_t *res;

	path_join(target, sizeof target, f->base, "image-passwd"); /* where agent_spawn_users' link points */
	agent_spawn_users(f, "/home/user-home-test", true);
	res = user_exec(f, "user-link-1", "readlink /etc/passwd; id -gn; id -un 2>/dev/null | grep -cx sandbox");
	snprintf(want, sizeof want, "%s\nsandbox\n0\n", target);
	assert_string_equal(jstr(res, "status"), "exited");
	assert_string_equal(jstr(res, "stdout"), want);
	json_decref(res);
	log = log_read(f);
	assert_contains(log, "--user-home: /etc/passwd is not a plain file in this view: commands see it as it is");
	assert_null(strstr(log, "/etc/group is not a plain file"));
	agent_stop(f);
	agent_spawn(f);
	agent_wait_ready(f);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_hello_ping_query_cancel),
		cmocka_unit_test(test_exec_round_trip),
		cmocka_unit_test(test_live_output_connections_come_and_go),
		cmocka_unit_test(test_hello_refusals),
		cmocka_unit_test(test_net_accept_port_refused),
		cmocka_unit_test(test_net_relay_round_trip),
		cmocka_unit_test(test_handshake_matrix),
		cmocka_unit_test(test_stalled_handshakes_do_not_keep_the_manager_out),
		cmocka_unit_test(test_client_refuses_wrong_server_name),
		cmocka_unit_test(test_exec_wrong_generation),
		cmocka_unit_test(test_exec_output_limit_over),
		cmocka_unit_test(test_exec_environment),
		cmocka_unit_test(test_exec_timeout_kills),
		cmocka_unit_test(test_exec_id_reuse),
		cmocka_unit_test(test_exec_busy),
		cmocka_unit_test(test_cancel_running_exec),
		cmocka_unit_test(test_connection_dropped_mid_exec),
		cmocka_unit_test(test_end_survives_lost_files),
		cmocka_unit_test(test_end_killed_at_each_point),
		cmocka_unit_test(test_prune_after_the_result),
		cmocka_unit_test(test_query_after_another_boot),
		cmocka_unit_test(test_oversized_frame),
		cmocka_unit_test(test_malformed_frame_keeps_connection),
		cmocka_unit_test(test_listener_and_state_hidden),
		cmocka_unit_test(test_client_refuses_mismatched_replies),
		cmocka_unit_test(test_prebuilt_fresh_each_call),
		cmocka_unit_test(test_prebuilt_cwd_changed),
		cmocka_unit_test(test_prebuilt_cwd_replaced),
		cmocka_unit_test(test_prebuilt_filtered_before_call),
		cmocka_unit_test(test_prebuilt_escapes),
		cmocka_unit_test(test_prebuilt_killed),
		cmocka_unit_test(test_prebuilt_spawner_holds_nothing),
		cmocka_unit_test(test_prebuilt_spawner_killed),
		cmocka_unit_test(test_prebuilt_lines_without_build_marks),
		cmocka_unit_test(test_prebuilt_holds_one_mount_namespace),
		cmocka_unit_test(test_prebuilt_mounts_between_calls),
		cmocka_unit_test(test_prebuilt_mount_during_call),
		cmocka_unit_test(test_user_home_names_the_command),
		cmocka_unit_test(test_user_home_link_left),
	};
	const char *filter = getenv("TEST_AGENT_SERVE_FILTER");

	if (filter != NULL && filter[0] != '\0')
		cmocka_set_test_filter(filter);
	/* Root: the test's mounts (test_prebuilt_mounts_between_calls) and the agent share a private mount
	 * namespace of their own, never the host's. */
	if (geteuid() == 0 && (unshare(CLONE_NEWNS) < 0 || mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) < 0)) {
		perror("a private mount namespace for the test");
		return 1;
	}

	/* A peer that hangs up must be an error, never a SIGPIPE for the test. */
	signal(SIGPIPE, SIG_IGN);
	return cmocka_run_group_tests_name("agent_serve", tests, setup, teardown);
}
