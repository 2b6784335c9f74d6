/* Unit tests for manager/core/principals.c: the principals file (every key checked, unknown ones
 * and bad names refused, an operator drives every identity, anyone else only theirs) and the deny
 * list (serials in any spelling, principals, bad lines refused, reloaded when the file changes, a
 * file gone bad denies everyone). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>
#include <jansson.h>

#include "ca.h"
#include "principals.h"
#include "testutil.h"
#include "tls.h"

static int parse(const char *text, struct principals *ps, struct sb_err *err)
{
	json_t *obj = json_loads(text, JSON_REJECT_DUPLICATES, NULL);
	int rc;

	assert_non_null(obj);
	sb_err_clear(err);
	rc = principals_parse(obj, ps, err);
	json_decref(obj);
	return rc;
}

static void test_principals_map(void **state)
{
	struct principals ps;
	struct sb_err err;
	const struct principal *a, *ops;

	(void)state;
	assert_int_equal(parse("{\"alice-ci\": {\"identities\": [\"alice\", \"team\"], \"max_connections\": 3},"
			       " \"ops\": {\"operator\": true}, \"nobody\": {}}", &ps, &err), 0);
	assert_int_equal(ps.n, 3);
	a = principals_find(&ps, "alice-ci");
	ops = principals_find(&ps, "ops");
	assert_non_null(a);
	assert_non_null(ops);
	assert_null(principals_find(&ps, "alice"));
	assert_null(principals_find(&ps, NULL));
	assert_true(principal_may_drive(a, "alice"));
	assert_true(principal_may_drive(a, "team"));
	assert_false(principal_may_drive(a, "bob"));
	assert_false(principal_may_drive(a, NULL));
	assert_false(a->operator);
	assert_int_equal(a->max_conns, 3);
	assert_true(principal_may_drive(ops, "bob"));
	/* repositories: https:// alone by default; listed prefixes, never through ".." */
	assert_true(principal_may_use_repo(a, "https://git.example/r.git"));
	assert_false(principal_may_use_repo(a, "/srv/git/r"));
	assert_false(principal_may_use_repo(a, "file:///srv/git/r"));
	assert_false(principal_may_use_repo(a, NULL));
	assert_true(principal_may_use_repo(ops, "/anything"));
	assert_false(principal_may_grant(a, "k8s"));
	assert_true(principal_may_grant(ops, "k8s"));
	assert_int_equal(ops->max_conns, PRINCIPAL_CONNS_DEFAULT);
	/* a principal with nothing listed drives nothing */
	assert_false(principal_may_drive(principals_find(&ps, "nobody"), "alice"));
	principals_free(&ps);
}

static void test_principals_repos_resources(void **state)
{
	struct principals ps;
	struct sb_err err;
	const struct principal *p;

	(void)state;
	assert_int_equal(parse("{\"ci\": {\"identities\": [\"alice\"], \"repos\": [\"/srv/git/\"], "
			       "\"resources\": [\"k8s-dev\"]}}", &ps, &err), 0);
	p = principals_find(&ps, "ci");
	assert_true(principal_may_use_repo(p, "/srv/git/r"));
	assert_false(principal_may_use_repo(p, "https://git.example/r.git")); /* the list replaces the default */
	assert_false(principal_may_use_repo(p, "/srv/git/../home/alice/w"));
	assert_false(principal_may_use_repo(p, "/srv/git/.."));
	assert_true(principal_may_grant(p, "k8s-dev"));
	assert_false(principal_may_grant(p, "k8s-prod"));
	principals_free(&ps);
}

static void test_principals_refused(void **state)
{
	static const char *const bad[][2] = {
		{ "{\"alice-ci\": {\"operators\": true}}", "unknown key 'operators'" },
		{ "{\"alice-ci\": {\"operator\": \"yes\"}}", "operator must be true or false" },
		{ "{\"Alice\": {}}", "must be 1 to 63 of [a-z0-9-]" },
		{ "{\"a.b\": {}}", "must be 1 to 63 of [a-z0-9-]" },
		{ "{\"a\": {\"identities\": \"alice\"}}", "identities must be a list" },
		{ "{\"a\": {\"identities\": [\"\"]}}", "identity 1 must be a name" },
		{ "{\"a\": {\"max_connections\": 0}}", "max_connections must be 1 to 256" },
		{ "{\"a\": []}", "must be an object" },
		{ "[]", "must be an object" },
		{ "{\"a\": {\"repos\": \"/srv\"}}", "repos must be a list" },
		{ "{\"a\": {\"resources\": [1]}}", "resources entry 1 must be" },
	};
	struct principals ps;
	struct sb_err err;

	(void)state;
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		assert_int_equal(parse(bad[i][0], &ps, &err), -1);
		if (strstr(err.msg, bad[i][1]) == NULL)
			fail_msg("%s: got '%s', want '%s'", bad[i][0], err.msg, bad[i][1]);
		assert_null(ps.p);
	}
}

static void write_file(const char *path, const char *text)
{
	FILE *f = fopen(path, "w");

	assert_non_null(f);
	fputs(text, f);
	fclose(f);
}

static void test_deny_list(void **state)
{
	char dir[] = "/tmp/test_principals.XXXXXX", path[64];
	struct deny_list *d;
	struct sb_err err;

	(void)state;
	assert_non_null(mkdtemp(dir));
	snprintf(path, sizeof path, "%s/deny", dir);
	write_file(path, "# revoked\n\nserial 00:5F:0A:ff  # an operator's spelling\nprincipal bob-ci\n");
	assert_int_equal(deny_list_open(path, &d, &err), 0);
	assert_true(deny_list_denies(d, "alice-ci", "5f0aff"));
	assert_true(deny_list_denies(d, "alice-ci", "005f0aff"));
	assert_false(deny_list_denies(d, "alice-ci", "5f0afe"));
	assert_true(deny_list_denies(d, "bob-ci", "01"));
	assert_false(deny_list_denies(d, "bob-ci2", "01"));
	/* a change is seen within DENY_RECHECK_MS */
	write_file(path, "principal alice-ci\n");
	usleep((DENY_RECHECK_MS + 100) * 1000);
	assert_true(deny_list_denies(d, "alice-ci", "02"));
	assert_false(deny_list_denies(d, "bob-ci", "01"));
	/* a file gone bad denies everyone until fixed, rather than forgetting a revocation */
	write_file(path, "serial xyz\n");
	usleep((DENY_RECHECK_MS + 100) * 1000);
	assert_true(deny_list_denies(d, "carol", "03"));
	unlink(path);
	usleep((DENY_RECHECK_MS + 100) * 1000);
	assert_true(deny_list_denies(d, "carol", "03"));
	write_file(path, "\n");
	usleep((DENY_RECHECK_MS + 100) * 1000);
	assert_false(deny_list_denies(d, "carol", "03"));
	deny_list_free(d);
	unlink(path);
	rmdir(dir);
}

static void test_deny_list_refused(void **state)
{
	static const char *const bad[] = { "serial\n", "serial 12g4\n", "principal Bob\n", "revoke 12\n",
					   "principal a.b\n", "serial ff00112233445566778899aabbccddeeff0011223344\n" };
	char dir[] = "/tmp/test_principals.XXXXXX", path[64];
	struct deny_list *d;
	struct sb_err err;

	(void)state;
	assert_non_null(mkdtemp(dir));
	snprintf(path, sizeof path, "%s/deny", dir);
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		write_file(path, bad[i]);
		if (deny_list_open(path, &d, &err) == 0)
			fail_msg("deny line '%s' accepted", bad[i]);
		assert_non_null(strstr(err.msg, "line 1"));
	}
	/* no file named: an empty list */
	assert_int_equal(deny_list_open("", &d, &err), 0);
	assert_false(deny_list_denies(d, "alice-ci", "01"));
	deny_list_free(d);
	unlink(path);
	rmdir(dir);
}

/* The principal a certificate of the manager's CA carries: exactly one PRINCIPAL.principal.infra-sandbox
 * name; none (the agent link's own client certificate), two, or a dotted label is no principal. */
static int principal_of(struct ca *ca, const char *dir, const char *name, const char *const *more, size_t n_more,
			char *out, size_t len)
{
	struct ca_leaf leaf = { .dns_name = name, .usage = CA_USAGE_CLIENT, .more_names = more, .n_more = n_more };
	mbedtls_x509_crt crt;
	char path[128];
	struct sb_err err;
	int rc;

	if (ca_issue_leaf(ca, &leaf, dir, "leaf", &err) < 0)
		fail_msg("%s", err.msg);
	snprintf(path, sizeof path, "%s/leaf.crt", dir);
	mbedtls_x509_crt_init(&crt);
	assert_int_equal(mbedtls_x509_crt_parse_file(&crt, path), 0);
	rc = tls_cert_principal(&crt, ".principal.infra-sandbox", out, len);
	mbedtls_x509_crt_free(&crt);
	return rc;
}

static void test_cert_principal(void **state)
{
	static const char *const two[] = { "bob-ci.principal.infra-sandbox" };
	static const char *const other[] = { "127.0.0.1", "alice-ci.principal.infra-sandbox" };
	char dir[] = "/tmp/test_principals.XXXXXX", cadir[64], got[TLS_PRINCIPAL_MAX + 1];
	struct ca *ca;
	struct sb_err err;

	(void)state;
	assert_non_null(mkdtemp(dir));
	snprintf(cadir, sizeof cadir, "%s/ca", dir);
	assert_int_equal(ca_open(cadir, &ca, &err), 0);
	assert_int_equal(principal_of(ca, dir, "alice-ci.principal.infra-sandbox", NULL, 0, got, sizeof got), 1);
	assert_string_equal(got, "alice-ci");
	/* a later name of several (the SAN list's encoding of more_names) */
	assert_int_equal(principal_of(ca, dir, "host.example", other, 2, got, sizeof got), 1);
	assert_string_equal(got, "alice-ci");
	assert_int_equal(principal_of(ca, dir, CA_MANAGER_NAME, NULL, 0, got, sizeof got), 0);
	assert_string_equal(got, "");
	assert_int_equal(principal_of(ca, dir, "alice-ci.principal.infra-sandbox.evil", NULL, 0, got, sizeof got), 0);
	assert_int_equal(principal_of(ca, dir, "a.b.principal.infra-sandbox", NULL, 0, got, sizeof got), -1);
	assert_int_equal(principal_of(ca, dir, "alice-ci.principal.infra-sandbox", two, 1, got, sizeof got), -1);
	ca_free(ca);
	assert_int_equal(test_rmtree(dir), 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_principals_map),
		cmocka_unit_test(test_principals_repos_resources),
		cmocka_unit_test(test_principals_refused),
		cmocka_unit_test(test_deny_list),
		cmocka_unit_test(test_deny_list_refused),
		cmocka_unit_test(test_cert_principal),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
