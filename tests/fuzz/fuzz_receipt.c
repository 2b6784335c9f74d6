/* libFuzzer target: receipt_mac_verify on arbitrary text under a fixed key, with and without the
 * expectations (nonce, exec id, generation). A receipt that verifies must carry the expected
 * values. Pure: no I/O. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "receipt_mac.h"

/* Also used by make_seeds.c to sign the seed receipt. */
static const uint8_t fuzz_key[RECEIPT_KEY_BYTES] = "infra-sandbox fuzzing key 32 by";
#define FUZZ_NONCE "00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff"
#define FUZZ_EXEC_ID "fuzz-1"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct sb_err err;
	json_t *obj;

	obj = receipt_mac_verify((const char *)data, size, fuzz_key, NULL, NULL, -1, &err);
	json_decref(obj);
	obj = receipt_mac_verify((const char *)data, size, fuzz_key, FUZZ_NONCE, FUZZ_EXEC_ID, 1, &err);
	if (obj != NULL) {
		const char *nonce = json_string_value(json_object_get(obj, "nonce"));
		const char *id = json_string_value(json_object_get(obj, "exec_id"));

		if (nonce == NULL || strcmp(nonce, FUZZ_NONCE) != 0 || id == NULL || strcmp(id, FUZZ_EXEC_ID) != 0 ||
		    json_integer_value(json_object_get(obj, "generation")) != 1)
			abort();
		json_decref(obj);
	}
	return 0;
}
