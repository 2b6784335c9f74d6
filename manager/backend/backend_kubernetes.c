/* The kubernetes backend (backend.h): a session's sandbox is one pod of the sandbox image, whose
 * entrypoint is the static sandbox-agent, made and proven gone through the API server (k8s_api.h).
 * The manager speaks mutual TLS to the agent at the pod's IP on KUBERNETES_AGENT_PORT; the agent
 * closes its own port to every command it runs (serve.c adds it to --block-port's list).
 *
 * The pod's description and the check of what the server kept: k8s_pod.c.
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
#include "k8s_netpol.h"
#include "k8s_pod.h"
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
#define DELETING_MS 30000    /* evidence of a pod the server still shows, deleted by us (below) */
#define RUNTIME_PREFIX "kubernetes:"

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
	bool proven;           /* evidence() returned 0: h->evidence is the first proof, and stands */
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

static struct k8s_pod_target pod_target(const struct kube *k)
{
	return (struct k8s_pod_target){ .set = &k->set, .minor = k->minor, .host_users = k->host_users };
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
	return sb_invalid(err, "'%s' is not a kubernetes runtime id (kubernetes:<pod>/<UID>/<containerID>)",
			  runtime_id);
}

static void ident_set(struct sandbox_handle *h, const struct ident *id)
{
	snprintf(h->runtime_id, sizeof h->runtime_id, RUNTIME_PREFIX "%s/%s/%s", id->name, id->uid, id->cid);
	if (id->created_rv[0] != '\0')
		snprintf(kstate_of(h)->created_rv, sizeof kstate_of(h)->created_rv, "%s", id->created_rv);
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
	json_t *cs = k8s_agent_container(pod, "containerStatuses");
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

/* The object of the pod's first change (ADDED, MODIFIED), or nothing when it was deleted: then the
 * next read says it is gone. */
static int changed_event(void *user, const char *type, json_t *pod)
{
	json_t **next = user;

	if (strcmp(type, "DELETED") == 0)
		return 1;
	if (strcmp(type, "ADDED") != 0 && strcmp(type, "MODIFIED") != 0)
		return 0;
	*next = json_incref(pod);
	return 1;
}

/* The watch of the pod of that name from resourceVersion rv, for about bound_ms: 0, or -1 (a cut path
 * would ask for another object). */
static int pod_watch_path(const struct kube *k, const char *name, const char *rv, long bound_ms, char *path,
			  size_t len, struct sb_err *err)
{
	return path_fmt(path, len, err, "/api/v1/namespaces/%s/pods?fieldSelector=metadata.name%%3D%s&watch=1"
			"&resourceVersion=%s&timeoutSeconds=%ld", k->ns, name, rv, (bound_ms + 999) / 1000);
}

/* Until the pod of that name changes after resourceVersion rv (a watch: the kubelet's status
 * arrives as an event, not at the next tick of a poll), at most bound_ms; the changed object (a new
 * reference), or NULL when the next state is to be read (deleted, or no event). A watch the server
 * refuses, or one that ends at once, costs a pause of POLL_MS instead (never a loop of asks). */
static json_t *pod_change_wait(const struct kube *k, const char *name, const char *rv, long bound_ms)
{
	char path[600];
	struct sb_err ignored;
	int64_t started = clock_mono_ms();
	json_t *next = NULL;
	int got = -1;

	if (rv != NULL && rv[0] != '\0' && strlen(rv) < 64 && strspn(rv, "0123456789") == strlen(rv) &&
	    pod_watch_path(k, name, rv, bound_ms, path, sizeof path, &ignored) == 0)
		got = k8s_watch(&k->conn, path, bound_ms, changed_event, &next, &ignored);
	if (got != K8S_WATCH_DECIDED && clock_mono_ms() - started < POLL_MS)
		usleep(POLL_MS * 1000);
	return next;
}

/* Read back, the boundary checked; then until the agent serves at the pod's IP, or the pod ends.
 * Between two reads, while the pod has no running container and IP (scheduling, volumes, sandbox,
 * container: each ends in a status the kubelet writes): a watch for its next change, whose object
 * is the next read. Once it has both, the agent's port is asked again after 5, 10, 20 ... ms (its
 * start, 10-20 ms, writes no status), up to POLL_MS apart. */
static int pod_ready(const struct kube *k, struct ident *id, char *ip, size_t iplen, struct sb_err *err)
{
	const struct k8s_pod_target t = pod_target(k);
	int64_t deadline = clock_mono_ms() + READY_MS;
	bool checked = false;
	char waiting[400] = "";
	long probe_ms = 5;
	json_t *next = NULL; /* the watched change: judged as a GET's reply is */

	for (;;) {
		struct rest_reply r;
		json_t *pod, *cs, *st;
		const char *pod_ip, *uid, *cid;
		char rv[64] = "";
		bool started = false;
		int rc = 0;

		if (next != NULL) {
			pod = next;
			next = NULL;
		} else {
			if (pod_get(k, id->name, REQUEST_MS, &r, err) < 0)
				return -1;
			/* a 404 (or a body that is no object) holds no UID: gone */
			pod = r.status == 404 || r.body == NULL ? json_object() : json_incref(r.body);
			rest_reply_free(&r);
			if (pod == NULL)
				return sb_fail(err, ENOMEM, "reading pod %s", id->name);
		}
		uid = json_string_value(json_object_get(json_object_get(pod, "metadata"), "uid"));
		if (uid == NULL || strcmp(uid, id->uid) != 0)
			rc = sb_fail(err, ENOENT, "pod %s (UID %s) is gone before its agent served", id->name, id->uid);
		else if (!checked && (rc = k8s_pod_check(&t, pod, err)) == 0)
			checked = true;
		cs = k8s_agent_container(pod, "containerStatuses");
		st = json_object_get(cs, "state");
		cid = json_string_value(json_object_get(cs, "containerID"));
		pod_ip = json_string_value(json_object_get(json_object_get(pod, "status"), "podIP"));
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
			pending_say(pod, waiting, sizeof waiting);
		if (rc == 0 && json_object_get(st, "running") != NULL && cid != NULL && cid_valid(cid) && pod_ip != NULL) {
			started = true;
			if (strchr(pod_ip, ':') != NULL)
				rc = sb_fail(err, EAFNOSUPPORT, "pod %s has an IPv6 address (%s): this build reaches agents "
					     "over IPv4 only", id->name, pod_ip);
			else if (agent_serving_inet(pod_ip, KUBERNETES_AGENT_PORT, clock_mono_ms() + 1000) == 1) {
				snprintf(id->cid, sizeof id->cid, "%s", cid);
				snprintf(ip, iplen, "%s", pod_ip);
				json_decref(pod);
				return 0;
			}
		}
		snprintf(rv, sizeof rv, "%s", json_string_value(json_object_get(json_object_get(pod, "metadata"),
									      "resourceVersion")) ?: "");
		json_decref(pod);
		if (rc < 0)
			return -1;
		if (clock_remaining_ms(deadline) == 0)
			return sb_fail(err, ETIMEDOUT, "the agent of pod %s did not serve at its IP within %d ms%s", id->name,
				       READY_MS, waiting);
		if (started) {
			usleep((useconds_t)probe_ms * 1000);
			probe_ms = probe_ms * 2 > POLL_MS ? POLL_MS : probe_ms * 2;
		} else {
			long left = clock_remaining_ms(deadline);

			next = pod_change_wait(k, id->name, rv, left < WATCH_MS ? left : WATCH_MS);
		}
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
		return sb_invalid(err, "session '%s' cannot name a pod (lower-case letters, digits and '-', 63 at most)",
				  spec->session);
	return 0;
}

static int kube_prepare(struct backend *be, const struct sandbox_spec *spec, struct sandbox_handle *h,
			struct sb_err *err)
{
	struct kube *k = kube_of(be);
	const struct k8s_pod_target t = pod_target(k);
	struct agent_dir *d = calloc(1, sizeof *d);
	struct ident id = { 0 };
	char ip[64];
	json_t *body = NULL;
	int rc = -1;

	memset(h, 0, sizeof *h);
	/* Fail closed: a pod always has the pod network, so loopback only cannot be given (the config
	 * and session create refuse it first). */
	if (spec->network == SANDBOX_NETWORK_NONE) {
		free(d);
		return sb_fail(err, 0, "network none: a pod always has the pod network (docs/isolation.md, N1)");
	}
	if (d == NULL)
		return sb_fail(err, ENOMEM, "preparing a pod");
	if (spec == NULL || spec->session == NULL || spec->plan == NULL || spec->private_dir == NULL ||
	    spec->manager_name == NULL)
		sb_invalid(err, "the sandbox spec needs a session, a mount plan, a private directory and the "
			   "manager's name");
	/* Policy proxy: the pod's way out is its agent's link from the manager (agent_relay.h); the
	 * NetworkPolicy that takes every other away is in place before the pod exists. */
	else if ((spec->network != SANDBOX_NETWORK_PROXY || k8s_netpol_ensure(&k->conn, k->ns, REQUEST_MS, err) == 0) &&
		 pod_name(spec, id.name, sizeof id.name, err) == 0 && agent_dir_prepare(d, spec, err) == 0 &&
		 (body = k8s_pod_body(&t, d, spec, id.name, err)) != NULL && pod_create(k, body, &id, err) == 0) {
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

/* Past the caller's deadline, a pod that the server still lists after our delete is being torn
 * down: its end comes with the kubelet's next status, which on a loaded node took longer than the
 * manager's general evidence wait (a takeover then left the session reserved, seen once in six
 * kubernetes_managers runs). The wait is stretched to DELETING_MS from its start, once; a server
 * that does not answer, or a pod it no longer lists, gets no more than the caller's. */
static bool deadline_stretch(const struct watching *w, int64_t begun, int64_t *deadline, bool *stretched)
{
	if (*stretched || !w->found || !w->deleted || clock_remaining_ms(*deadline) != 0 ||
	    clock_mono_ms() - begun >= DELETING_MS)
		return false;
	*deadline = begun + DELETING_MS;
	*stretched = true;
	return true;
}

static int kube_evidence(struct backend *be, struct sandbox_handle *h, int timeout_ms, struct sb_err *err)
{
	int64_t begun = clock_mono_ms();
	bool stretched = false;
	struct kube *k = kube_of(be);
	int64_t deadline = clock_mono_ms() + (timeout_ms < 0 ? 0 : timeout_ms);
	struct ident id;
	struct watching w = { .id = &id, .evidence = h->evidence, .len = sizeof h->evidence };
	char rv[64] = "", path[600], said[sizeof err->msg] = "";
	bool replayed = false;

	if (ident_parse(h->runtime_id, &id, err) < 0)
		return -1;
	if (kstate_of(h)->proven)
		return 0; /* the pod was deleted after that proof: a 404 now would replace how it ended */
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
				if (clock_remaining_ms(deadline) == 0 && !deadline_stretch(&w, begun, &deadline, &stretched))
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
		if (clock_remaining_ms(deadline) == 0)
			(void)deadline_stretch(&w, begun, &deadline, &stretched);
		left = clock_remaining_ms(deadline);
		if (left == 0)
			break;
		if (rv[0] == '\0') {
			usleep(POLL_MS * 1000);
			continue;
		}
		started = clock_mono_ms();
		got = pod_watch_path(k, id.name, rv, left, path, sizeof path, err) < 0 ? -1 :
		      k8s_watch(&k->conn, path, left < WATCH_MS ? left : WATCH_MS, watch_event, &w, err);
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
	kstate_of(h)->proven = true;
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
		return sb_invalid(err, "session '%s' cannot be looked up", session);
	snprintf(path, sizeof path, "/api/v1/namespaces/%s/pods?labelSelector=" LABEL_SESSION "%%3D%s%%2C"
		 LABEL_GENERATION "%%3D%llu", k->ns, session, (unsigned long long)generation);
	if (k8s_request(&k->conn, "GET", path, NULL, REQUEST_MS, &r, err) < 0)
		return -1;
	first = json_array_get(json_object_get(r.body, "items"), 0);
	name = json_string_value(json_object_get(json_object_get(first, "metadata"), "name"));
	uid = json_string_value(json_object_get(json_object_get(first, "metadata"), "uid"));
	cs = k8s_agent_container(first, "containerStatuses");
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
	/* pids is not a pod field (the kubelet's podPidsLimit): no limit this backend applies. */
	backend_limits_configured(out, k->set.tmp_bytes, k->set.shm_bytes, k->set.memory_bytes, 0, k->set.nano_cpus);
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
	.net_by_agent = true,
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
		return sb_invalid(err, "config: the kubernetes backend needs k8s-volume hostpath:DIR (the absolute "
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
			sb_invalid(err, "config: namespace '%s' is not a Kubernetes name", k->ns);
		kube_destroy(&k->be);
		return -1;
	}
	*out = &k->be;
	return 0;
}
