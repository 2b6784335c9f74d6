/* Sandbox rows (see records.h): one per session, its generation and state. Must never replace a
 * row that may still stand for a running runtime, never call a sandbox gone without evidence, and
 * never let a gone sandbox come back. */
#include <errno.h>
#include <stdint.h>
#include <string.h>

#include "clock.h"
#include "records_internal.h"

/* ---------------------------------------------------------------- sandboxes */

static int sandbox_row_check(const struct sandbox_row *s, struct sb_err *err)
{
	if (check_field("sandbox session", s->session, sizeof s->session, true, err) != 0 ||
	    check_field("sandbox backend", s->backend, sizeof s->backend, true, err) != 0 ||
	    check_field("sandbox runtime id", s->runtime_id, sizeof s->runtime_id, false, err) != 0 ||
	    check_field("sandbox address", s->address, sizeof s->address, false, err) != 0 ||
	    check_field("sandbox private directory", s->private_dir, sizeof s->private_dir, false, err) != 0 ||
	    check_field("sandbox state", s->state, sizeof s->state, true, err) != 0 ||
	    check_field("sandbox grants", s->grants_json, sizeof s->grants_json, false, err) != 0)
		return -1;
	if (s->generation > INT64_MAX)
		return sb_invalid(err, "records: sandbox generation of session %s is out of range", s->session);
	/* "gone" needs evidence, which only records_sandbox_set_state() takes. */
	if (strcmp(s->state, "gone") == 0)
		return sb_invalid(err, "records: sandbox of session %s: record it gone with its evidence, not by upsert",
				  s->session);
	return 0;
}

/* Current generation and state of a session's sandbox row. */
static int sandbox_current(struct records *r, const char *session, int64_t *generation, char state[32],
			   struct sb_err *err)
{
	struct stmt *st cleanup_stmt = NULL;
	int rc = DB_OK;

	if (prepare(r, "SELECT generation, state FROM sandboxes WHERE session = ?1", &st, err) != 0)
		return -1;
	bind_text(st, 1, session, &rc);
	rc = step(st, rc);
	if (rc == DB_DONE)
		return RECORDS_NOT_FOUND;
	if (rc != DB_ROW)
		return db_fail(r, err, "reading the sandbox of session %s", session);
	*generation = col_int(st, 0);
	copy_text(state, 32, col_text(st, 1));
	return RECORDS_FOUND;
}

/* Why an upsert changed nothing: the row it would replace is live, or is not older. */
static int sandbox_upsert_refusal(struct records *r, const struct sandbox_row *s, struct sb_err *err)
{
	char state[32];
	int64_t generation;
	int found = sandbox_current(r, s->session, &generation, state, err);

	if (found != RECORDS_FOUND)
		return found < 0 ? -1 : sb_fail(err, 0, "records: sandbox of session %s vanished during upsert", s->session);
	return sb_fail(err, 0, "records: session %s has sandbox generation %lld (%s): generation %llu may replace it "
		       "only once it is gone, with evidence, and only with a newer generation",
		       s->session, (long long)generation, state, (unsigned long long)s->generation);
}

/* Insert the session's sandbox, update it within its generation, or replace a gone one with a newer
 * generation. Replacing a live or unproven sandbox would lose the only record of a runtime that may
 * still be running, so that is refused (the DO UPDATE's WHERE). With a fence, the SELECT's WHERE
 * writes nothing unless the session is this manager's at that generation. */
int records_sandbox_upsert(struct records *r, const struct sandbox_row *s, struct sb_err *err)
{
	struct records *locked cleanup_unlock = records_lock(r);
	struct stmt *st cleanup_stmt = NULL;
	int rc = DB_OK;

	if (sandbox_row_check(s, err) != 0 ||
	    prepare(r, "INSERT INTO sandboxes (session, generation, backend, runtime_id, address, private_dir,"
		       " state, grants_json, started_ms, evidence) SELECT ?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, NULL"
		       " WHERE (?10 IS NULL OR EXISTS (SELECT 1 FROM sessions s WHERE s.id = ?1 AND s.owner = ?10"
		       " AND s.generation = ?2))"
		       " ON CONFLICT (session) DO UPDATE SET generation = excluded.generation,"
		       " backend = excluded.backend, runtime_id = excluded.runtime_id, address = excluded.address,"
		       " private_dir = excluded.private_dir, state = excluded.state,"
		       " grants_json = excluded.grants_json, started_ms = excluded.started_ms, evidence = NULL"
		       " WHERE (sandboxes.generation = excluded.generation AND sandboxes.state <> 'gone')"
		       " OR (sandboxes.state = 'gone' AND excluded.generation > sandboxes.generation)", &st, err) != 0)
		return -1;
	bind_text(st, 1, s->session, &rc);
	bind_int(st, 2, (int64_t)s->generation, &rc);
	bind_text(st, 3, s->backend, &rc);
	bind_text(st, 4, s->runtime_id, &rc);
	bind_text(st, 5, s->address, &rc);
	bind_text(st, 6, s->private_dir, &rc);
	bind_text(st, 7, s->state, &rc);
	bind_text(st, 8, *s->grants_json ? s->grants_json : "{}", &rc);
	bind_int(st, 9, s->started_ms ? s->started_ms : clock_real_ms(), &rc);
	bind_text(st, 10, fence_me(r), &rc);
	if (step(st, rc) != DB_DONE)
		return db_fail(r, err, "recording the sandbox of session %s", s->session);
	if (db_changes(r) != 0)
		return 0;
	if (fence_refused(r, s->session, &s->generation, err) != 0)
		return -1;
	return sandbox_upsert_refusal(r, s, err);
	return 0;
}

int records_sandbox_get(struct records *r, const char *session, struct sandbox_row *out, struct sb_err *err)
{
	struct records *locked cleanup_unlock = records_lock(r);
	struct stmt *st cleanup_stmt = NULL;
	int rc = DB_OK;

	memset(out, 0, sizeof *out);
	if (check_arg("session id", session, ID_MAX, err) != 0 ||
	    prepare(r, "SELECT session, generation, backend, runtime_id, address, private_dir, state, grants_json,"
		       " started_ms, evidence FROM sandboxes WHERE session = ?1", &st, err) != 0)
		return -1;
	bind_text(st, 1, session, &rc);
	rc = step(st, rc);
	if (rc == DB_DONE) {
		sb_fail(err, 0, "records: no sandbox for session %s", session);
		return RECORDS_NOT_FOUND;
	}
	if (rc != DB_ROW)
		return db_fail(r, err, "reading the sandbox of session %s", session);
	copy_text(out->session, sizeof out->session, col_text(st, 0));
	out->generation = (uint64_t)col_int(st, 1);
	copy_text(out->backend, sizeof out->backend, col_text(st, 2));
	copy_text(out->runtime_id, sizeof out->runtime_id, col_text(st, 3));
	copy_text(out->address, sizeof out->address, col_text(st, 4));
	copy_text(out->private_dir, sizeof out->private_dir, col_text(st, 5));
	copy_text(out->state, sizeof out->state, col_text(st, 6));
	copy_text(out->grants_json, sizeof out->grants_json, col_text(st, 7));
	out->started_ms = col_int(st, 8);
	copy_text(out->evidence, sizeof out->evidence, col_text(st, 9));
	return RECORDS_FOUND;
}

/* Why a state change matched no row: no sandbox, another generation, or already gone. */
static int sandbox_state_refusal(struct records *r, const char *session, uint64_t generation, struct sb_err *err)
{
	char state[32];
	int64_t current;
	int found = sandbox_current(r, session, &current, state, err);

	if (found < 0)
		return -1;
	if (found == RECORDS_NOT_FOUND)
		return sb_fail(err, 0, "records: no sandbox for session %s", session);
	if ((uint64_t)current != generation)
		return sb_fail(err, 0, "records: sandbox of session %s is generation %lld, not %llu: refusing a stale "
			       "state change", session, (long long)current, (unsigned long long)generation);
	return sb_fail(err, 0, "records: sandbox generation %llu of session %s is already gone: a gone sandbox "
		       "stays gone", (unsigned long long)generation, session);
}

/* Only the row of that generation changes, and a gone sandbox stays gone; "gone" needs evidence. */
int records_sandbox_set_state(struct records *r, const char *session, uint64_t generation, const char *state,
			      const char *evidence, struct sb_err *err)
{
	struct records *locked cleanup_unlock = records_lock(r);
	struct stmt *st cleanup_stmt = NULL;
	int rc = DB_OK;

	if (check_arg("session id", session, ID_MAX, err) != 0 || check_arg("sandbox state", state, 31, err) != 0)
		return -1;
	if (strcmp(state, "gone") == 0 && (!evidence || !*evidence))
		return sb_invalid(err, "records: sandbox of session %s cannot be recorded gone without evidence "
				  "that all of its processes have ended", session);
	if (generation > INT64_MAX)
		return sb_invalid(err, "records: sandbox generation %llu is out of range",
				  (unsigned long long)generation);
	if (prepare(r, "UPDATE sandboxes SET state = ?1, evidence = coalesce(?2, evidence)"
		       " WHERE session = ?3 AND generation = ?4 AND state <> 'gone'"
		       " AND (?5 IS NULL OR EXISTS (SELECT 1 FROM sessions s WHERE s.id = ?3 AND s.owner = ?5))", &st,
		       err) != 0)
		return -1;
	bind_text(st, 1, state, &rc);
	bind_text(st, 2, evidence, &rc);
	bind_text(st, 3, session, &rc);
	bind_int(st, 4, (int64_t)generation, &rc);
	bind_text(st, 5, fence_me(r), &rc);
	if (step(st, rc) != DB_DONE)
		return db_fail(r, err, "setting the sandbox of session %s to %s", session, state);
	if (db_changes(r) != 0)
		return 0;
	if (fence_refused(r, session, NULL, err) != 0)
		return -1;
	return sandbox_state_refusal(r, session, generation, err);
}

/* {"session", "generation", "backend", "runtime_id", "address", "private_dir", "state",
 *  "grants": <the snapshot parsed>, "started_ms", "evidence": <text or null>} */
static json_t *sandbox_json(struct stmt *st)
{
	static const char *const keys[] = { "session", "generation", "backend", "runtime_id", "address",
					    "private_dir", "state", "grants", "started_ms", "evidence" };
	json_t *values[] = { col_json_text(st, 0), col_json_int(st, 1), col_json_text(st, 2), col_json_text(st, 3),
			     col_json_text(st, 4), col_json_text(st, 5), col_json_text(st, 6), col_json_parsed(st, 7),
			     col_json_int(st, 8), col_json_text(st, 9) };

	return json_row(keys, values, sizeof values / sizeof values[0]);
}

json_t *records_sandboxes_not_gone(struct records *r, struct sb_err *err)
{
	struct records *locked cleanup_unlock = records_lock(r);
	struct stmt *st cleanup_stmt = NULL;

	if (prepare(r, "SELECT session, generation, backend, runtime_id, address, private_dir, state, grants_json,"
		       " started_ms, evidence FROM sandboxes WHERE state <> 'gone' ORDER BY session", &st, err) != 0)
		return NULL;
	return rows_json(r, st, DB_OK, sandbox_json, "listing sandboxes not gone", err);
}
