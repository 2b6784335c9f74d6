/* result_proof_check: the agent's unsigned result recorded only as far as its receipt proves it
 * (issue 27). Each field the records keep is changed in turn and must be refused, naming it. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>
#include <jansson.h>
#include <mbedtls/sha256.h>

#include "result_proof.h"
#include "testutil.h"

static void sha_hex(const char *bytes, size_t len, char hex[65])
{
	unsigned char d[32];

	(void)mbedtls_sha256_ret((const unsigned char *)bytes, len, d, 0);
	for (size_t i = 0; i < 32; i++)
		snprintf(hex + 2 * i, 3, "%02x", d[i]);
}

/* A result and receipt as the agent makes them for `printf 'hi\n'; printf '\x01\xff' >&2; exit 3`:
 * stderr is not UTF-8, so it travels escaped. */
static void pair(json_t **result, json_t **receipt)
{
	char out_hex[65], err_hex[65];

	sha_hex("hi\n", 3, out_hex);
	sha_hex("\x01\xff", 2, err_hex);
	*result = json_pack("{s:s, s:i, s:n, s:s, s:i, s:b, s:b, s:s, s:i, s:b, s:b}", "status", "exited", "exit_code", 3,
			    "signal", "stdout", "hi\n", "stdout_bytes", 3, "stdout_truncated", 0, "stdout_escaped", 0,
			    "stderr", "\x01\\xff", "stderr_bytes", 2, "stderr_truncated", 0, "stderr_escaped", 1);
	*receipt = json_pack("{s:s, s:i, s:n, s:i, s:s, s:i, s:s, s:{s:b}}", "status", "exited", "exit_code", 3,
			     "signal", "stdout_bytes", 3, "stdout_sha256", out_hex, "stderr_bytes", 2, "stderr_sha256",
			     err_hex, "boundary", "confirmed", 1);
	assert_non_null(*result);
	assert_non_null(*receipt);
}

static void expect_refused(json_t *result, json_t *receipt, const char *want)
{
	struct sb_err err;

	assert_int_equal(result_proof_check(result, receipt, &err), -1);
	assert_contains(err.msg, want);
	json_decref(result);
	json_decref(receipt);
}

static void test_matching_result_passes(void **state)
{
	json_t *result, *receipt;
	struct sb_err err;

	(void)state;
	pair(&result, &receipt);
	assert_int_equal(result_proof_check(result, receipt, &err), 0);
	json_decref(result);
	json_decref(receipt);
}

static void test_non_final_status_refused(void **state)
{
	static const char *const words[] = { "running", "uncertain", "refused", "dispatched", "" };
	json_t *result, *receipt;

	(void)state;
	for (size_t i = 0; i < sizeof words / sizeof words[0]; i++) {
		pair(&result, &receipt);
		/* Even when the receipt says the same word: no agent may report these. */
		json_object_set_new(result, "status", json_string(words[i]));
		json_object_set_new(receipt, "status", json_string(words[i]));
		expect_refused(result, receipt, "which no finished exec has");
	}
	pair(&result, &receipt);
	json_object_del(result, "status");
	expect_refused(result, receipt, "status absent");
	pair(&result, &receipt);
	json_object_set_new(result, "status", json_integer(0));
	expect_refused(result, receipt, "status 0");
}

static void test_each_field_compared(void **state)
{
	json_t *result, *receipt;

	(void)state;
	pair(&result, &receipt);
	json_object_set_new(result, "status", json_string("signaled"));
	expect_refused(result, receipt, "says status \"signaled\", its receipt \"exited\"");
	pair(&result, &receipt);
	json_object_set_new(result, "exit_code", json_integer(0));
	expect_refused(result, receipt, "exit_code 0, its receipt 3");
	pair(&result, &receipt);
	json_object_set_new(result, "exit_code", json_string("3"));
	expect_refused(result, receipt, "exit_code \"3\", its receipt 3");
	pair(&result, &receipt);
	json_object_set_new(result, "signal", json_integer(9));
	expect_refused(result, receipt, "signal 9, its receipt null");
	pair(&result, &receipt);
	json_object_del(result, "signal");
	expect_refused(result, receipt, "signal absent");
	pair(&result, &receipt);
	json_object_set_new(result, "stdout_bytes", json_integer(4));
	expect_refused(result, receipt, "stdout_bytes 4, its receipt 3");
	pair(&result, &receipt);
	json_object_set_new(result, "stderr_bytes", json_integer(1));
	expect_refused(result, receipt, "stderr_bytes 1, its receipt 2");
}

static void test_whole_output_digest_compared(void **state)
{
	json_t *result, *receipt;
	struct sb_err err;

	(void)state;
	pair(&result, &receipt);
	json_object_set_new(result, "stdout", json_string("ho\n"));
	expect_refused(result, receipt, "carries stdout that its receipt's digest does not match");
	/* Escaped text is compared as the bytes it stands for: the same text read raw differs. */
	pair(&result, &receipt);
	json_object_set_new(result, "stderr_escaped", json_false());
	expect_refused(result, receipt, "carries stderr that");
	/* A shortened stream has only its byte count to prove; one that does not say whether it is
	 * whole is refused (it would escape the digest). */
	pair(&result, &receipt);
	json_object_set_new(result, "stdout", json_string("h"));
	json_object_set_new(result, "stdout_truncated", json_true());
	assert_int_equal(result_proof_check(result, receipt, &err), 0);
	json_object_set_new(result, "stdout_truncated", json_string("no"));
	expect_refused(result, receipt, "does not say whether its stdout is whole");
}

/* The receipt's boundary.confirmed false, absent, or not true: no end is proven, whatever the
 * result says (mutation M15: the manager recorded such an exec with the agent's status and kept its
 * sandbox for the next call). */
static void test_unconfirmed_end_refused(void **state)
{
	json_t *result, *receipt;

	(void)state;
	pair(&result, &receipt);
	json_object_set_new(json_object_get(receipt, "boundary"), "confirmed", json_false());
	expect_refused(result, receipt, "not confirmed empty");
	pair(&result, &receipt);
	json_object_del(json_object_get(receipt, "boundary"), "confirmed");
	expect_refused(result, receipt, "not confirmed empty");
	pair(&result, &receipt);
	json_object_set_new(json_object_get(receipt, "boundary"), "confirmed", json_string("true"));
	expect_refused(result, receipt, "not confirmed empty");
	pair(&result, &receipt);
	json_object_del(receipt, "boundary");
	expect_refused(result, receipt, "not confirmed empty");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_matching_result_passes),
		cmocka_unit_test(test_non_final_status_refused),
		cmocka_unit_test(test_each_field_compared),
		cmocka_unit_test(test_whole_output_digest_compared),
		cmocka_unit_test(test_unconfirmed_end_refused),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
