/* The session operations of the control API: create (workspace + records), show (with the limits
 * that hold for its sandbox), delete (only with evidence that the sandbox is gone), grants, and
 * list (pages of every session).
 * Every argument arrives from a local client and is checked here before anything changes. The
 * records of a session's calls, and the list of sessions, are answered in pages by pages.c. */
#include "manager.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "clock.h"
#include "control.h"
#include "egress_proxy.h"
#include "identity_ids.h"
#include "log.h"
#include "random.h"
#include "workspace.h"

/* A session id: lowercase hex, so it fits a certificate name and every path. */
static bool session_id_valid(const char *id)
{
	size_t n = id ? strlen(id) : 0;

	return n > 0 && n <= 64 && strspn(id, "0123456789abcdef") == n;
}

static json_t *session_lookup(struct manager *m, const char *id, struct session_row *s)
{
	struct sb_err err;
	int rc;

	if (!session_id_valid(id))
		return control_error("invalid", "'%s' is not a session id", id ? id : "");
	sb_err_clear(&err);
	rc = records_session_get(m->rec, id, s, &err);
	if (rc < 0)
		return control_error_from("internal", &err);
	if (rc == RECORDS_NOT_FOUND || strcmp(s->state, "deleted") == 0)
		return control_error("not_found", "no session '%s'", id);
	return NULL;
}

/* "RES=ACCESS": RES declared by the operator, ACCESS read or write. */
static int grant_parse(struct manager *m, const char *text, char *res, size_t len, const char **access,
		       struct sb_err *err)
{
	const char *eq = text ? strchr(text, '=') : NULL;

	if (eq == NULL || eq == text || (size_t)(eq - text) >= len)
		return sb_invalid(err, "grant '%s' must be RESOURCE=ACCESS", text ? text : "");
	memcpy(res, text, (size_t)(eq - text));
	res[eq - text] = '\0';
	*access = eq + 1;
	if (strcmp(*access, "read") != 0 && strcmp(*access, "write") != 0)
		return sb_invalid(err, "grant '%s': access must be read or write", text);
	if (json_object_get(m->cfg.resources, res) == NULL)
		return sb_fail(err, ENOENT, "grant '%s': resource '%s' is not declared by the operator", text, res);
	return 0;
}

/* An http: grant is served at the edge only: a session of another network would need the token
 * inside the sandbox (broker_http). */
static json_t *grant_network_check(const char *res, const char *network)
{
	if (strncmp(res, "http:", 5) == 0 && strcmp(network, "proxy") != 0)
		return control_error("refused", "grant %s: an HTTP API grant needs a session of network proxy (this one "
				     "is %s): its token is added at the manager's edge, and on any other network it would "
				     "have to be inside the sandbox", res, network);
	return NULL;
}

static json_t *grants_check(struct manager *m, json_t *grants, const char *network)
{
	struct sb_err err;
	char res[128];
	const char *access;
	size_t i;
	json_t *g, *refusal;

	if (grants != NULL && !json_is_array(grants))
		return control_error("invalid", "grants must be a list of RESOURCE=ACCESS");
	json_array_foreach(grants, i, g) {
		if (grant_parse(m, json_string_value(g), res, sizeof res, &access, &err) < 0)
			return control_error_from(err.errnum == ENOENT ? "refused" : "invalid", &err);
		if ((refusal = grant_network_check(res, network)) != NULL)
			return refusal;
	}
	return NULL;
}

/* A session's own egress allow-list (session create --egress-allow): a list of patterns, for policy
 * proxy only, each by egress_allow_add's rules and all of them, with the manager's, within one
 * list's bound. Into words, as the record keeps it (one space between); NULL, or the refusal. */
static json_t *egress_allow_check(const struct manager *m, json_t *list, enum sandbox_network policy, char *words,
				  size_t len)
{
	struct egress_allow *all;
	struct sb_err err;
	size_t i, o = 0;
	json_t *v, *refusal = NULL;

	words[0] = '\0';
	if (list == NULL || json_is_null(list) || (json_is_array(list) && json_array_size(list) == 0))
		return NULL;
	if (!json_is_array(list))
		return control_error("invalid", "egress_allow must be a list of HOST[:PORT] patterns");
	if (policy != SANDBOX_NETWORK_PROXY)
		return control_error("invalid", "--egress-allow is for a session of network proxy (the others have no "
				     "egress proxy to allow anything through)");
	all = malloc(sizeof *all);
	if (all == NULL)
		return control_error("internal", "out of memory");
	*all = m->cfg.egress_allow;
	json_array_foreach(list, i, v) {
		const char *p = json_string_value(v);
		int n;

		sb_err_clear(&err);
		if (p == NULL || strchr(p, ' ') != NULL || egress_allow_add(all, p, &err) < 0) {
			refusal = p == NULL || strchr(p, ' ') != NULL ?
					  control_error("invalid", "egress_allow: each pattern is one HOST[:PORT] word") :
					  control_error_from("invalid", &err);
			break;
		}
		n = snprintf(words + o, len - o, "%s%s", o > 0 ? " " : "", p);
		if (n < 0 || (size_t)n >= len - o) {
			refusal = control_error("invalid", "egress_allow: the session's patterns are over %zu bytes", len - 1);
			break;
		}
		o += (size_t)n;
	}
	free(all);
	return refusal;
}

static int session_store(struct manager *m, const struct workspace *ws, const char *repo, const char *network,
			 const char *egress_allow, json_t *grants, struct sb_err *err)
{
	struct session_row s;
	char res[128];
	const char *access;
	size_t i;
	json_t *g;

	memset(&s, 0, sizeof s);
	snprintf(s.id, sizeof s.id, "%s", ws->session);
	snprintf(s.identity, sizeof s.identity, "%s", ws->identity);
	snprintf(s.repo, sizeof s.repo, "%s", repo);
	snprintf(s.worktree, sizeof s.worktree, "%s", ws->worktree);
	snprintf(s.branch, sizeof s.branch, "%s", ws->branch ? ws->branch : "");
	snprintf(s.state, sizeof s.state, "active");
	snprintf(s.network, sizeof s.network, "%s", network);
	snprintf(s.egress_allow, sizeof s.egress_allow, "%s", egress_allow);
	s.created_ms = clock_real_ms();
	/* Owned by the manager that made it, from its first row on (docs/scaling.md). */
	snprintf(s.owner, sizeof s.owner, "%s", m->cfg.manager_id);
	s.lease_expires_ms = s.created_ms + (int64_t)m->cfg.lease_ms;
	if (records_session_insert(m->rec, &s, err) < 0)
		return -1;
	json_array_foreach(grants, i, g)
		if (grant_parse(m, json_string_value(g), res, sizeof res, &access, err) < 0 ||
		    records_grant_set(m->rec, s.id, res, access, err) < 0)
			return -1;
	return 0;
}


/* sessions_create, once the request is checked: its workspace and record, or neither. */
static json_t *sessions_create_made(struct manager *m, const char *identity, const char *repo, const char *branch,
				    const char *network, const char *allow_words, json_t *grants)
{
	struct workspace_owner owner;
	struct workspace ws;
	struct sb_err err;
	char id[2 * SESSION_ID_BYTES + 1];
	json_t *resp;

	if (sb_random_hex(id, SESSION_ID_BYTES, &err) < 0)
		return control_error_from("internal", &err);
	if (identity_ids_of(m, identity, &owner, &err) < 0 ||
	    workspace_create_owned(m->cfg.volume, identity, id, repo, branch, &owner, &ws, &err) < 0)
		return control_error_from("refused", &err);
	if (session_store(m, &ws, repo, network, allow_words, grants, &err) < 0) {
		struct sb_err ignored;

		/* No record, no workspace: nothing half-made stays behind. */
		workspace_delete(&ws, false, NULL, &ignored);
		workspace_free(&ws);
		return control_error_from("internal", &err);
	}
	sb_info("session %s created for %s on %s (network %s)", id, identity, repo, network);
	early_start(m, id);
	resp = json_pack("{s:b, s:s, s:s, s:s?, s:s}", "ok", 1, "session", id, "worktree", ws.worktree, "branch",
			 ws.branch, "network", network);
	workspace_free(&ws);
	return resp;
}

json_t *sessions_create(struct manager *m, json_t *req)
{
	const char *identity = json_string_value(json_object_get(req, "identity"));
	const char *repo = json_string_value(json_object_get(req, "repo"));
	const char *branch = json_string_value(json_object_get(req, "branch"));
	json_t *grants = json_object_get(req, "grants"), *resp, *net = json_object_get(req, "network");
	const char *network = net && !json_is_null(net) ? json_string_value(net) : m->cfg.network;
	enum sandbox_network policy;
	struct sb_err err;
	char *allow_words;

	if (identity == NULL || repo == NULL)
		return control_error("invalid", "session create needs an identity and a repo");
	if (sandbox_network_parse(network, &policy) < 0)
		return control_error("invalid", "network must be open, none or proxy");
	if (policy == SANDBOX_NETWORK_NONE && strcmp(m->cfg.backend, "kubernetes") == 0)
		return control_error("refused", "network none needs a runtime that gives a sandbox loopback only; a pod "
				     "always has the pod network (docs/isolation.md, N1)");
	if (workspace_name_check("identity", identity, &err) < 0)
		return control_error_from("invalid", &err);
	if ((resp = grants_check(m, grants, network)) != NULL)
		return resp;
	allow_words = malloc(SESSION_EGRESS_ALLOW_BYTES);
	if (allow_words == NULL)
		return control_error("internal", "out of memory");
	if ((resp = egress_allow_check(m, json_object_get(req, "egress_allow"), policy, allow_words,
				       SESSION_EGRESS_ALLOW_BYTES)) != NULL) {
		free(allow_words);
		return resp;
	}
	resp = sessions_create_made(m, identity, repo, branch, network, allow_words, grants);
	free(allow_words);
	return resp;
}


/* -1 (no such limit holds) is null. */
static json_t *limit_json(int64_t v)
{
	return v < 0 ? json_null() : json_integer((json_int_t)v);
}

static json_t *limits_pack(const struct sandbox_limits *lim)
{
	json_t *cpu = lim->cpu_quota_us < 0 || lim->cpu_period_us <= 0 ? json_null() :
		      json_pack("{s:I, s:I}", "quota_us", (json_int_t)lim->cpu_quota_us, "period_us",
				(json_int_t)lim->cpu_period_us);

	return json_pack("{s:o, s:o, s:o, s:o, s:o, s:s?}", "tmp_bytes", limit_json(lim->tmp_bytes), "shm_bytes",
			 limit_json(lim->shm_bytes), "memory_max", limit_json(lim->memory_max), "pids_max",
			 limit_json(lim->pids_max), "cpu_max", cpu, "cgroup", lim->cgroup[0] ? lim->cgroup : NULL);
}

/* The session's live sandbox, copied under the lock: another thread may retire and free it at any
 * time (a retire holds the session's turn, which show does not take). The copy goes to limits()
 * only (backend.h): what the handle holds stays the sandbox's own. */
static bool live_copy(struct manager *m, const char *id, struct sandbox_handle *h, uint64_t *generation)
{
	struct live_sandbox *l;

	pthread_mutex_lock(&m->lock);
	for (l = m->live; l != NULL && strcmp(l->session, id) != 0; l = l->next) {
	}
	if (l != NULL) {
		*h = l->h;
		*generation = l->generation;
	}
	pthread_mutex_unlock(&m->lock);
	return l != NULL;
}

/* Which limits hold for the session's live sandbox, as its backend reads them back (the process
 * backend from the kernel, for the live init; podman what the container was created with): null
 * when it has no live sandbox, when the backend cannot say, or when the sandbox went while it was
 * read (what was read may then be another process's). */
static json_t *limits_json(struct manager *m, const char *id)
{
	struct sandbox_limits lim;
	struct sandbox_handle h;
	uint64_t generation = 0, now = 0;
	struct sb_err err;

	if (m->backend->ops->limits == NULL || !live_copy(m, id, &h, &generation))
		return json_null();
	sb_err_clear(&err);
	if (m->backend->ops->limits(m->backend, &h, &lim, &err) < 0) {
		sb_warn("session %s: the limits of sandbox %s cannot be read: %s", id, h.runtime_id, err.msg);
		return json_null();
	}
	if (!live_copy(m, id, &h, &now) || now != generation)
		return json_null();
	return limits_pack(&lim);
}

/* "ids": the uid and gid the identity's sandboxes run as and its files belong to (rule N2), and
 * where they come from. */
static json_t *session_ids_add(struct manager *m, const char *identity, json_t *resp)
{
	struct workspace_owner ids;
	struct sb_err err;

	if (resp == NULL)
		return NULL;
	if (identity_ids_of(m, identity, &ids, &err) < 0) {
		json_decref(resp);
		return control_error_from("internal", &err);
	}
	json_object_set_new(resp, "ids", json_pack("{s:I, s:I, s:s}", "uid", (json_int_t)ids.uid, "gid",
						   (json_int_t)ids.gid, "from", geteuid() == 0 ? m->cfg.ids_from :
						   "the manager's own (an unprivileged manager maps only its own ids)"));
	return resp;
}

/* A session of policy proxy: {"proxy": "http://127.0.0.1:3128", "allow": "api.internal:443, ..."}
 * (the variables its calls get, and its allow-list, the manager's and its own, as the 403's body
 * says it); NULL otherwise. */
static json_t *egress_json(const struct manager *m, const struct session_row *s)
{
	struct egress_allow *all;
	struct sb_err err;
	char allow[4096];
	json_t *o;

	if (strcmp(s->network, "proxy") != 0 || (all = malloc(sizeof *all)) == NULL)
		return NULL;
	*all = m->cfg.egress_allow;
	if (egress_allow_add_words(all, s->egress_allow, &err) < 0)
		snprintf(allow, sizeof allow, "unreadable: %s", err.msg);
	else
		egress_allow_describe(all, allow, sizeof allow);
	free(all);
	o = json_pack("{s:s, s:s, s:s}", "proxy", "http://127.0.0.1:" EGRESS_PROXY_PORT_TEXT, "allow", allow,
		      "session_allow", s->egress_allow);
	return o;
}

json_t *sessions_show(struct manager *m, const char *id)
{
	struct session_row s;
	struct sandbox_row sb;
	struct unsettled_note note;
	struct sb_err err;
	json_t *resp = session_lookup(m, id, &s), *grants, *sandbox = json_null(), *unsettled = NULL;

	if (resp != NULL)
		return resp;
	grants = records_grants(m->rec, id, &err);
	if (grants == NULL)
		return control_error_from("internal", &err);
	if (records_sandbox_get(m->rec, id, &sb, &err) == RECORDS_FOUND && strcmp(sb.state, "gone") != 0) {
		json_decref(sandbox);
		/* "evidence" (only when there is something to say): for an unproven sandbox, why its end
		 * could not be proven. */
		sandbox = json_pack("{s:s, s:s, s:I, s:s, s:s*}", "runtime_id", sb.runtime_id, "backend", sb.backend,
				    "generation", (json_int_t)sb.generation, "state", sb.state, "evidence",
				    sb.evidence[0] ? sb.evidence : NULL);
	}
	/* "unsettled" (only when there is something to say): why the start's recovery reserved it, and
	 * the exec to resolve. */
	if (recovery_unsettled_get(m, id, &note))
		unsettled = json_pack("{s:s?, s:s}", "exec", note.exec_id[0] ? note.exec_id : NULL, "reason", note.reason);
	/* "disk": which bound keeps a full volume from this session's records (rule N4); "egress" (policy
	 * proxy only): where its calls' proxy is and what it lets through. */
	return session_ids_add(m, s.identity, json_pack("{s:b, s:s, s:s, s:s, s:s, s:s, s:o, s:I, s:I, s:o, s:o, s:s, s:i, s:o, s:s, s:o*, s:o, s:o*}", "ok",
			 1, "session", s.id, "identity", s.identity, "repo", s.repo, "worktree", s.worktree, "branch",
			 s.branch, "grants", grants, "generation", (json_int_t)s.generation, "turn", (json_int_t)s.turn,
			 "sandbox", sandbox, "limits", limits_json(m, id), "state", s.state, "queued",
			 (int)queue_depth(m->queue, id), "owner", ownership_json(m, id), "network", s.network,
			 "unsettled", unsettled, "disk", disk_bound_json(&m->disk), "egress", egress_json(m, &s)));
}

static json_t *delete_locked(struct manager *m, struct session_row *s, bool delete_branch)
{
	struct live_sandbox *l = sandbox_find(m, s->id);
	struct unsettled_note note;
	struct workspace ws;
	struct sb_err err;
	bool kept = true;
	int rc;

	/* Invariant 9: the workspace goes only after evidence that its sandbox is gone. */
	if (l != NULL && sandbox_retire(m, l, "session deleted", &err) < 0)
		return control_error("refused", "session %s: its sandbox's end is not proven (%s); the workspace stays "
				     "reserved", s->id, err.msg);
	if (strcmp(s->state, "reserved") == 0 && recovery_unsettled_get(m, s->id, &note))
		return control_error("refused", "session %s is reserved: the start's recovery could not settle %s%s "
				     "(%s); its workspace stays until that is settled (resolve --exec)", s->id,
				     note.exec_id[0] ? "exec " : "its sandbox", note.exec_id, note.reason);
	/* Asked again now (sandbox.c sandbox_reserved_retry): the fault that reserved it may be gone. */
	if (strcmp(s->state, "reserved") == 0)
		(void)sandbox_reserved_retry(m, s->id, s);
	if (strcmp(s->state, "reserved") == 0)
		return control_error("refused", "session %s is reserved: an earlier sandbox's end was never proven; "
				     "its workspace stays until it is (asked again at each call and delete)", s->id);
	if (workspace_open(m->cfg.volume, s->identity, s->id, &ws, &err) < 0)
		return control_error_from("internal", &err);
	rc = workspace_delete(&ws, !delete_branch, &kept, &err);
	workspace_free(&ws);
	if (rc < 0 || records_session_set_state(m->rec, s->id, "deleted", &err) < 0)
		return control_error_from("internal", &err);
	sb_info("session %s deleted (branch %s)", s->id, kept ? "kept" : "deleted");
	return json_pack("{s:b, s:s, s:b}", "ok", 1, "session", s->id, "branch_kept", kept);
}

json_t *sessions_delete(struct manager *m, const char *id, bool delete_branch)
{
	struct session_row s;
	json_t *resp = session_lookup(m, id, &s);
	bool holds;

	if (resp != NULL)
		return resp;
	/* A call running or queued is the client's to cancel first; the start at the session's create
	 * (early_start.c) is waited for, and its sandbox retired below. Asked in this order: a start
	 * that ends between the two looks is never taken for a call. */
	holds = early_start_holds(m, id);
	if (queue_depth(m->queue, id) > (holds ? 1u : 0u))
		return control_error("refused", "session %s has a command running or queued; cancel it first", id);
	queue_enter(m->queue, id);
	resp = delete_locked(m, &s, delete_branch);
	queue_leave(m->queue, id);
	return resp;
}

/* A change of authority retires the sandbox: a revocation stops the running call at once
 * (recorded cancelled, with the reason); an addition waits for it. The next call prepares a new
 * sandbox, with a new generation and the new snapshot. */
static void authority_changed(struct manager *m, const char *id, const char *revoked)
{
	struct live_sandbox *l;
	struct sb_err err;

	if (revoked != NULL) {
		char reason[256], exec_id[65];

		/* The one cancel (cancel.c), as a client's: the call records it cancelled, with this reason. */
		snprintf(reason, sizeof reason, "cancelled: grant %s revoked", revoked);
		if (cancel_session_call(m, id, NULL, reason, exec_id, sizeof exec_id, &err) < 0)
			sb_warn("session %s: stopping the sandbox of exec %s for the revocation: %s; its evidence decides",
				id, exec_id, err.msg);
	}
	queue_enter(m->queue, id);
	l = sandbox_find(m, id);
	if (l != NULL)
		sandbox_retire(m, l, revoked ? "grant revoked" : "grant changed", &err);
	queue_leave(m->queue, id);
}

json_t *sessions_grant(struct manager *m, json_t *req)
{
	const char *id = json_string_value(json_object_get(req, "session"));
	const char *set = json_string_value(json_object_get(req, "set"));
	const char *revoke = json_string_value(json_object_get(req, "revoke"));
	struct session_row s;
	struct sb_err err;
	char res[128];
	const char *access;
	json_t *resp = session_lookup(m, id, &s);

	if (resp != NULL)
		return resp;
	if ((set == NULL) == (revoke == NULL))
		return control_error("invalid", "grant needs exactly one of set=RESOURCE=ACCESS or revoke=RESOURCE");
	if (set != NULL && grant_parse(m, set, res, sizeof res, &access, &err) < 0)
		return control_error_from(err.errnum == ENOENT ? "refused" : "invalid", &err);
	if (set != NULL && (resp = grant_network_check(res, s.network)) != NULL)
		return resp;
	if (set != NULL ? records_grant_set(m->rec, id, res, access, &err) < 0 :
			  records_grant_revoke(m->rec, id, revoke, &err) < 0)
		return control_error_from("internal", &err);
	authority_changed(m, id, revoke);
	return sessions_show(m, id);
}
