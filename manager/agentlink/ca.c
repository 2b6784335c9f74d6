/* The manager's CA (see ca.h): creating or loading the CA in its private directory and issuing
 * leaf certificates with mbedtls x509write. Must never write a key with looser permissions than
 * 0600, follow a symlink planted where a key goes, or load a CA key others could have read. */
#include "ca.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <mbedtls/asn1write.h>
#include <mbedtls/ecp.h>
#include <mbedtls/error.h>
#include <mbedtls/oid.h>
#include <mbedtls/pk.h>
#include <mbedtls/platform_util.h>

#include "fdio.h"
#include "names.h"
#include "pathfmt.h"
#include "random.h"
#include "tls.h"

#define CA_PEM_MAX 4096                       /* one P-256 key or certificate in PEM fits easily */
_Static_assert(CA_CERT_PEM_MAX >= CA_PEM_MAX, "a kept leaf certificate fits its copy");
#define CA_LIFETIME (10L * 365 * 24 * 60 * 60)  /* the CA outlives many manager restarts */
#define CA_SUBJECT_MAX 128

struct ca {
	mbedtls_pk_context key;
	mbedtls_x509_crt cert;
	char subject[CA_SUBJECT_MAX];  /* the issuer name of every leaf */
	unsigned char pem[CA_PEM_MAX]; /* the CA certificate as written on disk */
	size_t pem_len;
};

static const char *mbedtls_text(int ret, char *buf, size_t len)
{
	mbedtls_strerror(ret, buf, len);
	return buf;
}

/* ---------- files ---------- */

/* Create dir/name exclusively through common/fdio.c: never follows a symlink, never opens an
 * existing file, fsynced with its directory before anyone relies on it (a key lost in a crash
 * would orphan every leaf). errno contract: on -1, err->errnum is EEXIST when the file existed. */
static int file_create_at(int dirfd, const char *dir, const char *name, mode_t mode, const unsigned char *data,
			  size_t len, struct sb_err *err)
{
	return fd_file_create(dirfd, dir, name, mode, (uid_t)-1, (gid_t)-1, data, len, err);
}

/* Replace dir/name atomically: a reader sees the old file or the new one, never half of one. */
static int file_replace_at(int dirfd, const char *dir, const char *name, mode_t mode, const unsigned char *data,
			   size_t len, struct sb_err *err)
{
	char tmp[300], suffix[17];

	if (sb_random_hex(suffix, 8, err) < 0)
		return -1;
	if (path_fmt(tmp, sizeof tmp, err, ".%s.%s.tmp", name, suffix) < 0)
		return -1;
	return fd_file_replace(dirfd, dir, name, tmp, mode, data, len, err);
}

/* name in dirfd, written whole: replaced atomically and synced (file_replace_at); or, when !synced,
 * for the files of a sandbox generation (ca_leaf.unsynced), made afresh and left to the page cache. */
static int file_put_at(int dirfd, const char *dir, const char *name, mode_t mode, const unsigned char *data,
		       size_t len, bool synced, struct sb_err *err)
{
	int fd;

	if (synced)
		return file_replace_at(dirfd, dir, name, mode, data, len, err);
	if (unlinkat(dirfd, name, 0) < 0 && errno != ENOENT)
		return sb_fail_errno(err, "removing %s/%s", dir, name);
	fd = fd_file_write_new(dirfd, dir, name, mode, data, len, err);
	if (fd < 0)
		return -1;
	close(fd);
	return 0;
}

static int dir_open(const char *dir, struct sb_err *err)
{
	int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);

	if (fd < 0)
		return sb_fail_errno(err, "opening directory %s", dir);
	return fd;
}

/* The CA directory: created 0700 when missing; refused when others could swap files in it. */
static int ca_dir_open(const char *dir, struct sb_err *err)
{
	struct stat st;
	int fd;

	if (mkdir(dir, 0700) < 0 && errno != EEXIST)
		return sb_fail_errno(err, "creating CA directory %s", dir);
	fd = dir_open(dir, err);
	if (fd < 0)
		return -1;
	if (fstat(fd, &st) < 0) {
		sb_fail_errno(err, "inspecting CA directory %s", dir);
		close(fd);
		return -1;
	}
	if (st.st_uid != geteuid() || (st.st_mode & 022) != 0) {
		sb_fail(err, EPERM, "CA directory %s is not private (owner uid %u, mode %04o): it must belong to "
			"uid %u and not be writable by group or others; chmod 700 it",
			dir, (unsigned)st.st_uid, (unsigned)(st.st_mode & 07777), (unsigned)geteuid());
		close(fd);
		return -1;
	}
	return fd;
}

/* Opens dir/name for reading without following symlinks. 1: opened (*fd), 0: absent, -1: error. */
static int file_open_at(int dirfd, const char *dir, const char *name, int *fd, struct sb_err *err)
{
	*fd = openat(dirfd, name, O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NOCTTY);
	if (*fd >= 0)
		return 1;
	if (errno == ENOENT)
		return 0;
	return sb_fail_errno(err, "opening %s/%s", dir, name);
}

/* ---------- DER for the extensions mbedtls 2.28 has no writer for ---------- */

/* Adds an mbedtls_asn1_write_* result to *total; -1 when it was an error. */
static int der_add(size_t *total, int ret)
{
	if (ret < 0)
		return -1;
	*total += (size_t)ret;
	return 0;
}

/* One dNSName GeneralName, written backwards (the asn1write convention), added to *l. */
static int der_dns_name(const char *name, unsigned char **p, unsigned char *buf, size_t *l)
{
	size_t n = 0;

	/* dNSName is [2] IMPLICIT IA5String. */
	if (der_add(&n, mbedtls_asn1_write_raw_buffer(p, buf, (const unsigned char *)name, strlen(name))) < 0 ||
	    der_add(&n, mbedtls_asn1_write_len(p, buf, n)) < 0 ||
	    der_add(&n, mbedtls_asn1_write_tag(p, buf, MBEDTLS_ASN1_CONTEXT_SPECIFIC | MBEDTLS_X509_SAN_DNS_NAME)) < 0)
		return -1;
	*l += n;
	return 0;
}

/* Writes backwards from the end of buf; *der points at the result: the leaf's name, then its
 * more_names, in that order. */
static int der_san_dns(const struct ca_leaf *leaf, unsigned char *buf, size_t size, unsigned char **der, size_t *len)
{
	unsigned char *p = buf + size;
	size_t l = 0;

	/* SubjectAltName ::= SEQUENCE OF GeneralName. */
	for (size_t i = leaf->n_more; i > 0; i--)
		if (der_dns_name(leaf->more_names[i - 1], &p, buf, &l) < 0)
			return -1;
	if (der_dns_name(leaf->dns_name, &p, buf, &l) < 0 || der_add(&l, mbedtls_asn1_write_len(&p, buf, l)) < 0 ||
	    der_add(&l, mbedtls_asn1_write_tag(&p, buf, MBEDTLS_ASN1_CONSTRUCTED | MBEDTLS_ASN1_SEQUENCE)) < 0)
		return -1;
	*der = p;
	*len = l;
	return 0;
}

static int der_ext_key_usage(enum ca_usage usage, unsigned char *buf, size_t size, unsigned char **der,
			     size_t *len)
{
	const char *oid = usage == CA_USAGE_SERVER ? MBEDTLS_OID_SERVER_AUTH : MBEDTLS_OID_CLIENT_AUTH;
	size_t oid_len = usage == CA_USAGE_SERVER ? MBEDTLS_OID_SIZE(MBEDTLS_OID_SERVER_AUTH)
						  : MBEDTLS_OID_SIZE(MBEDTLS_OID_CLIENT_AUTH);
	unsigned char *p = buf + size;
	size_t l = 0;

	/* ExtKeyUsageSyntax ::= SEQUENCE OF KeyPurposeId (an OID). */
	if (der_add(&l, mbedtls_asn1_write_oid(&p, buf, oid, oid_len)) < 0 ||
	    der_add(&l, mbedtls_asn1_write_len(&p, buf, l)) < 0 ||
	    der_add(&l, mbedtls_asn1_write_tag(&p, buf, MBEDTLS_ASN1_CONSTRUCTED | MBEDTLS_ASN1_SEQUENCE)) < 0)
		return -1;
	*der = p;
	*len = l;
	return 0;
}

/* ---------- keys and certificates ---------- */

static int key_generate(mbedtls_pk_context *pk, struct sb_err *err)
{
	char text[128];
	int ret = mbedtls_pk_setup(pk, mbedtls_pk_info_from_type(MBEDTLS_PK_ECKEY));

	if (ret == 0)
		ret = mbedtls_ecp_gen_key(MBEDTLS_ECP_DP_SECP256R1, mbedtls_pk_ec(*pk), tls_rng, NULL);
	if (ret != 0)
		return sb_fail(err, 0, "generating a P-256 key: %s", mbedtls_text(ret, text, sizeof text));
	return 0;
}

/* "YYYYMMDDhhmmss" in UTC, the form mbedtls_x509write_crt_set_validity wants. */
static int time_format(time_t t, char out[16], struct sb_err *err)
{
	struct tm tm;

	if (gmtime_r(&t, &tm) == NULL || strftime(out, 16, "%Y%m%d%H%M%S", &tm) != 14)
		return sb_invalid(err, "time %lld cannot be written in a certificate", (long long)t);
	return 0;
}

/* A random positive 128-bit serial: unique without a counter to persist. */
static int serial_set(mbedtls_x509write_cert *crt, struct sb_err *err)
{
	unsigned char bytes[16];
	mbedtls_mpi serial;
	int ret;

	if (sb_random_bytes(bytes, sizeof bytes, err) < 0)
		return -1;
	bytes[0] = (unsigned char)((bytes[0] & 0x7f) | 0x40);  /* positive, and a full 16 bytes */
	mbedtls_mpi_init(&serial);
	ret = mbedtls_mpi_read_binary(&serial, bytes, sizeof bytes);
	if (ret == 0)
		ret = mbedtls_x509write_crt_set_serial(crt, &serial);
	mbedtls_mpi_free(&serial);
	if (ret != 0)
		return sb_fail(err, 0, "setting certificate serial number");
	return 0;
}

/* The fields every certificate we write shares. */
static int crt_common(mbedtls_x509write_cert *crt, mbedtls_pk_context *subject_key, mbedtls_pk_context *issuer_key,
		      const char *subject, const char *issuer, time_t not_before, time_t not_after,
		      struct sb_err *err)
{
	char from[16], until[16], text[128];
	int ret;

	if (not_before >= not_after)
		return sb_invalid(err, "certificate validity ends before it begins");
	if (time_format(not_before, from, err) < 0 || time_format(not_after, until, err) < 0 || serial_set(crt, err) < 0)
		return -1;
	mbedtls_x509write_crt_set_version(crt, MBEDTLS_X509_CRT_VERSION_3);
	mbedtls_x509write_crt_set_md_alg(crt, MBEDTLS_MD_SHA256);
	mbedtls_x509write_crt_set_subject_key(crt, subject_key);
	mbedtls_x509write_crt_set_issuer_key(crt, issuer_key);
	ret = mbedtls_x509write_crt_set_subject_name(crt, subject);
	if (ret == 0)
		ret = mbedtls_x509write_crt_set_issuer_name(crt, issuer);
	if (ret == 0)
		ret = mbedtls_x509write_crt_set_validity(crt, from, until);
	if (ret == 0)
		ret = mbedtls_x509write_crt_set_subject_key_identifier(crt);
	if (ret == 0)
		ret = mbedtls_x509write_crt_set_authority_key_identifier(crt);
	if (ret != 0)
		return sb_fail(err, 0, "writing certificate fields: %s", mbedtls_text(ret, text, sizeof text));
	return 0;
}

static int crt_pem(mbedtls_x509write_cert *crt, unsigned char *pem, size_t size, size_t *len, struct sb_err *err)
{
	char text[128];
	int ret = mbedtls_x509write_crt_pem(crt, pem, size, tls_rng, NULL);

	if (ret != 0)
		return sb_fail(err, 0, "signing certificate: %s", mbedtls_text(ret, text, sizeof text));
	*len = strlen((const char *)pem);
	return 0;
}

/* The self-signed CA certificate for ca->key, into ca->pem. */
static int ca_self_sign(struct ca *ca, struct sb_err *err)
{
	mbedtls_x509write_cert crt;
	char id[9], text[128];
	time_t now = time(NULL);
	int ret, rc;

	/* One CN only: the subject is written back as every leaf's issuer, and a single attribute
	 * survives mbedtls' name-to-string-to-name round trip unchanged. The id tells CAs apart. */
	if (sb_random_hex(id, 4, err) < 0)
		return -1;
	snprintf(ca->subject, sizeof ca->subject, "CN=infra-sandbox CA %s", id);
	mbedtls_x509write_crt_init(&crt);
	rc = crt_common(&crt, &ca->key, &ca->key, ca->subject, ca->subject, now - CA_CLOCK_SKEW, now + CA_LIFETIME, err);
	if (rc == 0) {
		/* pathlen 0: the CA signs leaves only, never another CA. */
		ret = mbedtls_x509write_crt_set_basic_constraints(&crt, 1, 0);
		if (ret == 0)
			ret = mbedtls_x509write_crt_set_key_usage(&crt, MBEDTLS_X509_KU_KEY_CERT_SIGN | MBEDTLS_X509_KU_CRL_SIGN);
		rc = ret == 0 ? 0 : sb_fail(err, 0, "writing CA extensions: %s", mbedtls_text(ret, text, sizeof text));
	}
	if (rc == 0)
		rc = crt_pem(&crt, ca->pem, sizeof ca->pem, &ca->pem_len, err);
	mbedtls_x509write_crt_free(&crt);
	return rc;
}

/* ---------- loading and creating the CA ---------- */

/* Parses the key in an open file after checking nobody else could have read or replaced it. */
static int ca_key_parse_fd(struct ca *ca, int fd, const char *dir, struct sb_err *err)
{
	unsigned char *buf;
	size_t len;
	struct stat st;
	char text[128];
	int ret;

	if (fstat(fd, &st) < 0)
		return sb_fail_errno(err, "inspecting %s/%s", dir, CA_KEY_FILE);
	if (!S_ISREG(st.st_mode) || st.st_uid != geteuid() || (st.st_mode & 077) != 0)
		return sb_fail(err, EPERM, "CA key %s/%s is not private (owner uid %u, mode %04o): it must be a file "
			       "of uid %u with mode 0600; fix it, or remove the CA directory to start a new CA",
			       dir, CA_KEY_FILE, (unsigned)st.st_uid, (unsigned)(st.st_mode & 07777),
			       (unsigned)geteuid());
	if (tls_read_fd(fd, CA_KEY_FILE, CA_PEM_MAX, &buf, &len, err) < 0)
		return -1;
	ret = mbedtls_pk_parse_key(&ca->key, buf, len, NULL, 0);
	mbedtls_platform_zeroize(buf, len);
	free(buf);
	if (ret != 0)
		return sb_fail(err, 0, "loading CA key %s/%s: %s", dir, CA_KEY_FILE, mbedtls_text(ret, text, sizeof text));
	if (!mbedtls_pk_can_do(&ca->key, MBEDTLS_PK_ECKEY) || mbedtls_pk_ec(ca->key)->grp.id != MBEDTLS_ECP_DP_SECP256R1)
		return sb_fail(err, 0, "CA key %s/%s is not an ECDSA P-256 key", dir, CA_KEY_FILE);
	return 0;
}

static int ca_cert_parse_fd(struct ca *ca, int fd, const char *dir, struct sb_err *err)
{
	unsigned char *buf;
	size_t len;
	char text[128];
	int ret;

	if (tls_read_fd(fd, CA_CERT_FILE, sizeof ca->pem - 1, &buf, &len, err) < 0)
		return -1;
	memcpy(ca->pem, buf, len);  /* len <= sizeof ca->pem, NUL included */
	ca->pem_len = len - 1;
	ret = mbedtls_x509_crt_parse(&ca->cert, buf, len);
	free(buf);
	if (ret != 0)
		return sb_fail(err, 0, "loading CA certificate %s/%s: %s", dir, CA_CERT_FILE,
			       ret > 0 ? "cannot be parsed" : mbedtls_text(ret, text, sizeof text));
	if (!ca->cert.ca_istrue || mbedtls_pk_check_pair(&ca->cert.pk, &ca->key) != 0)
		return sb_fail(err, 0, "CA certificate %s/%s is not a CA certificate for %s", dir, CA_CERT_FILE,
			       CA_KEY_FILE);
	ret = mbedtls_x509_dn_gets(ca->subject, sizeof ca->subject, &ca->cert.subject);
	if (ret < 0 || strchr(ca->subject, ',') != NULL || strchr(ca->subject, '\\') != NULL)
		return sb_fail(err, 0, "CA certificate %s/%s has a subject this CA does not write", dir, CA_CERT_FILE);
	return 0;
}

/* Writes the self-signed certificate for the loaded key (first start, or a start after a crash
 * that left the key without its certificate: the key is ours, so re-signing is safe). */
static int ca_cert_create(struct ca *ca, int dirfd, const char *dir, struct sb_err *err)
{
	char text[128];
	int ret;

	if (ca_self_sign(ca, err) < 0 ||
	    file_replace_at(dirfd, dir, CA_CERT_FILE, 0644, ca->pem, ca->pem_len, err) < 0)
		return -1;
	ret = mbedtls_x509_crt_parse(&ca->cert, ca->pem, ca->pem_len + 1);
	if (ret != 0)
		return sb_fail(err, 0, "reading back the new CA certificate: %s", mbedtls_text(ret, text, sizeof text));
	return 0;
}

static int ca_key_create(struct ca *ca, int dirfd, const char *dir, struct sb_err *err)
{
	unsigned char pem[CA_PEM_MAX];
	char text[128];
	int ret, rc;

	if (key_generate(&ca->key, err) < 0)
		return -1;
	ret = mbedtls_pk_write_key_pem(&ca->key, pem, sizeof pem);
	if (ret != 0)
		return sb_fail(err, 0, "encoding CA key: %s", mbedtls_text(ret, text, sizeof text));
	/* O_EXCL: if another manager created the CA a moment ago, fail (EEXIST) rather than overwrite. */
	rc = file_create_at(dirfd, dir, CA_KEY_FILE, 0600, pem, strlen((const char *)pem), err);
	mbedtls_platform_zeroize(pem, sizeof pem);
	return rc;
}

/* Loads the key (creating the CA when there is none), then the certificate. */
static int ca_load_or_create(struct ca *ca, int dirfd, const char *dir, struct sb_err *err)
{
	int fd, found;

	found = file_open_at(dirfd, dir, CA_KEY_FILE, &fd, err);
	if (found < 0)
		return -1;
	if (found == 0) {
		if (ca_key_create(ca, dirfd, dir, err) == 0)
			return ca_cert_create(ca, dirfd, dir, err);
		if (err->errnum != EEXIST)
			return -1;
		/* Lost a race with another manager: use the CA it created. */
		mbedtls_pk_free(&ca->key);
		mbedtls_pk_init(&ca->key);
		found = file_open_at(dirfd, dir, CA_KEY_FILE, &fd, err);
		if (found <= 0)
			return found < 0 ? -1 : sb_fail(err, ENOENT, "CA key %s/%s vanished", dir, CA_KEY_FILE);
	}
	found = ca_key_parse_fd(ca, fd, dir, err);
	close(fd);
	if (found < 0)
		return -1;
	found = file_open_at(dirfd, dir, CA_CERT_FILE, &fd, err);
	if (found < 0)
		return -1;
	if (found == 0)
		return ca_cert_create(ca, dirfd, dir, err);
	found = ca_cert_parse_fd(ca, fd, dir, err);
	close(fd);
	return found;
}

int ca_open(const char *dir, struct ca **out, struct sb_err *err)
{
	struct ca *ca = calloc(1, sizeof *ca);
	int dirfd, rc;

	*out = NULL;
	if (ca == NULL)
		return sb_fail(err, ENOMEM, "allocating CA");
	mbedtls_pk_init(&ca->key);
	mbedtls_x509_crt_init(&ca->cert);
	dirfd = ca_dir_open(dir, err);
	rc = dirfd < 0 ? -1 : ca_load_or_create(ca, dirfd, dir, err);
	if (dirfd >= 0)
		close(dirfd);
	if (rc < 0) {
		sb_err_prefix(err, "opening the manager CA in %s", dir);
		ca_free(ca);
		return -1;
	}
	*out = ca;
	return 0;
}

void ca_free(struct ca *ca)
{
	if (ca == NULL)
		return;
	mbedtls_pk_free(&ca->key);  /* zeroizes the key */
	mbedtls_x509_crt_free(&ca->cert);
	free(ca);
}

const mbedtls_x509_crt *ca_cert(const struct ca *ca)
{
	return &ca->cert;
}

/* ---------- leaves ---------- */

/* A file base name we create: one component (common/names.c), no leading dot (our temp files
 * start with one). */
static int base_name_check(const char *name, struct sb_err *err)
{
	if (!name_component_valid(name, 200))
		return sb_invalid(err, "file name '%s' must be 1-200 of [A-Za-z0-9._-], not starting with '.' or '-'",
				  name);
	return 0;
}

static int leaf_extensions(mbedtls_x509write_cert *crt, const struct ca_leaf *leaf, struct sb_err *err)
{
	unsigned char san[(TLS_NAME_MAX + 8) * (CA_MORE_NAMES_MAX + 1) + 16], eku[32], *der;
	size_t len;
	char text[128];
	int ret;

	if (der_san_dns(leaf, san, sizeof san, &der, &len) < 0)
		return sb_fail(err, 0, "encoding subjectAltName");
	ret = mbedtls_x509write_crt_set_extension(crt, MBEDTLS_OID_SUBJECT_ALT_NAME,
						  MBEDTLS_OID_SIZE(MBEDTLS_OID_SUBJECT_ALT_NAME), 0, der, len);
	if (ret == 0 && der_ext_key_usage(leaf->usage, eku, sizeof eku, &der, &len) < 0)
		return sb_fail(err, 0, "encoding extendedKeyUsage");
	if (ret == 0)
		ret = mbedtls_x509write_crt_set_extension(crt, MBEDTLS_OID_EXTENDED_KEY_USAGE,
							  MBEDTLS_OID_SIZE(MBEDTLS_OID_EXTENDED_KEY_USAGE), 0, der, len);
	if (ret == 0)
		ret = mbedtls_x509write_crt_set_basic_constraints(crt, 0, -1);
	/* digitalSignature: what ECDHE-ECDSA needs of both ends, and nothing more. */
	if (ret == 0)
		ret = mbedtls_x509write_crt_set_key_usage(crt, MBEDTLS_X509_KU_DIGITAL_SIGNATURE);
	if (ret != 0)
		return sb_fail(err, 0, "writing certificate extensions: %s", mbedtls_text(ret, text, sizeof text));
	return 0;
}

/* Signs a certificate for key as described by leaf, into pem. */
static int leaf_sign(struct ca *ca, mbedtls_pk_context *key, const struct ca_leaf *leaf, unsigned char *pem,
		     size_t size, size_t *len, struct sb_err *err)
{
	mbedtls_x509write_cert crt;
	char subject[TLS_NAME_MAX + 4];
	time_t now = time(NULL);
	time_t from = leaf->not_before != 0 ? leaf->not_before : now - CA_CLOCK_SKEW;
	time_t until = leaf->not_after != 0 ? leaf->not_after : now + CA_LEAF_LIFETIME_DEFAULT;
	int rc;

	snprintf(subject, sizeof subject, "CN=%s", leaf->dns_name);
	mbedtls_x509write_crt_init(&crt);
	rc = leaf->self_signed ? crt_common(&crt, key, key, subject, subject, from, until, err) :
				 crt_common(&crt, key, &ca->key, subject, ca->subject, from, until, err);
	if (rc == 0)
		rc = leaf_extensions(&crt, leaf, err);
	if (rc == 0)
		rc = crt_pem(&crt, pem, size, len, err);
	mbedtls_x509write_crt_free(&crt);
	return rc;
}

static int leaf_write(mbedtls_pk_context *key, const unsigned char *cert_pem, size_t cert_len, const char *dir,
		      const char *name, bool synced, struct sb_err *err)
{
	unsigned char key_pem[CA_PEM_MAX];
	char key_file[256], cert_file[256], text[128];
	int dirfd, ret, rc;

	snprintf(key_file, sizeof key_file, "%s.key", name);
	snprintf(cert_file, sizeof cert_file, "%s.crt", name);
	ret = mbedtls_pk_write_key_pem(key, key_pem, sizeof key_pem);
	if (ret != 0)
		return sb_fail(err, 0, "encoding key: %s", mbedtls_text(ret, text, sizeof text));
	dirfd = dir_open(dir, err);
	rc = dirfd < 0 ? -1 :
	     file_put_at(dirfd, dir, key_file, 0600, key_pem, strlen((const char *)key_pem), synced, err);
	mbedtls_platform_zeroize(key_pem, sizeof key_pem);
	if (rc == 0)
		rc = file_put_at(dirfd, dir, cert_file, 0644, cert_pem, cert_len, synced, err);
	if (dirfd >= 0)
		close(dirfd);
	return rc;
}

int ca_issue_leaf(struct ca *ca, const struct ca_leaf *leaf, const char *target_dir, const char *name,
		  struct sb_err *err)
{
	mbedtls_pk_context key;
	unsigned char pem[CA_PEM_MAX];
	size_t len;
	int rc;

	if (tls_check_name(leaf->dns_name, "certificate name", err) < 0 || base_name_check(name, err) < 0)
		return -1;
	if (leaf->n_more > CA_MORE_NAMES_MAX)
		return sb_invalid(err, "a certificate carries at most %d names", CA_MORE_NAMES_MAX + 1);
	for (size_t i = 0; i < leaf->n_more; i++)
		if (tls_check_name(leaf->more_names[i], "certificate name", err) < 0)
			return -1;
	mbedtls_pk_init(&key);
	rc = key_generate(&key, err);
	if (rc == 0)
		rc = leaf_sign(ca, &key, leaf, pem, sizeof pem, &len, err);
	if (rc == 0)
		rc = leaf_write(&key, pem, len, target_dir, name, !leaf->unsynced, err);
	mbedtls_pk_free(&key);
	if (leaf->copy != NULL) {
		leaf->copy->len = 0;
		if (rc == 0 && len < sizeof leaf->copy->pem) {
			memcpy(leaf->copy->pem, pem, len + 1);
			leaf->copy->len = len;
		}
	}
	if (rc < 0)
		sb_err_prefix(err, "issuing a certificate for %s", leaf->dns_name);
	return rc;
}

/* target_dir/file_name: len bytes of public PEM (certificates, no key), mode 0644. */
static int pem_put(const char *target_dir, const char *file_name, const unsigned char *pem, size_t len, bool synced,
		   struct sb_err *err)
{
	int dirfd, rc;

	if (base_name_check(file_name, err) < 0)
		return -1;
	dirfd = dir_open(target_dir, err);
	if (dirfd < 0)
		return -1;
	rc = file_put_at(dirfd, target_dir, file_name, 0644, pem, len, synced, err);
	close(dirfd);
	return rc;
}

static int cert_write(const struct ca *ca, const char *target_dir, const char *file_name, bool synced,
		      struct sb_err *err)
{
	return pem_put(target_dir, file_name, ca->pem, ca->pem_len, synced, err);
}

int ca_write_cert(const struct ca *ca, const char *target_dir, const char *file_name, struct sb_err *err)
{
	return cert_write(ca, target_dir, file_name, true, err);
}

int ca_write_cert_unsynced(const struct ca *ca, const char *target_dir, const char *file_name, struct sb_err *err)
{
	return cert_write(ca, target_dir, file_name, false, err);
}

int ca_write_trust_unsynced(const struct ca *ca, const struct ca_cert_copy *also, const char *target_dir,
			    const char *file_name, struct sb_err *err)
{
	unsigned char pem[CA_PEM_MAX + 1 + CA_CERT_PEM_MAX];
	size_t len = ca->pem_len;

	if (also->len == 0)
		return cert_write(ca, target_dir, file_name, false, err);
	if (also->len >= sizeof also->pem || ca->pem_len + 1 + also->len > sizeof pem)
		return sb_invalid(err, "a trust list of two certificates does not fit %zu bytes", sizeof pem);
	memcpy(pem, ca->pem, len);
	if (len > 0 && pem[len - 1] != '\n')
		pem[len++] = '\n'; /* one PEM block a line apart from the next */
	memcpy(pem + len, also->pem, also->len);
	len += also->len;
	return pem_put(target_dir, file_name, pem, len, false, err);
}

int ca_format_sandbox_name(char *out, size_t out_len, const char *sandbox_id, uint64_t generation,
			   struct sb_err *err)
{
	size_t n = strlen(sandbox_id);
	int w;

	/* One DNS label: a dot or an upper-case letter would change which names match. */
	if (n == 0 || n > CA_SANDBOX_ID_MAX || strspn(sandbox_id, "abcdefghijklmnopqrstuvwxyz0123456789-") != n)
		return sb_invalid(err, "sandbox id '%s' must be 1-%d of [a-z0-9-]", sandbox_id, CA_SANDBOX_ID_MAX);
	w = snprintf(out, out_len, "sandbox-%s.g%llu.agent", sandbox_id, (unsigned long long)generation);
	if (w < 0 || (size_t)w >= out_len)
		return sb_fail(err, ENAMETOOLONG, "sandbox name buffer of %zu bytes is too small", out_len);
	return 0;
}
