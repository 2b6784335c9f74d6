/* Unit tests for manager/agentlink/ca.c: the CA is created once (key 0600) and reloaded unchanged; leaf
 * certificates verify against it and carry their subjectAltName and role; unsafe files refused. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>
#include <dirent.h>
#include <errno.h>
#include <ftw.h>
#include <sys/stat.h>

#include <mbedtls/oid.h>
#include <mbedtls/pk.h>
#include <mbedtls/x509_crt.h>

#include "ca.h"
#include "tls.h"
#include "testutil.h"

struct fixture {
	char base[64];
	char ca_dir[128];
	char out_dir[128];
};

static int setup(void **state)
{
	struct fixture *f = calloc(1, sizeof *f);

	assert_non_null(f);
	snprintf(f->base, sizeof f->base, "/tmp/test_ca.XXXXXX");
	assert_non_null(mkdtemp(f->base));
	snprintf(f->ca_dir, sizeof f->ca_dir, "%s/private-state", f->base);  /* created by ca_open */
	snprintf(f->out_dir, sizeof f->out_dir, "%s/out", f->base);
	assert_int_equal(mkdir(f->out_dir, 0700), 0);
	*state = f;
	return 0;
}

static int teardown(void **state)
{
	struct fixture *f = *state;

	test_rmtree(f->base);
	free(f);
	return 0;
}

static void path_join(char *out, size_t len, const char *dir, const char *name)
{
	assert_true((size_t)snprintf(out, len, "%s/%s", dir, name) < len);
}

static mode_t file_mode(const char *dir, const char *name)
{
	char p[256];
	struct stat st;

	path_join(p, sizeof p, dir, name);
	assert_int_equal(lstat(p, &st), 0);
	assert_true(S_ISREG(st.st_mode));
	return st.st_mode & 07777;
}

static void crt_load(mbedtls_x509_crt *crt, const char *dir, const char *name)
{
	char p[256];

	path_join(p, sizeof p, dir, name);
	mbedtls_x509_crt_init(crt);
	assert_int_equal(mbedtls_x509_crt_parse_file(crt, p), 0);
}

static uint32_t crt_verify(mbedtls_x509_crt *leaf, const struct ca *ca)
{
	uint32_t flags = 0;

	mbedtls_x509_crt_verify(leaf, (mbedtls_x509_crt *)ca_cert(ca), NULL, NULL, &flags, NULL, NULL);
	return flags;
}

static void test_created_once_and_reloaded(void **state)
{
	struct fixture *f = *state;
	struct ca *first, *second;
	struct sb_err err;
	struct stat st;

	assert_int_equal(ca_open(f->ca_dir, &first, &err), 0);
	assert_int_equal(stat(f->ca_dir, &st), 0);
	assert_int_equal(st.st_mode & 07777, 0700);
	assert_int_equal(file_mode(f->ca_dir, CA_KEY_FILE), 0600);
	assert_true(ca_cert(first)->ca_istrue);
	assert_int_equal(ca_cert(first)->max_pathlen, 1);  /* mbedtls stores pathlen + 1 */
	assert_true(mbedtls_x509_crt_check_key_usage(ca_cert(first), MBEDTLS_X509_KU_KEY_CERT_SIGN) == 0);
	assert_int_equal(mbedtls_pk_ec(ca_cert(first)->pk)->grp.id, MBEDTLS_ECP_DP_SECP256R1);

	/* Second start: the same CA, byte for byte, not a new one. */
	assert_int_equal(ca_open(f->ca_dir, &second, &err), 0);
	assert_int_equal(ca_cert(first)->raw.len, ca_cert(second)->raw.len);
	assert_memory_equal(ca_cert(first)->raw.p, ca_cert(second)->raw.p, ca_cert(first)->raw.len);
	assert_int_equal(file_mode(f->ca_dir, CA_KEY_FILE), 0600);
	ca_free(first);
	ca_free(second);
}

static void test_leaf_verifies_and_carries_san(void **state)
{
	struct fixture *f = *state;
	struct ca_leaf leaf = { .usage = CA_USAGE_SERVER };
	mbedtls_x509_crt crt;
	mbedtls_pk_context key;
	char name[TLS_NAME_MAX + 1], keyp[256];
	struct ca *ca;
	struct sb_err err;

	assert_int_equal(ca_open(f->ca_dir, &ca, &err), 0);
	assert_int_equal(ca_format_sandbox_name(name, sizeof name, "s1", 3, &err), 0);
	assert_string_equal(name, "sandbox-s1.g3.agent");
	leaf.dns_name = name;
	assert_int_equal(ca_issue_leaf(ca, &leaf, f->out_dir, "agent", &err), 0);
	assert_int_equal(file_mode(f->out_dir, "agent.key"), 0600);

	crt_load(&crt, f->out_dir, "agent.crt");
	assert_int_equal(crt_verify(&crt, ca), 0);
	assert_true(tls_cert_has_dns_name(&crt, "sandbox-s1.g3.agent"));
	assert_false(tls_cert_has_dns_name(&crt, "sandbox-s1.g4.agent"));
	assert_false(tls_cert_has_dns_name(&crt, "sandbox-s1.g3.agent.evil"));
	assert_false(crt.ca_istrue);
	/* The role is in the certificate: a server certificate cannot act as a client. */
	assert_int_equal(mbedtls_x509_crt_check_extended_key_usage(&crt, MBEDTLS_OID_SERVER_AUTH,
								   MBEDTLS_OID_SIZE(MBEDTLS_OID_SERVER_AUTH)), 0);
	assert_int_not_equal(mbedtls_x509_crt_check_extended_key_usage(&crt, MBEDTLS_OID_CLIENT_AUTH,
								       MBEDTLS_OID_SIZE(MBEDTLS_OID_CLIENT_AUTH)), 0);
	assert_int_equal(mbedtls_x509_crt_check_key_usage(&crt, MBEDTLS_X509_KU_DIGITAL_SIGNATURE), 0);
	/* The written key belongs to the certificate. */
	path_join(keyp, sizeof keyp, f->out_dir, "agent.key");
	mbedtls_pk_init(&key);
	assert_int_equal(mbedtls_pk_parse_keyfile(&key, keyp, NULL), 0);
	assert_int_equal(mbedtls_pk_check_pair(&crt.pk, &key), 0);
	mbedtls_pk_free(&key);
	mbedtls_x509_crt_free(&crt);

	/* The manager's client certificate. */
	leaf.dns_name = CA_MANAGER_NAME;
	leaf.usage = CA_USAGE_CLIENT;
	assert_int_equal(ca_issue_leaf(ca, &leaf, f->out_dir, "manager", &err), 0);
	crt_load(&crt, f->out_dir, "manager.crt");
	assert_int_equal(crt_verify(&crt, ca), 0);
	assert_true(tls_cert_has_dns_name(&crt, CA_MANAGER_NAME));
	assert_int_equal(mbedtls_x509_crt_check_extended_key_usage(&crt, MBEDTLS_OID_CLIENT_AUTH,
								   MBEDTLS_OID_SIZE(MBEDTLS_OID_CLIENT_AUTH)), 0);
	mbedtls_x509_crt_free(&crt);
	ca_free(ca);
}

static void test_leaf_validity_and_other_ca(void **state)
{
	struct fixture *f = *state;
	struct ca_leaf leaf = { .dns_name = CA_MANAGER_NAME, .usage = CA_USAGE_CLIENT };
	char other_dir[160];
	mbedtls_x509_crt crt;
	struct ca *ca, *other;
	struct sb_err err;
	time_t now = time(NULL);

	assert_int_equal(ca_open(f->ca_dir, &ca, &err), 0);
	/* Expired: the caller sets both ends, as tests of refusal need. */
	leaf.not_before = now - 2 * 86400;
	leaf.not_after = now - 86400;
	assert_int_equal(ca_issue_leaf(ca, &leaf, f->out_dir, "expired", &err), 0);
	crt_load(&crt, f->out_dir, "expired.crt");
	assert_true(crt_verify(&crt, ca) & MBEDTLS_X509_BADCERT_EXPIRED);
	mbedtls_x509_crt_free(&crt);
	/* Not yet valid. */
	leaf.not_before = now + 86400;
	leaf.not_after = now + 2 * 86400;
	assert_int_equal(ca_issue_leaf(ca, &leaf, f->out_dir, "future", &err), 0);
	crt_load(&crt, f->out_dir, "future.crt");
	assert_true(crt_verify(&crt, ca) & MBEDTLS_X509_BADCERT_FUTURE);
	mbedtls_x509_crt_free(&crt);
	/* Backwards validity is refused outright. */
	leaf.not_before = now;
	leaf.not_after = now - 1;
	assert_int_equal(ca_issue_leaf(ca, &leaf, f->out_dir, "backwards", &err), -1);
	assert_non_null(strstr(err.msg, "validity ends before it begins"));

	/* A leaf of another CA does not verify against ours. */
	snprintf(other_dir, sizeof other_dir, "%s/other-ca", f->base);
	assert_int_equal(ca_open(other_dir, &other, &err), 0);
	leaf.not_before = leaf.not_after = 0;
	assert_int_equal(ca_issue_leaf(other, &leaf, f->out_dir, "foreign", &err), 0);
	crt_load(&crt, f->out_dir, "foreign.crt");
	assert_true(crt_verify(&crt, ca) & MBEDTLS_X509_BADCERT_NOT_TRUSTED);
	assert_int_equal(crt_verify(&crt, other), 0);
	mbedtls_x509_crt_free(&crt);
	ca_free(other);
	ca_free(ca);
}

static void test_reissue_replaces_without_leftovers(void **state)
{
	struct fixture *f = *state;
	struct ca_leaf leaf = { .dns_name = "sandbox-s2.g1.agent", .usage = CA_USAGE_SERVER };
	mbedtls_x509_crt a, b;
	struct dirent *e;
	struct ca *ca;
	struct sb_err err;
	DIR *d;

	assert_int_equal(ca_open(f->ca_dir, &ca, &err), 0);
	assert_int_equal(ca_issue_leaf(ca, &leaf, f->out_dir, "agent", &err), 0);
	crt_load(&a, f->out_dir, "agent.crt");
	leaf.dns_name = "sandbox-s2.g2.agent";
	assert_int_equal(ca_issue_leaf(ca, &leaf, f->out_dir, "agent", &err), 0);
	crt_load(&b, f->out_dir, "agent.crt");
	assert_true(tls_cert_has_dns_name(&b, "sandbox-s2.g2.agent"));
	assert_false(a.raw.len == b.raw.len && memcmp(a.raw.p, b.raw.p, a.raw.len) == 0);
	assert_int_equal(file_mode(f->out_dir, "agent.key"), 0600);
	mbedtls_x509_crt_free(&a);
	mbedtls_x509_crt_free(&b);

	/* No temporary file is left behind. */
	d = opendir(f->out_dir);
	assert_non_null(d);
	while ((e = readdir(d)) != NULL)
		assert_false(strstr(e->d_name, ".tmp") != NULL);
	closedir(d);

	/* The CA certificate for a sandbox: the same bytes as the CA's own file, no key. */
	assert_int_equal(ca_write_cert(ca, f->out_dir, "ca.crt", &err), 0);
	crt_load(&a, f->out_dir, "ca.crt");
	assert_int_equal(a.raw.len, ca_cert(ca)->raw.len);
	assert_memory_equal(a.raw.p, ca_cert(ca)->raw.p, a.raw.len);
	mbedtls_x509_crt_free(&a);
	ca_free(ca);
}

/* A generation's files, unsynced (private_dir.c): a planted link at a file's name is replaced, never
 * followed; a stale file is replaced; the key is 0600 and belongs to the certificate; ca.crt is the
 * CA's. */
static void test_unsynced_replaces_never_follows(void **state)
{
	struct fixture *f = *state;
	struct ca_leaf leaf = { .dns_name = "sandbox-s3.g1.agent", .usage = CA_USAGE_SERVER, .unsynced = true };
	char target[256], keyp[256], linkp[256], text[8] = { 0 };
	mbedtls_x509_crt crt;
	mbedtls_pk_context key;
	struct ca *ca;
	struct sb_err err;
	struct stat st;
	FILE *fp;

	assert_int_equal(ca_open(f->ca_dir, &ca, &err), 0);
	path_join(target, sizeof target, f->base, "target");
	fp = fopen(target, "w");
	assert_non_null(fp);
	fputs("keep", fp);
	fclose(fp);
	path_join(linkp, sizeof linkp, f->out_dir, "agent.key");
	assert_int_equal(symlink(target, linkp), 0);
	path_join(linkp, sizeof linkp, f->out_dir, "ca.crt");
	assert_int_equal(symlink(target, linkp), 0);
	path_join(linkp, sizeof linkp, f->out_dir, "agent.crt");
	fp = fopen(linkp, "w");
	assert_non_null(fp);
	fputs("stale", fp);
	fclose(fp);

	assert_int_equal(ca_issue_leaf(ca, &leaf, f->out_dir, "agent", &err), 0);
	assert_int_equal(ca_write_cert_unsynced(ca, f->out_dir, "ca.crt", &err), 0);
	/* The link's target is untouched; the names are regular files now. */
	fp = fopen(target, "r");
	assert_non_null(fp);
	assert_non_null(fgets(text, sizeof text, fp));
	fclose(fp);
	assert_string_equal(text, "keep");
	assert_int_equal(lstat(target, &st), 0);
	assert_int_equal(file_mode(f->out_dir, "agent.key"), 0600);
	assert_int_equal(file_mode(f->out_dir, "agent.crt"), 0644);
	assert_int_equal(file_mode(f->out_dir, "ca.crt"), 0644);

	crt_load(&crt, f->out_dir, "agent.crt");
	assert_int_equal(crt_verify(&crt, ca), 0);
	assert_true(tls_cert_has_dns_name(&crt, "sandbox-s3.g1.agent"));
	path_join(keyp, sizeof keyp, f->out_dir, "agent.key");
	mbedtls_pk_init(&key);
	assert_int_equal(mbedtls_pk_parse_keyfile(&key, keyp, NULL), 0);
	assert_int_equal(mbedtls_pk_check_pair(&crt.pk, &key), 0);
	mbedtls_pk_free(&key);
	mbedtls_x509_crt_free(&crt);
	crt_load(&crt, f->out_dir, "ca.crt");
	assert_int_equal(crt.raw.len, ca_cert(ca)->raw.len);
	assert_memory_equal(crt.raw.p, ca_cert(ca)->raw.p, crt.raw.len);
	mbedtls_x509_crt_free(&crt);
	ca_free(ca);
}

static void test_unsafe_state_refused(void **state)
{
	struct fixture *f = *state;
	char key[256], dir2[160], link_target[160];
	struct ca *ca;
	struct sb_err err;

	assert_int_equal(ca_open(f->ca_dir, &ca, &err), 0);
	ca_free(ca);
	path_join(key, sizeof key, f->ca_dir, CA_KEY_FILE);

	/* A key others could read is not used. */
	assert_int_equal(chmod(key, 0644), 0);
	assert_int_equal(ca_open(f->ca_dir, &ca, &err), -1);
	assert_null(ca);
	assert_non_null(strstr(err.msg, "is not private"));
	assert_non_null(strstr(err.msg, "mode 0644"));
	assert_int_equal(chmod(key, 0600), 0);

	/* A directory others can write to (and so swap files in) is not used. */
	assert_int_equal(chmod(f->ca_dir, 0777), 0);
	assert_int_equal(ca_open(f->ca_dir, &ca, &err), -1);
	assert_non_null(strstr(err.msg, "chmod 700"));
	assert_int_equal(chmod(f->ca_dir, 0700), 0);
	assert_int_equal(ca_open(f->ca_dir, &ca, &err), 0);
	ca_free(ca);

	/* A symlink planted where the key goes is never followed. */
	snprintf(dir2, sizeof dir2, "%s/planted", f->base);
	snprintf(link_target, sizeof link_target, "%s/elsewhere.key", f->base);
	assert_int_equal(mkdir(dir2, 0700), 0);
	path_join(key, sizeof key, dir2, CA_KEY_FILE);
	assert_int_equal(symlink(link_target, key), 0);
	assert_int_equal(ca_open(dir2, &ca, &err), -1);
	assert_int_equal(access(link_target, F_OK), -1);
}

static void test_key_without_cert_recovered(void **state)
{
	struct fixture *f = *state;
	char crt[256];
	struct ca *ca;
	struct sb_err err;

	assert_int_equal(ca_open(f->ca_dir, &ca, &err), 0);
	ca_free(ca);
	/* A crash between writing the key and the certificate: the key is kept and signed again. */
	path_join(crt, sizeof crt, f->ca_dir, CA_CERT_FILE);
	assert_int_equal(unlink(crt), 0);
	assert_int_equal(ca_open(f->ca_dir, &ca, &err), 0);
	assert_int_equal(access(crt, F_OK), 0);
	assert_true(ca_cert(ca)->ca_istrue);
	ca_free(ca);
}

static void test_names_checked(void **state)
{
	struct fixture *f = *state;
	struct ca_leaf leaf = { .dns_name = "Bad_Name", .usage = CA_USAGE_SERVER };
	char name[32];
	struct ca *ca;
	struct sb_err err;

	assert_int_equal(ca_format_sandbox_name(name, sizeof name, "abc-123", 18446744073709551615ull, &err), -1);
	assert_int_equal(err.errnum, ENAMETOOLONG);
	assert_int_equal(ca_format_sandbox_name(name, sizeof name, "abc-123", 7, &err), 0);
	assert_string_equal(name, "sandbox-abc-123.g7.agent");
	assert_int_equal(ca_format_sandbox_name(name, sizeof name, "ABC", 1, &err), -1);
	assert_int_equal(ca_format_sandbox_name(name, sizeof name, "a.b", 1, &err), -1);
	assert_int_equal(ca_format_sandbox_name(name, sizeof name, "", 1, &err), -1);

	assert_int_equal(ca_open(f->ca_dir, &ca, &err), 0);
	assert_int_equal(ca_issue_leaf(ca, &leaf, f->out_dir, "x", &err), -1);
	assert_non_null(strstr(err.msg, "not a lowercase DNS name"));
	leaf.dns_name = "ok.example";
	assert_int_equal(ca_issue_leaf(ca, &leaf, f->out_dir, "../escape", &err), -1);
	assert_int_equal(ca_issue_leaf(ca, &leaf, f->out_dir, ".hidden", &err), -1);
	assert_int_equal(ca_write_cert(ca, f->out_dir, "a/b", &err), -1);
	ca_free(ca);
}

/* A self-signed leaf: its own issuer, not a CA, trusted only as itself (an exact copy in the trust
 * list), never through the CA; the copy kept is the file's certificate; and a trust list of the
 * CA and it (ca_write_trust_unsynced) holds both, the CA first. */
static void test_self_signed_leaf_and_trust_list(void **state)
{
	struct fixture *f = *state;
	struct ca_cert_copy copy = { .len = 0 };
	struct ca_leaf leaf = { .dns_name = CA_MANAGER_NAME, .usage = CA_USAGE_CLIENT, .self_signed = true,
				.copy = &copy };
	mbedtls_x509_crt crt, trust, other;
	struct ca *ca;
	struct sb_err err;
	uint32_t flags = 0;

	assert_int_equal(ca_open(f->ca_dir, &ca, &err), 0);
	assert_int_equal(ca_issue_leaf(ca, &leaf, f->out_dir, "self", &err), 0);
	crt_load(&crt, f->out_dir, "self.crt");
	assert_int_equal(copy.len, strlen((const char *)copy.pem));
	mbedtls_x509_crt_init(&other);
	assert_int_equal(mbedtls_x509_crt_parse(&other, copy.pem, copy.len + 1), 0);
	assert_int_equal(other.raw.len, crt.raw.len);
	assert_memory_equal(other.raw.p, crt.raw.p, crt.raw.len);
	assert_int_equal(crt.issuer_raw.len, crt.subject_raw.len);
	assert_memory_equal(crt.issuer_raw.p, crt.subject_raw.p, crt.subject_raw.len);
	assert_false(crt.ca_istrue);
	assert_int_not_equal(crt_verify(&crt, ca), 0);  /* the CA did not sign it */
	assert_int_equal(mbedtls_x509_crt_verify(&crt, &other, NULL, NULL, &flags, NULL, NULL), 0);

	assert_int_equal(ca_write_trust_unsynced(ca, &copy, f->out_dir, "trust.crt", &err), 0);
	crt_load(&trust, f->out_dir, "trust.crt");
	assert_non_null(trust.next);
	assert_null(trust.next->next);
	assert_int_equal(trust.raw.len, ca_cert(ca)->raw.len);
	assert_memory_equal(trust.raw.p, ca_cert(ca)->raw.p, trust.raw.len);
	assert_int_equal(trust.next->raw.len, crt.raw.len);
	assert_memory_equal(trust.next->raw.p, crt.raw.p, crt.raw.len);
	copy.len = 0;  /* nothing kept: the CA alone */
	assert_int_equal(ca_write_trust_unsynced(ca, &copy, f->out_dir, "ca-only.crt", &err), 0);
	mbedtls_x509_crt_free(&trust);
	crt_load(&trust, f->out_dir, "ca-only.crt");
	assert_null(trust.next);
	mbedtls_x509_crt_free(&trust);
	mbedtls_x509_crt_free(&other);
	mbedtls_x509_crt_free(&crt);
	ca_free(ca);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_created_once_and_reloaded, setup, teardown),
		cmocka_unit_test_setup_teardown(test_self_signed_leaf_and_trust_list, setup, teardown),
		cmocka_unit_test_setup_teardown(test_leaf_verifies_and_carries_san, setup, teardown),
		cmocka_unit_test_setup_teardown(test_leaf_validity_and_other_ca, setup, teardown),
		cmocka_unit_test_setup_teardown(test_reissue_replaces_without_leftovers, setup, teardown),
		cmocka_unit_test_setup_teardown(test_unsynced_replaces_never_follows, setup, teardown),
		cmocka_unit_test_setup_teardown(test_unsafe_state_refused, setup, teardown),
		cmocka_unit_test_setup_teardown(test_key_without_cert_recovered, setup, teardown),
		cmocka_unit_test_setup_teardown(test_names_checked, setup, teardown),
	};
	return cmocka_run_group_tests_name("ca", tests, NULL, NULL);
}
