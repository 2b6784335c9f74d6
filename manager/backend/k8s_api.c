/* k8s_api.h over libcurl: TLS to the API server with its CA only (the kubeconfig's, never
 * verification off), the manager's client certificate or bearer token, no redirects, every call
 * bounded in time and size; 429 and 5xx asked again while time is left. */
#include "k8s_api.h"
#include "clock.h"
#include "curl_handle.h"

#include <curl/curl.h>
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define EVENT_MAX (1024 * 1024)     /* one watch event's line */
#define BACKOFF_FIRST_MS 100
#define BACKOFF_MAX_MS 2000

struct transfer {
	CURL *curl;
	struct rest_reply *reply;
	/* a watch: lines of events, each to fn */
	k8s_event_fn fn;
	void *user;
	int outcome;       /* K8S_WATCH_* once an event decided */
	long retry_after;  /* seconds, from the header; 0 when none */
};

/* Each complete line of a 200 watch is one event; an ERROR event with code 410 says the
 * resourceVersion is too old. Another status's body is kept whole (a Status). */
static int event_run(struct transfer *t, char *line)
{
	json_t *ev = json_loads(line, 0, NULL), *obj;
	const char *type;
	int rc = 0;

	if (ev == NULL)
		return 0;
	type = json_string_value(json_object_get(ev, "type"));
	obj = json_object_get(ev, "object");
	if (type != NULL && strcmp(type, "ERROR") == 0) {
		if (json_integer_value(json_object_get(obj, "code")) == 410)
			t->outcome = K8S_WATCH_GONE;
		else
			t->outcome = K8S_WATCH_ENDED;
		rc = 1;
	} else if (type != NULL && json_is_object(obj) && t->fn(t->user, type, obj) == 1) {
		t->outcome = K8S_WATCH_DECIDED;
		rc = 1;
	}
	json_decref(ev);
	return rc;
}

static size_t reply_add(char *data, size_t size, size_t n, void *user)
{
	struct transfer *t = user;
	size_t len = size * n;
	long status = 0;
	char *nl;

	if (t->fn == NULL)
		return rest_reply_append(t->reply, data, len, REST_REPLY_MAX);
	curl_easy_getinfo(t->curl, CURLINFO_RESPONSE_CODE, &status);
	if (status != 200)
		return rest_reply_append(t->reply, data, len, 64 * 1024);
	if (rest_reply_append(t->reply, data, len, EVENT_MAX) != len)
		return 0;
	while ((nl = memchr(t->reply->raw, '\n', t->reply->raw_len)) != NULL) {
		size_t used = (size_t)(nl - t->reply->raw) + 1;

		*nl = '\0';
		if (event_run(t, t->reply->raw) == 1)
			return 0; /* decided: ends the transfer (CURLE_WRITE_ERROR, told apart by outcome) */
		memmove(t->reply->raw, t->reply->raw + used, t->reply->raw_len - used + 1);
		t->reply->raw_len -= used;
	}
	return len;
}

static size_t header_seen(char *data, size_t size, size_t n, void *user)
{
	struct transfer *t = user;
	size_t len = size * n;

	if (len > 12 && strncasecmp(data, "Retry-After:", 12) == 0)
		t->retry_after = strtol(data + 12, NULL, 10);
	return len;
}

/* One attempt. */
static int attempt(const struct k8s_conn *c, struct transfer *t, const char *method, const char *url,
		   const char *text, long timeout_ms, struct sb_err *err)
{
	char curl_err[CURL_ERROR_SIZE] = "";
	struct curl_slist *headers = NULL;
	struct curl_blob ca = { c->ca_pem, c->ca_len, CURL_BLOB_NOCOPY };
	struct curl_blob cert = { c->cert_pem, c->cert_len, CURL_BLOB_NOCOPY };
	struct curl_blob key = { c->key_pem, c->key_len, CURL_BLOB_NOCOPY };
	CURL *h = sb_curl_new();
	CURLcode rc;

	if (h == NULL)
		return sb_fail(err, ENOMEM, "Kubernetes API: curl_easy_init failed");
	t->curl = h;
	if (rest_setopt(h, method, text, c->token, timeout_ms, &headers, curl_err, t->reply, err) < 0) {
		curl_easy_cleanup(h);
		sb_err_prefix(err, "Kubernetes API");
		return -1;
	}
	curl_easy_setopt(h, CURLOPT_URL, url);
	curl_easy_setopt(h, CURLOPT_PROTOCOLS_STR, strncmp(c->server, "https:", 6) == 0 ? "https" : "http");
	curl_easy_setopt(h, CURLOPT_SSL_VERIFYPEER, 1L);
	curl_easy_setopt(h, CURLOPT_SSL_VERIFYHOST, 2L);
	if (c->ca_pem != NULL)
		curl_easy_setopt(h, CURLOPT_CAINFO_BLOB, &ca);
	if (c->cert_pem != NULL) {
		curl_easy_setopt(h, CURLOPT_SSLCERT_BLOB, &cert);
		curl_easy_setopt(h, CURLOPT_SSLKEY_BLOB, &key);
	}
	/* A watch reads its events as they come (reply_add), and a refusal's Retry-After. */
	curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, reply_add);
	curl_easy_setopt(h, CURLOPT_WRITEDATA, t);
	curl_easy_setopt(h, CURLOPT_HEADERFUNCTION, header_seen);
	curl_easy_setopt(h, CURLOPT_HEADERDATA, t);
	rc = curl_easy_perform(h);
	curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &t->reply->status);
	curl_slist_free_all(headers);
	curl_easy_cleanup(h);
	t->curl = NULL;
	/* A watch ends at its bound, or when an event decided: neither is a failure. */
	if (t->fn != NULL && (t->outcome != K8S_WATCH_ENDED || rc == CURLE_OPERATION_TIMEDOUT))
		return 0;
	if (rc != CURLE_OK)
		return sb_fail(err, rc == CURLE_OPERATION_TIMEDOUT ? ETIMEDOUT : EIO, "Kubernetes API %s %s: %s", method, url,
			       rest_failure(rc, t->reply, curl_err));
	return 0;
}

static bool retried(long status)
{
	return status == 429 || (status >= 500 && status <= 599);
}

int k8s_request(const struct k8s_conn *c, const char *method, const char *path, json_t *body, long timeout_ms,
		struct rest_reply *reply, struct sb_err *err)
{
	int64_t deadline = clock_mono_ms() + timeout_ms;
	long backoff = BACKOFF_FIRST_MS;
	char url[2048], *text = NULL;
	struct rest_reply last = { 0 }; /* the previous answer, while a retry is asked */

	memset(reply, 0, sizeof *reply);
	if (snprintf(url, sizeof url, "%s%s", c->server, path) >= (int)sizeof url)
		return sb_fail(err, ENAMETOOLONG, "Kubernetes API: the request path is too long");
	if (body != NULL && (text = json_dumps(body, JSON_COMPACT)) == NULL)
		return sb_fail(err, ENOMEM, "Kubernetes API: encoding the request body");
	for (;;) {
		struct transfer t = { .reply = reply };
		long pause;

		if (attempt(c, &t, method, url, text, clock_remaining_ms(deadline), err) < 0) {
			rest_reply_free(reply);
			if (last.status == 0) {
				free(text);
				return -1;
			}
			/* A retry that ran out of the bound (or could not connect) says less than the
			 * server's own last answer, which stands. */
			*reply = last;
			*err = (struct sb_err){ 0 };
			break;
		}
		rest_reply_free(&last);
		pause = t.retry_after > 0 ? t.retry_after * 1000 : backoff;
		if (pause > BACKOFF_MAX_MS)
			pause = BACKOFF_MAX_MS;
		/* The last answer stands when no time is left for another. */
		if (!retried(reply->status) || clock_remaining_ms(deadline) <= pause)
			break;
		last = *reply;
		memset(reply, 0, sizeof *reply);
		usleep((useconds_t)pause * 1000);
		backoff = backoff * 2 > BACKOFF_MAX_MS ? BACKOFF_MAX_MS : backoff * 2;
	}
	free(text);
	rest_reply_parse(reply);
	return 0;
}

int k8s_watch(const struct k8s_conn *c, const char *path, long timeout_ms, k8s_event_fn fn, void *user,
	      struct sb_err *err)
{
	struct rest_reply reply = { 0 };
	struct transfer t = { .reply = &reply, .fn = fn, .user = user, .outcome = K8S_WATCH_ENDED };
	char url[2048];
	int rc;

	if (snprintf(url, sizeof url, "%s%s", c->server, path) >= (int)sizeof url)
		return sb_fail(err, ENAMETOOLONG, "Kubernetes API: the watch path is too long");
	rc = attempt(c, &t, "GET", url, NULL, timeout_ms, err);
	if (rc == 0 && reply.status == 410)
		t.outcome = K8S_WATCH_GONE;
	else if (rc == 0 && reply.status != 200 && !retried(reply.status) && reply.status != 0) {
		rest_reply_parse(&reply);
		rc = sb_fail(err, EIO, "Kubernetes API: the watch was refused (HTTP %ld): %s", reply.status,
			     rest_reply_message(&reply));
	}
	rest_reply_free(&reply);
	return rc < 0 ? -1 : t.outcome;
}
