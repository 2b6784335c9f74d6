/* The pod of one sandbox (k8s_pod.c): its description for the API server, and the check of what
 * the server kept. Shared by backend_kubernetes.c, which makes, watches and deletes the pod. */
#ifndef SB_K8S_POD_H
#define SB_K8S_POD_H

#include "agent_dir.h"
#include "backend.h"
#include "error.h"

#include <jansson.h>
#include <stdbool.h>

#define CONTAINER "agent"
#define PRIVATE_INSIDE "/.sandbox/agent"
#define LABEL_SESSION "infra-sandbox/session"
#define LABEL_GENERATION "infra-sandbox/generation"
#define LABEL_MANAGED "app.kubernetes.io/managed-by"
#define MANAGED_BY "infra-sandbox-manager"
/* The pod's terminationGracePeriodSeconds and the grace of the manager's deletes: SIGTERM to the
 * agent, then SIGKILL. */
#define GRACE_SECONDS 2

/* What the pod's shape depends on: the backend's settings and what the server knows. */
struct k8s_pod_target {
	const struct kubernetes_settings *set;
	int minor;             /* the server's 1.<minor> */
	bool host_users;       /* the server knows spec.hostUsers (1.25 on) */
};

/* The pod object named name for spec (the agent's files as d prepared them), or NULL with err. */
json_t *k8s_pod_body(const struct k8s_pod_target *t, const struct agent_dir *d, const struct sandbox_spec *spec,
		     const char *name, struct sb_err *err);
/* 0 when the server kept every field of pod the boundary needs; -1 with err naming the first it
 * dropped or changed. */
int k8s_pod_check(const struct k8s_pod_target *t, json_t *pod, struct sb_err *err);
/* The agent container's entry of pod's spec.containers or status.containerStatuses (list), or NULL. */
json_t *k8s_agent_container(json_t *pod, const char *list);

#endif
