/* The managers' list and the follow rule (see follow.h). A resend happens only after an answer
 * that says nothing was recorded and nothing ran ("owned"), or when nothing reached a manager
 * whole; a request that was sent and got no answer is never sent again (it may have run). */
#include "follow.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>


static int list_add(struct follow_list *l, const char *path, size_t len, const char *from, struct sb_err *err)
{
	if (len == 0)
		return sb_fail(err, 0, "%s names an empty socket path", from);
	if (len >= FOLLOW_PATH_MAX)
		return sb_fail(err, 0, "%s: the socket path %.*s... is too long (max %d bytes)", from, 64,
			       path, FOLLOW_PATH_MAX - 1);
	if (l->n == FOLLOW_SOCKETS_MAX)
		return sb_fail(err, 0, "%s names more than %d manager sockets", from, FOLLOW_SOCKETS_MAX);
	memcpy(l->path[l->n], path, len);
	l->path[l->n][len] = '\0';
	l->n++;
	return 0;
}

static int wait_parse(struct follow_list *l, struct sb_err *err)
{
	const char *v = getenv("SANDBOX_MANAGER_OWNED_WAIT_MS");
	char *end;

	l->owned_wait_ms = FOLLOW_WAIT_MS_DEFAULT;
	if (v == NULL || v[0] == '\0')
		return 0;
	errno = 0;
	l->owned_wait_ms = strtol(v, &end, 10);
	if (v[0] < '0' || v[0] > '9' || *end != '\0' || errno != 0 || l->owned_wait_ms > FOLLOW_WAIT_MS_MAX)
		return sb_fail(err, 0, "SANDBOX_MANAGER_OWNED_WAIT_MS takes a whole number of ms from 0 to %d, "
			       "not '%s'", FOLLOW_WAIT_MS_MAX, v);
	return 0;
}

int follow_list_parse(struct follow_list *l, const json_t *flags, struct sb_err *err)
{
	const char *env = getenv("SANDBOX_MANAGER_SOCKET");
	size_t i, flags_n;
	json_t *v;

	memset(l, 0, sizeof *l);
	if (flags == NULL)
		return sb_fail(err, ENOMEM, "out of memory");
	if (wait_parse(l, err) < 0)
		return -1;
	json_array_foreach(flags, i, v)
		if (list_add(l, json_string_value(v), json_string_length(v), "--socket", err) < 0)
			return -1;
	flags_n = l->n;
	/* A path holding ':' cannot be listed there; --socket takes it. tls://HOST:PORT ends at the
	 * ':' after its port ([v6] hosts keep theirs inside the brackets). */
	for (const char *p = env; flags_n == 0 && env != NULL && env[0] != '\0'; p++) {
		const char *colon = strchrnul(p, ':');

		if (strncmp(p, "tls://", 6) == 0) {
			const char *host_end = p[6] == '[' ? strchrnul(p + 6, ']') : p + 6;

			colon = strchrnul(host_end, ':');
			if (*colon == ':')
				colon = strchrnul(colon + 1, ':');
		}

		if (list_add(l, p, (size_t)(colon - p), "SANDBOX_MANAGER_SOCKET", err) < 0)
			return -1;
		if (*colon == '\0')
			break;
		p = colon;
	}
	if (l->n == 0)
		return sb_fail(err, 0, "no manager socket: pass --socket PATH (or tls://HOST:PORT) or set "
			       "SANDBOX_MANAGER_SOCKET");
	return 0;
}

/* Sleep ms, looking at stop every STOP_POLL_MS; 0 slept whole, 1 stopped. */
#define STOP_POLL_MS 100
static int sleep_ms(long ms, follow_stop stop, void *ctx)
{
	while (ms > 0) {
		long step = stop != NULL && ms > STOP_POLL_MS ? STOP_POLL_MS : ms;
		struct timespec ts = { step / 1000, (step % 1000) * 1000000L };

		if (stop != NULL && stop(ctx))
			return 1;
		while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
			;
		ms -= step;
	}
	return stop != NULL && stop(ctx);
}

/* The first manager of l that takes req; FOLLOW_NOT_SENT with the last one's error when none. */
static int list_first(const struct follow_list *l, json_t *req, follow_exchange x, void *ctx, json_t **resp,
		      struct sb_err *err)
{
	for (size_t i = 0; i < l->n; i++) {
		int rc = x(ctx, l->path[i], req, resp, err);

		if (rc != FOLLOW_NOT_SENT)
			return rc;
	}
	if (l->n > 1)
		sb_err_prefix(err, "none of the %zu manager sockets is reachable; the last", l->n);
	return FOLLOW_NOT_SENT;
}

/* An answer's "owned" refusal: 1 with its address (or "") and retry_after_ms, else 0. */
static int owned(json_t *resp, char address[FOLLOW_PATH_MAX], long *retry_ms)
{
	json_t *e = json_object_get(resp, "error"), *a = json_object_get(e, "address");
	json_int_t r = json_integer_value(json_object_get(e, "retry_after_ms"));

	if (json_is_true(json_object_get(resp, "ok")) ||
	    strcmp(json_string_value(json_object_get(e, "kind")) ?: "", "owned") != 0)
		return 0;
	address[0] = '\0';
	/* The owner's address as it advertised it: an absolute path, or tls://HOST:PORT (serve
	 * --advertise; the client verifies that manager as any other); anything else is none. */
	if (json_is_string(a) && (json_string_value(a)[0] == '/' || strncmp(json_string_value(a), "tls://", 6) == 0) &&
	    json_string_length(a) < FOLLOW_PATH_MAX)
		memcpy(address, json_string_value(a), json_string_length(a) + 1);
	*retry_ms = r < 0 ? 0 : r > FOLLOW_WAIT_MS_MAX ? FOLLOW_WAIT_MS_MAX : (long)r;
	return 1;
}

int follow_call(const struct follow_list *l, json_t *req, follow_exchange x, follow_stop stop, void *ctx,
		json_t **resp, struct sb_err *err)
{
	char address[FOLLOW_PATH_MAX];
	long retry_ms, waited = 0;
	int rc, hops = 0;

	*resp = NULL;
	rc = list_first(l, req, x, ctx, resp, err);
	while (rc == FOLLOW_ANSWERED && hops < FOLLOW_HOPS_MAX && owned(*resp, address, &retry_ms)) {
		json_t *next = NULL;

		hops++;
		/* Nothing was recorded and nothing ran: the owner is asked the same. */
		if (address[0] != '\0' && (rc = x(ctx, address, req, &next, err)) != FOLLOW_NOT_SENT) {
			json_decref(*resp);
			*resp = next;
			continue;
		}
		/* The owner is unreachable (dead, or gone): once its lease has expired, the first manager
		 * of the list takes the session over. A wait past the bound would not help, and a call given
		 * up while it waits is not sent again: the refusal stands. */
		if (waited + retry_ms + FOLLOW_WAIT_MARGIN_MS > l->owned_wait_ms ||
		    sleep_ms(retry_ms + FOLLOW_WAIT_MARGIN_MS, stop, ctx))
			return FOLLOW_ANSWERED;
		waited += retry_ms + FOLLOW_WAIT_MARGIN_MS;
		json_decref(*resp);
		*resp = NULL;
		rc = list_first(l, req, x, ctx, resp, err);
	}
	return rc;
}
