/* The pod of one sandbox, as the kubernetes backend (backend_kubernetes.c) asks the API server for
 * it, and the check of what the server kept of it.
 *
 * What the pod gets (k8s_pod_body()):
 *   restartPolicy Never, the configured image with imagePullPolicy Never, labels session and
 *   generation, the grants' service account (serviceAccountName, credentials_bind()) but no token
 *   of it mounted, no service links;
 *   securityContext runAsNonRoot with the sandbox's uid:gid, seccomp Localhost (images/seccomp.json
 *   installed under the kubelet's seccomp root), hostUsers false on servers that know the field
 *   (1.25 on); the container's allowPrivilegeEscalation false, every capability dropped, procMount
 *   Unmasked (the agent mounts a fresh /proc per command: backend_podman.c says why), a read-only
 *   root; CPU and memory limits; /tmp and /dev/shm as memory emptyDirs of their sizes.
 *   Volumes, from the mount plan, at the entries' own paths: with hostpath:DIR (one node) each
 *   entry by hostPath, the node's path being DIR + the source's path below the manager's volume;
 *   with pvc:CLAIM (any node) one volume of the claim and each entry a subPath of it, the source's
 *   path below the manager's volume (the claim holds the volume at its root: the start's volume
 *   probe proves it, a file the manager wrote read in a pod). Read-only ones readOnly; hidden ones
 *   over an empty directory (emptyDir, readOnly) or the agent Secret's empty item; each directory
 *   between a writable entry and an entry inside it mounted onto itself, as podman's anchors are
 *   (a mount point cannot be renamed).
 *   No part of the manager's private directory (k8s_secrets.c): the agent's certificate, key, CA
 *   and receipt key from the Secret <pod>-agent at PRIVATE_INSIDE/tls, read-only, hidden by the
 *   agent from every command (its files are root's, mode 0440, group the fsGroup: the agent takes
 *   them by sandbox-agent/sealed.c's rule for a read-only mount); the agent's state directory made
 *   by the agent in a memory emptyDir at PRIVATE_INSIDE/run; the snapshot's credentials from the
 *   Secret <pod>-credentials at their own path. Both Secrets are created after the pod, owned by it.
 * After create the pod is read back, and a server that dropped or changed a field the boundary
 * needs is refused (the pod is deleted): k8s_pod_check(). */
#include "k8s_pod.h"
#include "k8s_netpol.h"
#include "k8s_secrets.h"
#include "log.h"
#include "mount_plan.h"
#include "pathfmt.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* What the scheduler reserves per sandbox (the limits cap it): without requests they would equal
 * the limits, and a node would hold only as many sandboxes as its CPUs allow limits of. */
#define REQUEST_MILLICPU 100LL
#define REQUEST_MEMORY (128LL << 20)
#define AGENT_STATE_BYTES (64LL << 20) /* run/: the agent's receipts and journal, in memory */

/* ---------------------------------------------------------------- the pod's description */

struct pod_build {
	json_t *volumes, *mounts, *seen;
	int n;
	const struct k8s_pod_target *k;
	const struct agent_dir *d;
	const struct sandbox_spec *spec;
	const char *pod;        /* the pod's name: its Secrets are named after it */
	bool claim_added, empty_added;
};

static int mount_add(struct pod_build *b, json_t *volume, const char *target, bool ro, struct sb_err *err)
{
	char name[32];

	snprintf(name, sizeof name, "v%d", b->n++);
	if (json_object_set_new(volume, "name", json_string(name)) < 0 || json_array_append_new(b->volumes, volume) < 0 ||
	    json_array_append_new(b->mounts, json_pack("{s:s, s:s, s:b}", "name", name, "mountPath", target, "readOnly",
						       ro)) < 0)
		return sb_fail(err, ENOMEM, "describing the pod's volumes");
	return 0;
}

/* A plan source below the manager's volume, as the node sees it (hostpath:DIR). */
static int node_path(const struct pod_build *b, const char *source, char *out, size_t len, struct sb_err *err)
{
	const char *vol = b->k->set->manager_volume;
	size_t n = strlen(vol);

	if (strncmp(source, vol, n) != 0 || (source[n] != '/' && source[n] != '\0'))
		return sb_invalid(err, "mount source %s is not below the manager's volume %s", source, vol);
	return path_fmt(out, len, err, "%s%s", b->k->set->volume_dir, source + n);
}

static int host_mount(struct pod_build *b, const char *node, bool file, const char *target, bool ro,
		      struct sb_err *err)
{
	json_t *v = json_pack("{s:{s:s, s:s}}", "hostPath", "path", node, "type", file ? "File" : "Directory");

	if (v == NULL)
		return sb_fail(err, ENOMEM, "describing the pod's volumes");
	return mount_add(b, v, target, ro, err);
}

/* A mount of the already described volume name (the claim's, a Secret's). */
static int volume_mount(struct pod_build *b, const char *volume, const char *target, const char *subpath, bool ro,
			struct sb_err *err)
{
	json_t *m = json_pack("{s:s, s:s, s:b}", "name", volume, "mountPath", target, "readOnly", ro);

	if (m == NULL || (subpath != NULL && subpath[0] != '\0' &&
			  json_object_set_new(m, "subPath", json_string(subpath)) < 0) ||
	    json_array_append_new(b->mounts, m) < 0)
		return sb_fail(err, ENOMEM, "describing the pod's volumes");
	return 0;
}

static int volume_add(struct pod_build *b, const char *name, json_t *volume, struct sb_err *err)
{
	if (volume == NULL || json_object_set_new(volume, "name", json_string(name)) < 0 ||
	    json_array_append_new(b->volumes, volume) < 0)
		return sb_fail(err, ENOMEM, "describing the pod's volumes");
	return 0;
}

/* pvc:CLAIM: the claim holds the manager's volume at its root, so a plan source is the subPath
 * of its path below the volume (the start's volume probe checks it: a file the manager writes
 * is read in a pod). One volume of the claim, one subPath mount per entry, read-only ones
 * readOnly (the kubelet bind-mounts a subPath read-only; it resolves it without following a
 * link out of the volume). */
static int claim_mount(struct pod_build *b, const char *source, const char *target, bool ro, struct sb_err *err)
{
	const char *vol = b->k->set->manager_volume;
	size_t n = strlen(vol);

	if (strncmp(source, vol, n) != 0 || (source[n] != '/' && source[n] != '\0'))
		return sb_invalid(err, "mount source %s is not below the manager's volume %s", source, vol);
	if (!b->claim_added &&
	    volume_add(b, "workspace", json_pack("{s:{s:s}}", "persistentVolumeClaim", "claimName", b->k->set->claim),
		       err) < 0)
		return -1;
	b->claim_added = true;
	return volume_mount(b, "workspace", target, source[n] == '/' ? source + n + 1 : "", ro, err);
}

/* A plan source at target: from the claim (pvc:CLAIM), or from the node's path (hostpath:DIR). */
static int source_mount(struct pod_build *b, const char *source, bool file, const char *target, bool ro,
			struct sb_err *err)
{
	char node[PATH_MAX];

	if (b->k->set->claim[0] != '\0')
		return claim_mount(b, source, target, ro, err);
	if (node_path(b, source, node, sizeof node, err) < 0)
		return -1;
	return host_mount(b, node, file, target, ro, err);
}

/* A hidden file: the agent Secret's empty item, alone in a volume of its own (the volume holds
 * nothing else of the Secret), by subPath, read-only. */
static int empty_file_mount(struct pod_build *b, const char *target, struct sb_err *err)
{
	char secret[128];

	if (!b->empty_added) {
		if (k8s_secret_name(secret, sizeof secret, b->pod, K8S_SECRET_AGENT, err) < 0 ||
		    volume_add(b, "empty", json_pack("{s:{s:s, s:i, s:[{s:s, s:s}]}}", "secret", "secretName", secret,
						     "defaultMode", 0444, "items", "key", K8S_KEY_EMPTY, "path", K8S_KEY_EMPTY),
			       err) < 0)
			return -1;
		b->empty_added = true;
	}
	return volume_mount(b, "empty", target, K8S_KEY_EMPTY, true, err);
}

/* The agent's own paths (PRIVATE_INSIDE): tls/ is the agent Secret, read-only, which the agent
 * hides from every command (it checks the files by sealed.c's rule: root's, group the fsGroup,
 * on a read-only mount); run/ a memory emptyDir in which the agent makes its state directory
 * (0700, its own: privdir.c's rule holds unchanged). What outlives the pod: the workspace (the
 * node's path or the claim) and the manager's own copy of the receipt key in its private
 * directory; not the agent's state (receipts, journal: memory, gone with the pod UID) nor its
 * Secrets (owned by the pod). That is fine: restartPolicy Never, so a container is never started
 * again on an older state, and a new generation is a new pod with a new key and a new state; a
 * manager restart does not end the pod, so recovery still asks the same agent its journal, with
 * the key the manager kept. The snapshot's credentials: their Secret at the path the calls'
 * KUBECONFIG names. */
static int agent_volumes(struct pod_build *b, struct sb_err *err)
{
	char secret[128], size[32];

	snprintf(size, sizeof size, "%lld", (long long)AGENT_STATE_BYTES);
	if (k8s_secret_name(secret, sizeof secret, b->pod, K8S_SECRET_AGENT, err) < 0 ||
	    volume_add(b, "agent", json_pack("{s:{s:s, s:i, s:[{s:s, s:s}, {s:s, s:s}, {s:s, s:s}, {s:s, s:s}]}}",
					     "secret", "secretName", secret, "defaultMode", 0400, "items",
					     "key", K8S_KEY_CERT, "path", K8S_KEY_CERT, "key", K8S_KEY_KEY, "path", K8S_KEY_KEY,
					     "key", K8S_KEY_CA, "path", K8S_KEY_CA, "key", K8S_KEY_RECEIPT, "path",
					     K8S_KEY_RECEIPT), err) < 0 ||
	    volume_mount(b, "agent", PRIVATE_INSIDE "/tls", NULL, true, err) < 0 ||
	    volume_add(b, "run", json_pack("{s:{s:s, s:s}}", "emptyDir", "medium", "Memory", "sizeLimit", size), err) < 0 ||
	    volume_mount(b, "run", PRIVATE_INSIDE "/run", NULL, false, err) < 0)
		return -1;
	if (b->d->credentials[0] == '\0')
		return 0;
	if (k8s_secret_name(secret, sizeof secret, b->pod, K8S_SECRET_CREDENTIALS, err) < 0 ||
	    volume_add(b, "credentials", json_pack("{s:{s:s, s:i}}", "secret", "secretName", secret, "defaultMode", 0440),
		       err) < 0)
		return -1;
	return volume_mount(b, "credentials", b->d->credentials, NULL, true, err);
}

/* One anchor (mount_plan_anchors) mounted as a plan source is. The kubelet mounts in the order
 * given, so the anchor comes first. */
static int anchor_mount(void *ctx, const char *source, const char *anchor, struct sb_err *err)
{
	return source_mount(ctx, source, false, anchor, false, err);
}

static int memory_dir(struct pod_build *b, const char *target, int64_t bytes, struct sb_err *err)
{
	char size[32];
	json_t *v;

	snprintf(size, sizeof size, "%lld", (long long)bytes);
	v = json_pack("{s:{s:s, s:s}}", "emptyDir", "medium", "Memory", "sizeLimit", size);
	if (v == NULL)
		return sb_fail(err, ENOMEM, "describing the pod's volumes");
	return mount_add(b, v, target, false, err);
}

static int plan_volumes(struct pod_build *b, struct sb_err *err)
{
	for (size_t i = 0; i < b->spec->plan->n; i++) {
		const struct mount_entry *e = &b->spec->plan->entries[i];
		int rc = mount_plan_anchors(b->spec->plan, e->target, b->seen, anchor_mount, b, err);

		if (rc == 0) {
			switch (e->mode) {
			case MOUNT_RW:
			case MOUNT_RO:
				rc = source_mount(b, e->source, e->is_file, e->target, e->mode == MOUNT_RO, err);
				break;
			case MOUNT_HIDDEN:
				rc = e->is_file ? empty_file_mount(b, e->target, err) :
				     mount_add(b, json_pack("{s:{}}", "emptyDir"), e->target, true, err);
				break;
			case MOUNT_TMPFS:
				rc = memory_dir(b, e->target, b->k->set->tmp_bytes, err);
				break;
			}
		}
		if (rc < 0) {
			sb_err_prefix(err, "mount plan entry %s", e->target);
			return -1;
		}
	}
	return 0;
}

static int volumes_build(struct pod_build *b, struct sb_err *err)
{
	if (memory_dir(b, "/tmp", b->k->set->tmp_bytes, err) < 0 || memory_dir(b, "/dev/shm", b->k->set->shm_bytes, err) < 0 ||
	    plan_volumes(b, err) < 0 || agent_volumes(b, err) < 0)
		return -1;
	return 0;
}

/* The agent's arguments with its private paths as the pod sees them, and a TCP listener. */
static json_t *args_json(const struct agent_dir *d, const struct sandbox_spec *spec)
{
	static const char *const inside[] = {
		"0.0.0.0:7443", PRIVATE_INSIDE "/tls/" K8S_KEY_CERT, PRIVATE_INSIDE "/tls/" K8S_KEY_KEY,
		PRIVATE_INSIDE "/tls/" K8S_KEY_CA, PRIVATE_INSIDE "/run/state",
	};
	const char *host[] = { d->listen, d->cert, d->key, d->ca, d->state };
	json_t *a = json_array();

	_Static_assert(KUBERNETES_AGENT_PORT == 7443, "the listener above says the port");
	for (size_t i = 1; a != NULL && d->argv[i] != NULL; i++) {
		const char *arg = d->argv[i];

		for (size_t k = 0; k < sizeof host / sizeof host[0]; k++)
			if (d->argv[i] == host[k])
				arg = inside[k];
		if (json_array_append_new(a, json_string(arg)) < 0) {
			json_decref(a);
			return NULL;
		}
	}
	/* The manager's receipt key, from the agent Secret (the state directory starts empty). The
	 * command's user named in the pod's /etc/passwd and /etc/group, which only the agent can read
	 * (the image's; sandbox-agent/command_user.c), its home the scratch folder, which is HOME
	 * (execpath.c), as the process backend's entry has (process_users.c). */
	if (a != NULL && (json_array_append_new(a, json_string("--receipt-key")) < 0 ||
			  json_array_append_new(a, json_string(PRIVATE_INSIDE "/tls/" K8S_KEY_RECEIPT)) < 0 ||
			  json_array_append_new(a, json_string("--user-home")) < 0 ||
			  json_array_append_new(a, json_string(spec->plan->scratch)) < 0)) {
		json_decref(a);
		return NULL;
	}
	return a;
}

static json_t *env_json(const struct agent_dir *d)
{
	json_t *a = json_array();

	for (size_t i = 0; a != NULL && d->envp[i] != NULL; i++) {
		const char *eq = strchr(d->envp[i], '=');
		char name[64];

		if (eq == NULL || (size_t)(eq - d->envp[i]) >= sizeof name)
			continue;
		memcpy(name, d->envp[i], (size_t)(eq - d->envp[i]));
		name[eq - d->envp[i]] = '\0';
		json_array_append_new(a, json_pack("{s:s, s:s}", "name", name, "value", eq + 1));
	}
	return a;
}

/* The pod runs as the grants' service account (sandbox_spec), because a token bound to a pod must
 * be of the pod's serviceAccountName (the API server refuses any other); no token of it is mounted
 * (automountServiceAccountToken false): the sandbox's only tokens are the bound ones its grants give. */
static int service_account_set(json_t *pod, const struct sandbox_spec *spec, struct sb_err *err)
{
	const char *sa = spec->service_account;

	if (sa == NULL || sa[0] == '\0')
		return 0;
	if (strlen(sa) > 253 || strspn(sa, "abcdefghijklmnopqrstuvwxyz0123456789.-") != strlen(sa))
		return sb_invalid(err, "service account '%s' is not a Kubernetes name", sa);
	return json_object_set_new(json_object_get(pod, "spec"), "serviceAccountName", json_string(sa)) == 0 ? 0 :
	       sb_fail(err, ENOMEM, "describing the pod");
}

json_t *k8s_pod_body(const struct k8s_pod_target *k, const struct agent_dir *d, const struct sandbox_spec *spec,
			const char *name, struct sb_err *err)
{
	struct pod_build b = { .volumes = json_array(), .mounts = json_array(), .seen = json_object(), .k = k, .d = d,
			       .spec = spec, .pod = name };
	char cpu[32], memory[32];
	json_t *pod = NULL, *limits, *requests;

	if (b.volumes == NULL || b.mounts == NULL || b.seen == NULL) {
		sb_fail(err, ENOMEM, "describing the pod");
		goto out;
	}
	if (volumes_build(&b, err) < 0)
		goto out;
	limits = json_object();
	requests = json_object();
	if (k->set->nano_cpus > 0) {
		snprintf(cpu, sizeof cpu, "%lldm", (long long)(k->set->nano_cpus / 1000000));
		json_object_set_new(limits, "cpu", json_string(cpu));
		snprintf(cpu, sizeof cpu, "%lldm", (long long)(k->set->nano_cpus / 1000000 < REQUEST_MILLICPU ?
							      k->set->nano_cpus / 1000000 : REQUEST_MILLICPU));
		json_object_set_new(requests, "cpu", json_string(cpu));
	}
	if (k->set->memory_bytes > 0) {
		snprintf(memory, sizeof memory, "%lld", (long long)k->set->memory_bytes);
		json_object_set_new(limits, "memory", json_string(memory));
		snprintf(memory, sizeof memory, "%lld", (long long)(k->set->memory_bytes < REQUEST_MEMORY ?
								   k->set->memory_bytes : REQUEST_MEMORY));
		json_object_set_new(requests, "memory", json_string(memory));
	}
	pod = json_pack("{s:s, s:s, s:{s:s, s:{s:s, s:s, s:s}},"
			" s:{s:s, s:b, s:b, s:I, s:s,"
			"    s:{s:b, s:I, s:I, s:I, s:{s:s, s:s}},"
			"    s:[{s:s, s:s, s:s, s:o, s:o, s:o, s:{s:o, s:o},"
			"        s:{s:b, s:b, s:b, s:s, s:{s:[s]}}}],"
			"    s:o}}",
			"apiVersion", "v1", "kind", "Pod",
			"metadata", "name", name, "labels", LABEL_SESSION, spec->session, LABEL_GENERATION, d->generation,
			LABEL_MANAGED, MANAGED_BY,
			"spec", "restartPolicy", "Never", "automountServiceAccountToken", 0, "enableServiceLinks", 0,
			"terminationGracePeriodSeconds", (json_int_t)GRACE_SECONDS, "hostname", "sandbox",
			"securityContext", "runAsNonRoot", 1, "runAsUser", (json_int_t)d->host_uid,
			"runAsGroup", (json_int_t)d->host_gid, "fsGroup", (json_int_t)d->host_gid,
			"seccompProfile", "type", "Localhost", "localhostProfile", k->set->seccomp_profile,
			"containers", "name", CONTAINER, "image", k->set->image, "imagePullPolicy", "Never",
			"args", args_json(d, spec), "env", env_json(d), "volumeMounts", b.mounts, "resources", "limits", limits,
			"requests", requests,
			"securityContext", "allowPrivilegeEscalation", 0, "privileged", 0, "readOnlyRootFilesystem", 1,
			"procMount", "Unmasked", "capabilities", "drop", "ALL",
			"volumes", b.volumes);
	b.mounts = b.volumes = NULL;
	if (pod == NULL) {
		sb_fail(err, ENOMEM, "describing the pod");
		goto out;
	}
	if (k->host_users)
		json_object_set_new(json_object_get(pod, "spec"), "hostUsers", json_false());
	/* Policy proxy: the label the NetworkPolicy selects (k8s_netpol.h). */
	if (spec->network == SANDBOX_NETWORK_PROXY)
		json_object_set_new(json_object_get(json_object_get(pod, "metadata"), "labels"), LABEL_NETWORK,
				    json_string("proxy"));
	if (service_account_set(pod, spec, err) < 0) {
		json_decref(pod);
		pod = NULL;
	}
out:
	json_decref(b.volumes);
	json_decref(b.mounts);
	json_decref(b.seen);
	return pod;
}

/* ---------------------------------------------------------------- what the server kept */

json_t *k8s_agent_container(json_t *pod, const char *list)
{
	size_t i;
	json_t *c;

	json_array_foreach(json_object_get(json_object_get(pod, strcmp(list, "containers") == 0 ? "spec" : "status"), list), i, c)
		if (json_is_string(json_object_get(c, "name")) && strcmp(json_string_value(json_object_get(c, "name")), CONTAINER) == 0)
			return c;
	return NULL;
}

static bool drops_all(json_t *sc)
{
	size_t i;
	json_t *v;

	json_array_foreach(json_object_get(json_object_get(sc, "capabilities"), "drop"), i, v)
		if (json_is_string(v) && strcmp(json_string_value(v), "ALL") == 0)
			return true;
	return false;
}

/* The pod as the server stored it must hold every field the boundary needs: an older server, or
 * one with a feature gate off, drops fields it does not know without a word. */
int k8s_pod_check(const struct k8s_pod_target *k, json_t *pod, struct sb_err *err)
{
	json_t *spec = json_object_get(pod, "spec"), *psc = json_object_get(spec, "securityContext");
	json_t *sc = json_object_get(k8s_agent_container(pod, "containers"), "securityContext");
	json_t *seccomp = json_object_get(psc, "seccompProfile");
	const char *proc = json_string_value(json_object_get(sc, "procMount"));
	const char *what = NULL;

	if (k->host_users && !json_is_false(json_object_get(spec, "hostUsers")))
		what = "spec.hostUsers false (a user namespace for the pod: the UserNamespacesSupport feature, "
		       "on by default from 1.33)";
	else if (proc == NULL || strcmp(proc, "Unmasked") != 0)
		what = "procMount Unmasked (the ProcMountType feature; on current versions it needs hostUsers false)";
	else if (!json_is_true(json_object_get(psc, "runAsNonRoot")))
		what = "securityContext.runAsNonRoot true";
	else if (!json_is_string(json_object_get(seccomp, "type")) ||
		 strcmp(json_string_value(json_object_get(seccomp, "type")), "Localhost") != 0 ||
		 !json_is_string(json_object_get(seccomp, "localhostProfile")) ||
		 strcmp(json_string_value(json_object_get(seccomp, "localhostProfile")), k->set->seccomp_profile) != 0)
		what = "seccompProfile Localhost (the profile of images/seccomp.json)";
	else if (!json_is_false(json_object_get(sc, "allowPrivilegeEscalation")))
		what = "allowPrivilegeEscalation false";
	else if (!drops_all(sc))
		what = "capabilities drop ALL";
	else if (!json_is_true(json_object_get(sc, "readOnlyRootFilesystem")))
		what = "readOnlyRootFilesystem true";
	else if (!json_is_string(json_object_get(spec, "restartPolicy")) ||
		 strcmp(json_string_value(json_object_get(spec, "restartPolicy")), "Never") != 0)
		what = "restartPolicy Never";
	if (what != NULL)
		return sb_fail(err, EOPNOTSUPP, "the API server (1.%d) did not keep %s: the boundary does not hold on "
			       "this cluster, refused", k->minor, what);
	if (!k->host_users)
		sb_warn("the API server (1.%d) has no spec.hostUsers: the pod runs without a user namespace of its own",
			k->minor);
	return 0;
}

