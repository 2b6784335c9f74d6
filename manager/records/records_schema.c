/* The records' schema (see records.h): its version in PRAGMA user_version, the tables and the
 * triggers that hold their rules for any writer, and the migration of an older file, in one
 * transaction. Must never misread a file written by a newer sandbox-manager, nor leave a file
 * between two versions. */
#include <sqlite3.h>
#include <stdint.h>

#include "records_internal.h"

/* The schema this code reads and writes, kept in PRAGMA user_version. A file with a newer version
 * was written by a newer sandbox-manager and is refused rather than misread; an older one is
 * migrated step by step (schema_ensure). 2: operators' resolutions of uncertain execs; 3: leases
 * (sessions.owner, sessions.lease_expires_ms) and the managers sharing a store; 4: each session's
 * network policy (sessions.network); 5: each identity's slot in the manager's id range (identity_ids);
 * 6: the network policy `proxy` (sessions.network's CHECK admits it); 7: a session's own egress
 * allow-list (sessions.egress_allow). */
#define RECORDS_SCHEMA_VERSION 7

/* Rolls back a transaction left open when its scope ends (the commit clears the pointer). */
static void txn_rollbackp(struct records **r)
{
	if (*r)
		sqlite3_exec((*r)->db, "ROLLBACK", NULL, NULL, NULL);
}

#define cleanup_txn __attribute__((cleanup(txn_rollbackp)))

static const char SCHEMA_V1[] =
	"CREATE TABLE sessions ("
	"  id TEXT PRIMARY KEY NOT NULL, identity TEXT NOT NULL, repo TEXT NOT NULL,"
	"  worktree TEXT NOT NULL, branch TEXT NOT NULL, state TEXT NOT NULL,"
	"  generation INTEGER NOT NULL, turn INTEGER NOT NULL, created_ms INTEGER NOT NULL);"
	"CREATE TABLE grants ("
	"  session TEXT NOT NULL REFERENCES sessions(id), resource TEXT NOT NULL, access TEXT NOT NULL,"
	"  PRIMARY KEY (session, resource));"
	"CREATE TABLE sandboxes ("
	"  session TEXT PRIMARY KEY NOT NULL REFERENCES sessions(id), generation INTEGER NOT NULL,"
	"  backend TEXT NOT NULL, runtime_id TEXT NOT NULL, address TEXT NOT NULL, private_dir TEXT NOT NULL,"
	"  state TEXT NOT NULL, grants_json TEXT NOT NULL, started_ms INTEGER NOT NULL, evidence TEXT);"
	"CREATE TABLE execs ("
	"  id TEXT PRIMARY KEY NOT NULL, session TEXT NOT NULL REFERENCES sessions(id), turn INTEGER NOT NULL,"
	"  state TEXT NOT NULL CHECK (state IN ('accepted', 'dispatched', 'exited', 'signaled', 'timed_out',"
	"                                       'cancelled', 'uncertain', 'refused')),"
	"  command TEXT NOT NULL, timeout_seconds INTEGER NOT NULL, generation INTEGER, nonce_hex TEXT,"
	"  sandbox TEXT, accepted_ms INTEGER NOT NULL, dispatched_ms INTEGER, finished_ms INTEGER,"
	"  result_json TEXT, receipt_json TEXT, reason TEXT, authority TEXT);"
	"CREATE INDEX execs_session_accepted ON execs (session, accepted_ms);"
	"CREATE INDEX execs_state ON execs (state);"
	/* The functions below only move states forward (their UPDATEs carry the allowed source state);
	 * this trigger holds the same line for any other writer, the sqlite3 shell included. */
	"CREATE TRIGGER execs_state_forward BEFORE UPDATE OF state ON execs"
	"  WHEN NOT ((OLD.state = 'accepted' AND NEW.state <> 'accepted')"
	"         OR (OLD.state = 'dispatched' AND NEW.state NOT IN ('accepted', 'dispatched')))"
	"  BEGIN SELECT RAISE(ABORT, 'an exec state only moves forward'); END;"
	"PRAGMA user_version = 1;";

/* Version 2: an operator's word on an uncertain exec, one row per exec (the key), never changed or
 * removed, and only for an exec recorded uncertain; the exec's own row and state stay as they were.
 * The triggers hold those lines for any writer, the sqlite3 shell included. */
static const char SCHEMA_V2[] =
	"CREATE TABLE resolutions ("
	"  exec_id TEXT PRIMARY KEY NOT NULL REFERENCES execs(id),"
	"  outcome TEXT NOT NULL CHECK (outcome IN ('ran', 'not-ran', 'unknown')),"
	"  note TEXT NOT NULL CHECK (note <> ''),"
	"  by_uid INTEGER NOT NULL, by_name TEXT, at_ms INTEGER NOT NULL);"
	"CREATE TRIGGER resolutions_uncertain_only BEFORE INSERT ON resolutions"
	"  WHEN (SELECT state FROM execs WHERE id = NEW.exec_id) IS NOT 'uncertain'"
	"  BEGIN SELECT RAISE(ABORT, 'only an uncertain exec is resolved'); END;"
	"CREATE TRIGGER resolutions_final_update BEFORE UPDATE ON resolutions"
	"  BEGIN SELECT RAISE(ABORT, 'a resolution is final'); END;"
	"CREATE TRIGGER resolutions_final_delete BEFORE DELETE ON resolutions"
	"  BEGIN SELECT RAISE(ABORT, 'a resolution is final'); END;"
	"PRAGMA user_version = 2;";

/* Version 3: several managers on one store (records_lease.c). A session's owner (a manager id, NULL
 * when released) and the wall-clock ms its lease runs to; one row per manager id, its running
 * incarnation, its control socket and its last heartbeat. Existing sessions start unowned. */
static const char SCHEMA_V3[] =
	"ALTER TABLE sessions ADD COLUMN owner TEXT;"
	"ALTER TABLE sessions ADD COLUMN lease_expires_ms INTEGER NOT NULL DEFAULT 0;"
	"CREATE INDEX sessions_owner ON sessions (owner);"
	"CREATE TABLE managers ("
	"  id TEXT PRIMARY KEY NOT NULL, incarnation TEXT NOT NULL, address TEXT NOT NULL,"
	"  heartbeat_ms INTEGER NOT NULL);"
	"PRAGMA user_version = 3;";

/* Version 4: a session's network policy (issue 26, N1). Sessions of before keep the network they
 * had the most of: open. The CHECK holds the two words for any writer. */
static const char SCHEMA_V4[] =
	"ALTER TABLE sessions ADD COLUMN network TEXT NOT NULL DEFAULT 'open' CHECK (network IN ('open', 'none'));"
	"PRAGMA user_version = 4;";

/* Version 5: each identity's own sandbox uid and gid (issue 26, N2), as a slot in the range a root
 * manager is given (identity_ids.c): one slot per identity and one identity per slot, for every
 * manager sharing the store, never changed or given back (the identity's files keep the ids). */
static const char SCHEMA_V5[] =
	"CREATE TABLE identity_ids ("
	"  identity TEXT PRIMARY KEY NOT NULL, slot INTEGER NOT NULL UNIQUE CHECK (slot >= 0),"
	"  assigned_ms INTEGER NOT NULL);"
	"CREATE TRIGGER identity_ids_final_update BEFORE UPDATE ON identity_ids"
	"  BEGIN SELECT RAISE(ABORT, 'an identity keeps its ids'); END;"
	"CREATE TRIGGER identity_ids_final_delete BEFORE DELETE ON identity_ids"
	"  BEGIN SELECT RAISE(ABORT, 'an identity keeps its ids'); END;"
	"PRAGMA user_version = 5;";

/* Version 6: the network policy `proxy` (issue 28). SQLite cannot alter a column's CHECK, and a
 * rebuilt sessions table would have to carry its rows, indexes and the tables referring to it; the
 * CHECK only widens (every row that passed it passes the new one), which is the case SQLite's
 * documentation gives its simpler procedure for (lang_altertable.html, "making other kinds of table
 * schema changes"): the table's text in sqlite_schema rewritten, schema_version bumped so every
 * connection reads it again, all inside schema_ensure's transaction. */
static const char SCHEMA_V6_OLD[] = "CHECK (network IN ('open', 'none'))";
static const char SCHEMA_V6_SQL[] =
	"PRAGMA writable_schema = ON;"
	"UPDATE sqlite_schema SET sql = replace(sql, 'CHECK (network IN (''open'', ''none''))',"
	"  'CHECK (network IN (''open'', ''none'', ''proxy''))') WHERE type = 'table' AND name = 'sessions';"
	"PRAGMA writable_schema = OFF;";

static int schema_migrate_v6(struct records *r, struct sb_err *err)
{
	static const char what[] = "migrating the records from schema version 5 to 6";
	int64_t version = 0, found = 0;
	char bump[64];

	if (query_int(r, "PRAGMA schema_version", &version, err) != 0 ||
	    query_int(r, "SELECT count(*) FROM sqlite_schema WHERE type = 'table' AND name = 'sessions'"
		      " AND instr(sql, 'CHECK (network IN (''open'', ''none''))') > 0", &found, err) != 0)
		return -1;
	/* Exactly the text version 4 wrote, or the file is not what this code knows: refused. */
	if (found != 1)
		return sb_fail(err, 0, "records: %s: the sessions table does not hold %s as version 4 wrote it", what,
			       SCHEMA_V6_OLD);
	snprintf(bump, sizeof bump, "PRAGMA schema_version = %lld;", (long long)version + 1);
	if (exec_sql(r, SCHEMA_V6_SQL, what, err) != 0 || exec_sql(r, bump, what, err) != 0 ||
	    exec_sql(r, "PRAGMA user_version = 6;", what, err) != 0)
		return -1;
	return 0;
}

/* Version 7: a session's own egress allow-list (issue 28), added to the manager's under policy
 * proxy. Sessions of before have none of their own: the manager's list alone, as they had. */
static const char SCHEMA_V7[] =
	"ALTER TABLE sessions ADD COLUMN egress_allow TEXT NOT NULL DEFAULT '';"
	"PRAGMA user_version = 7;";

static int schema_refuse_newer(const char *path, int64_t version, struct sb_err *err)
{
	return sb_fail(err, 0, "records: %s has schema version %lld, newer than this sandbox-manager understands (%d): "
		       "run the sandbox-manager that wrote it, or give this one another state directory",
		       path, (long long)version, RECORDS_SCHEMA_VERSION);
}

/* 1 -> 2, inside schema_ensure's transaction: the existing rows are not touched, only the new
 * table and its triggers are added, so a failed migration (rolled back) leaves a version 1 file. */
static int schema_migrate_v2(struct records *r, struct sb_err *err)
{
	return exec_sql(r, SCHEMA_V2, "migrating the records from schema version 1 to 2", err);
}

/* Create the schema on a new file (user_version 0), or migrate an older one, each step in turn.
 * BEGIN IMMEDIATE takes the write lock before the second read, so two managers opening one file at
 * once create or migrate it exactly once; the whole way is one transaction, so a file is never
 * left between two versions. */
int schema_ensure(struct records *r, const char *path, struct sb_err *err)
{
	struct records *txn cleanup_txn = NULL;
	int64_t version = 0;

	if (query_int(r, "PRAGMA user_version", &version, err) != 0)
		return -1;
	if (version == RECORDS_SCHEMA_VERSION)
		return 0;
	if (version > RECORDS_SCHEMA_VERSION || version < 0)
		return schema_refuse_newer(path, version, err);
	if (exec_sql(r, "BEGIN IMMEDIATE", "starting the schema transaction", err) != 0)
		return -1;
	txn = r;
	if (query_int(r, "PRAGMA user_version", &version, err) != 0)
		return -1;
	if (version > RECORDS_SCHEMA_VERSION || version < 0)
		return schema_refuse_newer(path, version, err);
	if (version == 0 && exec_sql(r, SCHEMA_V1, "creating the schema", err) != 0)
		return -1;
	if (version <= 1 && schema_migrate_v2(r, err) != 0)
		return -1;
	if (version <= 2 && exec_sql(r, SCHEMA_V3, "migrating the records from schema version 2 to 3", err) != 0)
		return -1;
	if (version <= 3 && exec_sql(r, SCHEMA_V4, "migrating the records from schema version 3 to 4", err) != 0)
		return -1;
	if (version <= 4 && exec_sql(r, SCHEMA_V5, "migrating the records from schema version 4 to 5", err) != 0)
		return -1;
	if (version <= 5 && schema_migrate_v6(r, err) != 0)
		return -1;
	if (version <= 6 && exec_sql(r, SCHEMA_V7, "migrating the records from schema version 6 to 7", err) != 0)
		return -1;
	if (exec_sql(r, "COMMIT", "committing the schema", err) != 0)
		return -1;
	txn = NULL;
	return 0;
}
