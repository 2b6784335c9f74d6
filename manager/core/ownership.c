/* Which sessions are this manager's (issue 19; docs/scaling.md). Several managers may share one
 * store; a session is owned by one of them at a time, through its lease in the store (owner,
 * expiry, generation: records_lease_take). This file keeps the manager's side of it: its name and
 * incarnation in the store's registry of managers, the renewal of every lease it holds, the
 * answer that sends a client to a session's owner, and the release at a clean stop.
 *
 * A lease is liveness, not safety. What makes two managers' calls on one session impossible is
 * the fence (records_set_fence): every write about a session names its owner, and the writes that
 * carry a generation name that too, in the same statement, so a manager that lost a session
 * (paused past its lease, cut off from the store) cannot record a dispatch or a sandbox for it, and
 * a takeover raises the generation that agents check. Clocks decide only when a takeover may
 * happen; the manager's wall clock is used because the store's lease rows are compared across
 * hosts. */
#include "manager.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "clock.h"
#include "control.h"
#include "fdio.h"
#include "log.h"
#include "pathfmt.h"
#include "random.h"

/* The renewal, every third of the lease: a manager must miss two renewals before another may take
 * its sessions over. */
static void *renewer(void *arg)
{
	struct manager *m = arg;
	unsigned long every_ms = m->cfg.lease_ms / 3;
	bool failing = false;

	for (;;) {
		struct sb_err err;
		int rc;

		usleep((useconds_t)every_ms * 1000);
		rc = records_manager_heartbeat(m->rec, m->cfg.manager_id, m->incarnation, clock_real_ms(),
					       (int64_t)m->cfg.lease_ms, &err);
		if (rc == RECORDS_REFUSED) {
			/* Another process runs under this manager's id now: this one's leases are not its
			 * own any more, and the fence refuses its writes. It stops as at SIGTERM. */
			sb_error("manager id %s: %s; stopping", m->cfg.manager_id, err.msg);
			kill(getpid(), SIGTERM);
			return NULL;
		}
		if (rc < 0 && !failing)
			sb_warn("renewing the leases of manager %s: %s (its sessions may be taken over after %lu ms)",
				m->cfg.manager_id, err.msg, m->cfg.lease_ms);
		else if (rc >= 0 && failing)
			sb_info("renewing the leases of manager %s works again", m->cfg.manager_id);
		failing = rc < 0;
	}
	return NULL;
}

/* ---- the previous run of this state dir ----
 * A manager killed a moment ago left its registration with a fresh heartbeat, and a second
 * manager under the same id must be refused while it lives: the incarnation tells them apart.
 * Each run writes its incarnation into <state-dir>/manager.incarnation; the next run, holding the
 * state dir's lock (daemon.c state_lock: the earlier one is dead), removes the registration of
 * that incarnation before it registers. Only a process that held this state dir knows it. */
#define INCARNATION_FILE "manager.incarnation"

static int incarnation_file(struct manager *m, char *path, size_t len, struct sb_err *err)
{
	return path_fmt(path, len, err, "%s/" INCARNATION_FILE, m->cfg.state_dir);
}

/* The previous run's incarnation, or "" (none, or not 32 hex digits). */
static void incarnation_previous(struct manager *m, char out[33])
{
	char path[PATH_MAX + sizeof INCARNATION_FILE + 1];
	struct sb_err err;
	ssize_t n = -1;
	int fd;

	out[0] = '\0';
	if (incarnation_file(m, path, sizeof path, &err) < 0 || (fd = fd_private_open(path, &err)) < 0)
		return;
	n = pread(fd, out, 32, 0);
	close(fd);
	out[n == 32 ? 32 : 0] = '\0';
	if (strspn(out, "0123456789abcdef") != 32)
		out[0] = '\0';
}

static int incarnation_write(struct manager *m, struct sb_err *err)
{
	char path[PATH_MAX + sizeof INCARNATION_FILE + 1];
	int fd;

	if (incarnation_file(m, path, sizeof path, err) < 0 || (fd = fd_private_open(path, err)) < 0)
		return -1;
	if (ftruncate(fd, 0) < 0 || pwrite(fd, m->incarnation, 32, 0) != 32) {
		sb_fail_errno(err, "writing %s", path);
		close(fd);
		return -1;
	}
	close(fd);
	return 0;
}

int ownership_start(struct manager *m, struct sb_err *err)
{
	char previous[33];
	struct sb_err ignored;
	pthread_t t;
	int rc;

	if (sb_random_hex(m->incarnation, 16, err) < 0)
		return -1;
	incarnation_previous(m, previous);
	if (previous[0] != '\0')
		(void)records_manager_unregister(m->rec, m->cfg.manager_id, previous, &ignored);
	/* What "owned" answers give: clients on other hosts follow a tls:// address, not a socket. */
	rc = records_manager_register(m->rec, m->cfg.manager_id, m->incarnation,
				      m->cfg.advertise[0] ? m->cfg.advertise : m->cfg.socket, clock_real_ms(),
				      (int64_t)m->cfg.lease_ms, err);
	if (rc != RECORDS_FOUND || incarnation_write(m, err) < 0)
		return -1;
	/* From here on every write about a session names this manager as its owner. */
	records_set_fence(m->rec, m->cfg.manager_id);
	if (pthread_create(&t, NULL, renewer, m) != 0)
		return sb_fail(err, EAGAIN, "cannot start the lease renewal thread");
	pthread_detach(t);
	return 0;
}

void ownership_release(struct manager *m)
{
	struct sb_err err;

	if (m->incarnation[0] == '\0')
		return;
	if (records_manager_unregister(m->rec, m->cfg.manager_id, m->incarnation, &err) < 0)
		sb_warn("releasing the sessions of manager %s: %s (others take them over after %lu ms)",
			m->cfg.manager_id, err.msg, m->cfg.lease_ms);
}

int ownership_take(struct manager *m, const char *session, struct lease *out, struct sb_err *err)
{
	return records_lease_take(m->rec, session, m->cfg.manager_id, clock_real_ms(), (int64_t)m->cfg.lease_ms, out,
				  err);
}

/* The refusal that sends the client to the owner (control.h, kind "owned"): nothing was recorded
 * and nothing ran, so the client may send the request again, there or after the lease. */
json_t *ownership_refusal(const char *session, const struct lease *l)
{
	int64_t left = l->expires_ms - clock_real_ms();
	json_t *resp;

	if (left < 0)
		left = 0;
	resp = control_error("owned", "session %s is owned by manager %s (its control socket %s); send the request "
			     "there, or retry after its lease expires in %lld ms", session, l->owner,
			     l->address[0] ? l->address : "unknown", (long long)left);
	if (resp != NULL)
		json_object_update_new(json_object_get(resp, "error"),
				   json_pack("{s:s, s:s, s:I}", "owner", l->owner, "address", l->address,
					     "retry_after_ms", (json_int_t)left));
	return resp;
}

json_t *ownership_json(struct manager *m, const char *session)
{
	struct lease l;
	struct sb_err err;

	if (records_lease_get(m->rec, session, &l, &err) != RECORDS_FOUND || l.owner[0] == '\0')
		return json_null();
	return json_pack("{s:s, s:s, s:I}", "manager", l.owner, "address", l.address, "lease_expires_ms",
			 (json_int_t)l.expires_ms);
}
