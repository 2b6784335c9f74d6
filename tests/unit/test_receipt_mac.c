/* Unit tests for common/receipt_mac.c: a signed receipt verifies; any change, another key,
 * another nonce, exec id or generation is refused with a reason. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <errno.h>

#include "receipt_mac.h"

static const uint8_t key[RECEIPT_KEY_BYTES] = { 1, 2, 3, 4, 5, 6, 7, 8, 9, 10 };
static const char nonce[] = "00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff";

static char *signed_receipt(void)
{
	struct sb_err err;
	json_t *obj = json_pack("{s:i, s:s, s:I, s:s, s:s, s:i}", "version", 1, "exec_id", "e1", "generation",
				(json_int_t)7, "nonce", nonce, "status", "exited", "exit_code", 0);
	char *text;

	assert_int_equal(receipt_mac_sign(obj, key, &err), 0);
	text = json_dumps(obj, JSON_COMPACT | JSON_SORT_KEYS);
	json_decref(obj);
	return text;
}

static void test_sign_then_verify(void **state)
{
	struct sb_err err;
	char *text = signed_receipt();
	json_t *obj = receipt_mac_verify(text, strlen(text), key, nonce, "e1", 7, &err);

	(void)state;
	assert_non_null(obj);
	assert_string_equal(json_string_value(json_object_get(obj, "status")), "exited");
	json_decref(obj);
	free(text);
}

static void test_tampered_refused(void **state)
{
	struct sb_err err;
	char *text = signed_receipt();
	char *p = strstr(text, "exited");

	(void)state;
	memcpy(p, "exitee", 6);
	assert_null(receipt_mac_verify(text, strlen(text), key, NULL, NULL, -1, &err));
	assert_non_null(strstr(err.msg, "HMAC does not verify"));
	free(text);
}

static void test_other_key_refused(void **state)
{
	uint8_t other[RECEIPT_KEY_BYTES] = { 9 };
	struct sb_err err;
	char *text = signed_receipt();

	(void)state;
	assert_null(receipt_mac_verify(text, strlen(text), other, NULL, NULL, -1, &err));
	assert_int_equal(err.errnum, EPERM);
	free(text);
}

static void test_wrong_binding_refused(void **state)
{
	struct sb_err err;
	char *text = signed_receipt();
	char other_nonce[65];

	(void)state;
	memcpy(other_nonce, nonce, sizeof other_nonce);
	other_nonce[0] = 'f';
	assert_null(receipt_mac_verify(text, strlen(text), key, other_nonce, NULL, -1, &err));
	assert_non_null(strstr(err.msg, "another nonce"));
	assert_null(receipt_mac_verify(text, strlen(text), key, NULL, "e2", -1, &err));
	assert_non_null(strstr(err.msg, "not 'e2'"));
	assert_null(receipt_mac_verify(text, strlen(text), key, NULL, NULL, 6, &err));
	assert_non_null(strstr(err.msg, "generation 7, not 6"));
	free(text);
}

static void test_garbage_refused(void **state)
{
	struct sb_err err;

	(void)state;
	assert_null(receipt_mac_verify("[1,2]", 5, key, NULL, NULL, -1, &err));
	assert_null(receipt_mac_verify("{\"a\":1}", 7, key, NULL, NULL, -1, &err));
	assert_non_null(strstr(err.msg, "no hmac_sha256"));
	assert_null(receipt_mac_verify("{", RECEIPT_MAX_BYTES + 1, key, NULL, NULL, -1, &err));
	assert_int_equal(err.errnum, EMSGSIZE);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_sign_then_verify),
		cmocka_unit_test(test_tampered_refused),
		cmocka_unit_test(test_other_key_refused),
		cmocka_unit_test(test_wrong_binding_refused),
		cmocka_unit_test(test_garbage_refused),
	};
	return cmocka_run_group_tests_name("receipt_mac", tests, NULL, NULL);
}
