/* The NetworkPolicy of policy `proxy` on the kubernetes backend (k8s_netpol.h): its description
 * and its upkeep through the API server. Never widens it: the object in the namespace is made ours
 * again before each such pod, whatever someone changed. */
#include "k8s_netpol.h"

#include <errno.h>
#include <stdio.h>

#include "backend.h"
#include "k8s_pod.h"

json_t *k8s_netpol_body(void)
{
	/* Egress only, and no rule: the pod reaches no address, the cluster's DNS included (the
	 * manager's proxy resolves names). Its way out is the manager's connection to the agent, which
	 * is the pod's ingress: who may open it is the deployment's policy to say (deploy/kubernetes/
	 * networkpolicy.yaml, sandbox-pods: the managers' pods alone, on the agent's port), and its
	 * policy of egress for the sandboxes of policy open selects none of these pods
	 * (sandbox-pods-egress), since policies add up: one that allowed them out would win. */
	return json_pack("{s:s, s:s, s:{s:s, s:{s:s}}, s:{s:{s:{s:s}}, s:[s], s:[]}}",
			 "apiVersion", "networking.k8s.io/v1", "kind", "NetworkPolicy",
			 "metadata", "name", NETPOL_NAME, "labels", LABEL_MANAGED, MANAGED_BY,
			 "spec", "podSelector", "matchLabels", LABEL_NETWORK, "proxy",
			 "policyTypes", "Egress", "egress");
}

static void netpol_path(const char *ns, const char *name, char *out, size_t len)
{
	snprintf(out, len, "/apis/networking.k8s.io/v1/namespaces/%s/networkpolicies%s%s", ns, name ? "/" : "",
		 name ? name : "");
}

/* One of ours is there: replaced by ours, at the resourceVersion read. */
static int netpol_replace(const struct k8s_conn *c, const char *ns, json_t *body, long timeout_ms,
			  struct sb_err *err)
{
	struct rest_reply r;
	char path[256];
	const char *rv;
	int rc;

	netpol_path(ns, NETPOL_NAME, path, sizeof path);
	if (k8s_request(c, "GET", path, NULL, timeout_ms, &r, err) < 0)
		return -1;
	rv = json_string_value(json_object_get(json_object_get(r.body, "metadata"), "resourceVersion"));
	if (r.status != 200 || rv == NULL) {
		rc = sb_fail(err, EIO, "reading NetworkPolicy %s (HTTP %ld): %s", NETPOL_NAME, r.status,
			     rest_reply_message(&r));
		rest_reply_free(&r);
		return rc;
	}
	json_object_set_new(json_object_get(body, "metadata"), "resourceVersion", json_string(rv));
	rest_reply_free(&r);
	if (k8s_request(c, "PUT", path, body, timeout_ms, &r, err) < 0)
		return -1;
	rc = r.status == 200 ? 0 : sb_fail(err, EIO, "replacing NetworkPolicy %s (HTTP %ld): %s", NETPOL_NAME,
					      r.status, rest_reply_message(&r));
	rest_reply_free(&r);
	return rc;
}

int k8s_netpol_ensure(const struct k8s_conn *c, const char *ns, long timeout_ms, struct sb_err *err)
{
	json_t *body = k8s_netpol_body();
	struct rest_reply r;
	char path[256];
	int rc;

	if (body == NULL)
		return sb_fail(err, ENOMEM, "describing NetworkPolicy %s", NETPOL_NAME);
	netpol_path(ns, NULL, path, sizeof path);
	rc = k8s_request(c, "POST", path, body, timeout_ms, &r, err);
	if (rc == 0) {
		long status = r.status;

		if (status != 201 && status != 409)
			rc = sb_fail(err, EIO, "creating NetworkPolicy %s (HTTP %ld): %s", NETPOL_NAME, status,
				     rest_reply_message(&r));
		rest_reply_free(&r);
		if (status == 409)
			rc = netpol_replace(c, ns, body, timeout_ms, err);
	}
	json_decref(body);
	if (rc < 0)
		sb_err_prefix(err, "policy proxy's NetworkPolicy in namespace %s", ns);
	return rc;
}
