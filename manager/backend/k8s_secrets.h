/* The per-sandbox Secrets of the kubernetes backend (k8s_secrets.c): the agent's own material
 * (its certificate and key, the CA, the receipt key, and an empty file for hidden plan files),
 * and the authority snapshot's credentials when the sandbox has any. Each is created after the
 * pod, owned by it (ownerReferences), and deleted by the garbage collector with it; the backend
 * deletes them too once it has proven the pod gone. */
#ifndef SB_K8S_SECRETS_H
#define SB_K8S_SECRETS_H

#include <stddef.h>

#include "agent_dir.h"
#include "error.h"
#include "k8s_api.h"

#define K8S_SECRET_AGENT "-agent"             /* <pod>-agent */
#define K8S_SECRET_CREDENTIALS "-credentials" /* <pod>-credentials */
/* The agent Secret's keys, as the pod sees them under its mount (tls/) */
#define K8S_KEY_CERT "agent.crt"
#define K8S_KEY_KEY "agent.key"
#define K8S_KEY_CA "ca.crt"
#define K8S_KEY_RECEIPT "receipt.key"
#define K8S_KEY_EMPTY "empty"

/* "<pod><suffix>" into out. */
int k8s_secret_name(char *out, size_t len, const char *pod, const char *suffix, struct sb_err *err);

/* The Secrets of pod (name, uid) in namespace ns: the agent's always, the credentials' when
 * d->credentials is set. labels: the pod's labels, copied. -1 with err on the first refusal; the
 * caller deletes the pod, and with it whatever was made. */
int k8s_secrets_create(const struct k8s_conn *c, const char *ns, const char *pod, const char *pod_uid,
		       json_t *labels, const struct agent_dir *d, long timeout_ms, struct sb_err *err);

/* Delete the pod's Secrets by name (a 404 is fine: the garbage collector was first). Only after
 * the pod is proven gone. Failures are logged, not returned: the garbage collector still holds
 * them to the pod. */
void k8s_secrets_delete(const struct k8s_conn *c, const char *ns, const char *pod, long timeout_ms);

#endif
