/* Leases, the managers sharing one store, and the fence (see records.h). A session is owned by at
 * most one manager at a time: its lease is taken, renewed and released here, each in one
 * transaction, and a takeover is a compare-and-set on the (owner, generation) it read, so two
 * managers taking one expired session at once cannot both win. The fence's refusals are explained
 * here too (the writes themselves carry the fence in their own statements, in the files of their
 * rows). Must never hand a live lease to another manager, never let a stale incarnation renew, and
 * never release what another manager owns. */
#include <errno.h>
#include <stdint.h>
#include <string.h>

#include "records_internal.h"

#define MANAGER_ID_MAX 64
#define INCARNATION_MAX 64
#define ADDRESS_MAX 4199 /* struct lease's address[4200] */

/* ---------------------------------------------------------------- transactions */

/* Rolls back a transaction left open when its scope ends (the commit clears the pointer). */
static void txn_rollbackp(struct records **r)
{
	if (!*r)
		return;
	if ((*r)->kind == STORE_SQLITE)
		sqlite3_exec((*r)->db, "ROLLBACK", NULL, NULL, NULL);
	else
		pg_exec(*r, "ROLLBACK");
}

#define cleanup_txn __attribute__((cleanup(txn_rollbackp)))

/* SQLite takes its write lock at BEGIN IMMEDIATE, so what a transaction reads stays true until its
 * commit; PostgreSQL's (read committed) is held by the compare-and-set statements themselves. */
static int txn_begin(struct records *r, struct sb_err *err)
{
	return exec_sql(r, r->kind == STORE_SQLITE ? "BEGIN IMMEDIATE" : "BEGIN", "starting a transaction", err);
}

static int txn_commit(struct records *r, struct records **txn, struct sb_err *err)
{
	if (exec_sql(r, "COMMIT", "committing a transaction", err) != 0)
		return -1;
	*txn = NULL;
	return 0;
}

/* now_ms + lease_ms, the expiry, without overflow; -1 with EINVAL for times out of range. */
static int lease_until(int64_t now_ms, int64_t lease_ms, int64_t *until, struct sb_err *err)
{
	if (now_ms < 0 || lease_ms < 0 || now_ms > INT64_MAX - lease_ms)
		return sb_invalid(err, "records: a lease of %lld ms from %lld is out of range", (long long)lease_ms,
				  (long long)now_ms);
	*until = now_ms + lease_ms;
	return 0;
}

/* ---------------------------------------------------------------- managers */

/* Why a registration changed nothing: another incarnation's heartbeat is fresh. */
static int register_refusal(struct records *r, const char *id, int64_t now_ms, struct sb_err *err)
{
	struct stmt *st cleanup_stmt = NULL;
	int rc = DB_OK;

	if (prepare(r, "SELECT address, heartbeat_ms FROM managers WHERE id = ?1", &st, err) != 0)
		return -1;
	bind_text(st, 1, id, &rc);
	rc = step(st, rc);
	if (rc == DB_DONE)
		return sb_fail(err, EAGAIN, "records: registering manager id %s: its row changed meanwhile; try again", id);
	if (rc != DB_ROW)
		return db_fail(r, err, "reading manager %s", id);
	sb_fail(err, 0, "manager id %s is in use by a running manager (its address %s, heartbeat %lld ms ago)", id,
		col_text(st, 0), (long long)(now_ms - col_int(st, 1)));
	return RECORDS_REFUSED;
}

/* One statement: the row is written when there is none, when it is this incarnation's, or when
 * its heartbeat is older than a lease (that manager is gone); otherwise it changes nothing. */
int records_manager_register(struct records *r, const char *id, const char *incarnation, const char *address,
			     int64_t now_ms, int64_t lease_ms, struct sb_err *err)
{
	struct records *locked cleanup_unlock = records_lock(r);
	struct stmt *st cleanup_stmt = NULL;
	int64_t until = 0;
	int rc = DB_OK;

	if (check_arg("manager id", id, MANAGER_ID_MAX, err) != 0 ||
	    check_arg("manager incarnation", incarnation, INCARNATION_MAX, err) != 0 ||
	    check_arg("manager address", address, ADDRESS_MAX, err) != 0 ||
	    lease_until(now_ms, lease_ms, &until, err) != 0)
		return -1;
	if (prepare(r, "INSERT INTO managers (id, incarnation, address, heartbeat_ms) VALUES (?1, ?2, ?3, ?4)"
		       " ON CONFLICT (id) DO UPDATE SET incarnation = excluded.incarnation, address = excluded.address,"
		       " heartbeat_ms = excluded.heartbeat_ms WHERE managers.incarnation = excluded.incarnation"
		       " OR managers.heartbeat_ms + ?5 <= excluded.heartbeat_ms", &st, err) != 0)
		return -1;
	bind_text(st, 1, id, &rc);
	bind_text(st, 2, incarnation, &rc);
	bind_text(st, 3, address, &rc);
	bind_int(st, 4, now_ms, &rc);
	bind_int(st, 5, lease_ms, &rc);
	if (step(st, rc) != DB_DONE)
		return db_fail(r, err, "registering manager %s", id);
	if (db_changes(r) == 1)
		return RECORDS_FOUND;
	stmt_release(st);
	st = NULL;
	return register_refusal(r, id, now_ms, err);
}

int records_manager_heartbeat(struct records *r, const char *id, const char *incarnation, int64_t now_ms,
			      int64_t lease_ms, struct sb_err *err)
{
	struct records *locked cleanup_unlock = records_lock(r);
	struct records *txn cleanup_txn = NULL;
	int64_t until = 0;

	if (check_arg("manager id", id, MANAGER_ID_MAX, err) != 0 ||
	    check_arg("manager incarnation", incarnation, INCARNATION_MAX, err) != 0 ||
	    lease_until(now_ms, lease_ms, &until, err) != 0 || txn_begin(r, err) != 0)
		return -1;
	txn = r;
	{
		struct stmt *st cleanup_stmt = NULL;
		int rc = DB_OK;

		if (prepare(r, "UPDATE managers SET heartbeat_ms = ?1 WHERE id = ?2 AND incarnation = ?3", &st, err) != 0)
			return -1;
		bind_int(st, 1, now_ms, &rc);
		bind_text(st, 2, id, &rc);
		bind_text(st, 3, incarnation, &rc);
		if (step(st, rc) != DB_DONE)
			return db_fail(r, err, "renewing the heartbeat of manager %s", id);
		if (db_changes(r) == 0) {
			sb_fail(err, 0, "manager id %s is no longer this manager's (another process registered it, or "
				"its row is gone): nothing was renewed, stop dispatching", id);
			return RECORDS_REFUSED;
		}
	}
	{
		struct stmt *st cleanup_stmt = NULL;
		int rc = DB_OK;

		if (prepare(r, "UPDATE sessions SET lease_expires_ms = ?1 WHERE owner = ?2", &st, err) != 0)
			return -1;
		bind_int(st, 1, until, &rc);
		bind_text(st, 2, id, &rc);
		if (step(st, rc) != DB_DONE)
			return db_fail(r, err, "renewing the leases of manager %s", id);
	}
	return txn_commit(r, &txn, err) == 0 ? RECORDS_FOUND : -1;
}

int records_manager_unregister(struct records *r, const char *id, const char *incarnation, struct sb_err *err)
{
	struct records *locked cleanup_unlock = records_lock(r);
	struct records *txn cleanup_txn = NULL;

	if (check_arg("manager id", id, MANAGER_ID_MAX, err) != 0 ||
	    check_arg("manager incarnation", incarnation, INCARNATION_MAX, err) != 0 || txn_begin(r, err) != 0)
		return -1;
	txn = r;
	{
		struct stmt *st cleanup_stmt = NULL;
		int rc = DB_OK;

		if (prepare(r, "DELETE FROM managers WHERE id = ?1 AND incarnation = ?2", &st, err) != 0)
			return -1;
		bind_text(st, 1, id, &rc);
		bind_text(st, 2, incarnation, &rc);
		if (step(st, rc) != DB_DONE)
			return db_fail(r, err, "removing manager %s", id);
		if (db_changes(r) == 0) {
			sb_fail(err, 0, "manager id %s is not registered by this incarnation: nothing was released", id);
			return RECORDS_REFUSED;
		}
	}
	{
		struct stmt *st cleanup_stmt = NULL;
		int rc = DB_OK;

		/* Not a session with something in flight (a sandbox not proven gone, an exec not
		 * settled): a taker of a released session settles nothing, so those stay this
		 * manager's until its lease expires and a takeover settles them. */
		if (prepare(r, "UPDATE sessions SET owner = NULL, lease_expires_ms = 0 WHERE owner = ?1"
			       " AND NOT EXISTS (SELECT 1 FROM sandboxes b WHERE b.session = sessions.id AND b.state <> 'gone')"
			       " AND NOT EXISTS (SELECT 1 FROM execs e WHERE e.session = sessions.id"
			       " AND e.state IN ('accepted', 'dispatched'))", &st, err) != 0)
			return -1;
		bind_text(st, 1, id, &rc);
		if (step(st, rc) != DB_DONE)
			return db_fail(r, err, "releasing the sessions of manager %s", id);
	}
	return txn_commit(r, &txn, err) == 0 ? RECORDS_FOUND : -1;
}

/* ---------------------------------------------------------------- leases */

/* The control socket manager id advertises, "" when it has no row. */
static int manager_address(struct records *r, const char *id, char *address, size_t size, struct sb_err *err)
{
	struct stmt *st cleanup_stmt = NULL;
	int rc = DB_OK;

	address[0] = '\0';
	if (!*id)
		return 0;
	if (prepare(r, "SELECT address FROM managers WHERE id = ?1", &st, err) != 0)
		return -1;
	bind_text(st, 1, id, &rc);
	rc = step(st, rc);
	if (rc == DB_ROW)
		copy_text(address, size, col_text(st, 0));
	else if (rc != DB_DONE)
		return db_fail(r, err, "reading manager %s", id);
	return 0;
}

/* The session's owner ("" none), expiry and generation: RECORDS_FOUND, RECORDS_NOT_FOUND or -1. */
static int lease_read(struct records *r, const char *session, struct lease *out, struct sb_err *err)
{
	struct stmt *st cleanup_stmt = NULL;
	int rc = DB_OK;

	if (prepare(r, "SELECT coalesce(owner, ''), lease_expires_ms, generation FROM sessions WHERE id = ?1", &st,
		    err) != 0)
		return -1;
	bind_text(st, 1, session, &rc);
	rc = step(st, rc);
	if (rc == DB_DONE) {
		sb_fail(err, 0, "records: no session %s", session);
		return RECORDS_NOT_FOUND;
	}
	if (rc != DB_ROW)
		return db_fail(r, err, "reading the lease of session %s", session);
	copy_text(out->owner, sizeof out->owner, col_text(st, 0));
	out->expires_ms = col_int(st, 1);
	out->generation = (uint64_t)col_int(st, 2);
	return RECORDS_FOUND;
}

/* The compare-and-set: the session becomes me's until `until` only if it still has the owner and
 * generation read (cur), the generation + 1 on a takeover. 1 when it did, 0 when it changed
 * meanwhile, -1. */
static int lease_cas(struct records *r, const char *session, const char *me, int64_t until, const struct lease *cur,
		     bool takeover, struct sb_err *err)
{
	struct stmt *st cleanup_stmt = NULL;
	int rc = DB_OK;

	if (prepare(r, "UPDATE sessions SET owner = ?1, lease_expires_ms = ?2, generation = generation + ?3"
		       " WHERE id = ?4 AND coalesce(owner, '') = ?5 AND generation = ?6", &st, err) != 0)
		return -1;
	bind_text(st, 1, me, &rc);
	bind_int(st, 2, until, &rc);
	bind_int(st, 3, takeover ? 1 : 0, &rc);
	bind_text(st, 4, session, &rc);
	bind_text(st, 5, cur->owner, &rc);
	bind_int(st, 6, (int64_t)cur->generation, &rc);
	if (step(st, rc) != DB_DONE)
		return db_fail(r, err, "taking the lease of session %s", session);
	return db_changes(r) == 1;
}

#define LEASE_TAKE_TRIES 4 /* a compare-and-set lost to another manager is read again, this often */

int records_lease_take(struct records *r, const char *session, const char *me, int64_t now_ms, int64_t lease_ms,
		       struct lease *out, struct sb_err *err)
{
	struct records *locked cleanup_unlock = records_lock(r);
	struct records *txn cleanup_txn = NULL;
	int64_t until = 0;

	memset(out, 0, sizeof *out);
	if (check_arg("session id", session, ID_MAX, err) != 0 || check_arg("manager id", me, MANAGER_ID_MAX, err) != 0 ||
	    lease_until(now_ms, lease_ms, &until, err) != 0)
		return -1;
	/* Already me's: one read, no write (every call of a session takes it; the renewal keeps the
	 * expiry, and a lease that lapsed with no taker is still me's: no one else acted on it). */
	{
		int rc = lease_read(r, session, out, err);

		if (rc != RECORDS_FOUND)
			return rc;
		if (strcmp(out->owner, me) == 0)
			return RECORDS_FOUND;
		memset(out, 0, sizeof *out);
	}
	if (txn_begin(r, err) != 0)
		return -1;
	txn = r;
	for (int i = 0; i < LEASE_TAKE_TRIES; i++) {
		struct lease cur = { 0 };
		bool takeover;
		int rc = lease_read(r, session, &cur, err);

		if (rc != RECORDS_FOUND)
			return rc;
		if (*cur.owner && strcmp(cur.owner, me) != 0 && cur.expires_ms >= now_ms) {
			*out = cur;
			if (manager_address(r, cur.owner, out->address, sizeof out->address, err) != 0)
				return -1;
			sb_fail(err, 0, "records: session %s is owned by manager %s (its control socket %s); its lease "
				"expires in %lld ms", session, cur.owner, *out->address ? out->address : "unknown",
				(long long)(cur.expires_ms - now_ms));
			return RECORDS_REFUSED;
		}
		takeover = *cur.owner != '\0' && strcmp(cur.owner, me) != 0;
		rc = lease_cas(r, session, me, until, &cur, takeover, err);
		if (rc < 0)
			return -1;
		if (rc == 0)
			continue;
		copy_text(out->owner, sizeof out->owner, me);
		out->expires_ms = until;
		out->generation = cur.generation + (takeover ? 1 : 0);
		copy_text(out->previous, sizeof out->previous, takeover ? cur.owner : "");
		if (manager_address(r, me, out->address, sizeof out->address, err) != 0 ||
		    txn_commit(r, &txn, err) != 0)
			return -1;
		return RECORDS_FOUND;
	}
	return sb_fail(err, EAGAIN, "records: session %s changed under each of %d attempts to take its lease", session,
		       LEASE_TAKE_TRIES);
}

int records_lease_get(struct records *r, const char *session, struct lease *out, struct sb_err *err)
{
	struct records *locked cleanup_unlock = records_lock(r);
	int rc;

	memset(out, 0, sizeof *out);
	if (check_arg("session id", session, ID_MAX, err) != 0)
		return -1;
	rc = lease_read(r, session, out, err);
	if (rc != RECORDS_FOUND)
		return rc;
	return manager_address(r, out->owner, out->address, sizeof out->address, err) == 0 ? RECORDS_FOUND : -1;
}

/* ---------------------------------------------------------------- the fence */

void records_set_fence(struct records *r, const char *manager_id)
{
	struct records *locked cleanup_unlock = records_lock(r);

	copy_text(r->fence, sizeof r->fence, manager_id);
}

int fence_refused(struct records *r, const char *session, const uint64_t *generation, struct sb_err *err)
{
	struct lease cur = { 0 };
	char at[40] = "";
	int rc;

	if (!r->fence[0])
		return 0;
	rc = lease_read(r, session, &cur, err);
	if (rc == RECORDS_NOT_FOUND)
		return 0; /* no session: the caller's own answer */
	if (rc != RECORDS_FOUND)
		return -1;
	if (strcmp(cur.owner, r->fence) == 0 && (!generation || cur.generation == *generation))
		return 0;
	if (generation)
		snprintf(at, sizeof at, " at generation %llu", (unsigned long long)*generation);
	sb_fail(err, ESTALE, "fenced: session %s is owned by %s%s (generation %llu), so manager %s%s may not write it; "
		"nothing was written", session, *cur.owner ? "manager " : "", *cur.owner ? cur.owner : "no manager",
		(unsigned long long)cur.generation, r->fence, at);
	return 1;
}

int fence_refused_exec(struct records *r, const char *exec_id, const uint64_t *generation, struct sb_err *err)
{
	char session[ID_MAX + 1];

	if (!r->fence[0])
		return 0;
	{
		struct stmt *st cleanup_stmt = NULL;
		int rc = DB_OK;

		if (prepare(r, "SELECT session FROM execs WHERE id = ?1", &st, err) != 0)
			return -1;
		bind_text(st, 1, exec_id, &rc);
		rc = step(st, rc);
		if (rc == DB_DONE)
			return 0; /* no exec: the caller's own answer */
		if (rc != DB_ROW)
			return db_fail(r, err, "reading exec %s", exec_id);
		copy_text(session, sizeof session, col_text(st, 0));
	}
	return fence_refused(r, session, generation, err);
}
