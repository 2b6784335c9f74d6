/* A session's sandbox over its life: prepared with a new generation (certificate, receipt key,
 * private directory, backend), reused across calls, retired only with evidence, evicted when idle,
 * and cleaned up after a manager restart. Never declares a sandbox gone without its backend's
 * evidence; never reuses a generation. */
#include "manager.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "agent_client.h"
#include "agent_dir.h"
#include "clock.h"
#include "fdio.h"
#include "fstree.h"
#include "log.h"
#include "pathfmt.h"
#include "random.h"
#include "grants.h"
#include "workspace.h"

#define EVIDENCE_MS 10000

/* Declared in manager.h for sessions.c and execpath.c; the clock itself is common/clock.c. */
int64_t now_wall_ms(void)
{
	return clock_real_ms();
}

struct live_sandbox *sandbox_find(struct manager *m, const char *session)
{
	struct live_sandbox *l;

	pthread_mutex_lock(&m->lock);
	for (l = m->live; l != NULL && strcmp(l->session, session) != 0; l = l->next) {
	}
	pthread_mutex_unlock(&m->lock);
	return l;
}

/* The private directory holds the sandbox's keys: removed once the sandbox is proven gone. The
 * credentials it was issued that can be revoked (Rancher tokens) are revoked first. The sandbox
 * wrote its state/ and sock/ (a root manager handed them over), so the removal is fstree's: by
 * descriptor, never following a link planted there. Its path is trusted: <state_dir>/sandboxes/
 * is the manager's, and no sandbox can write it. Returns 0, or -1 with err (what stays is logged). */
static int private_dir_remove(const char *dir, struct sb_err *err)
{
	struct sb_err revoke_err;

	/* Its revoke list is the only record of what is still to revoke: kept with the directory. */
	if (snapshot_release(dir, &revoke_err) < 0) {
		sb_error("releasing the credentials of %s: %s; the directory stays so they can be revoked", dir,
			 revoke_err.msg);
		*err = revoke_err;
		return -1;
	}
	if (fstree_remove_path(dir, err) < 0) {
		sb_warn("%s", err->msg);
		return -1;
	}
	return 0;
}

/* 0700, or 0711 for the directories a root manager's sandbox init must walk through. */
static int dir_make(const char *path, bool walked, struct sb_err *err)
{
	mode_t mode = walked && geteuid() == 0 ? 0711 : 0700;

	if (mkdir(path, mode) < 0 && errno != EEXIST)
		return sb_fail_errno(err, "creating %s", path);
	if (chmod(path, mode) < 0)
		return sb_fail_errno(err, "setting the mode of %s", path);
	return 0;
}

/* private_dir/{tls,state,sock}: the agent's certificate (named for this generation), the CA
 * certificate, and a fresh receipt key that only the manager and this agent hold. */
static int private_dir_make(struct manager *m, struct live_sandbox *l, struct sb_err *err)
{
	char path[PATH_MAX + 32], name[256];
	struct ca_leaf leaf = { .usage = CA_USAGE_SERVER };

	/* A truncated path would name another directory: path_fmt refuses it (ENAMETOOLONG). */
	if (path_fmt(path, sizeof path, err, "%s/sandboxes", m->cfg.state_dir) < 0 ||
	    path_fmt(l->private_dir, sizeof l->private_dir, err, "%s/sandboxes/%s.g%llu", m->cfg.state_dir, l->session,
		     (unsigned long long)l->generation) < 0)
		return -1;
	if (dir_make(path, true, err) < 0 || dir_make(l->private_dir, true, err) < 0)
		return -1;
	for (int i = 0; i < 3; i++) {
		if (path_fmt(path, sizeof path, err, "%s/%s", l->private_dir, (const char *[]){ "tls", "state", "sock" }[i]) < 0 ||
		    dir_make(path, false, err) < 0)
			return -1;
	}
	if (ca_format_sandbox_name(name, sizeof name, l->session, l->generation, err) < 0)
		return -1;
	leaf.dns_name = name;
	if (path_fmt(path, sizeof path, err, "%s/tls", l->private_dir) < 0)
		return -1;
	if (ca_issue_leaf(m->ca, &leaf, path, "agent", err) < 0 || ca_write_cert(m->ca, path, "ca.crt", err) < 0)
		return -1;
	if (sb_random_bytes(l->receipt_key, sizeof l->receipt_key, err) < 0)
		return -1;
	if (path_fmt(path, sizeof path, err, "%s/state/receipt.key", l->private_dir) < 0)
		return -1;
	/* common/fdio.c: 0600, exclusive, no symlink, written whole, synced with its directory. */
	return fd_file_create_path(path, 0600, (uid_t)-1, (gid_t)-1, l->receipt_key, sizeof l->receipt_key, err);
}

static int client_config_make(struct manager *m, struct live_sandbox *l, struct sb_err *err)
{
	char cert[PATH_MAX + 16], key[PATH_MAX + 16], ca[PATH_MAX + 16];

	if (path_fmt(cert, sizeof cert, err, "%s/manager.crt", m->tls_dir) < 0 ||
	    path_fmt(key, sizeof key, err, "%s/manager.key", m->tls_dir) < 0 ||
	    path_fmt(ca, sizeof ca, err, "%s/ca.crt", m->tls_dir) < 0)
		return -1;
	return agent_client_config(&l->tls, cert, key, ca, l->session, l->generation, err);
}

static void live_free(struct live_sandbox *l)
{
	if (l == NULL)
		return;
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
	json_t *grants = records_grants(m->rec, l->session, err);
	char *text = grants ? json_dumps(grants, JSON_COMPACT | JSON_SORT_KEYS) : NULL;

	json_decref(grants);
	memset(&row, 0, sizeof row);
	snprintf(row.session, sizeof row.session, "%s", l->session);
	row.generation = l->generation;
	snprintf(row.backend, sizeof row.backend, "%s", m->backend->ops->name);
	snprintf(row.runtime_id, sizeof row.runtime_id, "%s", l->h.runtime_id);
	snprintf(row.address, sizeof row.address, "%s", l->h.address);
	snprintf(row.private_dir, sizeof row.private_dir, "%s", l->private_dir);
	snprintf(row.state, sizeof row.state, "%s", state);
	snprintf(row.grants_json, sizeof row.grants_json, "%s", text ? text : "{}");
	row.started_ms = clock_real_ms();
	free(text);
	return records_sandbox_upsert(m->rec, &row, err);
}

/* How far a start got, so its failure is taken back exactly (prepare_failed). */
struct start_stage {
	bool recorded; /* its "starting" row exists */
	bool started;  /* the backend prepared it: it runs until stopped with evidence */
};

static int sandbox_start(struct manager *m, struct live_sandbox *l, const struct workspace *ws,
			 struct start_stage *stage, struct sb_err *err)
{
	struct mount_plan plan = { 0 };
	struct sandbox_spec spec = { 0 };
	struct snapshot snap;
	char private_sub[PATH_MAX];
	json_t *grants;
	int rc;

	if (private_dir_make(m, l, err) < 0 || client_config_make(m, l, err) < 0 ||
	    mount_plan_build(ws, &plan, err) < 0) {
		mount_plan_free(&plan);
		return -1;
	}
	/* The authority snapshot: the session's grants as they are now, for this generation only. */
	grants = records_grants(m->rec, l->session, err);
	if (grants != NULL) {
		char *text = json_dumps(grants, JSON_COMPACT | JSON_SORT_KEYS);

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
	}
	rc = grants ? snapshot_make(l->private_dir, grants, m->cfg.resources, m->cfg.sandbox_uid, m->cfg.sandbox_gid,
				    &snap, err) : -1;
	json_decref(grants);
	if (rc < 0) {
		mount_plan_free(&plan);
		return -1;
	}
	l->credentials_expire_ms = snap.expires_ms;
	/* Paths every call uses: a cut one would name another place (common/pathfmt.c). */
	if (path_fmt(l->kubeconfig, sizeof l->kubeconfig, err, "%s", snap.kubeconfig) < 0 ||
	    path_fmt(l->workdir, sizeof l->workdir, err, "%s", plan.workdir) < 0 ||
	    path_fmt(l->scratch, sizeof l->scratch, err, "%s", plan.scratch) < 0 ||
	    path_fmt(private_sub, sizeof private_sub, err, "%s", l->private_dir) < 0) {
		mount_plan_free(&plan);
		return -1;
	}
	spec.credentials_dir = snap.dir;
	spec.session = l->session;
	spec.generation = l->generation;
	spec.plan = &plan;
	spec.private_dir = private_sub;
	spec.agent_path = m->cfg.agent;
	spec.manager_name = CA_MANAGER_NAME;
	spec.host_uid = m->cfg.sandbox_uid;
	spec.host_gid = m->cfg.sandbox_gid;
	/* Recorded before it starts: a manager killed during prepare finds it on restart. */
	snprintf(l->h.runtime_id, sizeof l->h.runtime_id, "starting");
	rc = sandbox_record(m, l, "starting", err);
	stage->recorded = rc == 0;
	if (rc == 0)
		rc = m->backend->ops->prepare(m->backend, &spec, &l->h, err);
	mount_plan_free(&plan);
	if (rc == 0) {
		stage->started = true;
		rc = sandbox_record(m, l, "running", err);
	}
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

#define CREDENTIAL_MARGIN_MS 60000

static bool credentials_expiring(const struct live_sandbox *l, int64_t now)
{
	return l->credentials_expire_ms != 0 && now >= l->credentials_expire_ms - CREDENTIAL_MARGIN_MS;
}

int sandbox_acquire(struct manager *m, const char *session, struct live_sandbox **out, struct sb_err *err)
{
	struct session_row s;
	struct workspace ws;
	struct live_sandbox *l = sandbox_find(m, session);
	struct start_stage stage = { false, false };
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
	sb_err_clear(err);
	if (records_session_get(m->rec, session, &s, err) != RECORDS_FOUND)
		return err->msg[0] ? -1 : sb_fail(err, ENOENT, "no session '%s'", session);
	if (workspace_open(m->cfg.volume, s.identity, s.id, &ws, err) < 0)
		return -1;
	l = calloc(1, sizeof *l);
	if (l == NULL) {
		workspace_free(&ws);
		return sb_fail(err, ENOMEM, "allocating a sandbox");
	}
	snprintf(l->session, sizeof l->session, "%s", session);
	/* A new sandbox is a new generation: results of any older one are refused from now on. */
	rc = records_session_bump_generation(m->rec, session, &l->generation, err);
	if (rc == 0)
		rc = sandbox_start(m, l, &ws, &stage, err);
	workspace_free(&ws);
	if (rc < 0) {
		sb_err_prefix(err, "preparing the sandbox of session %s", session);
		prepare_failed(m, l, &stage);
		return -1;
	}
	l->last_used_ms = clock_real_ms();
	pthread_mutex_lock(&m->lock);
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

	snprintf(why, sizeof why, "%s", err->msg);
	pthread_mutex_lock(&m->lock);
	m->unproven++; /* the stop's exit code says so (daemon.c) */
	pthread_mutex_unlock(&m->lock);
	if (records_sandbox_set_state(m->rec, l->session, l->generation, "unproven", why, &rec_err) < 0 ||
	    records_session_set_state(m->rec, l->session, "reserved", &rec_err) < 0) {
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

/* ---- idle eviction ---- */

static struct live_sandbox *idle_pick(struct manager *m, int64_t now)
{
	struct live_sandbox *l;

	pthread_mutex_lock(&m->lock);
	for (l = m->live; l != NULL; l = l->next)
		if (!l->busy && queue_depth(m->queue, l->session) == 0 &&
		    (now - l->last_used_ms > (int64_t)m->cfg.idle_seconds * 1000 || credentials_expiring(l, now)))
			break;
	pthread_mutex_unlock(&m->lock);
	return l;
}

void *sandbox_evictor(void *arg)
{
	struct manager *m = arg;

	for (;;) {
		struct live_sandbox *l;
		struct sb_err err;
		char session[65];

		sleep(1);
		while ((l = idle_pick(m, clock_real_ms())) != NULL) {
			/* Take the session's turn, so no call can start on it while it goes. */
			snprintf(session, sizeof session, "%s", l->session);
			queue_enter(m->queue, session);
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

/* One sandbox a previous run left not gone: stopped with evidence and recorded gone, or recorded
 * unproven with its session reserved. -1 (err) when a record could not be written. */
static int recover_one(struct manager *m, json_t *row, struct sb_err *err)
{
	const char *session = json_string_value(json_object_get(row, "session"));
	const char *runtime_id = json_string_value(json_object_get(row, "runtime_id"));
	const char *address = json_string_value(json_object_get(row, "address"));
	const char *dir = json_string_value(json_object_get(row, "private_dir"));
	uint64_t generation = (uint64_t)json_integer_value(json_object_get(row, "generation"));
	struct sandbox_handle h = { .runtime_id = "" };
	char found_id[sizeof h.runtime_id], said[sizeof h.evidence + 64];
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
		if (m->backend->ops->evidence(m->backend, &h, EVIDENCE_MS, &why) < 0)
			return recover_unproven(m, session, generation, why.msg, err);
	}
	snprintf(said, sizeof said, "after a manager restart: %s",
		 h.evidence[0] ? h.evidence : "its prepare never finished, and the runtime holds no sandbox of it");
	if (records_sandbox_set_state(m->rec, session, generation, "gone", said, err) < 0) {
		sb_err_prefix(err, "session %s: recording the previous run's sandbox %s as gone", session, runtime_id);
		return -1;
	}
	if (dir != NULL && dir[0] != '\0')
		private_dir_remove(dir, &why);
	sb_info("session %s: the previous run's sandbox %s is gone: %s", session, runtime_id, said);
	return 0;
}

int sandbox_recover(struct manager *m, struct sb_err *err)
{
	struct sb_err first = { 0 };
	int released, failed = 0;
	json_t *rows;
	size_t i;
	json_t *row;

	/* Execs first: their sandboxes may still know how they ended. */
	if (execpath_recover(m, err) < 0)
		return -1;
	rows = records_sandboxes_not_gone(m->rec, err);
	if (rows == NULL)
		return -1;
	/* Every row is settled as far as it can be; then a failed write refuses the start: the
	 * manager must not serve with a sandbox whose end it could not record. */
	json_array_foreach(rows, i, row)
		if (recover_one(m, row, failed ? err : &first) < 0)
			failed++;
	json_decref(rows);
	if (failed > 0) {
		*err = first;
		return -1;
	}
	/* A session reserved because a sandbox's end was not proven gets its workspace back once
	 * every one of its sandboxes is: the operator removed it, or it ended since. */
	released = records_sessions_release(m->rec, err);
	if (released < 0)
		return -1;
	if (released > 0)
		sb_info("%d reserved session(s) released: their sandboxes are proven gone", released);
	return 0;
}

/* ---- the volume, as a sandbox sees it ---- */

struct probe {
	char dir[PATH_MAX];
	char token[17];
	struct mount_entry entry;
	struct mount_plan plan;
};

static int probe_exec(struct live_sandbox *l, struct probe *p, struct sb_err *err)
{
	char cmd[256];
	struct agent_env env[] = { { "PATH", "/usr/bin:/bin" } };
	struct agent_exec_request req = { .exec_id = "volume-probe", .generation = l->generation, .command = cmd,
					  .cwd = p->dir, .timeout_seconds = 10, .output_limit = 4096, .env = env,
					  .n_env = 1, .receipt_key = l->receipt_key };
	struct agent_reply reply = { 0 };
	struct agent_conn *conn = NULL;
	json_t *result = NULL;
	int rc = -1;

	snprintf(cmd, sizeof cmd, "cat host.txt && echo %s-sandbox > sandbox.txt", p->token);
	if (sb_random_bytes(req.nonce, sizeof req.nonce, err) == 0 &&
	    agent_connect(l->tls, l->h.address, tls_deadline_after(10000), &conn, err) == 0 &&
	    agent_exec(conn, &req, tls_deadline_after(30000), &reply, err) == 0) {
		result = json_loads(reply.result_json, 0, NULL);
		const char *out = json_string_value(json_object_get(result, "stdout"));

		rc = out != NULL && strncmp(out, p->token, 16) == 0 && reply.receipt_verified ? 0 :
		     sb_fail(err, EIO, "a file written on the host is not visible inside a sandbox (it read '%s')",
			     out ? out : "(nothing)");
	}
	json_decref(result);
	agent_reply_free(&reply);
	agent_close(conn);
	return rc;
}

/* host.txt, written before the probe's sandbox exists (nothing else writes the fresh directory). */
static int probe_host_write(const struct probe *p, struct sb_err *err)
{
	char path[PATH_MAX + 16];
	FILE *f;

	if (path_fmt(path, sizeof path, err, "%s/host.txt", p->dir) < 0)
		return -1;
	f = fopen(path, "wxe");
	if (f == NULL)
		return sb_fail_errno(err, "writing %s", path);
	fprintf(f, "%s\n", p->token);
	if (fclose(f) != 0)
		return sb_fail_errno(err, "closing %s", path);
	return 0;
}

/* sandbox.txt, which the probe's sandbox wrote: its directory is the sandbox's (handed over), so
 * a compromised agent could have put a link or a FIFO there. Read beneath the held probe
 * directory (opened with no link on its path: the volume root above it is not the sandbox's), one
 * name with O_NOFOLLOW, without blocking, a regular file of at most a line: never another file. */
static int probe_sandbox_read(const struct probe *p, struct sb_err *err)
{
	char want[64], got[64];
	struct stat st;
	ssize_t n = -1;
	int dirfd, fd;

	dirfd = fstree_open_dir(AT_FDCWD, p->dir, err);
	if (dirfd < 0)
		return -1;
	fd = openat(dirfd, "sandbox.txt", O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
	close(dirfd);
	if (fd < 0)
		return sb_fail_errno(err, "a file written inside a sandbox is not visible on the host (%s/sandbox.txt%s)",
				     p->dir, errno == ELOOP ? ": a symbolic link, refused" : "");
	if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_size < (off_t)sizeof got)
		n = read(fd, got, sizeof got - 1);
	close(fd);
	if (n < 0)
		return sb_fail(err, EIO, "%s/sandbox.txt, written inside a sandbox, is not a regular file of one short "
			       "line", p->dir);
	got[n] = '\0';
	snprintf(want, sizeof want, "%s-sandbox\n", p->token);
	if (strcmp(got, want) != 0)
		return sb_fail(err, EIO, "a file written inside a sandbox reads differently on the host");
	return 0;
}

/* The third property of the volume probe (workspace.c does the first two): a write on the host is
 * visible through a sandbox's mount view, and a write inside is visible on the host. One
 * throwaway sandbox on a probe directory of the volume, stopped with evidence afterwards. */
int sandbox_volume_probe(struct manager *m, struct sb_err *err)
{
	struct live_sandbox *l = calloc(1, sizeof *l);
	struct probe p = { 0 };
	struct sandbox_spec spec = { 0 };
	struct sb_err ignored;
	bool unproven = false;
	int rc = -1;

	if (l == NULL)
		return sb_fail(err, ENOMEM, "probing the volume");
	l->generation = 1;
	if (sb_random_hex(p.token, 8, err) < 0)
		goto out;
	snprintf(l->session, sizeof l->session, "volprobe-%s", p.token);
	if (path_fmt(p.dir, sizeof p.dir, err, "%s/.probe-%s", m->cfg.volume, p.token) < 0) {
		p.dir[0] = '\0';
		goto out;
	}
	if (mkdir(p.dir, 0755) < 0) {
		sb_fail_errno(err, "creating %s", p.dir);
		goto out;
	}
	p.entry = (struct mount_entry){ .source = p.dir, .target = p.dir, .mode = MOUNT_RW, .why = "volume probe" };
	p.plan = (struct mount_plan){ .entries = &p.entry, .n = 1, .workdir = p.dir, .scratch = p.dir };
	spec = (struct sandbox_spec){ .session = l->session, .generation = 1, .plan = &p.plan, .agent_path = m->cfg.agent,
				      .manager_name = CA_MANAGER_NAME, .host_uid = m->cfg.sandbox_uid,
				      .host_gid = m->cfg.sandbox_gid };
	if (probe_host_write(&p, err) < 0 || private_dir_make(m, l, err) < 0 || client_config_make(m, l, err) < 0)
		goto out;
	spec.private_dir = l->private_dir;
	if (m->backend->ops->prepare(m->backend, &spec, &l->h, err) < 0)
		goto out;
	rc = probe_exec(l, &p, err) == 0 && probe_sandbox_read(&p, err) == 0 ? 0 : -1;
	if (m->backend->ops->stop(m->backend, &l->h, &ignored) < 0)
		sb_warn("volume probe: stopping its sandbox: %s", ignored.msg);
	if (m->backend->ops->evidence(m->backend, &l->h, EVIDENCE_MS, rc == 0 ? err : &ignored) < 0) {
		/* Its keys and directory stay: it may still run. */
		sb_error("volume probe: the end of its sandbox %s is not proven", l->h.runtime_id);
		unproven = true;
		rc = -1;
	}
out:
	if (rc < 0)
		sb_err_prefix(err, "volume probe");
	else
		sb_info("volume probe: exclusive create, atomic rename, and writes visible both ways through a "
			"sandbox's mount view");
	if (!unproven && l->private_dir[0] != '\0')
		private_dir_remove(l->private_dir, &ignored);
	if (!unproven && p.dir[0] != '\0')
		private_dir_remove(p.dir, &ignored);
	live_free(l);
	return rc;
}
