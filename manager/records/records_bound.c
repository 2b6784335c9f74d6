/* Bounded records (invariant 13, see records.h): a stream of a result kept as a head and a tail
 * with a marker between, and a record too large for an answer made to fit it. Must never split a
 * UTF-8 sequence or an escape of an escaped stream, and never let what a command prints grow a
 * record or an answer without bound. */
#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "records_internal.h"
#include "textesc.h"

/* ---------------------------------------------------------------- bounded records (invariant 13) */

/* A command decides what it prints, so nothing it prints may grow its record, or an answer made of
 * records, without bound: each stream keeps a head and a tail, and a page of records stops before
 * its budget. Every cut falls between whole tokens, so the text stays valid UTF-8 and an escaped
 * stream's "\\xNN" and "\\\\" (common/textesc.c textesc_encode) are never split. */

#define MARKER_FORMAT "\n[... %zu bytes of this output are not kept in the record ...]\n"
/* A text this much over its limit is one already shortened (head, marker, tail): it is not cut
 * again when a record written bounded is served. */
#define MARKER_MAX 96

/* The first limit/2 and the last limit - limit/2 bytes of s (n > limit), cut back to whole
 * tokens, with a marker between them that says how many bytes it stands for. A new string of
 * *len bytes (NUL-terminated), or NULL out of memory. */
static char *text_shorten(const char *s, size_t n, size_t limit, bool escaped, size_t *len)
{
	size_t head_cap = limit / 2, tail_from = n - (limit - head_cap), head = 0, tail = n;
	bool tail_found = false;
	char marker[96], *out;
	int mlen;

	for (size_t i = 0, k; i < n; i += k) {
		k = textesc_token_len(s, n, i, escaped);
		if (i + k <= head_cap)
			head = i + k;
		if (!tail_found && i >= tail_from) {
			tail = i;
			tail_found = true;
		}
	}
	mlen = snprintf(marker, sizeof marker, MARKER_FORMAT, tail - head);
	out = malloc(head + (size_t)mlen + (n - tail) + 1);
	if (!out)
		return NULL;
	memcpy(out, s, head);
	memcpy(out + head, marker, (size_t)mlen);
	memcpy(out + head + (size_t)mlen, s + tail, n - tail);
	*len = head + (size_t)mlen + (n - tail);
	out[*len] = '\0';
	return out;
}

/* A JSON string value shortened to limit bytes (a new reference), or NULL out of memory. */
static json_t *json_shorten(const json_t *text, size_t limit, bool escaped)
{
	size_t len;
	char *s = text_shorten(json_string_value(text), json_string_length(text), limit, escaped, &len);
	json_t *j = s ? json_stringn(s, len) : NULL;

	free(s);
	return j;
}

/* One stream of a result within limit bytes of text. "<name>_bytes" is the agent's count of the
 * whole stream and stays; "<name>_sha256" of the whole stream is the receipt's (verified before
 * the record is written), not recomputed. 1: the text was shortened, 0: it fits, -1: no memory. */
static int stream_bound(json_t *result, const char *name, size_t limit, const json_t *receipt)
{
	char key[32];
	json_t *text = json_object_get(result, name), *sha, *shorter;

	snprintf(key, sizeof key, "%s_sha256", name);
	sha = json_object_get(receipt, key);
	if (json_is_string(sha) && json_object_set(result, key, sha) != 0)
		return -1;
	if (!json_is_string(text) || json_string_length(text) <= limit + MARKER_MAX)
		return 0;
	snprintf(key, sizeof key, "%s_escaped", name);
	shorter = json_shorten(text, limit, json_is_true(json_object_get(result, key)));
	snprintf(key, sizeof key, "%s_truncated", name);
	if (!shorter || json_object_set_new(result, name, shorter) != 0 ||
	    json_object_set_new(result, key, json_true()) != 0)
		return -1;
	return 1;
}

/* Both streams of a result (an object; anything else is left alone): 1 when either was shortened. */
int result_bound(json_t *result, const json_t *receipt, size_t limit)
{
	int out, err;

	if (!json_is_object(result))
		return 0;
	out = stream_bound(result, "stdout", limit, receipt);
	err = stream_bound(result, "stderr", limit, receipt);
	if (out < 0 || err < 0)
		return -1;
	return out || err;
}

/* The result text as stored: a JSON object with its streams bounded, or, when it is not JSON
 * (kept as given, see col_json_parsed), the text itself bounded. A new string, or NULL (no memory). */
char *result_for_record(const char *result_json, const char *receipt_json, size_t limit)
{
	json_t *result cleanup_json = json_loads(result_json, JSON_REJECT_DUPLICATES, NULL);
	json_t *receipt cleanup_json = receipt_json ? json_loads(receipt_json, 0, NULL) : NULL;
	size_t n = strlen(result_json), len;

	if (json_is_object(result))
		return result_bound(result, receipt, limit) < 0 ? NULL : json_dumps(result, JSON_COMPACT);
	/* Both streams' worth: a result that is not JSON is one text. */
	return n <= 2 * limit + MARKER_MAX ? strdup(result_json) : text_shorten(result_json, n, 2 * limit, false, &len);
}

/* Bytes of v serialised as control_send() serialises it (JSON_COMPACT, escapes included). */
size_t json_size(const json_t *v)
{
	return json_dumpb(v, NULL, 0, JSON_COMPACT | JSON_ENCODE_ANY);
}

/* Every string in v (at any depth) shortened to limit bytes, in place; -1 out of memory. */
static int strings_shorten(json_t *v, size_t limit)
{
	json_t *shorter;
	size_t i;

	if (json_is_array(v)) {
		for (i = 0; i < json_array_size(v); i++) {
			json_t *item = json_array_get(v, i);

			if (json_is_string(item) && json_string_length(item) > limit) {
				shorter = json_shorten(item, limit, false);
				if (!shorter || json_array_set_new(v, i, shorter) != 0)
					return -1;
			} else if (strings_shorten(item, limit) != 0) {
				return -1;
			}
		}
	} else if (json_is_object(v)) {
		for (void *it = json_object_iter(v); it; it = json_object_iter_next(v, it)) {
			json_t *item = json_object_iter_value(it);

			if (json_is_string(item) && json_string_length(item) > limit) {
				shorter = json_shorten(item, limit, false);
				if (!shorter || json_object_iter_set_new(v, it, shorter) != 0)
					return -1;
			} else if (strings_shorten(item, limit) != 0) {
				return -1;
			}
		}
	}
	return 0;
}

#define SUMMARY_TEXT_MAX 256  /* bytes of each string a summary keeps */

/* A scalar of a summary: numbers, booleans and null as they are, strings shortened, anything
 * else (objects, arrays) null. A new reference, or NULL out of memory. */
static json_t *summary_value(const json_t *v)
{
	if (json_is_string(v))
		return json_string_length(v) > SUMMARY_TEXT_MAX ? json_shorten(v, SUMMARY_TEXT_MAX, false) :
								  json_copy((json_t *)v);
	if (json_is_number(v) || json_is_boolean(v))
		return json_copy((json_t *)v);
	return json_null();
}

/* The named members of from (an object; else nothing) as summary values, into a new object. */
static json_t *summary_pick(const json_t *from, const char *const keys[], size_t n)
{
	json_t *to = json_object();

	for (size_t i = 0; to && i < n; i++) {
		json_t *v = json_object_get(from, keys[i]);

		if (v && json_object_set_new(to, keys[i], summary_value(v)) != 0) {
			json_decref(to);
			return NULL;
		}
	}
	return to;
}

/* What a record too large to serve even alone keeps: its ids, states and times, and the
 * result's and receipt's counts, flags and digests. Bounded by construction: a fixed set of keys,
 * each a number or at most SUMMARY_TEXT_MAX bytes of text (6 bytes each as JSON escapes), about
 * 50 KiB at worst, under RECORDS_PAGE_MIN_BYTES. */
static json_t *record_summary(const json_t *rec, size_t size)
{
	static const char *const top[] = { "exec_id", "session", "turn", "state", "command", "timeout_seconds",
					   "generation", "nonce", "sandbox", "accepted_ms", "dispatched_ms",
					   "finished_ms", "reason" };
	static const char *const result_keys[] = { "status", "exit_code", "signal", "stdout_bytes", "stderr_bytes",
						   "stdout_sha256", "stderr_sha256", "duration_ms", "error" };
	static const char *const receipt_keys[] = { "nonce", "verified", "status", "exit_code", "stdout_bytes",
						    "stderr_bytes", "stdout_sha256", "stderr_sha256" };
	static const char *const resolution_keys[] = { "outcome", "note", "by_uid", "by_name", "at_ms" };
	json_t *result = json_object_get(rec, "result"), *receipt = json_object_get(rec, "receipt");
	json_t *resolution = json_object_get(rec, "resolution");
	json_t *out = summary_pick(rec, top, sizeof top / sizeof top[0]);
	char note[256];

	snprintf(note, sizeof note, "the record is %zu bytes as JSON, more than one answer holds: its texts, its "
		 "authority and the result's and receipt's other fields are left out", size);
	if (!out || json_object_set_new(out, "result", json_is_object(result) ?
					summary_pick(result, result_keys, sizeof result_keys / sizeof result_keys[0]) :
					summary_value(result)) != 0 ||
	    json_object_set_new(out, "receipt", json_is_object(receipt) ?
				summary_pick(receipt, receipt_keys, sizeof receipt_keys / sizeof receipt_keys[0]) :
				summary_value(receipt)) != 0 ||
	    json_object_set_new(out, "resolution", json_is_object(resolution) ?
				summary_pick(resolution, resolution_keys, sizeof resolution_keys / sizeof resolution_keys[0]) :
				summary_value(resolution)) != 0 ||
	    json_object_set_new(out, "omitted", json_string(note)) != 0) {
		json_decref(out);
		return NULL;
	}
	/* The texts are gone: say so where a reader of each stream looks. */
	if (json_is_object(json_object_get(out, "result")) &&
	    (json_object_set_new(json_object_get(out, "result"), "stdout_truncated", json_true()) != 0 ||
	     json_object_set_new(json_object_get(out, "result"), "stderr_truncated", json_true()) != 0)) {
		json_decref(out);
		return NULL;
	}
	return out;
}

/* rec (consumed) made to fit room bytes: every string shortened to a share of the room, else the
 * summary, else (never expected: the summary is bounded) the exec id and state alone. A new
 * reference marked "truncated", or NULL out of memory. */
json_t *record_fit(json_t *rec, size_t room)
{
	json_t *orig cleanup_json = rec;
	json_t *fit = json_deep_copy(orig);
	size_t size = json_size(orig);

	if (fit && (strings_shorten(fit, room / 64 > 1024 ? room / 64 : 1024) != 0 ||
		    json_object_set_new(fit, "truncated", json_true()) != 0)) {
		json_decref(fit);
		return NULL;
	}
	if (fit && json_size(fit) <= room)
		return fit;
	json_decref(fit);
	fit = record_summary(orig, size);
	if (fit && json_object_set_new(fit, "truncated", json_true()) == 0 && json_size(fit) <= room)
		return fit;
	json_decref(fit);
	fit = json_object();
	if (!fit || json_object_set_new(fit, "exec_id", summary_value(json_object_get(orig, "exec_id"))) != 0 ||
	    json_object_set_new(fit, "state", summary_value(json_object_get(orig, "state"))) != 0 ||
	    json_object_set_new(fit, "truncated", json_true()) != 0) {
		json_decref(fit);
		return NULL;
	}
	return fit;
}
