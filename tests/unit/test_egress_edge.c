/* Unit tests for a Kubernetes grant served at the edge (manager/egress/egress_edge.c): a client on
 * loopback stands for the sandbox's kubectl, tests/brokers/server.py (https_stub.h) for the API
 * server. Asserted: the grant's token is what reaches the server and the sandbox's own
 * Authorization and impersonation headers never do; a read grant refuses a patch before anything
 * leaves, with a Kubernetes Status naming the verb and the resource; a write grant forwards it with
 * its body; an upgrade is refused; an API server whose certificate the grant's CA does not sign
 * gets nothing and the sandbox a 502; every request is in the egress log; a sandbox that goes
 * while its answer streams (a watch cut by its client) or before it comes ends the transfer at
 * once, and the request is in the log then, not when the API server ends it. An http: grant's
 * edge adds its header and judges by method. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>
#include <arpa/inet.h>
#include <curl/curl.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#include <jansson.h>

#include "ca.h"
#include "egress_edge.h"
#include "https_stub.h"
#include "testutil.h"

#define EDGE_TOKEN "edge-token-0123"

static struct {
	char base[64];
	char tls[128];
	char other_ca[160];
	char log[128];
	char responses[128];
	char server[64];
	pid_t pid;
} T;

static char ca_path[200];

struct reply {
	long status;
	char body[8192];
	size_t len;
};

static size_t reply_write(char *data, size_t size, size_t n, void *arg)
{
	struct reply *r = arg;
	size_t len = size * n, room = sizeof r->body - 1 - r->len;

	memcpy(r->body + r->len, data, len < room ? len : room);
	r->len += len < room ? len : room;
	r->body[r->len] = '\0';
	return len;
}

/* The sandbox's side: a request to the edge with extra headers (NULL-terminated), maybe a body. */
static void edge_call(unsigned port, const char *method, const char *path, const char *const *headers,
		      const char *body, struct reply *out)
{
	CURL *c = curl_easy_init();
	struct curl_slist *h = NULL;
	char url[512];

	memset(out, 0, sizeof *out);
	snprintf(url, sizeof url, "http://127.0.0.1:%u%s", port, path);
	for (size_t i = 0; headers != NULL && headers[i] != NULL; i++)
		h = curl_slist_append(h, headers[i]);
	curl_easy_setopt(c, CURLOPT_URL, url);
	curl_easy_setopt(c, CURLOPT_NOPROXY, "*");
	curl_easy_setopt(c, CURLOPT_CUSTOMREQUEST, method);
	curl_easy_setopt(c, CURLOPT_HTTPHEADER, h);
	if (body != NULL)
		curl_easy_setopt(c, CURLOPT_POSTFIELDS, body);
	curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, reply_write);
	curl_easy_setopt(c, CURLOPT_WRITEDATA, out);
	curl_easy_setopt(c, CURLOPT_TIMEOUT, 20L);
	assert_int_equal(curl_easy_perform(c), CURLE_OK);
	curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &out->status);
	curl_slist_free_all(h);
	curl_easy_cleanup(c);
}

/* An edge for grant "kubernetes:prod" (header NULL) or "http:tracker" (its header) at access,
 * trusting ca_file; its port into *port. */
static struct egress_edge *edge_up_as(const char *access, const char *ca_file, const char *header,
				      struct egress_log *log, unsigned *port)
{
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	socklen_t len = sizeof a;
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	struct egress_edge_spec spec = { .session = "s1", .grant = header ? "http:tracker" : "kubernetes:prod",
					 .access = access, .server = T.server, .ca_file = ca_file,
					 .token = header ? NULL : EDGE_TOKEN, .header = header, .log = log };
	struct egress_edge *e = NULL;
	struct sb_err err;

	assert_true(fd >= 0);
	assert_int_equal(bind(fd, (struct sockaddr *)&a, sizeof a), 0);
	assert_int_equal(listen(fd, 16), 0);
	assert_int_equal(getsockname(fd, (struct sockaddr *)&a, &len), 0);
	*port = ntohs(a.sin_port);
	spec.listen_fd = fd;
	assert_int_equal(egress_edge_start(&spec, &e, &err), 0);
	return e;
}

static struct egress_edge *edge_up(const char *access, const char *ca_file, struct egress_log *log, unsigned *port)
{
	return edge_up_as(access, ca_file, NULL, log, port);
}

static void responses_set(const char *key, int status, const char *body_json)
{
	json_t *o = json_pack("{s:{s:i, s:o}}", key, "status", status, "body", json_loads(body_json, 0, NULL));

	assert_int_equal(json_dump_file(o, T.responses, 0), 0);
	json_decref(o);
}

/* An answer the stub delays (delay) or streams and holds open (hold), for seconds. */
static void responses_slow(const char *key, const char *how, int seconds, const char *body_json)
{
	json_t *o = json_pack("{s:{s:i, s:i, s:o}}", key, "status", 200, how, seconds,
			      "body", json_loads(body_json, 0, NULL));

	assert_int_equal(json_dump_file(o, T.responses, 0), 0);
	json_decref(o);
}

/* The sandbox's side, by hand: a GET sent on a connection the test closes when it likes. */
static int raw_get(unsigned port, const char *path)
{
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK),
				 .sin_port = htons((uint16_t)port) };
	struct timeval tv = { .tv_sec = 10 };
	char req[512];
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0), n;

	assert_true(fd >= 0);
	assert_int_equal(connect(fd, (struct sockaddr *)&a, sizeof a), 0);
	assert_int_equal(setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv), 0);
	n = snprintf(req, sizeof req, "GET %s HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n", path);
	assert_int_equal(write(fd, req, (size_t)n), n);
	return fd;
}

/* The log's request count once it is not 0, or 0 after ms. */
static uint64_t logged_within(struct egress_log *log, int ms)
{
	struct timespec pause = { .tv_nsec = 50 * 1000 * 1000 };
	struct egress_counts n;

	for (int waited = 0;; waited += 50) {
		egress_log_counts(log, &n);
		if (n.requests != 0 || waited >= ms)
			return n.requests;
		nanosleep(&pause, NULL);
	}
}


static int group_setup(void **state)
{
	struct ca_leaf leaf = { .dns_name = "localhost", .usage = CA_USAGE_SERVER };
	struct sb_err err;
	struct ca *ca = NULL, *other = NULL;
	char dir[120], port_file[160];

	(void)state;
	snprintf(T.base, sizeof T.base, "/tmp/test_egress_edge.XXXXXX");
	if (mkdtemp(T.base) == NULL)
		return -1;
	snprintf(T.tls, sizeof T.tls, "%s/tls", T.base);
	snprintf(T.log, sizeof T.log, "%s/requests.log", T.base);
	snprintf(T.responses, sizeof T.responses, "%s/responses.json", T.base);
	snprintf(port_file, sizeof port_file, "%s/port", T.base);
	snprintf(ca_path, sizeof ca_path, "%s/ca.crt", T.tls);
	mkdir(T.tls, 0700);
	snprintf(dir, sizeof dir, "%s/ca", T.base);
	if (ca_open(dir, &ca, &err) < 0 || ca_issue_leaf(ca, &leaf, T.tls, "server", &err) < 0 ||
	    ca_write_cert(ca, T.tls, "ca.crt", &err) < 0)
		return -1;
	snprintf(dir, sizeof dir, "%s/other", T.base);
	snprintf(T.other_ca, sizeof T.other_ca, "%s/ca.crt", dir);
	if (ca_open(dir, &other, &err) < 0 || ca_write_cert(other, dir, "ca.crt", &err) < 0)
		return -1;
	ca_free(ca);
	ca_free(other);
	T.pid = https_stub_start(T.tls, port_file, T.log, T.responses, EDGE_TOKEN, T.server, sizeof T.server);
	return T.pid > 0 ? 0 : -1;
}

static int group_teardown(void **state)
{
	(void)state;
	https_stub_stop(T.pid);
	test_rmtree(T.base);
	return 0;
}

static int test_setup(void **state)
{
	(void)state;
	return https_stub_reset(T.responses, T.log);
}

static void read_grant_lists_with_the_grants_token(void **state)
{
	static const char *const forged[] = { "Authorization: Bearer sandbox-forged", "Impersonate-User: admin",
					      "Accept: application/json", NULL };
	struct egress_log *log = egress_log_new(16);
	struct egress_counts n;
	struct reply r;
	unsigned port;
	struct egress_edge *e;
	json_t *reqs, *h;

	(void)state;
	responses_set("GET /api/v1/namespaces/default/pods?limit=500", 200,
		      "{\"kind\": \"PodList\", \"apiVersion\": \"v1\", \"items\": []}");
	e = edge_up("read", ca_path, log, &port);
	edge_call(port, "GET", "/api/v1/namespaces/default/pods?limit=500", forged, NULL, &r);
	egress_edge_stop(&e);
	assert_int_equal(r.status, 200);
	assert_contains(r.body, "\"PodList\"");
	reqs = https_stub_requests(T.log);
	assert_int_equal(json_array_size(reqs), 1);
	h = json_object_get(json_array_get(reqs, 0), "headers");
	/* the grant's token, and none of the sandbox's own authority */
	assert_string_equal(json_string_value(json_object_get(h, "authorization")), "Bearer " EDGE_TOKEN);
	assert_null(json_object_get(h, "impersonate-user"));
	assert_string_equal(json_string_value(json_object_get(h, "accept")), "application/json");
	json_decref(reqs);
	egress_log_counts(log, &n);
	assert_int_equal(n.requests, 1);
	assert_int_equal(n.refused, 0);
	assert_int_equal(n.mutating_accepted, 0);
	egress_log_free(log);
}

static void read_grant_refuses_a_patch_before_it_leaves(void **state)
{
	static const char *const json_patch[] = { "Content-Type: application/strategic-merge-patch+json", NULL };
	struct egress_log *log = egress_log_new(16);
	struct egress_counts n;
	struct reply r;
	unsigned port;
	struct egress_edge *e = edge_up("read", ca_path, log, &port);
	json_t *reqs, *status;

	(void)state;
	edge_call(port, "PATCH", "/apis/apps/v1/namespaces/default/deployments/payments", json_patch,
		  "{\"spec\": {\"replicas\": 1}}", &r);
	egress_edge_stop(&e);
	assert_int_equal(r.status, 403);
	status = json_loads(r.body, 0, NULL);
	assert_string_equal(json_string_value(json_object_get(status, "kind")), "Status");
	assert_string_equal(json_string_value(json_object_get(status, "reason")), "Forbidden");
	assert_contains(json_string_value(json_object_get(status, "message")), "\"patch\"");
	assert_contains(json_string_value(json_object_get(status, "message")), "apps/deployments");
	json_decref(status);
	reqs = https_stub_requests(T.log);
	assert_int_equal(json_array_size(reqs), 0);
	json_decref(reqs);
	egress_log_counts(log, &n);
	assert_int_equal(n.requests, 1);
	assert_int_equal(n.refused, 1);
	assert_false(egress_log_mutating_accepted(log));
	egress_log_free(log);
}

static void write_grant_forwards_a_patch_with_its_body(void **state)
{
	static const char *const json_patch[] = { "Content-Type: application/strategic-merge-patch+json", NULL };
	struct egress_log *log = egress_log_new(16);
	struct reply r;
	unsigned port;
	struct egress_edge *e;
	json_t *reqs, *q;

	(void)state;
	responses_set("PATCH /apis/apps/v1/namespaces/default/deployments/payments", 200,
		      "{\"kind\": \"Deployment\", \"apiVersion\": \"apps/v1\"}");
	e = edge_up("write", ca_path, log, &port);
	edge_call(port, "PATCH", "/apis/apps/v1/namespaces/default/deployments/payments", json_patch,
		  "{\"spec\": {\"replicas\": 1}}", &r);
	egress_edge_stop(&e);
	assert_int_equal(r.status, 200);
	assert_contains(r.body, "\"Deployment\"");
	reqs = https_stub_requests(T.log);
	assert_int_equal(json_array_size(reqs), 1);
	q = json_array_get(reqs, 0);
	assert_string_equal(json_string_value(json_object_get(q, "method")), "PATCH");
	assert_string_equal(json_string_value(json_object_get(q, "body")), "{\"spec\": {\"replicas\": 1}}");
	assert_string_equal(json_string_value(json_object_get(json_object_get(q, "headers"), "content-type")),
			    "application/strategic-merge-patch+json");
	json_decref(reqs);
	/* the uncertain exec's evidence: a mutating request was accepted */
	assert_true(egress_log_mutating_accepted(log));
	egress_log_free(log);
}

static void an_upgrade_is_refused(void **state)
{
	static const char *const upgrade[] = { "Connection: Upgrade", "Upgrade: SPDY/3.1", NULL };
	struct reply r;
	unsigned port;
	struct egress_edge *e = edge_up("write", ca_path, NULL, &port);
	json_t *reqs;

	(void)state;
	edge_call(port, "POST", "/api/v1/namespaces/default/pods/p/exec?command=ls&stdout=true", upgrade, "", &r);
	egress_edge_stop(&e);
	assert_int_equal(r.status, 403);
	assert_contains(r.body, "connection upgrades");
	reqs = https_stub_requests(T.log);
	assert_int_equal(json_array_size(reqs), 0);
	json_decref(reqs);
}

static void an_untrusted_server_gets_nothing(void **state)
{
	struct reply r;
	unsigned port;
	struct egress_edge *e = edge_up("read", T.other_ca, NULL, &port);
	json_t *reqs;

	(void)state;
	edge_call(port, "GET", "/api/v1/namespaces/default/pods", NULL, NULL, &r);
	egress_edge_stop(&e);
	assert_int_equal(r.status, 502);
	assert_contains(r.body, "did not answer");
	/* the TLS handshake failed: no request, so no token, reached it */
	reqs = https_stub_requests(T.log);
	assert_int_equal(json_array_size(reqs), 0);
	json_decref(reqs);
}

static void a_cut_watch_ends_at_once_and_is_logged(void **state)
{
	static const char path[] = "/api/v1/namespaces/default/pods?watch=true";
	struct egress_log *log = egress_log_new(16);
	char got[8192];
	size_t len = 0;
	ssize_t n;
	unsigned port;
	struct egress_edge *e;
	json_t *j, *d;
	int fd;

	(void)state;
	/* the first event, then a stream the API server would hold for 30 s */
	responses_slow("GET /api/v1/namespaces/default/pods?watch=true", "hold", 30,
		       "{\"type\": \"ADDED\", \"object\": {\"kind\": \"Pod\"}}");
	e = edge_up("read", ca_path, log, &port);
	fd = raw_get(port, path);
	got[0] = '\0';
	while (strstr(got, "ADDED") == NULL && len < sizeof got - 1 && (n = read(fd, got + len, sizeof got - 1 - len)) > 0) {
		len += (size_t)n;
		got[len] = '\0';
	}
	assert_contains(got, "\"ADDED\"");
	assert_int_equal(logged_within(log, 200), 0); /* streaming: not over yet */
	close(fd);
	/* within the pump's one-second wait, not the server's 30 s */
	assert_int_equal(logged_within(log, 5000), 1);
	j = egress_log_json(log);
	d = json_array_get(json_object_get(j, "details"), 0);
	assert_string_equal(json_string_value(json_object_get(json_object_get(d, "kubernetes"), "verb")), "watch");
	assert_int_equal(json_integer_value(json_object_get(d, "status")), 200);
	json_decref(j);
	egress_edge_stop(&e);
	egress_log_free(log);
}

static void a_sandbox_gone_before_its_answer_is_logged(void **state)
{
	struct timespec pause = { .tv_nsec = 300 * 1000 * 1000 };
	struct egress_log *log = egress_log_new(16);
	struct egress_counts n;
	unsigned port;
	struct egress_edge *e;
	int fd;

	(void)state;
	responses_slow("GET /api/v1/namespaces/default/pods", "delay", 30, "{\"kind\": \"PodList\"}");
	e = edge_up("read", ca_path, log, &port);
	fd = raw_get(port, "/api/v1/namespaces/default/pods");
	nanosleep(&pause, NULL);
	close(fd);
	assert_int_equal(logged_within(log, 5000), 1);
	egress_log_counts(log, &n);
	assert_int_equal(n.refused, 0);
	egress_edge_stop(&e);
	egress_log_free(log);
}

/* An http: grant: its header (and no other authority) reaches its server; a read grant passes GET
 * and refuses a POST before it leaves, naming the grant, the access and the method; write passes
 * it. Fails with http_judge's method check taken out (the POST reaches the stub). */
static void http_grant_adds_its_header_and_judges_by_method(void **state)
{
	static const char *const forged[] = { "Authorization: Bearer sandbox-forged", "Cookie: a=b", NULL };
	struct egress_log *log = egress_log_new(16);
	struct egress_counts n;
	struct reply r;
	unsigned port;
	struct egress_edge *e;
	json_t *reqs, *h;

	(void)state;
	responses_set("GET /v1/items?x=1", 200, "{\"items\": []}");
	e = edge_up_as("read", ca_path, "Authorization: Bearer " EDGE_TOKEN, log, &port);
	edge_call(port, "GET", "/v1/items?x=1", forged, NULL, &r);
	assert_int_equal(r.status, 200);
	assert_contains(r.body, "\"items\"");
	edge_call(port, "POST", "/v1/items", NULL, "{\"a\": 1}", &r);
	egress_edge_stop(&e);
	assert_int_equal(r.status, 403);
	assert_contains(r.body, "http:tracker");
	assert_contains(r.body, "(read)");
	assert_contains(r.body, "method POST");
	reqs = https_stub_requests(T.log);
	assert_int_equal(json_array_size(reqs), 1);
	h = json_object_get(json_array_get(reqs, 0), "headers");
	assert_string_equal(json_string_value(json_object_get(h, "authorization")), "Bearer " EDGE_TOKEN);
	assert_null(json_object_get(h, "cookie"));
	json_decref(reqs);
	egress_log_counts(log, &n);
	assert_int_equal(n.requests, 2);
	assert_int_equal(n.refused, 1);
	assert_false(egress_log_mutating_accepted(log));

	responses_set("POST /v1/items", 201, "{\"id\": 7}");
	e = edge_up_as("write", ca_path, "Authorization: Bearer " EDGE_TOKEN, log, &port);
	edge_call(port, "POST", "/v1/items", NULL, "{\"a\": 1}", &r);
	egress_edge_stop(&e);
	assert_int_equal(r.status, 201);
	reqs = https_stub_requests(T.log);
	assert_int_equal(json_array_size(reqs), 2);
	assert_string_equal(json_string_value(json_object_get(json_array_get(reqs, 1), "body")), "{\"a\": 1}");
	json_decref(reqs);
	assert_true(egress_log_mutating_accepted(log));
	egress_log_free(log);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup(read_grant_lists_with_the_grants_token, test_setup),
		cmocka_unit_test_setup(read_grant_refuses_a_patch_before_it_leaves, test_setup),
		cmocka_unit_test_setup(write_grant_forwards_a_patch_with_its_body, test_setup),
		cmocka_unit_test_setup(an_upgrade_is_refused, test_setup),
		cmocka_unit_test_setup(an_untrusted_server_gets_nothing, test_setup),
		cmocka_unit_test_setup(a_cut_watch_ends_at_once_and_is_logged, test_setup),
		cmocka_unit_test_setup(a_sandbox_gone_before_its_answer_is_logged, test_setup),
		cmocka_unit_test_setup(http_grant_adds_its_header_and_judges_by_method, test_setup),
	};

	return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
