/* Mutual TLS over a caller's socket (see tls.h). Owns the TLS policy and the I/O callbacks that
 * enforce deadlines with poll(2). Must never let a handshake succeed without a verified peer
 * certificate naming the expected peer, nor report a truncated stream as a clean close. */
#include "tls.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <mbedtls/entropy.h>
#include <mbedtls/error.h>
#include <mbedtls/net_sockets.h>
#include <mbedtls/platform_util.h>
#include <mbedtls/ssl.h>

#include "clock.h"
#include "random.h"

#define TLS_FILE_MAX (1u << 20)  /* a PEM certificate chain or key is far below this */
#define TLS_LABEL_MAX 32
#define TLS_NAMES_MAX 256

/* Shared by sessions on several threads: mbedtls only reads an ssl_config during handshakes, and
 * signs and verifies with parsed EC keys (type ECKEY) on a per-call copy of the curve group, so
 * the group's lazily cached tables are never written concurrently. */
struct tls_config {
	mbedtls_ssl_config conf;
	mbedtls_x509_crt own_cert;
	mbedtls_pk_context own_key;
	mbedtls_x509_crt ca;
	mbedtls_x509_crt pinned;             /* tls_config_pin_peer: the one certificate the server may present */
	int pinned_set;
	int endpoint;                        /* MBEDTLS_SSL_IS_SERVER or MBEDTLS_SSL_IS_CLIENT */
	char expected_name[TLS_NAME_MAX + 1];
	int principal_suffix;                /* expected_name is ".SUFFIX": the peer names PRINCIPAL.SUFFIX */
	char peer_label[TLS_LABEL_MAX];
};

struct tls_session {
	mbedtls_ssl_context ssl;
	const struct tls_config *config;
	int fd;
	int64_t deadline_ms;
	int io_errno;       /* errno of the last failed poll/send/recv; ETIMEDOUT for a deadline */
	int peer_closed;    /* the peer's close_notify arrived */
	int broken;         /* errno to report once the session failed; 0 while usable */
	char peer_names[TLS_NAMES_MAX];
	char principal[TLS_PRINCIPAL_MAX + 1];   /* principal mode: the one name found, else "" */
	char serial[TLS_SERIAL_HEX_MAX + 1];     /* the peer certificate's serial, lowercase hex */
	char last_error[SB_ERR_MSG_MAX];
};

/* The policy. AEAD suites with forward secrecy and ECDSA authentication only; nothing else is
 * negotiable, so a misconfigured peer fails the handshake instead of downgrading. */
static const int tls_ciphersuites[] = {
	MBEDTLS_TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384,
	MBEDTLS_TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256,
	MBEDTLS_TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256,
	0,
};

/* Key exchange groups. P-256 must stay listed: mbedtls 2.28 also refuses peer certificates whose
 * EC key is on a curve missing here. */
static const mbedtls_ecp_group_id tls_curves[] = {
	MBEDTLS_ECP_DP_CURVE25519,
	MBEDTLS_ECP_DP_SECP256R1,
	MBEDTLS_ECP_DP_NONE,
};

static const int tls_sig_hashes[] = { MBEDTLS_MD_SHA384, MBEDTLS_MD_SHA256, MBEDTLS_MD_NONE };

/* Certificates: ECDSA P-256 keys signed with SHA-256 or better; no RSA at all. */
static const mbedtls_x509_crt_profile tls_cert_profile = {
	.allowed_mds = MBEDTLS_X509_ID_FLAG(MBEDTLS_MD_SHA256) | MBEDTLS_X509_ID_FLAG(MBEDTLS_MD_SHA384) |
		       MBEDTLS_X509_ID_FLAG(MBEDTLS_MD_SHA512),
	.allowed_pks = MBEDTLS_X509_ID_FLAG(MBEDTLS_PK_ECDSA) | MBEDTLS_X509_ID_FLAG(MBEDTLS_PK_ECKEY),
	.allowed_curves = MBEDTLS_X509_ID_FLAG(MBEDTLS_ECP_DP_SECP256R1),
	.rsa_min_bitlen = UINT32_MAX,
};

/* ---------- small helpers ---------- */

int tls_rng(void *ctx, unsigned char *buf, size_t len)
{
	struct sb_err err;

	(void)ctx;
	return sb_random_bytes(buf, len, &err) == 0 ? 0 : MBEDTLS_ERR_ENTROPY_SOURCE_FAILED;
}

int64_t tls_deadline_after(int64_t timeout_ms)
{
	return clock_deadline_after(timeout_ms);
}

static const char *mbedtls_text(int ret, char *buf, size_t len)
{
	mbedtls_strerror(ret, buf, len);
	return buf;
}

/* Zeroizes (the buffer may hold a key) and frees a partly read buffer; returns -1. */
static int read_abort(unsigned char *buf, size_t used, struct sb_err *err, int errnum, const char *what,
		      size_t max)
{
	mbedtls_platform_zeroize(buf, used);
	free(buf);
	if (errnum == EFBIG)
		return sb_fail(err, EFBIG, "reading %s: larger than %zu bytes", what, max);
	return sb_fail(err, errnum, "reading %s", what);
}

int tls_read_fd(int fd, const char *what, size_t max, unsigned char **out, size_t *len,
		struct sb_err *err)
{
	/* One buffer of max + 1 bytes and the NUL: no realloc leaving copies of a key behind, and a
	 * file that fills it completely is over the limit. */
	unsigned char *buf = malloc(max + 2);
	size_t used = 0;

	*out = NULL;
	*len = 0;
	if (buf == NULL)
		return sb_fail(err, ENOMEM, "reading %s", what);
	for (;;) {
		ssize_t n = read(fd, buf + used, max + 1 - used);

		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return read_abort(buf, used, err, errno, what, max);
		if (n == 0)
			break;
		used += (size_t)n;
		if (used > max)
			return read_abort(buf, used, err, EFBIG, what, max);
	}
	buf[used] = '\0';
	*out = buf;
	*len = used + 1;  /* mbedtls' PEM parsers want the NUL counted */
	return 0;
}

/* Reads path into a NUL-terminated buffer; the caller zeroizes and frees it. */
static int file_load(const char *path, const char *what, unsigned char **out, size_t *len, struct sb_err *err)
{
	int fd, rc;

	/* Not O_NOFOLLOW: operators mount certificates as symlinks (Kubernetes secrets do). */
	fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY);
	if (fd < 0)
		return sb_fail_errno(err, "opening %s %s", what, path);
	rc = tls_read_fd(fd, path, TLS_FILE_MAX, out, len, err);
	close(fd);
	if (rc < 0)
		sb_err_prefix(err, "loading %s", what);
	return rc;
}

static int cert_load(mbedtls_x509_crt *crt, const char *path, const char *what, struct sb_err *err)
{
	unsigned char *buf;
	size_t len;
	char text[128];
	int ret;

	if (file_load(path, what, &buf, &len, err) < 0)
		return -1;
	ret = mbedtls_x509_crt_parse(crt, buf, len);
	free(buf);
	/* A positive count means some certificates in the file did not parse: refuse, never skip. */
	if (ret != 0)
		return sb_fail(err, 0, "loading %s %s: %s", what, path,
			       ret > 0 ? "a certificate in the file cannot be parsed"
				       : mbedtls_text(ret, text, sizeof text));
	return 0;
}

static int key_load(mbedtls_pk_context *pk, const char *path, struct sb_err *err)
{
	unsigned char *buf;
	size_t len;
	char text[128];
	int ret;

	if (file_load(path, "private key", &buf, &len, err) < 0)
		return -1;
	ret = mbedtls_pk_parse_key(pk, buf, len, NULL, 0);
	mbedtls_platform_zeroize(buf, len);
	free(buf);
	if (ret != 0)
		return sb_fail(err, 0, "loading private key %s: %s", path, mbedtls_text(ret, text, sizeof text));
	return 0;
}

static int byte_lower(unsigned char c)
{
	return c >= 'A' && c <= 'Z' ? c - 'A' + 'a' : c;
}

static int san_is_dns(const mbedtls_x509_sequence *cur)
{
	return cur->buf.p != NULL && cur->buf.tag == (MBEDTLS_ASN1_CONTEXT_SPECIFIC | MBEDTLS_X509_SAN_DNS_NAME);
}

int tls_cert_has_dns_name(const mbedtls_x509_crt *crt, const char *name)
{
	size_t n = strlen(name);

	for (const mbedtls_x509_sequence *cur = &crt->subject_alt_names; cur != NULL; cur = cur->next) {
		size_t i;

		if (!san_is_dns(cur) || cur->buf.len != n)
			continue;
		/* Byte by byte: the certificate's bytes are not NUL-terminated and may hold a NUL. */
		for (i = 0; i < n && byte_lower(cur->buf.p[i]) == byte_lower((unsigned char)name[i]); i++)
			;
		if (i == n)
			return 1;
	}
	return 0;
}

void tls_cert_dns_names(const mbedtls_x509_crt *crt, char *out, size_t out_len)
{
	size_t used = 0;

	out[0] = '\0';
	for (const mbedtls_x509_sequence *cur = &crt->subject_alt_names; cur != NULL; cur = cur->next) {
		if (!san_is_dns(cur))
			continue;
		if (used > 0 && used + 2 < out_len) {
			memcpy(out + used, ", ", 2);
			used += 2;
		}
		/* Peer-controlled bytes go into a message: keep printable ASCII only. */
		for (size_t i = 0; i < cur->buf.len && used + 1 < out_len; i++) {
			unsigned char c = cur->buf.p[i];

			out[used++] = (c >= 0x21 && c < 0x7f) ? (char)c : '?';
		}
		out[used] = '\0';
	}
	if (used == 0)
		snprintf(out, out_len, "(none)");
}

/* ---------- configuration ---------- */

int tls_check_name(const char *name, const char *what, struct sb_err *err)
{
	size_t n = name != NULL ? strlen(name) : 0;

	if (n == 0 || n > TLS_NAME_MAX)
		return sb_invalid(err, "%s must be a DNS name of 1 to %d characters", what, TLS_NAME_MAX);
	for (size_t i = 0; i < n; i++) {
		char c = name[i];

		if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '.' || c == '-'))
			return sb_invalid(err, "%s '%s' is not a lowercase DNS name", what, name);
	}
	return 0;
}

/* Our own certificate must fit the policy we demand from peers: ECDSA P-256, matching the key. */
static int own_cert_check(struct tls_config *c, const char *cert_path, struct sb_err *err)
{
	const mbedtls_pk_context *pub = &c->own_cert.pk;

	if (!mbedtls_pk_can_do(&c->own_key, MBEDTLS_PK_ECKEY) || !mbedtls_pk_can_do(pub, MBEDTLS_PK_ECKEY) ||
	    mbedtls_pk_ec(c->own_key)->grp.id != MBEDTLS_ECP_DP_SECP256R1)
		return sb_fail(err, 0, "certificate %s: key is not ECDSA P-256, the only kind this policy allows",
			       cert_path);
	if (mbedtls_pk_check_pair(pub, &c->own_key) != 0)
		return sb_fail(err, 0, "certificate %s does not match its private key", cert_path);
	return 0;
}

static void config_apply_policy(struct tls_config *c)
{
	mbedtls_ssl_config *conf = &c->conf;

	mbedtls_ssl_conf_min_version(conf, MBEDTLS_SSL_MAJOR_VERSION_3, MBEDTLS_SSL_MINOR_VERSION_3);
	mbedtls_ssl_conf_max_version(conf, MBEDTLS_SSL_MAJOR_VERSION_3, MBEDTLS_SSL_MINOR_VERSION_3);
	mbedtls_ssl_conf_ciphersuites(conf, tls_ciphersuites);
	mbedtls_ssl_conf_curves(conf, tls_curves);
	mbedtls_ssl_conf_sig_hashes(conf, tls_sig_hashes);
	mbedtls_ssl_conf_cert_profile(conf, &tls_cert_profile);
	/* mbedtls' server default is VERIFY_NONE (no client certificate asked): require it on both. */
	mbedtls_ssl_conf_authmode(conf, MBEDTLS_SSL_VERIFY_REQUIRED);
	mbedtls_ssl_conf_rng(conf, tls_rng, NULL);
	/* No renegotiation and no tickets: one handshake per connection, nothing resumable to steal. */
	mbedtls_ssl_conf_renegotiation(conf, MBEDTLS_SSL_RENEGOTIATION_DISABLED);
	mbedtls_ssl_conf_legacy_renegotiation(conf, MBEDTLS_SSL_LEGACY_BREAK_HANDSHAKE);
	mbedtls_ssl_conf_session_tickets(conf, MBEDTLS_SSL_SESSION_TICKETS_DISABLED);
	mbedtls_ssl_conf_extended_master_secret(conf, MBEDTLS_SSL_EXTENDED_MS_ENABLED);
}

/* Fills an initialised c; on failure c still holds whatever was loaded, for tls_config_free. */
static int config_fill(struct tls_config *c, int endpoint, const char *cert_path, const char *key_path,
		       const char *ca_path, const char *expected_name, struct sb_err *err)
{
	char text[128];
	int ret;

	c->endpoint = endpoint;
	snprintf(c->peer_label, sizeof c->peer_label, "%s", endpoint == MBEDTLS_SSL_IS_SERVER ? "client" : "server");
	if (tls_check_name(expected_name, endpoint == MBEDTLS_SSL_IS_SERVER ? "expected client name"
									 : "expected server name", err) < 0)
		return -1;
	snprintf(c->expected_name, sizeof c->expected_name, "%s", expected_name);
	if (cert_load(&c->own_cert, cert_path, "certificate", err) < 0 || key_load(&c->own_key, key_path, err) < 0 ||
	    cert_load(&c->ca, ca_path, "CA certificate", err) < 0 || own_cert_check(c, cert_path, err) < 0)
		return -1;
	ret = mbedtls_ssl_config_defaults(&c->conf, endpoint, MBEDTLS_SSL_TRANSPORT_STREAM, MBEDTLS_SSL_PRESET_DEFAULT);
	if (ret != 0)
		return sb_fail(err, 0, "TLS configuration: %s", mbedtls_text(ret, text, sizeof text));
	config_apply_policy(c);
	mbedtls_ssl_conf_ca_chain(&c->conf, &c->ca, NULL);
	ret = mbedtls_ssl_conf_own_cert(&c->conf, &c->own_cert, &c->own_key);
	if (ret != 0)
		return sb_fail(err, 0, "TLS configuration: %s", mbedtls_text(ret, text, sizeof text));
	return 0;
}

static int config_new(struct tls_config **out, int endpoint, const char *cert_path, const char *key_path,
		      const char *ca_path, const char *expected_name, struct sb_err *err)
{
	struct tls_config *c = calloc(1, sizeof *c);

	*out = NULL;
	if (c == NULL)
		return sb_fail(err, ENOMEM, "allocating TLS configuration");
	mbedtls_ssl_config_init(&c->conf);
	mbedtls_x509_crt_init(&c->own_cert);
	mbedtls_pk_init(&c->own_key);
	mbedtls_x509_crt_init(&c->ca);
	mbedtls_x509_crt_init(&c->pinned);
	if (config_fill(c, endpoint, cert_path, key_path, ca_path, expected_name, err) < 0) {
		tls_config_free(c);
		return -1;
	}
	*out = c;
	return 0;
}

int tls_config_server(struct tls_config **out, const char *cert_path, const char *key_path,
		      const char *ca_path, const char *expected_client_name, struct sb_err *err)
{
	return config_new(out, MBEDTLS_SSL_IS_SERVER, cert_path, key_path, ca_path, expected_client_name, err);
}

int tls_config_server_principals(struct tls_config **out, const char *cert_path, const char *key_path,
				 const char *ca_path, const char *suffix, struct sb_err *err)
{
	if (suffix == NULL || suffix[0] != '.' || config_new(out, MBEDTLS_SSL_IS_SERVER, cert_path, key_path, ca_path,
							     suffix + 1, err) < 0)
		return suffix == NULL || suffix[0] != '.' ? sb_invalid(err, "a principal suffix starts with '.'") : -1;
	(*out)->principal_suffix = 1;
	snprintf((*out)->expected_name, sizeof (*out)->expected_name, "%s", suffix);
	return 0;
}

const char *tls_session_principal(const struct tls_session *session)
{
	return session->principal;
}

const char *tls_session_serial(const struct tls_session *session)
{
	return session->serial;
}

size_t tls_session_pending(const struct tls_session *session)
{
	return mbedtls_ssl_get_bytes_avail(&session->ssl);
}

int tls_config_client(struct tls_config **out, const char *cert_path, const char *key_path,
		      const char *ca_path, const char *expected_server_name, struct sb_err *err)
{
	return config_new(out, MBEDTLS_SSL_IS_CLIENT, cert_path, key_path, ca_path, expected_server_name, err);
}

int tls_config_pin_peer(struct tls_config *config, const unsigned char *pem, size_t pem_len, struct sb_err *err)
{
	char text[128];
	int ret;

	/* A server that verifies nothing would not even ask for the client's certificate. */
	if (config->endpoint != MBEDTLS_SSL_IS_CLIENT)
		return sb_invalid(err, "only a TLS client configuration pins its peer's certificate");
	if (config->pinned_set)
		return sb_invalid(err, "a TLS configuration pins one certificate, once");
	if (pem_len == 0 || pem[pem_len] != '\0')
		return sb_invalid(err, "a pinned certificate is one NUL-terminated PEM certificate");
	ret = mbedtls_x509_crt_parse(&config->pinned, pem, pem_len + 1);
	if (ret != 0)
		return sb_fail(err, 0, "pinned certificate: %s", mbedtls_text(ret, text, sizeof text));
	if (config->pinned.next != NULL)
		return sb_invalid(err, "a pinned certificate is one certificate, not a chain");
	if (!tls_cert_has_dns_name(&config->pinned, config->expected_name))
		return sb_invalid(err, "the pinned certificate does not name '%s'", config->expected_name);
	config->pinned_set = 1;
	/* mbedtls then skips the chain (the CA's signature, the name, the key usage, the validity): the
	 * whole certificate is compared with this one, and its validity checked, in pinned_peer_check.
	 * The server's ServerKeyExchange signature is still verified with the certificate's key. */
	mbedtls_ssl_conf_authmode(&config->conf, MBEDTLS_SSL_VERIFY_NONE);
	return 0;
}

void tls_config_set_peer_label(struct tls_config *config, const char *label)
{
	snprintf(config->peer_label, sizeof config->peer_label, "%s", label);
}

void tls_config_free(struct tls_config *config)
{
	if (config == NULL)
		return;
	mbedtls_ssl_config_free(&config->conf);
	mbedtls_x509_crt_free(&config->own_cert);
	mbedtls_pk_free(&config->own_key);  /* zeroizes the key */
	mbedtls_x509_crt_free(&config->ca);
	mbedtls_x509_crt_free(&config->pinned);
	free(config);
}

/* ---------- I/O callbacks: blocking with a deadline, on a descriptor we do not own ---------- */

/* Waits until fd is ready for events. 0 when ready (or hung up: the next call reports it),
 * MBEDTLS_ERR_SSL_TIMEOUT past the deadline, MBEDTLS_ERR_NET_POLL_FAILED on a poll error. */
static int bio_wait(struct tls_session *s, short events)
{
	for (;;) {
		struct pollfd p = { .fd = s->fd, .events = events };
		int timeout = -1, n;

		if (s->deadline_ms != TLS_NO_DEADLINE) {
			timeout = clock_remaining_ms(s->deadline_ms);
			if (timeout == 0) {
				s->io_errno = ETIMEDOUT;
				return MBEDTLS_ERR_SSL_TIMEOUT;
			}
		}
		n = poll(&p, 1, timeout);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0) {
			s->io_errno = errno;
			return MBEDTLS_ERR_NET_POLL_FAILED;
		}
		if (n > 0)
			return 0;
	}
}

/* MSG_DONTWAIT instead of O_NONBLOCK: the descriptor's flags belong to the caller.
 * MSG_NOSIGNAL: a vanished peer must be an error here, not a SIGPIPE for the whole process. */
static int bio_send(void *ctx, const unsigned char *buf, size_t len)
{
	struct tls_session *s = ctx;

	for (;;) {
		ssize_t n;
		int ret = bio_wait(s, POLLOUT);

		if (ret != 0)
			return ret;
		n = send(s->fd, buf, len, MSG_DONTWAIT | MSG_NOSIGNAL);
		if (n >= 0)
			return (int)n;  /* len is at most one TLS record */
		if (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK)
			continue;
		s->io_errno = errno;
		return errno == EPIPE || errno == ECONNRESET ? MBEDTLS_ERR_NET_CONN_RESET : MBEDTLS_ERR_NET_SEND_FAILED;
	}
}

static int bio_recv(void *ctx, unsigned char *buf, size_t len)
{
	struct tls_session *s = ctx;

	for (;;) {
		ssize_t n;
		int ret = bio_wait(s, POLLIN);

		if (ret != 0)
			return ret;
		n = recv(s->fd, buf, len, MSG_DONTWAIT);
		if (n >= 0)
			return (int)n;  /* 0: end of stream, which mbedtls turns into CONN_EOF */
		if (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK)
			continue;
		s->io_errno = errno;
		return errno == ECONNRESET ? MBEDTLS_ERR_NET_CONN_RESET : MBEDTLS_ERR_NET_RECV_FAILED;
	}
}

/* ---------- handshake ---------- */

/* The serial as lowercase hex without separators ("" when it does not fit). */
static void serial_hex(const mbedtls_x509_crt *crt, char *out, size_t out_len)
{
	size_t used = 0;

	out[0] = '\0';
	for (size_t i = 0; i < crt->serial.len; i++) {
		if (used + 3 > out_len) {
			out[0] = '\0';
			return;
		}
		snprintf(out + used, 3, "%02x", crt->serial.p[i]);
		used += 2;
	}
}

static int principal_char(unsigned char c)
{
	return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-';
}

int tls_cert_principal(const mbedtls_x509_crt *crt, const char *suffix, char *out, size_t out_len)
{
	size_t sl = strlen(suffix);
	int found = 0;

	out[0] = '\0';
	for (const mbedtls_x509_sequence *cur = &crt->subject_alt_names; cur != NULL; cur = cur->next) {
		size_t n, i;

		if (!san_is_dns(cur) || cur->buf.len <= sl)
			continue;
		n = cur->buf.len - sl;
		if (memcmp(cur->buf.p + n, suffix, sl) != 0)
			continue;
		/* Exactly one lowercase label before the suffix: no dots, no case folding, so one
		 * principal has one spelling. */
		for (i = 0; i < n && principal_char(cur->buf.p[i]); i++)
			;
		if (i != n || n > TLS_PRINCIPAL_MAX || n >= out_len)
			return -1;
		if (found)
			return -1; /* two principals in one certificate: which one acts is not ours to guess */
		memcpy(out, cur->buf.p, n);
		out[n] = '\0';
		found = 1;
	}
	if (found != 1)
		out[0] = '\0';
	return found;
}

/* Called by mbedtls for each certificate of the peer's chain, root first; depth 0 is the peer's own.
 * Marks a certificate that does not carry the expected SAN, so the handshake fails inside mbedtls
 * and the peer receives an alert, instead of a handshake that "succeeds" and is then dropped. */
static int session_verify(void *ctx, mbedtls_x509_crt *crt, int depth, uint32_t *flags)
{
	struct tls_session *s = ctx;

	if (depth != 0)
		return 0;
	tls_cert_dns_names(crt, s->peer_names, sizeof s->peer_names);
	serial_hex(crt, s->serial, sizeof s->serial);
	if (s->config->principal_suffix) {
		if (tls_cert_principal(crt, s->config->expected_name, s->principal, sizeof s->principal) != 1)
			*flags |= MBEDTLS_X509_BADCERT_CN_MISMATCH;
		return 0;
	}
	if (!tls_cert_has_dns_name(crt, s->config->expected_name))
		*flags |= MBEDTLS_X509_BADCERT_CN_MISMATCH;
	return 0;
}

/* Appends "; reason". A message for people: what does not fit out is cut on purpose (the
 * first reasons are the ones that matter), never an error. */
static void reason_add(char *out, size_t out_len, const char *reason)
{
	size_t used = strlen(out), room = out_len - used;
	const char *sep = used > 0 ? "; " : "";

	if (room <= strlen(sep))
		return;
	snprintf(out + used, room, "%s%.*s", sep, (int)(room - 1 - strlen(sep)), reason);
}

/* Turns verification flags into words a person can act on; all that apply, "; "-separated. */
static void verify_reasons(const struct tls_session *s, uint32_t flags, char *out, size_t out_len)
{
	char text[TLS_NAMES_MAX + TLS_NAME_MAX + 64];

	out[0] = '\0';
	if (flags & MBEDTLS_X509_BADCERT_MISSING)
		reason_add(out, out_len, "is missing");
	if (flags & MBEDTLS_X509_BADCERT_NOT_TRUSTED)
		reason_add(out, out_len, "is not signed by the configured CA");
	if (flags & MBEDTLS_X509_BADCERT_EXPIRED)
		reason_add(out, out_len, "has expired");
	if (flags & MBEDTLS_X509_BADCERT_FUTURE)
		reason_add(out, out_len, "is not valid yet");
	if (flags & MBEDTLS_X509_BADCERT_CN_MISMATCH) {
		snprintf(text, sizeof text, "does not name '%s' (names: %s)", s->config->expected_name,
			 s->peer_names[0] != '\0' ? s->peer_names : "(none)");
		reason_add(out, out_len, text);
	}
	if (flags & (MBEDTLS_X509_BADCERT_KEY_USAGE | MBEDTLS_X509_BADCERT_EXT_KEY_USAGE))
		reason_add(out, out_len, s->config->endpoint == MBEDTLS_SSL_IS_SERVER
						 ? "is not issued for this role (TLS client authentication)"
						 : "is not issued for this role (TLS server authentication)");
	if (flags & (MBEDTLS_X509_BADCERT_BAD_MD | MBEDTLS_X509_BADCERT_BAD_PK | MBEDTLS_X509_BADCERT_BAD_KEY))
		reason_add(out, out_len, "uses an algorithm outside the policy (ECDSA P-256, SHA-256 or better)");
	if (out[0] == '\0') {
		int n = mbedtls_x509_crt_verify_info(text, sizeof text, "", flags);

		/* verify_info ends each line with '\n'; keep the first line. */
		text[n > 0 ? strcspn(text, "\n") : 0] = '\0';
		/* For people: mbedtls's first line, cut on purpose to fit. */
		snprintf(out, out_len, "failed verification (%.400s)", n > 0 ? text : "unknown reason");
	}
}

/* What a person should check after the peer refused us with this alert. */
static const char *alert_hint(unsigned char code)
{
	switch (code) {
	case MBEDTLS_SSL_ALERT_MSG_BAD_CERT:
	case MBEDTLS_SSL_ALERT_MSG_UNSUPPORTED_CERT:
	case MBEDTLS_SSL_ALERT_MSG_CERT_EXPIRED:
	case MBEDTLS_SSL_ALERT_MSG_CERT_UNKNOWN:
	case MBEDTLS_SSL_ALERT_MSG_UNKNOWN_CA:
	case MBEDTLS_SSL_ALERT_MSG_ACCESS_DENIED:
		return " (it did not accept our certificate: check that both sides use certificates from the same "
		       "CA, current, and with the names each side expects)";
	case MBEDTLS_SSL_ALERT_MSG_PROTOCOL_VERSION:
	case MBEDTLS_SSL_ALERT_MSG_HANDSHAKE_FAILURE:
	case MBEDTLS_SSL_ALERT_MSG_INSUFFICIENT_SECURITY:
		return " (no TLS 1.2 ECDHE-ECDSA parameters in common)";
	default:
		return "";
	}
}

static const char *alert_name(unsigned char code)
{
	switch (code) {
	case MBEDTLS_SSL_ALERT_MSG_HANDSHAKE_FAILURE: return "handshake_failure";
	case MBEDTLS_SSL_ALERT_MSG_BAD_CERT: return "bad_certificate";
	case MBEDTLS_SSL_ALERT_MSG_UNSUPPORTED_CERT: return "unsupported_certificate";
	case MBEDTLS_SSL_ALERT_MSG_CERT_REVOKED: return "certificate_revoked";
	case MBEDTLS_SSL_ALERT_MSG_CERT_EXPIRED: return "certificate_expired";
	case MBEDTLS_SSL_ALERT_MSG_CERT_UNKNOWN: return "certificate_unknown";
	case MBEDTLS_SSL_ALERT_MSG_UNKNOWN_CA: return "unknown_ca";
	case MBEDTLS_SSL_ALERT_MSG_ACCESS_DENIED: return "access_denied";
	case MBEDTLS_SSL_ALERT_MSG_PROTOCOL_VERSION: return "protocol_version";
	case MBEDTLS_SSL_ALERT_MSG_INSUFFICIENT_SECURITY: return "insufficient_security";
	case MBEDTLS_SSL_ALERT_MSG_DECODE_ERROR: return "decode_error";
	case MBEDTLS_SSL_ALERT_MSG_ILLEGAL_PARAMETER: return "illegal_parameter";
	case MBEDTLS_SSL_ALERT_MSG_UNEXPECTED_MESSAGE: return "unexpected_message";
	default: return "other";
	}
}

/* The alert the peer sent, or -1. In mbedtls 2.28 the record that made the handshake fail with
 * FATAL_ALERT_MESSAGE is still in in_msg: [level, description]. */
static int session_received_alert(const struct tls_session *s)
{
	if (s->ssl.in_msg == NULL || s->ssl.in_msgtype != MBEDTLS_SSL_MSG_ALERT || s->ssl.in_msglen < 2)
		return -1;
	return s->ssl.in_msg[1];
}

static int handshake_fail_alert(struct tls_session *s, int alert, struct sb_err *err)
{
	const char *peer = s->config->peer_label;

	if (alert < 0)
		return sb_fail(err, 0, "TLS handshake with %s failed: the %s refused it with a fatal alert", peer, peer);
	return sb_fail(err, 0, "TLS handshake with %s failed: the %s refused it with alert %s%s", peer, peer,
		       alert_name((unsigned char)alert), alert_hint((unsigned char)alert));
}

/* A peer that refuses us mid-flight sends a (still plaintext) alert and hangs up while we are
 * writing, so we see EPIPE with the alert unread in the socket. Peek at it, consuming nothing:
 * the description, or -1 when the next bytes are not a TLS alert record. */
static int peek_plaintext_alert(int fd)
{
	unsigned char rec[7];
	ssize_t n = recv(fd, rec, sizeof rec, MSG_PEEK | MSG_DONTWAIT);

	if (n != (ssize_t)sizeof rec || rec[0] != MBEDTLS_SSL_MSG_ALERT || rec[1] != MBEDTLS_SSL_MAJOR_VERSION_3 ||
	    rec[3] != 0 || rec[4] != 2)
		return -1;
	return rec[6];
}

static int handshake_fail_transport(struct tls_session *s, int ret, struct sb_err *err)
{
	const char *peer = s->config->peer_label;
	int alert = ret == MBEDTLS_ERR_NET_CONN_RESET || ret == MBEDTLS_ERR_NET_SEND_FAILED ? peek_plaintext_alert(s->fd)
												: -1;

	if (alert >= 0)
		return handshake_fail_alert(s, alert, err);
	return sb_fail(err, s->io_errno, "TLS handshake with %s failed", peer);
}

/* The verification flags, when the handshake got as far as checking a certificate. */
static uint32_t handshake_verify_flags(const struct tls_session *s)
{
	uint32_t flags = mbedtls_ssl_get_verify_result(&s->ssl);

	return flags == UINT32_MAX ? 0 : flags;
}

static int handshake_fail(struct tls_session *s, int ret, struct sb_err *err)
{
	const char *peer = s->config->peer_label;
	const char *role = s->config->endpoint == MBEDTLS_SSL_IS_SERVER ? "client" : "server";
	char reasons[512], text[128];

	switch (ret) {
	case MBEDTLS_ERR_X509_CERT_VERIFY_FAILED:
	case MBEDTLS_ERR_SSL_BAD_HS_CERTIFICATE:
		/* BAD_HS_CERTIFICATE: a certificate that verified but is not for this role (key usage),
		 * or one that did not parse (no flags then). */
		if (handshake_verify_flags(s) == 0)
			return sb_fail(err, 0, "TLS handshake with %s refused: the %s certificate cannot be parsed",
				       peer, role);
		verify_reasons(s, handshake_verify_flags(s), reasons, sizeof reasons);
		return sb_fail(err, 0, "TLS handshake with %s refused: %s certificate %s", peer, role, reasons);
	case MBEDTLS_ERR_SSL_NO_CLIENT_CERTIFICATE:
		return sb_fail(err, 0, "TLS handshake with %s refused: the client presented no certificate", peer);
	case MBEDTLS_ERR_SSL_FATAL_ALERT_MESSAGE:
		return handshake_fail_alert(s, session_received_alert(s), err);
	case MBEDTLS_ERR_SSL_BAD_HS_PROTOCOL_VERSION:
		return sb_fail(err, 0, "TLS handshake with %s refused: the %s does not speak TLS 1.2", peer, role);
	case MBEDTLS_ERR_SSL_NO_CIPHER_CHOSEN:
		return sb_fail(err, 0, "TLS handshake with %s refused: no shared cipher suite (only ECDHE-ECDSA with "
			       "AES-GCM or ChaCha20-Poly1305 is allowed)", peer);
	case MBEDTLS_ERR_SSL_TIMEOUT:
		return sb_fail(err, ETIMEDOUT, "TLS handshake with %s did not finish in time", peer);
	case MBEDTLS_ERR_SSL_CONN_EOF:
		return sb_fail(err, 0, "TLS handshake with %s failed: the %s closed the connection", peer, role);
	case MBEDTLS_ERR_NET_CONN_RESET:
	case MBEDTLS_ERR_NET_SEND_FAILED:
	case MBEDTLS_ERR_NET_RECV_FAILED:
	case MBEDTLS_ERR_NET_POLL_FAILED:
		return handshake_fail_transport(s, ret, err);
	default:
		return sb_fail(err, 0, "TLS handshake with %s failed: not a valid TLS 1.2 handshake (%s)", peer,
			       mbedtls_text(ret, text, sizeof text));
	}
}

/* A pinned configuration's only check of the server's certificate (mbedtls verified none of it):
 * byte for byte the pinned one, and within its validity. */
static int pinned_peer_check(struct tls_session *s, const mbedtls_x509_crt *peer, struct sb_err *err)
{
	const mbedtls_x509_crt *pin = &s->config->pinned;
	const char *why = NULL;

	if (peer != NULL) {
		tls_cert_dns_names(peer, s->peer_names, sizeof s->peer_names);
		serial_hex(peer, s->serial, sizeof s->serial);
	}
	if (peer == NULL)
		why = "missing";
	else if (peer->raw.len != pin->raw.len || memcmp(peer->raw.p, pin->raw.p, pin->raw.len) != 0)
		why = "not the one issued to it";
	else if (mbedtls_x509_time_is_past(&peer->valid_to))
		why = "expired";
	else if (mbedtls_x509_time_is_future(&peer->valid_from))
		why = "not valid yet";
	if (why == NULL)
		return 0;
	/* Best effort: the connection is refused either way. */
	(void)mbedtls_ssl_send_alert_message(&s->ssl, MBEDTLS_SSL_ALERT_LEVEL_FATAL, MBEDTLS_SSL_ALERT_MSG_BAD_CERT);
	return sb_fail(err, 0, "TLS handshake with %s refused: server certificate %s (names: %s)",
		       s->config->peer_label, why, s->peer_names[0] != '\0' ? s->peer_names : "none");
}

/* Defence in depth after mbedtls said yes: a verified peer certificate that names the peer. */
static int handshake_check_peer(struct tls_session *s, struct sb_err *err)
{
	const mbedtls_x509_crt *peer = mbedtls_ssl_get_peer_cert(&s->ssl);

	char principal[TLS_PRINCIPAL_MAX + 1];

	if (s->config->pinned_set)
		return pinned_peer_check(s, peer, err);
	if (peer == NULL || mbedtls_ssl_get_verify_result(&s->ssl) != 0 ||
	    (s->config->principal_suffix ? tls_cert_principal(peer, s->config->expected_name, principal, sizeof principal) != 1 ||
					   strcmp(principal, s->principal) != 0
					 : !tls_cert_has_dns_name(peer, s->config->expected_name))) {
		/* Best effort: the connection is refused either way. */
		(void)mbedtls_ssl_send_alert_message(&s->ssl, MBEDTLS_SSL_ALERT_LEVEL_FATAL,
						     MBEDTLS_SSL_ALERT_MSG_BAD_CERT);
		return sb_fail(err, 0, "TLS handshake with %s refused: peer certificate not verified for '%s'",
			       s->config->peer_label, s->config->expected_name);
	}
	return 0;
}

static int session_handshake(struct tls_session *s, struct sb_err *err)
{
	char text[128];
	int ret;

	ret = mbedtls_ssl_setup(&s->ssl, &s->config->conf);
	if (ret != 0)
		return sb_fail(err, 0, "setting up TLS session: %s", mbedtls_text(ret, text, sizeof text));
	/* In 2.28 a client that does not set the hostname accepts any certificate the CA signed. */
	if (s->config->endpoint == MBEDTLS_SSL_IS_CLIENT) {
		ret = mbedtls_ssl_set_hostname(&s->ssl, s->config->expected_name);
		if (ret != 0)
			return sb_fail(err, 0, "setting up TLS session: %s", mbedtls_text(ret, text, sizeof text));
	}
	mbedtls_ssl_set_verify(&s->ssl, session_verify, s);
	mbedtls_ssl_set_bio(&s->ssl, s, bio_send, bio_recv, NULL);
	do
		ret = mbedtls_ssl_handshake(&s->ssl);
	while (ret == MBEDTLS_ERR_SSL_WANT_READ || ret == MBEDTLS_ERR_SSL_WANT_WRITE);
	if (ret != 0)
		return handshake_fail(s, ret, err);
	return handshake_check_peer(s, err);
}

int tls_session_open(struct tls_config *config, int fd, int64_t deadline_ms, struct tls_session **out,
		     struct sb_err *err)
{
	struct tls_session *s = calloc(1, sizeof *s);

	*out = NULL;
	if (s == NULL)
		return sb_fail(err, ENOMEM, "allocating TLS session");
	mbedtls_ssl_init(&s->ssl);
	s->config = config;
	s->fd = fd;
	s->deadline_ms = deadline_ms;
	if (session_handshake(s, err) < 0) {
		tls_session_free(s);
		return -1;
	}
	s->deadline_ms = TLS_NO_DEADLINE;
	*out = s;
	return 0;
}

void tls_session_set_deadline(struct tls_session *session, int64_t deadline_ms)
{
	session->deadline_ms = deadline_ms;
}

const char *tls_session_last_error(const struct tls_session *session)
{
	return session->last_error;
}

const char *tls_session_version(const struct tls_session *session)
{
	return mbedtls_ssl_get_version(&session->ssl);
}

const char *tls_session_ciphersuite(const struct tls_session *session)
{
	return mbedtls_ssl_get_ciphersuite(&session->ssl);
}

/* ---------- the stream ---------- */

/* Records why the session failed, marks it broken and returns -1 with errno set. */
static ssize_t session_io_fail(struct tls_session *s, int ret, const char *doing)
{
	const char *peer = s->config->peer_label;
	char text[128];
	int e;

	switch (ret) {
	case 0:
	case MBEDTLS_ERR_SSL_CONN_EOF:
		/* Without close_notify an attacker who can cut the connection could cut a message short. */
		e = EPROTO;
		snprintf(s->last_error, sizeof s->last_error,
			 "TLS stream from %s ended without close_notify: the data may be truncated", peer);
		break;
	case MBEDTLS_ERR_SSL_TIMEOUT:
		e = ETIMEDOUT;
		snprintf(s->last_error, sizeof s->last_error, "%s %s over TLS: deadline passed", doing, peer);
		break;
	case MBEDTLS_ERR_NET_CONN_RESET:
	case MBEDTLS_ERR_NET_SEND_FAILED:
	case MBEDTLS_ERR_NET_RECV_FAILED:
	case MBEDTLS_ERR_NET_POLL_FAILED:
		e = s->io_errno != 0 ? s->io_errno : ECONNRESET;
		snprintf(s->last_error, sizeof s->last_error, "%s %s over TLS: %s", doing, peer, strerror(e));
		break;
	default:
		e = EPROTO;
		snprintf(s->last_error, sizeof s->last_error, "%s %s over TLS: %s", doing, peer,
			 mbedtls_text(ret, text, sizeof text));
		break;
	}
	s->broken = e;
	errno = e;
	return -1;
}

static ssize_t stream_read(void *ctx, void *buf, size_t len)
{
	struct tls_session *s = ctx;

	if (s->peer_closed)
		return 0;
	if (s->broken != 0) {
		errno = s->broken;
		return -1;
	}
	for (;;) {
		int ret = mbedtls_ssl_read(&s->ssl, buf, len);

		if (ret > 0)
			return ret;
		if (ret == MBEDTLS_ERR_SSL_WANT_READ || ret == MBEDTLS_ERR_SSL_WANT_WRITE)
			continue;
		if (ret == MBEDTLS_ERR_SSL_PEER_CLOSE_NOTIFY) {
			s->peer_closed = 1;
			return 0;
		}
		/* ret == 0 is mbedtls' way of saying the transport ended: a truncation, not a close. */
		return session_io_fail(s, ret, "reading from");
	}
}

static ssize_t stream_write(void *ctx, const void *buf, size_t len)
{
	struct tls_session *s = ctx;

	if (s->broken != 0) {
		errno = s->broken;
		return -1;
	}
	for (;;) {
		int ret = mbedtls_ssl_write(&s->ssl, buf, len);

		if (ret >= 0)
			return ret;
		if (ret == MBEDTLS_ERR_SSL_WANT_READ || ret == MBEDTLS_ERR_SSL_WANT_WRITE)
			continue;
		return session_io_fail(s, ret, "writing to");
	}
}

void tls_session_stream(struct tls_session *session, struct sb_stream *out)
{
	out->ctx = session;
	out->read = stream_read;
	out->write = stream_write;
}

int tls_session_close_write(struct tls_session *session)
{
	int ret;

	if (session->broken != 0) {
		errno = session->broken;
		return -1;
	}
	do
		ret = mbedtls_ssl_close_notify(&session->ssl);
	while (ret == MBEDTLS_ERR_SSL_WANT_READ || ret == MBEDTLS_ERR_SSL_WANT_WRITE);
	return ret == 0 ? 0 : (int)session_io_fail(session, ret, "closing the writing half to");
}

int tls_session_close(struct tls_session *session, struct sb_err *err)
{
	int64_t bound;
	int ret, rc = 0;

	if (session == NULL)
		return 0;
	bound = tls_deadline_after(TLS_CLOSE_TIMEOUT_MS);
	if (session->deadline_ms == TLS_NO_DEADLINE || session->deadline_ms > bound)
		session->deadline_ms = bound;
	if (session->broken == 0) {
		do
			ret = mbedtls_ssl_close_notify(&session->ssl);
		while (ret == MBEDTLS_ERR_SSL_WANT_READ || ret == MBEDTLS_ERR_SSL_WANT_WRITE);
		/* After the peer's own close_notify the exchange is complete: a peer that already hung up
		 * cannot make our close fail. */
		if (ret != 0 && !session->peer_closed) {
			session_io_fail(session, ret, "closing the connection to");
			rc = sb_fail(err, 0, "%s", session->last_error);  /* the text already says why */
			err->errnum = session->broken;
		}
	}
	tls_session_free(session);
	return rc;
}

void tls_session_free(struct tls_session *session)
{
	if (session == NULL)
		return;
	mbedtls_ssl_free(&session->ssl);
	free(session);
}
