/* The agent's result believed only as far as its receipt proves it (result_proof.h). Every field the
 * records keep as the exec's outcome is compared with the signed receipt's; the output text, bounded
 * and possibly shortened, is compared by digest whenever it is whole. Never trusts a field the
 * receipt does not carry. */
#include "result_proof.h"

#include <errno.h>
#include <mbedtls/sha256.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "textesc.h"

/* The statuses an agent reports with a receipt; "uncertain" and "refused" are the manager's own
 * words, never taken from an agent. */
static const char *const agent_final[] = { "exited", "signaled", "timed_out", "cancelled" };

static bool status_final(const char *s)
{
	for (size_t i = 0; i < sizeof agent_final / sizeof agent_final[0]; i++)
		if (strcmp(s, agent_final[i]) == 0)
			return true;
	return false;
}

/* A member as text for a message: its compact JSON, "absent" when missing. */
static void member_text(const json_t *obj, const char *name, char *out, size_t size)
{
	const json_t *v = json_object_get(obj, name);
	char *text = v ? json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY | JSON_ENSURE_ASCII) : NULL;

	snprintf(out, size, "%.60s", v == NULL ? "absent" : text ? text : "?");
	free(text);
}

/* The member name is the same in both, as JSON (null equals null, 3 equals 3, never 3 and "3"). */
static int same_member(const json_t *result, const json_t *receipt, const char *name, struct sb_err *err)
{
	const json_t *a = json_object_get(result, name), *b = json_object_get(receipt, name);
	char have[64], want[64];

	if (a != NULL && b != NULL && json_equal((json_t *)a, (json_t *)b))
		return 0;
	member_text(result, name, have, sizeof have);
	member_text(receipt, name, want, sizeof want);
	return sb_fail(err, 0, "the agent's result says %s %s, its receipt %s", name, have, want);
}

/* One stream's text, whole: its bytes (decoded as they were escaped) must have the receipt's digest. */
static int same_digest(const json_t *result, const json_t *receipt, const char *stream, struct sb_err *err)
{
	char key[32], hex[2 * 32 + 1];
	const json_t *text;
	const char *want;
	unsigned char digest[32];
	uint8_t *raw;
	size_t len;

	snprintf(key, sizeof key, "%s_truncated", stream);
	if (!json_is_boolean(json_object_get(result, key)))
		return sb_fail(err, 0, "the agent's result does not say whether its %s is whole", stream);
	if (json_is_true(json_object_get(result, key)))
		return 0; /* shortened: only the byte count, compared already, can be checked */
	snprintf(key, sizeof key, "%s_sha256", stream);
	want = json_string_value(json_object_get(receipt, key));
	text = json_object_get(result, stream);
	if (want == NULL || !json_is_string(text))
		return sb_fail(err, 0, "the agent's result or receipt has no %s to compare", stream);
	len = json_string_length(text);
	raw = malloc(len + 1);
	if (raw == NULL)
		return sb_fail(err, ENOMEM, "checking the %s of the agent's result", stream);
	snprintf(key, sizeof key, "%s_escaped", stream);
	if (json_is_true(json_object_get(result, key)))
		len = textesc_decode(json_string_value(text), len, raw);
	else
		memcpy(raw, json_string_value(text), len);
	(void)mbedtls_sha256_ret(raw, len, digest, 0);
	free(raw);
	for (size_t i = 0; i < sizeof digest; i++)
		snprintf(hex + 2 * i, 3, "%02x", digest[i]);
	if (strcmp(hex, want) != 0)
		return sb_fail(err, 0, "the agent's result carries %s that its receipt's digest does not match",
			       stream);
	return 0;
}

int result_proof_check(const json_t *result, const json_t *receipt, struct sb_err *err)
{
	static const char *const same[] = { "status", "exit_code", "signal", "stdout_bytes", "stderr_bytes" };
	const char *status = json_string_value(json_object_get(result, "status"));

	char have[64];

	/* A receipt that does not confirm the command's namespace empty proves no end: something of the
	 * command may still run, so no status of it is final (the caller settles it uncertain and retires
	 * the sandbox). */
	if (!json_is_true(json_object_get(json_object_get(receipt, "boundary"), "confirmed")))
		return sb_fail(err, EPROTO, "the receipt says the command's namespace was not confirmed empty");
	if (!json_is_object(result) || !json_is_object(receipt))
		return sb_fail(err, 0, "the agent's result or receipt is not a JSON object");
	if (status == NULL || !status_final(status)) {
		member_text(result, "status", have, sizeof have);
		return sb_fail(err, 0, "the agent's result says status %s, which no finished exec has", have);
	}
	for (size_t i = 0; i < sizeof same / sizeof same[0]; i++)
		if (same_member(result, receipt, same[i], err) < 0)
			return -1;
	if (same_digest(result, receipt, "stdout", err) < 0 || same_digest(result, receipt, "stderr", err) < 0)
		return -1;
	return 0;
}
