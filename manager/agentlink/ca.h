/* The manager's certificate authority: one ECDSA P-256 CA in the manager's private state, issuing the
 * short-lived leaves of the agent protocol (the manager's client certificate, one server certificate
 * per sandbox generation). The CA key never leaves its directory and is never written to a sandbox. */
#ifndef SB_CA_H
#define SB_CA_H

#include <stddef.h>
#include <stdint.h>
#include <stdbool.h>
#include <time.h>

#include <mbedtls/x509_crt.h>

#include "error.h"

/* The name in the manager's client certificate; agents get it as --manager-name. */
#define CA_MANAGER_NAME "manager.infra-sandbox"

#define CA_KEY_FILE "ca.key"
#define CA_CERT_FILE "ca.crt"

#define CA_LEAF_LIFETIME_DEFAULT (24 * 60 * 60)  /* seconds; reissue for anything that lives longer */
#define CA_CLOCK_SKEW (5 * 60)                    /* not_before is backdated by this much by default */

/* The longest sandbox id that still fits in one DNS label of "sandbox-<id>". */
#define CA_SANDBOX_ID_MAX 55

enum ca_usage {
	CA_USAGE_CLIENT,  /* TLS client authentication: the manager */
	CA_USAGE_SERVER,  /* TLS server authentication: a sandbox-agent */
};

#define CA_MORE_NAMES_MAX 8

/* A leaf certificate as issued (PEM, NUL-terminated; len excludes the NUL), kept by a caller that
 * will trust exactly this certificate and no other (tls_config_pin_peer). */
#define CA_CERT_PEM_MAX 4096
struct ca_cert_copy {
	unsigned char pem[CA_CERT_PEM_MAX];
	size_t len;  /* 0: none */
};

struct ca_leaf {
	const char *dns_name;  /* the first subjectAltName dNSName, also the subject CN */
	const char *const *more_names; /* more dNSNames (a manager's advertised names); n_more of them */
	size_t n_more;
	enum ca_usage usage;
	time_t not_before;     /* 0: now - CA_CLOCK_SKEW */
	time_t not_after;      /* 0: now + CA_LEAF_LIFETIME_DEFAULT */
	bool unsynced;         /* a sandbox generation's: written, never fsynced (ca_write_cert_unsynced) */
	struct ca_cert_copy *copy; /* non-NULL: the certificate is also copied here (len 0 on failure) */
	/* Signed with its own key, not the CA's: trusted only by a peer that holds this exact
	 * certificate in its trust list (mbedtls' locally trusted end entity: its signature is not
	 * checked there), never through the CA. Not a CA itself (basicConstraints CA:FALSE). */
	bool self_signed;
};

struct ca;

/* Load the CA from dir (CA_KEY_FILE, CA_CERT_FILE), creating it on first start. dir is created
 * 0700 when missing and must not be writable by group or others; the key must be owned by us with
 * mode 0600 or stricter. */
int ca_open(const char *dir, struct ca **out, struct sb_err *err);

void ca_free(struct ca *ca);

/* The CA certificate, for verification and tests. */
const mbedtls_x509_crt *ca_cert(const struct ca *ca);

/* Issue a leaf: a fresh P-256 key and a certificate signed by the CA, written to
 * target_dir/<name>.key (0600) and target_dir/<name>.crt, each replaced atomically. */
int ca_issue_leaf(struct ca *ca, const struct ca_leaf *leaf, const char *target_dir, const char *name,
		  struct sb_err *err);

/* Write the CA certificate (public, no key) as target_dir/<file_name>, replaced atomically: the
 * trust anchor a sandbox-agent gets as --tls-ca. */
int ca_write_cert(const struct ca *ca, const char *target_dir, const char *file_name, struct sb_err *err);

/* ca_write_cert, and ca_issue_leaf with leaf.unsynced, for the files of one sandbox generation:
 * made afresh (a file of that name is removed first) and never fsynced. Only the sandbox's own
 * processes read them, on this boot; a crash of the host ends those processes, and no later
 * generation or recovery reads them again (a new generation gets new ones; a sandbox found after
 * a restart is reached with them only while it runs, and its files are then in the page cache). */
int ca_write_cert_unsynced(const struct ca *ca, const char *target_dir, const char *file_name, struct sb_err *err);

/* ca_write_cert_unsynced, with also's certificate after the CA's in the same file: a trust list of
 * the CA and one self-signed certificate (a ca_leaf with self_signed). also->len 0: the CA alone. */
int ca_write_trust_unsynced(const struct ca *ca, const struct ca_cert_copy *also, const char *target_dir,
			    const char *file_name, struct sb_err *err);

/* "sandbox-<id>.g<generation>.agent": the name a sandbox's certificate carries, so a certificate
 * of an older generation cannot answer for a newer one. id: [a-z0-9-], 1..CA_SANDBOX_ID_MAX. */
int ca_format_sandbox_name(char *out, size_t out_len, const char *sandbox_id, uint64_t generation,
			   struct sb_err *err);

#endif
