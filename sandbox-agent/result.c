/* Exec result JSON (see result.h). Output that is not UTF-8, or that a terminal would act on, is
 * escaped (common/textesc.h), never dropped. */
#include "result.h"

#include <stdlib.h>

#include "textesc.h"

static int stream_add(json_t *obj, const char *name, const struct output_capture *c)
{
	char key[32];
	size_t raw_len = 0, text_len = 0;
	uint8_t *raw = output_render(c, &raw_len);
	bool escaped = false;
	char *text = raw ? textesc_encode(raw, raw_len, &text_len, &escaped) : NULL;
	int rc = -1;

	free(raw);
	if (text == NULL)
		return -1;
	/* textesc_encode never yields NUL, so no reader of this JSON meets \u0000 (JSON_ALLOW_NUL). */
	if (json_object_set_new(obj, name, json_stringn(text, text_len)) == 0) {
		snprintf(key, sizeof key, "%s_bytes", name);
		json_object_set_new(obj, key, json_integer((json_int_t)c->total));
		snprintf(key, sizeof key, "%s_truncated", name);
		json_object_set_new(obj, key, json_boolean(output_truncated(c)));
		snprintf(key, sizeof key, "%s_escaped", name);
		json_object_set_new(obj, key, json_boolean(escaped));
		rc = 0;
	}
	free(text);
	return rc;
}

static json_t *receipt_json(const struct receipt_info *r)
{
	if (r == NULL || !r->written)
		return json_null();
	return json_pack("{s:s, s:b, s:s, s:b}", "nonce", r->nonce_hex, "verified", r->verified, "path", r->path,
			 "boundary_confirmed", r->boundary_confirmed);
}

json_t *result_to_json(const struct exec_request *req, const struct exec_outcome *out,
		       const struct receipt_info *receipt)
{
	json_t *obj = json_pack("{s:s, s:I, s:s, s:o, s:o, s:I, s:o}", "exec_id", req->exec_id, "generation",
				(json_int_t)req->generation, "status", exec_status_name(out->status), "exit_code",
				out->status == EXEC_EXITED ? json_integer(out->exit_code) : json_null(), "signal",
				out->status == EXEC_SIGNALED ? json_integer(out->signal) : json_null(),
				"duration_ms", (json_int_t)out->duration_ms, "receipt", receipt_json(receipt));

	if (obj == NULL)
		return NULL;
	if (stream_add(obj, "stdout", &out->out) < 0 || stream_add(obj, "stderr", &out->err) < 0) {
		json_decref(obj);
		return NULL;
	}
	if (out->detail[0] != '\0')
		json_object_set_new(obj, "error", json_string(out->detail));
	return obj;
}
