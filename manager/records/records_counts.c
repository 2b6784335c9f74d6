/* The counts for status and metrics (see records.h): execs and sessions by state, the uncertain
 * execs still to reconcile and the reserved sessions, each list bounded. */
#include <stdint.h>

#include "records_internal.h"

#define STR_(x) #x
#define STR(x) STR_(x)        /* a constant into SQL text */

/* ---------------------------------------------------------------- counts (status and metrics) */

/* Every (state, count) row of sql into obj, whose keys were set to 0 beforehand: a state that has
 * no row stays 0, and one written by another writer (the sqlite3 shell) is counted too. */
static int counts_by_state(struct records *r, const char *sql, json_t *obj, struct sb_err *err)
{
	struct stmt *st cleanup_stmt = NULL;
	int rc;

	if (prepare(r, sql, &st, err) != 0)
		return -1;
	while ((rc = step(st, DB_OK)) == DB_ROW) {
		const char *state = col_text(st, 0);

		if (!state || json_object_set_new(obj, state, json_integer(col_int(st, 1))) != 0)
			return oom_fail(err, "counting states (or a state that is not UTF-8 text)");
	}
	return rc == DB_DONE ? 0 : db_fail(r, err, "counting states");
}

json_t *records_counts(struct records *r, struct sb_err *err)
{
	struct records *locked cleanup_unlock = records_lock(r);
	struct stmt *st cleanup_stmt = NULL;
	json_t *out cleanup_json = json_pack("{s:{s:i, s:i, s:i, s:i, s:i, s:i, s:i, s:i}, s:{s:i, s:i, s:i, s:i}, s:[]}",
					     "execs", "accepted", 0, "dispatched", 0, "exited", 0, "signaled", 0,
					     "timed_out", 0, "cancelled", 0, "uncertain", 0, "refused", 0, "sessions",
					     "active", 0, "deleting", 0, "deleted", 0, "reserved", 0,
					     "uncertain_sessions");
	json_t *list, *reserved;
	int64_t uncertain = 0;
	int rc;

	if (!out) {
		oom_fail(err, "counting");
		return NULL;
	}
	if (counts_by_state(r, "SELECT state, count(*) FROM execs GROUP BY state", json_object_get(out, "execs"),
			    err) != 0 ||
	    counts_by_state(r, "SELECT state, count(*) FROM sessions GROUP BY state", json_object_get(out, "sessions"),
			    err) != 0)
		return NULL;
	/* The uncertain execs someone still has to reconcile: not one an operator resolved (resolve.c),
	 * nor one of a deleted session (its workspace is gone); each session's newest of them by the
	 * records' own order. */
	if (prepare(r, "SELECT e.session, count(*), (SELECT y.id FROM execs y WHERE y.session = e.session"
		       " AND y.state = 'uncertain' AND NOT EXISTS (SELECT 1 FROM resolutions z WHERE z.exec_id = y.id)"
		       " ORDER BY y.accepted_ms DESC, y.rowid DESC LIMIT 1), max(e.accepted_ms) AS newest FROM execs e"
		       " JOIN sessions s ON s.id = e.session WHERE e.state = 'uncertain' AND s.state <> 'deleted'"
		       " AND NOT EXISTS (SELECT 1 FROM resolutions x WHERE x.exec_id = e.id)"
		       " GROUP BY e.session ORDER BY newest DESC", &st, err) != 0)
		return NULL;
	list = json_object_get(out, "uncertain_sessions");
	while ((rc = step(st, DB_OK)) == DB_ROW) {
		uncertain += col_int(st, 1);
		if (json_array_size(list) < RECORDS_COUNTS_LIST_MAX &&
		    json_array_append_new(list, json_pack("{s:o, s:I, s:o}", "session", col_json_text(st, 0), "uncertain",
							  (json_int_t)col_int(st, 1), "newest_exec",
							  col_json_text(st, 2))) != 0) {
			oom_fail(err, "listing uncertain execs");
			return NULL;
		}
	}
	if (rc != DB_DONE) {
		db_fail(r, err, "counting uncertain execs");
		return NULL;
	}
	stmt_release(st);
	st = NULL;
	if (prepare(r, "SELECT id FROM sessions WHERE state = 'reserved' ORDER BY created_ms DESC, rowid DESC"
		       " LIMIT " STR(RECORDS_COUNTS_LIST_MAX), &st, err) != 0 ||
	    !(reserved = rows_json(r, st, DB_OK, id_json, "listing reserved sessions", err)))
		return NULL;
	if (json_object_set_new(out, "reserved_sessions", reserved) != 0 ||
	    json_object_set_new(out, "uncertain_open", json_integer(uncertain)) != 0) {
		oom_fail(err, "counting");
		return NULL;
	}
	return steal_pointer(&out);
}
