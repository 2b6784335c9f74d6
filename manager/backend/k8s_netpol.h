/* The NetworkPolicy of the kubernetes backend's sandboxes of policy `proxy` (k8s_netpol.c): their
 * pods, labelled LABEL_NETWORK=proxy, may reach nothing (no egress); their way out is the mTLS link
 * the manager opens to their agent (agent_relay.h). Enforced only by a network plugin that
 * implements NetworkPolicy (docs/isolation.md). */
#ifndef SB_K8S_NETPOL_H
#define SB_K8S_NETPOL_H

#include <jansson.h>

#include "error.h"
#include "k8s_api.h"

#define NETPOL_NAME "infra-sandbox-proxy"
#define LABEL_NETWORK "infra-sandbox/network"

/* The policy object, for the namespace's pods of policy proxy; NULL when out of memory. */
json_t *k8s_netpol_body(void);

/* The policy in ns as k8s_netpol_body says, before any pod of policy proxy starts: created, or,
 * when one of its name is there, replaced by ours (a changed one is never trusted). 0, or -1 with
 * err: the pod is then not made (fail closed). */
int k8s_netpol_ensure(const struct k8s_conn *c, const char *ns, long timeout_ms, struct sb_err *err);

#endif
