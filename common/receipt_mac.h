/* Receipt authentication, shared by the agent (signs) and the manager (verifies): the receipt
 * is a JSON object whose "hmac_sha256" is HMAC-SHA256 over the object's canonical form
 * (jansson, compact, keys sorted) without that member. */
#ifndef SB_RECEIPT_MAC_H
#define SB_RECEIPT_MAC_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#include "error.h"

#define RECEIPT_KEY_BYTES 32
#define RECEIPT_MAX_BYTES 65536

/* Add "hmac_sha256" to obj. */
int receipt_mac_sign(json_t *obj, const uint8_t key[RECEIPT_KEY_BYTES], struct sb_err *err);

/* Parse and verify receipt text: the HMAC (constant-time comparison), then, when given, the
 * nonce (hex), the exec id and the generation (pass a negative value to skip it).
 * Returns the parsed object (caller decrefs) or NULL with err saying what did not match. */
json_t *receipt_mac_verify(const char *text, size_t len, const uint8_t key[RECEIPT_KEY_BYTES],
			   const char *nonce_hex, const char *exec_id, int64_t generation,
			   struct sb_err *err);

#endif
