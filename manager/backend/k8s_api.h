/* The Kubernetes API server's REST API, through libcurl: where the server is and who we are (a
 * kubeconfig, or the pod's own service account), one bounded request with 429 and 5xx retried,
 * and a bounded watch. What the calls mean is backend_kubernetes.c's. */
#ifndef SB_K8S_API_H
#define SB_K8S_API_H

#include <jansson.h>
#include <stddef.h>

#include "curl_handle.h"
#include "error.h"

/* Who the manager is to one API server. PEM blobs are held in memory (read once at start). */
struct k8s_conn {
	char server[512];      /* "https://host:port", no trailing slash; http:// only on loopback */
	char *ca_pem;          /* the server's CA; NULL: the system's CAs */
	size_t ca_len;
	char *cert_pem, *key_pem; /* a client certificate, or NULL */
	size_t cert_len, key_len;
	char *token;           /* a bearer token, or NULL */
	char namespace[64];    /* the context's namespace, "" when it names none */
};

/* From the kubeconfig at path (YAML, or its JSON form), its current-context; or, when path is "",
 * the service account of the pod the manager runs in (/var/run/secrets/kubernetes.io/...). Only
 * static credentials: an exec or auth-provider user is refused (no kubectl, no plugin runs). */
int k8s_conn_load(struct k8s_conn *c, const char *path, struct sb_err *err);
void k8s_conn_free(struct k8s_conn *c);

/* The YAML subset kubeconfigs are written in (block mappings and sequences, plain and quoted
 * scalars, {} and []), as JSON; text that starts with '{' is read as JSON. NULL with err. */
json_t *k8s_yaml_parse(const char *text, struct sb_err *err);

/* METHOD <server><path>, with an optional JSON body, within timeout_ms in all: 429 and 5xx are
 * asked again after a growing pause (Retry-After when the server says one) while time is left.
 * 0 when an answer came, whatever its status; -1 with err when none did. path must be URL-safe.
 * The reply is curl_handle.h's: rest_reply_free, and rest_reply_message for the server's words. */
int k8s_request(const struct k8s_conn *c, const char *method, const char *path, json_t *body, long timeout_ms,
		struct rest_reply *reply, struct sb_err *err);

/* One watch event: type ("ADDED", "MODIFIED", "DELETED", "BOOKMARK") and its object. Return 1 to
 * end the watch (decided), 0 to go on. */
typedef int (*k8s_event_fn)(void *user, const char *type, json_t *object);

#define K8S_WATCH_DECIDED 1
#define K8S_WATCH_ENDED 0   /* the stream ended or the bound passed: list again */
#define K8S_WATCH_GONE 2    /* 410 Gone (HTTP or an ERROR event): the resourceVersion is too old */
/* GET path (with watch=1 in it) for at most timeout_ms, each event to fn. -1 with err when the
 * server refused the watch (another status than 200 and 410) or could not be reached. */
int k8s_watch(const struct k8s_conn *c, const char *path, long timeout_ms, k8s_event_fn fn, void *user,
	      struct sb_err *err);

#endif
