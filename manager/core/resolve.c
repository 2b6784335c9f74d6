/* `resolve`: an operator's word on an exec recorded `uncertain` (records.h exec_resolution), kept
 * beside the exec with who said it (the control connection's peer) and when. It must never run
 * anything again (invariant 7): it only records what a person found. The one change of state it
 * makes: an exec a start's recovery could not settle (recovery.c recovery_reserve, its session
 * reserved) is recorded uncertain first, as recovery would have, so the session can serve again. */
#include "manager.h"

#include <errno.h>
#include <pwd.h>
#include <stdlib.h>
#include <string.h>

#include "call.h"
#include "control.h"
#include "log.h"

/* The peer's login name for the record, or NULL when it has none (a uid without a passwd entry,
 * or an entry too large for buf): the uid is recorded either way. */
static const char *login_name(uid_t uid, char *buf, size_t len)
{
	struct passwd pw, *found = NULL;

	if (getpwuid_r(uid, &pw, buf, len, &found) != 0 || found == NULL)
		return NULL;
	return found->pw_name;
}

/* With the session's turn held: exec_id, left in flight by a recovery that could not settle it
 * (note), recorded uncertain with recovery's reason. -1 (err) when that cannot be recorded. */
static int settle_left(struct manager *m, const char *exec_id, const struct unsettled_note *note, struct sb_err *err)
{
	struct call *c = calloc(1, sizeof *c);
	json_t *result;
	int rc;

	if (c == NULL)
		return sb_fail(err, ENOMEM, "settling exec %s", exec_id);
	snprintf(c->exec_id, sizeof c->exec_id, "%s", exec_id);
	snprintf(c->session, sizeof c->session, "%s", note->session);
	snprintf(c->reason, sizeof c->reason, "the manager stopped while it was in flight, and the next start's "
		 "recovery could not settle it (%.600s): recorded uncertain by an operator's resolve", note->reason);
	result = call_refused_result(c, "uncertain", c->reason);
	rc = call_record_end(m, c, "uncertain", result, err);
	json_decref(result);
	free(c);
	if (rc == 0)
		sb_info("exec %s (session %s): recorded uncertain by resolve: %s", exec_id, note->session, note->reason);
	return rc;
}

/* Whether exec_id's session is one recovery could not settle (note filled); in_flight: whether
 * exec_id itself is still accepted or dispatched. */
static bool session_unsettled(struct manager *m, const char *exec_id, struct unsettled_note *note, bool *in_flight)
{
	struct exec_row *e = malloc(sizeof *e);
	struct sb_err ignored;
	bool noted = e != NULL && records_exec_get(m->rec, exec_id, e, &ignored) == RECORDS_FOUND &&
		     recovery_unsettled_get(m, e->session, note);

	*in_flight = noted && (strcmp(e->state, "accepted") == 0 || strcmp(e->state, "dispatched") == 0);
	free(e);
	return noted;
}

/* The resolve itself, with what recovery left settled first; released: whether the session serves
 * again (-1: not a session recovery left reserved). Any resolve on such a session looks again at
 * what holds it: one whose exec was recorded uncertain by an earlier resolve that was then refused
 * (an invalid note) is released by the next. */
static int resolve_exec(struct manager *m, const char *exec_id, struct exec_resolution *res, int *released,
			struct sb_err *err)
{
	struct unsettled_note note;
	bool in_flight;
	int rc;

	*released = -1;
	if (!session_unsettled(m, exec_id, &note, &in_flight))
		return records_exec_resolve(m->rec, exec_id, res, err);
	queue_enter(m->queue, note.session);
	/* One another resolve settled meanwhile is resolved as it stands (or refused as resolved). */
	if (in_flight && settle_left(m, exec_id, &note, err) < 0 && session_unsettled(m, exec_id, &note, &in_flight) &&
	    in_flight) {
		queue_leave(m->queue, note.session);
		return -1;
	}
	rc = records_exec_resolve(m->rec, exec_id, res, err);
	if (rc == RECORDS_FOUND) {
		struct sb_err why;

		*released = recovery_unsettled_done(m, note.session, &why);
		if (*released < 0)
			sb_warn("session %s: after resolving exec %s: %s; it stays reserved (a restart retries)", note.session,
				exec_id, why.msg);
	}
	queue_leave(m->queue, note.session);
	return rc;
}

json_t *resolve_answer(struct manager *m, json_t *req, uid_t peer)
{
	const char *exec_id = json_string_value(json_object_get(req, "exec"));
	struct exec_resolution res = {
		.outcome = json_string_value(json_object_get(req, "outcome")),
		.note = json_string_value(json_object_get(req, "note")),
		.by_uid = (uint32_t)peer,
	};
	char pwbuf[4096];
	struct sb_err err;
	int rc, released;

	if (exec_id == NULL || res.outcome == NULL || res.note == NULL)
		return control_error("invalid", "resolve needs an exec, an outcome (ran, not-ran or unknown) and a note");
	res.by_name = login_name(peer, pwbuf, sizeof pwbuf);
	sb_err_clear(&err);
	rc = resolve_exec(m, exec_id, &res, &released, &err);
	if (rc == RECORDS_NOT_FOUND)
		return control_error_from("not_found", &err);
	if (rc == RECORDS_REFUSED)
		return control_error_from("refused", &err);
	if (rc < 0)
		return control_error_from(err.errnum == EINVAL ? "invalid" : "internal", &err);
	sb_info("exec %s resolved by uid %u: %s (its state stays uncertain)", exec_id, (unsigned)peer, res.outcome);
	/* "session_serves" only for an exec recovery had left in flight: whether its session serves
	 * again (false: another exec or its sandbox still holds it; status says which). */
	return json_pack("{s:b, s:s, s:s, s:{s:s, s:s, s:I, s:s?, s:I}, s:o?}", "ok", 1, "exec_id", exec_id, "state",
			 "uncertain", "resolution", "outcome", res.outcome, "note", res.note, "by_uid",
			 (json_int_t)res.by_uid, "by_name", res.by_name, "at_ms", (json_int_t)res.at_ms, "session_serves",
			 released < 0 ? NULL : json_boolean(released == 1));
}
