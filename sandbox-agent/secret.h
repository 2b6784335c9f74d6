/* Memory for the agent's secrets (the receipt key and the current nonce). The page is wiped in
 * every child clone() makes (MADV_WIPEONFORK), so init and the command never hold them, not
 * even in memory they cannot read; it is also left out of core dumps. */
#ifndef SB_SECRET_H
#define SB_SECRET_H

#include <stdint.h>

#include "error.h"
#include "privdir.h"

#define SECRET_KEY_BYTES 32
#define SECRET_NONCE_BYTES 32

struct secrets {
	uint8_t key[SECRET_KEY_BYTES];
	uint8_t nonce[SECRET_NONCE_BYTES];
};

struct secrets *secrets_alloc(struct sb_err *err);
void secrets_free(struct secrets *s);

/* Load the receipt key receipt.key from the held directory, creating it (0600, O_EXCL, from
 * getrandom) if absent. */
int secrets_key_load(struct secrets *s, const struct privdir *dir, struct sb_err *err);
/* Load the receipt key the manager put at path (serve --receipt-key: a Secret volume's file on
 * Kubernetes). Never created: the manager holds the same key. Owned by this uid with mode 0600,
 * or under a read-only mount by sealed.c's rule; exactly SECRET_KEY_BYTES bytes. */
int secrets_key_load_file(struct secrets *s, const char *path, struct sb_err *err);

#endif
