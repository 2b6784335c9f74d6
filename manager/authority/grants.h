/* Authority snapshots: the credentials of a session's grants, materialised for one sandbox
 * generation in its private directory and mounted read-only outside the worktree. The snapshot
 * never changes inside a live sandbox; a change of grants retires the sandbox (sessions.c).
 * Never copies the manager's own credentials, provider-auth/ or another session's grants. */
#ifndef SB_GRANTS_H
#define SB_GRANTS_H

#include <jansson.h>
#include <limits.h>
#include <stdint.h>
#include <sys/types.h>

#include "broker.h"
#include "error.h"

/* Under the network policy `proxy` a broker's kubernetes grant, and every http: grant, is served at
 * the edge (broker.h struct broker_edge): the i-th edge of a sandbox, in the order of its grants,
 * Kubernetes and HTTP alike, listens on http://127.0.0.1:(SNAPSHOT_EDGE_PORT + i) of the sandbox's
 * own loopback (3128 is the egress proxy itself); a kubernetes grant's kubeconfig names its port,
 * an http: grant's INFRA_SANDBOX_HTTP_<NAME> variable does (snapshot_edge.env_name). */
#define SNAPSHOT_EDGE_PORT 3129
#define SNAPSHOT_EDGES_MAX 16

struct snapshot_edge {
	char resource[128];           /* "kubernetes:prod" */
	char access[8];               /* "read" or "write": what the proxy lets through */
	struct broker_edge cred;      /* the API server, its CA, the token (kept in memory only) */
	char env_name[160];           /* an http: grant's variable (broker_http_env_name); "" for kubernetes */
};

struct snapshot {
	char dir[PATH_MAX];           /* <private_dir>/credentials */
	char kubeconfig[8192];        /* KUBECONFIG for every call: the kubernetes grants, ':'-joined */
	int64_t expires_ms;           /* wall-clock ms when its first credential expires; 0: none expires */
	struct snapshot_edge *edges;  /* edge mode: heap, `edges_n` of them; snapshot_edges_free */
	size_t edges_n;
};

/* Wipes every kept token and frees the edges (a snapshot without any is left as it is). */
void snapshot_edges_free(struct snapshot *s);

/* Materialise grants ({"resource": "access"}) declared in resources ({"NAME": "BROKER:ARG"})
 * under private_dir; files are 0400, owned by uid/gid (the sandbox's ids). Brokers: file:PATH,
 * tokenrequest:CONFIG.json, rancher:CONFIG.json (broker.h). bound: the sandbox's object that
 * tokenrequest tokens are bound to (its pod), or NULL. On failure nothing it made stays valid:
 * credentials that can be revoked are revoked (snapshot_release). */
int snapshot_make(const char *private_dir, json_t *grants, json_t *resources, uid_t uid, gid_t gid,
		  const struct broker_bound *bound, struct snapshot *out, struct sb_err *err);

/* The same under the network policy `proxy`: each tokenrequest or rancher kubernetes grant, and each
 * http: grant (broker header:, which snapshot_make refuses), is served at the edge (no credential
 * in any file; out->edges holds them). A file: grant is still the file
 * the operator chose to hand the sandbox. On failure out holds no edge. */
int snapshot_make_edge(const char *private_dir, json_t *grants, json_t *resources, uid_t uid, gid_t gid,
		       struct snapshot *out, struct sb_err *err);

/* Its directory, <private_dir>/credentials, empty and sealed, for a sandbox that mounts it before
 * snapshot_make fills it (out: its path). */
int snapshot_dir_make(const char *private_dir, uid_t uid, gid_t gid, char *out, size_t len, struct sb_err *err);

/* The service account a pod that tokenrequest grants bind their tokens to must run as (its
 * serviceAccountName): the one of the grants' tokenrequest resources at their accesses, into out;
 * "" when no grant is a tokenrequest one. Grants that need two service accounts are refused: a pod
 * runs as one. */
int snapshot_service_account(json_t *grants, json_t *resources, char *out, size_t len, struct sb_err *err);

/* Revoke what the snapshot under private_dir made that can be revoked (Rancher tokens, listed in
 * <private_dir>/credentials.revoke), so that no credential outlives its sandbox. Call it once the
 * sandbox is proven gone, before removing private_dir; what cannot be revoked stays listed. */
int snapshot_release(const char *private_dir, struct sb_err *err);

#endif
