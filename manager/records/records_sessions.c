/* Session and grant rows (see records.h), and the page of sessions. Must never release a reserved
 * session while one of its sandboxes is unproven gone, and never serve a page that grows with the
 * number of sessions. */
#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "clock.h"
#include "records_internal.h"
#include "utf8.h"

/* ---------------------------------------------------------------- sessions */

static int session_row_check(const struct session_row *s, struct sb_err *err)
{
	if (check_field("session id", s->id, sizeof s->id, true, err) != 0 ||
	    check_field("session identity", s->identity, sizeof s->identity, true, err) != 0 ||
	    check_field("session repository", s->repo, sizeof s->repo, false, err) != 0 ||
	    check_field("session worktree", s->worktree, sizeof s->worktree, false, err) != 0 ||
	    check_field("session branch", s->branch, sizeof s->branch, false, err) != 0 ||
	    check_field("session state", s->state, sizeof s->state, false, err) != 0 ||
	    check_field("session owner", s->owner, sizeof s->owner, false, err) != 0 ||
	    check_field("session network", s->network, sizeof s->network, false, err) != 0 ||
	    check_field("session egress allow-list", s->egress_allow, sizeof s->egress_allow, false, err) != 0)
		return -1;
	if (s->generation > INT64_MAX)
		return sb_invalid(err, "records: session %s generation is out of range", s->id);
	return 0;
}

int records_session_insert(struct records *r, const struct session_row *s, struct sb_err *err)
{
	struct records *locked cleanup_unlock = records_lock(r);
	struct stmt *st cleanup_stmt = NULL;
	int rc = DB_OK;

	if (session_row_check(s, err) != 0)
		return -1;
	if (prepare(r, "INSERT INTO sessions (id, identity, repo, worktree, branch, state, generation, turn,"
		       " created_ms, owner, lease_expires_ms, network, egress_allow)"
		       " VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13)",
		    &st, err) != 0)
		return -1;
	bind_text(st, 1, s->id, &rc);
	bind_text(st, 2, s->identity, &rc);
	bind_text(st, 3, s->repo, &rc);
	bind_text(st, 4, s->worktree, &rc);
	bind_text(st, 5, s->branch, &rc);
	bind_text(st, 6, *s->state ? s->state : "active", &rc);
	bind_int(st, 7, (int64_t)s->generation, &rc);
	bind_int(st, 8, s->turn, &rc);
	bind_int(st, 9, s->created_ms ? s->created_ms : clock_real_ms(), &rc);
	bind_text(st, 10, *s->owner ? s->owner : NULL, &rc);
	bind_int(st, 11, s->lease_expires_ms, &rc);
	bind_text(st, 12, *s->network ? s->network : "open", &rc);
	bind_text(st, 13, s->egress_allow, &rc);
	if (step(st, rc) != DB_DONE)
		return db_fail(r, err, "inserting session %s", s->id);
	return 0;
}

int records_session_get(struct records *r, const char *id, struct session_row *out, struct sb_err *err)
{
	struct records *locked cleanup_unlock = records_lock(r);
	struct stmt *st cleanup_stmt = NULL;
	int rc = DB_OK;

	memset(out, 0, sizeof *out);
	if (check_arg("session id", id, ID_MAX, err) != 0 ||
	    prepare(r, "SELECT id, identity, repo, worktree, branch, state, generation, turn, created_ms, owner,"
		       " lease_expires_ms, network, egress_allow FROM sessions WHERE id = ?1", &st, err) != 0)
		return -1;
	bind_text(st, 1, id, &rc);
	rc = step(st, rc);
	if (rc == DB_DONE) {
		sb_fail(err, 0, "records: no session %s", id);
		return RECORDS_NOT_FOUND;
	}
	if (rc != DB_ROW)
		return db_fail(r, err, "reading session %s", id);
	copy_text(out->id, sizeof out->id, col_text(st, 0));
	copy_text(out->identity, sizeof out->identity, col_text(st, 1));
	copy_text(out->repo, sizeof out->repo, col_text(st, 2));
	copy_text(out->worktree, sizeof out->worktree, col_text(st, 3));
	copy_text(out->branch, sizeof out->branch, col_text(st, 4));
	copy_text(out->state, sizeof out->state, col_text(st, 5));
	out->generation = (uint64_t)col_int(st, 6);
	out->turn = col_int(st, 7);
	out->created_ms = col_int(st, 8);
	copy_text(out->owner, sizeof out->owner, col_text(st, 9));
	out->lease_expires_ms = col_int(st, 10);
	copy_text(out->network, sizeof out->network, col_text(st, 11));
	copy_text(out->egress_allow, sizeof out->egress_allow, col_text(st, 12));
	return RECORDS_FOUND;
}

/* After a fenced UPDATE of one session: 0 when it changed a row, else the fence's refusal or "no
 * session". */
static int session_changed(struct records *r, const char *id, struct sb_err *err)
{
	if (db_changes(r) != 0)
		return 0;
	if (fence_refused(r, id, NULL, err) != 0)
		return -1;
	return sb_fail(err, 0, "records: no session %s", id);
}

int records_session_set_state(struct records *r, const char *id, const char *state, struct sb_err *err)
{
	struct records *locked cleanup_unlock = records_lock(r);
	struct stmt *st cleanup_stmt = NULL;
	int rc = DB_OK;

	if (check_arg("session id", id, ID_MAX, err) != 0 || check_arg("session state", state, 31, err) != 0 ||
	    prepare(r, "UPDATE sessions SET state = ?1 WHERE id = ?2 AND (?3 IS NULL OR owner = ?3)", &st, err) != 0)
		return -1;
	bind_text(st, 1, state, &rc);
	bind_text(st, 2, id, &rc);
	bind_text(st, 3, fence_me(r), &rc);
	if (step(st, rc) != DB_DONE)
		return db_fail(r, err, "setting session %s to %s", id, state);
	return session_changed(r, id, err);
}

/* A reserved session is released only when none of its sandboxes is left without evidence and
 * none of its execs is left in flight (recovery could not settle it: recovery.c recovery_reserve;
 * an operator's resolve settles it first): the check and the change are one statement, so no row
 * can slip in between. With a fence, another manager's sessions are its to release. */
int records_sessions_release(struct records *r, struct sb_err *err)
{
	struct records *locked cleanup_unlock = records_lock(r);
	struct stmt *st cleanup_stmt = NULL;
	int rc = DB_OK;

	if (prepare(r, "UPDATE sessions SET state = 'active' WHERE state = 'reserved' AND NOT EXISTS"
		       " (SELECT 1 FROM sandboxes WHERE sandboxes.session = sessions.id AND sandboxes.state <> 'gone')"
		       " AND NOT EXISTS (SELECT 1 FROM execs WHERE execs.session = sessions.id"
		       " AND execs.state IN ('accepted', 'dispatched'))"
		       " AND (?1 IS NULL OR owner IS NULL OR owner = ?1)", &st, err) != 0)
		return -1;
	bind_text(st, 1, fence_me(r), &rc);
	if (step(st, rc) != DB_DONE)
		return db_fail(r, err, "releasing reserved sessions");
	return db_changes(r);
}

/* One statement (UPDATE ... RETURNING), so two threads or processes bumping at once each get
 * their own new value. */
int records_session_bump_generation(struct records *r, const char *id, uint64_t *generation, struct sb_err *err)
{
	struct records *locked cleanup_unlock = records_lock(r);
	struct stmt *st cleanup_stmt = NULL;
	int rc = DB_OK;

	if (check_arg("session id", id, ID_MAX, err) != 0 ||
	    prepare(r, "UPDATE sessions SET generation = generation + 1 WHERE id = ?1 AND (?2 IS NULL OR owner = ?2)"
		       " RETURNING generation", &st, err) != 0)
		return -1;
	bind_text(st, 1, id, &rc);
	bind_text(st, 2, fence_me(r), &rc);
	rc = step(st, rc);
	if (rc == DB_DONE) {
		stmt_release(st);
		st = NULL;
		return session_changed(r, id, err);
	}
	if (rc != DB_ROW)
		return db_fail(r, err, "bumping the generation of session %s", id);
	*generation = (uint64_t)col_int(st, 0);
	/* Run the statement to its end so the change is committed before this returns. */
	if (step(st, DB_OK) != DB_DONE)
		return db_fail(r, err, "bumping the generation of session %s", id);
	return 0;
}

int records_session_set_turn(struct records *r, const char *id, int64_t turn, struct sb_err *err)
{
	struct records *locked cleanup_unlock = records_lock(r);
	struct stmt *st cleanup_stmt = NULL;
	int rc = DB_OK;

	if (check_arg("session id", id, ID_MAX, err) != 0 ||
	    prepare(r, "UPDATE sessions SET turn = ?1 WHERE id = ?2 AND (?3 IS NULL OR owner = ?3)", &st, err) != 0)
		return -1;
	bind_int(st, 1, turn, &rc);
	bind_text(st, 2, id, &rc);
	bind_text(st, 3, fence_me(r), &rc);
	if (step(st, rc) != DB_DONE)
		return db_fail(r, err, "setting the turn of session %s", id);
	return session_changed(r, id, err);
}

/* ---------------------------------------------------------------- grants */

int records_grant_set(struct records *r, const char *session, const char *resource, const char *access,
		      struct sb_err *err)
{
	struct records *locked cleanup_unlock = records_lock(r);
	struct stmt *st cleanup_stmt = NULL;
	int rc = DB_OK;

	if (check_arg("session id", session, ID_MAX, err) != 0 || check_arg("grant resource", resource, 1024, err) != 0 ||
	    check_arg("grant access", access, 64, err) != 0 ||
	    prepare(r, "INSERT INTO grants (session, resource, access) SELECT ?1, ?2, ?3"
		       " WHERE (?4 IS NULL OR EXISTS (SELECT 1 FROM sessions s WHERE s.id = ?1 AND s.owner = ?4))"
		       " ON CONFLICT (session, resource) DO UPDATE SET access = excluded.access", &st, err) != 0)
		return -1;
	/* They become the keys and values of records_grants(), which JSON needs in UTF-8. */
	if (!utf8_valid_str(resource) || !utf8_valid_str(access))
		return sb_invalid(err, "records: grant for session %s is not UTF-8 text", session);
	bind_text(st, 1, session, &rc);
	bind_text(st, 2, resource, &rc);
	bind_text(st, 3, access, &rc);
	bind_text(st, 4, fence_me(r), &rc);
	if (step(st, rc) != DB_DONE)
		return db_fail(r, err, "granting %s=%s to session %s", resource, access, session);
	if (db_changes(r) != 0)
		return 0;
	if (fence_refused(r, session, NULL, err) != 0)
		return -1;
	return sb_fail(err, 0, "records: no session %s to grant %s to", session, resource);
}

/* Revoking a grant the session does not hold is an error: the caller retires the sandbox for a
 * revoke, and should not do that for nothing. */
int records_grant_revoke(struct records *r, const char *session, const char *resource, struct sb_err *err)
{
	struct records *locked cleanup_unlock = records_lock(r);
	struct stmt *st cleanup_stmt = NULL;
	int rc = DB_OK;

	if (check_arg("session id", session, ID_MAX, err) != 0 || check_arg("grant resource", resource, 1024, err) != 0 ||
	    prepare(r, "DELETE FROM grants WHERE session = ?1 AND resource = ?2"
		       " AND (?3 IS NULL OR EXISTS (SELECT 1 FROM sessions s WHERE s.id = ?1 AND s.owner = ?3))", &st,
		       err) != 0)
		return -1;
	bind_text(st, 1, session, &rc);
	bind_text(st, 2, resource, &rc);
	bind_text(st, 3, fence_me(r), &rc);
	if (step(st, rc) != DB_DONE)
		return db_fail(r, err, "revoking %s from session %s", resource, session);
	if (db_changes(r) != 0)
		return 0;
	if (fence_refused(r, session, NULL, err) != 0)
		return -1;
	return sb_fail(err, 0, "records: session %s has no grant on %s to revoke", session, resource);
}

json_t *records_grants(struct records *r, const char *session, struct sb_err *err)
{
	struct records *locked cleanup_unlock = records_lock(r);
	struct stmt *st cleanup_stmt = NULL;
	json_t *grants cleanup_json = NULL;
	int rc = DB_OK;

	if (check_arg("session id", session, ID_MAX, err) != 0 ||
	    prepare(r, "SELECT resource, access FROM grants WHERE session = ?1 ORDER BY resource", &st, err) != 0)
		return NULL;
	grants = json_object(); /* jansson keeps insertion order, so the object is sorted too */
	if (!grants) {
		oom_fail(err, "listing grants");
		return NULL;
	}
	bind_text(st, 1, session, &rc);
	if (rc != DB_OK) {
		db_fail(r, err, "listing the grants of session %s", session);
		return NULL;
	}
	while ((rc = step(st, DB_OK)) == DB_ROW) {
		if (json_object_set_new(grants, col_text(st, 0), col_json_text(st, 1)) != 0) {
			oom_fail(err, "listing grants");
			return NULL;
		}
	}
	if (rc != DB_DONE) {
		db_fail(r, err, "listing the grants of session %s", session);
		return NULL;
	}
	return steal_pointer(&grants);
}

/* ---------------------------------------------------------------- pages of sessions (invariant 13) */

static bool is_session_state(const char *state)
{
	return strcmp(state, "active") == 0 || strcmp(state, "deleting") == 0 || strcmp(state, "deleted") == 0 ||
	       strcmp(state, "reserved") == 0;
}

static int sessions_query_check(const struct sessions_query *q, struct sb_err *err)
{
	if ((q->identity && check_arg("identity", q->identity, ID_MAX, err) != 0) ||
	    (q->before && check_arg("before (a session id)", q->before, ID_MAX, err) != 0))
		return -1;
	if (q->limit < 1 || q->limit > RECORDS_SESSIONS_LIMIT_MAX)
		return sb_invalid(err, "records: limit must be from 1 to %u, not %u", RECORDS_SESSIONS_LIMIT_MAX,
				  q->limit);
	if (q->state && !is_session_state(q->state))
		return sb_invalid(err, "records: a session's state is one of active, deleting, deleted, reserved, "
				  "not '%s'", q->state);
	return 0;
}

/* The `before` session's place in the order (created_ms, rowid). */
static int sessions_cursor(struct records *r, const char *before, int64_t *cursor_ms, int64_t *cursor_rowid,
			   struct sb_err *err)
{
	struct stmt *st cleanup_stmt = NULL;
	int rc = DB_OK;

	if (prepare(r, "SELECT created_ms, rowid FROM sessions WHERE id = ?1", &st, err) != 0)
		return -1;
	bind_text(st, 1, before, &rc);
	rc = step(st, rc);
	if (rc == DB_DONE) {
		sb_fail(err, 0, "records: no session %s to page before", before);
		return RECORDS_NOT_FOUND;
	}
	if (rc != DB_ROW)
		return db_fail(r, err, "reading session %s", before);
	*cursor_ms = col_int(st, 0);
	*cursor_rowid = col_int(st, 1);
	return RECORDS_FOUND;
}

/* {"session", "identity", "state", "sandbox": runtime id or null, "generation", "created_ms",
 *  "owner": a manager id or null, "last_exec": {"exec_id", "state", "accepted_ms", "finished_ms"} or null}. Every field is an id,
 * a state or a number (the runtime id at most 255 bytes), so a row is bounded by construction. */
static json_t *session_list_json(struct stmt *st)
{
	static const char *const keys[] = { "session", "identity", "state", "sandbox", "generation", "created_ms",
					    "owner", "last_exec" };
	static const char *const exec_keys[] = { "exec_id", "state", "accepted_ms", "finished_ms" };
	json_t *last = col_null(st, 6) ? json_null() :
		       json_row(exec_keys, (json_t *const[]){ col_json_text(st, 6), col_json_text(st, 7),
							       col_json_int(st, 8), col_json_int(st, 9) }, 4);
	json_t *values[] = { col_json_text(st, 0), col_json_text(st, 1), col_json_text(st, 2), col_json_text(st, 3),
			     col_json_int(st, 4), col_json_int(st, 5), col_json_text(st, 10), last };

	return json_row(keys, values, sizeof values / sizeof values[0]);
}

int records_sessions_page(struct records *r, const struct sessions_query *q, json_t **out, struct sb_err *err)
{
	struct records *locked cleanup_unlock = records_lock(r);
	struct stmt *st cleanup_stmt = NULL;
	json_t *list cleanup_json = NULL, *last cleanup_json = NULL, *page;
	size_t budget = q->budget ? q->budget : RECORDS_PAGE_BYTES, used = 2; /* "[]" */
	int64_t cursor_ms = 0, cursor_rowid = 0;
	bool more = false;
	int brc = DB_OK, rc, found;

	*out = NULL;
	if (budget < RECORDS_PAGE_MIN_BYTES)
		budget = RECORDS_PAGE_MIN_BYTES;
	if (sessions_query_check(q, err) != 0)
		return -1;
	if (q->before && (found = sessions_cursor(r, q->before, &cursor_ms, &cursor_rowid, err)) != RECORDS_FOUND)
		return found;
	/* Newest first; the row value compares (created_ms, rowid) as the ORDER BY does, so each
	 * session is on one page. The last exec is the session's newest by the records' own order. */
	if (prepare(r, "SELECT s.id, s.identity, s.state,"
		       " (SELECT b.runtime_id FROM sandboxes b WHERE b.session = s.id AND b.state <> 'gone'),"
		       " s.generation, s.created_ms, e.id, e.state, e.accepted_ms, e.finished_ms, s.owner"
		       " FROM sessions s LEFT JOIN execs e ON e.rowid = (SELECT x.rowid FROM execs x"
		       " WHERE x.session = s.id ORDER BY x.accepted_ms DESC, x.rowid DESC LIMIT 1)"
		       " WHERE (?1 IS NULL OR s.identity = ?1)"
		       " AND (s.state = ?2 OR (?2 IS NULL AND (?3 <> 0 OR s.state <> 'deleted')))"
		       " AND (?4 IS NULL OR (s.created_ms, s.rowid) < (?5, ?6))"
		       " ORDER BY s.created_ms DESC, s.rowid DESC LIMIT ?7", &st, err) != 0)
		return -1;
	bind_text(st, 1, q->identity, &brc);
	bind_text(st, 2, q->state, &brc);
	bind_int(st, 3, q->all, &brc);
	bind_text(st, 4, q->before, &brc);
	bind_int(st, 5, cursor_ms, &brc);
	bind_int(st, 6, cursor_rowid, &brc);
	bind_int(st, 7, (int64_t)q->limit + 1, &brc); /* one more than served says whether more remain */
	if (!(list = json_array()))
		return oom_fail(err, "listing sessions");
	while ((rc = step(st, brc)) == DB_ROW) {
		size_t n = json_array_size(list), comma = n > 0;
		json_t *row;

		if (n == q->limit) {
			more = true;
			break;
		}
		if (!(row = session_list_json(st)))
			return oom_fail(err, "listing sessions");
		/* A row is a few KiB at most, far below any budget: the first always fits. */
		if (n > 0 && used + comma + json_size(row) > budget) {
			json_decref(row);
			more = true;
			break;
		}
		used += comma + json_size(row);
		json_decref(last);
		last = col_json_text(st, 0);
		if (json_array_append_new(list, row) != 0 || !last)
			return oom_fail(err, "listing sessions");
	}
	if (rc != DB_ROW && rc != DB_DONE)
		return db_fail(r, err, "listing sessions");
	page = json_pack("{s:O}", "sessions", list);
	if (!page || (more && json_object_set(page, "next_before", last) != 0)) {
		json_decref(page);
		return oom_fail(err, "listing sessions");
	}
	*out = page;
	return RECORDS_FOUND;
}
