/* Pages of an exec's or a session's records, newest first, within a byte budget (invariant 13,
 * see records.h). Must never serve an answer larger than its budget, whatever the commands printed. */
#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "records_internal.h"

/* ---------------------------------------------------------------- pages of records (invariant 13) */
/* {"exec_id", "session", "turn", "state", "command", "timeout_seconds", "generation", "nonce",
 *  "sandbox", "accepted_ms", "dispatched_ms", "finished_ms", "result", "receipt", "reason",
 *  "authority", "resolution": {"outcome", "note", "by_uid", "by_name", "at_ms"} or null};
 * a column not yet set (before dispatch or finish) is null. */
static json_t *exec_json(struct stmt *st)
{
	static const char *const keys[] = { "exec_id", "session", "turn", "state", "command", "timeout_seconds",
					    "generation", "nonce", "sandbox", "accepted_ms", "dispatched_ms",
					    "finished_ms", "result", "receipt", "reason", "authority", "resolution" };
	static const char *const resolution_keys[] = { "outcome", "note", "by_uid", "by_name", "at_ms" };
	json_t *resolution = col_null(st, 16) ? json_null() :
			     json_row(resolution_keys, (json_t *const[]){ col_json_text(st, 16), col_json_text(st, 17),
									  col_json_int(st, 18), col_json_text(st, 19),
									  col_json_int(st, 20) }, 5);
	json_t *values[] = { col_json_text(st, 0), col_json_text(st, 1), col_json_int(st, 2), col_json_text(st, 3),
			     col_json_text(st, 4), col_json_int(st, 5), col_json_int(st, 6), col_json_text(st, 7),
			     col_json_text(st, 8), col_json_int(st, 9), col_json_int(st, 10), col_json_int(st, 11),
			     col_json_parsed(st, 12), col_json_parsed(st, 13), col_json_text(st, 14),
			     col_json_parsed(st, 15), resolution };

	return json_row(keys, values, sizeof values / sizeof values[0]);
}
static bool is_exec_state(const char *state)
{
	return strcmp(state, "accepted") == 0 || strcmp(state, "dispatched") == 0 || is_final_state(state);
}

static int page_query_check(const struct records_query *q, struct sb_err *err)
{
	if (!q->session == !q->exec_id)
		return sb_invalid(err, "records: name a session or an exec, not both or neither");
	if (q->exec_id)
		return (q->before || q->state) ?
		       sb_invalid(err, "records: before and state page a session's records, not one exec's") :
		       check_arg("exec id", q->exec_id, ID_MAX, err);
	if (check_arg("session id", q->session, ID_MAX, err) != 0 ||
	    (q->before && check_arg("before (an exec id)", q->before, ID_MAX, err) != 0))
		return -1;
	if (q->limit < 1 || q->limit > RECORDS_PAGE_LIMIT_MAX)
		return sb_invalid(err, "records: limit must be from 1 to %u, not %u", RECORDS_PAGE_LIMIT_MAX, q->limit);
	if (q->state && !is_exec_state(q->state) && strcmp(q->state, "unresolved") != 0)
		return sb_invalid(err, "records: state must be one of accepted, dispatched, exited, signaled, "
				  "timed_out, cancelled, uncertain, refused, or unresolved (uncertain and not resolved), "
				  "not '%s'", q->state);
	return 0;
}

/* The session exists (in any state: a deleted session's records stay readable), and the `before`
 * exec is one of its execs; *cursor_ms and *cursor_rowid receive that exec's place in the order. */
static int page_cursor(struct records *r, const struct records_query *q, int64_t *cursor_ms, int64_t *cursor_rowid,
		       struct sb_err *err)
{
	struct stmt *st cleanup_stmt = NULL;
	int rc = DB_OK;

	if (prepare(r, "SELECT (SELECT count(*) FROM sessions WHERE id = ?1), e.accepted_ms, e.rowid"
		       " FROM (SELECT 1) AS one LEFT JOIN execs e ON e.id = ?2 AND e.session = ?1", &st, err) != 0)
		return -1;
	bind_text(st, 1, q->session, &rc);
	bind_text(st, 2, q->before, &rc);
	if (step(st, rc) != DB_ROW)
		return db_fail(r, err, "reading session %s", q->session);
	if (col_int(st, 0) == 0) {
		sb_fail(err, 0, "records: no session %s", q->session);
		return RECORDS_NOT_FOUND;
	}
	if (q->before && col_null(st, 2)) {
		sb_fail(err, 0, "records: session %s has no exec %s to page before", q->session, q->before);
		return RECORDS_NOT_FOUND;
	}
	*cursor_ms = col_int(st, 1);
	*cursor_rowid = col_int(st, 2);
	return RECORDS_FOUND;
}

/* The resolution's columns beside the exec's (NULL without one), made into one object by exec_json. */
#define EXEC_COLUMNS "execs.id, session, turn, state, command, timeout_seconds, generation, nonce_hex, sandbox," \
		     " accepted_ms, dispatched_ms, finished_ms, result_json, receipt_json, reason, authority," \
		     " outcome, note, by_uid, by_name, at_ms"
#define EXEC_FROM " FROM execs LEFT JOIN resolutions ON resolutions.exec_id = execs.id"

static int page_prepare(struct records *r, const struct records_query *q, struct stmt **st, int *brc,
			struct sb_err *err)
{
	int64_t cursor_ms = 0, cursor_rowid = 0;
	int found;

	*brc = DB_OK;
	if (q->exec_id) {
		if (prepare(r, "SELECT " EXEC_COLUMNS EXEC_FROM " WHERE execs.id = ?1", st, err) != 0)
			return -1;
		bind_text(*st, 1, q->exec_id, brc);
		return RECORDS_FOUND;
	}
	found = page_cursor(r, q, &cursor_ms, &cursor_rowid, err);
	if (found != RECORDS_FOUND)
		return found;
	/* The row value compares (accepted_ms, rowid) as the ORDER BY does: each exec is on one page. */
	/* "unresolved": the uncertain execs no operator has resolved yet. */
	if (prepare(r, "SELECT " EXEC_COLUMNS EXEC_FROM " WHERE session = ?1 AND (?2 IS NULL OR state = ?2 OR"
		       " (?2 = 'unresolved' AND state = 'uncertain' AND outcome IS NULL))"
		       " AND (?3 IS NULL OR (accepted_ms, execs.rowid) < (?4, ?5))"
		       " ORDER BY accepted_ms DESC, execs.rowid DESC LIMIT ?6", st, err) != 0)
		return -1;
	bind_text(*st, 1, q->session, brc);
	bind_text(*st, 2, q->state, brc);
	bind_text(*st, 3, q->before, brc);
	bind_int(*st, 4, cursor_ms, brc);
	bind_int(*st, 5, cursor_rowid, brc);
	bind_int(*st, 6, (int64_t)q->limit + 1, brc); /* one more than served says whether more remain */
	return RECORDS_FOUND;
}

/* One row as served: its streams bounded as when written (older records hold whole outputs),
 * then, when it is the page's first and larger than the room alone, made to fit. */
static json_t *page_record(struct records *r, struct stmt *st)
{
	json_t *rec = exec_json(st);
	int bounded = rec ? result_bound(json_object_get(rec, "result"), json_object_get(rec, "receipt"),
					 r->output_limit) : -1;

	if (bounded < 0 || (bounded == 1 && json_object_set_new(rec, "truncated", json_true()) != 0)) {
		json_decref(rec);
		return NULL;
	}
	return rec;
}

int records_page(struct records *r, const struct records_query *q, json_t **out, struct sb_err *err)
{
	struct records *locked cleanup_unlock = records_lock(r);
	struct stmt *st cleanup_stmt = NULL;
	json_t *list cleanup_json = NULL, *last cleanup_json = NULL, *page;
	size_t budget = q->budget ? q->budget : RECORDS_PAGE_BYTES, used = 2; /* "[]" */
	bool more = false;
	int rc, brc, found;

	*out = NULL;
	if (budget < RECORDS_PAGE_MIN_BYTES)
		budget = RECORDS_PAGE_MIN_BYTES;
	if (page_query_check(q, err) != 0)
		return -1;
	found = page_prepare(r, q, &st, &brc, err);
	if (found != RECORDS_FOUND)
		return found;
	if (!(list = json_array()))
		return oom_fail(err, "listing execs");
	while ((rc = step(st, brc)) == DB_ROW) {
		size_t n = json_array_size(list), comma = n > 0, size;
		json_t *rec;

		if (q->session && n == q->limit) {
			more = true;
			break;
		}
		if (!(rec = page_record(r, st)))
			return oom_fail(err, "listing execs");
		size = json_size(rec);
		if (n > 0 && used + comma + size > budget) {
			/* The next page starts with it, where it is first and is served whatever its size. */
			json_decref(rec);
			more = true;
			break;
		}
		if (n == 0 && used + size > budget && !(rec = record_fit(rec, budget - used)))
			return oom_fail(err, "shortening an exec's record");
		used += comma + json_size(rec);
		json_decref(last);
		last = col_json_text(st, 0);
		if (json_array_append_new(list, rec) != 0 || !last)
			return oom_fail(err, "listing execs");
	}
	if (rc != DB_ROW && rc != DB_DONE)
		return db_fail(r, err, "listing execs");
	if (q->exec_id && json_array_size(list) == 0) {
		sb_fail(err, 0, "records: no exec %s", q->exec_id);
		return RECORDS_NOT_FOUND;
	}
	page = json_pack("{s:O}", "records", list);
	if (!page || (more && json_object_set(page, "next_before", last) != 0)) {
		json_decref(page);
		return oom_fail(err, "listing execs");
	}
	*out = page;
	return RECORDS_FOUND;
}
