/* Unit tests for common/tls_pipe.c as policy proxy runs it on the kubernetes backend: the agent's
 * pipe (TLS server) and the manager's (TLS client) back to back over a socketpair, each with a
 * plain socket of its own: 256 KiB through one way unchanged and a half-close carried each way; an
 * idle pipe ends at its bound; a peer gone without close_notify is an error, never a clean end. */
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
#include <stdbool.h>
#include <pthread.h>
#include <sys/socket.h>
#include <sys/stat.h>

#include "ca.h"
#include "fdio.h"
#include "random.h"
#include "tls.h"
#include "tls_pipe.h"
#include "testutil.h"

#define AGENT_NAME "sandbox-s1.g1.agent"
#define TEST_MS 10000
#define BULK (256 * 1024)

struct fixture {
	char base[64];
	struct tls_config *server, *client;
};

static struct tls_config *config_make(const char *pki, int server, const char *name, const char *expect)
{
	char crt[256], key[256], ca[256];
	struct tls_config *c;
	struct sb_err err;

	snprintf(crt, sizeof crt, "%s/%s.crt", pki, name);
	snprintf(key, sizeof key, "%s/%s.key", pki, name);
	snprintf(ca, sizeof ca, "%s/ca.crt", pki);
	if ((server ? tls_config_server(&c, crt, key, ca, expect, &err) : tls_config_client(&c, crt, key, ca, expect, &err)) < 0)
		fail_msg("%s", err.msg);
	return c;
}

static int setup(void **state)
{
	struct fixture *f = calloc(1, sizeof *f);
	struct ca_leaf agent = { .dns_name = AGENT_NAME, .usage = CA_USAGE_SERVER };
	struct ca_leaf manager = { .dns_name = CA_MANAGER_NAME, .usage = CA_USAGE_CLIENT };
	char dir[128], pki[128];
	struct sb_err err;
	struct ca *ca;

	assert_non_null(f);
	snprintf(f->base, sizeof f->base, "/tmp/test_tls_pipe.XXXXXX");
	assert_non_null(mkdtemp(f->base));
	snprintf(dir, sizeof dir, "%s/ca", f->base);
	snprintf(pki, sizeof pki, "%s/pki", f->base);
	assert_int_equal(mkdir(pki, 0700), 0);
	if (ca_open(dir, &ca, &err) < 0 || ca_write_cert(ca, pki, "ca.crt", &err) < 0 ||
	    ca_issue_leaf(ca, &agent, pki, "agent", &err) < 0 || ca_issue_leaf(ca, &manager, pki, "manager", &err) < 0)
		fail_msg("%s", err.msg);
	ca_free(ca);
	f->server = config_make(pki, 1, "agent", CA_MANAGER_NAME);
	f->client = config_make(pki, 0, "manager", AGENT_NAME);
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

/* One end of the tunnel: the handshake on net, then tls_pipe between it and plain. */
struct end {
	struct tls_config *config;
	int net, plain, idle_ms;
	int rc, err;
	bool truncate;      /* a broken peer: after the handshake, gone without close_notify */
	pthread_t thread;
};

static void *end_main(void *arg)
{
	struct end *e = arg;
	struct tls_session *s;
	struct sb_err err;

	e->rc = -2;
	if (tls_session_open(e->config, e->net, tls_deadline_after(TEST_MS), &s, &err) < 0)
		return NULL;
	if (e->truncate) {
		tls_session_free(s);
		shutdown(e->net, SHUT_RDWR);
		e->rc = 0;
		return NULL;
	}
	errno = 0;
	e->rc = tls_pipe(s, e->net, e->plain, e->idle_ms);
	e->err = errno;
	tls_session_free(s);
	/* as the agent and the relay do: the plain connection ends with its pipe */
	close(e->plain);
	return NULL;
}

/* The agent's end (a[0]) and the manager's (b[0]) joined by net; *a_peer is the sandbox's side of
 * the agent's plain connection, *b_peer the proxy's side of the manager's. */
static void tunnel_start(struct fixture *f, struct end *agent, struct end *mgr, int idle_ms, bool truncate,
			 int *a_peer, int *b_peer)
{
	int net[2], a[2], b[2];

	assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, net), 0);
	assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, a), 0);
	assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, b), 0);
	*agent = (struct end){ .config = f->server, .net = net[0], .plain = a[0], .idle_ms = idle_ms };
	*mgr = (struct end){ .config = f->client, .net = net[1], .plain = b[0], .idle_ms = idle_ms, .truncate = truncate };
	*a_peer = a[1];
	*b_peer = b[1];
	assert_int_equal(pthread_create(&agent->thread, NULL, end_main, agent), 0);
	assert_int_equal(pthread_create(&mgr->thread, NULL, end_main, mgr), 0);
}

static void end_join(struct end *e)
{
	pthread_join(e->thread, NULL);
	close(e->net);
}

/* Everything fd has until its end of stream, into buf (at most len); the count. */
static size_t read_to_end(int fd, uint8_t *buf, size_t len)
{
	size_t got = 0;
	ssize_t n;

	while (got < len && (n = read(fd, buf + got, len - got)) > 0)
		got += (size_t)n;
	return got;
}

struct writer {
	int fd;
	const uint8_t *data;
	size_t len;
};

static void *writer_main(void *arg)
{
	struct writer *w = arg;

	assert_int_equal(fd_write_all(w->fd, w->data, w->len), 0);
	shutdown(w->fd, SHUT_WR); /* the half-close the pipe must carry */
	return NULL;
}

static void test_bytes_and_half_closes_both_ways(void **state)
{
	struct end agent, mgr;
	struct writer w;
	pthread_t t;
	uint8_t *data = malloc(BULK), *back = malloc(BULK + 1);
	int a_peer, b_peer;
	struct sb_err err;

	assert_non_null(data);
	assert_non_null(back);
	assert_int_equal(sb_random_bytes(data, BULK, &err), 0);
	tunnel_start(*state, &agent, &mgr, TEST_MS, false, &a_peer, &b_peer);
	/* the sandbox sends its request and closes its writing half ... */
	w = (struct writer){ .fd = a_peer, .data = data, .len = BULK };
	assert_int_equal(pthread_create(&t, NULL, writer_main, &w), 0);
	/* ... the proxy reads all of it and then the end of stream, still able to answer */
	assert_int_equal(read_to_end(b_peer, back, BULK + 1), BULK);
	assert_memory_equal(back, data, BULK);
	pthread_join(t, NULL);
	assert_int_equal(fd_write_all(b_peer, "answer", 6), 0);
	shutdown(b_peer, SHUT_WR);
	/* the answer reaches the sandbox, then its end */
	assert_int_equal(read_to_end(a_peer, back, BULK), 6);
	assert_memory_equal(back, "answer", 6);
	end_join(&agent);
	end_join(&mgr);
	assert_int_equal(agent.rc, 0);
	assert_int_equal(mgr.rc, 0);
	close(a_peer);
	close(b_peer);
	free(data);
	free(back);
}

static void test_idle_pipe_ends_at_its_bound(void **state)
{
	struct end agent, mgr;
	int a_peer, b_peer;

	tunnel_start(*state, &agent, &mgr, 300, false, &a_peer, &b_peer);
	end_join(&agent);
	end_join(&mgr);
	assert_int_equal(agent.rc, -1);
	assert_int_equal(agent.err, ETIMEDOUT);
	assert_int_equal(mgr.rc, -1);
	close(a_peer);
	close(b_peer);
}

static void test_peer_gone_without_close_notify_is_an_error(void **state)
{
	struct end agent, mgr;
	int a_peer, b_peer;
	char b;

	/* the manager's end completes its handshake and drops the connection without close_notify */
	tunnel_start(*state, &agent, &mgr, TEST_MS, true, &a_peer, &b_peer);
	end_join(&mgr);
	end_join(&agent);
	assert_int_equal(mgr.rc, 0);
	assert_int_equal(agent.rc, -1);
	assert_int_equal(agent.err, EPROTO);
	/* the sandbox's connection is closed, not half-closed as after a clean end */
	assert_int_equal(read(a_peer, &b, 1), 0);
	close(mgr.plain);
	close(a_peer);
	close(b_peer);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_bytes_and_half_closes_both_ways, setup, teardown),
		cmocka_unit_test_setup_teardown(test_idle_pipe_ends_at_its_bound, setup, teardown),
		cmocka_unit_test_setup_teardown(test_peer_gone_without_close_notify_is_an_error, setup, teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
