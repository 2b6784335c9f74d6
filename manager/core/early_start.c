/* A session's sandbox started at its create (`serve --sandbox-start create`), so that its first
 * call finds it up, as its second does (docs/performance.md, "The sandbox started at the session's
 * create").
 *
 * What a start at create is, and what it is not:
 * - It is the start the first call would make, through the same sandbox_acquire, under the
 *   session's turn: taken here before the create answers (the session is new, so the turn is free),
 *   so the session's first call queues behind it and finds the sandbox up, or waits for the rest
 *   of its start; it never starts a second one.
 * - It gives the sandbox nothing its first call would not: the session exists, its workspace and
 *   grants are on record, and the sandbox is prepared from them exactly as at a call (a new
 *   generation, the workspace rechecked, the authority snapshot read then). A grant changed before
 *   the first call retires it at that call, as for any live sandbox (execpath.c sandbox_ready).
 * - It never takes anything from another session: at the identity's bound it does not retire an
 *   idle sandbox (sandbox.c identity_room), and at most EARLY_STARTS_MAX run at once on the
 *   manager; past either, the session's first call starts its sandbox, as without this setting.
 * - Its failure fails nothing: it is logged, nothing is recorded against the session, and the first
 *   call prepares a sandbox itself and answers with its own error if that fails too.
 * - The stop waits for it as for a request being answered (m->requests), then retires its sandbox
 *   with the others (stop.c); after the stop has begun none begins. */
#include "manager.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "agent_client.h"
#include "log.h"
#include "queue.h"
#include "thread.h"
#include "tls.h"

#define EARLY_CONNECT_MS 10000 /* as a call's connect (execpath.c CONNECT_MS) */
#define EARLY_STARTS_MAX 4 /* sandbox starts at once on the manager's 2+ cores; the rest start at their first call */

/* The sessions whose start runs now, under m->lock: "" is a free slot. One daemon per process, so
 * one table (as connections.c's count of connections). */
static char early_running[EARLY_STARTS_MAX][65];

/* Under m->lock: a slot for session, counted as a request the stop waits for; false when none is free
 * or the stop has begun. */
static bool early_admit(struct manager *m, const char *session)
{
	if (m->stop_phase != STOP_NONE)
		return false;
	for (int i = 0; i < EARLY_STARTS_MAX; i++)
		if (early_running[i][0] == '\0') {
			snprintf(early_running[i], sizeof early_running[i], "%s", session);
			m->requests++;
			return true;
		}
	return false;
}

static int early_slot(const char *session) /* under m->lock */
{
	for (int i = 0; i < EARLY_STARTS_MAX; i++)
		if (strcmp(early_running[i], session) == 0)
			return i;
	return -1;
}

bool early_start_holds(struct manager *m, const char *session)
{
	bool holds;

	pthread_mutex_lock(&m->lock);
	holds = early_slot(session) >= 0;
	pthread_mutex_unlock(&m->lock);
	return holds;
}

static void early_done(struct manager *m, const char *session)
{
	int i;

	queue_leave(m->queue, session);
	pthread_mutex_lock(&m->lock);
	i = early_slot(session);
	if (i >= 0)
		early_running[i][0] = '\0';
	m->requests--;
	pthread_mutex_unlock(&m->lock);
}

/* The call's connection made ahead too: the handshake (two ECDSA signatures and their checks) is
 * the largest part of a first call on a sandbox already up. The first call keeps it as it keeps
 * its predecessor's (execpath.c conn_get: made less than a minute before and nothing came on it,
 * else a Ping first); failing here leaves the sandbox up and the connection to the first call. */
static int early_connect(struct manager *m, struct live_sandbox *l, struct sb_err *err)
{
	struct agent_conn *conn;

	if (l->conn != NULL)
		return 0;
	if (agent_connect(l->tls, l->h.address, tls_deadline_after(EARLY_CONNECT_MS), &conn, err) < 0)
		return -1;
	pthread_mutex_lock(&m->lock);
	l->conn = conn; /* under the lock, as execpath.c conn_swap: a cancel reads it there */
	pthread_mutex_unlock(&m->lock);
	return 0;
}

struct early {
	struct manager *m;
	char session[65];
};

static void early_failed(const char *session, const char *why)
{
	sb_warn("session %s: its sandbox did not start at its create (%s); its first call starts one", session, why);
}

static void *early_thread(void *arg)
{
	struct early *e = arg;
	struct session_row s;
	struct live_sandbox *l;
	struct sb_err err;
	bool stopping;
	int rc;

	sb_err_clear(&err);
	pthread_mutex_lock(&e->m->lock);
	stopping = e->m->stop_phase != STOP_NONE;
	pthread_mutex_unlock(&e->m->lock);
	/* Read under the turn: a delete that came first (it waits for this turn) has not run yet. */
	rc = stopping ? RECORDS_NOT_FOUND : records_session_get(e->m->rec, e->session, &s, &err);
	if (rc < 0) {
		early_failed(e->session, err.msg);
	} else if (rc == RECORDS_FOUND && strcmp(s.state, "active") == 0) {
		if (sandbox_acquire(e->m, &s, ACQUIRE_FOR_CREATE, &l, &err) < 0)
			early_failed(e->session, err.msg);
		else if (early_connect(e->m, l, &err) < 0)
			sb_warn("session %s: its sandbox started at its create, and its agent's connection was not made "
				"(%s); its first call makes one", e->session, err.msg);
		else
			sb_info("session %s: its sandbox started at its create", e->session);
	}
	early_done(e->m, e->session);
	free(e);
	return NULL;
}

void early_start(struct manager *m, const char *session)
{
	struct early *e;
	struct sb_err err;
	bool admitted;

	if (!m->cfg.start_at_create)
		return;
	/* A new session's turn is free; if anything holds it already, that one goes first and the
	 * first call starts the sandbox. */
	if (!queue_try_enter(m->queue, session))
		return;
	pthread_mutex_lock(&m->lock);
	admitted = early_admit(m, session);
	pthread_mutex_unlock(&m->lock);
	if (!admitted) {
		queue_leave(m->queue, session);
		return;
	}
	e = calloc(1, sizeof *e);
	if (e == NULL) {
		early_failed(session, "out of memory");
		early_done(m, session);
		return;
	}
	e->m = m;
	snprintf(e->session, sizeof e->session, "%s", session);
	if (sb_thread_detached(early_thread, e, &err) < 0) {
		early_failed(session, err.msg);
		free(e);
		early_done(m, session);
	}
}
