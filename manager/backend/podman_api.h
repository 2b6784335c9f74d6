/* The Docker-compatible REST API of a Podman service (or a Docker Engine), over its unix socket,
 * through libcurl: one bounded request, one JSON reply. What the calls mean is backend_podman.c's. */
#ifndef SB_PODMAN_API_H
#define SB_PODMAN_API_H

#include <jansson.h>

#include "error.h"

#define PODMAN_API_VERSION "v1.41"

struct podman_reply {
	long status;       /* the HTTP status; 0 when no answer came */
	json_t *body;      /* the parsed JSON body, NULL when empty or not JSON */
	char *raw;         /* the body as received (NUL-terminated), for logs and error messages */
	size_t raw_len;
};

/* METHOD /v1.41<path> with an optional JSON body, waiting at most timeout_ms. 0 when an HTTP answer
 * came, whatever its status (the caller decides what a status means); -1 with err when none did.
 * path must already be URL-safe (ids and names are hex or [a-z0-9-]). */
int podman_request(const char *socket, const char *method, const char *path, json_t *body, long timeout_ms,
		   struct podman_reply *reply, struct sb_err *err);
void podman_reply_free(struct podman_reply *reply);

/* The service's own words for a failed call: {"message": "..."} of the body, else its start. */
const char *podman_reply_message(const struct podman_reply *reply);

#endif
