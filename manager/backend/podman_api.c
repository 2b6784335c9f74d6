/* podman_api.h over libcurl: plain HTTP on a unix socket (the socket's permissions are the access
 * control, as for Docker's), never a network address, no redirects, bounded in time and size. */
#include "podman_api.h"
#include "curl_handle.h"

#include <curl/curl.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Inspect of a container is a few KiB; the logs we read are tailed. A service that answers more
 * is not one we understand. */
#define REPLY_MAX (4 * 1024 * 1024)
#define CONNECT_TIMEOUT_MS 5000

static size_t reply_add(char *data, size_t size, size_t n, void *user)
{
	struct podman_reply *r = user;
	size_t len = size * n;
	char *grown;

	if (len > REPLY_MAX - r->raw_len)
		return 0; /* makes curl fail with CURLE_WRITE_ERROR: too big */
	grown = realloc(r->raw, r->raw_len + len + 1);
	if (grown == NULL)
		return 0;
	memcpy(grown + r->raw_len, data, len);
	r->raw = grown;
	r->raw_len += len;
	r->raw[r->raw_len] = '\0';
	return len;
}

void podman_reply_free(struct podman_reply *reply)
{
	json_decref(reply->body);
	free(reply->raw);
	memset(reply, 0, sizeof *reply);
}

const char *podman_reply_message(const struct podman_reply *reply)
{
	json_t *m = json_object_get(reply->body, "message");

	if (json_is_string(m))
		return json_string_value(m);
	return reply->raw != NULL && reply->raw[0] != '\0' ? reply->raw : "(no message)";
}

static int request_run(CURL *c, const char *socket, const char *method, const char *url, const char *text,
		       long timeout_ms, struct podman_reply *reply, struct sb_err *err)
{
	char curl_err[CURL_ERROR_SIZE] = "";
	struct curl_slist *headers = NULL;
	CURLcode rc;

	headers = curl_slist_append(headers, "Accept: application/json");
	if (text != NULL)
		headers = curl_slist_append(headers, "Content-Type: application/json");
	if (headers == NULL)
		return sb_fail(err, ENOMEM, "podman API: building the request headers");
	curl_easy_setopt(c, CURLOPT_UNIX_SOCKET_PATH, socket);
	curl_easy_setopt(c, CURLOPT_URL, url);
	curl_easy_setopt(c, CURLOPT_PROTOCOLS_STR, "http");
	curl_easy_setopt(c, CURLOPT_FOLLOWLOCATION, 0L);
	curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT_MS, timeout_ms < CONNECT_TIMEOUT_MS ? timeout_ms : CONNECT_TIMEOUT_MS);
	curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, timeout_ms);
	curl_easy_setopt(c, CURLOPT_HTTPHEADER, headers);
	curl_easy_setopt(c, CURLOPT_USERAGENT, "infra-sandbox-manager");
	curl_easy_setopt(c, CURLOPT_ERRORBUFFER, curl_err);
	curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, reply_add);
	curl_easy_setopt(c, CURLOPT_WRITEDATA, reply);
	if (text != NULL) {
		curl_easy_setopt(c, CURLOPT_POSTFIELDS, text);
		curl_easy_setopt(c, CURLOPT_POSTFIELDSIZE, (long)strlen(text));
	}
	curl_easy_setopt(c, CURLOPT_CUSTOMREQUEST, method);
	rc = curl_easy_perform(c);
	curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &reply->status);
	curl_slist_free_all(headers);
	if (rc != CURLE_OK)
		return sb_fail(err, rc == CURLE_OPERATION_TIMEDOUT ? ETIMEDOUT : EIO, "podman API %s %s on %s: %s",
			       method, url + strlen("http://d"), socket,
			       rc == CURLE_OPERATION_TIMEDOUT ? "no answer in time"
			       : rc == CURLE_WRITE_ERROR     ? "the reply is over the size bound"
			       : curl_err[0]                 ? curl_err
							     : curl_easy_strerror(rc));
	return 0;
}

int podman_request(const char *socket, const char *method, const char *path, json_t *body, long timeout_ms,
		   struct podman_reply *reply, struct sb_err *err)
{
	char url[1024];
	char *text = NULL;
	CURL *c;
	int rc;

	memset(reply, 0, sizeof *reply);
	if (snprintf(url, sizeof url, "http://d/" PODMAN_API_VERSION "%s", path) >= (int)sizeof url)
		return sb_fail(err, ENAMETOOLONG, "podman API: the request path is too long");
	if (body != NULL && (text = json_dumps(body, JSON_COMPACT)) == NULL)
		return sb_fail(err, ENOMEM, "podman API: encoding the request body");
	c = sb_curl_new();
	if (c == NULL) {
		free(text);
		return sb_fail(err, ENOMEM, "podman API: curl_easy_init failed");
	}
	rc = request_run(c, socket, method, url, text, timeout_ms, reply, err);
	curl_easy_cleanup(c);
	free(text);
	if (rc < 0) {
		podman_reply_free(reply);
		return -1;
	}
	if (reply->raw_len > 0)
		reply->body = json_loadb(reply->raw, reply->raw_len, 0, NULL);
	return 0;
}
