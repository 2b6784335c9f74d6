/* Unit tests for common/tls.c over socketpairs, with the server (the agent's side) in a thread:
 * a good mutual handshake and frame round trip; every bad peer refused with a clear error on
 * the side that checks it; the server configuration still serves a good client afterwards;
 * truncation and deadlines reported as errors, never as a clean close. */
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
#include <ftw.h>
#include <pthread.h>
#include <sys/socket.h>
#include <sys/stat.h>

#include <mbedtls/net_sockets.h>
#include <mbedtls/ssl.h>

#include "ca.h"
#include "frame.h"
#include "random.h"
#include "tls.h"
#include "testutil.h"

#define AGENT_NAME "sandbox-s1.g1.agent"
#define TEST_TIMEOUT_MS 10000

struct fixture {
	char base[64];
	char pki[128];
	struct tls_config *server;  /* the agent: its certificate, expects the manager */
	struct tls_config *client;  /* the manager: its certificate, expects AGENT_NAME */
};

static void pki_path(char *out, size_t len, const struct fixture *f, const char *file)
{
	assert_true((size_t)snprintf(out, len, "%s/%s", f->pki, file) < len);
}

/* ---------- fixture: two CAs and every certificate the matrix needs ---------- */

static void issue(struct ca *ca, const char *dir, const char *file, const char *dns, enum ca_usage usage,
		  time_t not_before, time_t not_after)
{
	struct ca_leaf leaf = { .dns_name = dns, .usage = usage, .not_before = not_before, .not_after = not_after };
	struct sb_err err;

	if (ca_issue_leaf(ca, &leaf, dir, file, &err) < 0)
		fail_msg("%s", err.msg);
}

/* A configuration from files in the pki directory: <name>.crt, <name>.key and the trust list ca_file. */
static struct tls_config *config_make_trusting(const struct fixture *f, int server, const char *name, const char *expect,
					       const char *ca_file)
{
	char crt[256], key[256], ca[256], file[64];
	struct tls_config *c;
	struct sb_err err;
	int rc;

	snprintf(file, sizeof file, "%s.crt", name);
	pki_path(crt, sizeof crt, f, file);
	snprintf(file, sizeof file, "%s.key", name);
	pki_path(key, sizeof key, f, file);
	pki_path(ca, sizeof ca, f, ca_file);
	rc = server ? tls_config_server(&c, crt, key, ca, expect, &err) : tls_config_client(&c, crt, key, ca, expect, &err);
	if (rc < 0)
		fail_msg("%s", err.msg);
	tls_config_set_peer_label(c, server ? "manager" : "sandbox-agent");
	return c;
}

/* The same, trusting ca.crt. */
static struct tls_config *config_make(const struct fixture *f, int server, const char *name, const char *expect)
{
	return config_make_trusting(f, server, name, expect, "ca.crt");
}

static int setup(void **state)
{
	struct fixture *f = calloc(1, sizeof *f);
	char dir[160];
	struct ca *ca, *other;
	struct sb_err err;
	time_t now = time(NULL);

	assert_non_null(f);
	snprintf(f->base, sizeof f->base, "/tmp/test_tls.XXXXXX");
	assert_non_null(mkdtemp(f->base));
	snprintf(f->pki, sizeof f->pki, "%s/pki", f->base);
	assert_int_equal(mkdir(f->pki, 0700), 0);
	snprintf(dir, sizeof dir, "%s/ca", f->base);
	if (ca_open(dir, &ca, &err) < 0)
		fail_msg("%s", err.msg);
	snprintf(dir, sizeof dir, "%s/other-ca", f->base);
	if (ca_open(dir, &other, &err) < 0)
		fail_msg("%s", err.msg);
	assert_int_equal(ca_write_cert(ca, f->pki, "ca.crt", &err), 0);

	issue(ca, f->pki, "agent", AGENT_NAME, CA_USAGE_SERVER, 0, 0);
	issue(ca, f->pki, "agent-old-generation", "sandbox-s1.g0.agent", CA_USAGE_SERVER, 0, 0);
	issue(ca, f->pki, "manager", CA_MANAGER_NAME, CA_USAGE_CLIENT, 0, 0);
	issue(ca, f->pki, "wrong-name", "other.infra-sandbox", CA_USAGE_CLIENT, 0, 0);
	issue(ca, f->pki, "expired", CA_MANAGER_NAME, CA_USAGE_CLIENT, now - 2 * 86400, now - 86400);
	issue(ca, f->pki, "server-role", CA_MANAGER_NAME, CA_USAGE_SERVER, 0, 0);
	issue(other, f->pki, "foreign", CA_MANAGER_NAME, CA_USAGE_CLIENT, 0, 0);
	/* for the pinned client: another certificate of the same CA and name; one that has expired */
	issue(ca, f->pki, "agent-twin", AGENT_NAME, CA_USAGE_SERVER, 0, 0);
	issue(ca, f->pki, "agent-expired", AGENT_NAME, CA_USAGE_SERVER, now - 2 * 86400, now - 86400);
	/* the manager's self-signed certificate, in trust.crt beside the CA; another of the same name, not */
	{
		struct ca_cert_copy self = { .len = 0 };
		struct ca_leaf leaf = { .dns_name = CA_MANAGER_NAME, .usage = CA_USAGE_CLIENT, .self_signed = true,
					.copy = &self };

		if (ca_issue_leaf(ca, &leaf, f->pki, "manager-self", &err) < 0 ||
		    ca_write_trust_unsynced(ca, &self, f->pki, "trust.crt", &err) < 0)
			fail_msg("%s", err.msg);
		leaf.copy = NULL;
		if (ca_issue_leaf(ca, &leaf, f->pki, "manager-self-other", &err) < 0)
			fail_msg("%s", err.msg);
		/* listed, but expired */
		leaf.copy = &self;
		leaf.not_before = now - 2 * 86400;
		leaf.not_after = now - 86400;
		if (ca_issue_leaf(ca, &leaf, f->pki, "manager-self-expired", &err) < 0 ||
		    ca_write_trust_unsynced(ca, &self, f->pki, "trust-expired.crt", &err) < 0)
			fail_msg("%s", err.msg);
	}
	ca_free(ca);
	ca_free(other);

	f->server = config_make(f, 1, "agent", CA_MANAGER_NAME);
	f->client = config_make(f, 0, "manager", AGENT_NAME);
	*state = f;
	return 0;
}

static int teardown(void **state)
{
	struct fixture *f = *state;

	tls_config_free(f->server);
	tls_config_free(f->client);
	test_rmtree(f->base);
	free(f);
	return 0;
}

/* ---------- the server thread ---------- */

enum server_mode {
	SERVE_ECHO,      /* echo one frame, then expect the client's close_notify */
	SERVE_TRUNCATE,  /* after the handshake, drop the connection without close_notify */
	SERVE_SILENT,    /* after the handshake, send nothing until the client goes away */
};

struct server_run {
	struct tls_config *config;
	enum server_mode mode;
	int fd;
	int rc;           /* tls_session_open's result */
	int clean_close;  /* the client's close_notify was seen as end of stream */
	struct sb_err err;
	pthread_t thread;
};

static void server_echo(struct server_run *r, struct tls_session *s)
{
	struct sb_stream stream;
	uint8_t *buf;
	size_t len;

	tls_session_stream(s, &stream);
	if (frame_read(&stream, 1024, &buf, &len, &r->err) != 1)
		return;
	if (frame_write(&stream, buf, len, 1024, &r->err) < 0) {
		free(buf);
		return;
	}
	free(buf);
	/* The client's close_notify must read as a clean end of stream (0), nothing else. */
	r->clean_close = frame_read(&stream, 1024, &buf, &len, &r->err) == 0;
	free(buf);
}

static void *server_main(void *arg)
{
	struct server_run *r = arg;
	struct tls_session *s;
	struct sb_err close_err;

	r->rc = tls_session_open(r->config, r->fd, tls_deadline_after(TEST_TIMEOUT_MS), &s, &r->err);
	if (r->rc == 0) {
		tls_session_set_deadline(s, tls_deadline_after(TEST_TIMEOUT_MS));
		if (r->mode == SERVE_ECHO) {
			server_echo(r, s);
			tls_session_close(s, &close_err);
		} else if (r->mode == SERVE_SILENT) {
			struct sb_stream stream;
			uint8_t byte;

			tls_session_stream(s, &stream);
			(void)stream.read(stream.ctx, &byte, 1);
			tls_session_free(s);
		} else {
			tls_session_free(s);
		}
	}
	close(r->fd);  /* so a client still waiting sees the end of the stream */
	return NULL;
}

/* Starts a server session on one end of a fresh socketpair; returns the client's end. */
static int server_start(struct server_run *r, struct tls_config *config, enum server_mode mode)
{
	int sv[2];

	memset(r, 0, sizeof *r);
	assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
	r->config = config;
	r->mode = mode;
	r->fd = sv[0];
	r->rc = -2;
	assert_int_equal(pthread_create(&r->thread, NULL, server_main, r), 0);
	return sv[1];
}

static void server_wait(struct server_run *r)
{
	assert_int_equal(pthread_join(r->thread, NULL), 0);
}

/* ---------- the good path, also run after every refusal ---------- */

static void session_ok(struct tls_config *server, struct tls_config *client)
{
	static const char msg[] = "Exec over mutual TLS";
	struct server_run r;
	struct tls_session *s;
	struct sb_stream stream;
	struct sb_err err;
	uint8_t *buf;
	size_t len;
	int fd = server_start(&r, server, SERVE_ECHO);

	if (tls_session_open(client, fd, tls_deadline_after(TEST_TIMEOUT_MS), &s, &err) < 0)
		fail_msg("good client refused: %s", err.msg);
	assert_string_equal(tls_session_version(s), "TLSv1.2");
	assert_non_null(strstr(tls_session_ciphersuite(s), "ECDHE-ECDSA"));
	tls_session_set_deadline(s, tls_deadline_after(TEST_TIMEOUT_MS));
	tls_session_stream(s, &stream);
	assert_int_equal(frame_write(&stream, msg, sizeof msg, 1024, &err), 0);
	assert_int_equal(frame_read(&stream, 1024, &buf, &len, &err), 1);
	assert_int_equal(len, sizeof msg);
	assert_memory_equal(buf, msg, len);
	free(buf);
	assert_int_equal(tls_session_close(s, &err), 0);
	close(fd);
	server_wait(&r);
	assert_int_equal(r.rc, 0);
	assert_true(r.clean_close);
}

static void good_session(struct fixture *f)
{
	session_ok(f->server, f->client);
}

static void test_good_handshake_and_frame(void **state)
{
	good_session(*state);
	good_session(*state);  /* the same configurations serve any number of sessions */
}

/* Clients on several threads at once, all sharing the two configurations. */
struct client_run {
	struct fixture *f;
	int ok;
	struct sb_err err;
	pthread_t thread;
};

static void *client_main(void *arg)
{
	static const char msg[] = "concurrent";
	struct client_run *c = arg;
	struct server_run r;
	struct tls_session *s;
	struct sb_stream stream;
	uint8_t *buf = NULL;
	size_t len;
	int sv[2];

	memset(&r, 0, sizeof r);
	if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) < 0)
		return NULL;
	r.config = c->f->server;
	r.mode = SERVE_ECHO;
	r.fd = sv[0];
	if (pthread_create(&r.thread, NULL, server_main, &r) != 0)
		return NULL;
	if (tls_session_open(c->f->client, sv[1], tls_deadline_after(TEST_TIMEOUT_MS), &s, &c->err) == 0) {
		tls_session_stream(s, &stream);
		c->ok = frame_write(&stream, msg, sizeof msg, 64, &c->err) == 0 &&
			frame_read(&stream, 64, &buf, &len, &c->err) == 1 && len == sizeof msg &&
			memcmp(buf, msg, len) == 0 && tls_session_close(s, &c->err) == 0;
		free(buf);
	}
	close(sv[1]);
	pthread_join(r.thread, NULL);
	c->ok = c->ok && r.rc == 0 && r.clean_close;
	return NULL;
}

static void test_concurrent_sessions(void **state)
{
	struct client_run runs[8];

	for (size_t i = 0; i < 8; i++) {
		memset(&runs[i], 0, sizeof runs[i]);
		runs[i].f = *state;
		assert_int_equal(pthread_create(&runs[i].thread, NULL, client_main, &runs[i]), 0);
	}
	for (size_t i = 0; i < 8; i++) {
		assert_int_equal(pthread_join(runs[i].thread, NULL), 0);
		if (!runs[i].ok)
			fail_msg("concurrent session %zu failed: %s", i, runs[i].err.msg);
	}
}

/* ---------- the refusal matrix ---------- */

/* One handshake of client against an echo server; the client's result (err on -1), the server's in r. */
static int handshake_pair(struct tls_config *server, struct tls_config *client, struct server_run *r,
			  struct sb_err *err)
{
	struct tls_session *s = NULL;
	int fd = server_start(r, server, SERVE_ECHO);
	int rc = tls_session_open(client, fd, tls_deadline_after(TEST_TIMEOUT_MS), &s, err);

	close(fd);
	server_wait(r);
	if (rc == 0)
		tls_session_free(s);
	return rc;
}

/* Runs client against server; both handshakes must fail, and each side's message must contain
 * its `want` (NULL: not checked, the side may only see the connection end). */
static void expect_refused(struct fixture *f, struct tls_config *server, struct tls_config *client,
			   const char *server_want, const char *client_want)
{
	struct server_run r;
	struct sb_err err;
	int rc = handshake_pair(server, client, &r, &err);

	assert_int_equal(r.rc, -1);
	if (server_want != NULL && strstr(r.err.msg, server_want) == NULL)
		fail_msg("server message '%s' lacks '%s'", r.err.msg, server_want);
	if (client_want != NULL) {
		assert_int_equal(rc, -1);
		if (strstr(err.msg, client_want) == NULL)
			fail_msg("client message '%s' lacks '%s'", err.msg, client_want);
	}
	/* The refusal left nothing broken: a good client succeeds against a fresh server session. */
	good_session(f);
}

static void test_client_cert_other_ca(void **state)
{
	struct fixture *f = *state;
	struct tls_config *c = config_make(f, 0, "foreign", AGENT_NAME);

	expect_refused(f, f->server, c, "TLS handshake with manager refused: client certificate is not signed "
		       "by the configured CA", "refused it with alert");
	tls_config_free(c);
}

static void test_client_cert_wrong_name(void **state)
{
	struct fixture *f = *state;
	struct tls_config *c = config_make(f, 0, "wrong-name", AGENT_NAME);

	expect_refused(f, f->server, c, "TLS handshake with manager refused: client certificate does not name "
		       "'manager.infra-sandbox' (names: other.infra-sandbox)", "alert bad_certificate");
	tls_config_free(c);
}

static void test_client_cert_expired(void **state)
{
	struct fixture *f = *state;
	struct tls_config *c = config_make(f, 0, "expired", AGENT_NAME);

	expect_refused(f, f->server, c, "client certificate has expired", "alert certificate_expired");
	tls_config_free(c);
}

static void test_client_cert_for_server_role(void **state)
{
	struct fixture *f = *state;
	struct tls_config *c = config_make(f, 0, "server-role", AGENT_NAME);

	expect_refused(f, f->server, c, "client certificate is not issued for this role", NULL);
	tls_config_free(c);
}

static void test_server_cert_wrong_name(void **state)
{
	struct fixture *f = *state;
	/* An agent of an older generation answering for the current one. */
	struct tls_config *old = config_make(f, 1, "agent-old-generation", CA_MANAGER_NAME);

	expect_refused(f, old, f->client, "refused it with alert bad_certificate",
		       "TLS handshake with sandbox-agent refused: server certificate does not name "
		       "'sandbox-s1.g1.agent' (names: sandbox-s1.g0.agent)");
	tls_config_free(old);
}

/* ---------- clients our API cannot build: plain mbedtls ---------- */

struct raw_client {
	int minor_min, minor_max;  /* MBEDTLS_SSL_MINOR_VERSION_x */
	const int *suites;         /* NULL: mbedtls' defaults */
	const char *cert;          /* NULL: present no certificate */
};

/* mbedtls_net_send uses write(2): a server that already hung up would SIGPIPE the test. */
static int raw_send(void *ctx, const unsigned char *buf, size_t len)
{
	ssize_t n = send(*(int *)ctx, buf, len, MSG_NOSIGNAL);

	return n >= 0 ? (int)n : MBEDTLS_ERR_NET_SEND_FAILED;
}

static int raw_recv(void *ctx, unsigned char *buf, size_t len)
{
	ssize_t n = recv(*(int *)ctx, buf, len, 0);

	return n >= 0 ? (int)n : MBEDTLS_ERR_NET_RECV_FAILED;
}

/* Runs a handshake with a client configured outside our policy; returns mbedtls' result. */
static int raw_handshake(struct fixture *f, int fd, const struct raw_client *rc)
{
	mbedtls_ssl_config conf;
	mbedtls_ssl_context ssl;
	mbedtls_x509_crt crt;
	mbedtls_pk_context key;
	char path[256], file[64];
	int ret;

	mbedtls_ssl_config_init(&conf);
	mbedtls_ssl_init(&ssl);
	mbedtls_x509_crt_init(&crt);
	mbedtls_pk_init(&key);
	assert_int_equal(mbedtls_ssl_config_defaults(&conf, MBEDTLS_SSL_IS_CLIENT, MBEDTLS_SSL_TRANSPORT_STREAM,
						     MBEDTLS_SSL_PRESET_DEFAULT), 0);
	mbedtls_ssl_conf_rng(&conf, tls_rng, NULL);
	mbedtls_ssl_conf_authmode(&conf, MBEDTLS_SSL_VERIFY_NONE);  /* the server's verdict is under test */
	mbedtls_ssl_conf_min_version(&conf, MBEDTLS_SSL_MAJOR_VERSION_3, rc->minor_min);
	mbedtls_ssl_conf_max_version(&conf, MBEDTLS_SSL_MAJOR_VERSION_3, rc->minor_max);
	if (rc->suites != NULL)
		mbedtls_ssl_conf_ciphersuites(&conf, rc->suites);
	if (rc->cert != NULL) {
		snprintf(file, sizeof file, "%s.crt", rc->cert);
		pki_path(path, sizeof path, f, file);
		assert_int_equal(mbedtls_x509_crt_parse_file(&crt, path), 0);
		snprintf(file, sizeof file, "%s.key", rc->cert);
		pki_path(path, sizeof path, f, file);
		assert_int_equal(mbedtls_pk_parse_keyfile(&key, path, NULL), 0);
		assert_int_equal(mbedtls_ssl_conf_own_cert(&conf, &crt, &key), 0);
	}
	assert_int_equal(mbedtls_ssl_setup(&ssl, &conf), 0);
	mbedtls_ssl_set_bio(&ssl, &fd, raw_send, raw_recv, NULL);
	do
		ret = mbedtls_ssl_handshake(&ssl);
	while (ret == MBEDTLS_ERR_SSL_WANT_READ || ret == MBEDTLS_ERR_SSL_WANT_WRITE);
	if (ret == 0) {
		/* mbedtls clients finish their flight before the server's verdict: a read shows it. */
		unsigned char byte;

		ret = mbedtls_ssl_read(&ssl, &byte, 1);
	}
	mbedtls_ssl_free(&ssl);
	mbedtls_ssl_config_free(&conf);
	mbedtls_x509_crt_free(&crt);
	mbedtls_pk_free(&key);
	return ret;
}

static void expect_raw_refused(struct fixture *f, const struct raw_client *rc, const char *server_want)
{
	struct server_run r;
	int fd = server_start(&r, f->server, SERVE_ECHO);
	int ret = raw_handshake(f, fd, rc);

	close(fd);
	server_wait(&r);
	assert_true(ret < 0);
	assert_int_equal(r.rc, -1);
	if (strstr(r.err.msg, server_want) == NULL)
		fail_msg("server message '%s' lacks '%s'", r.err.msg, server_want);
	good_session(f);
}

static void test_client_without_certificate(void **state)
{
	struct raw_client rc = { MBEDTLS_SSL_MINOR_VERSION_3, MBEDTLS_SSL_MINOR_VERSION_3, NULL, NULL };

	expect_raw_refused(*state, &rc, "TLS handshake with manager refused: the client presented no certificate");
}

static void test_tls11_client(void **state)
{
	/* Debian's mbedtls 2.28 still builds TLS 1.1 (MBEDTLS_SSL_PROTO_TLS1_1), so a real 1.1 client. */
	struct raw_client rc = { MBEDTLS_SSL_MINOR_VERSION_2, MBEDTLS_SSL_MINOR_VERSION_2, NULL, "manager" };

	expect_raw_refused(*state, &rc, "TLS handshake with manager refused: the client does not speak TLS 1.2");
}

static void test_cbc_only_client(void **state)
{
	static const int cbc[] = { MBEDTLS_TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA256, 0 };
	struct raw_client rc = { MBEDTLS_SSL_MINOR_VERSION_3, MBEDTLS_SSL_MINOR_VERSION_3, cbc, "manager" };

	expect_raw_refused(*state, &rc, "no shared cipher suite");
}

static void test_random_bytes_instead_of_client_hello(void **state)
{
	struct fixture *f = *state;
	struct server_run r;
	uint8_t junk[512], sink[256];
	struct sb_err err;
	int fd = server_start(&r, f->server, SERVE_ECHO);

	assert_int_equal(sb_random_bytes(junk, sizeof junk, &err), 0);
	junk[0] = 'G';  /* not the handshake record type (22), so the verdict does not depend on luck */
	assert_int_equal(send(fd, junk, sizeof junk, MSG_NOSIGNAL), (ssize_t)sizeof junk);
	assert_int_equal(shutdown(fd, SHUT_WR), 0);
	while (read(fd, sink, sizeof sink) > 0)
		;
	close(fd);
	server_wait(&r);
	assert_int_equal(r.rc, -1);
	if (strstr(r.err.msg, "TLS handshake with manager failed: not a valid TLS 1.2 handshake") == NULL)
		fail_msg("server message '%s'", r.err.msg);
	good_session(f);
}

/* ---------- after the handshake ---------- */

static void test_truncation_is_an_error(void **state)
{
	struct fixture *f = *state;
	struct server_run r;
	struct tls_session *s;
	struct sb_stream stream;
	struct sb_err err;
	uint8_t *buf;
	size_t len;
	int fd = server_start(&r, f->server, SERVE_TRUNCATE);

	assert_int_equal(tls_session_open(f->client, fd, tls_deadline_after(TEST_TIMEOUT_MS), &s, &err), 0);
	tls_session_stream(s, &stream);
	server_wait(&r);
	assert_int_equal(frame_read(&stream, 1024, &buf, &len, &err), -1);
	assert_int_equal(err.errnum, EPROTO);
	assert_non_null(strstr(tls_session_last_error(s), "ended without close_notify"));
	/* The session stays failed rather than turning into a clean end later. */
	assert_int_equal(frame_read(&stream, 1024, &buf, &len, &err), -1);
	tls_session_free(s);
	close(fd);
}

static void test_io_deadline(void **state)
{
	struct fixture *f = *state;
	struct server_run r;
	struct tls_session *s;
	struct sb_stream stream;
	struct sb_err err;
	uint8_t *buf;
	size_t len;
	int fd = server_start(&r, f->server, SERVE_SILENT);

	assert_int_equal(tls_session_open(f->client, fd, tls_deadline_after(TEST_TIMEOUT_MS), &s, &err), 0);
	tls_session_set_deadline(s, tls_deadline_after(100));
	tls_session_stream(s, &stream);
	assert_int_equal(frame_read(&stream, 1024, &buf, &len, &err), -1);
	assert_int_equal(err.errnum, ETIMEDOUT);
	assert_non_null(strstr(tls_session_last_error(s), "deadline passed"));
	tls_session_free(s);
	close(fd);
	server_wait(&r);
}

static void test_handshake_deadline(void **state)
{
	struct fixture *f = *state;
	struct tls_session *s = NULL;
	struct sb_err err;
	int sv[2];

	/* A peer that accepts the connection and never answers. */
	assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
	assert_int_equal(tls_session_open(f->client, sv[1], tls_deadline_after(100), &s, &err), -1);
	assert_null(s);
	assert_int_equal(err.errnum, ETIMEDOUT);
	assert_non_null(strstr(err.msg, "did not finish in time"));
	close(sv[0]);
	close(sv[1]);
}

static void test_config_errors(void **state)
{
	struct fixture *f = *state;
	char crt[256], key[256], ca[256], other_key[256];
	struct tls_config *c = NULL;
	struct sb_err err;

	pki_path(crt, sizeof crt, f, "agent.crt");
	pki_path(key, sizeof key, f, "agent.key");
	pki_path(ca, sizeof ca, f, "ca.crt");
	pki_path(other_key, sizeof other_key, f, "manager.key");
	assert_int_equal(tls_config_server(&c, crt, other_key, ca, CA_MANAGER_NAME, &err), -1);
	assert_non_null(strstr(err.msg, "does not match its private key"));
	assert_int_equal(tls_config_server(&c, crt, key, "/nonexistent/ca.crt", CA_MANAGER_NAME, &err), -1);
	assert_int_equal(err.errnum, ENOENT);
	assert_non_null(strstr(err.msg, "/nonexistent/ca.crt"));
	assert_int_equal(tls_config_server(&c, key, key, ca, CA_MANAGER_NAME, &err), -1);
	assert_non_null(strstr(err.msg, "loading certificate"));
	assert_int_equal(tls_config_client(&c, crt, key, ca, "Not A Name", &err), -1);
	assert_non_null(strstr(err.msg, "expected server name"));
	assert_null(c);
}

/* ---------- the pinned client: exactly one certificate ---------- */

/* <name>.crt of the pki directory into pem (NUL-terminated, as ca_issue_leaf's copy); its length. */
static size_t pem_read(const struct fixture *f, const char *name, unsigned char *pem, size_t size)
{
	char path[256], file[64];
	size_t len;
	FILE *fp;

	snprintf(file, sizeof file, "%s.crt", name);
	pki_path(path, sizeof path, f, file);
	fp = fopen(path, "re");
	assert_non_null(fp);
	len = fread(pem, 1, size - 1, fp);
	fclose(fp);
	assert_true(len > 0 && len < size - 1);
	pem[len] = '\0';
	return len;
}

/* The manager's client for AGENT_NAME, pinned to the certificate in <name>.crt. */
static struct tls_config *pinned_client(const struct fixture *f, const char *name)
{
	struct tls_config *c = config_make(f, 0, "manager", AGENT_NAME);
	unsigned char pem[4096];
	size_t len = pem_read(f, name, pem, sizeof pem);
	struct sb_err err;

	if (tls_config_pin_peer(c, pem, len, &err) < 0)
		fail_msg("%s", err.msg);
	return c;
}

static void test_pinned_accepts_its_certificate(void **state)
{
	struct fixture *f = *state;
	struct tls_config *c = pinned_client(f, "agent");

	session_ok(f->server, c);
	session_ok(f->server, c);
	tls_config_free(c);
}

/* The pinned client refuses after mbedtls' handshake (its check is handshake_check_peer's): the
 * server may have finished its side, and then sees the alert instead of a request. */
static void expect_client_refused(struct fixture *f, struct tls_config *server, struct tls_config *client,
				  const char *client_want)
{
	struct server_run r;
	struct sb_err err;
	int rc = handshake_pair(server, client, &r, &err);

	assert_int_equal(rc, -1);
	if (strstr(err.msg, client_want) == NULL)
		fail_msg("client message '%s' lacks '%s'", err.msg, client_want);
	assert_false(r.rc == 0 && r.clean_close);  /* the server never saw a request and a clean end */
	good_session(f);
}

/* The CA's signature and the name are not what a pinned client accepts: a certificate the same CA
 * issued for the same name (which the chain client accepts) is refused. */
static void test_pinned_refuses_a_twin(void **state)
{
	struct fixture *f = *state;
	struct tls_config *twin = config_make(f, 1, "agent-twin", CA_MANAGER_NAME);
	struct tls_config *c = pinned_client(f, "agent");

	session_ok(twin, f->client);
	expect_client_refused(f, twin, c, "TLS handshake with sandbox-agent refused: server certificate not the one "
		       "issued to it (names: " AGENT_NAME ")");
	tls_config_free(c);
	tls_config_free(twin);
}

static void test_pinned_refuses_expired(void **state)
{
	struct fixture *f = *state;
	struct tls_config *old = config_make(f, 1, "agent-expired", CA_MANAGER_NAME);
	struct tls_config *c = pinned_client(f, "agent-expired");

	expect_client_refused(f, old, c, "server certificate expired");
	tls_config_free(c);
	tls_config_free(old);
}

/* A server presenting the pinned certificate without its key: mbedtls' server does not check the
 * pair, so a raw one can. Its ServerKeyExchange signature does not verify with the certificate's
 * key, and the pinned client refuses; the same server with the right key is accepted. */
struct raw_server {
	struct fixture *f;
	const char *key;
	int fd;
	int ret;
	pthread_t thread;
};

static void *raw_server_main(void *arg)
{
	struct raw_server *r = arg;
	mbedtls_ssl_config conf;
	mbedtls_ssl_context ssl;
	mbedtls_x509_crt crt;
	mbedtls_pk_context key;
	char path[256];

	mbedtls_ssl_config_init(&conf);
	mbedtls_ssl_init(&ssl);
	mbedtls_x509_crt_init(&crt);
	mbedtls_pk_init(&key);
	pki_path(path, sizeof path, r->f, "agent.crt");
	r->ret = mbedtls_x509_crt_parse_file(&crt, path);
	pki_path(path, sizeof path, r->f, r->key);
	if (r->ret == 0)
		r->ret = mbedtls_pk_parse_keyfile(&key, path, NULL);
	if (r->ret == 0)
		r->ret = mbedtls_ssl_config_defaults(&conf, MBEDTLS_SSL_IS_SERVER, MBEDTLS_SSL_TRANSPORT_STREAM,
						     MBEDTLS_SSL_PRESET_DEFAULT);
	mbedtls_ssl_conf_rng(&conf, tls_rng, NULL);
	if (r->ret == 0)
		r->ret = mbedtls_ssl_conf_own_cert(&conf, &crt, &key);
	if (r->ret == 0)
		r->ret = mbedtls_ssl_setup(&ssl, &conf);
	if (r->ret == 0) {
		mbedtls_ssl_set_bio(&ssl, &r->fd, raw_send, raw_recv, NULL);
		do
			r->ret = mbedtls_ssl_handshake(&ssl);
		while (r->ret == MBEDTLS_ERR_SSL_WANT_READ || r->ret == MBEDTLS_ERR_SSL_WANT_WRITE);
	}
	close(r->fd);
	mbedtls_ssl_free(&ssl);
	mbedtls_ssl_config_free(&conf);
	mbedtls_x509_crt_free(&crt);
	mbedtls_pk_free(&key);
	return NULL;
}

/* The pinned client's result against a raw server holding agent.crt and key_file. */
static int raw_server_run(struct fixture *f, struct tls_config *client, const char *key_file, struct sb_err *err)
{
	struct raw_server r = { .f = f, .key = key_file };
	struct tls_session *s = NULL;
	int sv[2], rc;

	assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
	r.fd = sv[0];
	assert_int_equal(pthread_create(&r.thread, NULL, raw_server_main, &r), 0);
	rc = tls_session_open(client, sv[1], tls_deadline_after(TEST_TIMEOUT_MS), &s, err);
	if (rc == 0)
		tls_session_free(s);
	close(sv[1]);
	assert_int_equal(pthread_join(r.thread, NULL), 0);
	return rc;
}

static void test_pinned_needs_the_key(void **state)
{
	struct fixture *f = *state;
	struct tls_config *c = pinned_client(f, "agent");
	struct sb_err err;

	if (raw_server_run(f, c, "agent.key", &err) < 0)
		fail_msg("the raw server with the right key was refused: %s", err.msg);
	assert_int_equal(raw_server_run(f, c, "agent-twin.key", &err), -1);
	if (strstr(err.msg, "TLS handshake with sandbox-agent failed") == NULL)
		fail_msg("unexpected message: %s", err.msg);
	tls_config_free(c);
}

static void test_pin_errors(void **state)
{
	struct fixture *f = *state;
	struct tls_config *c = config_make(f, 0, "manager", AGENT_NAME);
	struct tls_config *pinned = pinned_client(f, "agent");
	static const unsigned char junk[] = "not a certificate";
	unsigned char pem[4096];
	size_t len;
	struct sb_err err;

	assert_int_equal(tls_config_pin_peer(f->server, junk, sizeof junk - 1, &err), -1);
	assert_non_null(strstr(err.msg, "only a TLS client configuration"));
	assert_int_equal(tls_config_pin_peer(c, junk, sizeof junk - 1, &err), -1);
	assert_non_null(strstr(err.msg, "pinned certificate"));
	assert_int_equal(tls_config_pin_peer(pinned, junk, sizeof junk - 1, &err), -1);
	assert_non_null(strstr(err.msg, "once"));
	tls_config_free(c);
	tls_config_free(pinned);
	/* a certificate that does not name the expected server: refused when pinned, not at a handshake */
	c = config_make(f, 0, "manager", "sandbox-s1.g2.agent");
	len = pem_read(f, "agent", pem, sizeof pem);
	assert_int_equal(tls_config_pin_peer(c, pem, len, &err), -1);
	assert_non_null(strstr(err.msg, "does not name 'sandbox-s1.g2.agent'"));
	tls_config_free(c);
}

/* ---------- the agent trusting the manager's self-signed certificate as itself ---------- */

/* An agent whose trust list is the CA and this run's self-signed manager certificate accepts that
 * certificate (no signature to check: mbedtls' locally trusted end entity), and still the
 * CA-signed one (a manager after a restart). */
static void test_self_signed_manager_accepted(void **state)
{
	struct fixture *f = *state;
	struct tls_config *agent = config_make_trusting(f, 1, "agent", CA_MANAGER_NAME, "trust.crt");
	struct tls_config *self = config_make(f, 0, "manager-self", AGENT_NAME);

	session_ok(agent, self);
	session_ok(agent, f->client);
	tls_config_free(self);
	tls_config_free(agent);
}

/* Only the listed one: another self-signed certificate of the same name is refused, and an agent
 * that trusts the CA alone refuses the listed one (an agent of an earlier run and this run's). */
static void test_self_signed_manager_only_as_listed(void **state)
{
	struct fixture *f = *state;
	struct tls_config *agent = config_make_trusting(f, 1, "agent", CA_MANAGER_NAME, "trust.crt");
	struct tls_config *other = config_make(f, 0, "manager-self-other", AGENT_NAME);
	struct tls_config *self = config_make(f, 0, "manager-self", AGENT_NAME);

	expect_refused(f, agent, other, "TLS handshake with manager refused: client certificate is not signed by "
		       "the configured CA", NULL);
	expect_refused(f, f->server, self, "TLS handshake with manager refused: client certificate is not signed by "
		       "the configured CA", NULL);
	tls_config_free(self);
	tls_config_free(other);
	tls_config_free(agent);
	/* listed, but past its validity: no signature is checked, the dates still are */
	agent = config_make_trusting(f, 1, "agent", CA_MANAGER_NAME, "trust-expired.crt");
	self = config_make(f, 0, "manager-self-expired", AGENT_NAME);
	expect_refused(f, agent, self, "client certificate has expired", NULL);
	tls_config_free(self);
	tls_config_free(agent);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_good_handshake_and_frame),
		cmocka_unit_test(test_concurrent_sessions),
		cmocka_unit_test(test_client_without_certificate),
		cmocka_unit_test(test_client_cert_other_ca),
		cmocka_unit_test(test_client_cert_wrong_name),
		cmocka_unit_test(test_client_cert_expired),
		cmocka_unit_test(test_client_cert_for_server_role),
		cmocka_unit_test(test_server_cert_wrong_name),
		cmocka_unit_test(test_tls11_client),
		cmocka_unit_test(test_cbc_only_client),
		cmocka_unit_test(test_random_bytes_instead_of_client_hello),
		cmocka_unit_test(test_truncation_is_an_error),
		cmocka_unit_test(test_io_deadline),
		cmocka_unit_test(test_handshake_deadline),
		cmocka_unit_test(test_config_errors),
		cmocka_unit_test(test_pinned_accepts_its_certificate),
		cmocka_unit_test(test_pinned_refuses_a_twin),
		cmocka_unit_test(test_pinned_refuses_expired),
		cmocka_unit_test(test_pinned_needs_the_key),
		cmocka_unit_test(test_pin_errors),
		cmocka_unit_test(test_self_signed_manager_accepted),
		cmocka_unit_test(test_self_signed_manager_only_as_listed),
	};
	return cmocka_run_group_tests_name("tls", tests, setup, teardown);
}
