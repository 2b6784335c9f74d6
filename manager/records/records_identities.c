/* Each identity's slot in a root manager's id range (issue 26, N2; the table identity_ids of
 * schema version 5). A slot is given once, on the identity's first session, and never changed or
 * given back: the identity's files on the volume keep the ids it gives. Several managers may
 * share the store, so the choice is the store's: a slot taken by another manager in the meantime
 * makes the insert change nothing, and the next try reads or picks again. */
#include "records_internal.h"

#define SLOT_TRIES 8 /* each lost race means another identity got a slot: the range, not the loop, bounds it */

/* The recorded slot of identity: RECORDS_FOUND, RECORDS_NOT_FOUND, or -1 with err. */
static int slot_read(struct records *r, const char *identity, int64_t *slot, struct sb_err *err)
{
	struct stmt *st cleanup_stmt = NULL;
	int rc = DB_OK;

	if (prepare(r, "SELECT slot FROM identity_ids WHERE identity = ?1", &st, err) != 0)
		return -1;
	bind_text(st, 1, identity, &rc);
	rc = step(st, rc);
	if (rc == DB_DONE)
		return RECORDS_NOT_FOUND;
	if (rc != DB_ROW)
		return db_fail(r, err, "reading the ids of identity %s", identity);
	*slot = col_int(st, 0);
	return RECORDS_FOUND;
}

/* The next slot: one past the largest given (slots are never given back, so none is free below). */
static int slot_next(struct records *r, int64_t *next, struct sb_err *err)
{
	struct stmt *st cleanup_stmt = NULL;

	if (prepare(r, "SELECT coalesce(max(slot) + 1, 0) FROM identity_ids", &st, err) != 0)
		return -1;
	if (step(st, DB_OK) != DB_ROW)
		return db_fail(r, err, "reading the identities' slots");
	*next = col_int(st, 0);
	return 0;
}

/* Records slot for identity unless either is taken (then nothing changes). */
static int slot_insert(struct records *r, const char *identity, int64_t slot, int64_t now_ms, struct sb_err *err)
{
	struct stmt *st cleanup_stmt = NULL;
	int rc = DB_OK;

	if (prepare(r, "INSERT INTO identity_ids (identity, slot, assigned_ms) VALUES (?1, ?2, ?3)"
		       " ON CONFLICT DO NOTHING", &st, err) != 0)
		return -1;
	bind_text(st, 1, identity, &rc);
	bind_int(st, 2, slot, &rc);
	bind_int(st, 3, now_ms, &rc);
	if (step(st, rc) != DB_DONE)
		return db_fail(r, err, "recording the ids of identity %s", identity);
	return 0;
}

int records_identity_slot(struct records *r, const char *identity, int64_t slots, int64_t now_ms, int64_t *slot,
			  struct sb_err *err)
{
	struct records *locked cleanup_unlock = records_lock(r);
	int64_t next = 0;

	if (check_arg("identity", identity, ID_MAX, err) != 0)
		return -1;
	for (int i = 0; i < SLOT_TRIES; i++) {
		int rc = slot_read(r, identity, slot, err);

		if (rc != RECORDS_NOT_FOUND || slots <= 0)
			return rc;
		if (slot_next(r, &next, err) != 0)
			return -1;
		if (next >= slots) {
			sb_fail(err, ENOSPC, "the manager's id range is used up: its %lld slots are given to %lld identities "
				"(a new identity needs a larger sandbox-ids range; docs/operations.md)",
				(long long)slots, (long long)next);
			return RECORDS_REFUSED;
		}
		if (slot_insert(r, identity, next, now_ms, err) != 0)
			return -1;
	}
	return sb_fail(err, EAGAIN, "records: identity %s: no slot after %d tries (other managers took each one)",
		       identity, SLOT_TRIES);
}
