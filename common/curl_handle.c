/* curl_handle.h: the handle and the REST reply. libcurl before 8.11 opens its sockets without close-on-exec, and the manager
 * starts processes (git, sandboxes) from other threads at any moment: a socket to an API server
 * must not leak into them. So libcurl's sockets are opened here, with SOCK_CLOEXEC in the same
 * call (no window between socket() and fcntl()). */
#include "curl_handle.h"

#include <pthread.h>
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
