/* A session's sandbox over its life: prepared with a new generation (certificate, receipt key,
 * private directory, backend), reused across calls, retired only with evidence, evicted when idle,
 * and cleaned up after a manager restart. Never declares a sandbox gone without its backend's
 * evidence; never reuses a generation. */
#include "manager.h"

#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "agent_client.h"
#include "log.h"
#include "random.h"
#include "grants.h"
#include "workspace.h"

#define EVIDENCE_MS 10000

int64_t now_wall_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
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

static int rm_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
	(void)st;
	(void)flag;
	(void)ftw;
	return remove(path) < 0 && errno != ENOENT ? -1 : 0;
}

static int dir_writable(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
	(void)ftw;
	/* The credentials snapshot is sealed read-only (0500): open it up to remove it. */
	if (flag == FTW_D && (st->st_mode & 0700) != 0700)
		chmod(path, 0700);
	return 0;
}

/* The private directory holds the sandbox's keys: removed once the sandbox is proven gone. The
 * credentials it was issued that can be revoked (Rancher tokens) are revoked first. */
static void private_dir_remove(const char *dir)
{
	struct sb_err err;

	if (snapshot_release(dir, &err) < 0)
		sb_warn("releasing the credentials of %s: %s", dir, err.msg);
	nftw(dir, dir_writable, 16, FTW_PHYS);
	if (nftw(dir, rm_entry, 16, FTW_DEPTH | FTW_PHYS) < 0)
		sb_warn("removing %s: %s", dir, strerror(errno));
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

static int key_write(const char *path, const uint8_t *key, size_t len, struct sb_err *err)
{
	int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);

	if (fd < 0)
		return sb_fail_errno(err, "creating %s", path);
	if (write(fd, key, len) != (ssize_t)len || fsync(fd) < 0) {
		sb_fail_errno(err, "writing %s", path);
		close(fd);
		return -1;
	}
	close(fd);
	return 0;
}

/* private_dir/{tls,state,sock}: the agent's certificate (named for this generation), the CA
 * certificate, and a fresh receipt key that only the manager and this agent hold. */
static int private_dir_make(struct manager *m, struct live_sandbox *l, struct sb_err *err)
{
	char path[PATH_MAX + 32], name[256];
	struct ca_leaf leaf = { .usage = CA_USAGE_SERVER };

	snprintf(path, sizeof path, "%s/sandboxes", m->cfg.state_dir);
	snprintf(l->private_dir, sizeof l->private_dir, "%s/sandboxes/%s.g%llu", m->cfg.state_dir, l->session,
		 (unsigned long long)l->generation);
	if (dir_make(path, true, err) < 0 || dir_make(l->private_dir, true, err) < 0)
		return -1;
	for (int i = 0; i < 3; i++) {
		snprintf(path, sizeof path, "%s/%s", l->private_dir, (const char *[]){ "tls", "state", "sock" }[i]);
		if (dir_make(path, false, err) < 0)
			return -1;
	}
	if (ca_format_sandbox_name(name, sizeof name, l->session, l->generation, err) < 0)
		return -1;
	leaf.dns_name = name;
	snprintf(path, sizeof path, "%s/tls", l->private_dir);
	if (ca_issue_leaf(m->ca, &leaf, path, "agent", err) < 0 || ca_write_cert(m->ca, path, "ca.crt", err) < 0)
		return -1;
	if (sb_random_bytes(l->receipt_key, sizeof l->receipt_key, err) < 0)
		return -1;
	snprintf(path, sizeof path, "%s/state/receipt.key", l->private_dir);
	return key_write(path, l->receipt_key, sizeof l->receipt_key, err);
}

static int client_config_make(struct manager *m, struct live_sandbox *l, struct sb_err *err)
{
	char cert[PATH_MAX + 16], key[PATH_MAX + 16], ca[PATH_MAX + 16];

	snprintf(cert, sizeof cert, "%s/manager.crt", m->tls_dir);
	snprintf(key, sizeof key, "%s/manager.key", m->tls_dir);
	snprintf(ca, sizeof ca, "%s/ca.crt", m->tls_dir);
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
	row.started_ms = now_wall_ms();
	free(text);
	return records_sandbox_upsert(m->rec, &row, err);
}

static int sandbox_start(struct manager *m, struct live_sandbox *l, const struct workspace *ws, struct sb_err *err)
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

		snprintf(l->authority, sizeof l->authority, "%s", text ? text : "");
		free(text);
	}
	rc = grants ? snapshot_make(l->private_dir, grants, m->cfg.resources, m->cfg.sandbox_uid, m->cfg.sandbox_gid,
				    &snap, err) : -1;
	json_decref(grants);
	if (rc < 0) {
		mount_plan_free(&plan);
		return -1;
	}
	snprintf(l->kubeconfig, sizeof l->kubeconfig, "%s", snap.kubeconfig);
	l->credentials_expire_ms = snap.expires_ms;
	snprintf(l->workdir, sizeof l->workdir, "%s", plan.workdir);
	snprintf(l->scratch, sizeof l->scratch, "%s", plan.scratch);
	spec.credentials_dir = snap.dir;
	snprintf(private_sub, sizeof private_sub, "%s", l->private_dir);
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
	if (rc == 0)
		rc = m->backend->ops->prepare(m->backend, &spec, &l->h, err);
	mount_plan_free(&plan);
	if (rc == 0)
		rc = sandbox_record(m, l, "running", err);
	return rc;
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
	int rc;

	*out = NULL;
	/* Short-lived credentials are renewed by a new sandbox (a new generation, a fresh snapshot):
	 * never by changing the snapshot under a live one, and never used past their expiry. */
	if (l != NULL && credentials_expiring(l, now_wall_ms()) && sandbox_retire(m, l, "credentials expiring", err) < 0)
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
	l->h.pidfd = -1;
	snprintf(l->session, sizeof l->session, "%s", session);
	/* A new sandbox is a new generation: results of any older one are refused from now on. */
	rc = records_session_bump_generation(m->rec, session, &l->generation, err);
	if (rc == 0)
		rc = sandbox_start(m, l, &ws, err);
	workspace_free(&ws);
	if (rc < 0) {
		struct sb_err ignored;

		records_sandbox_set_state(m->rec, session, l->generation, "gone", "prepare failed", &ignored);
		if (l->private_dir[0] != '\0')
			private_dir_remove(l->private_dir);
		live_free(l);
		sb_err_prefix(err, "preparing the sandbox of session %s", session);
		return -1;
	}
	l->last_used_ms = now_wall_ms();
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

int sandbox_retire(struct manager *m, struct live_sandbox *l, const char *why, struct sb_err *err)
{
	struct sb_err ignored;
	int rc;

	sb_info("session %s: retiring sandbox %s (%s)", l->session, l->h.runtime_id, why);
	records_sandbox_set_state(m->rec, l->session, l->generation, "stopping", why, &ignored);
	rc = m->backend->ops->stop(m->backend, &l->h, err);
	/* Evidence even when the stop request failed: the process may be gone already. */
	rc = m->backend->ops->evidence(m->backend, &l->h, EVIDENCE_MS, err);
	if (rc < 0) {
		records_sandbox_set_state(m->rec, l->session, l->generation, "unproven", err->msg, &ignored);
		records_session_set_state(m->rec, l->session, "reserved", &ignored);
		sb_error("session %s: the end of sandbox %s is NOT proven: %s; its workspace stays reserved",
			 l->session, l->h.runtime_id, err->msg);
		/* Out of the live list (no call may use it, and the evictor must not pick it again), but
		 * its private directory stays: it may still be running with those keys. */
		live_unlink(m, l);
		live_free(l);
		return -1;
	}
	records_sandbox_set_state(m->rec, l->session, l->generation, "gone", "init reaped", &ignored);
	live_unlink(m, l);
	private_dir_remove(l->private_dir);
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
		while ((l = idle_pick(m, now_wall_ms())) != NULL) {
			/* Take the session's turn, so no call can start on it while it goes. */
			snprintf(session, sizeof session, "%s", l->session);
			queue_enter(m->queue, session);
			l = sandbox_find(m, session);
			if (l != NULL && !l->busy && credentials_expiring(l, now_wall_ms()))
				sandbox_retire(m, l, "credentials expiring", &err);
			else if (l != NULL && !l->busy && now_wall_ms() - l->last_used_ms > (int64_t)m->cfg.idle_seconds * 1000)
				sandbox_retire(m, l, "idle", &err);
			queue_leave(m->queue, session);
		}
	}
	return NULL;
}

/* ---- after a restart ---- */

static void recover_one(struct manager *m, json_t *row)
{
	const char *session = json_string_value(json_object_get(row, "session"));
	const char *runtime_id = json_string_value(json_object_get(row, "runtime_id"));
	const char *address = json_string_value(json_object_get(row, "address"));
	const char *dir = json_string_value(json_object_get(row, "private_dir"));
	uint64_t generation = (uint64_t)json_integer_value(json_object_get(row, "generation"));
	struct sandbox_handle h = { .pidfd = -1 };
	char found_id[sizeof h.runtime_id];
	struct sb_err err;

	if (session == NULL || runtime_id == NULL)
		return;
	/* A sandbox recorded as "starting" never got its runtime id recorded: the runtime may still
	 * have made one (a container created just before the manager died). */
	if (strcmp(runtime_id, "starting") == 0 && m->backend->ops->lookup != NULL) {
		int found = m->backend->ops->lookup(m->backend, session, generation, &h, &err);

		if (found < 0) {
			records_sandbox_set_state(m->rec, session, generation, "unproven", err.msg, &err);
			records_session_set_state(m->rec, session, "reserved", &err);
			sb_error("session %s: cannot tell whether the previous run left a sandbox starting", session);
			return;
		}
		if (found == 1) {
			snprintf(found_id, sizeof found_id, "%s", h.runtime_id);
			runtime_id = found_id; /* adopt() clears h */
		}
	}
	if (strcmp(runtime_id, "starting") != 0 &&
	    (m->backend->ops->adopt(m->backend, runtime_id, address ? address : "", &h, &err) < 0 ||
	     (m->backend->ops->stop(m->backend, &h, &err), m->backend->ops->evidence(m->backend, &h, EVIDENCE_MS, &err)) < 0)) {
		records_sandbox_set_state(m->rec, session, generation, "unproven", err.msg, &err);
		records_session_set_state(m->rec, session, "reserved", &err);
		sb_error("session %s: the previous run's sandbox %s is not proven gone", session, runtime_id);
		return;
	}
	records_sandbox_set_state(m->rec, session, generation, "gone", "stopped after a manager restart", &err);
	if (dir != NULL && dir[0] != '\0')
		private_dir_remove(dir);
	sb_info("session %s: the previous run's sandbox %s is gone", session, runtime_id);
}

int sandbox_recover(struct manager *m, struct sb_err *err)
{
	int released;
	json_t *rows;
	size_t i;
	json_t *row;

	/* Execs first: their sandboxes may still know how they ended. */
	if (execpath_recover(m, err) < 0)
		return -1;
	rows = records_sandboxes_not_gone(m->rec, err);
	if (rows == NULL)
		return -1;
	json_array_foreach(rows, i, row)
		recover_one(m, row);
	json_decref(rows);
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

static int probe_host_side(struct probe *p, int write_it, struct sb_err *err)
{
	char path[PATH_MAX + 16], want[64], got[64] = "";
	FILE *f;

	snprintf(path, sizeof path, "%s/%s", p->dir, write_it ? "host.txt" : "sandbox.txt");
	f = fopen(path, write_it ? "we" : "re");
	if (f == NULL)
		return sb_fail_errno(err, write_it ? "writing %s" : "a file written inside a sandbox is not visible on the "
			       "host (%s)", path);
	if (write_it)
		fprintf(f, "%s\n", p->token);
	else if (fgets(got, sizeof got, f) == NULL)
		got[0] = '\0';
	if (fclose(f) != 0)
		return sb_fail_errno(err, "closing %s", path);
	snprintf(want, sizeof want, "%s-sandbox\n", p->token);
	if (!write_it && strcmp(got, want) != 0)
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
	int rc = -1;

	if (l == NULL)
		return sb_fail(err, ENOMEM, "probing the volume");
	l->h.pidfd = -1;
	l->generation = 1;
	if (sb_random_hex(p.token, 8, err) < 0)
		goto out;
	snprintf(l->session, sizeof l->session, "volprobe-%s", p.token);
	snprintf(p.dir, sizeof p.dir, "%s/.probe-%s", m->cfg.volume, p.token);
	if (mkdir(p.dir, 0755) < 0) {
		sb_fail_errno(err, "creating %s", p.dir);
		goto out;
	}
	p.entry = (struct mount_entry){ .source = p.dir, .target = p.dir, .mode = MOUNT_RW, .why = "volume probe" };
	p.plan = (struct mount_plan){ .entries = &p.entry, .n = 1, .workdir = p.dir, .scratch = p.dir };
	spec = (struct sandbox_spec){ .session = l->session, .generation = 1, .plan = &p.plan, .agent_path = m->cfg.agent,
				      .manager_name = CA_MANAGER_NAME, .host_uid = m->cfg.sandbox_uid,
				      .host_gid = m->cfg.sandbox_gid };
	if (probe_host_side(&p, 1, err) < 0 || private_dir_make(m, l, err) < 0 || client_config_make(m, l, err) < 0)
		goto out;
	spec.private_dir = l->private_dir;
	if (m->backend->ops->prepare(m->backend, &spec, &l->h, err) < 0)
		goto out;
	rc = probe_exec(l, &p, err) == 0 && probe_host_side(&p, 0, err) == 0 ? 0 : -1;
	m->backend->ops->stop(m->backend, &l->h, &ignored);
	if (m->backend->ops->evidence(m->backend, &l->h, EVIDENCE_MS, rc == 0 ? err : &ignored) < 0)
		rc = -1;
out:
	if (rc < 0)
		sb_err_prefix(err, "volume probe");
	else
		sb_info("volume probe: exclusive create, atomic rename, and writes visible both ways through a "
			"sandbox's mount view");
	if (l->private_dir[0] != '\0')
		private_dir_remove(l->private_dir);
	if (p.dir[0] != '\0')
		private_dir_remove(p.dir);
	live_free(l);
	return rc;
}
