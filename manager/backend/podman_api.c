/* podman_api.h over libcurl: plain HTTP on a unix socket (the socket's permissions are the access
 * control, as for Docker's), never a network address, no redirects, bounded in time and size. */
#include "podman_api.h"
#include "curl_handle.h"

#include <curl/curl.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int request_run(CURL *c, const char *socket, const char *method, const char *url, const char *text,
		       long timeout_ms, struct rest_reply *reply, struct sb_err *err)
{
	char curl_err[CURL_ERROR_SIZE] = "";
	struct curl_slist *headers = NULL;
	CURLcode rc;

	if (rest_setopt(c, method, text, NULL, timeout_ms, &headers, curl_err, reply, err) < 0) {
		sb_err_prefix(err, "podman API");
		return -1;
	}
	curl_easy_setopt(c, CURLOPT_UNIX_SOCKET_PATH, socket);
	curl_easy_setopt(c, CURLOPT_URL, url);
	curl_easy_setopt(c, CURLOPT_PROTOCOLS_STR, "http");
	rc = curl_easy_perform(c);
	curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &reply->status);
	curl_slist_free_all(headers);
	if (rc != CURLE_OK)
		return sb_fail(err, rc == CURLE_OPERATION_TIMEDOUT ? ETIMEDOUT : EIO, "podman API %s %s on %s: %s",
			       method, url + strlen("http://d"), socket, rest_failure(rc, reply, curl_err));
	return 0;
}

int podman_request(const char *socket, const char *method, const char *path, json_t *body, long timeout_ms,
		   struct rest_reply *reply, struct sb_err *err)
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
		rest_reply_free(reply);
		return -1;
	}
	rest_reply_parse(reply);
	return 0;
}
