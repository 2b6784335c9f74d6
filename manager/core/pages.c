/* The paged answers: a session's records and the list of sessions (DESIGN.md, invariant 13).
 * Both ask the records for one page within RECORDS_PAGE_BYTES and answer it the same way. */
#include "manager.h"

#include <errno.h>
#include <jansson.h>

#include "control.h"

/* The string (or null) members keys into vals; the first that is neither, or NULL. */
static const char *string_args(json_t *req, const char *const keys[], const char **const vals[], size_t n)
{
	for (size_t i = 0; i < n; i++) {
		json_t *v = json_object_get(req, keys[i]);

		if (v != NULL && !json_is_string(v) && !json_is_null(v))
			return keys[i];
		*vals[i] = json_string_value(v);
	}
	return NULL;
}

/* A page (consumed) as the control answer: not_found for an unknown cursor or session, invalid for
 * bad input the records refused, internal otherwise. */
static json_t *page_answer(int rc, json_t *page, const struct sb_err *err)
{
	if (rc == RECORDS_NOT_FOUND)
		return control_error_from("not_found", err);
	if (rc < 0)
		return control_error_from(err->errnum == EINVAL ? "invalid" : "internal", err);
	if (json_object_set_new(page, "ok", json_true()) != 0) {
		json_decref(page);
		return NULL; /* the connection answers "out of memory" */
	}
	return page;
}

/* An answer of records (or of sessions) always fits one frame: a page stops at RECORDS_PAGE_BYTES,
 * and what else the answer holds ("ok", "next_before": an id) is far below the rest of the cap. */
_Static_assert(RECORDS_PAGE_BYTES + 64u * 1024u < CONTROL_RESPONSE_CAP, "a page of records must fit a control answer");

/* records: a page of a session's execs, newest first, or one exec (DESIGN.md). A deleted
 * session's records stay readable: they are its audit trail. Every answer is bounded by the page's
 * budget, whatever the records hold (records_page). */
json_t *pages_records(struct manager *m, json_t *req)
{
	struct records_query q = { .budget = RECORDS_PAGE_BYTES };
	const char *keys[] = { "session", "exec", "before", "state" };
	const char **vals[] = { &q.session, &q.exec_id, &q.before, &q.state };
	json_t *page = NULL;
	const char *bad;
	struct sb_err err;
	int rc;

	if ((bad = string_args(req, keys, vals, sizeof keys / sizeof keys[0])) != NULL)
		return control_error("invalid", "records: %s must be a string", bad);
	if (control_request_uint(req, "limit", RECORDS_PAGE_LIMIT_DEFAULT, &q.limit) < 0)
		return control_error("invalid", "records: limit must be a whole number from 1 to %u", RECORDS_PAGE_LIMIT_MAX);
	sb_err_clear(&err);
	rc = records_page(m->rec, &q, &page, &err);
	return page_answer(rc, page, &err);
}

/* Every session, newest first, in pages bounded like records' (records_sessions_page): "identity"
 * and "state" filter, "all" adds the deleted ones, "limit" and "before" page. */
json_t *pages_sessions(struct manager *m, json_t *req)
{
	struct sessions_query q = { .budget = RECORDS_PAGE_BYTES };
	const char *keys[] = { "identity", "state", "before" };
	const char **vals[] = { &q.identity, &q.state, &q.before };
	json_t *all = json_object_get(req, "all"), *page = NULL;
	const char *bad;
	struct sb_err err;
	int rc;

	if ((bad = string_args(req, keys, vals, sizeof keys / sizeof keys[0])) != NULL)
		return control_error("invalid", "session list: %s must be a string", bad);
	if (all != NULL && !json_is_boolean(all))
		return control_error("invalid", "session list: all must be true or false");
	q.all = json_is_true(all);
	if (control_request_uint(req, "limit", RECORDS_SESSIONS_LIMIT_DEFAULT, &q.limit) < 0)
		return control_error("invalid", "session list: limit must be a whole number from 1 to %u",
				     RECORDS_SESSIONS_LIMIT_MAX);
	sb_err_clear(&err);
	rc = records_sessions_page(m->rec, &q, &page, &err);
	return page_answer(rc, page, &err);
}
