/* The Kubernetes request attributes a grant is judged by: from a request's method, path and query,
 * what the API server's RequestInfoFactory (k8s.io/apiserver/pkg/endpoints/request/requestinfo.go)
 * makes of them, and the decision of a `read` or `write` grant on them. Pure: no I/O, no threads;
 * never judges a request it did not parse whole (a bound reached is a refusal, never a truncation). */
#ifndef SB_K8S_REQUEST_H
#define SB_K8S_REQUEST_H

#include <stdbool.h>
#include <stddef.h>

#include "error.h"

#define K8S_REQ_PATH_MAX 4096    /* bytes of the path as sent (percent-encoded), the query apart */
#define K8S_REQ_QUERY_MAX 8192   /* bytes of the query (label and field selectors can be long) */
#define K8S_REQ_SEGMENTS_MAX 64  /* segments of the decoded path */
#define K8S_REQ_FIELD_MAX 512    /* an attribute, NUL included: Kubernetes names are at most 253 */
#define K8S_REQ_METHOD_MAX 16    /* NUL included */
#define K8S_REQ_VERB_MAX 24      /* NUL included; "deletecollection" is the longest */

/* A request as the API server sees it. Strings are "" when the request has none; each holds the
 * decoded bytes of its segment (any byte but NUL and controls: the caller escapes them for text). */
struct k8s_request {
	bool resource_request;   /* under /api/VERSION/... or /apis/GROUP/VERSION/... */
	char method[K8S_REQ_METHOD_MAX];
	/* resource requests: get, list, watch, create, update, patch, delete, deletecollection, or the
	 * special verbs proxy and watch of the legacy prefixes; "" for a method the server maps to none.
	 * Other requests: the method in lower case (get, post, put, ...), as the server's authorizer
	 * sees it. */
	char verb[K8S_REQ_VERB_MAX];
	char path[K8S_REQ_PATH_MAX + 1];     /* the path as sent (a refusal names it) */
	char prefix[8];                      /* "api" or "apis" for a resource request */
	char group[K8S_REQ_FIELD_MAX];       /* "" for the core group (/api) */
	char version[K8S_REQ_FIELD_MAX];
	char resource[K8S_REQ_FIELD_MAX];
	char subresource[K8S_REQ_FIELD_MAX];
	char namespace[K8S_REQ_FIELD_MAX];   /* "" for a cluster-scoped request */
	char name[K8S_REQ_FIELD_MAX];        /* from the path, or list/watch's fieldSelector metadata.name */
	/* dryRun in the query: the server runs admission and validation but stores nothing. Still a
	 * mutating verb: a `read` grant refuses it (admission webhooks still run, and a server that
	 * ignored the flag would apply it). */
	bool dry_run;
	/* A request that opens a stream into a workload: the exec, attach and portforward subresources
	 * (connection upgrades that run commands or reach ports) and proxy (the subresource or the legacy
	 * verb: any HTTP to a pod, service or node). */
	bool upgrade;
	/* A non-resource discovery path: /api, /api/VERSION, /apis, /apis/GROUP, /apis/GROUP/VERSION,
	 * /version, /openapi/... */
	bool discovery;
};

/* Fill out from method (a C string), the path (path_len bytes, starting with '/', the query
 * apart) and the query (query_len bytes without the '?', may be empty). Refused (-1, EINVAL or
 * E2BIG for a bound) when the request cannot be judged as the server would read it: over a bound,
 * an invalid percent escape, a NUL or control byte, an empty, "." or ".." segment, a legacy special
 * verb with no resource after it. */
int k8s_request_parse(const char *method, const char *path, size_t path_len, const char *query, size_t query_len,
		      struct k8s_request *out, struct sb_err *err);

/* The verb writes or may write: anything but a get, list or watch by GET or HEAD, and every
 * upgrade (a GET to pods/exec runs a command). A dry run is mutating. */
bool k8s_request_mutating(const struct k8s_request *req);

/* Whether grant (named grant, access "read" or "write", as grants name them: manager/core/
 * sessions.c) lets req through. 0: allowed. -1 with EACCES: refused, the message naming the grant,
 * the verb, the group/resource and the object, e.g. `refused by grant "prod" (read): verb "patch" on
 * apps/deployments "payments" in namespace "default"`; every quoted string from the request is
 * terminal-safe (common/textesc.h). EINVAL: an access word that is neither (refused too).
 * `write` passes everything: the cluster's RBAC still decides. */
int k8s_request_decide(const char *grant, const char *access, const struct k8s_request *req, struct sb_err *err);

#endif
