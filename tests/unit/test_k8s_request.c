/* Unit tests for manager/egress/k8s_request.c: real request shapes (what kubectl and client-go send)
 * against the attributes the API server's RequestInfoFactory gives them, the query's conventions
 * (watch=true, fieldSelector metadata.name, dryRun), the refusals of what cannot be judged (bounds,
 * bad escapes, dot segments), and a read grant's decision on each shape. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "k8s_request.h"

/* One request and what the server makes of it. read: a read grant passes it. */
struct shape {
	const char *method, *path, *query;
	bool resource;
	const char *verb, *group, *version, *resource_name, *subresource, *namespace, *name;
	bool dry_run, upgrade, discovery, read, mutating;
};

#define R true   /* a resource request */
#define N false  /* a non-resource request */

static const struct shape shapes[] = {
	/* core, namespaced: get and list */
	{"GET", "/api/v1/namespaces/default/pods/web", "", R, "get", "", "v1", "pods", "", "default", "web", false, false, false, true, false},
	{"GET", "/api/v1/namespaces/default/pods", "limit=500", R, "list", "", "v1", "pods", "", "default", "", false, false, false, true, false},
	{"HEAD", "/api/v1/namespaces/default/pods/web", "", R, "get", "", "v1", "pods", "", "default", "web", false, false, false, true, false},
	/* core, cluster-scoped; the namespace object names itself as its namespace */
	{"GET", "/api/v1/nodes", "", R, "list", "", "v1", "nodes", "", "", "", false, false, false, true, false},
	{"GET", "/api/v1/nodes/node-1", "", R, "get", "", "v1", "nodes", "", "", "node-1", false, false, false, true, false},
	{"GET", "/api/v1/namespaces", "", R, "list", "", "v1", "namespaces", "", "", "", false, false, false, true, false},
	{"GET", "/api/v1/namespaces/kube-system", "", R, "get", "", "v1", "namespaces", "", "kube-system", "kube-system", false, false, false, true, false},
	{"PUT", "/api/v1/namespaces/old/finalize", "", R, "update", "", "v1", "namespaces", "finalize", "old", "old", false, false, false, false, true},
	{"GET", "/api/v1/namespaces/old/status", "", R, "get", "", "v1", "namespaces", "status", "old", "old", false, false, false, true, false},
	/* grouped */
	{"GET", "/apis/apps/v1/namespaces/default/deployments/payments", "", R, "get", "apps", "v1", "deployments", "", "default", "payments", false, false, false, true, false},
	{"GET", "/apis/apps/v1/deployments", "", R, "list", "apps", "v1", "deployments", "", "", "", false, false, false, true, false},
	{"GET", "/apis/rbac.authorization.k8s.io/v1/clusterroles/admin", "", R, "get", "rbac.authorization.k8s.io", "v1", "clusterroles", "", "", "admin", false, false, false, true, false},
	/* mutating verbs */
	{"POST", "/apis/apps/v1/namespaces/default/deployments", "fieldManager=kubectl-client-side-apply", R, "create", "apps", "v1", "deployments", "", "default", "", false, false, false, false, true},
	{"PUT", "/apis/apps/v1/namespaces/default/deployments/payments", "", R, "update", "apps", "v1", "deployments", "", "default", "payments", false, false, false, false, true},
	{"PATCH", "/apis/apps/v1/namespaces/default/deployments/payments", "fieldManager=kubectl-edit", R, "patch", "apps", "v1", "deployments", "", "default", "payments", false, false, false, false, true},
	{"DELETE", "/api/v1/namespaces/default/pods/web", "", R, "delete", "", "v1", "pods", "", "default", "web", false, false, false, false, true},
	{"DELETE", "/api/v1/namespaces/default/pods", "labelSelector=app%3Dweb", R, "deletecollection", "", "v1", "pods", "", "default", "", false, false, false, false, true},
	/* dry runs: still the mutating verb */
	{"PATCH", "/apis/apps/v1/namespaces/default/deployments/payments", "dryRun=All&fieldManager=kubectl", R, "patch", "apps", "v1", "deployments", "", "default", "payments", true, false, false, false, true},
	{"POST", "/api/v1/namespaces/default/configmaps", "dryRun=All", R, "create", "", "v1", "configmaps", "", "default", "", true, false, false, false, true},
	/* subresources */
	{"GET", "/api/v1/namespaces/default/pods/web/status", "", R, "get", "", "v1", "pods", "status", "default", "web", false, false, false, true, false},
	{"PUT", "/api/v1/namespaces/default/pods/web/status", "", R, "update", "", "v1", "pods", "status", "default", "web", false, false, false, false, true},
	{"GET", "/apis/apps/v1/namespaces/default/deployments/payments/scale", "", R, "get", "apps", "v1", "deployments", "scale", "default", "payments", false, false, false, true, false},
	{"PATCH", "/apis/apps/v1/namespaces/default/deployments/payments/scale", "", R, "patch", "apps", "v1", "deployments", "scale", "default", "payments", false, false, false, false, true},
	{"GET", "/api/v1/namespaces/default/pods/web/log", "container=app&follow=true", R, "get", "", "v1", "pods", "log", "default", "web", false, false, false, true, false},
	{"POST", "/api/v1/namespaces/default/pods/web/eviction", "", R, "create", "", "v1", "pods", "eviction", "default", "web", false, false, false, false, true},
	/* upgrades: refused under read whatever the method */
	{"POST", "/api/v1/namespaces/default/pods/web/exec", "command=sh&stdin=true", R, "create", "", "v1", "pods", "exec", "default", "web", false, true, false, false, true},
	{"GET", "/api/v1/namespaces/default/pods/web/exec", "command=id", R, "get", "", "v1", "pods", "exec", "default", "web", false, true, false, false, true},
	{"GET", "/api/v1/namespaces/default/pods/web/attach", "", R, "get", "", "v1", "pods", "attach", "default", "web", false, true, false, false, true},
	{"POST", "/api/v1/namespaces/default/pods/web/portforward", "", R, "create", "", "v1", "pods", "portforward", "default", "web", false, true, false, false, true},
	{"GET", "/api/v1/namespaces/default/pods/web/proxy/metrics", "", R, "get", "", "v1", "pods", "proxy", "default", "web", false, true, false, false, true},
	{"GET", "/api/v1/namespaces/default/services/http:web:80/proxy/", "", R, "get", "", "v1", "services", "proxy", "default", "http:web:80", false, true, false, false, true},
	{"GET", "/api/v1/nodes/node-1/proxy/configz", "", R, "get", "", "v1", "nodes", "proxy", "", "node-1", false, true, false, false, true},
	/* the legacy proxy verb: no subresource, what follows the name is proxied */
	{"GET", "/api/v1/proxy/namespaces/default/pods/web/healthz", "", R, "proxy", "", "v1", "pods", "", "default", "web", false, true, false, false, true},
	/* watch: by the query (first value; only 0 and false, any case, say no) and by the prefix */
	{"GET", "/api/v1/namespaces/default/pods", "watch=true&resourceVersion=10", R, "watch", "", "v1", "pods", "", "default", "", false, false, false, true, false},
	{"GET", "/api/v1/namespaces/default/pods", "watch=1", R, "watch", "", "v1", "pods", "", "default", "", false, false, false, true, false},
	{"GET", "/api/v1/namespaces/default/pods", "watch", R, "watch", "", "v1", "pods", "", "default", "", false, false, false, true, false},
	{"GET", "/api/v1/namespaces/default/pods", "watch=FALSE", R, "list", "", "v1", "pods", "", "default", "", false, false, false, true, false},
	{"GET", "/api/v1/namespaces/default/pods", "watch=0&watch=true", R, "list", "", "v1", "pods", "", "default", "", false, false, false, true, false},
	{"GET", "/api/v1/namespaces/default/pods", "wat%63h=true", R, "watch", "", "v1", "pods", "", "default", "", false, false, false, true, false},
	{"GET", "/api/v1/namespaces/default/pods", "watch=true;x=1", R, "list", "", "v1", "pods", "", "default", "", false, false, false, true, false},
	{"GET", "/api/v1/namespaces/default/pods", "watch=fal%C5%BFe", R, "list", "", "v1", "pods", "", "default", "", false, false, false, true, false},
	{"GET", "/api/v1/watch/namespaces/default/pods", "", R, "watch", "", "v1", "pods", "", "default", "", false, false, false, true, false},
	{"GET", "/apis/apps/v1/watch/deployments", "", R, "watch", "apps", "v1", "deployments", "", "", "", false, false, false, true, false},
	{"GET", "/api/v1/watch/namespaces/default/pods/web", "", R, "watch", "", "v1", "pods", "", "default", "web", false, false, false, true, false},
	/* the legacy watch prefix makes any method a watch: read refuses it by its method */
	{"POST", "/api/v1/watch/namespaces/default/pods", "", R, "watch", "", "v1", "pods", "", "default", "", false, false, false, false, true},
	/* a get of one object by field selector (kubectl get --watch, informers) */
	{"GET", "/api/v1/namespaces/default/pods", "fieldSelector=metadata.name%3Dweb&watch=true", R, "watch", "", "v1", "pods", "", "default", "web", false, false, false, true, false},
	{"GET", "/api/v1/namespaces/default/pods", "fieldSelector=status.phase%3DRunning,metadata.name%3D%3Dweb", R, "list", "", "v1", "pods", "", "default", "web", false, false, false, true, false},
	{"GET", "/api/v1/namespaces/default/pods", "fieldSelector=metadata.name%21%3Dweb", R, "list", "", "v1", "pods", "", "default", "", false, false, false, true, false},
	{"GET", "/api/v1/namespaces/default/pods", "fieldSelector=metadata.name%3Dweb,nonsense", R, "list", "", "v1", "pods", "", "default", "", false, false, false, true, false},
	{"GET", "/api/v1/namespaces/default/pods", "fieldSelector=metadata.name%3Db,metadata.name%3Da", R, "list", "", "v1", "pods", "", "default", "a", false, false, false, true, false},
	{"GET", "/api/v1/namespaces/default/pods", "fieldSelector=metadata.name%3D..", R, "list", "", "v1", "pods", "", "default", "", false, false, false, true, false},
	/* an unknown method has no verb */
	{"OPTIONS", "/api/v1/namespaces/default/pods", "", R, "", "", "v1", "pods", "", "default", "", false, false, false, false, true},
	/* percent-encoded segments are decoded as the server decodes them; %2F separates */
	{"GET", "/api/v1/namespaces/d%65fault/pods/w%65b", "", R, "get", "", "v1", "pods", "", "default", "web", false, false, false, true, false},
	{"GET", "/api/v1/namespaces/default/pods/web%2Fexec", "", R, "get", "", "v1", "pods", "exec", "default", "web", false, true, false, false, true},
	{"GET", "/api/v1/namespaces/default/pods/", "", R, "list", "", "v1", "pods", "", "default", "", false, false, false, true, false},
	/* non-resource: discovery passes read, the rest does not */
	{"GET", "/api", "", N, "get", "", "", "", "", "", "", false, false, true, true, false},
	{"GET", "/api/v1", "", N, "get", "", "", "", "", "", "", false, false, true, true, false},
	{"GET", "/apis", "", N, "get", "", "", "", "", "", "", false, false, true, true, false},
	{"GET", "/apis/apps", "", N, "get", "", "", "", "", "", "", false, false, true, true, false},
	{"GET", "/apis/apps/v1", "", N, "get", "", "", "", "", "", "", false, false, true, true, false},
	{"GET", "/version", "", N, "get", "", "", "", "", "", "", false, false, true, true, false},
	{"GET", "/openapi/v2", "", N, "get", "", "", "", "", "", "", false, false, true, true, false},
	{"GET", "/openapi/v3", "", N, "get", "", "", "", "", "", "", false, false, true, true, false},
	{"GET", "/openapi/v3/apis/apps/v1", "hash=ABC", N, "get", "", "", "", "", "", "", false, false, true, true, false},
	{"HEAD", "/version", "", N, "head", "", "", "", "", "", "", false, false, true, false, false},
	{"GET", "/version/x", "", N, "get", "", "", "", "", "", "", false, false, false, false, false},
	{"GET", "/healthz", "", N, "get", "", "", "", "", "", "", false, false, false, false, false},
	{"GET", "/metrics", "", N, "get", "", "", "", "", "", "", false, false, false, false, false},
	{"GET", "/", "", N, "get", "", "", "", "", "", "", false, false, false, false, false},
	{"POST", "/api/v1", "", N, "post", "", "", "", "", "", "", false, false, true, false, true},
	{"GET", "/apiz/v1/namespaces/default/pods", "", N, "get", "", "", "", "", "", "", false, false, false, false, false},
};

static void expect_shape(const struct shape *w, const struct k8s_request *got)
{
	const char *want[] = {w->verb, w->group, w->version, w->resource_name, w->subresource, w->namespace, w->name};
	const char *have[] = {got->verb, got->group, got->version, got->resource, got->subresource, got->namespace, got->name};
	const char *what[] = {"verb", "group", "version", "resource", "subresource", "namespace", "name"};

	for (size_t i = 0; i < sizeof want / sizeof want[0]; i++)
		if (strcmp(want[i], have[i]) != 0)
			fail_msg("%s %s?%s: %s \"%s\", want \"%s\"", w->method, w->path, w->query, what[i], have[i], want[i]);
	if (got->resource_request != w->resource || got->dry_run != w->dry_run || got->upgrade != w->upgrade ||
	    got->discovery != w->discovery)
		fail_msg("%s %s?%s: resource %d dry_run %d upgrade %d discovery %d", w->method, w->path, w->query,
			 got->resource_request, got->dry_run, got->upgrade, got->discovery);
	if (k8s_request_mutating(got) != w->mutating)
		fail_msg("%s %s?%s: mutating %d", w->method, w->path, w->query, k8s_request_mutating(got));
}

static int parse(const char *method, const char *path, const char *query, struct k8s_request *req, struct sb_err *err)
{
	return k8s_request_parse(method, path, strlen(path), query, strlen(query), req, err);
}

static void test_shapes(void **state)
{
	struct k8s_request req;
	struct sb_err err;

	(void)state;
	for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
		const struct shape *w = &shapes[i];

		if (parse(w->method, w->path, w->query, &req, &err) < 0)
			fail_msg("%s %s?%s: refused: %s", w->method, w->path, w->query, err.msg);
		expect_shape(w, &req);
	}
}

static void test_read_and_write_grants(void **state)
{
	struct k8s_request req;
	struct sb_err err;

	(void)state;
	for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
		const struct shape *w = &shapes[i];
		int rc;

		assert_int_equal(parse(w->method, w->path, w->query, &req, &err), 0);
		rc = k8s_request_decide("prod", "read", &req, &err);
		if ((rc == 0) != w->read)
			fail_msg("%s %s?%s: read grant gave %d (%s)", w->method, w->path, w->query, rc, rc < 0 ? err.msg : "");
		if (rc < 0 && err.errnum != EACCES)
			fail_msg("%s %s: refusal errnum %d", w->method, w->path, err.errnum);
		/* write passes all: the cluster's RBAC still decides */
		assert_int_equal(k8s_request_decide("prod", "write", &req, &err), 0);
		/* an access word that is neither is refused */
		assert_int_equal(k8s_request_decide("prod", "admin", &req, &err), -1);
		assert_int_equal(err.errnum, EINVAL);
	}
}

static void refusal_is(const char *method, const char *path, const char *query, const char *want)
{
	struct k8s_request req;
	struct sb_err err;

	assert_int_equal(parse(method, path, query, &req, &err), 0);
	assert_int_equal(k8s_request_decide("prod", "read", &req, &err), -1);
	assert_string_equal(err.msg, want);
}

static void test_refusal_messages(void **state)
{
	(void)state;
	refusal_is("PATCH", "/apis/apps/v1/namespaces/default/deployments/payments", "",
		   "refused by grant \"prod\" (read): verb \"patch\" on apps/deployments \"payments\" in namespace "
		   "\"default\": read passes GET and HEAD only");
	refusal_is("PATCH", "/apis/apps/v1/namespaces/default/deployments/payments", "dryRun=All",
		   "refused by grant \"prod\" (read): verb \"patch\" (dry run) on apps/deployments \"payments\" in "
		   "namespace \"default\": a dry run is still the mutating verb (admission runs), refused under read");
	refusal_is("GET", "/api/v1/namespaces/default/pods/web/exec", "command=id",
		   "refused by grant \"prod\" (read): verb \"get\" on pods/exec \"web\" in namespace \"default\": it opens "
		   "a stream into a workload (exec, attach, port-forward or proxy), refused under read even with GET");
	refusal_is("DELETE", "/api/v1/nodes", "",
		   "refused by grant \"prod\" (read): verb \"deletecollection\" on nodes: read passes GET and HEAD only");
	refusal_is("OPTIONS", "/api/v1/pods", "",
		   "refused by grant \"prod\" (read): method \"OPTIONS\" (no Kubernetes verb) on pods: read passes GET "
		   "and HEAD only");
	refusal_is("GET", "/healthz", "",
		   "refused by grant \"prod\" (read): verb \"get\" on path \"/healthz\": read passes discovery paths only");
	/* what came from the request is terminal-safe in the message */
	refusal_is("DELETE", "/api/v1/namespaces/default/pods/a%C2%9B2Jb", "",
		   "refused by grant \"prod\" (read): verb \"delete\" on pods \"a\\xc2\\x9b2Jb\" in namespace \"default\": "
		   "read passes GET and HEAD only");
}

static void refused(const char *method, const char *path, size_t path_len, const char *query, int errnum)
{
	struct k8s_request req;
	struct sb_err err;

	if (k8s_request_parse(method, path, path_len, query, strlen(query), &req, &err) == 0)
		fail_msg("%s %.*s?%s: parsed (verb %s), want refused", method, (int)path_len, path, query, req.verb);
	assert_int_equal(err.errnum, errnum);
	assert_true(err.msg[0] != '\0');
}

static void test_malformed(void **state)
{
	(void)state;
	refused("GET", "", 0, "", EINVAL);
	refused("GET", "api/v1/pods", 11, "", EINVAL);
	refused("GET", "/api/v1/pods/%zz", 16, "", EINVAL);
	refused("GET", "/api/v1/pods/%4", 15, "", EINVAL);
	refused("GET", "/api/v1/pods/%", 14, "", EINVAL);
	refused("GET", "/api/v1/pods/a%00b", 18, "", EINVAL);
	refused("GET", "/api/v1/pods/a\0b", 16, "", EINVAL);
	refused("GET", "/api/v1/pods/a%1bb", 18, "", EINVAL);
	refused("GET", "/api/v1/pods/a\nb", 16, "", EINVAL);
	refused("GET", "/api/v1/pods?watch=1", 20, "", EINVAL);
	/* dot and empty segments, raw or encoded: a client library could squash them after the check */
	refused("GET", "/api/v1/namespaces/default/pods/x/../exec", 41, "", EINVAL);
	refused("GET", "/api/v1/namespaces/default/pods/x/%2e%2e/exec", 45, "", EINVAL);
	refused("GET", "/api/v1/namespaces/default/pods/./web", 37, "", EINVAL);
	refused("GET", "/api/v1//pods", 13, "", EINVAL);
	refused("GET", "//api/v1/pods", 13, "", EINVAL);
	/* a legacy special verb with nothing after it (the server's "unable to determine kind") */
	refused("GET", "/api/v1/watch", 13, "", EINVAL);
	refused("GET", "/apis/apps/v1/proxy", 19, "", EINVAL);
	/* methods */
	refused("", "/api", 4, "", EINVAL);
	refused("G T", "/api", 4, "", EINVAL);
	refused("VERYLONGMETHODNAME", "/api", 4, "", EINVAL);
	/* the query */
	refused("GET", "/api/v1/pods", 12, "watch=1\r\nX:y", EINVAL);
}

static void test_bounds(void **state)
{
	static char path[K8S_REQ_PATH_MAX + 2];
	static char query[K8S_REQ_QUERY_MAX + 2];
	struct k8s_request req;
	struct sb_err err;
	size_t n = 0;

	(void)state;
	/* a path at the limit parses; one byte over is refused, never cut */
	n = (size_t)snprintf(path, sizeof path, "/api/v1/namespaces/default/pods/");
	memset(path + n, 'a', K8S_REQ_PATH_MAX - n);
	path[K8S_REQ_PATH_MAX] = '\0';
	/* the name field is smaller than the path: the long name is refused by its field's bound */
	refused("GET", path, K8S_REQ_PATH_MAX, "", E2BIG);
	n = (size_t)snprintf(path, sizeof path, "/version");
	path[n] = '/';
	memset(path + n + 1, 'x', K8S_REQ_PATH_MAX - n - 1);
	assert_int_equal(k8s_request_parse("GET", path, K8S_REQ_PATH_MAX, "", 0, &req, &err), 0);
	path[K8S_REQ_PATH_MAX] = 'x';
	refused("GET", path, K8S_REQ_PATH_MAX + 1, "", E2BIG);
	/* a name of K8S_REQ_FIELD_MAX - 1 bytes fits; one more does not */
	n = (size_t)snprintf(path, sizeof path, "/api/v1/namespaces/default/pods/");
	memset(path + n, 'b', K8S_REQ_FIELD_MAX - 1);
	assert_int_equal(k8s_request_parse("GET", path, n + K8S_REQ_FIELD_MAX - 1, "", 0, &req, &err), 0);
	assert_int_equal(strlen(req.name), K8S_REQ_FIELD_MAX - 1);
	path[n + K8S_REQ_FIELD_MAX - 1] = 'b';
	refused("GET", path, n + K8S_REQ_FIELD_MAX, "", E2BIG);
	/* segments: K8S_REQ_SEGMENTS_MAX pass, one more is refused */
	n = 0;
	for (int i = 0; i < K8S_REQ_SEGMENTS_MAX; i++)
		n += (size_t)snprintf(path + n, sizeof path - n, "/s");
	assert_int_equal(k8s_request_parse("GET", path, n, "", 0, &req, &err), 0);
	n += (size_t)snprintf(path + n, sizeof path - n, "/s");
	refused("GET", path, n, "", E2BIG);
	/* the query */
	memset(query, 'q', K8S_REQ_QUERY_MAX + 1);
	query[K8S_REQ_QUERY_MAX] = '\0';
	assert_int_equal(k8s_request_parse("GET", "/api", 4, query, K8S_REQ_QUERY_MAX, &req, &err), 0);
	query[K8S_REQ_QUERY_MAX] = 'q';
	query[K8S_REQ_QUERY_MAX + 1] = '\0';
	refused("GET", "/api", 4, query, E2BIG);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_shapes),
		cmocka_unit_test(test_read_and_write_grants),
		cmocka_unit_test(test_refusal_messages),
		cmocka_unit_test(test_malformed),
		cmocka_unit_test(test_bounds),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
