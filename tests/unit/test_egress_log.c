/* Unit tests for manager/egress/egress_log.c: the counts stay exact past the details' cap and under
 * appends from several threads; "mutating accepted" is what an uncertain exec's evidence needs (a 2xx
 * or 101 on a mutating verb, a tunnel, a request left unanswered; not a refusal, not a read); the JSON
 * has the documented shape; no string from a request reaches the JSON or the text raw. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>
#include <jansson.h>
#include <pthread.h>
#include <unistd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "egress_log.h"
#include "k8s_request.h"
#include "textesc.h"

static struct k8s_request k8s(const char *method, const char *path, const char *query)
{
	struct k8s_request r;
	struct sb_err err;

	if (k8s_request_parse(method, path, strlen(path), query, strlen(query), &r, &err) < 0)
		fail_msg("%s %s: %s", method, path, err.msg);
	return r;
}

static void append(struct egress_log *log, const char *method, const char *path, const struct k8s_request *r,
		   bool refused, int status)
{
	struct egress_request req = {.method = method, .host = "kubernetes.default", .path = path, .k8s = r,
				     .refused = refused, .status = status, .bytes_up = 10, .bytes_down = 100,
				     .duration_ms = 7};

	egress_log_append(log, &req);
}

static void test_counts_exact_past_the_cap(void **state)
{
	struct egress_log *log = egress_log_new(2);
	struct k8s_request r = k8s("GET", "/api/v1/pods", "");
	struct egress_counts c;
	json_t *j;

	(void)state;
	assert_non_null(log);
	for (int i = 0; i < 5; i++)
		append(log, "GET", "/api/v1/pods", &r, i == 4, 200);
	egress_log_counts(log, &c);
	assert_int_equal(c.requests, 5);
	assert_int_equal(c.refused, 1);
	assert_int_equal(c.bytes_up, 50);
	assert_int_equal(c.bytes_down, 500);
	assert_int_equal(c.details_dropped, 3);
	j = egress_log_json(log);
	assert_non_null(j);
	assert_int_equal(json_array_size(json_object_get(j, "details")), 2);
	assert_int_equal(json_integer_value(json_object_get(j, "requests")), 5);
	assert_int_equal(json_integer_value(json_object_get(j, "details_dropped")), 3);
	json_decref(j);
	egress_log_free(log);
}

static bool accepted_after(const char *method, const char *path, const char *query, bool refused, int status)
{
	struct egress_log *log = egress_log_new(4);
	struct k8s_request r = k8s(method, path, query);
	bool got;

	append(log, method, path, &r, refused, status);
	got = egress_log_mutating_accepted(log);
	egress_log_free(log);
	return got;
}

static void test_mutating_accepted(void **state)
{
	struct egress_log *log = egress_log_new(4);
	struct egress_request tunnel = {.method = "CONNECT", .host = "github.com:443", .status = 200};
	struct egress_counts c;

	(void)state;
	/* reads, whatever their status, are no evidence of a change */
	assert_false(accepted_after("GET", "/api/v1/namespaces/default/pods", "", false, 200));
	assert_false(accepted_after("GET", "/apis/apps/v1/namespaces/d/deployments/p", "watch=1", false, 200));
	/* a mutating verb refused (by the proxy or by the cluster) changed nothing */
	assert_false(accepted_after("PATCH", "/apis/apps/v1/namespaces/d/deployments/p", "", true, 403));
	assert_false(accepted_after("PATCH", "/apis/apps/v1/namespaces/d/deployments/p", "", false, 403));
	assert_false(accepted_after("DELETE", "/api/v1/namespaces/d/pods/p", "", false, 404));
	/* refused by the proxy, the sandbox gone before the 403 was written: it never left */
	assert_false(accepted_after("PUT", "/api/v1/namespaces/d/pods/p", "", true, 0));
	/* accepted: a 2xx, a dry run's too, and an upgrade's 101 (a command ran) */
	assert_true(accepted_after("PATCH", "/apis/apps/v1/namespaces/d/deployments/p", "", false, 200));
	assert_true(accepted_after("POST", "/api/v1/namespaces/d/configmaps", "dryRun=All", false, 201));
	assert_true(accepted_after("GET", "/api/v1/namespaces/d/pods/p/exec", "command=id", false, 101));
	/* forwarded, no answer: it may have been applied */
	assert_true(accepted_after("PUT", "/api/v1/namespaces/d/pods/p", "", false, 0));
	/* a tunnel: what it carried is unread */
	egress_log_append(log, &tunnel);
	assert_true(egress_log_mutating_accepted(log));
	egress_log_counts(log, &c);
	assert_int_equal(c.mutating_accepted, 1);
	assert_int_equal(c.mutating_unanswered, 0);
	egress_log_free(log);
}

static void test_json_shape(void **state)
{
	struct egress_log *log = egress_log_new(8);
	struct k8s_request r = k8s("PATCH", "/apis/apps/v1/namespaces/default/deployments/payments/scale", "dryRun=All");
	struct egress_request tunnel = {.method = "CONNECT", .host = "github.com:443", .refused = true, .status = 403};
	json_t *j, *d, *k;

	(void)state;
	append(log, "PATCH", "/apis/apps/v1/namespaces/default/deployments/payments/scale?dryRun=All", &r, false, 200);
	egress_log_append(log, &tunnel);
	j = egress_log_json(log);
	assert_non_null(j);
	assert_int_equal(json_integer_value(json_object_get(j, "requests")), 2);
	assert_int_equal(json_integer_value(json_object_get(j, "refused")), 1);
	assert_int_equal(json_integer_value(json_object_get(j, "mutating_accepted")), 1);
	assert_int_equal(json_integer_value(json_object_get(j, "mutating_unanswered")), 0);
	d = json_array_get(json_object_get(j, "details"), 0);
	assert_string_equal(json_string_value(json_object_get(d, "method")), "PATCH");
	assert_string_equal(json_string_value(json_object_get(d, "host")), "kubernetes.default");
	assert_string_equal(json_string_value(json_object_get(d, "path")),
			    "/apis/apps/v1/namespaces/default/deployments/payments/scale?dryRun=All");
	assert_int_equal(json_integer_value(json_object_get(d, "status")), 200);
	assert_true(json_is_true(json_object_get(d, "mutating")));
	assert_true(json_is_false(json_object_get(d, "refused")));
	assert_int_equal(json_integer_value(json_object_get(d, "duration_ms")), 7);
	assert_null(json_object_get(d, "escaped"));
	k = json_object_get(d, "kubernetes");
	assert_string_equal(json_string_value(json_object_get(k, "verb")), "patch");
	assert_string_equal(json_string_value(json_object_get(k, "group")), "apps");
	assert_string_equal(json_string_value(json_object_get(k, "resource")), "deployments");
	assert_string_equal(json_string_value(json_object_get(k, "subresource")), "scale");
	assert_string_equal(json_string_value(json_object_get(k, "namespace")), "default");
	assert_string_equal(json_string_value(json_object_get(k, "name")), "payments");
	assert_true(json_is_true(json_object_get(k, "dry_run")));
	/* the tunnel: no path, no attributes */
	d = json_array_get(json_object_get(j, "details"), 1);
	assert_string_equal(json_string_value(json_object_get(d, "method")), "CONNECT");
	assert_null(json_object_get(d, "path"));
	assert_null(json_object_get(d, "kubernetes"));
	assert_true(json_is_true(json_object_get(d, "refused")));
	json_decref(j);
	egress_log_free(log);
}

/* A request's bytes a terminal acts on (ESC, CSI, a bidi override) and bytes not UTF-8: kept in the
 * escaped form, listed in "escaped", absent raw from the JSON dump and the text. */
static void test_request_strings_terminal_safe(void **state)
{
	struct egress_log *log = egress_log_new(4);
	struct k8s_request r = k8s("DELETE", "/api/v1/namespaces/default/pods/a%C2%9B2J%E2%80%AEb", "");
	const char *path = "/api/v1/namespaces/default/pods/a\xc2\x9b" "2J\xe2\x80\xae" "b";
	struct egress_request odd = {.method = "GET", .host = "evil\x1b]0;x\x07\xff.example", .path = "/", .status = 200};
	char *dump, *text;
	json_t *j, *d;

	(void)state;
	append(log, "DELETE", path, &r, false, 200);
	egress_log_append(log, &odd);
	j = egress_log_json(log);
	assert_non_null(j);
	d = json_array_get(json_object_get(j, "details"), 0);
	assert_string_equal(json_string_value(json_object_get(json_object_get(d, "kubernetes"), "name")),
			    "a\\xc2\\x9b2J\\xe2\\x80\\xaeb");
	assert_string_equal(json_string_value(json_array_get(json_object_get(d, "escaped"), 0)), "path");
	assert_string_equal(json_string_value(json_array_get(json_object_get(d, "escaped"), 1)), "name");
	d = json_array_get(json_object_get(j, "details"), 1);
	assert_string_equal(json_string_value(json_object_get(d, "host")), "evil\\x1b]0;x\\x07\\xff.example");
	dump = textesc_json_dumps(j, JSON_COMPACT);
	text = egress_log_text(log);
	assert_non_null(dump);
	assert_non_null(text);
	for (const char *s = text; *s != '\0'; s++)
		if ((*s != '\n' && (unsigned char)*s < 0x20) || (unsigned char)*s >= 0x7f)
			fail_msg("raw byte 0x%02x in the text: %s", (unsigned char)*s, text);
	for (const char *s = dump; *s != '\0'; s++)
		if ((unsigned char)*s < 0x20 || (unsigned char)*s >= 0x7f)
			fail_msg("raw byte 0x%02x in the JSON: %s", (unsigned char)*s, dump);
	assert_non_null(strstr(text, "DELETE kubernetes.default /api/v1/namespaces/default/pods/a\\xc2\\x9b2J\\xe2\\x80\\xaeb 200 7ms up 10 down 100 delete pods default/a\\xc2\\x9b2J\\xe2\\x80\\xaeb\n"));
	assert_non_null(strstr(text, "2 requests, 0 refused, 1 mutating accepted"));
	free(dump);
	free(text);
	json_decref(j);
	egress_log_free(log);
}

/* A string over EGRESS_LOG_STRING_MAX is kept to the bound and listed in "cut". */
static void test_long_string_cut(void **state)
{
	struct egress_log *log = egress_log_new(1);
	char *host = malloc(EGRESS_LOG_STRING_MAX + 2);
	struct egress_request req = {.method = "CONNECT", .host = host, .status = 200};
	json_t *j, *d;

	(void)state;
	memset(host, 'h', EGRESS_LOG_STRING_MAX + 1);
	host[EGRESS_LOG_STRING_MAX + 1] = '\0';
	egress_log_append(log, &req);
	j = egress_log_json(log);
	d = json_array_get(json_object_get(j, "details"), 0);
	assert_int_equal(strlen(json_string_value(json_object_get(d, "host"))), EGRESS_LOG_STRING_MAX);
	assert_string_equal(json_string_value(json_array_get(json_object_get(d, "cut"), 0)), "host");
	json_decref(j);
	free(host);
	egress_log_free(log);
}

#define THREADS 4
#define PER_THREAD 50000

/* An exec's end: what it sent goes with it, and the next exec's record starts from nothing. */
static void test_drain_per_exec(void **state)
{
	struct egress_log *log = egress_log_new(4);
	struct k8s_request patch = k8s("PATCH", "/apis/apps/v1/namespaces/default/deployments/payments", "");
	struct egress_counts n;
	json_t *first, *second;

	(void)state;
	assert_null(egress_log_drain(log, 0)); /* nothing sent: nothing to say */
	append(log, "PATCH", "/apis/apps/v1/namespaces/default/deployments/payments", &patch, false, 200);
	first = egress_log_drain(log, 0);
	assert_non_null(first);
	assert_int_equal(json_integer_value(json_object_get(first, "requests")), 1);
	assert_int_equal(json_integer_value(json_object_get(first, "mutating_accepted")), 1);
	assert_int_equal(json_array_size(json_object_get(first, "details")), 1);
	egress_log_counts(log, &n);
	assert_int_equal(n.requests, 0);
	assert_false(egress_log_mutating_accepted(log));
	assert_null(egress_log_drain(log, 0));
	append(log, "GET", "/api/v1/namespaces/default/pods", NULL, false, 200);
	second = egress_log_drain(log, 0);
	assert_int_equal(json_integer_value(json_object_get(second, "requests")), 1);
	assert_int_equal(json_integer_value(json_object_get(second, "mutating_accepted")), 0);
	json_decref(first);
	json_decref(second);
	egress_log_free(log);
}

struct late {
	struct egress_log *log;
	int after_ms;
};

static void *late_append(void *arg)
{
	struct late *l = arg;
	struct egress_request req = { .method = "GET", .host = "h", .path = "/api", .status = 200, .begun = true };

	usleep((useconds_t)l->after_ms * 1000);
	egress_log_append(l->log, &req);
	return NULL;
}

/* An exec's end waits for its requests still closing: one that ends within the wait goes with it;
 * one still open after it is said "unfinished" (and is counted when it ends). */
static void test_drain_waits_for_requests_in_flight(void **state)
{
	struct egress_log *log = egress_log_new(4);
	struct late l = { .log = log, .after_ms = 200 };
	pthread_t t;
	json_t *o;

	(void)state;
	egress_log_begin(log);
	assert_int_equal(pthread_create(&t, NULL, late_append, &l), 0);
	o = egress_log_drain(log, 5000);
	pthread_join(t, NULL);
	assert_int_equal(json_integer_value(json_object_get(o, "requests")), 1);
	assert_null(json_object_get(o, "unfinished"));
	json_decref(o);
	egress_log_begin(log);
	o = egress_log_drain(log, 50);
	assert_non_null(o);
	assert_int_equal(json_integer_value(json_object_get(o, "requests")), 0);
	assert_int_equal(json_integer_value(json_object_get(o, "unfinished")), 1);
	json_decref(o);
	egress_log_free(log);
}

static void *appender(void *arg)
{
	struct egress_log *log = arg;
	struct egress_request req = {.method = "POST", .host = "h", .path = "/x", .status = 201, .bytes_up = 1};

	for (int i = 0; i < PER_THREAD; i++)
		egress_log_append(log, &req);
	return NULL;
}

static void run_appenders(struct egress_log *log)
{
	pthread_t t[THREADS];

	for (int i = 0; i < THREADS; i++)
		assert_int_equal(pthread_create(&t[i], NULL, appender, log), 0);
	for (int i = 0; i < THREADS; i++)
		pthread_join(t[i], NULL);
}

/* The proxy appends from its own thread while others may: no count is lost, the cap holds. The
 * counts-only log makes the appends nothing but the counting, so that a lost update shows. */
static void test_threads(void **state)
{
	struct egress_log *log = egress_log_new(100);
	struct egress_log *bare = egress_log_new(0);
	struct egress_counts c;
	json_t *j;

	(void)state;
	run_appenders(log);
	egress_log_counts(log, &c);
	assert_int_equal(c.requests, THREADS * PER_THREAD);
	assert_int_equal(c.mutating_accepted, THREADS * PER_THREAD);
	assert_int_equal(c.bytes_up, THREADS * PER_THREAD);
	assert_int_equal(c.details_dropped, THREADS * PER_THREAD - 100);
	j = egress_log_json(log);
	assert_int_equal(json_array_size(json_object_get(j, "details")), 100);
	json_decref(j);
	egress_log_free(log);
	for (int round = 0; round < 4; round++)
		run_appenders(bare);
	egress_log_counts(bare, &c);
	assert_int_equal(c.requests, 4 * THREADS * PER_THREAD);
	assert_int_equal(c.bytes_up, 4 * THREADS * PER_THREAD);
	assert_int_equal(c.details_dropped, 4 * THREADS * PER_THREAD);
	egress_log_free(bare);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_counts_exact_past_the_cap),
		cmocka_unit_test(test_mutating_accepted),
		cmocka_unit_test(test_json_shape),
		cmocka_unit_test(test_request_strings_terminal_safe),
		cmocka_unit_test(test_long_string_cut),
		cmocka_unit_test(test_threads),
		cmocka_unit_test(test_drain_per_exec),
		cmocka_unit_test(test_drain_waits_for_requests_in_flight),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
