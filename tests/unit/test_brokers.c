/* Unit tests for the tokenrequest and rancher brokers (manager/broker*.c) and their dispatch in
 * snapshot_make, against a local HTTPS server (tests/brokers/server.py, started here with a
 * certificate for "localhost" from the project's own CA). Asserted: the request (path, service
 * account by access, Authorization, expirationSeconds >= 600, Rancher ttl in milliseconds), the
 * kubeconfig written, the expiry, and errors (403 with the server's message, 401, a wrong CA,
 * a timeout, invalid configs), with no file left behind by a failed grant. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <jansson.h>
#include <mbedtls/base64.h>

#include "broker.h"
#include "clock.h"
#include "ca.h"
#include "grants.h"
#include "https_stub.h"
#include "testutil.h"

#define MANAGER_TOKEN "manager-secret-token-0123"

static struct {
	char base[64];
	char tls[128];        /* server.crt, server.key, ca.crt */
	char other_ca[128];   /* a CA the server's certificate does not chain to */
	char log[128];
	char responses[128];
	char token[128];      /* the manager's API credential */
	char bad_token[128];
	char out[128];        /* where credentials are written */
	char server[64];      /* https://localhost:PORT */
	pid_t pid;
	int n;                /* a counter for unique output names */
} T;

static void write_text(const char *path, const char *text, mode_t mode)
{
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, mode);

	assert_true(fd >= 0);
	assert_int_equal(write(fd, text, strlen(text)), (ssize_t)strlen(text));
	close(fd);
	assert_int_equal(chmod(path, mode), 0);
}

static int server_start(void)
{
	char port_file[160];

	snprintf(port_file, sizeof port_file, "%s/port", T.base);
	T.pid = https_stub_start(T.tls, port_file, T.log, T.responses, MANAGER_TOKEN, T.server, sizeof T.server);
	return T.pid > 0 ? 0 : -1;
}

static int group_setup(void **state)
{
	struct ca_leaf leaf = { .dns_name = "localhost", .usage = CA_USAGE_SERVER };
	struct sb_err err;
	struct ca *ca = NULL, *other = NULL;
	char dir[160];

	(void)state;
	/* The server is on loopback: no proxy from the environment may stand in between. */
	setenv("NO_PROXY", "localhost,127.0.0.1", 1);
	setenv("no_proxy", "localhost,127.0.0.1", 1);
	snprintf(T.base, sizeof T.base, "/tmp/test_brokers.XXXXXX");
	if (mkdtemp(T.base) == NULL)
		return -1;
	snprintf(T.tls, sizeof T.tls, "%s/tls", T.base);
	snprintf(T.other_ca, sizeof T.other_ca, "%s/other/ca.crt", T.base);
	snprintf(T.log, sizeof T.log, "%s/requests.log", T.base);
	snprintf(T.responses, sizeof T.responses, "%s/responses.json", T.base);
	snprintf(T.token, sizeof T.token, "%s/manager.token", T.base);
	snprintf(T.bad_token, sizeof T.bad_token, "%s/bad.token", T.base);
	snprintf(T.out, sizeof T.out, "%s/out", T.base);
	mkdir(T.tls, 0700);
	mkdir(T.out, 0700);
	snprintf(dir, sizeof dir, "%s/ca", T.base);
	if (ca_open(dir, &ca, &err) < 0 || ca_issue_leaf(ca, &leaf, T.tls, "server", &err) < 0 ||
	    ca_write_cert(ca, T.tls, "ca.crt", &err) < 0) {
		fprintf(stderr, "test_brokers: %s\n", err.msg);
		return -1;
	}
	snprintf(dir, sizeof dir, "%s/other", T.base);
	if (ca_open(dir, &other, &err) < 0 || ca_write_cert(other, dir, "ca.crt", &err) < 0) {
		fprintf(stderr, "test_brokers: %s\n", err.msg);
		return -1;
	}
	ca_free(ca);
	ca_free(other);
	write_text(T.token, MANAGER_TOKEN "\n", 0600);
	write_text(T.bad_token, "not-the-manager-token\n", 0600);
	return server_start();
}

static int group_teardown(void **state)
{
	(void)state;
	https_stub_stop(T.pid);
	test_rmtree(T.base);
	return 0;
}

/* Before each test: no overrides, an empty request log. */
static int test_setup(void **state)
{
	(void)state;
	return https_stub_reset(T.responses, T.log);
}

/* ---- helpers ---- */

static void responses_set(const char *key, int status, const char *message, int delay)
{
	json_t *o = json_pack("{s:{s:i, s:{s:s, s:s, s:s, s:s, s:i}, s:i}}", key, "status", status, "body", "kind",
			      "Status", "apiVersion", "v1", "status", "Failure", "message", message, "code", status,
			      "delay", delay);

	assert_int_equal(json_dump_file(o, T.responses, 0), 0);
	json_decref(o);
}

static json_t *log_requests(void)
{
	return https_stub_requests(T.log);
}

static const char *config_write(const char *name, const char *json_fmt, ...) __attribute__((format(printf, 2, 3)));

static const char *config_write(const char *name, const char *json_fmt, ...)
{
	static char path[8][200];
	static int next;
	char text[4096];
	char *p = path[next++ % 8];
	va_list ap;

	va_start(ap, json_fmt);
	vsnprintf(text, sizeof text, json_fmt, ap);
	va_end(ap);
	snprintf(p, 200, "%s/%s.json", T.base, name);
	write_text(p, text, 0644);
	return p;
}

static const char *tokenrequest_config(const char *extra)
{
	return config_write("tokenrequest",
			    "{\"server\": \"%s/\", \"ca_file\": \"%s/ca.crt\", \"namespace\": \"ci\", "
			    "\"read_service_account\": \"viewer\", \"write_service_account\": \"deployer\", "
			    "\"token_file\": \"%s\"%s}", T.server, T.tls, T.token, extra);
}

static const char *rancher_config(const char *extra)
{
	return config_write("rancher",
			    "{\"server\": \"%s\", \"ca_file\": \"%s/ca.crt\", \"cluster_id\": \"c-m-abc12\", "
			    "\"read_token_file\": \"%s\", \"ttl_seconds\": 900%s}", T.server, T.tls, T.token, extra);
}

/* Runs one broker into a fresh output file; returns its rc, the path in path. */
static int run(int (*broker)(const struct broker_request *, struct broker_result *, struct sb_err *),
	       const char *arg, const char *access, char *path, size_t len, struct broker_result *res, struct sb_err *err)
{
	struct broker_request req = { .resource = "kubernetes:staging", .access = access, .arg = arg,
				      .label = "s0123.g1", .path = path, .uid = getuid(), .gid = getgid() };

	snprintf(path, len, "%s/cred-%d.kubeconfig", T.out, T.n++);
	memset(err, 0, sizeof *err);
	return broker(&req, res, err);
}

static json_t *kubeconfig_load(const char *path)
{
	struct stat st;
	json_t *k;

	assert_int_equal(stat(path, &st), 0);
	assert_int_equal(st.st_mode & 0777, 0400);
	k = json_load_file(path, 0, NULL);
	assert_non_null(k);
	assert_string_equal(json_string_value(json_object_get(k, "kind")), "Config");
	assert_string_equal(json_string_value(json_object_get(k, "current-context")), "staging");
	return k;
}

static const char *kube_get(json_t *k, const char *list, const char *inner, const char *field)
{
	return json_string_value(json_object_get(json_object_get(json_array_get(json_object_get(k, list), 0), inner),
						 field));
}

/* ---- tokenrequest ---- */

static void tokenrequest_read_and_write(void **state)
{
	struct broker_result res;
	struct sb_err err;
	char path[256], ca_path[200], ca_pem[4096], ca_b64[8192];
	size_t b64_len;
	int64_t before = clock_real_ms();
	json_t *k, *reqs, *r, *body;
	FILE *f;
	size_t n;

	(void)state;
	assert_int_equal(run(broker_tokenrequest, tokenrequest_config(", \"audiences\": [\"https://kubernetes.default.svc\"]"),
			     "read", path, sizeof path, &res, &err), 0);
	k = kubeconfig_load(path);
	assert_contains(kube_get(k, "users", "user", "token"), "k8s-token-viewer-");
	assert_string_equal(kube_get(k, "clusters", "cluster", "server"), T.server); /* trailing '/' dropped */
	/* The cluster's CA travels as certificate-authority-data: base64 of the CA file. */
	snprintf(ca_path, sizeof ca_path, "%s/ca.crt", T.tls);
	f = fopen(ca_path, "r");
	assert_non_null(f);
	n = fread(ca_pem, 1, sizeof ca_pem, f);
	fclose(f);
	assert_int_equal(mbedtls_base64_encode((unsigned char *)ca_b64, sizeof ca_b64, &b64_len,
					       (unsigned char *)ca_pem, n), 0);
	assert_string_equal(kube_get(k, "clusters", "cluster", "certificate-authority-data"), ca_b64);
	json_decref(k);
	/* Default lifetime: one hour, as the server granted it. */
	assert_true(res.expires_ms >= before + 3590 * 1000LL && res.expires_ms <= clock_real_ms() + 3601 * 1000LL);
	assert_string_equal(res.revoke_id, "");

	assert_int_equal(run(broker_tokenrequest, tokenrequest_config(", \"expiration_seconds\": 600"), "write", path,
			     sizeof path, &res, &err), 0);
	k = kubeconfig_load(path);
	assert_contains(kube_get(k, "users", "user", "token"), "k8s-token-deployer-");
	json_decref(k);

	reqs = log_requests();
	assert_int_equal(json_array_size(reqs), 2);
	r = json_array_get(reqs, 0);
	assert_string_equal(json_string_value(json_object_get(r, "method")), "POST");
	assert_string_equal(json_string_value(json_object_get(r, "path")), "/api/v1/namespaces/ci/serviceaccounts/viewer/token");
	assert_string_equal(json_string_value(json_object_get(json_object_get(r, "headers"), "authorization")),
			    "Bearer " MANAGER_TOKEN);
	body = json_loads(json_string_value(json_object_get(r, "body")), 0, NULL);
	assert_string_equal(json_string_value(json_object_get(body, "apiVersion")), "authentication.k8s.io/v1");
	assert_string_equal(json_string_value(json_object_get(body, "kind")), "TokenRequest");
	assert_int_equal(json_integer_value(json_object_get(json_object_get(body, "spec"), "expirationSeconds")), 3600);
	assert_string_equal(json_string_value(json_array_get(json_object_get(json_object_get(body, "spec"), "audiences"), 0)),
			    "https://kubernetes.default.svc");
	json_decref(body);
	r = json_array_get(reqs, 1);
	assert_string_equal(json_string_value(json_object_get(r, "path")),
			    "/api/v1/namespaces/ci/serviceaccounts/deployer/token");
	body = json_loads(json_string_value(json_object_get(r, "body")), 0, NULL);
	assert_true(json_integer_value(json_object_get(json_object_get(body, "spec"), "expirationSeconds")) >= 600);
	assert_null(json_object_get(json_object_get(body, "spec"), "audiences"));
	json_decref(body);
	json_decref(reqs);
}

static void tokenrequest_forbidden(void **state)
{
	struct broker_result res;
	struct sb_err err;
	char path[256];

	(void)state;
	responses_set("POST /api/v1/namespaces/ci/serviceaccounts/deployer/token", 403,
		      "serviceaccounts \"deployer\" is forbidden: User \"system:serviceaccount:infra:manager\" cannot "
		      "create resource \"serviceaccounts/token\"", 0);
	assert_int_equal(run(broker_tokenrequest, tokenrequest_config(""), "write", path, sizeof path, &res, &err), -1);
	assert_contains(err.msg, "kubernetes:staging");
	assert_contains(err.msg, "403");
	assert_contains(err.msg, "cannot create resource \"serviceaccounts/token\"");
	assert_contains(err.msg, "ci/deployer");
	assert_int_equal(access(path, F_OK), -1); /* nothing written */
	assert_null(strstr(err.msg, MANAGER_TOKEN));
}

static void tokenrequest_unauthorized(void **state)
{
	struct broker_result res;
	struct sb_err err;
	char path[256], extra[300];

	(void)state;
	/* The server expects another manager credential: 401, and the grant fails. */
	config_write("tr401", "{\"server\": \"%s\", \"ca_file\": \"%s/ca.crt\", \"namespace\": \"ci\", "
		     "\"read_service_account\": \"viewer\", \"token_file\": \"%s\"}", T.server, T.tls, T.bad_token);
	snprintf(extra, sizeof extra, "%s/tr401.json", T.base);
	assert_int_equal(run(broker_tokenrequest, extra, "read", path, sizeof path, &res, &err), -1);
	assert_contains(err.msg, "401");
	assert_contains(err.msg, "Unauthorized");
	assert_null(strstr(err.msg, "not-the-manager-token"));
	assert_int_equal(access(path, F_OK), -1);
}

static void tokenrequest_untrusted_server(void **state)
{
	struct broker_result res;
	struct sb_err err;
	char path[256], cfg[200];

	(void)state;
	config_write("trca", "{\"server\": \"%s\", \"ca_file\": \"%s\", \"namespace\": \"ci\", "
		     "\"read_service_account\": \"viewer\", \"token_file\": \"%s\"}", T.server, T.other_ca, T.token);
	snprintf(cfg, sizeof cfg, "%s/trca.json", T.base);
	assert_int_equal(run(broker_tokenrequest, cfg, "read", path, sizeof path, &res, &err), -1);
	assert_contains(err.msg, "the TokenRequest API");
	assert_int_equal(access(path, F_OK), -1);
	/* The TLS handshake failed: no request, hence no credential, ever reached the server. */
	json_t *reqs = log_requests();
	assert_int_equal(json_array_size(reqs), 0);
	json_decref(reqs);
}

static void tokenrequest_timeout(void **state)
{
	struct broker_result res;
	struct sb_err err;
	char path[256];
	time_t t0 = time(NULL);

	(void)state;
	responses_set("POST /api/v1/namespaces/ci/serviceaccounts/viewer/token", 201, "late", 4);
	assert_int_equal(run(broker_tokenrequest, tokenrequest_config(", \"timeout_seconds\": 1"), "read", path,
			     sizeof path, &res, &err), -1);
	assert_int_equal(err.errnum, ETIMEDOUT);
	assert_contains(err.msg, "no answer in time");
	assert_true(time(NULL) - t0 <= 3);
}

static void tokenrequest_bad_configs(void **state)
{
	static const struct {
		const char *extra;
		const char *access;
		const char *expect;
	} cases[] = {
		{ ", \"expiration_seconds\": 300", "read", "from 600" },
		{ ", \"surprise\": 1", "read", "unknown key 'surprise'" },
		{ ", \"audiences\": \"x\"", "read", "list of strings" },
		{ "", "admin", "read or write" },
	};
	struct broker_result res;
	struct sb_err err;
	char path[256], cfg[200];
	json_t *reqs;

	(void)state;
	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		assert_int_equal(run(broker_tokenrequest, tokenrequest_config(cases[i].extra), cases[i].access, path,
				     sizeof path, &res, &err), -1);
		assert_contains(err.msg, cases[i].expect);
	}
	config_write("trns", "{\"server\": \"%s\", \"ca_file\": \"%s/ca.crt\", \"namespace\": \"../kube-system\", "
		     "\"read_service_account\": \"viewer\", \"token_file\": \"%s\"}", T.server, T.tls, T.token);
	snprintf(cfg, sizeof cfg, "%s/trns.json", T.base);
	assert_int_equal(run(broker_tokenrequest, cfg, "read", path, sizeof path, &res, &err), -1);
	assert_contains(err.msg, "not a valid name");
	/* write asked, only a read service account configured: refused, nothing sent. */
	assert_int_equal(run(broker_tokenrequest, cfg, "write", path, sizeof path, &res, &err), -1);
	config_write("trhttp", "{\"server\": \"http://localhost:1\", \"ca_file\": \"%s/ca.crt\", \"namespace\": \"ci\", "
		     "\"read_service_account\": \"viewer\", \"token_file\": \"%s\"}", T.tls, T.token);
	snprintf(cfg, sizeof cfg, "%s/trhttp.json", T.base);
	assert_int_equal(run(broker_tokenrequest, cfg, "read", path, sizeof path, &res, &err), -1);
	assert_contains(err.msg, "https:// URL");
	config_write("trw", "{\"server\": \"%s\", \"ca_file\": \"%s/ca.crt\", \"namespace\": \"ci\", "
		     "\"read_service_account\": \"viewer\", \"token_file\": \"%s\"}", T.server, T.tls, T.token);
	snprintf(cfg, sizeof cfg, "%s/trw.json", T.base);
	assert_int_equal(run(broker_tokenrequest, cfg, "write", path, sizeof path, &res, &err), -1);
	assert_contains(err.msg, "write access is not offered");
	assert_int_equal(run(broker_tokenrequest, "relative.json", "read", path, sizeof path, &res, &err), -1);
	assert_contains(err.msg, "absolute path");
	/* A manager credential readable by others is refused before anything is sent. */
	assert_int_equal(chmod(T.token, 0644), 0);
	assert_int_equal(run(broker_tokenrequest, tokenrequest_config(""), "read", path, sizeof path, &res, &err), -1);
	assert_int_equal(chmod(T.token, 0600), 0);
	assert_contains(err.msg, "no access for others");
	reqs = log_requests();
	assert_int_equal(json_array_size(reqs), 0);
	json_decref(reqs);
}

/* On the kubernetes backend: the token is bound to the sandbox's pod (spec.boundObjectRef with its
 * kind, apiVersion, name and UID); the API server's 409 for a UID that is not the pod's any more
 * (a 1.20 server's answer, recorded) is said as such; a pod of another namespace than the service
 * account's is refused before anything is sent. */
#define POD_UID "6f2c1a9e-4b1d-4c55-9a55-0d7d1c2e3f40"

static int run_bound(const char *arg, const char *access, const char *ns, char *path, size_t len,
		     struct broker_result *res, struct sb_err *err)
{
	struct broker_bound pod = { .kind = "Pod", .api_version = "v1", .ns = ns, .name = "sandbox-abc123-1",
				    .uid = POD_UID };
	struct broker_request req = { .resource = "kubernetes:staging", .access = access, .arg = arg,
				      .label = "s0123.g1", .path = path, .uid = getuid(), .gid = getgid(), .bound = &pod };

	snprintf(path, len, "%s/cred-%d.kubeconfig", T.out, T.n++);
	memset(err, 0, sizeof *err);
	return broker_tokenrequest(&req, res, err);
}

static void tokenrequest_bound_to_the_pod(void **state)
{
	struct broker_result res;
	struct sb_err err;
	char path[256];
	json_t *reqs, *body, *ref;

	(void)state;
	assert_int_equal(run_bound(tokenrequest_config(""), "write", "ci", path, sizeof path, &res, &err), 0);
	json_decref(kubeconfig_load(path));
	reqs = log_requests();
	assert_int_equal(json_array_size(reqs), 1);
	assert_string_equal(json_string_value(json_object_get(json_array_get(reqs, 0), "path")),
			    "/api/v1/namespaces/ci/serviceaccounts/deployer/token");
	body = json_loads(json_string_value(json_object_get(json_array_get(reqs, 0), "body")), 0, NULL);
	ref = json_object_get(json_object_get(body, "spec"), "boundObjectRef");
	assert_string_equal(json_string_value(json_object_get(ref, "kind")), "Pod");
	assert_string_equal(json_string_value(json_object_get(ref, "apiVersion")), "v1");
	assert_string_equal(json_string_value(json_object_get(ref, "name")), "sandbox-abc123-1");
	assert_string_equal(json_string_value(json_object_get(ref, "uid")), POD_UID);
	assert_int_equal(json_object_size(ref), 4);
	assert_int_equal(json_integer_value(json_object_get(json_object_get(body, "spec"), "expirationSeconds")), 3600);
	json_decref(body);
	json_decref(reqs);

	/* Unbound (the process and podman backends): no boundObjectRef at all. */
	assert_int_equal(truncate(T.log, 0), 0);
	assert_int_equal(run(broker_tokenrequest, tokenrequest_config(""), "read", path, sizeof path, &res, &err), 0);
	reqs = log_requests();
	body = json_loads(json_string_value(json_object_get(json_array_get(reqs, 0), "body")), 0, NULL);
	assert_null(json_object_get(json_object_get(body, "spec"), "boundObjectRef"));
	json_decref(body);
	json_decref(reqs);
}

static void tokenrequest_bound_uid_conflict(void **state)
{
	struct broker_result res;
	struct sb_err err;
	char path[256];
	json_t *reqs;

	(void)state;
	responses_set("POST /api/v1/namespaces/ci/serviceaccounts/viewer/token", 409,
		      "Operation cannot be fulfilled on Pod \"sandbox-abc123-1\": the UID in the bound object reference "
		      "(" POD_UID ") does not match the UID in record. The object might have been deleted and then recreated",
		      0);
	assert_int_equal(run_bound(tokenrequest_config(""), "read", "ci", path, sizeof path, &res, &err), -1);
	assert_contains(err.msg, "the sandbox's Pod sandbox-abc123-1 is not the one of UID " POD_UID " any more");
	assert_contains(err.msg, "409");
	assert_contains(err.msg, "does not match the UID in record");
	assert_int_equal(access(path, F_OK), -1); /* nothing written */

	/* A pod of another namespace than the service account's: refused, nothing sent. */
	unlink(T.responses);
	assert_int_equal(truncate(T.log, 0), 0);
	assert_int_equal(run_bound(tokenrequest_config(""), "read", "sandboxes", path, sizeof path, &res, &err), -1);
	assert_contains(err.msg, "must be of a service account in its namespace sandboxes, not ci");
	assert_int_equal(access(path, F_OK), -1);
	reqs = log_requests();
	assert_int_equal(json_array_size(reqs), 0);
	json_decref(reqs);
}

/* The pod's serviceAccountName: the grants' tokenrequest account at their access; two grants that
 * need two accounts are refused (a pod runs as one); other brokers need none. */
static void service_account_of_the_grants(void **state)
{
	struct sb_err err;
	char sa[254];
	json_t *resources = json_object(), *grants;

	(void)state;
	json_object_set_new(resources, "kubernetes:staging", json_sprintf("tokenrequest:%s", tokenrequest_config("")));
	json_object_set_new(resources, "kubernetes:prod", json_sprintf("rancher:%s", rancher_config("")));
	json_object_set_new(resources, "kubernetes:other", json_sprintf("tokenrequest:%s",
		config_write("other", "{\"server\": \"%s\", \"ca_file\": \"%s/ca.crt\", \"namespace\": \"ci\", "
			     "\"read_service_account\": \"viewer\", \"token_file\": \"%s\"}", T.server, T.tls, T.token)));
	grants = json_pack("{s:s}", "kubernetes:prod", "read");
	assert_int_equal(snapshot_service_account(grants, resources, sa, sizeof sa, &err), 0);
	assert_string_equal(sa, "");
	json_object_set_new(grants, "kubernetes:staging", json_string("write"));
	assert_int_equal(snapshot_service_account(grants, resources, sa, sizeof sa, &err), 0);
	assert_string_equal(sa, "deployer");
	json_object_set_new(grants, "kubernetes:staging", json_string("read"));
	json_object_set_new(grants, "kubernetes:other", json_string("read"));
	assert_int_equal(snapshot_service_account(grants, resources, sa, sizeof sa, &err), 0);
	assert_string_equal(sa, "viewer"); /* the same account twice */
	json_object_set_new(grants, "kubernetes:staging", json_string("write"));
	assert_int_equal(snapshot_service_account(grants, resources, sa, sizeof sa, &err), -1);
	assert_contains(err.msg, "need the service accounts");
	assert_contains(err.msg, "ci/deployer");
	assert_contains(err.msg, "ci/viewer");
	json_decref(grants);
	json_decref(resources);
}

/* ---- rancher ---- */

static void rancher_read(void **state)
{
	struct broker_result res;
	struct sb_err err;
	char path[256], server[128];
	int64_t before = clock_real_ms();
	json_t *k, *reqs, *r, *body;

	(void)state;
	assert_int_equal(run(broker_rancher, rancher_config(""), "read", path, sizeof path, &res, &err), 0);
	k = kubeconfig_load(path);
	snprintf(server, sizeof server, "%s/k8s/clusters/c-m-abc12", T.server);
	assert_string_equal(kube_get(k, "clusters", "cluster", "server"), server);
	assert_contains(kube_get(k, "users", "user", "token"), ":rancher-secret-");
	assert_non_null(kube_get(k, "clusters", "cluster", "certificate-authority-data"));
	json_decref(k);
	assert_true(res.expires_ms >= before + 890 * 1000LL && res.expires_ms <= clock_real_ms() + 901 * 1000LL);
	assert_contains(res.revoke_id, "token-");

	reqs = log_requests();
	assert_int_equal(json_array_size(reqs), 1);
	r = json_array_get(reqs, 0);
	assert_string_equal(json_string_value(json_object_get(r, "method")), "POST");
	assert_string_equal(json_string_value(json_object_get(r, "path")), "/v3/tokens");
	assert_string_equal(json_string_value(json_object_get(json_object_get(r, "headers"), "authorization")),
			    "Bearer " MANAGER_TOKEN);
	body = json_loads(json_string_value(json_object_get(r, "body")), 0, NULL);
	assert_string_equal(json_string_value(json_object_get(body, "type")), "token");
	assert_int_equal(json_integer_value(json_object_get(body, "ttl")), 900 * 1000); /* milliseconds */
	assert_string_equal(json_string_value(json_object_get(body, "clusterId")), "c-m-abc12");
	assert_contains(json_string_value(json_object_get(body, "description")), "infra-sandbox s0123.g1");
	json_decref(body);
	json_decref(reqs);

	/* Revocation: DELETE /v3/tokens/<id> with the same access's credential. */
	assert_int_equal(broker_rancher_revoke("kubernetes:staging", rancher_config(""), "read", res.revoke_id, &err), 0);
	reqs = log_requests();
	r = json_array_get(reqs, 1);
	assert_string_equal(json_string_value(json_object_get(r, "method")), "DELETE");
	assert_contains(json_string_value(json_object_get(r, "path")), "/v3/tokens/token-");
	json_decref(reqs);
}

static void rancher_write_refused_and_forbidden(void **state)
{
	struct broker_result res;
	struct sb_err err;
	char path[256], extra[300];
	json_t *reqs;

	(void)state;
	/* No write_token_file: write access is not offered, and nothing is sent. */
	assert_int_equal(run(broker_rancher, rancher_config(""), "write", path, sizeof path, &res, &err), -1);
	assert_contains(err.msg, "write access is not offered");
	reqs = log_requests();
	assert_int_equal(json_array_size(reqs), 0);
	json_decref(reqs);

	snprintf(extra, sizeof extra, ", \"write_token_file\": \"%s\"", T.token);
	json_t *o = json_pack("{s:{s:i, s:{s:s, s:s, s:s, s:i}}}", "POST /v3/tokens", "status", 403, "body", "type",
			      "error", "code", "Forbidden", "message", "clusters.management.cattle.io \"c-m-abc12\" is forbidden",
			      "status", 403);
	assert_int_equal(json_dump_file(o, T.responses, 0), 0);
	json_decref(o);
	assert_int_equal(run(broker_rancher, rancher_config(extra), "write", path, sizeof path, &res, &err), -1);
	assert_contains(err.msg, "kubernetes:staging");
	assert_contains(err.msg, "the Rancher API");
	assert_contains(err.msg, "403");
	assert_contains(err.msg, "\"c-m-abc12\" is forbidden");
	assert_int_equal(access(path, F_OK), -1);

	/* A ttl under the minimum is refused. */
	assert_int_equal(run(broker_rancher, config_write("rttl", "{\"server\": \"%s\", \"cluster_id\": \"c1\", "
							  "\"read_token_file\": \"%s\", \"ttl_seconds\": 60}", T.server, T.token),
			     "read", path, sizeof path, &res, &err), -1);
	assert_contains(err.msg, "ttl_seconds");
}

/* ---- dispatch through snapshot_make ---- */

/* A fresh private directory for session tag, and its three grants: kubernetes:staging by
 * tokenrequest (write), kubernetes:prod by rancher (read), kubernetes:lab a file (read). */
static void three_grants(const char *tag, char *private_dir, size_t len, json_t **resources, json_t **grants)
{
	char file_cred[200];

	snprintf(private_dir, len, "%s/sandboxes-%s.g%d", T.base, tag, T.n++);
	assert_int_equal(mkdir(private_dir, 0700), 0);
	snprintf(file_cred, sizeof file_cred, "%s/file.kubeconfig", T.base);
	write_text(file_cred, "file-credential\n", 0600);
	*resources = json_object();
	json_object_set_new(*resources, "kubernetes:staging", json_sprintf("tokenrequest:%s", tokenrequest_config("")));
	json_object_set_new(*resources, "kubernetes:prod", json_sprintf("rancher:%s", rancher_config("")));
	json_object_set_new(*resources, "kubernetes:lab", json_sprintf("file:%s", file_cred));
	*grants = json_pack("{s:s, s:s, s:s}", "kubernetes:staging", "write", "kubernetes:prod", "read", "kubernetes:lab",
			    "read");
}

static void snapshot_with_brokers(void **state)
{
	struct snapshot snap;
	struct sb_err err;
	char private_dir[200], revoke[260];
	json_t *resources, *grants, *reqs, *list;
	int64_t before = clock_real_ms();

	(void)state;
	three_grants("s0123", private_dir, sizeof private_dir, &resources, &grants);
	assert_int_equal(snapshot_make(private_dir, grants, resources, getuid(), getgid(), NULL, &snap, &err), 0);
	assert_contains(snap.kubeconfig, "/credentials/kubernetes-staging.kubeconfig");
	assert_contains(snap.kubeconfig, "/credentials/kubernetes-prod.kubeconfig");
	assert_contains(snap.kubeconfig, "/credentials/kubernetes-lab.kubeconfig");
	/* The earliest expiry: the Rancher token's 900 s, not the TokenRequest's hour. */
	assert_true(snap.expires_ms >= before + 890 * 1000LL && snap.expires_ms <= clock_real_ms() + 901 * 1000LL);
	snprintf(revoke, sizeof revoke, "%s/credentials.revoke", private_dir);
	list = json_load_file(revoke, 0, NULL);
	assert_int_equal(json_array_size(list), 1);
	assert_string_equal(json_string_value(json_object_get(json_array_get(list, 0), "resource")), "kubernetes:prod");
	json_decref(list);
	reqs = log_requests();
	assert_int_equal(json_array_size(reqs), 2);
	json_decref(reqs);

	/* Released once the sandbox is gone: the token is deleted and the list removed. */
	assert_int_equal(snapshot_release(private_dir, &err), 0);
	assert_int_equal(access(revoke, F_OK), -1);
	reqs = log_requests();
	assert_int_equal(json_array_size(reqs), 3);
	assert_string_equal(json_string_value(json_object_get(json_array_get(reqs, 2), "method")), "DELETE");
	json_decref(reqs);

	/* A failing grant fails the snapshot, and what was already made is revoked. */
	snprintf(private_dir, sizeof private_dir, "%s/sandboxes-s0123.g%d", T.base, T.n++);
	assert_int_equal(mkdir(private_dir, 0700), 0);
	responses_set("POST /api/v1/namespaces/ci/serviceaccounts/deployer/token", 500, "etcdserver: request timed out", 0);
	assert_int_equal(truncate(T.log, 0), 0);
	assert_int_equal(snapshot_make(private_dir, grants, resources, getuid(), getgid(), NULL, &snap, &err), -1);
	assert_contains(err.msg, "500");
	assert_contains(err.msg, "etcdserver: request timed out");
	reqs = log_requests();
	/* Object order is the grants' (sorted by jansson's hash, not by us): if the Rancher token was
	 * made before the failure, it was deleted again. */
	if (json_array_size(reqs) == 3)
		assert_string_equal(json_string_value(json_object_get(json_array_get(reqs, 2), "method")), "DELETE");
	json_decref(reqs);
	assert_int_equal(access(revoke, F_OK), -1);

	/* An unknown broker is refused with the ones that exist. */
	json_object_set_new(resources, "kubernetes:lab", json_string("vault:/x"));
	json_object_del(grants, "kubernetes:staging");
	json_object_del(grants, "kubernetes:prod");
	snprintf(private_dir, sizeof private_dir, "%s/sandboxes-s0123.g%d", T.base, T.n++);
	assert_int_equal(mkdir(private_dir, 0700), 0);
	assert_int_equal(snapshot_make(private_dir, grants, resources, getuid(), getgid(), NULL, &snap, &err), -1);
	assert_contains(err.msg, "unknown broker 'vault'");
	json_decref(grants);
	json_decref(resources);
}

/* Under the network policy `proxy`: the brokers' kubeconfigs name the sandbox's loopback edge and
 * hold no credential at all (no token, no CA); the token, the API server and its CA stay with the
 * manager, and are wiped when the snapshot's edges are freed. A file: grant stays a file. */
static void snapshot_at_the_edge(void **state)
{
	struct snapshot snap;
	struct sb_err err;
	char private_dir[200], path[300], text[8192];
	json_t *resources, *grants, *k;
	struct snapshot_edge *staging = NULL, *prod = NULL;
	FILE *f;
	size_t n;

	(void)state;
	three_grants("s0124", private_dir, sizeof private_dir, &resources, &grants);
	assert_int_equal(snapshot_make_edge(private_dir, grants, resources, getuid(), getgid(), &snap, &err), 0);
	assert_int_equal(snap.edges_n, 2);
	for (size_t i = 0; i < snap.edges_n; i++) {
		struct snapshot_edge *e = &snap.edges[i];
		char want[64];

		if (strcmp(e->resource, "kubernetes:staging") == 0)
			staging = e;
		else if (strcmp(e->resource, "kubernetes:prod") == 0)
			prod = e;
		/* the port is the grant's place: 3129, 3130 (3128 is the proxy's) */
		assert_int_equal(e->cred.port, SNAPSHOT_EDGE_PORT + i);
		snprintf(path, sizeof path, "%s/credentials/%s.kubeconfig", private_dir,
			 e == staging ? "kubernetes-staging" : "kubernetes-prod");
		f = fopen(path, "r");
		assert_non_null(f);
		n = fread(text, 1, sizeof text - 1, f);
		fclose(f);
		text[n] = '\0';
		/* nothing to present and nothing to trust: the file names the edge only */
		assert_null(strstr(text, "token"));
		assert_null(strstr(text, "certificate-authority"));
		assert_null(strstr(text, e->cred.token));
		k = json_loads(text, 0, NULL);
		snprintf(want, sizeof want, "http://127.0.0.1:%u", e->cred.port);
		assert_string_equal(kube_get(k, "clusters", "cluster", "server"), want);
		json_decref(k);
	}
	assert_non_null(staging);
	assert_non_null(prod);
	assert_string_equal(staging->access, "write");
	assert_string_equal(prod->access, "read");
	assert_contains(staging->cred.token, "k8s-token-deployer-");
	assert_string_equal(staging->cred.server, T.server);
	assert_contains(staging->cred.ca_file, "/ca.crt");
	assert_contains(prod->cred.server, "/k8s/clusters/");
	/* the file grant is the operator's file, as it was */
	assert_contains(snap.kubeconfig, "/credentials/kubernetes-lab.kubeconfig");
	snapshot_edges_free(&snap);
	assert_null(snap.edges);
	assert_int_equal(snap.edges_n, 0);
	assert_int_equal(snapshot_release(private_dir, &err), 0);

	/* A failing grant leaves no edge behind. */
	snprintf(private_dir, sizeof private_dir, "%s/sandboxes-s0124.g%d", T.base, T.n++);
	assert_int_equal(mkdir(private_dir, 0700), 0);
	responses_set("POST /api/v1/namespaces/ci/serviceaccounts/deployer/token", 500, "etcdserver: request timed out", 0);
	assert_int_equal(snapshot_make_edge(private_dir, grants, resources, getuid(), getgid(), &snap, &err), -1);
	assert_null(snap.edges);
	json_decref(grants);
	json_decref(resources);
}

static void time_parse(void **state)
{
	int64_t ms;

	(void)state;
	assert_int_equal(broker_time_parse("1970-01-01T00:10:00Z", &ms), 0);
	assert_int_equal(ms, 600000);
	assert_int_equal(broker_time_parse("2024-05-01T12:00:00.123456Z", &ms), 0);
	assert_int_equal(ms, 1714564800000LL);
	assert_int_equal(broker_time_parse("2024-05-01T14:00:00+02:00", &ms), 0);
	assert_int_equal(ms, 1714564800000LL);
	assert_int_equal(broker_time_parse("2024-05-01 12:00:00", &ms), -1);
	assert_int_equal(broker_time_parse("2024-05-01T12:00:00Zjunk", &ms), -1);
	assert_int_equal(broker_time_parse(NULL, &ms), -1);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(time_parse),
		cmocka_unit_test_setup(tokenrequest_read_and_write, test_setup),
		cmocka_unit_test_setup(tokenrequest_forbidden, test_setup),
		cmocka_unit_test_setup(tokenrequest_unauthorized, test_setup),
		cmocka_unit_test_setup(tokenrequest_untrusted_server, test_setup),
		cmocka_unit_test_setup(tokenrequest_timeout, test_setup),
		cmocka_unit_test_setup(tokenrequest_bad_configs, test_setup),
		cmocka_unit_test_setup(tokenrequest_bound_to_the_pod, test_setup),
		cmocka_unit_test_setup(tokenrequest_bound_uid_conflict, test_setup),
		cmocka_unit_test_setup(service_account_of_the_grants, test_setup),
		cmocka_unit_test_setup(rancher_read, test_setup),
		cmocka_unit_test_setup(rancher_write_refused_and_forbidden, test_setup),
		cmocka_unit_test_setup(snapshot_with_brokers, test_setup),
		cmocka_unit_test_setup(snapshot_at_the_edge, test_setup),
	};

	return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
