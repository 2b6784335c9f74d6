/* Unit tests for manager/egress/egress_proxy.c, one sandbox's egress proxy, served here on a
 * listener of this program's own loopback (the manager makes it in the sandbox's namespace: that is
 * test_process_net's and manager_egress.sh's): a tunnel passes bytes both ways and a half-close
 * through it; the HTTP errors of each bound (403 for a method, 431 for a head over 8 KiB, 408 for a
 * head that never ends); the 17th connection's 503; the log's budget under a flood of refusals;
 * and a stop that closes every connection and leaves no descriptor. Connects to 127.0.0.1 only. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>
#include <arpa/inet.h>
#include <dirent.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#include "egress_head.h"
#include "egress_proxy.h"
#include "testutil.h"

/* A listening socket on 127.0.0.1 (port chosen by the kernel); *port its port. */
static int listener(uint16_t *port)
{
	struct sockaddr_in sa = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	socklen_t len = sizeof sa;
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);

	assert_true(fd >= 0);
	assert_int_equal(bind(fd, (struct sockaddr *)&sa, sizeof sa), 0);
	assert_int_equal(listen(fd, 64), 0);
	assert_int_equal(getsockname(fd, (struct sockaddr *)&sa, &len), 0);
	*port = ntohs(sa.sin_port);
	return fd;
}

static int dial(uint16_t port)
{
	struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = htons(port),
				  .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);

	assert_true(fd >= 0);
	assert_int_equal(connect(fd, (struct sockaddr *)&sa, sizeof sa), 0);
	return fd;
}

/* Everything fd sends until its end (or timeout_ms of silence), NUL-terminated, into buf. */
static size_t read_all(int fd, char *buf, size_t cap, int timeout_ms)
{
	size_t n = 0;

	while (n < cap - 1) {
		ssize_t r;

		if (poll(&(struct pollfd){ .fd = fd, .events = POLLIN }, 1, timeout_ms) != 1)
			break;
		r = read(fd, buf + n, cap - 1 - n);
		if (r <= 0)
			break;
		n += (size_t)r;
	}
	buf[n] = '\0';
	return n;
}

/* The destination: accepts once, echoes until the end, then says "bye" and closes. */
static void *echo_main(void *arg)
{
	int l = *(int *)arg, c = accept(l, NULL, NULL);
	char buf[4096];
	ssize_t r;

	while (c >= 0 && (r = read(c, buf, sizeof buf)) > 0)
		(void)!write(c, buf, (size_t)r);
	if (c >= 0) {
		(void)!write(c, "bye", 3);
		close(c);
	}
	return NULL;
}

struct fixture {
	struct egress_proxy *p;
	struct egress_log *log;
	uint16_t proxy_port, dest_port;
	int dest_fd;
	int fds_before;
};

static int setup(void **state)
{
	struct fixture *f = calloc(1, sizeof *f);
	struct egress_allow a = { .n = 0 };
	struct sb_err err;
	char pattern[32];
	int l;

	f->fds_before = test_fd_count();
	f->dest_fd = listener(&f->dest_port);
	snprintf(pattern, sizeof pattern, "127.0.0.1:%u", f->dest_port);
	assert_int_equal(egress_allow_add(&a, pattern, &err), 0);
	l = listener(&f->proxy_port);
	f->log = egress_log_new(16);
	if (egress_proxy_start(l, "s1", &a, f->log, &f->p, &err) < 0)
		fail_msg("egress_proxy_start: %s", err.msg);
	*state = f;
	return 0;
}

static int teardown(void **state)
{
	struct fixture *f = *state;

	egress_proxy_stop(&f->p);
	assert_null(f->p);
	egress_log_free(f->log);
	close(f->dest_fd);
	assert_int_equal(test_fd_count(), f->fds_before); /* the listener, the wake pipe, every connection */
	free(f);
	return 0;
}

/* The proxy records a request as its connection ends, in its own thread: wait for n of them. */
static void log_wait(struct egress_log *log, uint64_t n, struct egress_counts *out)
{
	for (int i = 0; i < 500; i++) {
		egress_log_counts(log, out);
		if (out->requests >= n)
			return;
		usleep(10 * 1000);
	}
	fail_msg("%llu requests recorded, not %llu", (unsigned long long)out->requests, (unsigned long long)n);
}

static void test_tunnel_and_half_close(void **state)
{
	struct fixture *f = *state;
	char req[128], buf[512];
	struct egress_counts n;
	pthread_t echo;
	int c;

	assert_int_equal(pthread_create(&echo, NULL, echo_main, &f->dest_fd), 0);
	c = dial(f->proxy_port);
	snprintf(req, sizeof req, "CONNECT 127.0.0.1:%u HTTP/1.1\r\nHost: x\r\n\r\nearly ", f->dest_port);
	assert_int_equal(write(c, req, strlen(req)), (ssize_t)strlen(req));
	assert_int_equal(write(c, "GET / HTTP/1.1\r\n\r\n", 18), 18);
	/* our end of sending: the destination sees it, answers "bye" and closes; we read it all */
	assert_int_equal(shutdown(c, SHUT_WR), 0);
	read_all(c, buf, sizeof buf, 5000);
	assert_string_equal(buf, "HTTP/1.1 200 Connection established\r\n\r\nearly GET / HTTP/1.1\r\n\r\nbye");
	close(c);
	pthread_join(echo, NULL);
	/* on the record: one tunnel, its bytes each way (the early ones too), unread so counted mutating */
	log_wait(f->log, 1, &n);
	assert_int_equal(n.refused, 0);
	assert_int_equal(n.bytes_up, 24);
	assert_int_equal(n.bytes_down, 27);
	assert_int_equal(n.mutating_accepted, 1);
}

static void test_refusals(void **state)
{
	struct fixture *f = *state;
	static char big[EGRESS_HEAD_MAX]; /* exactly the bound: all of it is read, so the close is clean */
	struct egress_counts n;
	char buf[1024];
	int c;

	c = dial(f->proxy_port);
	assert_int_equal(write(c, "GET http://x/ HTTP/1.1\r\n\r\n", 26), 26);
	read_all(c, buf, sizeof buf, 5000);
	assert_non_null(strstr(buf, "HTTP/1.1 403 Forbidden\r\n"));
	assert_non_null(strstr(buf, "GET http://x/ is not served for session s1: only CONNECT"));
	close(c);

	c = dial(f->proxy_port);
	assert_int_equal(write(c, "CONNECT 127.0.0.1:1 HTTP/1.1\r\n\r\n", 32), 32);
	read_all(c, buf, sizeof buf, 5000);
	assert_non_null(strstr(buf, "\"127.0.0.1:1\" is not allowed for session s1 (allowed: 127.0.0.1:"));
	close(c);

	c = dial(f->proxy_port);
	memcpy(big, "CONNECT x:1 HTTP/1.1\r\nA: ", 25);
	memset(big + 25, 'a', sizeof big - 25);
	assert_int_equal(write(c, big, sizeof big), (ssize_t)sizeof big);
	read_all(c, buf, sizeof buf, 5000);
	assert_non_null(strstr(buf, "HTTP/1.1 431 Request Header Fields Too Large\r\n"));
	close(c);
	/* the two requests read are on the record, refused (a head never read is no request) */
	log_wait(f->log, 2, &n);
	assert_int_equal(n.requests, 2);
	assert_int_equal(n.refused, 2);
	assert_int_equal(n.mutating_accepted, 0);
}

/* 16 at once; the 17th is answered 503; once one closes, a new one is served again. */
static void test_connection_limit(void **state)
{
	struct fixture *f = *state;
	int held[EGRESS_CONN_MAX], c;
	char buf[512];

	for (int i = 0; i < EGRESS_CONN_MAX; i++)
		held[i] = dial(f->proxy_port);
	c = dial(f->proxy_port);
	read_all(c, buf, sizeof buf, 5000);
	assert_non_null(strstr(buf, "HTTP/1.1 503 Service Unavailable\r\n"));
	assert_non_null(strstr(buf, "session s1 has 16 connections open"));
	close(c);
	close(held[0]);
	usleep(200 * 1000);
	c = dial(f->proxy_port);
	assert_int_equal(write(c, "PUT / HTTP/1.1\r\n\r\n", 18), 18);
	read_all(c, buf, sizeof buf, 5000);
	assert_non_null(strstr(buf, "HTTP/1.1 403 Forbidden\r\n"));
	close(c);
	for (int i = 1; i < EGRESS_CONN_MAX; i++)
		close(held[i]);
}

/* A head that never ends is answered 408 once EGRESS_HEAD_MS has passed (about 10 s). */
static void test_head_timeout(void **state)
{
	struct fixture *f = *state;
	char buf[512];
	int c = dial(f->proxy_port);

	assert_int_equal(write(c, "CONNECT 127.0.0.1:1 HTTP/1.1\r\n", 30), 30);
	read_all(c, buf, sizeof buf, EGRESS_HEAD_MS + 3000);
	assert_non_null(strstr(buf, "HTTP/1.1 408 Request Timeout\r\n"));
	close(c);
}

/* A stop with a tunnel open: the client sees its end, and nothing stays open (teardown counts). */
static void test_stop_closes_tunnels(void **state)
{
	struct fixture *f = *state;
	char req[128], buf[512];
	pthread_t echo;
	int c;

	assert_int_equal(pthread_create(&echo, NULL, echo_main, &f->dest_fd), 0);
	c = dial(f->proxy_port);
	snprintf(req, sizeof req, "CONNECT 127.0.0.1:%u HTTP/1.1\r\n\r\n", f->dest_port);
	assert_int_equal(write(c, req, strlen(req)), (ssize_t)strlen(req));
	assert_int_equal(poll(&(struct pollfd){ .fd = c, .events = POLLIN }, 1, 5000), 1);
	assert_true(read(c, buf, sizeof buf) > 0);
	egress_proxy_stop(&f->p);
	read_all(c, buf, sizeof buf, 5000); /* returns at its end: the proxy closed it */
	assert_int_equal(read(c, buf, sizeof buf), 0);
	close(c);
	pthread_join(echo, NULL);
}

/* How many times needle occurs in hay. */
static int occurrences(const char *hay, const char *needle)
{
	int n = 0;

	for (const char *p = strstr(hay, needle); p != NULL; p = strstr(p + 1, needle))
		n++;
	return n;
}

/* 60 refusals as fast as they come: at most 20 lines of them in the log in that second, and the
 * rest said as a count once the second is over. */
static void test_log_budget(void **state)
{
	struct fixture *f = *state;
	static char log[1 << 16];
	char buf[512];
	int mem = memfd_create("log", MFD_CLOEXEC), saved = dup(2), c;
	ssize_t n;

	assert_true(mem >= 0 && saved >= 0);
	assert_int_equal(dup2(mem, 2), 2);
	for (int i = 0; i < 61; i++) {
		if (i == 60)
			usleep(1100 * 1000); /* the next second: the count of what was left out */
		c = dial(f->proxy_port);
		assert_int_equal(write(c, "GET / HTTP/1.1\r\n\r\n", 18), 18);
		read_all(c, buf, sizeof buf, 5000);
		close(c);
	}
	usleep(100 * 1000);
	assert_int_equal(dup2(saved, 2), 2);
	close(saved);
	n = pread(mem, log, sizeof log - 1, 0);
	close(mem);
	assert_true(n > 0);
	log[n] = '\0';
	/* 20 in the first second (21 with the last), a few more should the loop straddle a second */
	assert_in_range(occurrences(log, "egress 403"), 20, 41);
	assert_non_null(strstr(log, "more lines left out of the log in a second"));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_tunnel_and_half_close, setup, teardown),
		cmocka_unit_test_setup_teardown(test_refusals, setup, teardown),
		cmocka_unit_test_setup_teardown(test_connection_limit, setup, teardown),
		cmocka_unit_test_setup_teardown(test_head_timeout, setup, teardown),
		cmocka_unit_test_setup_teardown(test_log_budget, setup, teardown),
		cmocka_unit_test_setup_teardown(test_stop_closes_tunnels, setup, teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
