/* Mutual TLS for the agent protocol (mbedtls 2.28): the policy (TLS 1.2, ECDHE-ECDSA AEAD, both sides
 * verified by CA and subjectAltName), the handshake, and an sb_stream over a session. Never accepts
 * a peer it did not verify; never treats an end of stream without close_notify as a clean close. */
#ifndef SB_TLS_H
#define SB_TLS_H

#include <stddef.h>
#include <stdint.h>

#include <mbedtls/x509_crt.h>

#include "error.h"
#include "frame.h"

/* Deadlines are absolute CLOCK_MONOTONIC times in milliseconds; TLS_NO_DEADLINE waits forever. */
#define TLS_NO_DEADLINE 0

/* Longest subjectAltName DNS name we issue or expect (RFC 1035 limit). */
#define TLS_NAME_MAX 253

/* Bound on close_notify at tls_session_close when the session has no earlier deadline. */
#define TLS_CLOSE_TIMEOUT_MS 1000

struct tls_config;   /* reusable for any number of sessions, also from several threads */
struct tls_session;  /* one connection; used by one thread at a time */

/* The server side (the sandbox-agent): presents cert_path/key_path, requires a client certificate
 * that chains to ca_path and names expected_client_name in its subjectAltName DNS names. */
int tls_config_server(struct tls_config **out, const char *cert_path, const char *key_path,
		      const char *ca_path, const char *expected_client_name, struct sb_err *err);

/* Principals (the manager's control API over TLS, docs/operations.md): a principal is one lowercase
 * label [a-z0-9-] of at most TLS_PRINCIPAL_MAX bytes, carried as the subjectAltName DNS name
 * PRINCIPAL<suffix> (e.g. "alice-ci.principal.infra-sandbox"). */
#define TLS_PRINCIPAL_MAX 63
#define TLS_SERIAL_HEX_MAX 40 /* RFC 5280: a serial is at most 20 bytes */

/* The server side of the control API: as tls_config_server, but the client certificate must carry
 * exactly one subjectAltName DNS name ending in suffix (".principal.infra-sandbox") with one
 * principal label before it; the handshake fails otherwise. tls_session_principal() gives it. */
int tls_config_server_principals(struct tls_config **out, const char *cert_path, const char *key_path,
				 const char *ca_path, const char *suffix, struct sb_err *err);

/* crt's principal under suffix into out: 1 when exactly one well-formed name has it, 0 when none,
 * -1 when one is malformed or there are two (refused either way). */
int tls_cert_principal(const mbedtls_x509_crt *crt, const char *suffix, char *out, size_t out_len);

/* A verified session's principal ("" outside principal mode) and the peer certificate's serial
 * (lowercase hex, no separators). */
const char *tls_session_principal(const struct tls_session *session);
const char *tls_session_serial(const struct tls_session *session);

/* Bytes already decrypted and waiting in the session: poll(2) on the socket cannot see them. */
size_t tls_session_pending(const struct tls_session *session);

/* The client side (the manager): presents cert_path/key_path, requires a server certificate that
 * chains to ca_path and names exactly expected_server_name (e.g. "sandbox-<id>.g<generation>.agent"). */
int tls_config_client(struct tls_config **out, const char *cert_path, const char *key_path,
		      const char *ca_path, const char *expected_server_name, struct sb_err *err);

/* The client side, narrowed to one certificate: the server must present exactly these bytes (pem:
 * one PEM certificate, pem_len without its NUL), within their validity, naming the expected server
 * name. The manager pins the certificate it issued a sandbox generation in this run: the CA's
 * signature over it is then not checked again at each handshake (one ECDSA verify, ~2.5 ms), since
 * the certificate is compared whole against the one the manager made, which is at least as
 * narrow. The server still proves it holds the key (its ServerKeyExchange signature is verified
 * with the certificate's key). Client configurations only; call it before the first session. */
int tls_config_pin_peer(struct tls_config *config, const unsigned char *pem, size_t pem_len, struct sb_err *err);

/* Name the peer in messages ("manager", "sandbox-agent"); the default is "client" or "server".
 * The label is copied. Call it before the first session: sessions read it without a lock. */
void tls_config_set_peer_label(struct tls_config *config, const char *label);

void tls_config_free(struct tls_config *config);

/* The deadline `timeout_ms` from now, for tls_session_open and tls_session_set_deadline: the same
 * monotonic clock_deadline_after of common/clock.h, which new code calls directly. */
int64_t tls_deadline_after(int64_t timeout_ms);

/* Run the handshake on fd (a connected stream socket, unix or TCP, owned by the caller and not
 * closed here) until deadline_ms. On success *out is a verified session whose I/O has no deadline
 * until tls_session_set_deadline. On failure nothing is left to free and err says why, naming the
 * certificate problem when there was one. */
int tls_session_open(struct tls_config *config, int fd, int64_t deadline_ms, struct tls_session **out,
		     struct sb_err *err);

/* Every later read and write fails with ETIMEDOUT once deadline_ms passes (TLS_NO_DEADLINE: never).
 * A timed-out session is broken: close it. */
void tls_session_set_deadline(struct tls_session *session, int64_t deadline_ms);

/* An sb_stream over the session. read returns 0 only after the peer's close_notify; an end of
 * stream without it, a timeout or a TLS error is -1 with errno set (EPROTO, ETIMEDOUT,
 * ECONNRESET), and tls_session_last_error() holds the full story. */
void tls_session_stream(struct tls_session *session, struct sb_stream *out);

/* The message for the last failed read or write ("" when none failed). */
const char *tls_session_last_error(const struct tls_session *session);

/* For logs: "TLSv1.2" and the negotiated ciphersuite name. */
const char *tls_session_version(const struct tls_session *session);
const char *tls_session_ciphersuite(const struct tls_session *session);

/* Send close_notify (bounded by the session deadline or TLS_CLOSE_TIMEOUT_MS, whichever is first)
 * and free the session; the fd stays open. Returns -1 when close_notify could not be sent and the
 * peer had not closed first (the session is freed anyway). NULL is a no-op. */
int tls_session_close(struct tls_session *session, struct sb_err *err);

/* Send close_notify and keep the session: the peer reads its end of stream, and this side may still
 * read what the peer sends (a half-close, as shutdown(SHUT_WR) on a socket). 0, or -1 with errno. */
int tls_session_close_write(struct tls_session *session);

/* Free the session without sending anything (the connection is already broken). NULL is a no-op. */
void tls_session_free(struct tls_session *session);

/* --- Helpers shared with manager/agentlink/ca.c and tests --- */

/* mbedtls RNG callback over the kernel CSPRNG (ctx unused): thread- and fork-safe. */
int tls_rng(void *ctx, unsigned char *buf, size_t len);

/* Read a whole descriptor into a malloc'd, NUL-terminated buffer, as mbedtls' PEM parsers want it;
 * *len counts the NUL, so it is at most max + 1. More than max bytes is an error (EFBIG).
 * `what` names the file in messages. */
int tls_read_fd(int fd, const char *what, size_t max, unsigned char **out, size_t *len,
		struct sb_err *err);

/* A DNS name as we issue and expect them: [a-z0-9.-], 1..TLS_NAME_MAX bytes. `what` names it in
 * the message ("expected client name"). */
int tls_check_name(const char *name, const char *what, struct sb_err *err);

/* 1 when one of crt's subjectAltName dNSName entries equals name (ASCII case-insensitive), else 0. */
int tls_cert_has_dns_name(const mbedtls_x509_crt *crt, const char *name);

/* The dNSName entries of crt, comma-separated, for messages ("(none)" when there are none). */
void tls_cert_dns_names(const mbedtls_x509_crt *crt, char *out, size_t out_len);

#endif
