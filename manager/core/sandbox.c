/* A session's sandbox over its life: prepared with a new generation (certificate, receipt key,
 * private directory, backend), reused across calls, retired only with evidence, evicted when idle,
 * and cleaned up after a manager restart. Never declares a sandbox gone without its backend's
 * evidence; never reuses a generation. */
#include "manager.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "agent_client.h"
#include "agent_dir.h"
#include "clock.h"
#include "egress_edge.h"
#include "failpoint.h"
#include "egress_log.h"
#include "egress_proxy.h"
#include "textesc.h"
#include "thread.h"
#include "identity_ids.h"
#include "log.h"
#include "pathfmt.h"
#include "grants.h"
#include "k8s_api.h"
#include "private_dir.h"
#include "workspace.h"

struct live_sandbox *sandbox_find(struct manager *m, const char *session)
{
	struct live_sandbox *l;

	pthread_mutex_lock(&m->lock);
	for (l = m->live; l != NULL && strcmp(l->session, session) != 0; l = l->next) {
	}
	pthread_mutex_unlock(&m->lock);
	return l;
}

/* The grants' credentials kept for the edges, wiped (a start that failed before its edges). */
static void edge_creds_free(struct live_sandbox *l)
{
	struct snapshot held = { .edges = l->edge_creds, .edges_n = l->edges_n };

	snapshot_edges_free(&held);
	l->edge_creds = NULL;
	l->edges_n = 0;
}

void live_free(struct live_sandbox *l)
{
	if (l == NULL)
		return;
	/* Its egress listener goes with it: once the sandbox is retired, held or forgotten, nothing
	 * of the manager's stays open in its network namespace. */
	egress_proxy_stop(&l->egress);
	for (size_t i = 0; i < SNAPSHOT_EDGES_MAX; i++)
		egress_edge_stop(&l->edges[i]);
	/* After the proxy and the edges: their ends of every relayed connection are closed by now. */
	for (size_t i = 0; i < l->relays_n; i++)
		agent_relay_stop(&l->relays[i]);
	edge_creds_free(l);
	egress_log_free(l->egress_log);
	if (l->m != NULL) {
		json_decref(l->notes);
		pthread_mutex_destroy(&l->notes_lock);
	}
	agent_close(l->conn);
	tls_config_free(l->tls);
	explicit_bzero(l->receipt_key, sizeof l->receipt_key);
	free(l);
}

static void live_unlink(struct manager *m, struct live_sandbox *gone)
{
	struct live_sandbox **p;

	pthread_mutex_lock(&m->lock);
	for (p = &m->live; *p != NULL; p = &(*p)->next)
		if (*p == gone) {
			*p = gone->next;
			break;
		}
	pthread_mutex_unlock(&m->lock);
}

static int sandbox_record(struct manager *m, const struct live_sandbox *l, const char *state, struct sb_err *err)
{
	struct sandbox_row row;

	memset(&row, 0, sizeof row);
	snprintf(row.session, sizeof row.session, "%s", l->session);
	row.generation = l->generation;
	snprintf(row.backend, sizeof row.backend, "%s", m->backend->ops->name);
	snprintf(row.runtime_id, sizeof row.runtime_id, "%s", l->h.runtime_id);
	snprintf(row.address, sizeof row.address, "%s", l->h.address);
	snprintf(row.private_dir, sizeof row.private_dir, "%s", l->private_dir);
	snprintf(row.state, sizeof row.state, "%s", state);
	/* The authority it is prepared with (sandbox_start), read once: the row says what it holds. */
	snprintf(row.grants_json, sizeof row.grants_json, "%s", l->authority);
	row.started_ms = clock_real_ms();
	return records_sandbox_upsert(m->rec, &row, err);
}

#define EGRESS_NOTES_MAX 64 /* an exec's mutating requests kept as they go; the rest in its end's record */

/* A mutating request through an edge, as its exec's record keeps it (every string terminal-safe). */
static json_t *note_json(const struct egress_request *req)
{
	const struct k8s_request *k = req->k8s;
	char *path = textesc_str(req->path ? req->path : "");
	char *name = textesc_str(k ? k->name : "");
	char *ns = textesc_str(k ? k->namespace : "");
	json_t *o = json_pack("{s:s, s:s?, s:s, s:s, s:s, s:s, s:s, s:b, s:o}", "method", req->method, "path", path,
			      "verb", k ? k->verb : "", "group", k ? k->group : "", "resource", k ? k->resource : "",
			      "namespace", ns ? ns : "", "name", name ? name : "", "dry_run", k != NULL && k->dry_run,
			      "status", req->status != 0 ? json_integer(req->status) : json_null());

	free(path);
	free(name);
	free(ns);
	return o;
}

/* egress_edge.h's note: the running exec's mutating requests on its record at once, before each
 * leaves and when it ends; recovery keeps them with the end it finds for an exec whose manager died
 * meanwhile (recovery.c). Outside an exec, or for one that ended, nothing. */
static void edge_note(void *ctx, const char *key, const struct egress_request *req)
{
	struct live_sandbox *l = ctx;
	struct manager *m = l->m;
	char exec_id[65] = "", *text = NULL;
	struct sb_err err;

	pthread_mutex_lock(&m->lock);
	if (l->busy)
		snprintf(exec_id, sizeof exec_id, "%s", l->running_exec);
	pthread_mutex_unlock(&m->lock);
	if (exec_id[0] == '\0')
		return;
	pthread_mutex_lock(&l->notes_lock);
	if (l->notes == NULL || strcmp(l->notes_exec, exec_id) != 0) {
		json_decref(l->notes);
		l->notes = json_object();
		snprintf(l->notes_exec, sizeof l->notes_exec, "%s", exec_id);
	} else if (req->status != 0 && json_object_get(l->notes, key) == NULL) {
		pthread_mutex_unlock(&l->notes_lock); /* begun under another exec: its record has it */
		return;
	}
	if (l->notes != NULL && json_object_size(l->notes) < EGRESS_NOTES_MAX &&
	    json_object_set_new(l->notes, key, note_json(req)) == 0) {
		json_t *list = json_array(), *v;
		const char *k;

		json_object_foreach(l->notes, k, v)
			json_array_append(list, v);
		json_t *doc = json_pack("{s:{s:o, s:s}}", "egress", "mutating", list, "note",
					"kept as each request left and ended: a request whose status is null left and "
					"its answer is not on record");

		text = doc != NULL ? json_dumps(doc, JSON_COMPACT) : NULL;
		json_decref(doc);
	}
	sb_err_clear(&err);
	if (text != NULL && records_exec_egress_note(m->rec, exec_id, text, &err) < 0)
		sb_warn("exec %s: its egress note is not on record: %s", exec_id, err.msg);
	pthread_mutex_unlock(&l->notes_lock);
	free(text);
}

/* Policy proxy: the manager's listener on the sandbox's 127.0.0.1:port. The backend makes it in the
 * sandbox's network namespace and hands it over (process, podman); on a backend whose sandbox
 * network only the agent can listen in (kubernetes: a pod's), the agent holds the port and relays
 * each connection through the mTLS link the manager opens to it (agent_relay.h) to a listener of
 * the manager's in the sandbox's private directory (the manager's alone). Either way the egress
 * proxy and the edges serve what they are given the same way. */
static int sandbox_net_listen(struct manager *m, struct live_sandbox *l, uint16_t port, int *fd, struct sb_err *err)
{
	char path[PATH_MAX];

	if (m->backend->ops->net_listen != NULL)
		return m->backend->ops->net_listen(m->backend, &l->h, port, fd, err);
	if (!m->backend->ops->net_by_agent)
		return sb_fail(err, ENOTSUP, "the %s backend cannot listen inside a sandbox's network (policy proxy)",
			       m->backend->ops->name);
	if (l->relays_n >= sizeof l->relays / sizeof l->relays[0])
		return sb_fail(err, E2BIG, "more than %zu ports to relay (policy proxy)",
			       sizeof l->relays / sizeof l->relays[0]);
	if (path_fmt(path, sizeof path, err, "%s/net-%u.sock", l->private_dir, port) < 0 ||
	    agent_relay_start(l->tls, l->h.address, port, path, fd, &l->relays[l->relays_n], err) < 0)
		return -1;
	l->relays_n++;
	return 0;
}

/* Policy proxy: each kubernetes and http: grant of the snapshot served at its edge, on its port of
 * the sandbox's loopback (the kubeconfig or the INFRA_SANDBOX_HTTP_ variable names it and holds no
 * credential); the token moves from the snapshot into the edge, which wipes it when it stops (with
 * the sandbox). */
static int sandbox_edges(struct manager *m, struct live_sandbox *l, struct sb_err *err)
{
	if (l->edges_n > 0 && l->m == NULL) {
		l->m = m; /* edge_note's, with the lock it takes */
		pthread_mutex_init(&l->notes_lock, NULL);
	}
	for (size_t i = 0; i < l->edges_n; i++) {
		struct snapshot_edge *c = &l->edge_creds[i];
		struct egress_edge_spec spec = { .session = l->session, .grant = c->resource, .access = c->access,
						 .server = c->cred.server, .ca_file = c->cred.ca_file,
						 .token = c->cred.token, .header = c->cred.header,
						 .log = l->egress_log,
						 .note = edge_note, .note_ctx = l };

		if (sandbox_net_listen(m, l, (uint16_t)c->cred.port, &spec.listen_fd, err) < 0 ||
		    egress_edge_start(&spec, &l->edges[i], err) < 0) {
			sb_err_prefix(err, "grant %s at the edge (policy proxy)", c->resource);
			return -1;
		}
	}
	edge_creds_free(l);
	return 0;
}

/* A `file:` Kubernetes grant's API server, admitted: its kubeconfig is in the sandbox, so kubectl
 * reaches the server through the proxy (HTTPS_PROXY). https:// only: a plain-http server is on the
 * manager's loopback (k8s_api.h), which no sandbox is let through to. A broker grant is served at its
 * edge instead, and its server is not the sandbox's to reach. A kubeconfig that cannot be read
 * admits nothing, with a warning: the grant itself is still the operator's file. */
static void grant_endpoint_admit(struct egress_allow *a, const char *resource, const char *path)
{
	struct k8s_conn c = { 0 };
	struct sb_err err;
	char pattern[EGRESS_HOST_MAX + 16];
	const char *host;
	size_t n;

	if (k8s_conn_load(&c, path, &err) < 0) {
		sb_warn("grant %s: its kubeconfig's server is not admitted through the egress proxy: %s", resource,
			err.msg);
		return;
	}
	host = c.server + strlen("https://");
	n = strcspn(host, "/");
	if (strncmp(c.server, "https://", 8) == 0 && n > 0 && n < sizeof pattern - 5) {
		/* The kubeconfig's host[:port]; without a port, https's own, as the pattern's default. */
		snprintf(pattern, sizeof pattern, "%.*s", (int)n, host);
		if (egress_allow_add(a, pattern, &err) < 0)
			sb_warn("grant %s: its server %s is not admitted through the egress proxy: %s", resource,
				c.server, err.msg);
	}
	k8s_conn_free(&c);
}

/* Every `file:` Kubernetes grant of the sandbox's authority (its snapshot's grants), admitted. */
static void grant_endpoints_admit(const struct manager *m, const struct live_sandbox *l, struct egress_allow *a)
{
	json_t *grants = json_loads(l->authority, 0, NULL), *access;
	const char *resource;

	json_object_foreach(grants, resource, access) {
		const char *broker = json_string_value(json_object_get(m->cfg.resources, resource));

		if (strncmp(resource, "kubernetes:", 11) == 0 && broker != NULL && strncmp(broker, "file:", 5) == 0)
			grant_endpoint_admit(a, resource, broker + 5);
	}
	json_decref(grants);
}

/* The allow-list of a session's proxy: the manager's (serve --egress-allow), the session's own
 * (session create --egress-allow, its record), read now, and its file: grants' API servers:
 * *out is the caller's to free. */
static int sandbox_allow(struct manager *m, const struct live_sandbox *l, struct egress_allow **out,
			 struct sb_err *err)
{
	const char *session = l->session;
	struct session_row *s = malloc(sizeof *s);
	struct egress_allow *a = malloc(sizeof *a);
	int rc = -1;

	if (s == NULL || a == NULL)
		sb_fail(err, ENOMEM, "the session's allow-list (policy proxy)");
	else if (records_session_get(m->rec, session, s, err) == RECORDS_FOUND) {
		*a = m->cfg.egress_allow;
		rc = egress_allow_add_words(a, s->egress_allow, err);
		if (rc < 0)
			sb_err_prefix(err, "session %s's own allow-list", session);
	}
	free(s);
	if (rc < 0) {
		free(a);
		return -1;
	}
	grant_endpoints_admit(m, l, a);
	*out = a;
	return 0;
}

/* Policy proxy: the manager's listener on 127.0.0.1:EGRESS_PROXY_PORT inside the sandbox's own
 * network namespace (the backend makes it there and hands it over), served by this sandbox's
 * egress proxy with the manager's allow-list, before any command can run. */
static int sandbox_egress(struct manager *m, struct live_sandbox *l, struct sb_err *err)
{
	struct egress_allow *allow = NULL;
	int fd, rc;

	if (l->network != SANDBOX_NETWORK_PROXY)
		return 0;
	if (m->backend->ops->net_listen == NULL && !m->backend->ops->net_by_agent)
		return sb_fail(err, ENOTSUP, "the %s backend cannot listen inside a sandbox's network (policy proxy)",
			       m->backend->ops->name);
	if ((l->egress_log = egress_log_new(EGRESS_LOG_DETAILS_MAX)) == NULL)
		return sb_fail(err, ENOMEM, "the egress log (policy proxy)");
	if (sandbox_allow(m, l, &allow, err) < 0)
		return -1;
	rc = sandbox_net_listen(m, l, EGRESS_PROXY_PORT, &fd, err) < 0 ||
	     egress_proxy_start(fd, l->session, allow, l->egress_log, &l->egress, err) < 0 ? -1 : 0;
	free(allow);
	if (rc < 0) {
		sb_err_prefix(err, "the egress proxy (policy proxy)");
		return -1;
	}
	return sandbox_edges(m, l, err);
}

/* How far a start got, so its failure is taken back exactly (prepare_failed). */
struct start_stage {
	bool recorded; /* its "starting" row exists */
	bool started;  /* the backend prepared it: it runs until stopped with evidence */
};

/* The session's grants as they are now, for this generation only, kept as the sandbox's
 * authority (its record and execpath.c authority_current compare against it). */
static json_t *authority_load(struct manager *m, struct live_sandbox *l, struct sb_err *err)
{
	json_t *grants = records_grants(m->rec, l->session, err);
	char *text;

	if (grants == NULL)
		return NULL;
	text = json_dumps(grants, JSON_COMPACT | JSON_SORT_KEYS);
	/* A cut authority would be a record that is not JSON: refused. */
	if (text == NULL || strlen(text) >= sizeof l->authority) {
		if (text == NULL)
			sb_fail(err, ENOMEM, "serialising the session's grants");
		else
			sb_fail(err, E2BIG, "the session's grants are %zu bytes as JSON, over %zu", strlen(text),
				sizeof l->authority - 1);
		json_decref(grants);
		grants = NULL;
	} else {
		memcpy(l->authority, text, strlen(text) + 1);
	}
	free(text);
	return grants;
}

/* One generation's authority snapshot, made once by credentials_make. */
struct credentials_job {
	struct manager *m;
	struct live_sandbox *l;
	json_t *grants;
	bool made;
};

static int credentials_make(void *arg, const struct sandbox_bound *bound, struct sb_err *err)
{
	struct credentials_job *j = arg;
	struct broker_bound b = { 0 };
	struct snapshot snap;

	if (j->made)
		return sb_fail(err, EALREADY, "the credentials of sandbox generation %llu are made already",
			       (unsigned long long)j->l->generation);
	if (bound != NULL)
		b = (struct broker_bound){ .kind = bound->kind, .api_version = bound->api_version, .ns = bound->ns,
					   .name = bound->name, .uid = bound->uid };
	/* Policy proxy: the brokers' credentials stay with the manager, added at the edge. */
	if (j->l->network == SANDBOX_NETWORK_PROXY ?
	    snapshot_make_edge(j->l->private_dir, j->grants, j->m->cfg.resources, j->l->ids.uid, j->l->ids.gid, &snap,
			       err) < 0 :
	    snapshot_make(j->l->private_dir, j->grants, j->m->cfg.resources, j->l->ids.uid, j->l->ids.gid,
			  bound ? &b : NULL, &snap, err) < 0)
		return -1;
	j->made = true;
	j->l->edge_creds = snap.edges;
	j->l->edges_n = snap.edges_n;
	/* An http: grant's address, in the environment of every call (execpath.c): no credential. */
	j->l->http_env_n = 0;
	for (size_t i = 0; i < snap.edges_n; i++)
		if (snap.edges[i].env_name[0] != '\0') {
			struct live_http_env *v = &j->l->http_env[j->l->http_env_n++];

			snprintf(v->name, sizeof v->name, "%s", snap.edges[i].env_name);
			snprintf(v->url, sizeof v->url, "http://127.0.0.1:%u", snap.edges[i].cred.port);
		}
	j->l->credentials_expire_ms = snap.expires_ms;
	/* A path every call uses: a cut one would name another place (common/pathfmt.c). */
	return path_fmt(j->l->kubeconfig, sizeof j->l->kubeconfig, err, "%s", snap.kubeconfig);
}

/* The order of a sandbox and its credentials. On a backend that binds them to the sandbox's own
 * object (kubernetes: a TokenRequest's boundObjectRef names the pod by UID, so the pod must exist
 * first), prepare() makes them through spec.credentials once the pod is created, into the
 * directory made empty here, and the pod runs as the grants' service account. That account is
 * fixed for the pod's life: a grant change retires the sandbox (sessions.c), expiring credentials
 * too (sandbox_acquire), and the next generation is a new pod with a new snapshot. On the other
 * backends the snapshot is made first and the sandbox mounts it. Either way no command runs
 * before prepare() returns. */
static int credentials_plan(struct manager *m, struct credentials_job *job, struct sandbox_spec *spec,
			    char *dir, size_t dir_len, char *account, size_t account_len, struct sb_err *err)
{
	if (!m->backend->ops->binds_credentials) {
		if (credentials_make(job, NULL, err) < 0)
			return -1;
		return path_fmt(dir, dir_len, err, "%s/credentials", job->l->private_dir);
	}
	if (snapshot_dir_make(job->l->private_dir, job->l->ids.uid, job->l->ids.gid, dir, dir_len, err) < 0 ||
	    snapshot_service_account(job->grants, m->cfg.resources, account, account_len, err) < 0)
		return -1;
	spec->service_account = account;
	spec->credentials = credentials_make;
	spec->credentials_ctx = job;
	return 0;
}

static int sandbox_start(struct manager *m, struct live_sandbox *l, const struct workspace *ws,
			 struct start_stage *stage, struct sb_err *err)
{
	struct mount_plan plan = { 0 };
	struct sandbox_spec spec = { 0 };
	struct credentials_job job = { .m = m, .l = l };
	char private_sub[PATH_MAX], credentials[PATH_MAX], account[254];
	int rc;

	/* The identity's own ids (rule N2): the same its workspace was made for. */
	if (identity_ids_of(m, ws->identity, &l->ids, err) < 0 ||
	    mount_plan_build(ws, &plan, err) < 0 || (job.grants = authority_load(m, l, err)) == NULL ||
	    credentials_plan(m, &job, &spec, credentials, sizeof credentials, account, sizeof account, err) < 0 ||
	    /* Paths every call uses: a cut one would name another place (common/pathfmt.c). */
	    path_fmt(l->workdir, sizeof l->workdir, err, "%s", plan.workdir) < 0 ||
	    path_fmt(l->scratch, sizeof l->scratch, err, "%s", plan.scratch) < 0 ||
	    path_fmt(l->identity, sizeof l->identity, err, "%s", ws->identity) < 0 ||
	    path_fmt(l->repo_dir, sizeof l->repo_dir, err, "%s", ws->repo_dir) < 0 ||
	    path_fmt(l->worktree_name, sizeof l->worktree_name, err, "%s", ws->worktree_name) < 0 ||
	    path_fmt(private_sub, sizeof private_sub, err, "%s", l->private_dir) < 0) {
		json_decref(job.grants);
		mount_plan_free(&plan);
		return -1;
	}
	spec.credentials_dir = credentials;
	spec.session = l->session;
	spec.generation = l->generation;
	spec.network = l->network;
	spec.plan = &plan;
	spec.private_dir = private_sub;
	spec.agent_path = m->cfg.agent;
	spec.manager_name = CA_MANAGER_NAME;
	spec.host_uid = l->ids.uid;
	spec.host_gid = l->ids.gid;
	/* Recorded before it starts: a manager killed during prepare finds it on restart. */
	snprintf(l->h.runtime_id, sizeof l->h.runtime_id, "starting");
	rc = sandbox_record(m, l, "starting", err);
	stage->recorded = rc == 0;
	if (rc == 0)
		rc = m->backend->ops->prepare(m->backend, &spec, &l->h, err);
	mount_plan_free(&plan);
	json_decref(job.grants);
	if (rc == 0) {
		stage->started = true;
		/* A sandbox without its snapshot would run with no credentials, or stale ones: retired. */
		rc = job.made ? sandbox_record(m, l, "running", err) :
		     sb_fail(err, EPROTO, "the %s backend started the sandbox without making its credentials",
			     m->backend->ops->name);
	}
	/* A failure here retires the started sandbox (prepare_failed): no command runs without it. */
	if (rc == 0)
		rc = sandbox_egress(m, l, err);
	return rc;
}

/* A sandbox that did not become ready. One the backend started (only its "running" record
 * failed) is retired like any other: with evidence, or held with its session reserved. One that
 * never started is recorded gone (prepare takes back what it made before failing: backend.h); when
 * even that write fails, its "starting" row and private directory stay for the next start's
 * recovery (sandbox_recover), which settles them. err already says why it failed. */
static void prepare_failed(struct manager *m, struct live_sandbox *l, const struct start_stage *stage)
{
	struct sb_err rec_err;

	if (stage->started) {
		if (sandbox_retire(m, l, "its running record could not be written", &rec_err) < 0)
			sb_error("session %s: %s", l->session, rec_err.msg);
		return;
	}
	if (stage->recorded &&
	    records_sandbox_set_state(m->rec, l->session, l->generation, "gone", "prepare failed", &rec_err) < 0) {
		sb_error("session %s: recording the failed sandbox generation %llu as gone: %s; the next start settles it",
			 l->session, (unsigned long long)l->generation, rec_err.msg);
		live_free(l);
		return;
	}
	if (l->private_dir[0] != '\0')
		private_dir_remove(l->private_dir, &rec_err);
	live_free(l);
}

/* The generation's keys, made on a thread of their own while the workspace is checked. */
struct keys_job {
	struct manager *m;
	struct live_sandbox *l;
	struct sb_err err;
	int rc;
};

static void *keys_make(void *arg)
{
	struct keys_job *j = arg;

	j->rc = private_dir_make(j->m, j->l, &j->err) < 0 || client_config_make(j->m, j->l, &j->err) < 0 ? -1 : 0;
	return NULL;
}

/* The generation's private directory and keys (a P-256 key and its certificate, the receipt key,
 * each file synced; the manager's client configuration) and the workspace's checks (git's
 * configuration, the sweep: two git runs) need nothing of each other, and each took 4-9 ms of a
 * first call in series (issue 32): the keys are made on a thread meanwhile. Both are done before
 * anything else of the start: no sandbox exists yet, so none holds the keys or the workspace early,
 * and a refused workspace leaves only the keys, removed with the directory (prepare_failed).
 * Returns 0, or -1 with err and *ws_failed saying which side failed (the workspace's first). */
static int keys_and_workspace(struct manager *m, struct live_sandbox *l, const struct session_row *s,
			      struct workspace *ws, bool *ws_failed, struct sb_err *err)
{
	struct keys_job job = { .m = m, .l = l, .rc = -1 };
	struct sb_beside keys;
	int rc;

	sb_beside_start(&keys, keys_make, &job); /* no thread to be had: in series, at the join */
	rc = workspace_open(m->cfg.volume, s->identity, s->id, ws, err);
	sb_beside_join(&keys);
	*ws_failed = rc < 0;
	if (rc == 0 && job.rc < 0) {
		*err = job.err;
		rc = -1;
	}
	return rc;
}

#define CREDENTIAL_MARGIN_MS 60000

static bool credentials_expiring(const struct live_sandbox *l, int64_t now)
{
	return l->credentials_expire_ms != 0 && now >= l->credentials_expire_ms - CREDENTIAL_MARGIN_MS;
}

/* ---- the bound on an identity's sandboxes (on this manager) ----
 *
 * One identity's sessions must not take the host's capacity from the others': an identity holds at
 * most cfg.sandboxes_per_identity sandboxes here, those being prepared included. At the bound, its
 * least recently used sandbox that no call holds or waits for is retired (with evidence, as every
 * retire; its workspace stays, and its session's next call gets a new one); when every one of them
 * is running a call, the new call is refused before anything of it is recorded beyond the refusal. */

static unsigned identity_sandboxes(const struct manager *m, const char *identity) /* under m->lock */
{
	unsigned n = 0;

	for (const struct live_sandbox *l = m->live; l != NULL; l = l->next)
		n += strcmp(l->identity, identity) == 0;
	for (const struct live_sandbox *l = m->starting; l != NULL; l = l->starting_next)
		n += strcmp(l->identity, identity) == 0;
	return n;
}

/* The identity's least recently used sandbox that no call holds or waits for (under m->lock). */
static const struct live_sandbox *identity_idle_oldest(struct manager *m, const char *identity)
{
	const struct live_sandbox *best = NULL;

	for (const struct live_sandbox *l = m->live; l != NULL; l = l->next)
		if (strcmp(l->identity, identity) == 0 && !l->busy && queue_depth(m->queue, l->session) == 0 &&
		    (best == NULL || l->last_used_ms < best->last_used_ms))
			best = l;
	return best;
}

static void starting_drop(struct manager *m, struct live_sandbox *l) /* under m->lock */
{
	for (struct live_sandbox **p = &m->starting; *p != NULL; p = &(*p)->starting_next)
		if (*p == l) {
			*p = l->starting_next;
			return;
		}
}

/* Room for l (its identity set) among its identity's sandboxes: 0 with l counted in m->starting,
 * or -1 (err: unavailable) when every one of them is running a call, or, for a start at a session's
 * create (may_retire false), when the bound is reached at all: a start no call asked for never
 * takes another session's sandbox. Called with l's session's turn held; another session's turn is
 * only ever tried, never waited for. */
static int identity_room(struct manager *m, struct live_sandbox *l, bool may_retire, struct sb_err *err)
{
	unsigned bound = m->cfg.sandboxes_per_identity;

	for (int tries = 0; tries < 8; tries++) {
		const struct live_sandbox *v;
		struct live_sandbox *victim;
		char session[65] = "";
		struct sb_err rerr;

		pthread_mutex_lock(&m->lock);
		if (identity_sandboxes(m, l->identity) < bound) {
			l->starting_next = m->starting;
			m->starting = l;
			pthread_mutex_unlock(&m->lock);
			return 0;
		}
		if (!may_retire) {
			pthread_mutex_unlock(&m->lock);
			return sb_refuse(err, EAGAIN, "identity %s has %u sandboxes on this manager (its bound, "
					 "sandboxes-per-identity)", l->identity, bound);
		}
		v = identity_idle_oldest(m, l->identity);
		if (v != NULL)
			snprintf(session, sizeof session, "%s", v->session);
		pthread_mutex_unlock(&m->lock);
		if (session[0] == '\0')
			break;
		if (!queue_try_enter(m->queue, session))
			continue; /* a call of it came meanwhile: look again */
		victim = sandbox_find(m, session);
		if (victim != NULL && !victim->busy) {
			sb_info("session %s: its sandbox is retired for a new one of session %s (identity %s is at its "
				"bound of %u sandboxes)", session, l->session, l->identity, bound);
			if (sandbox_retire(m, victim, "its identity's bound of sandboxes, for another session's call",
					   &rerr) < 0)
				sb_warn("session %s: %s", session, rerr.msg);
		}
		queue_leave(m->queue, session);
	}
	return sb_fail(err, EAGAIN, "identity %s has %u sandboxes on this manager, each running a call (its bound, "
		       "sandboxes-per-identity): this call never ran; run it again when one of them ended",
		       l->identity, bound);
}

int sandbox_acquire(struct manager *m, const struct session_row *s, enum acquire_for why, struct live_sandbox **out,
		    struct sb_err *err)
{
	const char *session = s->id;
	struct workspace ws = { 0 };
	struct live_sandbox *l = sandbox_find(m, session);
	struct start_stage stage = { false, false };
	bool ws_failed = false;
	int rc;

	*out = NULL;
	/* Short-lived credentials are renewed by a new sandbox (a new generation, a fresh snapshot):
	 * never by changing the snapshot under a live one, and never used past their expiry. */
	if (l != NULL && credentials_expiring(l, clock_real_ms()) && sandbox_retire(m, l, "credentials expiring", err) < 0)
		return -1;
	l = sandbox_find(m, session);
	if (l != NULL) {
		*out = l;
		return 0;
	}
	l = calloc(1, sizeof *l);
	if (l == NULL)
		return sb_fail(err, ENOMEM, "allocating a sandbox");
	snprintf(l->session, sizeof l->session, "%s", session);
	/* The recorded policy, never a default: a session's network does not change under it. */
	if (sandbox_network_parse(s->network, &l->network) < 0) {
		free(l);
		return sb_invalid(err, "session %s records the network policy '%.15s', neither open, none nor proxy",
				  session, s->network);
	}
	snprintf(l->identity, sizeof l->identity, "%s", s->identity);
	if (identity_room(m, l, why == ACQUIRE_FOR_CALL, err) < 0) {
		free(l);
		return -1;
	}
	/* A new sandbox is a new generation: results of any older one are refused from now on. */
	rc = records_session_bump_generation(m->rec, session, &l->generation, err);
	if (rc == 0)
		rc = keys_and_workspace(m, l, s, &ws, &ws_failed, err);
	if (rc == 0)
		rc = sandbox_start(m, l, &ws, &stage, err);
	workspace_free(&ws);
	if (rc < 0) {
		/* The workspace's refusal says what to do about it, as before the keys went beside it; a
		 * backend's (recorded, not started: its prepare failed) names the session and the
		 * generation already. */
		if (!ws_failed && !(stage.recorded && !stage.started))
			sb_err_prefix(err, "preparing the sandbox of session %s", session);
		pthread_mutex_lock(&m->lock);
		starting_drop(m, l);
		pthread_mutex_unlock(&m->lock);
		prepare_failed(m, l, &stage);
		return -1;
	}
	l->last_used_ms = clock_real_ms();
	pthread_mutex_lock(&m->lock);
	starting_drop(m, l);
	l->next = m->live;
	m->live = l;
	pthread_mutex_unlock(&m->lock);
	sb_info("session %s: sandbox %s up, generation %llu", session, l->h.runtime_id,
		(unsigned long long)l->generation);
	*out = l;
	return 0;
}

int sandbox_interrupt(struct manager *m, struct live_sandbox *l, struct sb_err *err)
{
	int rc = m->backend->ops->stop(m->backend, &l->h, err);

	/* The runtime may accept the stop and not act on it: the call's thread must not wait for an
	 * answer that may never come. It then asks for evidence, which decides cancelled or uncertain. */
	agent_interrupt(l->conn);
	return rc;
}

/* The end of a sandbox is not proven, and recording that (unproven, its session reserved)
 * failed: nothing on disk now keeps its workspace from being released or deleted. So it stays in
 * the live list, where every use of the session meets it and retires it again (asking for evidence
 * and writing the records anew): a call finds its authority snapshot emptied (execpath.c
 * authority_current never matches "") and retires it, a delete and a grant change retire it
 * first, the evictor after an idle period. Its private directory stays: it may still run with
 * those keys. Called under the session's turn, as every retire is. */
static void sandbox_hold(struct manager *m, struct live_sandbox *l)
{
	struct live_sandbox *p;

	pthread_mutex_lock(&m->lock);
	l->authority[0] = '\0';
	l->credentials_expire_ms = 0;
	l->busy = false;
	l->last_used_ms = clock_real_ms();
	for (p = m->live; p != NULL && p != l; p = p->next) {
	}
	if (p == NULL) {
		l->next = m->live;
		m->live = l;
	}
	pthread_mutex_unlock(&m->lock);
}

/* No evidence: record the sandbox unproven and its session reserved (invariant 9), or hold it. */
static int retire_unproven(struct manager *m, struct live_sandbox *l, struct sb_err *err)
{
	char why[sizeof err->msg];
	struct sb_err rec_err;
	bool failed;

	snprintf(why, sizeof why, "%s", err->msg);
	pthread_mutex_lock(&m->lock);
	m->unproven++; /* the stop's exit code says so (daemon.c) */
	pthread_mutex_unlock(&m->lock);
	failed = records_sandbox_set_state(m->rec, l->session, l->generation, "unproven", why, &rec_err) < 0 ||
		 records_session_set_state(m->rec, l->session, "reserved", &rec_err) < 0;
	if (failed && rec_err.errnum == ESTALE) {
		/* Fenced: another manager owns the session now, and its takeover stops this sandbox with
		 * evidence or reserves the session itself. Holding it here would retry a write that can
		 * never be this manager's again. */
		sb_error("session %s: the end of sandbox %s is NOT proven (%s), and the session is another manager's "
			 "now (%s): it settles the sandbox", l->session, l->h.runtime_id, why, rec_err.msg);
		live_unlink(m, l);
		live_free(l);
		return sb_fail(err, ESTALE, "the end of the sandbox is not proven (%.300s), and %.300s", why, rec_err.msg);
	}
	if (failed) {
		sb_error("session %s: the end of sandbox %s is NOT proven (%s), and recording it failed (%s); it stays "
			 "held, and the next use of the session tries again", l->session, l->h.runtime_id, why,
			 rec_err.msg);
		sandbox_hold(m, l);
		return sb_fail(err, rec_err.errnum, "the end of sandbox %s is not proven (%s), and recording it failed: %s",
			       l->h.runtime_id, why, rec_err.msg);
	}
	sb_error("session %s: the end of sandbox %s is NOT proven: %s; its workspace stays reserved", l->session,
		 l->h.runtime_id, why);
	/* Out of the live list (no call may use it, and the evictor must not pick it again), but
	 * its private directory stays: it may still be running with those keys. */
	live_unlink(m, l);
	live_free(l);
	return -1;
}

int sandbox_retire(struct manager *m, struct live_sandbox *l, const char *why, struct sb_err *err)
{
	struct sb_err rec_err;

	sb_info("session %s: retiring sandbox %s (%s)", l->session, l->h.runtime_id, why);
	/* Stopping is the safe direction whatever the record says: a failed write is logged, and a
	 * restart's recovery, finding the row still running, stops it again. */
	if (records_sandbox_set_state(m->rec, l->session, l->generation, "stopping", why, &rec_err) < 0)
		sb_warn("session %s: recording sandbox %s as stopping: %s", l->session, l->h.runtime_id, rec_err.msg);
	/* Evidence even when the stop request failed: the process may be gone already. */
	if (m->backend->ops->stop(m->backend, &l->h, &rec_err) < 0)
		sb_warn("session %s: stopping sandbox %s: %s", l->session, l->h.runtime_id, rec_err.msg);
	if (m->backend->ops->evidence(m->backend, &l->h, EVIDENCE_MS, err) < 0)
		return retire_unproven(m, l, err);
	/* The record keeps the runtime's own word (backend.h): a reaped init, an exited container. */
	sb_info("session %s: sandbox %s is gone: %s", l->session, l->h.runtime_id, l->h.evidence);
	if (records_sandbox_set_state(m->rec, l->session, l->generation, "gone", l->h.evidence, &rec_err) < 0) {
		/* It is gone (the evidence is in hand), so nothing of it can touch the workspace, but ok
		 * means the record is committed: this retire fails. The row stays "stopping"; a restart's
		 * recovery finds no runtime and reserves the session until an operator settles it. */
		sb_error("session %s: sandbox %s is gone, but recording that failed: %s", l->session, l->h.runtime_id,
			 rec_err.msg);
		sb_fail(err, rec_err.errnum, "sandbox %s is gone, but recording that failed: %s", l->h.runtime_id,
			rec_err.msg);
		live_unlink(m, l);
		live_free(l);
		return -1;
	}
	live_unlink(m, l);
	private_dir_remove(l->private_dir, &rec_err);
	live_free(l);
	return 0;
}

/* A sandbox of this manager's from before the session was another manager's (recovery.c
 * recovery_claim, as it takes the session back): the session's records now hold a later
 * generation, so nothing about this one can be recorded (its row was superseded), but its end is
 * proven before the session runs anything: the manager that took the session stopped it then,
 * and the evidence says so now. Not proven: it stays listed and the caller refuses the call. */
int sandbox_forget_stale(struct manager *m, struct live_sandbox *l, struct sb_err *err)
{
	struct sb_err ignored;

	if (m->backend->ops->stop(m->backend, &l->h, &ignored) < 0)
		sb_warn("session %s: stopping the stale sandbox %s: %s", l->session, l->h.runtime_id, ignored.msg);
	if (m->backend->ops->evidence(m->backend, &l->h, EVIDENCE_MS, err) < 0) {
		sb_err_prefix(err, "session %s: this manager's sandbox %s from before another manager took the session",
			      l->session, l->h.runtime_id);
		return -1;
	}
	sb_info("session %s: this manager's sandbox %s from before another manager took the session is gone: %s",
		l->session, l->h.runtime_id, l->h.evidence);
	live_unlink(m, l);
	private_dir_remove(l->private_dir, &ignored);
	live_free(l);
	return 0;
}

/* ---- idle eviction ---- */

/* The session of a sandbox to evict now, copied under the lock (the sandbox itself may be retired
 * by a call the moment the lock is left): 1, or 0 when there is none. */
static int idle_pick(struct manager *m, int64_t now, char session[65])
{
	struct live_sandbox *l;

	pthread_mutex_lock(&m->lock);
	for (l = m->live; l != NULL; l = l->next)
		if (!l->busy && queue_depth(m->queue, l->session) == 0 &&
		    (now - l->last_used_ms > (int64_t)m->cfg.idle_seconds * 1000 || credentials_expiring(l, now)))
			break;
	if (l != NULL)
		snprintf(session, 65, "%s", l->session);
	pthread_mutex_unlock(&m->lock);
	return l != NULL;
}

void *sandbox_evictor(void *arg)
{
	struct manager *m = arg;

	for (;;) {
		struct live_sandbox *l;
		struct sb_err err;
		char session[65];

		sleep(1);
		while (idle_pick(m, clock_real_ms(), session)) {
			/* Take the session's turn, so no call can start on it while it goes; only if it is
			 * free: a call that came since the pick may hold it for its whole timeout, and the
			 * evictor serves every session (the next pass looks again). */
			if (!queue_try_enter(m->queue, session))
				break;
			l = sandbox_find(m, session);
			if (l != NULL && !l->busy && credentials_expiring(l, clock_real_ms()))
				sandbox_retire(m, l, "credentials expiring", &err);
			else if (l != NULL && !l->busy && clock_real_ms() - l->last_used_ms > (int64_t)m->cfg.idle_seconds * 1000)
				sandbox_retire(m, l, "idle", &err);
			queue_leave(m->queue, session);
		}
	}
	return NULL;
}

/* ---- the stop ---- */

/* Each session is taken from a copy of the live list: a retire that cannot record its end keeps
 * the sandbox listed (sandbox_hold), and must not be met again in the same pass. */
unsigned sandbox_retire_all(struct manager *m, const char *why)
{
	struct live_sandbox *l;
	char (*sessions)[sizeof l->session];
	size_t n = 0, i;
	unsigned left = 0;
	struct sb_err err;

	pthread_mutex_lock(&m->lock);
	for (l = m->live; l != NULL; l = l->next)
		n++;
	sessions = calloc(n ? n : 1, sizeof *sessions);
	for (l = m->live, i = 0; sessions != NULL && l != NULL; l = l->next, i++)
		memcpy(sessions[i], l->session, sizeof sessions[i]);
	pthread_mutex_unlock(&m->lock);
	if (sessions == NULL) {
		sb_error("stop: out of memory listing the %zu live sandbox(es): they are left running; the next start "
			 "stops them with evidence", n);
		return (unsigned)n;
	}
	for (i = 0; i < n; i++) {
		bool busy;

		/* A call still running holds the turn for as long as it runs: not waited for. */
		pthread_mutex_lock(&m->lock);
		for (l = m->live; l != NULL && strcmp(l->session, sessions[i]) != 0; l = l->next) {
		}
		busy = l != NULL && l->busy;
		pthread_mutex_unlock(&m->lock);
		if (busy) {
			sb_error("stop: session %s: its sandbox is still in use by a call that did not end; it is left "
				 "running, and the next start stops it with evidence", sessions[i]);
			left++;
			continue;
		}
		queue_enter(m->queue, sessions[i]);
		l = sandbox_find(m, sessions[i]);
		if (l != NULL && sandbox_retire(m, l, why, &err) < 0)
			left++;
		queue_leave(m->queue, sessions[i]);
	}
	free(sessions);
	return left;
}

/* ---- after a restart ---- */

#ifdef SB_FAILPOINTS
/* Test builds only (failpoint manager.recovery.evidence_fails): the runtime gives no evidence once,
 * as an API server that does not answer in time; the session must be reserved, and served again
 * once a later call proves the sandbox gone (sandbox_reserved_retry; docs/reliability.md). */
static int evidence_fault(struct sb_err *why)
{
	if (!failpoint_hit("manager.recovery.evidence_fails"))
		return 0;
	sb_warn("failpoint manager.recovery.evidence_fails reached");
	return sb_fail(why, ETIMEDOUT, "the runtime gave no evidence in time (failpoint manager.recovery.evidence_fails)");
}
#else
static int evidence_fault(struct sb_err *why)
{
	(void)why;
	return 0;
}
#endif

/* Unproven after a restart: recorded, its session reserved; -1 when a write failed (err). */
static int recover_unproven(struct manager *m, const char *session, uint64_t generation, const char *why,
			    struct sb_err *err)
{
	if (records_sandbox_set_state(m->rec, session, generation, "unproven", why, err) < 0 ||
	    records_session_set_state(m->rec, session, "reserved", err) < 0) {
		sb_err_prefix(err, "session %s: recording that the previous run's sandbox is not proven gone", session);
		return -1;
	}
	sb_error("session %s: the previous run's sandbox is not proven gone (%s); its workspace stays reserved",
		 session, why);
	return 0;
}

/* One sandbox a previous run (or a manager that lost the session) left not gone: stopped with
 * evidence and recorded gone, or recorded unproven with its session reserved. -1 (err) when a
 * record could not be written. context: what left it, for the record. */
static int recover_one(struct manager *m, json_t *row, const char *context, struct sb_err *err)
{
	const char *session = json_string_value(json_object_get(row, "session"));
	const char *runtime_id = json_string_value(json_object_get(row, "runtime_id"));
	const char *address = json_string_value(json_object_get(row, "address"));
	const char *dir = json_string_value(json_object_get(row, "private_dir"));
	uint64_t generation = (uint64_t)json_integer_value(json_object_get(row, "generation"));
	struct sandbox_handle h = { .runtime_id = "" };
	char found_id[sizeof h.runtime_id], said[sizeof h.evidence + 256];
	struct sb_err why;

	if (session == NULL || runtime_id == NULL)
		return 0;
	/* A sandbox recorded as "starting" never got its runtime id recorded: the runtime may still
	 * have made one (a container created just before the manager died). */
	if (strcmp(runtime_id, "starting") == 0 && m->backend->ops->lookup != NULL) {
		int found = m->backend->ops->lookup(m->backend, session, generation, &h, &why);

		if (found < 0)
			return recover_unproven(m, session, generation, why.msg, err);
		if (found == 1) {
			snprintf(found_id, sizeof found_id, "%s", h.runtime_id);
			runtime_id = found_id; /* adopt() clears h */
		}
	}
	if (strcmp(runtime_id, "starting") != 0) {
		if (m->backend->ops->adopt(m->backend, runtime_id, address ? address : "", &h, &why) < 0)
			return recover_unproven(m, session, generation, why.msg, err);
		/* Evidence decides, whether or not the stop request went through. */
		if (m->backend->ops->stop(m->backend, &h, &why) < 0)
			sb_warn("session %s: stopping the previous run's sandbox %s: %s", session, runtime_id, why.msg);
		if (evidence_fault(&why) < 0 || m->backend->ops->evidence(m->backend, &h, EVIDENCE_MS, &why) < 0)
			return recover_unproven(m, session, generation, why.msg, err);
	}
	snprintf(said, sizeof said, "%.200s: %s", context,
		 h.evidence[0] ? h.evidence : "its prepare never finished, and the runtime holds no sandbox of it");
	if (records_sandbox_set_state(m->rec, session, generation, "gone", said, err) < 0) {
		sb_err_prefix(err, "session %s: recording the previous run's sandbox %s as gone", session, runtime_id);
		return -1;
	}
	/* Only a directory of this manager's own state dir: another manager's is that manager's. */
	if (dir != NULL && dir[0] != '\0' && strncmp(dir, m->cfg.state_dir, strlen(m->cfg.state_dir)) == 0 &&
	    dir[strlen(m->cfg.state_dir)] == '/')
		private_dir_remove(dir, &why);
	sb_info("session %s: the previous run's sandbox %s is gone: %s", session, runtime_id, said);
	return 0;
}

int sandbox_recover_session(struct manager *m, const char *session, const char *context, struct sb_err *err)
{
	struct sandbox_row *sb = malloc(sizeof *sb);
	json_t *row = NULL;
	int rc = 0, found;

	if (sb == NULL)
		return sb_fail(err, ENOMEM, "recovering the sandbox of session %s", session);
	found = records_sandbox_get(m->rec, session, sb, err);
	if (found < 0) {
		rc = -1;
	} else if (found == RECORDS_FOUND && strcmp(sb->state, "gone") != 0) {
		row = json_pack("{s:s, s:s, s:s, s:s, s:I}", "session", sb->session, "runtime_id", sb->runtime_id,
				"address", sb->address, "private_dir", sb->private_dir, "generation",
				(json_int_t)sb->generation);
		rc = row == NULL ? sb_fail(err, ENOMEM, "recovering the sandbox of session %s", session) :
				   recover_one(m, row, context, err);
	}
	json_decref(row);
	free(sb);
	return rc;
}

/* Why ask again: the evidence that failed at a restart or a takeover is often a runtime that did
 * not answer in time (an API server under load), and a session reserved until the next start would
 * stay down for one transient fault. The same recovery as then (stop, evidence, or unproven again),
 * never for a sandbox this run holds live: its own retire decides that one. The release is the
 * start's: a session with an exec still in flight stays reserved (records_sessions_release). */
bool sandbox_reserved_retry(struct manager *m, const char *session, struct session_row *row)
{
	struct session_row s;
	struct sb_err err;
	int released;

	if (sandbox_find(m, session) != NULL)
		return false;
	if (sandbox_recover_session(m, session, "asked again at a call on its reserved session", &err) < 0) {
		sb_warn("session %s: %s", session, err.msg);
		return false;
	}
	released = records_sessions_release(m->rec, &err);
	if (released < 0 || records_session_get(m->rec, session, &s, &err) != RECORDS_FOUND) {
		sb_warn("session %s: releasing it: %s", session, err.msg);
		return false;
	}
	if (strcmp(s.state, "active") != 0)
		return false;
	sb_info("session %s: its earlier sandbox is proven gone now: it serves again", session);
	*row = s;
	return true;
}
