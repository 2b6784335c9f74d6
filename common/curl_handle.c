/* curl_handle.h: the handle and the REST reply. libcurl before 8.11 opens its sockets without close-on-exec, and the manager
 * starts processes (git, sandboxes) from other threads at any moment: a socket to an API server
 * must not leak into them. So libcurl's sockets are opened here, with SOCK_CLOEXEC in the same
 * call (no window between socket() and fcntl()). */
#include "curl_handle.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

static pthread_once_t curl_once = PTHREAD_ONCE_INIT;

static void curl_start(void)
{
	curl_global_init(CURL_GLOBAL_DEFAULT);
}

static curl_socket_t socket_cloexec(void *user, curlsocktype purpose, struct curl_sockaddr *addr)
{
	(void)user;
	(void)purpose;
	return socket(addr->family, addr->socktype | SOCK_CLOEXEC, addr->protocol);
}

CURL *sb_curl_new(void)
{
	CURL *c;

	pthread_once(&curl_once, curl_start);
	c = curl_easy_init();
	if (c == NULL)
		return NULL;
	curl_easy_setopt(c, CURLOPT_OPENSOCKETFUNCTION, socket_cloexec);
	curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L); /* the daemon is threaded */
	return c;
}

size_t rest_reply_append(struct rest_reply *r, const char *data, size_t len, size_t max)
{
	char *grown;

	if (len > max - r->raw_len) {
		r->too_big = true;
		return 0;
	}
	grown = realloc(r->raw, r->raw_len + len + 1);
	if (grown == NULL)
		return 0;
	memcpy(grown + r->raw_len, data, len);
	r->raw = grown;
	r->raw_len += len;
	r->raw[r->raw_len] = '\0';
	return len;
}

size_t rest_reply_write(char *data, size_t size, size_t n, void *reply)
{
	struct rest_reply *r = reply;

	return rest_reply_append(r, data, size * n, r->max > 0 ? r->max : REST_REPLY_MAX);
}

void rest_reply_parse(struct rest_reply *r)
{
	if (r->body == NULL && r->raw_len > 0)
		r->body = json_loadb(r->raw, r->raw_len, 0, NULL);
}

void rest_reply_free(struct rest_reply *r)
{
	json_decref(r->body);
	free(r->raw);
	memset(r, 0, sizeof *r);
}

const char *rest_reply_message(const struct rest_reply *r)
{
	json_t *m = json_object_get(r->body, "message");

	if (json_is_string(m))
		return json_string_value(m);
	return r->raw != NULL && r->raw[0] != '\0' ? r->raw : "(no message)";
}

const char *rest_failure(CURLcode rc, const struct rest_reply *r, const char *curl_err)
{
	if (rc == CURLE_OPERATION_TIMEDOUT)
		return "no answer in time";
	if (r->too_big)
		return "the reply is over the size bound";
	return curl_err[0] != '\0' ? curl_err : curl_easy_strerror(rc);
}

int rest_setopt(CURL *c, const char *method, const char *body, const char *bearer, long timeout_ms,
		struct curl_slist **headers, char *curl_err, struct rest_reply *r, struct sb_err *err)
{
	char auth[REST_BEARER_MAX + 32];
	struct curl_slist *h = curl_slist_append(NULL, "Accept: application/json");

	if (h != NULL && body != NULL)
		h = curl_slist_append(h, "Content-Type: application/json");
	if (h != NULL && bearer != NULL) {
		if (strlen(bearer) > REST_BEARER_MAX) {
			curl_slist_free_all(h);
			return sb_fail(err, E2BIG, "the bearer token is over %d bytes", REST_BEARER_MAX);
		}
		snprintf(auth, sizeof auth, "Authorization: Bearer %s", bearer);
		h = curl_slist_append(h, auth);
		explicit_bzero(auth, sizeof auth);
	}
	if (h == NULL)
		return sb_fail(err, ENOMEM, "building the request headers");
	*headers = h;
	if (timeout_ms < 1)
		timeout_ms = 1; /* 0 would be no bound at all */
	curl_easy_setopt(c, CURLOPT_CUSTOMREQUEST, method);
	if (body != NULL) {
		curl_easy_setopt(c, CURLOPT_POSTFIELDS, body);
		curl_easy_setopt(c, CURLOPT_POSTFIELDSIZE, (long)strlen(body));
	}
	curl_easy_setopt(c, CURLOPT_HTTPHEADER, h);
	curl_easy_setopt(c, CURLOPT_FOLLOWLOCATION, 0L);
	curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT_MS, timeout_ms < REST_CONNECT_MS ? timeout_ms : REST_CONNECT_MS);
	curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, timeout_ms);
	curl_easy_setopt(c, CURLOPT_USERAGENT, "infra-sandbox-manager");
	curl_easy_setopt(c, CURLOPT_ERRORBUFFER, curl_err);
	curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, rest_reply_write);
	curl_easy_setopt(c, CURLOPT_WRITEDATA, r);
	return 0;
}
