/* The PostgreSQL store's schema (see records.h): its version in the one-row table records_schema,
 * the same tables, rules and steps as the SQLite store's (records_schema.c: version 1 the rows,
 * version 2 operators' resolutions, version 3 leases and managers, 4 the network policy, 5 identity ids, 6 the policy proxy, 7 a session's egress allow-list), its triggers holding the rules for any writer (psql
 * included), and the migration of an older schema in one transaction under an advisory lock, so
 * two managers starting at once migrate it once. Must never run on a schema newer than this code
 * knows, nor leave one between two versions. */
#include <stdint.h>

#include "records_internal.h"

/* The same numbers as records_schema.c's: a version means the same tables in either store. */
#define PG_SCHEMA_VERSION 7
#define STR_(x) #x
#define STR(x) STR_(x) /* a constant into SQL text */
/* pg_advisory_xact_lock's key for the migration: "sbrecord" in ASCII. */
#define PG_SCHEMA_LOCK "7232901951424176740"

/* Text is compared as bytes (COLLATE "C"), as SQLite's BINARY does, so pages and lists come in the
 * same order from either store; "rowid" is the order of insertion SQLite keeps on its own, the
 * last column of version 1's tables so that a row given by position (psql, a test) reads as it does in SQLite. */
static const char PG_SCHEMA_V1[] =
	"CREATE TABLE sessions ("
	"  id TEXT COLLATE \"C\" PRIMARY KEY, identity TEXT COLLATE \"C\" NOT NULL, repo TEXT NOT NULL,"
	"  worktree TEXT NOT NULL, branch TEXT NOT NULL, state TEXT COLLATE \"C\" NOT NULL,"
	"  generation BIGINT NOT NULL, turn BIGINT NOT NULL, created_ms BIGINT NOT NULL,"
	"  rowid BIGINT GENERATED ALWAYS AS IDENTITY UNIQUE);"
	"CREATE TABLE grants ("
	"  session TEXT COLLATE \"C\" NOT NULL REFERENCES sessions(id), resource TEXT COLLATE \"C\" NOT NULL,"
	"  access TEXT NOT NULL, PRIMARY KEY (session, resource));"
	"CREATE TABLE sandboxes ("
	"  session TEXT COLLATE \"C\" PRIMARY KEY REFERENCES sessions(id), generation BIGINT NOT NULL,"
	"  backend TEXT NOT NULL, runtime_id TEXT NOT NULL, address TEXT NOT NULL, private_dir TEXT NOT NULL,"
	"  state TEXT COLLATE \"C\" NOT NULL, grants_json TEXT NOT NULL, started_ms BIGINT NOT NULL, evidence TEXT);"
	"CREATE TABLE execs ("
	"  id TEXT COLLATE \"C\" PRIMARY KEY, session TEXT COLLATE \"C\" NOT NULL REFERENCES sessions(id),"
	"  turn BIGINT NOT NULL,"
	"  state TEXT COLLATE \"C\" NOT NULL CHECK (state IN ('accepted', 'dispatched', 'exited', 'signaled',"
	"                                       'timed_out', 'cancelled', 'uncertain', 'refused')),"
	"  command TEXT NOT NULL, timeout_seconds BIGINT NOT NULL, generation BIGINT, nonce_hex TEXT,"
	"  sandbox TEXT, accepted_ms BIGINT NOT NULL, dispatched_ms BIGINT, finished_ms BIGINT,"
	"  result_json TEXT, receipt_json TEXT, reason TEXT, authority TEXT,"
	"  rowid BIGINT GENERATED ALWAYS AS IDENTITY UNIQUE);"
	"CREATE INDEX execs_session_accepted ON execs (session, accepted_ms);"
	"CREATE INDEX execs_state ON execs (state);"
	/* The functions of records_execs.c only move states forward (their UPDATEs carry the allowed
	 * source state); this trigger holds the same line for any other writer. */
	"CREATE FUNCTION execs_state_forward() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN"
	"  IF NOT ((OLD.state = 'accepted' AND NEW.state <> 'accepted')"
	"       OR (OLD.state = 'dispatched' AND NEW.state NOT IN ('accepted', 'dispatched'))) THEN"
	"    RAISE EXCEPTION 'an exec state only moves forward';"
	"  END IF; RETURN NEW; END $$;"
	"CREATE TRIGGER execs_state_forward BEFORE UPDATE OF state ON execs"
	"  FOR EACH ROW EXECUTE FUNCTION execs_state_forward();";

/* Version 2: an operator's word on an uncertain exec, one row per exec, never changed or removed,
 * and only for an exec recorded uncertain (records_schema.c's SCHEMA_V2). */
static const char PG_SCHEMA_V2[] =
	"CREATE TABLE resolutions ("
	"  exec_id TEXT COLLATE \"C\" PRIMARY KEY REFERENCES execs(id),"
	"  outcome TEXT NOT NULL CHECK (outcome IN ('ran', 'not-ran', 'unknown')),"
	"  note TEXT NOT NULL CHECK (note <> ''),"
	"  by_uid BIGINT NOT NULL, by_name TEXT, at_ms BIGINT NOT NULL);"
	"CREATE FUNCTION resolutions_uncertain_only() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN"
	"  IF (SELECT state FROM execs WHERE id = NEW.exec_id) IS DISTINCT FROM 'uncertain' THEN"
	"    RAISE EXCEPTION 'only an uncertain exec is resolved';"
	"  END IF; RETURN NEW; END $$;"
	"CREATE TRIGGER resolutions_uncertain_only BEFORE INSERT ON resolutions"
	"  FOR EACH ROW EXECUTE FUNCTION resolutions_uncertain_only();"
	"CREATE FUNCTION resolutions_final() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN"
	"  RAISE EXCEPTION 'a resolution is final'; END $$;"
	"CREATE TRIGGER resolutions_final BEFORE UPDATE OR DELETE ON resolutions"
	"  FOR EACH ROW EXECUTE FUNCTION resolutions_final();";

/* Version 3: leases and the managers sharing the store (records_schema.c's SCHEMA_V3). The new
 * columns come after rowid here: code names its columns, never takes them by position. */
static const char PG_SCHEMA_V3[] =
	"ALTER TABLE sessions ADD COLUMN owner TEXT COLLATE \"C\","
	"  ADD COLUMN lease_expires_ms BIGINT NOT NULL DEFAULT 0;"
	"CREATE INDEX sessions_owner ON sessions (owner);"
	"CREATE TABLE managers ("
	"  id TEXT COLLATE \"C\" PRIMARY KEY, incarnation TEXT NOT NULL, address TEXT NOT NULL,"
	"  heartbeat_ms BIGINT NOT NULL);";

/* Version 4: a session's network policy (records_schema.c's SCHEMA_V4). */
static const char PG_SCHEMA_V4[] =
	"ALTER TABLE sessions ADD COLUMN network TEXT COLLATE \"C\" NOT NULL DEFAULT 'open'"
	"  CHECK (network IN ('open', 'none'));";

/* Version 6: the network policy `proxy` (records_schema.c's schema_migrate_v6): the column's CHECK,
 * named by PostgreSQL's rule for a column constraint (table_column_check), widened. */
static const char PG_SCHEMA_V6[] =
	"ALTER TABLE sessions DROP CONSTRAINT sessions_network_check,"
	"  ADD CONSTRAINT sessions_network_check CHECK (network IN ('open', 'none', 'proxy'));";

/* Version 7: a session's own egress allow-list (records_schema.c's SCHEMA_V7). */
static const char PG_SCHEMA_V7[] = "ALTER TABLE sessions ADD COLUMN egress_allow TEXT NOT NULL DEFAULT '';";

/* Version 5: each identity's slot in the manager's id range (records_schema.c's SCHEMA_V5). */
static const char PG_SCHEMA_V5[] =
	"CREATE TABLE identity_ids ("
	"  identity TEXT COLLATE \"C\" PRIMARY KEY, slot BIGINT NOT NULL UNIQUE CHECK (slot >= 0),"
	"  assigned_ms BIGINT NOT NULL);"
	"CREATE FUNCTION identity_ids_final() RETURNS trigger LANGUAGE plpgsql AS"
	"  $$ BEGIN RAISE EXCEPTION 'an identity keeps its ids'; END $$;"
	"CREATE TRIGGER identity_ids_final BEFORE UPDATE OR DELETE ON identity_ids"
	"  FOR EACH ROW EXECUTE FUNCTION identity_ids_final();";

/* Rolls back a transaction left open when its scope ends (the commit clears the pointer). */
static void txn_rollbackp(struct records **r)
{
	if (*r)
		pg_exec(*r, "ROLLBACK");
}

#define cleanup_txn __attribute__((cleanup(txn_rollbackp)))

static int pg_schema_refuse_newer(struct records *r, int64_t version, struct sb_err *err)
{
	return sb_fail(err, 0, "records: the store %s has schema version %lld, newer than this sandbox-manager "
		       "understands (%d): run the sandbox-manager that wrote it, or give this one another database",
		       r->name, (long long)version, PG_SCHEMA_VERSION);
}

/* The whole way is one transaction, the advisory lock taken before the version is read: two
 * managers starting on one new database create it once, and a failed step (rolled back) leaves
 * the version it started from. */
int pg_schema_ensure(struct records *r, struct sb_err *err)
{
	struct records *txn cleanup_txn = NULL;
	int64_t version = 0;

	if (exec_sql(r, "BEGIN", "starting the schema transaction", err) != 0)
		return -1;
	txn = r;
	if (exec_sql(r, "SELECT pg_advisory_xact_lock(" PG_SCHEMA_LOCK ");"
		     " CREATE TABLE IF NOT EXISTS records_schema (version BIGINT NOT NULL)",
		     "locking the schema", err) != 0 ||
	    query_int(r, "SELECT coalesce(max(version), 0) FROM records_schema", &version, err) != 0)
		return -1;
	if (version > PG_SCHEMA_VERSION || version < 0)
		return pg_schema_refuse_newer(r, version, err);
	if (version == PG_SCHEMA_VERSION) {
		txn = NULL;
		return exec_sql(r, "COMMIT", "ending the schema transaction", err);
	}
	if (version == 0 && exec_sql(r, PG_SCHEMA_V1, "creating the schema", err) != 0)
		return -1;
	if (version <= 1 && exec_sql(r, PG_SCHEMA_V2, "migrating the records from schema version 1 to 2", err) != 0)
		return -1;
	if (version <= 2 && exec_sql(r, PG_SCHEMA_V3, "migrating the records from schema version 2 to 3", err) != 0)
		return -1;
	if (version <= 3 && exec_sql(r, PG_SCHEMA_V4, "migrating the records from schema version 3 to 4", err) != 0)
		return -1;
	if (version <= 4 && exec_sql(r, PG_SCHEMA_V5, "migrating the records from schema version 4 to 5", err) != 0)
		return -1;
	if (version <= 5 && exec_sql(r, PG_SCHEMA_V6, "migrating the records from schema version 5 to 6", err) != 0)
		return -1;
	if (version <= 6 && exec_sql(r, PG_SCHEMA_V7, "migrating the records from schema version 6 to 7", err) != 0)
		return -1;
	if (exec_sql(r, "DELETE FROM records_schema; INSERT INTO records_schema VALUES (" STR(PG_SCHEMA_VERSION) ")",
		     "recording the schema version", err) != 0 ||
	    exec_sql(r, "COMMIT", "committing the schema", err) != 0)
		return -1;
	txn = NULL;
	return 0;
}
