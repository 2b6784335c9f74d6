/* Exec rows and their transitions (see records.h): accepted -> dispatched -> a final state, each
 * once, and the operators' resolutions of uncertain execs. Must never let an exec's state go
 * backwards, never dispatch one twice (invariant 7), and never store a whole output (the result is
 * bounded here, where every final record is written). */
#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "clock.h"
#include "records_internal.h"
#include "utf8.h"

static bool is_hex(const char *s)
{
	return *s && s[strspn(s, "0123456789abcdefABCDEF")] == '\0';
}

/* ---------------------------------------------------------------- execs */

/* The row sql (its ?1 the exec id) selects, at *st: RECORDS_FOUND, RECORDS_NOT_FOUND (err says
 * there is no such exec), or -1. */
static int exec_row_read(struct records *r, const char *sql, const char *exec_id, struct stmt **st,
			 struct sb_err *err)
{
	int rc = DB_OK;

	if (prepare(r, sql, st, err) != 0)
		return -1;
	bind_text(*st, 1, exec_id, &rc);
	rc = step(*st, rc);
	if (rc == DB_DONE) {
		sb_fail(err, 0, "records: no exec %s", exec_id);
		return RECORDS_NOT_FOUND;
	}
	if (rc != DB_ROW)
		return db_fail(r, err, "reading exec %s", exec_id);
	return RECORDS_FOUND;
}

static int exec_row_check(const struct exec_row *e, struct sb_err *err)
{
	if (check_field("exec id", e->id, sizeof e->id, true, err) != 0 ||
	    check_field("exec session", e->session, sizeof e->session, true, err) != 0 ||
	    check_field("exec state", e->state, sizeof e->state, false, err) != 0)
		return -1;
	/* A record starts accepted; dispatch and finish move it on, so nothing skips a step. */
	if (*e->state && strcmp(e->state, "accepted") != 0)
		return sb_invalid(err, "records: exec %s cannot start in state %s: a new exec is accepted", e->id,
				  e->state);
	return 0;
}

/* Insert an accepted exec. The dispatch fields (generation, nonce, sandbox) are set by
 * records_exec_dispatched(), not here. The command is kept up to its first NUL or the end of its
 * array, whichever comes first: the record's copy. */
int records_exec_insert(struct records *r, const struct exec_row *e, struct sb_err *err)
{
	struct records *locked cleanup_unlock = records_lock(r);
	struct stmt *st cleanup_stmt = NULL;
	int rc = DB_OK;

	if (exec_row_check(e, err) != 0 ||
	    prepare(r, "INSERT INTO execs (id, session, turn, state, command, timeout_seconds, accepted_ms)"
		       " SELECT ?1, ?2, ?3, 'accepted', ?4, ?5, ?6"
		       " WHERE (?7 IS NULL OR EXISTS (SELECT 1 FROM sessions s WHERE s.id = ?2 AND s.owner = ?7))",
		    &st, err) != 0)
		return -1;
	bind_text(st, 1, e->id, &rc);
	bind_text(st, 2, e->session, &rc);
	bind_int(st, 3, e->turn, &rc);
	bind_textn(st, 4, e->command, strnlen(e->command, sizeof e->command - 1), &rc);
	bind_int(st, 5, e->timeout_seconds, &rc);
	bind_int(st, 6, e->accepted_ms ? e->accepted_ms : clock_real_ms(), &rc);
	bind_text(st, 7, fence_me(r), &rc);
	if (step(st, rc) != DB_DONE)
		return db_fail(r, err, "inserting exec %s", e->id);
	if (db_changes(r) == 1)
		return 0;
	if (fence_refused(r, e->session, NULL, err) != 0)
		return -1;
	return sb_fail(err, 0, "records: inserting exec %s: no session %s", e->id, e->session);
}

/* The current state of an exec, to explain a refused transition. */
static int exec_state_of(struct records *r, const char *id, char state[16], struct sb_err *err)
{
	struct stmt *st cleanup_stmt = NULL;

	if (exec_row_read(r, "SELECT state FROM execs WHERE id = ?1", id, &st, err) != RECORDS_FOUND)
		return -1;
	copy_text(state, 16, col_text(st, 0));
	return 0;
}

/* accepted -> dispatched, once: the WHERE makes a second dispatch change nothing, and that is an
 * error, so an exec is never sent to an agent twice (invariant 7). With a fence, only while its
 * session is this manager's and at the generation it is dispatched to. */
int records_exec_egress_note(struct records *r, const char *exec_id, const char *result_json, struct sb_err *err)
{
	struct records *locked cleanup_unlock = records_lock(r);
	struct stmt *st cleanup_stmt = NULL;
	int rc = DB_OK;

	if (check_arg("exec id", exec_id, ID_MAX, err) != 0)
		return -1;
	if (strlen(result_json) > RECORDS_EGRESS_NOTE_MAX)
		return sb_invalid(err, "records: exec %s: an egress note of %zu bytes, over %u", exec_id,
				  strlen(result_json), RECORDS_EGRESS_NOTE_MAX);
	/* Only while it runs: its end's result replaces the note (records_exec_finish). */
	if (prepare(r, "UPDATE execs SET result_json = ?2 WHERE id = ?1 AND state = 'dispatched'", &st, err) != 0)
		return -1;
	bind_text(st, 1, exec_id, &rc);
	bind_text(st, 2, result_json, &rc);
	if (step(st, rc) != DB_DONE)
		return db_fail(r, err, "noting the egress of exec %s", exec_id);
	return 0;
}

int records_exec_dispatched(struct records *r, const char *exec_id, uint64_t generation, const char *nonce_hex,
			    const char *sandbox, const char *authority, struct sb_err *err)
{
	struct records *locked cleanup_unlock = records_lock(r);
	struct stmt *st cleanup_stmt = NULL;
	char state[16];
	int rc = DB_OK;

	if (check_arg("exec id", exec_id, ID_MAX, err) != 0 || check_arg("exec nonce", nonce_hex, 64, err) != 0 ||
	    check_arg("exec sandbox", sandbox, 255, err) != 0)
		return -1;
	if (!is_hex(nonce_hex) || generation > INT64_MAX)
		return sb_invalid(err, "records: exec %s: the nonce must be hex and the generation in range", exec_id);
	if (prepare(r, "UPDATE execs SET state = 'dispatched', generation = ?1, nonce_hex = ?2, sandbox = ?3,"
		       " dispatched_ms = ?4, authority = ?6 WHERE id = ?5 AND state = 'accepted'"
		       " AND (?7 IS NULL OR EXISTS (SELECT 1 FROM sessions s WHERE s.id = execs.session"
		       " AND s.owner = ?7 AND s.generation = ?1))", &st, err) != 0)
		return -1;
	bind_text(st, 6, authority, &rc);
	bind_int(st, 1, (int64_t)generation, &rc);
	bind_text(st, 2, nonce_hex, &rc);
	bind_text(st, 3, sandbox, &rc);
	bind_int(st, 4, clock_real_ms(), &rc);
	bind_text(st, 5, exec_id, &rc);
	bind_text(st, 7, fence_me(r), &rc);
	if (step(st, rc) != DB_DONE)
		return db_fail(r, err, "dispatching exec %s", exec_id);
	if (db_changes(r) == 1)
		return 0;
	if (fence_refused_exec(r, exec_id, &generation, err) != 0)
		return -1;
	if (exec_state_of(r, exec_id, state, err) != 0)
		return -1;
	return sb_fail(err, 0, "records: exec %s is not accepted (state %s): never dispatched twice", exec_id, state);
}

/* accepted|dispatched -> a final state, once. result_json and receipt_json are stored as given
 * (records_page parses them back, keeping text that is not JSON as a string). */
int records_exec_finish(struct records *r, const char *exec_id, const char *state, const char *result_json,
			const char *receipt_json, const char *reason, struct sb_err *err)
{
	struct records *locked cleanup_unlock = records_lock(r);
	struct stmt *st cleanup_stmt = NULL;
	char *stored cleanup_free = NULL;
	char current[16];
	int rc = DB_OK;

	if (check_arg("exec id", exec_id, ID_MAX, err) != 0 || check_arg("exec state", state, 15, err) != 0)
		return -1;
	/* Bounded here, where every final record is written, so no caller can store a whole output. */
	if (result_json && !(stored = result_for_record(result_json, receipt_json, r->output_limit)))
		return oom_fail(err, "bounding the result of an exec");
	if (!is_final_state(state))
		return sb_invalid(err, "records: exec %s cannot finish as %s: a final state is one of exited, "
				  "signaled, timed_out, cancelled, uncertain, refused", exec_id, state);
	if (prepare(r, "UPDATE execs SET state = ?1, result_json = ?2, receipt_json = ?3, reason = ?4,"
		       " finished_ms = ?5 WHERE id = ?6 AND state IN ('accepted', 'dispatched')"
		       " AND (?7 IS NULL OR EXISTS (SELECT 1 FROM sessions s WHERE s.id = execs.session AND s.owner = ?7))",
		    &st, err) != 0)
		return -1;
	bind_text(st, 1, state, &rc);
	bind_text(st, 2, stored, &rc);
	bind_text(st, 3, receipt_json, &rc);
	bind_text(st, 4, reason, &rc);
	bind_int(st, 5, clock_real_ms(), &rc);
	bind_text(st, 6, exec_id, &rc);
	bind_text(st, 7, fence_me(r), &rc);
	if (step(st, rc) != DB_DONE)
		return db_fail(r, err, "finishing exec %s as %s", exec_id, state);
	if (db_changes(r) == 1)
		return 0;
	if (fence_refused_exec(r, exec_id, NULL, err) != 0)
		return -1;
	if (exec_state_of(r, exec_id, current, err) != 0)
		return -1;
	return sb_fail(err, 0, "records: exec %s already finished (state %s): an exec finished once stays finished",
		       exec_id, current);
}

int records_exec_get(struct records *r, const char *exec_id, struct exec_row *out, struct sb_err *err)
{
	struct records *locked cleanup_unlock = records_lock(r);
	struct stmt *st cleanup_stmt = NULL;
	int rc;

	memset(out, 0, sizeof *out);
	if (check_arg("exec id", exec_id, ID_MAX, err) != 0)
		return -1;
	rc = exec_row_read(r, "SELECT id, session, turn, state, command, timeout_seconds, generation, nonce_hex,"
			   " sandbox, accepted_ms, dispatched_ms, finished_ms FROM execs WHERE id = ?1", exec_id, &st, err);
	if (rc != RECORDS_FOUND)
		return rc;
	/* Columns that are NULL before dispatch or finish read as 0 and "". */
	copy_text(out->id, sizeof out->id, col_text(st, 0));
	copy_text(out->session, sizeof out->session, col_text(st, 1));
	out->turn = col_int(st, 2);
	copy_text(out->state, sizeof out->state, col_text(st, 3));
	copy_text(out->command, sizeof out->command, col_text(st, 4));
	out->timeout_seconds = (uint32_t)col_int(st, 5);
	out->generation = (uint64_t)col_int(st, 6);
	copy_text(out->nonce_hex, sizeof out->nonce_hex, col_text(st, 7));
	copy_text(out->sandbox, sizeof out->sandbox, col_text(st, 8));
	out->accepted_ms = col_int(st, 9);
	out->dispatched_ms = col_int(st, 10);
	out->finished_ms = col_int(st, 11);
	return RECORDS_FOUND;
}

/* ---------------------------------------------------------------- operators' resolutions */

static bool is_outcome(const char *outcome)
{
	return strcmp(outcome, "ran") == 0 || strcmp(outcome, "not-ran") == 0 || strcmp(outcome, "unknown") == 0;
}

/* Why a resolution was not recorded: no exec (RECORDS_NOT_FOUND), or an exec that is not uncertain
 * or is resolved already (RECORDS_REFUSED). */
static int resolve_refusal(struct records *r, const char *exec_id, struct sb_err *err)
{
	struct stmt *st cleanup_stmt = NULL;
	int rc = exec_row_read(r, "SELECT e.state, x.outcome FROM execs e LEFT JOIN resolutions x ON x.exec_id = e.id"
			       " WHERE e.id = ?1", exec_id, &st, err);

	if (rc != RECORDS_FOUND)
		return rc;
	if (col_text(st, 1))
		sb_fail(err, 0, "exec %s is already resolved (%s): a resolution is final, the first one stays", exec_id,
			col_text(st, 1));
	else
		sb_fail(err, 0, "exec %s is %s, not uncertain: only an uncertain exec is resolved by an operator; its "
			"record is unchanged", exec_id, col_text(st, 0));
	return RECORDS_REFUSED;
}

/* One statement inserts the resolution only for an uncertain exec without one, so the check and
 * the write cannot be split by another writer; the exec's row itself is not written. */
int records_exec_resolve(struct records *r, const char *exec_id, struct exec_resolution *res, struct sb_err *err)
{
	struct records *locked cleanup_unlock = records_lock(r);
	struct stmt *st cleanup_stmt = NULL;
	int rc = DB_OK;

	if (check_arg("exec id", exec_id, ID_MAX, err) != 0 || check_arg("outcome", res->outcome, 16, err) != 0)
		return -1;
	if (!is_outcome(res->outcome))
		return sb_invalid(err, "records: the outcome must be ran, not-ran or unknown, not '%s'", res->outcome);
	if (!res->note || !*res->note || strnlen(res->note, RECORDS_NOTE_MAX + 1) > RECORDS_NOTE_MAX ||
	    !utf8_valid_str(res->note))
		return sb_invalid(err, "records: the note must be 1 to %u bytes of UTF-8 text", RECORDS_NOTE_MAX);
	if (res->by_name && (strnlen(res->by_name, 257) > 256 || !utf8_valid_str(res->by_name)))
		return sb_invalid(err, "records: the resolver's name must be at most 256 bytes of UTF-8 text");
	res->at_ms = clock_real_ms();
	if (prepare(r, "INSERT INTO resolutions (exec_id, outcome, note, by_uid, by_name, at_ms)"
		       " SELECT id, ?2, ?3, ?4, ?5, ?6 FROM execs WHERE id = ?1 AND state = 'uncertain'"
		       " ON CONFLICT (exec_id) DO NOTHING", &st, err) != 0)
		return -1;
	bind_text(st, 1, exec_id, &rc);
	bind_text(st, 2, res->outcome, &rc);
	bind_text(st, 3, res->note, &rc);
	bind_int(st, 4, res->by_uid, &rc);
	bind_text(st, 5, res->by_name, &rc);
	bind_int(st, 6, res->at_ms, &rc);
	if (step(st, rc) != DB_DONE)
		return db_fail(r, err, "resolving exec %s", exec_id);
	if (db_changes(r) == 1)
		return RECORDS_FOUND;
	return resolve_refusal(r, exec_id, err);
}
json_t *records_exec_ids_in_state(struct records *r, const char *session, const char *state, struct sb_err *err)
{
	struct records *locked cleanup_unlock = records_lock(r);
	struct stmt *st cleanup_stmt = NULL;
	int rc = DB_OK;

	if (check_arg("exec state", state, 15, err) != 0 ||
	    (session != NULL && check_arg("session id", session, ID_MAX, err) != 0) ||
	    prepare(r, "SELECT id FROM execs WHERE state = ?1 AND (?2 IS NULL OR session = ?2)"
		       " ORDER BY accepted_ms, rowid", &st, err) != 0)
		return NULL;
	bind_text(st, 1, state, &rc);
	bind_text(st, 2, session, &rc);
	return rows_json(r, st, rc, id_json, "listing execs by state", err);
}

json_t *records_sessions_in_flight(struct records *r, struct sb_err *err)
{
	struct records *locked cleanup_unlock = records_lock(r);
	struct stmt *st cleanup_stmt = NULL;

	if (prepare(r, "SELECT session FROM execs WHERE state IN ('accepted', 'dispatched')"
		       " UNION SELECT session FROM sandboxes WHERE state <> 'gone' ORDER BY 1", &st, err) != 0)
		return NULL;
	return rows_json(r, st, DB_OK, id_json, "listing the sessions with something in flight", err);
}
