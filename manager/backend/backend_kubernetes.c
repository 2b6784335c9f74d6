/* The kubernetes backend (backend.h): a session's sandbox is one pod of the sandbox image, whose
 * entrypoint is the static sandbox-agent, made and proven gone through the API server (k8s_api.h).
 * The manager speaks mutual TLS to the agent at the pod's IP on KUBERNETES_AGENT_PORT; the agent
 * closes its own port to every command it runs (serve.c adds it to --block-port's list).
 *
 * What the pod gets (pod_body()):
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
 * needs is refused (the pod is deleted): boundary_check().
 *
 * Evidence (invariant 9) is the API server's word on the recorded pod UID: its container
 * terminated with the recorded containerID, or, after this handle's delete with preconditions.uid
 * was accepted, a 404 or a watch DELETED event for that UID. Never evidence: an accepted delete, a
 * deletionTimestamp, a pod of the same name under another UID, ContainerStatusUnknown without a
 * containerID, a timeout. stop() is a delete with preconditions.uid and a grace period, never a
 * force delete; no activeDeadlineSeconds. A pod someone else deleted may be out of the API before
 * the manager looks: one watch from its create's resourceVersion replays its last state, which is
 * evidence only when it says the recorded container terminated. */
#include "agent_dir.h"
#include "backend.h"
#include "backend_internal.h"
#include "clock.h"
#include "k8s_api.h"
#include "k8s_secrets.h"
#include "log.h"
#include "pathfmt.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define REQUEST_MS 15000
#define STOP_MS 5000
#define READY_MS 60000
#define POLL_MS 200
#define WATCH_MS 30000       /* one watch, then list again */
#define GRACE_SECONDS 2      /* SIGTERM to the agent, then SIGKILL */
/* What the scheduler reserves per sandbox (the limits cap it): without requests they would equal
 * the limits, and a node would hold only as many sandboxes as its CPUs allow limits of. */
#define REQUEST_MILLICPU 100LL
#define REQUEST_MEMORY (128LL << 20)
#define RUNTIME_PREFIX "kubernetes:"
#define CONTAINER "agent"
#define PRIVATE_INSIDE "/.sandbox/agent"
#define AGENT_STATE_BYTES (64LL << 20) /* run/: the agent's receipts and journal, in memory */
#define LABEL_SESSION "infra-sandbox/session"
#define LABEL_GENERATION "infra-sandbox/generation"
#define LABEL_MANAGED "app.kubernetes.io/managed-by"
#define MANAGED_BY "infra-sandbox-manager"

struct kube {
	struct backend be;
	struct kubernetes_settings set;
	struct k8s_conn conn;
	char ns[64];
	int minor;             /* the server's 1.<minor> */
	bool host_users;       /* the server knows spec.hostUsers (1.25 on) */
};

/* The backend's own bytes of a handle. */
struct kstate {
	bool deleted;          /* a delete with preconditions.uid of this pod was accepted */
	/* The pod's resourceVersion at its create: a watch from it replays the pod's states, its last
	 * one (the kubelet's word that the container terminated) included, should someone else's
	 * delete take the pod out of the API before the manager looks (evidence()). */
	char created_rv[32];
};

/* The recorded identity: "kubernetes:<pod name>/<pod UID>/<containerID>" (containerID "" while
 * the container has none, as lookup() may find it). */
struct ident {
	char name[64], uid[40], cid[128];
	char created_rv[32];   /* not in the identity: pod_create()'s, kept in the handle (struct kstate) */
};

static struct kube *kube_of(struct backend *be)
{
	return (struct kube *)be;
}

static struct kstate *kstate_of(struct sandbox_handle *h)
{
	_Static_assert(sizeof(struct kstate) <= SANDBOX_RUNTIME_BYTES, "kstate fits the handle");
	return (struct kstate *)h->runtime.bytes;
}

static bool dns_label(const char *s, size_t max)
{
	size_t n = strlen(s);

	if (n == 0 || n > max || s[0] == '-' || s[n - 1] == '-')
		return false;
	for (size_t i = 0; i < n; i++)
		if (!(islower((unsigned char)s[i]) || isdigit((unsigned char)s[i]) || s[i] == '-'))
			return false;
	return true;
}

static bool uid_valid(const char *s)
{
	size_t n = strlen(s);

	return n >= 8 && n <= 39 && strspn(s, "0123456789abcdef-") == n;
}

/* "containerd://<hex>", "cri-o://<hex>", "docker://<hex>". */
static bool cid_valid(const char *s)
{
	const char *sep = strstr(s, "://");

	return sep != NULL && sep > s && strlen(s) < sizeof(((struct ident *)0)->cid) &&
	       strspn(s, "abcdefghijklmnopqrstuvwxyz-") == (size_t)(sep - s) && strspn(sep + 3, "0123456789abcdef") ==
	       strlen(sep + 3) && sep[3] != '\0';
}

static int ident_parse(const char *runtime_id, struct ident *id, struct sb_err *err)
{
	const char *a, *b;

	memset(id, 0, sizeof *id);
	if (strncmp(runtime_id, RUNTIME_PREFIX, strlen(RUNTIME_PREFIX)) != 0)
		goto bad;
	a = strchr(runtime_id + strlen(RUNTIME_PREFIX), '/');
	b = a ? strchr(a + 1, '/') : NULL;
	if (a == NULL || b == NULL || (size_t)(a - runtime_id) - strlen(RUNTIME_PREFIX) >= sizeof id->name ||
	    (size_t)(b - a - 1) >= sizeof id->uid || strlen(b + 1) >= sizeof id->cid)
		goto bad;
	memcpy(id->name, runtime_id + strlen(RUNTIME_PREFIX), (size_t)(a - runtime_id) - strlen(RUNTIME_PREFIX));
	memcpy(id->uid, a + 1, (size_t)(b - a - 1));
	snprintf(id->cid, sizeof id->cid, "%s", b + 1);
	if (dns_label(id->name, 63) && uid_valid(id->uid) && (id->cid[0] == '\0' || cid_valid(id->cid)))
		return 0;
bad:
	return sb_fail(err, EINVAL, "'%s' is not a kubernetes runtime id (kubernetes:<pod>/<UID>/<containerID>)",
		       runtime_id);
}

static void ident_set(struct sandbox_handle *h, const struct ident *id)
{
	snprintf(h->runtime_id, sizeof h->runtime_id, RUNTIME_PREFIX "%s/%s/%s", id->name, id->uid, id->cid);
	if (id->created_rv[0] != '\0')
		snprintf(kstate_of(h)->created_rv, sizeof kstate_of(h)->created_rv, "%s", id->created_rv);
}

/* ---------------------------------------------------------------- the pod's description */

struct pod_build {
	json_t *volumes, *mounts, *seen;
	int n;
	const struct kube *k;
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
	const char *vol = b->k->set.manager_volume;
	size_t n = strlen(vol);

	if (strncmp(source, vol, n) != 0 || (source[n] != '/' && source[n] != '\0'))
		return sb_fail(err, EINVAL, "mount source %s is not below the manager's volume %s", source, vol);
	return path_fmt(out, len, err, "%s%s", b->k->set.volume_dir, source + n);
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
	const char *vol = b->k->set.manager_volume;
	size_t n = strlen(vol);

	if (strncmp(source, vol, n) != 0 || (source[n] != '/' && source[n] != '\0'))
		return sb_fail(err, EINVAL, "mount source %s is not below the manager's volume %s", source, vol);
	if (!b->claim_added &&
	    volume_add(b, "workspace", json_pack("{s:{s:s}}", "persistentVolumeClaim", "claimName", b->k->set.claim),
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

	if (b->k->set.claim[0] != '\0')
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
				rc = memory_dir(b, e->target, b->k->set.tmp_bytes, err);
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
	if (memory_dir(b, "/tmp", b->k->set.tmp_bytes, err) < 0 || memory_dir(b, "/dev/shm", b->k->set.shm_bytes, err) < 0 ||
	    plan_volumes(b, err) < 0 || agent_volumes(b, err) < 0)
		return -1;
	return 0;
}

/* The agent's arguments with its private paths as the pod sees them, and a TCP listener. */
static json_t *args_json(const struct agent_dir *d)
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
	/* The manager's receipt key, from the agent Secret (the state directory starts empty). */
	if (a != NULL && (json_array_append_new(a, json_string("--receipt-key")) < 0 ||
			  json_array_append_new(a, json_string(PRIVATE_INSIDE "/tls/" K8S_KEY_RECEIPT)) < 0)) {
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
		return sb_fail(err, EINVAL, "service account '%s' is not a Kubernetes name", sa);
	return json_object_set_new(json_object_get(pod, "spec"), "serviceAccountName", json_string(sa)) == 0 ? 0 :
	       sb_fail(err, ENOMEM, "describing the pod");
}

static json_t *pod_body(const struct kube *k, const struct agent_dir *d, const struct sandbox_spec *spec,
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
	if (k->set.nano_cpus > 0) {
		snprintf(cpu, sizeof cpu, "%lldm", (long long)(k->set.nano_cpus / 1000000));
		json_object_set_new(limits, "cpu", json_string(cpu));
		snprintf(cpu, sizeof cpu, "%lldm", (long long)(k->set.nano_cpus / 1000000 < REQUEST_MILLICPU ?
							      k->set.nano_cpus / 1000000 : REQUEST_MILLICPU));
		json_object_set_new(requests, "cpu", json_string(cpu));
	}
	if (k->set.memory_bytes > 0) {
		snprintf(memory, sizeof memory, "%lld", (long long)k->set.memory_bytes);
		json_object_set_new(limits, "memory", json_string(memory));
		snprintf(memory, sizeof memory, "%lld", (long long)(k->set.memory_bytes < REQUEST_MEMORY ?
								   k->set.memory_bytes : REQUEST_MEMORY));
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
			"seccompProfile", "type", "Localhost", "localhostProfile", k->set.seccomp_profile,
			"containers", "name", CONTAINER, "image", k->set.image, "imagePullPolicy", "Never",
			"args", args_json(d), "env", env_json(d), "volumeMounts", b.mounts, "resources", "limits", limits,
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

static json_t *agent_container(json_t *pod, const char *list)
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
static int boundary_check(const struct kube *k, json_t *pod, struct sb_err *err)
{
	json_t *spec = json_object_get(pod, "spec"), *psc = json_object_get(spec, "securityContext");
	json_t *sc = json_object_get(agent_container(pod, "containers"), "securityContext");
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
		 strcmp(json_string_value(json_object_get(seccomp, "localhostProfile")), k->set.seccomp_profile) != 0)
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

/* ---------------------------------------------------------------- the server's word on a pod */

struct verdict {
	bool proven;            /* evidence: h->evidence says which */
	char state[160];        /* otherwise: what the pod is, for the message */
};

/* One pod object (from a GET, a list or a watch event) against the recorded identity. */
static void pod_judge(json_t *pod, const struct ident *id, struct verdict *v, char *evidence, size_t len)
{
	json_t *meta = json_object_get(pod, "metadata");
	const char *uid = json_string_value(json_object_get(meta, "uid"));
	json_t *cs = agent_container(pod, "containerStatuses");
	json_t *term = json_object_get(json_object_get(cs, "state"), "terminated");
	const char *cid = json_string_value(json_object_get(term, "containerID"));
	const char *phase = json_string_value(json_object_get(json_object_get(pod, "status"), "phase"));

	v->proven = false;
	if (uid == NULL || strcmp(uid, id->uid) != 0) {
		/* The name now holds another pod: ours left the API, but nothing says how (a force delete). */
		snprintf(v->state, sizeof v->state, "the name %s holds another pod (UID %.40s)", id->name, uid ? uid : "?");
		return;
	}
	if (term != NULL && cid != NULL && cid[0] != '\0' && (id->cid[0] == '\0' ? cid_valid(cid) : strcmp(cid, id->cid) == 0)) {
		v->proven = true;
		snprintf(evidence, len, "pod terminated for UID %s (container %s exited %lld)", id->uid, cid,
			 (long long)json_integer_value(json_object_get(term, "exitCode")));
		return;
	}
	if (term != NULL)
		snprintf(v->state, sizeof v->state, "terminated (%.40s) %s", json_string_value(json_object_get(term, "reason")) ?: "",
			 cid == NULL || cid[0] == '\0' ? "without a containerID" : "with another containerID");
	else
		snprintf(v->state, sizeof v->state, "%s%s", phase ? phase : "of no phase",
			 json_object_get(meta, "deletionTimestamp") ? ", being deleted" : "");
}

static void pods_path(const struct kube *k, char *out, size_t len, const char *name)
{
	snprintf(out, len, "/api/v1/namespaces/%s/pods%s%s", k->ns, name ? "/" : "", name ? name : "");
}

/* ---------------------------------------------------------------- the pod's life */

static int pod_get(const struct kube *k, const char *name, long timeout_ms, struct rest_reply *r, struct sb_err *err)
{
	char path[256];

	pods_path(k, path, sizeof path, name);
	if (k8s_request(&k->conn, "GET", path, NULL, timeout_ms, r, err) < 0)
		return -1;
	if (r->status != 200 && r->status != 404) {
		sb_fail(err, EIO, "the API server did not give pod %s (HTTP %ld): %s", name, r->status, rest_reply_message(r));
		rest_reply_free(r);
		return -1;
	}
	return 0;
}

/* Delete with preconditions.uid: only the pod of that UID, never one that took its name. */
static int pod_delete(const struct kube *k, const struct ident *id, long timeout_ms, long *status, struct sb_err *err)
{
	json_t *body = json_pack("{s:s, s:s, s:I, s:{s:s}, s:s}", "apiVersion", "v1", "kind", "DeleteOptions",
				 "gracePeriodSeconds", (json_int_t)GRACE_SECONDS, "preconditions", "uid", id->uid,
				 "propagationPolicy", "Background");
	struct rest_reply r;
	char path[256];
	int rc;

	pods_path(k, path, sizeof path, id->name);
	rc = body == NULL ? sb_fail(err, ENOMEM, "delete options") :
	     k8s_request(&k->conn, "DELETE", path, body, timeout_ms, &r, err);
	json_decref(body);
	if (rc < 0)
		return -1;
	*status = r.status;
	if (r.status == 409)
		rc = sb_fail(err, EEXIST, "pod %s: the name holds another pod than UID %s (HTTP 409): %s", id->name, id->uid,
			     rest_reply_message(&r));
	else if (r.status != 200 && r.status != 202 && r.status != 404)
		rc = sb_fail(err, EIO, "the API server did not accept the delete of pod %s (HTTP %ld): %s", id->name,
			     r.status, rest_reply_message(&r));
	rest_reply_free(&r);
	return rc;
}

static int pod_create(const struct kube *k, json_t *body, struct ident *id, struct sb_err *err)
{
	struct rest_reply r;
	char path[256];
	const char *uid, *version;
	int rc = 0;

	pods_path(k, path, sizeof path, NULL);
	if (k8s_request(&k->conn, "POST", path, body, REQUEST_MS, &r, err) < 0)
		return -1;
	uid = json_string_value(json_object_get(json_object_get(r.body, "metadata"), "uid"));
	version = json_string_value(json_object_get(json_object_get(r.body, "metadata"), "resourceVersion"));
	if (r.status != 201 || uid == NULL || !uid_valid(uid))
		rc = sb_fail(err, EIO, "the API server refused to create pod %s (HTTP %ld): %s", id->name, r.status,
			     rest_reply_message(&r));
	else
		snprintf(id->uid, sizeof id->uid, "%s", uid);
	/* a version that does not fit, or is not a plain number, is not kept: no replay then */
	if (rc == 0 && version != NULL && strlen(version) < sizeof id->created_rv &&
	    strspn(version, "0123456789") == strlen(version))
		snprintf(id->created_rv, sizeof id->created_rv, "%s", version);
	rest_reply_free(&r);
	return rc;
}

/* Why a pod has no container yet: its phase and the first condition that is not True (the
 * scheduler's "0/1 nodes are available: 1 Insufficient cpu"). */
static void pending_say(json_t *pod, char *out, size_t len)
{
	json_t *status = json_object_get(pod, "status"), *c;
	size_t i;

	snprintf(out, len, "; the pod is %s", json_string_value(json_object_get(status, "phase")) ?: "of no phase");
	json_array_foreach(json_object_get(status, "conditions"), i, c)
		if (json_is_string(json_object_get(c, "status")) &&
		    strcmp(json_string_value(json_object_get(c, "status")), "True") != 0) {
			snprintf(out, len, "; the pod is %s (%s %s: %s)",
				 json_string_value(json_object_get(status, "phase")) ?: "of no phase",
				 json_string_value(json_object_get(c, "type")) ?: "",
				 json_string_value(json_object_get(c, "reason")) ?: "",
				 json_string_value(json_object_get(c, "message")) ?: "");
			return;
		}
}

/* Read back, the boundary checked; then until the agent serves at the pod's IP, or the pod ends. */
static int pod_ready(const struct kube *k, struct ident *id, char *ip, size_t iplen, struct sb_err *err)
{
	int64_t deadline = clock_mono_ms() + READY_MS;
	bool checked = false;
	char waiting[400] = "";

	for (;;) {
		struct rest_reply r;
		json_t *cs, *st;
		const char *pod_ip, *uid, *cid;
		int rc = 0;

		if (pod_get(k, id->name, REQUEST_MS, &r, err) < 0)
			return -1;
		uid = json_string_value(json_object_get(json_object_get(r.body, "metadata"), "uid"));
		if (r.status == 404 || uid == NULL || strcmp(uid, id->uid) != 0)
			rc = sb_fail(err, ENOENT, "pod %s (UID %s) is gone before its agent served", id->name, id->uid);
		else if (!checked && (rc = boundary_check(k, r.body, err)) == 0)
			checked = true;
		cs = agent_container(r.body, "containerStatuses");
		st = json_object_get(cs, "state");
		cid = json_string_value(json_object_get(cs, "containerID"));
		pod_ip = json_string_value(json_object_get(json_object_get(r.body, "status"), "podIP"));
		if (rc == 0 && json_object_get(st, "terminated") != NULL)
			rc = sb_fail(err, ECHILD, "the pod's container ended (%s: %s) before its agent served",
				     json_string_value(json_object_get(json_object_get(st, "terminated"), "reason")) ?: "?",
				     json_string_value(json_object_get(json_object_get(st, "terminated"), "message")) ?: "");
		else if (rc == 0 && json_object_get(st, "waiting") != NULL)
			/* ErrImageNeverPull, CreateContainerError (a missing seccomp profile): said at the end */
			snprintf(waiting, sizeof waiting, "; the container waits: %s %s",
				 json_string_value(json_object_get(json_object_get(st, "waiting"), "reason")) ?: "",
				 json_string_value(json_object_get(json_object_get(st, "waiting"), "message")) ?: "");
		else if (rc == 0 && cs == NULL)
			pending_say(r.body, waiting, sizeof waiting);
		if (rc == 0 && json_object_get(st, "running") != NULL && cid != NULL && cid_valid(cid) && pod_ip != NULL) {
			if (strchr(pod_ip, ':') != NULL)
				rc = sb_fail(err, EAFNOSUPPORT, "pod %s has an IPv6 address (%s): this build reaches agents "
					     "over IPv4 only", id->name, pod_ip);
			else if (agent_serving_inet(pod_ip, KUBERNETES_AGENT_PORT, clock_mono_ms() + 1000) == 1) {
				snprintf(id->cid, sizeof id->cid, "%s", cid);
				snprintf(ip, iplen, "%s", pod_ip);
				rest_reply_free(&r);
				return 0;
			}
		}
		rest_reply_free(&r);
		if (rc < 0)
			return -1;
		if (clock_remaining_ms(deadline) == 0)
			return sb_fail(err, ETIMEDOUT, "the agent of pod %s did not serve at its IP within %d ms%s", id->name,
				       READY_MS, waiting);
		usleep(POLL_MS * 1000);
	}
}

/* ---------------------------------------------------------------- the backend's operations */

static int kube_stop(struct backend *be, struct sandbox_handle *h, struct sb_err *err);
static int kube_evidence(struct backend *be, struct sandbox_handle *h, int timeout_ms, struct sb_err *err);

/* A failed prepare leaves nothing running: delete, evidence. */
static void prepare_abort(struct backend *be, struct sandbox_handle *h, struct sb_err *err)
{
	struct sb_err again;
	size_t len = strlen(err->msg);

	if (strncmp(h->runtime_id, RUNTIME_PREFIX, strlen(RUNTIME_PREFIX)) != 0)
		return;
	if (kube_stop(be, h, &again) < 0 || kube_evidence(be, h, READY_MS, &again) < 0) {
		snprintf(err->msg + len, sizeof err->msg - len, " (and the pod's end is NOT proven: %s)", again.msg);
		return;
	}
	memset(h, 0, sizeof *h);
}

/* The credentials, bound to the pod just created: a TokenRequest names it by UID, so it must exist
 * first, and they must be in place before any command runs, which is after prepare() returns. The
 * kubelet may start the agent meanwhile: it does not read them. */
static int credentials_bind(const struct kube *k, const struct sandbox_spec *spec, const struct ident *id,
			    struct sb_err *err)
{
	struct sandbox_bound pod = { .kind = "Pod", .api_version = "v1", .ns = k->ns, .name = id->name, .uid = id->uid };

	if (spec->credentials == NULL)
		return 0;
	if (spec->credentials(spec->credentials_ctx, &pod, err) < 0) {
		sb_err_prefix(err, "the credentials of pod %s (UID %s)", id->name, id->uid);
		return -1;
	}
	return 0;
}

/* "sandbox-<session>-<generation>": session ids are hex, so this is a DNS label. */
static int pod_name(const struct sandbox_spec *spec, char *out, size_t len, struct sb_err *err)
{
	snprintf(out, len, "sandbox-%s-%llu", spec->session, (unsigned long long)spec->generation);
	if (!dns_label(out, 63) || strlen(spec->session) > 63)
		return sb_fail(err, EINVAL, "session '%s' cannot name a pod (lower-case letters, digits and '-', 63 at most)",
			       spec->session);
	return 0;
}

static int kube_prepare(struct backend *be, const struct sandbox_spec *spec, struct sandbox_handle *h,
			struct sb_err *err)
{
	struct kube *k = kube_of(be);
	struct agent_dir *d = calloc(1, sizeof *d);
	struct ident id = { 0 };
	char ip[64];
	json_t *body = NULL;
	int rc = -1;

	memset(h, 0, sizeof *h);
	if (d == NULL)
		return sb_fail(err, ENOMEM, "preparing a pod");
	if (spec == NULL || spec->session == NULL || spec->plan == NULL || spec->private_dir == NULL ||
	    spec->manager_name == NULL)
		sb_fail(err, EINVAL, "the sandbox spec needs a session, a mount plan, a private directory and the "
			"manager's name");
	else if (pod_name(spec, id.name, sizeof id.name, err) == 0 && agent_dir_prepare(d, spec, err) == 0 &&
		 (body = pod_body(k, d, spec, id.name, err)) != NULL && pod_create(k, body, &id, err) == 0) {
		ident_set(h, &id);
		/* The pod first (its UID owns its Secrets and binds its tokens), then the pod-bound
		 * tokens, then the Secrets built from them, which the pod waits for. */
		if (credentials_bind(k, spec, &id, err) == 0 &&
		    k8s_secrets_create(&k->conn, k->ns, id.name, id.uid, json_object_get(json_object_get(body, "metadata"),
											 "labels"), d, REQUEST_MS, err) == 0 &&
		    pod_ready(k, &id, ip, sizeof ip, err) == 0) {
			ident_set(h, &id);
			snprintf(h->address, sizeof h->address, "%s:%d", ip, KUBERNETES_AGENT_PORT);
			rc = 0;
		}
	}
	json_decref(body);
	if (rc < 0) {
		prepare_abort(be, h, err);
		sb_err_prefix(err, "preparing the pod of session %s (generation %llu)",
			      spec && spec->session ? spec->session : "?",
			      spec ? (unsigned long long)spec->generation : 0ULL);
	}
	free(d);
	return rc;
}

static int kube_stop(struct backend *be, struct sandbox_handle *h, struct sb_err *err)
{
	struct ident id;
	long status = 0;

	if (ident_parse(h->runtime_id, &id, err) < 0)
		return -1;
	if (pod_delete(kube_of(be), &id, STOP_MS, &status, err) < 0)
		return -1;
	/* 404: nothing of this UID to delete, and no delete of ours preceded: not evidence. */
	if (status == 200 || status == 202)
		kstate_of(h)->deleted = true;
	return 0;
}

struct watching {
	const struct ident *id;
	bool deleted;
	bool found;             /* the last list held the name */
	struct verdict v;
	char *evidence;
	size_t len;
};

static int watch_event(void *user, const char *type, json_t *pod)
{
	struct watching *w = user;
	const char *uid = json_string_value(json_object_get(json_object_get(pod, "metadata"), "uid"));

	if (strcmp(type, "DELETED") == 0) {
		if (uid == NULL || strcmp(uid, w->id->uid) != 0)
			return 0;
		if (w->deleted) {
			w->v.proven = true;
			snprintf(w->evidence, w->len, "pod UID %s gone (watch DELETED after delete with preconditions.uid)",
				 w->id->uid);
			return 1;
		}
		/* Someone else's delete: the object's last state may still be the kubelet's word that the
		 * recorded container terminated (a graceful delete); a force delete's is not. */
		pod_judge(pod, w->id, &w->v, w->evidence, w->len);
		if (w->v.proven)
			return 1;
		snprintf(w->v.state, sizeof w->v.state, "deleted, by no delete of this manager's");
		return 0;
	}
	if (strcmp(type, "ADDED") != 0 && strcmp(type, "MODIFIED") != 0)
		return 0;
	if (uid == NULL || strcmp(uid, w->id->uid) != 0)
		return 0;
	pod_judge(pod, w->id, &w->v, w->evidence, w->len);
	return w->v.proven ? 1 : 0;
}

/* A list of the one name (fieldSelector), so that its resourceVersion starts the watch. */
static int pod_list_one(const struct kube *k, struct watching *w, long timeout_ms, char *rv, size_t rvlen,
			struct sb_err *err)
{
	struct rest_reply r;
	char path[400];
	json_t *item;
	size_t i;
	bool found = false;

	snprintf(path, sizeof path, "/api/v1/namespaces/%s/pods?fieldSelector=metadata.name%%3D%s", k->ns, w->id->name);
	if (k8s_request(&k->conn, "GET", path, NULL, timeout_ms, &r, err) < 0)
		return -1;
	if (r.status != 200 || !json_is_array(json_object_get(r.body, "items"))) {
		sb_fail(err, EIO, "the API server did not list pod %s (HTTP %ld): %s", w->id->name, r.status,
			rest_reply_message(&r));
		rest_reply_free(&r);
		return -1;
	}
	snprintf(rv, rvlen, "%s", json_string_value(json_object_get(json_object_get(r.body, "metadata"),
								   "resourceVersion")) ?: "");
	json_array_foreach(json_object_get(r.body, "items"), i, item) {
		found = true;
		pod_judge(item, w->id, &w->v, w->evidence, w->len);
	}
	w->found = found;
	if (!found && w->deleted) {
		w->v.proven = true;
		snprintf(w->evidence, w->len, "pod UID %s gone (404 after delete with preconditions.uid)", w->id->uid);
	} else if (!found) {
		snprintf(w->v.state, sizeof w->v.state, "not found, and no delete with preconditions.uid of this manager's "
			 "preceded");
	}
	rest_reply_free(&r);
	return 0;
}

static int kube_evidence(struct backend *be, struct sandbox_handle *h, int timeout_ms, struct sb_err *err)
{
	struct kube *k = kube_of(be);
	int64_t deadline = clock_mono_ms() + (timeout_ms < 0 ? 0 : timeout_ms);
	struct ident id;
	struct watching w = { .id = &id, .evidence = h->evidence, .len = sizeof h->evidence };
	char rv[64] = "", path[600], said[sizeof err->msg] = "";
	bool replayed = false;

	if (ident_parse(h->runtime_id, &id, err) < 0)
		return -1;
	w.deleted = kstate_of(h)->deleted;
	err->msg[0] = '\0';
	for (;;) {
		long left = clock_remaining_ms(deadline);
		int64_t started;
		int got;

		if (rv[0] == '\0') {
			if (pod_list_one(k, &w, left < REQUEST_MS ? left : REQUEST_MS, rv, sizeof rv, err) < 0) {
				/* The server's own refusal says more than a later ask that ran out of time. */
				if (err->errnum == EIO)
					snprintf(said, sizeof said, "%s", err->msg);
				if (clock_remaining_ms(deadline) == 0)
					break;
			}
			if (w.v.proven)
				break;
			/* Gone by no delete of ours: once, the pod's own history from its create (410 Gone when
			 * the server no longer holds it: then not proven, as before). */
			if (rv[0] != '\0' && !w.found && !w.deleted && !replayed && kstate_of(h)->created_rv[0] != '\0') {
				snprintf(rv, sizeof rv, "%s", kstate_of(h)->created_rv);
				replayed = true;
			}
		}
		left = clock_remaining_ms(deadline);
		if (left == 0)
			break;
		if (rv[0] == '\0') {
			usleep(POLL_MS * 1000);
			continue;
		}
		snprintf(path, sizeof path, "/api/v1/namespaces/%s/pods?fieldSelector=metadata.name%%3D%s&watch=1"
			 "&resourceVersion=%s&timeoutSeconds=%ld", k->ns, id.name, rv, (left + 999) / 1000);
		started = clock_mono_ms();
		got = k8s_watch(&k->conn, path, left < WATCH_MS ? left : WATCH_MS, watch_event, &w, err);
		if (got == K8S_WATCH_DECIDED)
			break;
		/* Ended, 410 Gone, or refused: list again, from a fresh resourceVersion; not at once
		 * when the watch did not last (a server that closes every watch is not asked in a loop). */
		rv[0] = '\0';
		if (got < 0 || clock_mono_ms() - started < POLL_MS)
			usleep(POLL_MS * 1000);
	}
	if (!w.v.proven) {
		char why[sizeof err->msg];

		snprintf(why, sizeof why, "%s", err->errnum == EIO || said[0] == '\0' ? err->msg : said);
		return sb_fail(err, ETIMEDOUT, "pod %s (UID %s) is %s after %d ms: not proven gone%s%s", id.name, id.uid,
			       w.v.state[0] ? w.v.state : "of unknown state", timeout_ms, why[0] ? "; " : "", why);
	}
	/* The pod is gone or its container ended: its Secrets go now, not only when the garbage
	 * collector gets to them (k8s_secrets.c says why both). */
	k8s_secrets_delete(&k->conn, k->ns, id.name, STOP_MS);
	/* Evidence by a terminated container: the object goes too (evidence stands whatever the delete). */
	if (strncmp(h->evidence, "pod terminated", 14) == 0 && !w.deleted) {
		struct sb_err ignored;
		long status;

		if (pod_delete(k, &id, STOP_MS, &status, &ignored) < 0)
			sb_warn("pod %s ended but was not deleted: %s", id.name, ignored.msg);
	}
	return 0;
}

static int kube_adopt(struct backend *be, const char *runtime_id, const char *address, struct sandbox_handle *h,
		      struct sb_err *err)
{
	struct ident id;

	(void)be;
	memset(h, 0, sizeof *h);
	if (ident_parse(runtime_id, &id, err) < 0)
		return -1;
	if (address != NULL && strlen(address) >= sizeof h->address)
		return sb_fail(err, ENAMETOOLONG, "address too long");
	ident_set(h, &id);
	snprintf(h->address, sizeof h->address, "%s", address ? address : "");
	return 0;
}

/* Recovery of an unfinished prepare: the pod of (session, generation), by its labels. */
static int kube_lookup(struct backend *be, const char *session, uint64_t generation, struct sandbox_handle *h,
		       struct sb_err *err)
{
	struct kube *k = kube_of(be);
	struct rest_reply r;
	struct ident id = { 0 };
	char path[512];
	json_t *first, *cs;
	const char *name, *uid, *cid;
	int rc = 0;

	memset(h, 0, sizeof *h);
	if (!dns_label(session, 63))
		return sb_fail(err, EINVAL, "session '%s' cannot be looked up", session);
	snprintf(path, sizeof path, "/api/v1/namespaces/%s/pods?labelSelector=" LABEL_SESSION "%%3D%s%%2C"
		 LABEL_GENERATION "%%3D%llu", k->ns, session, (unsigned long long)generation);
	if (k8s_request(&k->conn, "GET", path, NULL, REQUEST_MS, &r, err) < 0)
		return -1;
	first = json_array_get(json_object_get(r.body, "items"), 0);
	name = json_string_value(json_object_get(json_object_get(first, "metadata"), "name"));
	uid = json_string_value(json_object_get(json_object_get(first, "metadata"), "uid"));
	cs = agent_container(first, "containerStatuses");
	cid = json_string_value(json_object_get(cs, "containerID"));
	if (r.status != 200 || !json_is_array(json_object_get(r.body, "items")))
		rc = sb_fail(err, EIO, "the API server could not list pods (HTTP %ld): %s", r.status, rest_reply_message(&r));
	else if (name != NULL && uid != NULL && strlen(name) < sizeof id.name && uid_valid(uid)) {
		snprintf(id.name, sizeof id.name, "%s", name);
		snprintf(id.uid, sizeof id.uid, "%s", uid);
		if (cid != NULL && cid_valid(cid))
			snprintf(id.cid, sizeof id.cid, "%s", cid);
		ident_set(h, &id);
		rc = 1;
	}
	rest_reply_free(&r);
	return rc;
}

static int kube_limits(struct backend *be, const struct sandbox_handle *h, struct sandbox_limits *out,
		       struct sb_err *err)
{
	const struct kube *k = kube_of(be);

	(void)h;
	(void)err;
	*out = (struct sandbox_limits){ .tmp_bytes = k->set.tmp_bytes, .shm_bytes = k->set.shm_bytes,
					.memory_max = k->set.memory_bytes > 0 ? k->set.memory_bytes : -1,
					.pids_max = -1,
					.cpu_quota_us = k->set.nano_cpus > 0 ? k->set.nano_cpus / 10000 : -1,
					.cpu_period_us = k->set.nano_cpus > 0 ? 100000 : -1 };
	return 0;
}

static void kube_destroy(struct backend *be)
{
	struct kube *k = kube_of(be);

	k8s_conn_free(&k->conn);
	free(k);
}

static const struct backend_ops kube_ops = {
	.name = "kubernetes",
	.binds_credentials = true,
	.prepare = kube_prepare,
	.stop = kube_stop,
	.evidence = kube_evidence,
	.adopt = kube_adopt,
	.lookup = kube_lookup,
	.limits = kube_limits,
	.destroy = kube_destroy,
};

/* At start: the server answers, its version (whether it knows hostUsers), and the manager may
 * list pods in the namespace. */
static int server_check(struct kube *k, struct sb_err *err)
{
	struct rest_reply r;
	char path[256];
	const char *minor;
	int rc = 0;

	if (k8s_request(&k->conn, "GET", "/version", NULL, REQUEST_MS, &r, err) < 0) {
		sb_err_prefix(err, "the Kubernetes API server %s", k->conn.server);
		return -1;
	}
	minor = json_string_value(json_object_get(r.body, "minor"));
	if (r.status != 200 || minor == NULL || json_string_value(json_object_get(r.body, "major")) == NULL ||
	    strcmp(json_string_value(json_object_get(r.body, "major")), "1") != 0)
		rc = sb_fail(err, EIO, "%s does not answer as a Kubernetes API server (HTTP %ld): %s", k->conn.server,
			     r.status, rest_reply_message(&r));
	else
		k->minor = atoi(minor); /* "33" or "33+" */
	rest_reply_free(&r);
	if (rc < 0)
		return -1;
	k->host_users = k->minor >= 25;
	snprintf(path, sizeof path, "/api/v1/namespaces/%s/pods?labelSelector=" LABEL_MANAGED "%%3D" MANAGED_BY, k->ns);
	if (k8s_request(&k->conn, "GET", path, NULL, REQUEST_MS, &r, err) < 0)
		return -1;
	if (r.status != 200)
		rc = sb_fail(err, EACCES, "the manager may not list pods in namespace %s (HTTP %ld): %s", k->ns, r.status,
			     rest_reply_message(&r));
	else
		sb_info("kubernetes 1.%d at %s, namespace %s: %zu pod(s) of this manager's kind (recovery settles the "
			"recorded ones)", k->minor, k->conn.server, k->ns,
			json_array_size(json_object_get(r.body, "items")));
	rest_reply_free(&r);
	return rc;
}

int backend_kubernetes_create(struct backend **out, const struct kubernetes_settings *set, struct sb_err *err)
{
	struct kube *k = calloc(1, sizeof *k);

	if (k == NULL)
		return sb_fail(err, ENOMEM, "creating the kubernetes backend");
	k->be.ops = &kube_ops;
	k->set = *set;
	backend_sizes_default(&k->set.tmp_bytes, &k->set.shm_bytes);
	if (k->set.seccomp_profile[0] == '\0')
		snprintf(k->set.seccomp_profile, sizeof k->set.seccomp_profile, "infra-sandbox/seccomp.json");
	if (backend_image_check(set->image, err) < 0) {
		free(k);
		return -1;
	}
	if ((set->volume_dir[0] != '/' && set->claim[0] == '\0') || set->manager_volume[0] != '/') {
		free(k);
		return sb_fail(err, EINVAL, "config: the kubernetes backend needs k8s-volume hostpath:DIR (the absolute "
			       "path where the node sees the manager's volume) or pvc:CLAIM (a claim holding the manager's "
			       "volume at its root)");
	}
	if (k8s_conn_load(&k->conn, set->kubeconfig, err) < 0) {
		free(k);
		return -1;
	}
	snprintf(k->ns, sizeof k->ns, "%s", set->namespace[0] ? set->namespace :
		 k->conn.namespace[0] ? k->conn.namespace : "default");
	if (!dns_label(k->ns, 63) || server_check(k, err) < 0) {
		if (!dns_label(k->ns, 63))
			sb_fail(err, EINVAL, "config: namespace '%s' is not a Kubernetes name", k->ns);
		kube_destroy(&k->be);
		return -1;
	}
	*out = &k->be;
	return 0;
}
