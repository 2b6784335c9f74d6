/* The Docker-compatible REST API of a Podman service (or a Docker Engine), over its unix socket,
 * through libcurl: one bounded request, one JSON reply (curl_handle.h: rest_reply_free, and
 * rest_reply_message for the service's own words). What the calls mean is backend_podman.c's. */
#ifndef SB_PODMAN_API_H
#define SB_PODMAN_API_H

#include <jansson.h>

#include "curl_handle.h"
#include "error.h"

#define PODMAN_API_VERSION "v1.41"

/* METHOD /v1.41<path> with an optional JSON body, waiting at most timeout_ms. 0 when an HTTP answer
 * came, whatever its status (the caller decides what a status means); -1 with err when none did.
 * path must already be URL-safe (ids and names are hex or [a-z0-9-]). */
int podman_request(const char *socket, const char *method, const char *path, json_t *body, long timeout_ms,
		   struct rest_reply *reply, struct sb_err *err);

#endif
