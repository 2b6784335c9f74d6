/* One way to use libcurl in the manager (the brokers' HTTPS calls, the podman and Kubernetes APIs):
 * the handle (the library initialised once, sockets close-on-exec, no signals), and the REST reply
 * it collects, bounded in size, with the words for a failed transfer. */
#ifndef SB_CURL_HANDLE_H
#define SB_CURL_HANDLE_H

#include <curl/curl.h>
#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

#include "error.h"

/* NULL when memory runs out. The caller sets the rest and calls curl_easy_cleanup(). */
CURL *sb_curl_new(void);

#define REST_REPLY_MAX (4 * 1024 * 1024) /* a container or a pod is a few KiB, a list a few more */

struct rest_reply {
	long status;       /* the HTTP status; 0 when no answer came */
	json_t *body;      /* the parsed JSON body (rest_reply_parse), NULL when empty or not JSON */
	char *raw;         /* the body as received (NUL-terminated), for logs and error messages */
	size_t raw_len;
	size_t max;        /* what rest_reply_write keeps at most; 0: REST_REPLY_MAX */
	bool too_big;      /* more came than the bound: the transfer failed (CURLE_WRITE_ERROR) */
};

/* len bytes appended, keeping raw NUL-terminated; 0 (curl then fails the transfer) when raw would
 * pass max bytes (too_big is set) or memory runs out. */
size_t rest_reply_append(struct rest_reply *r, const char *data, size_t len, size_t max);
/* CURLOPT_WRITEFUNCTION, with a struct rest_reply as CURLOPT_WRITEDATA. */
size_t rest_reply_write(char *data, size_t size, size_t n, void *reply);
/* body from raw, once the transfer is over. */
void rest_reply_parse(struct rest_reply *r);
void rest_reply_free(struct rest_reply *r);
/* The server's own words for a failed call: the body's "message", else the body, else
 * "(no message)". */
const char *rest_reply_message(const struct rest_reply *r);
#define REST_CONNECT_MS 5000 /* the connect, within a call's own bound */
#define REST_BEARER_MAX 8192

/* What every REST call sets alike, on c (from sb_curl_new): the method and the JSON body (NULL:
 * none); the headers: Accept and, with a body, Content-Type application/json, and Authorization:
 * Bearer when bearer is not NULL (its line wiped here once libcurl holds its own copy); timeout_ms
 * in all, the connect within REST_CONNECT_MS of it; no redirect followed; the user agent; curl's
 * words into curl_err (CURL_ERROR_SIZE bytes); the body into r. The caller sets the URL and what is
 * its own (protocols, TLS, socket), and frees *headers after the transfer. -1 with err: E2BIG for a
 * bearer over REST_BEARER_MAX bytes, ENOMEM. */
int rest_setopt(CURL *c, const char *method, const char *body, const char *bearer, long timeout_ms,
		struct curl_slist **headers, char *curl_err, struct rest_reply *r, struct sb_err *err);
/* Why a transfer that ended with rc failed: "no answer in time", "the reply is over the size
 * bound", else curl's words (curl_err, the CURLOPT_ERRORBUFFER, or its text for rc). */
const char *rest_failure(CURLcode rc, const struct rest_reply *r, const char *curl_err);

#endif
