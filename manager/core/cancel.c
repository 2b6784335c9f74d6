/* The one cancel of a running call, whoever asks for it: a client (cancel_call), a revocation
 * (sessions.c authority_changed) or the stop (cancel_stop_calls). It sets the reason and stops the
 * sandbox, and never records anything itself: the call's own thread (execpath.c) finds its exec
 * lost, gets the sandbox's evidence and records it `cancelled`, or `uncertain` without evidence. A
 * client's tagged cancel that comes before its call runs is kept for that call, one that comes
 * after it ended hears which exec it was (below). */
#include "manager.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "clock.h"
#include "control.h"
#include "log.h"

/* A cancel answers only once the call's record is final: the call's own thread gets the sandbox's
 * evidence (sandbox_retire, bounded) and records it `cancelled`, or `uncertain` when the end is
 * not proven (the workspace then stays reserved). The wait is bounded above that. */
#define CANCEL_WAIT_MS 30000

static json_t *cancel_outcome(struct manager *m, const char *exec_id)
{
	int64_t deadline = tls_deadline_after(CANCEL_WAIT_MS);
	struct exec_row *row = malloc(sizeof *row);
	struct sb_err err;
	json_t *out;

	if (row == NULL)
		return control_error("unavailable", "out of memory waiting for exec %s", exec_id);
	for (;;) {
		if (records_exec_get(m->rec, exec_id, row, &err) != 0) {
			out = control_error_from("unavailable", &err);
			break;
		}
		if (strcmp(row->state, "cancelled") == 0) {
			out = json_pack("{s:b, s:s, s:s}", "ok", 1, "cancelled", exec_id, "state", row->state);
			break;
		}
		if (strcmp(row->state, "accepted") != 0 && strcmp(row->state, "dispatched") != 0) {
			out = control_error(strcmp(row->state, "uncertain") == 0 ? "uncertain" : "finished",
					    "exec %s ended %s: %s", exec_id, row->state,
					    strcmp(row->state, "uncertain") == 0 ?
					    "the sandbox's end is not proven; the workspace stays reserved (session show)" :
					    "it finished before the cancel stopped it");
			break;
		}
		if (tls_deadline_after(0) >= deadline) {
			out = control_error("uncertain", "exec %s: no outcome within %d ms of the cancel", exec_id,
					    CANCEL_WAIT_MS);
			break;
		}
		usleep(50 * 1000);
	}
	free(row);
	return out;
}

/* The one cancel, a client's, a revocation's or the stop's: with m->lock held and the sandbox busy, the reason is
 * set and the sandbox stopped (sandbox_interrupt). The call's own thread then finds the exec lost,
 * gets the sandbox's evidence and records it `cancelled` (or `uncertain` without evidence). */
static int cancel_locked(struct manager *m, struct live_sandbox *l, const char *reason, struct sb_err *err)
{
	snprintf(l->cancel_reason, sizeof l->cancel_reason, "%s", reason);
	/* The call's thread is asking the runtime for evidence on this handle (execpath.c
	 * call_sandbox_proven_gone); evidence that proves the end releases the handle's resources (the
	 * process backend closes its pidfd), so a stop on the same handle now could signal through a
	 * closed, even reused, descriptor. The prober stops it as soon as its probe returns. */
	if (l->probing) {
		l->stop_deferred = true;
		return 0;
	}
	return sandbox_interrupt(m, l, err);
}

/* ---- cancels that come before their call runs, and after it ended ----
 *
 * A client sends a tagged cancel once; Claude Code exits about 250 ms after it. A call still in
 * flight, waiting for its session's turn behind another, or starting its sandbox would then run
 * after all: so the cancel is kept, under m->lock, and the call takes it when it is recorded after
 * its turn (execpath.c call_steps) or when its sandbox is marked busy (sandbox_mark, in the same hold
 * the running tag is set, so a cancel either finds the call running or is found by it). A taken
 * entry stays, with the call's exec id, so that the client's repeated cancel hears which exec it
 * cancelled (until the room is needed).
 *
 * A cancel can also cross its call's answer: the call ended, the client had not heard yet. Kept,
 * it waited for a call that never comes (issue 27: 64 of them refused every session's cancels for
 * twelve minutes). So each tagged call's end is noted the same way, with its exec id (call_steps,
 * cancel_call_ended): the late cancel hears that exec, ended, and nothing waits; a late cancel
 * that came between the sandbox's release and the note is taken by the note.
 *
 * Bounds: CANCEL_PENDING_MAX entries in all, of which CANCEL_PENDING_PER_SESSION waiting per
 * session (a cancel beyond either is refused, unavailable: the client hears it, nothing is dropped
 * that a client was told waits). A note (taken or ended) only answers a repeated or late cancel: the
 * oldest makes room first. A waiting entry is kept PENDING_MARGIN_S beyond the longest call the
 * configuration allows: the time the call ahead of it in the session's turn may take at the most. */
#define PENDING_MARGIN_S 120

static struct cancel_pending *pending_find(struct manager *m, const char *session, const char *tag, int64_t now)
{
	for (size_t i = 0; i < CANCEL_PENDING_MAX; i++) {
		struct cancel_pending *p = &m->pending[i];

		if (p->until_ms > now && strcmp(p->session, session) == 0 && strcmp(p->tag, tag) == 0)
			return p;
	}
	return NULL;
}

/* A slot for a new entry: a free one, else the oldest note; never one that waits. NULL: none. */
static struct cancel_pending *pending_room(struct manager *m, int64_t now)
{
	struct cancel_pending *oldest = NULL;

	for (size_t i = 0; i < CANCEL_PENDING_MAX; i++) {
		struct cancel_pending *p = &m->pending[i];

		if (p->until_ms <= now)
			return p;
		if (p->exec_id[0] != '\0' && (oldest == NULL || p->since_ms < oldest->since_ms))
			oldest = p;
	}
	return oldest;
}

static unsigned pending_waiting(const struct manager *m, const char *session, int64_t now)
{
	unsigned n = 0;

	for (size_t i = 0; i < CANCEL_PENDING_MAX; i++)
		if (m->pending[i].until_ms > now && m->pending[i].exec_id[0] == '\0' &&
		    strcmp(m->pending[i].session, session) == 0)
			n++;
	return n;
}

static void pending_set(struct cancel_pending *p, const char *session, const char *tag, const char *exec_id,
			int64_t now, int64_t until)
{
	snprintf(p->session, sizeof p->session, "%s", session);
	snprintf(p->tag, sizeof p->tag, "%s", tag);
	snprintf(p->exec_id, sizeof p->exec_id, "%s", exec_id);
	p->since_ms = now;
	p->until_ms = until;
}

static int64_t pending_until(const struct manager *m, int64_t now)
{
	return now + ((int64_t)m->cfg.max_timeout + PENDING_MARGIN_S) * 1000;
}

/* 1: it waits for its call; 0: its call took it already, or ended (exec_id); -1: no room. */
static int pending_keep(struct manager *m, const char *session, const char *tag, char *exec_id, size_t len,
			struct sb_err *err)
{
	int64_t now = clock_mono_ms();
	struct cancel_pending *p = pending_find(m, session, tag, now);

	if (p != NULL && p->exec_id[0] != '\0') {
		snprintf(exec_id, len, "%s", p->exec_id);
		return 0;
	}
	if (p != NULL)
		return 1; /* repeated: still the one waiting */
	if (pending_waiting(m, session, now) >= CANCEL_PENDING_PER_SESSION)
		return sb_refuse(err, EAGAIN, "session %s has %d cancels waiting for their calls; try again", session,
			       CANCEL_PENDING_PER_SESSION);
	p = pending_room(m, now);
	if (p == NULL)
		return sb_refuse(err, EAGAIN, "%d cancels already wait for their calls; try again", CANCEL_PENDING_MAX);
	pending_set(p, session, tag, "", now, pending_until(m, now));
	return 1;
}

void cancel_call_ended(struct manager *m, const char *session, const char *tag, const char *exec_id)
{
	int64_t now = clock_mono_ms();
	struct cancel_pending *p;

	if (tag[0] == '\0')
		return;
	pthread_mutex_lock(&m->lock);
	p = pending_find(m, session, tag, now);
	if (p == NULL)
		p = pending_room(m, now);
	/* No room: every entry waits; the note is only an answer, so it is the one left out. */
	if (p != NULL)
		pending_set(p, session, tag, exec_id, now, pending_until(m, now));
	pthread_mutex_unlock(&m->lock);
}

bool cancel_pending_take(struct manager *m, const char *session, const char *tag, const char *exec_id)
{
	struct cancel_pending *p;

	if (tag[0] == '\0')
		return false;
	p = pending_find(m, session, tag, clock_mono_ms());
	if (p == NULL || p->exec_id[0] != '\0')
		return false;
	snprintf(p->exec_id, sizeof p->exec_id, "%s", exec_id);
	sb_info("session %s: exec %s (tag %s) is cancelled before it ran: the cancel came first", session, exec_id, tag);
	return true;
}

int cancel_session_call(struct manager *m, const char *session, const char *tag, const char *reason, char *exec_id,
			size_t len, struct sb_err *err)
{
	struct live_sandbox *l;
	int rc = 0;

	pthread_mutex_lock(&m->lock);
	for (l = m->live; l != NULL && strcmp(l->session, session) != 0; l = l->next) {
	}
	/* With a tag, only the call that carries it: another client's call is left alone. */
	if (l != NULL && l->busy && (tag == NULL || strcmp(tag, l->running_tag) == 0)) {
		snprintf(exec_id, len, "%s", l->running_exec);
		rc = cancel_locked(m, l, reason, err) < 0 ? -1 : 1;
	} else if (tag != NULL) {
		rc = pending_keep(m, session, tag, exec_id, len, err);
		rc = rc < 0 ? -1 : rc == 0 ? 1 : 2;
	}
	pthread_mutex_unlock(&m->lock);
	return rc;
}

/* Cancel the session's running call; the answer waits for its final record. */
json_t *cancel_call(struct manager *m, const char *session, const char *tag)
{
	struct session_row s;
	struct sb_err err;
	char exec_id[65];
	int rc = records_session_get(m->rec, session, &s, &err);

	if (tag != NULL && (tag[0] == '\0' || strlen(tag) > 64))
		return control_error("invalid", "tag must be 1-64 characters of [A-Za-z0-9._:-]");
	/* Nothing to cancel is an answer only for a session that exists. */
	if (rc < 0)
		return control_error_from(err.errnum == EINVAL ? "invalid" : "internal", &err);
	if (rc == RECORDS_NOT_FOUND || strcmp(s.state, "deleted") == 0)
		return control_error("not_found", "no session '%s'", session);
	rc = cancel_session_call(m, session, tag, "cancelled by request", exec_id, sizeof exec_id, &err);
	if (rc == 0)
		return json_pack("{s:b, s:n}", "ok", 1, "cancelled");
	if (rc == 2)
		return json_pack("{s:b, s:n, s:b}", "ok", 1, "cancelled", "pending", 1);
	if (rc < 0)
		return control_error_from("unavailable", &err);
	return cancel_outcome(m, exec_id);
}

unsigned cancel_stop_calls(struct manager *m, const char *reason)
{
	struct live_sandbox *l;
	struct sb_err err;
	unsigned n = 0;

	pthread_mutex_lock(&m->lock);
	/* The phase changes in the same hold as the scan: a call marks its sandbox busy under this lock
	 * before it reads the phase (call_attempt), so each call is seen busy here or refuses there. */
	m->stop_phase = STOP_CANCELLING;
	for (l = m->live; l != NULL; l = l->next) {
		if (!l->busy)
			continue;
		n++;
		if (l->cancel_reason[0] != '\0')
			continue; /* already cancelled (a client's cancel, a revocation): its reason stays */
		sb_info("session %s: cancelling exec %s: %s", l->session, l->running_exec, reason);
		if (cancel_locked(m, l, reason, &err) < 0)
			sb_warn("session %s: stopping sandbox %s for the cancel: %s; its evidence decides", l->session,
				l->h.runtime_id, err.msg);
	}
	pthread_mutex_unlock(&m->lock);
	return n;
}
