/* Receipt HMAC (see receipt_mac.h). Owns the canonical form; never prints the key. */
#include "receipt_mac.h"

#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include <mbedtls/md.h>

#include "json_text.h"
#include "random.h"

static int mac_compute(const json_t *obj, const uint8_t key[RECEIPT_KEY_BYTES], char hex[65],
		       struct sb_err *err)
{
	const mbedtls_md_info_t *md = mbedtls_md_info_from_type(MBEDTLS_MD_SHA256);
	uint8_t mac[32];
	size_t len;
	char *canon = sb_json_dumps(obj, JSON_COMPACT | JSON_SORT_KEYS | JSON_ENSURE_ASCII, &len);
	int rc;

	if (canon == NULL)
		return sb_fail(err, ENOMEM, "serialising the receipt");
	rc = mbedtls_md_hmac(md, key, RECEIPT_KEY_BYTES, (const unsigned char *)canon, len, mac);
	free(canon);
	if (rc != 0)
		return sb_invalid(err, "computing the receipt HMAC (mbedtls %d)", rc);
	sb_hex_encode(mac, sizeof mac, hex);
	return 0;
}

int receipt_mac_sign(json_t *obj, const uint8_t key[RECEIPT_KEY_BYTES], struct sb_err *err)
{
	char hex[65];

	json_object_del(obj, "hmac_sha256");
	if (mac_compute(obj, key, hex, err) < 0)
		return -1;
	if (json_object_set_new(obj, "hmac_sha256", json_string(hex)) < 0)
		return sb_fail(err, ENOMEM, "adding the receipt HMAC");
	return 0;
}

static bool equal_const_time(const char *a, const char *b, size_t n)
{
	unsigned char diff = 0;

	for (size_t i = 0; i < n; i++)
		diff |= (unsigned char)(a[i] ^ b[i]);
	return diff == 0;
}

static int expectations_check(json_t *obj, const char *nonce_hex, const char *exec_id, int64_t generation,
			      struct sb_err *err)
{
	const char *got_nonce = json_string_value(json_object_get(obj, "nonce"));
	const char *got_id = json_string_value(json_object_get(obj, "exec_id"));
	json_t *got_gen = json_object_get(obj, "generation");

	if (nonce_hex != NULL && (got_nonce == NULL || strcmp(got_nonce, nonce_hex) != 0))
		return sb_fail(err, EPERM, "receipt refused: it carries another nonce");
	if (exec_id != NULL && (got_id == NULL || strcmp(got_id, exec_id) != 0))
		return sb_fail(err, EPERM, "receipt refused: it is for exec '%s', not '%s'", got_id ? got_id : "?",
			       exec_id);
	if (generation >= 0 && (!json_is_integer(got_gen) || json_integer_value(got_gen) != generation))
		return sb_fail(err, EPERM, "receipt refused: it is from generation %lld, not %lld",
			       json_is_integer(got_gen) ? (long long)json_integer_value(got_gen) : -1LL,
			       (long long)generation);
	return 0;
}

json_t *receipt_mac_verify(const char *text, size_t len, const uint8_t key[RECEIPT_KEY_BYTES],
			   const char *nonce_hex, const char *exec_id, int64_t generation, struct sb_err *err)
{
	json_error_t jerr;
	json_t *obj;
	char want[65], got[65];
	const char *mac;

	if (len > RECEIPT_MAX_BYTES) {
		sb_fail(err, EMSGSIZE, "receipt refused: %zu bytes is over the %d-byte limit", len, RECEIPT_MAX_BYTES);
		return NULL;
	}
	obj = json_loadb(text, len, JSON_REJECT_DUPLICATES, &jerr);
	if (!json_is_object(obj)) {
		sb_invalid(err, "receipt refused: not a JSON object (%s)", jerr.text);
		json_decref(obj);
		return NULL;
	}
	mac = json_string_value(json_object_get(obj, "hmac_sha256"));
	if (mac == NULL || strlen(mac) != 64) {
		sb_fail(err, EPERM, "receipt refused: no hmac_sha256");
		json_decref(obj);
		return NULL;
	}
	memcpy(got, mac, sizeof got);
	json_object_del(obj, "hmac_sha256");
	if (mac_compute(obj, key, want, err) < 0) {
		json_decref(obj);
		return NULL;
	}
	if (!equal_const_time(want, got, 64)) {
		sb_fail(err, EPERM, "receipt refused: the HMAC does not verify (altered, or another key)");
		json_decref(obj);
		return NULL;
	}
	if (expectations_check(obj, nonce_hex, exec_id, generation, err) < 0) {
		json_decref(obj);
		return NULL;
	}
	json_object_set_new(obj, "hmac_sha256", json_string(got));
	return obj;
}
