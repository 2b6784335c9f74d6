/* Live output's frames on control connections (live_send.h). Each write may wait on a slow client
 * (the connection's own stall bound); the hub never waits for it: the client skips instead. */
#include "live_send.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "control.h"
#include "log.h"
#include "textesc.h"

static const char *const stream_names[LIVE_STREAMS] = { "stdout", "stderr" };

static int chunk_send(struct sb_stream *s, enum live_stream stream, uint64_t offset, const uint8_t *data, size_t len,
		      uint64_t skipped)
{
	struct sb_err err;
	bool escaped = false;
	size_t tlen;
	char *text = textesc_encode(data, len, &tlen, &escaped);
	json_t *msg = text ? json_pack("{s:{s:s, s:I, s:s%, s:b, s:I}}", "output", "stream", stream_names[stream],
				       "offset", (json_int_t)offset, "text", text, tlen, "escaped", escaped, "skipped",
				       (json_int_t)skipped) : NULL;
	int rc = msg ? control_send_stream(s, msg, CONTROL_RESPONSE_CAP, &err) : -1;

	free(text);
	json_decref(msg);
	return rc;
}

/* Chunks of h past off until it ends (0) or the client fails (-1); off moves with them. */
static int forward(struct live_exec *h, struct sb_stream *s, uint64_t off[LIVE_STREAMS])
{
	uint8_t buf[LIVE_CHUNK_MAX]; /* threads here have the default stack */
	struct live_reader r;
	int rc;

	live_exec_read_begin(h, &r, off);
	for (;;) {
		enum live_stream stream;
		uint64_t offset, skipped;
		size_t len;

		rc = live_exec_next(h, &r, buf, &stream, &offset, &len, &skipped, LIVE_WAIT_SLICE_MS);
		if (rc < 0) {
			rc = 0;
			break;
		}
		if (rc > 0 && chunk_send(s, stream, offset, buf, len, skipped) < 0) {
			rc = -1;
			break;
		}
	}
	live_exec_read_end(h, &r);
	memcpy(off, r.off, sizeof r.off);
	return rc;
}

static void *client_thread(void *arg)
{
	struct live_client *lc = arg;
	uint64_t off[LIVE_STREAMS] = { 0, 0 };

	if (forward(lc->hub, lc->stream, off) < 0)
		sb_info("live output: the client stopped taking chunks; its answer follows the exec");
	return NULL;
}

static void client_began(void *ctx, struct live_exec *h)
{
	struct live_client *lc = ctx;

	if (lc->started)
		return; /* one reader per client: a call dispatched again keeps the first */
	lc->hub = live_exec_ref(h);
	lc->started = pthread_create(&lc->thread, NULL, client_thread, lc) == 0;
	if (!lc->started) {
		live_exec_detach(lc->hub, false);
		lc->hub = NULL;
	}
}

void live_send_watch(struct live_client *lc, struct sb_stream *s)
{
	memset(lc, 0, sizeof *lc);
	lc->stream = s;
	lc->watch.began = client_began;
	lc->watch.ctx = lc;
}

bool live_send_join(struct live_client *lc)
{
	if (!lc->started)
		return false;
	pthread_join(lc->thread, NULL);
	live_exec_detach(lc->hub, false);
	lc->started = false;
	return true;
}

static int offset_arg(json_t *req, const char *key, uint64_t *out)
{
	json_t *v = json_object_get(req, key);

	*out = 0;
	if (v == NULL || json_is_null(v))
		return 0;
	if (!json_is_integer(v) || json_integer_value(v) < 0)
		return -1;
	*out = (uint64_t)json_integer_value(v);
	return 0;
}

json_t *live_send_follow(struct sb_stream *s, json_t *req)
{
	const char *exec_id = json_string_value(json_object_get(req, "exec"));
	uint64_t off[LIVE_STREAMS];
	struct live_exec *h;
	struct sb_err err;
	int rc;

	if (exec_id == NULL)
		return control_error("invalid", "follow needs an exec");
	if (offset_arg(req, "offset", &off[LIVE_STDOUT]) < 0 || offset_arg(req, "stderr_offset", &off[LIVE_STDERR]) < 0)
		return control_error("invalid", "an offset is a whole number of bytes, at least 0");
	if (live_exec_attach(exec_id, true, &h, &err) < 0)
		return err.errnum == ENOENT ? json_pack("{s:b, s:b, s:{s:I, s:I}}", "ok", 1, "running", 0, "offsets",
							"stdout", (json_int_t)off[0], "stderr", (json_int_t)off[1]) :
					      control_error_from("unavailable", &err);
	rc = forward(h, s, off);
	live_exec_detach(h, true);
	if (rc < 0)
		return control_error("unavailable", "the follower stopped reading");
	return json_pack("{s:b, s:b, s:{s:I, s:I}}", "ok", 1, "running", 1, "offsets", "stdout", (json_int_t)off[0],
			 "stderr", (json_int_t)off[1]);
}
