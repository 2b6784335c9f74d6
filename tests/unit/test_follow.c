/* Unit tests for manager/front/follow.c, as the CLI (mcli_call) and the bash tool's calls
 * (daemon_call.c) use it: the list of sockets (--socket, $SANDBOX_MANAGER_SOCKET, the bounds), and
 * the follow rule against fake managers: control servers on unix sockets in a temporary directory,
 * each a thread answering frames with control.c's functions from a script. They count what reached
 * them, so a resend that must not happen, or one sent to the wrong manager, fails the test. */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cmocka.h>
#include <jansson.h>

#include "../../manager/front/cli.h" /* sandbox-agent/ has a cli.h too, first on the path */
#include "clock.h"
#include "control.h"
#include "daemon_call.h"
#include "follow.h"

#define FAKE_CONNS 16
#define SCRIPT_MAX 8

/* A fake manager: request n is answered with script[n] (the last entry for any later one); "close"
 * closes that connection without answering, after reading the request whole. */
struct fake {
	char path[FOLLOW_PATH_MAX];
	int lfd, stop[2];
	pthread_t thr;
	pthread_mutex_t lock;
	char script[SCRIPT_MAX][512];
	size_t nscript;
	int conns, reqs;
	json_t *last; /* the last request received */
};

static char dir[64];

static void *fake_run(void *arg)
{
	struct fake *f = arg;
	int conn[FAKE_CONNS];
	size_t nconn = 0;

	for (;;) {
		struct pollfd p[2 + FAKE_CONNS];

		p[0] = (struct pollfd){ f->stop[0], POLLIN, 0 };
		p[1] = (struct pollfd){ f->lfd, POLLIN, 0 };
		for (size_t i = 0; i < nconn; i++)
			p[2 + i] = (struct pollfd){ conn[i], POLLIN, 0 };
		if (poll(p, 2 + nconn, -1) < 0 && errno != EINTR)
			break;
		if (p[0].revents != 0)
			break;
		for (size_t i = nconn; i-- > 0;) {
			struct sb_err err;
			json_t *req = NULL;
			const char *answer;
			int n, keep = 0;

			if (p[2 + i].revents == 0)
				continue;
			if (control_recv(conn[i], CONTROL_REQUEST_CAP, &req, &err) > 0) {
				pthread_mutex_lock(&f->lock);
				n = f->reqs++;
				json_decref(f->last);
				f->last = json_incref(req);
				pthread_mutex_unlock(&f->lock);
				answer = f->script[(size_t)n < f->nscript ? (size_t)n : f->nscript - 1];
				if (strcmp(answer, "close") != 0) {
					json_t *a = json_loads(answer, 0, NULL);

					keep = a != NULL && control_send(conn[i], a, CONTROL_RESPONSE_CAP, &err) == 0;
					json_decref(a);
				}
			}
			json_decref(req);
			if (!keep) {
				close(conn[i]);
				conn[i] = conn[--nconn];
			}
		}
		if ((p[1].revents & POLLIN) != 0) {
			int c = accept4(f->lfd, NULL, NULL, SOCK_CLOEXEC);

			if (c >= 0 && nconn < FAKE_CONNS) {
				conn[nconn++] = c;
				pthread_mutex_lock(&f->lock);
				f->conns++;
				pthread_mutex_unlock(&f->lock);
			} else if (c >= 0) {
				close(c);
			}
		}
	}
	for (size_t i = 0; i < nconn; i++)
		close(conn[i]);
	return NULL;
}

/* A fake manager at DIR/name answering the script's entries (NULL-terminated). */
static struct fake *fake_start(const char *name, ...)
{
	struct fake *f = calloc(1, sizeof *f);
	struct sb_err err;
	const char *a;
	va_list ap;

	assert_non_null(f);
	snprintf(f->path, sizeof f->path, "%s/%s", dir, name);
	va_start(ap, name);
	while ((a = va_arg(ap, const char *)) != NULL && f->nscript < SCRIPT_MAX)
		snprintf(f->script[f->nscript++], sizeof f->script[0], "%s", a);
	va_end(ap);
	assert_true(f->nscript > 0);
	pthread_mutex_init(&f->lock, NULL);
	f->lfd = control_listen(f->path, 0600, &err);
	assert_true(f->lfd >= 0);
	assert_int_equal(pipe2(f->stop, O_CLOEXEC), 0);
	assert_int_equal(pthread_create(&f->thr, NULL, fake_run, f), 0);
	return f;
}

static void fake_stop(struct fake *f)
{
	assert_int_equal(write(f->stop[1], "x", 1), 1);
	pthread_join(f->thr, NULL);
	close(f->lfd);
	close(f->stop[0]);
	close(f->stop[1]);
	unlink(f->path);
	json_decref(f->last);
	pthread_mutex_destroy(&f->lock);
	free(f);
}

static int fake_reqs(struct fake *f)
{
	int n;

	pthread_mutex_lock(&f->lock);
	n = f->reqs;
	pthread_mutex_unlock(&f->lock);
	return n;
}

/* The "owned" refusal of the contract, naming address (may be "") and retry_after_ms. */
static const char *owned(char *buf, size_t size, const char *address, int retry_ms)
{
	snprintf(buf, size,
		 "{\"ok\":false,\"error\":{\"kind\":\"owned\",\"message\":\"session s1 is owned by manager m2\","
		 "\"owner\":\"m2\",\"address\":\"%s\",\"retry_after_ms\":%d}}", address, retry_ms);
	return buf;
}

static const char *answered_by(json_t *resp)
{
	return json_string_value(json_object_get(resp, "by")) ?: "(none)";
}

static json_t *req_show(void)
{
	return json_pack("{s:s, s:s}", "op", "session.show", "session", "s1");
}

static int setup(void **state)
{
	(void)state;
	snprintf(dir, sizeof dir, "/tmp/sbfollow.XXXXXX");
	if (mkdtemp(dir) == NULL)
		return -1;
	unsetenv("SANDBOX_MANAGER_SOCKET");
	unsetenv("SANDBOX_MANAGER_OWNED_WAIT_MS");
	return 0;
}

static int teardown(void **state)
{
	(void)state;
	unsetenv("SANDBOX_MANAGER_SOCKET");
	unsetenv("SANDBOX_MANAGER_OWNED_WAIT_MS");
	return rmdir(dir);
}

/* ---- the list ---- */

static void test_list_flags_first(void **state)
{
	json_t *flags = json_pack("[s, s]", "/run/a.sock", "/run/x:y.sock");
	struct follow_list l;
	struct sb_err err;

	(void)state;
	setenv("SANDBOX_MANAGER_SOCKET", "/env/1.sock:/env/2.sock", 1);
	assert_int_equal(follow_list_parse(&l, flags, &err), 0);
	assert_int_equal(l.n, 2);
	assert_string_equal(l.path[0], "/run/a.sock");
	assert_string_equal(l.path[1], "/run/x:y.sock"); /* a flag is one path, ':' and all */
	assert_int_equal(l.owned_wait_ms, FOLLOW_WAIT_MS_DEFAULT);
	json_decref(flags);
}

static void test_list_env(void **state)
{
	json_t *none = json_array();
	struct follow_list l;
	struct sb_err err;

	(void)state;
	setenv("SANDBOX_MANAGER_SOCKET", "/env/1.sock:/env/2.sock:rel.sock", 1);
	setenv("SANDBOX_MANAGER_OWNED_WAIT_MS", "250", 1);
	assert_int_equal(follow_list_parse(&l, none, &err), 0);
	assert_int_equal(l.n, 3);
	assert_string_equal(l.path[0], "/env/1.sock");
	assert_string_equal(l.path[1], "/env/2.sock");
	assert_string_equal(l.path[2], "rel.sock");
	assert_int_equal(l.owned_wait_ms, 250);
	/* tls://HOST:PORT keeps its own ':' (and an IPv6 host its brackets' ones) */
	setenv("SANDBOX_MANAGER_SOCKET", "tls://10.0.0.1:7444:/env/1.sock:tls://[::1]:7445:tls://m.example:1", 1);
	assert_int_equal(follow_list_parse(&l, none, &err), 0);
	assert_int_equal(l.n, 4);
	assert_string_equal(l.path[0], "tls://10.0.0.1:7444");
	assert_string_equal(l.path[1], "/env/1.sock");
	assert_string_equal(l.path[2], "tls://[::1]:7445");
	assert_string_equal(l.path[3], "tls://m.example:1");
	json_decref(none);
}

static void test_list_refused(void **state)
{
	char longpath[FOLLOW_PATH_MAX + 1];
	json_t *none = json_array(), *toolong;
	struct follow_list l;
	struct sb_err err;

	(void)state;
	assert_int_equal(follow_list_parse(&l, none, &err), -1);
	assert_non_null(strstr(err.msg, "no manager socket: pass --socket PATH (or tls://HOST:PORT) or set SANDBOX_MANAGER_SOCKET"));
	setenv("SANDBOX_MANAGER_SOCKET", "/a.sock::/b.sock", 1);
	assert_int_equal(follow_list_parse(&l, none, &err), -1);
	assert_non_null(strstr(err.msg, "SANDBOX_MANAGER_SOCKET names an empty socket path"));
	setenv("SANDBOX_MANAGER_SOCKET", "/1:/2:/3:/4:/5:/6:/7:/8", 1);
	assert_int_equal(follow_list_parse(&l, none, &err), 0);
	assert_int_equal(l.n, FOLLOW_SOCKETS_MAX);
	setenv("SANDBOX_MANAGER_SOCKET", "/1:/2:/3:/4:/5:/6:/7:/8:/9", 1);
	assert_int_equal(follow_list_parse(&l, none, &err), -1);
	assert_non_null(strstr(err.msg, "more than 8 manager sockets"));
	memset(longpath, 'a', sizeof longpath - 1);
	longpath[0] = '/';
	longpath[FOLLOW_PATH_MAX - 1] = '\0'; /* 107 bytes: the longest that fits */
	toolong = json_pack("[s]", longpath);
	assert_int_equal(follow_list_parse(&l, toolong, &err), 0);
	json_decref(toolong);
	longpath[FOLLOW_PATH_MAX - 1] = 'a';
	longpath[FOLLOW_PATH_MAX] = '\0'; /* 108 */
	toolong = json_pack("[s]", longpath);
	assert_int_equal(follow_list_parse(&l, toolong, &err), -1);
	assert_non_null(strstr(err.msg, "is too long (max 107 bytes)"));
	json_decref(toolong);
	setenv("SANDBOX_MANAGER_SOCKET", "/a.sock", 1);
	setenv("SANDBOX_MANAGER_OWNED_WAIT_MS", "10s", 1);
	assert_int_equal(follow_list_parse(&l, none, &err), -1);
	assert_non_null(strstr(err.msg, "SANDBOX_MANAGER_OWNED_WAIT_MS takes a whole number"));
	assert_int_equal(follow_list_parse(&l, NULL, &err), -1);
	json_decref(none);
}

/* ---- the follow rule, as the CLI calls it ---- */

/* A manager that is not the owner answers "owned": the same request goes to the owner's address. */
static void test_redirect_to_address(void **state)
{
	char o[512];
	struct fake *b = fake_start("b.sock", "{\"ok\":true,\"by\":\"B\"}", NULL);
	struct fake *a = fake_start("a.sock", owned(o, sizeof o, b->path, 5000), NULL);
	json_t *sockets = json_pack("[s]", a->path), *resp;

	(void)state;
	resp = mcli_call(sockets, req_show());
	assert_non_null(resp);
	assert_string_equal(answered_by(resp), "B");
	assert_int_equal(fake_reqs(a), 1);
	assert_int_equal(fake_reqs(b), 1);
	assert_string_equal(json_string_value(json_object_get(b->last, "op")), "session.show");
	assert_true(json_equal(a->last, b->last)); /* the same request, resent */
	json_decref(resp);
	json_decref(sockets);
	fake_stop(a);
	fake_stop(b);
}

/* An unreachable socket of the list is passed over; an unreachable owner (dead) is waited for
 * (retry_after_ms + 100), then the first reachable manager of the list is asked again. */
static void test_dead_owner_wait_then_list(void **state)
{
	char o[512], dead[FOLLOW_PATH_MAX], gone[FOLLOW_PATH_MAX];
	struct fake *a;
	json_t *sockets, *resp;
	int64_t t0;

	(void)state;
	snprintf(dead, sizeof dead, "%s/dead.sock", dir);
	snprintf(gone, sizeof gone, "%s/owner-gone.sock", dir);
	a = fake_start("a.sock", owned(o, sizeof o, gone, 200), "{\"ok\":true,\"by\":\"A\"}", NULL);
	sockets = json_pack("[s, s]", dead, a->path);
	t0 = clock_mono_ms();
	resp = mcli_call(sockets, req_show());
	assert_non_null(resp);
	assert_string_equal(answered_by(resp), "A");
	assert_int_equal(fake_reqs(a), 2);
	assert_true(clock_mono_ms() - t0 >= 200 + FOLLOW_WAIT_MARGIN_MS);
	json_decref(resp);

	/* A wait past SANDBOX_MANAGER_OWNED_WAIT_MS would not help: the refusal stands, at once. */
	setenv("SANDBOX_MANAGER_OWNED_WAIT_MS", "250", 1);
	snprintf(a->script[0], sizeof a->script[0], "%s", owned(o, sizeof o, "", 200));
	a->nscript = 1;
	t0 = clock_mono_ms();
	resp = mcli_call(sockets, req_show());
	assert_non_null(resp);
	assert_string_equal(json_string_value(json_object_get(json_object_get(resp, "error"), "kind")), "owned");
	assert_true(clock_mono_ms() - t0 < 200 + FOLLOW_WAIT_MARGIN_MS); /* it did not wait */
	assert_int_equal(fake_reqs(a), 3);
	json_decref(resp);
	json_decref(sockets);
	fake_stop(a);
}

/* Two managers that name each other: 1 send and 5 resends, then the last refusal. */
static void test_hop_limit(void **state)
{
	char oa[512], ob[512], pa[FOLLOW_PATH_MAX], pb[FOLLOW_PATH_MAX];
	struct fake *a, *b;
	json_t *sockets, *resp;

	(void)state;
	snprintf(pa, sizeof pa, "%s/a.sock", dir);
	snprintf(pb, sizeof pb, "%s/b.sock", dir);
	a = fake_start("a.sock", owned(oa, sizeof oa, pb, 100), NULL);
	b = fake_start("b.sock", owned(ob, sizeof ob, pa, 100), NULL);
	sockets = json_pack("[s]", a->path);
	resp = mcli_call(sockets, req_show());
	assert_non_null(resp);
	assert_false(json_is_true(json_object_get(resp, "ok")));
	assert_string_equal(json_string_value(json_object_get(json_object_get(resp, "error"), "kind")), "owned");
	assert_int_equal(fake_reqs(a) + fake_reqs(b), 1 + FOLLOW_HOPS_MAX);
	json_decref(resp);
	json_decref(sockets);
	fake_stop(a);
	fake_stop(b);
}

/* A request sent and then left without an answer may have run: never sent again, not to the next
 * socket of the list and not after a redirect. */
static void test_no_resend_after_lost(void **state)
{
	char o[512];
	struct fake *b = fake_start("b.sock", "close", NULL);
	struct fake *a = fake_start("a.sock", "close", NULL);
	json_t *sockets = json_pack("[s, s]", a->path, b->path);

	(void)state;
	assert_null(mcli_call(sockets, req_show()));
	assert_int_equal(fake_reqs(a), 1);
	assert_int_equal(fake_reqs(b), 0);

	/* owned, then lost at the owner: not sent a third time */
	snprintf(a->script[0], sizeof a->script[0], "%s", owned(o, sizeof o, b->path, 100));
	assert_null(mcli_call(sockets, req_show()));
	assert_int_equal(fake_reqs(a), 2);
	assert_int_equal(fake_reqs(b), 1);
	json_decref(sockets);
	fake_stop(a);
	fake_stop(b);
}

/* ---- the follow rule, as the bash tool's calls use it (kept connections) ---- */

/* A redirect keeps each manager's connection for that manager: the next call to A goes on A's
 * kept connection, never on the one kept to B. */
static void test_kept_not_across_managers(void **state)
{
	char o[512];
	struct fake *b = fake_start("b.sock", "{\"ok\":true,\"by\":\"B\"}", NULL);
	struct fake *a = fake_start("a.sock", owned(o, sizeof o, b->path, 100), "{\"ok\":true,\"by\":\"A\"}", NULL);
	struct follow_list l = { .n = 1, .owned_wait_ms = 0 };
	struct daemon_peer d = { &l, "s1", "test" };
	struct sb_err err;
	json_t *resp;

	(void)state;
	snprintf(l.path[0], sizeof l.path[0], "%s", a->path);
	resp = daemon_call_quick(&d, req_show(), &err);
	assert_non_null(resp);
	assert_string_equal(answered_by(resp), "B");
	json_decref(resp);
	for (int i = 0; i < 2; i++) {
		resp = daemon_call_quick(&d, req_show(), &err);
		assert_non_null(resp);
		assert_string_equal(answered_by(resp), "A");
		json_decref(resp);
	}
	assert_int_equal(fake_reqs(a), 3);
	assert_int_equal(fake_reqs(b), 1);
	pthread_mutex_lock(&a->lock);
	assert_int_equal(a->conns, 1); /* the kept connection, reused */
	pthread_mutex_unlock(&a->lock);

	/* lost on a kept connection: not sent again on a new one */
	snprintf(a->script[3], sizeof a->script[0], "close");
	a->nscript = 4;
	assert_null(daemon_call_quick(&d, req_show(), &err));
	assert_int_equal(fake_reqs(a), 4);
	assert_int_equal(fake_reqs(b), 1);
	fake_stop(a);
	fake_stop(b);
}

/* A bash call cancelled while it waits for a dead owner's lease is not sent again: the refusal is
 * its answer, at once (nothing ran). */
static void test_cancelled_while_waiting(void **state)
{
	char o[512], text[64];
	struct fake *a = fake_start("a.sock", owned(o, sizeof o, "", 2000), "{\"ok\":true,\"result\":{}}", NULL);
	struct follow_list l = { .n = 1, .owned_wait_ms = 60000 };
	struct daemon_peer d = { &l, "s1", "test" };
	const struct bash_tool_view v = { 30000, false };
	struct daemon_exec x = { .command = text, .timeout = 10 };
	pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
	int cancelled = 1;
	const struct daemon_wait w = { &lock, &cancelled, NULL, NULL, NULL };
	char *dump;
	json_t *r;
	int64_t t0;

	(void)state;
	snprintf(l.path[0], sizeof l.path[0], "%s", a->path);
	snprintf(text, sizeof text, "true");
	snprintf(x.tag, sizeof x.tag, "test-1");
	t0 = clock_mono_ms();
	r = daemon_call_bash(&d, &v, &x, &w);
	assert_non_null(r);
	assert_true(json_is_true(json_object_get(r, "isError")));
	dump = json_dumps(r, 0);
	assert_non_null(strstr(dump, "is owned by manager m2"));
	free(dump);
	assert_true(clock_mono_ms() - t0 < 1000);
	assert_int_equal(fake_reqs(a), 1);
	json_decref(r);
	fake_stop(a);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_list_flags_first, setup, teardown),
		cmocka_unit_test_setup_teardown(test_list_env, setup, teardown),
		cmocka_unit_test_setup_teardown(test_list_refused, setup, teardown),
		cmocka_unit_test_setup_teardown(test_redirect_to_address, setup, teardown),
		cmocka_unit_test_setup_teardown(test_dead_owner_wait_then_list, setup, teardown),
		cmocka_unit_test_setup_teardown(test_hop_limit, setup, teardown),
		cmocka_unit_test_setup_teardown(test_no_resend_after_lost, setup, teardown),
		cmocka_unit_test_setup_teardown(test_kept_not_across_managers, setup, teardown),
		cmocka_unit_test_setup_teardown(test_cancelled_while_waiting, setup, teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
