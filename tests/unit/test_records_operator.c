/* Unit tests for the records of the operator's commands (manager/records/, schema version 2): a
 * version 1 file, as sandbox-manager 0.1.0 wrote it, migrated with its rows intact (once, also by
 * two openers at once; a migration that fails leaves version 1 as it was); resolutions of uncertain
 * execs (once only, uncertain only, bounded notes, final for every writer); pages of sessions. All
 * of it again on PostgreSQL (tests/support/pgtest.h), where "version 1" is today's schema taken
 * back to version 1 (its table and triggers of version 2 dropped). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <jansson.h>
#include <limits.h>
#include <pthread.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "pathfmt.h"
#include "records.h"
#include "pgtest.h"
#include "testutil.h"

/* The second run: every test's store is a new PostgreSQL database (setup), pg_store names it. */
static bool on_postgres;
static char pg_db[64], pg_store[PATH_MAX + 128];

struct fixture {
	char dir[PATH_MAX];
	char db[PATH_MAX];
};

static int setup(void **state)
{
	struct fixture *f = calloc(1, sizeof *f);
	struct sb_err err;

	assert_non_null(f);
	snprintf(f->dir, sizeof f->dir, "/tmp/test_records_operator.XXXXXX");
	assert_non_null(mkdtemp(f->dir));
	assert_int_equal(path_fmt(f->db, sizeof f->db, &err, "%s/records.db", f->dir), 0);
	if (on_postgres)
		pgtest_new_db(pg_db, sizeof pg_db, pg_store, sizeof pg_store);
	*state = f;
	return 0;
}

static int teardown(void **state)
{
	struct fixture *f = *state;

	test_rmtree(f->dir);
	free(f);
	return 0;
}

/* ---------------------------------------------------------------- a version 1 file */

/* The schema of version 1, frozen here as sandbox-manager 0.1.0 created it: the test must not
 * follow records_schema.c if that ever changes, or it would stop proving the migration. */
static const char V1_SCHEMA[] =
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
	"CREATE TRIGGER execs_state_forward BEFORE UPDATE OF state ON execs"
	"  WHEN NOT ((OLD.state = 'accepted' AND NEW.state <> 'accepted')"
	"         OR (OLD.state = 'dispatched' AND NEW.state NOT IN ('accepted', 'dispatched')))"
	"  BEGIN SELECT RAISE(ABORT, 'an exec state only moves forward'); END;"
	"PRAGMA user_version = 1;";

/* Rows a version 1 manager left: a session with a grant and a live sandbox, one exec that exited
 * with its output, one that became uncertain, one still dispatched. */
static const char V1_ROWS[] =
	"INSERT INTO sessions VALUES ('s1', 'alice', '/srv/repo', '/vol/alice/s1', 'sandbox/s1', 'active', 2, 4, 1000);"
	"INSERT INTO grants VALUES ('s1', 'kubernetes:staging', 'read');"
	"INSERT INTO sandboxes VALUES ('s1', 2, 'process', 'process:77:88', 'unix:/x', '/state/s1.g2', 'running', '{}',"
	"  1500, NULL);"
	"INSERT INTO execs VALUES ('e1', 's1', 4, 'exited', 'echo one', 30, 2, 'ab', 'process:77:88', 2000, 2001, 2002,"
	"  '{\"status\":\"exited\",\"exit_code\":0,\"stdout\":\"one\\n\"}', '{\"nonce\":\"ab\"}', NULL, '{}');"
	"INSERT INTO execs VALUES ('e2', 's1', 4, 'uncertain', 'kubectl apply -f x', 30, 2, 'cd', 'process:77:88', 3000,"
	"  3001, 3009, NULL, NULL, 'the agent stopped answering', '{}');"
	"INSERT INTO execs VALUES ('e3', 's1', 4, 'dispatched', 'sleep 9', 30, 2, 'ef', 'process:77:88', 4000, 4001,"
	"  NULL, NULL, NULL, NULL, '{}');";

static sqlite3 *raw_open(const char *path)
{
	sqlite3 *db = NULL;

	assert_int_equal(sqlite3_open_v2(path, &db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE, NULL), SQLITE_OK);
	return db;
}

static void raw_exec(const char *path, const char *sql)
{
	sqlite3 *db;
	char *msg = NULL, pg_msg[512];

	if (on_postgres) {
		if (pgtest_exec(pg_db, sql, pg_msg, sizeof pg_msg) != 0)
			fail_msg("raw SQL failed: %s", pg_msg);
		return;
	}
	db = raw_open(path);
	if (sqlite3_exec(db, sql, NULL, NULL, &msg) != SQLITE_OK)
		fail_msg("raw SQL failed: %s", msg ? msg : "?");
	sqlite3_close(db);
}

/* The one integer a query answers. */
static int64_t raw_int(const char *path, const char *sql)
{
	sqlite3 *db;
	sqlite3_stmt *st = NULL;
	char msg[512], *text;
	int64_t v;

	if (on_postgres) {
		if (!(text = pgtest_text(pg_db, sql, 0, NULL, msg, sizeof msg)))
			fail_msg("%s: %s", sql, msg);
		v = strtoll(text, NULL, 10);
		free(text);
		return v;
	}
	db = raw_open(path);
	assert_int_equal(sqlite3_prepare_v2(db, sql, -1, &st, NULL), SQLITE_OK);
	assert_int_equal(sqlite3_step(st), SQLITE_ROW);
	v = sqlite3_column_int64(st, 0);
	sqlite3_finalize(st);
	sqlite3_close(db);
	return v;
}

/* A statement another writer (the sqlite3 shell) might run: its SQLite code. */
static int raw_try(const char *path, const char *sql)
{
	sqlite3 *db;
	int rc;

	if (on_postgres)
		return pgtest_exec(pg_db, sql, NULL, 0) == 0 ? SQLITE_OK : SQLITE_ERROR;
	db = raw_open(path);
	rc = sqlite3_exec(db, sql, NULL, NULL, NULL);
	sqlite3_close(db);
	return rc;
}

/* The schema version on the test's store. */
#define VERSION_SQL (on_postgres ? "SELECT version FROM records_schema" : "PRAGMA user_version")

/* Tables and triggers of that name on the test's store. */
static int64_t object_count(const char *path, const char *name)
{
	char sql[256];

	if (on_postgres)
		snprintf(sql, sizeof sql, "SELECT (SELECT count(*) FROM pg_class WHERE relname = '%s')"
			 " + (SELECT count(*) FROM pg_trigger WHERE tgname = '%s')", name, name);
	else
		snprintf(sql, sizeof sql, "SELECT count(*) FROM sqlite_master WHERE name = '%s'", name);
	return raw_int(path, sql);
}

static int store_open(const char *path, struct records **r, struct sb_err *err)
{
	return on_postgres ? records_open_store(pg_store, r, err) : records_open(path, r, err);
}

static struct records *open_ok(const char *path)
{
	struct records *r = NULL;
	struct sb_err err;

	if (store_open(path, &r, &err) != 0)
		fail_msg("records_open: %s", err.msg);
	return r;
}

/* PostgreSQL's version 1: today's schema without version 2's table and its triggers, nor version
 * 3's, 4's, 5's and 7's columns and tables. */
static const char PG_TO_V1[] =
	"DROP TABLE identity_ids; DROP FUNCTION identity_ids_final; DROP TABLE managers; DROP INDEX sessions_owner;"
	" ALTER TABLE sessions DROP COLUMN owner, DROP COLUMN lease_expires_ms, DROP COLUMN network,"
	"  DROP COLUMN egress_allow;"
	" DROP TABLE resolutions; DROP FUNCTION resolutions_uncertain_only, resolutions_final;"
	" UPDATE records_schema SET version = 1;";

static void v1_file(const char *path)
{
	if (on_postgres) {
		records_close(open_ok(path));
		raw_exec(path, PG_TO_V1);
	} else {
		raw_exec(path, V1_SCHEMA);
	}
	raw_exec(path, V1_ROWS);
	assert_int_equal(raw_int(path, VERSION_SQL), 1);
}

static json_t *exec_record(struct records *r, const char *id)
{
	struct records_query q = { .exec_id = id };
	json_t *page = NULL, *rec;
	struct sb_err err;

	if (records_page(r, &q, &page, &err) != RECORDS_FOUND)
		fail_msg("records_page %s: %s", id, err.msg);
	rec = json_incref(json_array_get(json_object_get(page, "records"), 0));
	json_decref(page);
	assert_non_null(rec);
	return rec;
}

static const char *str_at(json_t *o, const char *path_a, const char *path_b)
{
	json_t *v = json_object_get(o, path_a);

	return json_string_value(path_b ? json_object_get(v, path_b) : v);
}

static int resolve(struct records *r, const char *id, const char *outcome, const char *note, struct sb_err *err)
{
	struct exec_resolution res = { .outcome = outcome, .note = note, .by_uid = 1000, .by_name = "ops" };

	return records_exec_resolve(r, id, &res, err);
}

/* ---------------------------------------------------------------- migration */

static void test_migrate_v1_keeps_rows(void **state)
{
	struct fixture *f = *state;
	struct records_query q = { .session = "s1", .limit = 20 };
	struct records *r;
	struct session_row s;
	struct exec_row *e = calloc(1, sizeof *e);
	struct sb_err err;
	json_t *grants, *page, *rec;

	assert_non_null(e);
	v1_file(f->db);
	r = open_ok(f->db);
	assert_int_equal(raw_int(f->db, VERSION_SQL), 7);

	/* every row as the version 1 manager left it */
	assert_int_equal(records_session_get(r, "s1", &s, &err), RECORDS_FOUND);
	assert_string_equal(s.identity, "alice");
	assert_string_equal(s.worktree, "/vol/alice/s1");
	assert_int_equal(s.generation, 2);
	assert_int_equal(s.turn, 4);
	grants = records_grants(r, "s1", &err);
	assert_non_null(grants);
	assert_string_equal(json_string_value(json_object_get(grants, "kubernetes:staging")), "read");
	json_decref(grants);
	assert_int_equal(records_exec_get(r, "e1", e, &err), RECORDS_FOUND);
	assert_string_equal(e->state, "exited");
	assert_string_equal(e->command, "echo one");
	assert_int_equal(e->finished_ms, 2002);
	assert_int_equal(records_exec_get(r, "e3", e, &err), RECORDS_FOUND);
	assert_string_equal(e->state, "dispatched");
	assert_int_equal(records_page(r, &q, &page, &err), RECORDS_FOUND);
	assert_int_equal(json_array_size(json_object_get(page, "records")), 3);
	rec = json_array_get(json_object_get(page, "records"), 2); /* oldest last */
	assert_string_equal(str_at(rec, "exec_id", NULL), "e1");
	assert_string_equal(str_at(rec, "result", "stdout"), "one\n");
	assert_true(json_is_null(json_object_get(rec, "resolution")));
	json_decref(page);

	/* and the new table works on them: the uncertain exec is resolved, the others are refused */
	assert_int_equal(resolve(r, "e2", "not-ran", "checked the cluster: no such apply", &err), RECORDS_FOUND);
	assert_int_equal(resolve(r, "e1", "ran", "it exited", &err), RECORDS_REFUSED);
	assert_contains(err.msg, "exec e1 is exited, not uncertain");
	assert_int_equal(resolve(r, "e3", "ran", "running", &err), RECORDS_REFUSED);
	rec = exec_record(r, "e2");
	assert_string_equal(str_at(rec, "state", NULL), "uncertain");
	assert_string_equal(str_at(rec, "resolution", "outcome"), "not-ran");
	assert_string_equal(str_at(rec, "resolution", "note"), "checked the cluster: no such apply");
	assert_string_equal(str_at(rec, "reason", NULL), "the agent stopped answering");
	json_decref(rec);
	records_close(r);

	/* a second open of the migrated file changes nothing */
	r = open_ok(f->db);
	assert_int_equal(raw_int(f->db, VERSION_SQL), 7);
	assert_int_equal(raw_int(f->db, "SELECT count(*) FROM resolutions"), 1);
	assert_int_equal(raw_int(f->db, "SELECT count(*) FROM execs"), 3);
	records_close(r);
	free(e);
}

/* A migration that cannot complete (here: a table of its name is already there) is rolled back
 * whole: the file stays version 1 with every row, and the open says why. */
static void test_migrate_failure_leaves_v1(void **state)
{
	struct fixture *f = *state;
	struct records *r = NULL;
	struct sb_err err;

	v1_file(f->db);
	raw_exec(f->db, on_postgres ? "CREATE TABLE resolutions (x int);" : "CREATE TABLE resolutions (x);");
	assert_int_equal(store_open(f->db, &r, &err), -1);
	assert_null(r);
	assert_contains(err.msg, "migrating the records from schema version 1 to 2");
	assert_int_equal(raw_int(f->db, VERSION_SQL), 1);
	assert_int_equal(raw_int(f->db, "SELECT count(*) FROM execs"), 3);
	assert_int_equal(object_count(f->db, on_postgres ? "resolutions_final" : "resolutions_final_update"), 0);
}

/* A rollback-mode file another connection keeps a write lock on (an operator's `sqlite3` shell in a
 * transaction: reads go on, the switch to WAL waits): the open fails with the reason once the busy
 * timeout is spent, and leaves the file as it was; it does not try again for as long as the lock
 * is kept. */
static void test_wal_switch_locked_fails(void **state)
{
	struct fixture *f = *state;
	struct records *r = NULL;
	struct sb_err err;
	sqlite3 *holder;
	time_t t0;

	v1_file(f->db);
	holder = raw_open(f->db);
	assert_int_equal(sqlite3_exec(holder, "BEGIN IMMEDIATE", NULL, NULL, NULL), SQLITE_OK);
	t0 = time(NULL);
	assert_int_equal(records_open(f->db, &r, &err), -1);
	assert_null(r);
	assert_contains(err.msg, "switching");
	assert_contains(err.msg, "locked");
	/* Within the 5 s busy timeout and one more wait of the handler, not a try after a try: the bound
	 * only tells "gave up" from "kept trying" (a busy machine stays far inside it). */
	assert_true(time(NULL) - t0 < 30);
	assert_int_equal(sqlite3_exec(holder, "COMMIT", NULL, NULL, NULL), SQLITE_OK);
	sqlite3_close(holder);
	assert_int_equal(raw_int(f->db, VERSION_SQL), 1);
	assert_int_equal(raw_int(f->db, "SELECT count(*) FROM execs"), 3);
}

struct opener {
	pthread_t thread;
	const char *path;
	struct records *r;
	char error[SB_ERR_MSG_MAX];
};

static void *opener_main(void *arg)
{
	struct opener *o = arg;
	struct sb_err err;

	if (store_open(o->path, &o->r, &err) != 0)
		snprintf(o->error, sizeof o->error, "%s", err.msg);
	return NULL;
}

/* Four openers of one version 1 file at once: each opens it, and it is migrated exactly once. */
static void test_migrate_concurrent_once(void **state)
{
	struct fixture *f = *state;
	struct opener o[4];

	v1_file(f->db);
	for (int i = 0; i < 4; i++) {
		o[i] = (struct opener){ .path = f->db };
		assert_int_equal(pthread_create(&o[i].thread, NULL, opener_main, &o[i]), 0);
	}
	for (int i = 0; i < 4; i++) {
		assert_int_equal(pthread_join(o[i].thread, NULL), 0);
		if (o[i].error[0])
			fail_msg("opener %d: %s", i, o[i].error);
		records_close(o[i].r);
	}
	assert_int_equal(raw_int(f->db, VERSION_SQL), 7);
	assert_int_equal(object_count(f->db, "resolutions"), 1);
	assert_int_equal(raw_int(f->db, "SELECT count(*) FROM execs"), 3);
}

static void test_newer_version_refused(void **state)
{
	struct fixture *f = *state;
	struct records *r = NULL;
	struct sb_err err;

	v1_file(f->db);
	raw_exec(f->db, on_postgres ? "UPDATE records_schema SET version = 8;" : "PRAGMA user_version = 8;");
	assert_int_equal(store_open(f->db, &r, &err), -1);
	assert_contains(err.msg, "has schema version 8, newer than this sandbox-manager understands (7)");
	assert_int_equal(raw_int(f->db, VERSION_SQL), 8);
}

/* ---------------------------------------------------------------- resolutions */

static void exec_in_state(struct records *r, const char *id, const char *state)
{
	struct exec_row *e = calloc(1, sizeof *e);
	struct sb_err err;

	assert_non_null(e);
	snprintf(e->id, sizeof e->id, "%s", id);
	snprintf(e->session, sizeof e->session, "s1");
	snprintf(e->command, sizeof e->command, "true");
	e->timeout_seconds = 10;
	must(records_exec_insert(r, e, &err), &err, "inserting an exec");
	free(e);
	if (strcmp(state, "accepted") == 0)
		return;
	must(records_exec_dispatched(r, id, 1, "ab", "process:1:2", NULL, &err), &err, "dispatching");
	if (strcmp(state, "dispatched") != 0)
		must(records_exec_finish(r, id, state, NULL, NULL, "test", &err), &err, "finishing");
}

static void session_s1(struct records *r)
{
	struct session_row s = { .generation = 1 };
	struct sb_err err;

	snprintf(s.id, sizeof s.id, "s1");
	snprintf(s.identity, sizeof s.identity, "alice");
	must(records_session_insert(r, &s, &err), &err, "inserting a session");
}

static void test_resolve_rules(void **state)
{
	struct fixture *f = *state;
	struct records *r = open_ok(f->db);
	static const char *const others[] = { "accepted", "dispatched", "exited", "signaled", "timed_out",
					      "cancelled", "refused" };
	char long_note[RECORDS_NOTE_MAX + 2];
	struct exec_resolution res = { .outcome = "ran", .note = "first", .by_uid = 4242, .by_name = NULL };
	struct sb_err err;
	json_t *rec;

	session_s1(r);
	exec_in_state(r, "u1", "uncertain");
	for (size_t i = 0; i < sizeof others / sizeof others[0]; i++) {
		exec_in_state(r, others[i], others[i]);
		assert_int_equal(resolve(r, others[i], "ran", "note", &err), RECORDS_REFUSED);
		assert_contains(err.msg, "not uncertain");
	}
	assert_int_equal(resolve(r, "nosuch", "ran", "note", &err), RECORDS_NOT_FOUND);

	/* bad input: refused before anything is written */
	assert_int_equal(resolve(r, "u1", "maybe", "note", &err), -1);
	assert_int_equal(err.errnum, EINVAL);
	assert_int_equal(resolve(r, "u1", "ran", "", &err), -1);
	assert_int_equal(resolve(r, "u1", "ran", NULL, &err), -1);
	memset(long_note, 'n', sizeof long_note - 1);
	long_note[sizeof long_note - 1] = '\0';
	assert_int_equal(resolve(r, "u1", "ran", long_note, &err), -1);
	assert_contains(err.msg, "1 to 4096 bytes");
	assert_int_equal(resolve(r, "u1", "ran", "caf\xc3", &err), -1);
	assert_int_equal(raw_int(f->db, "SELECT count(*) FROM resolutions"), 0);

	/* the longest note, then the first word stays */
	long_note[RECORDS_NOTE_MAX] = '\0';
	res.note = long_note;
	assert_int_equal(records_exec_resolve(r, "u1", &res, &err), RECORDS_FOUND);
	assert_true(res.at_ms > 0);
	assert_int_equal(resolve(r, "u1", "not-ran", "second", &err), RECORDS_REFUSED);
	assert_contains(err.msg, "already resolved (ran)");
	rec = exec_record(r, "u1");
	assert_string_equal(str_at(rec, "state", NULL), "uncertain");
	assert_string_equal(str_at(rec, "resolution", "outcome"), "ran");
	assert_int_equal(strlen(str_at(rec, "resolution", "note")), RECORDS_NOTE_MAX);
	assert_int_equal(json_integer_value(json_object_get(json_object_get(rec, "resolution"), "by_uid")), 4242);
	assert_true(json_is_null(json_object_get(json_object_get(rec, "resolution"), "by_name")));
	assert_int_equal(json_integer_value(json_object_get(json_object_get(rec, "resolution"), "at_ms")), res.at_ms);
	json_decref(rec);
	records_close(r);

	/* final for any writer: the triggers refuse what records.c never does */
	assert_int_not_equal(raw_try(f->db, "UPDATE resolutions SET outcome = 'not-ran'"), SQLITE_OK);
	assert_int_not_equal(raw_try(f->db, "DELETE FROM resolutions"), SQLITE_OK);
	assert_int_not_equal(raw_try(f->db, "INSERT INTO resolutions VALUES ('exited', 'ran', 'x', 0, NULL, 1)"),
			     SQLITE_OK);
	assert_int_equal(raw_int(f->db, "SELECT count(*) FROM resolutions WHERE outcome = 'ran'"), 1);
}

/* --state unresolved: the uncertain execs no operator has resolved; uncertain still finds both. */
static void test_resolve_state_filter(void **state)
{
	struct fixture *f = *state;
	struct records *r = open_ok(f->db);
	struct records_query q = { .session = "s1", .limit = 20, .state = "unresolved" };
	json_t *page = NULL;
	struct sb_err err;

	session_s1(r);
	exec_in_state(r, "u1", "uncertain");
	exec_in_state(r, "u2", "uncertain");
	exec_in_state(r, "x1", "exited");
	assert_int_equal(resolve(r, "u1", "unknown", "could not tell", &err), RECORDS_FOUND);
	assert_int_equal(records_page(r, &q, &page, &err), RECORDS_FOUND);
	assert_int_equal(json_array_size(json_object_get(page, "records")), 1);
	assert_string_equal(str_at(json_array_get(json_object_get(page, "records"), 0), "exec_id", NULL), "u2");
	json_decref(page);
	q.state = "uncertain";
	assert_int_equal(records_page(r, &q, &page, &err), RECORDS_FOUND);
	assert_int_equal(json_array_size(json_object_get(page, "records")), 2);
	json_decref(page);
	q.state = "settled";
	assert_int_equal(records_page(r, &q, &page, &err), -1);
	assert_contains(err.msg, "or unresolved");
	records_close(r);
}

/* ---------------------------------------------------------------- pages of sessions */

static void session_with(struct records *r, const char *id, const char *identity, const char *state, int64_t created)
{
	struct session_row s = { .generation = 3, .created_ms = created };
	struct sb_err err;

	snprintf(s.id, sizeof s.id, "%s", id);
	snprintf(s.identity, sizeof s.identity, "%s", identity);
	snprintf(s.state, sizeof s.state, "%s", state);
	must(records_session_insert(r, &s, &err), &err, "inserting a session");
}

static json_t *sessions(struct records *r, struct sessions_query *q)
{
	json_t *page = NULL;
	struct sb_err err;

	if (q->limit == 0)
		q->limit = RECORDS_SESSIONS_LIMIT_DEFAULT;
	if (records_sessions_page(r, q, &page, &err) != RECORDS_FOUND)
		fail_msg("records_sessions_page: %s", err.msg);
	return page;
}

/* The session ids of a page, newest first, as "a,b,c". */
static void ids_are(json_t *page, const char *expected)
{
	char ids[512] = "";
	size_t i;
	json_t *s;

	json_array_foreach(json_object_get(page, "sessions"), i, s)
		snprintf(ids + strlen(ids), sizeof ids - strlen(ids), "%s%s", i ? "," : "", str_at(s, "session", NULL));
	assert_string_equal(ids, expected);
}

static void test_sessions_page(void **state)
{
	struct fixture *f = *state;
	struct records *r = open_ok(f->db);
	struct sessions_query q = { 0 };
	struct sandbox_row sb = { .generation = 3 };
	struct exec_row *e = calloc(1, sizeof *e);
	struct sb_err err;
	json_t *page, *s1;

	assert_non_null(e);
	session_with(r, "s1", "alice", "active", 1000);
	session_with(r, "s2", "bob", "reserved", 2000);
	session_with(r, "s3", "alice", "deleted", 3000);
	session_with(r, "s4", "alice", "active", 4000);
	snprintf(sb.session, sizeof sb.session, "s1");
	snprintf(sb.backend, sizeof sb.backend, "process");
	snprintf(sb.runtime_id, sizeof sb.runtime_id, "process:10:20");
	snprintf(sb.state, sizeof sb.state, "running");
	must(records_sandbox_upsert(r, &sb, &err), &err, "recording a sandbox");
	for (int i = 0; i < 2; i++) {
		memset(e, 0, sizeof *e);
		snprintf(e->id, sizeof e->id, "e%d", i);
		snprintf(e->session, sizeof e->session, "s1");
		snprintf(e->command, sizeof e->command, "true");
		e->accepted_ms = 5000 + i;
		must(records_exec_insert(r, e, &err), &err, "inserting an exec");
	}
	must(records_exec_finish(r, "e1", "refused", NULL, NULL, "test", &err), &err, "finishing");

	/* deleted sessions are left out unless asked for */
	page = sessions(r, &q);
	ids_are(page, "s4,s2,s1");
	assert_null(json_object_get(page, "next_before"));
	s1 = json_array_get(json_object_get(page, "sessions"), 2);
	assert_string_equal(str_at(s1, "identity", NULL), "alice");
	assert_string_equal(str_at(s1, "state", NULL), "active");
	assert_string_equal(str_at(s1, "sandbox", NULL), "process:10:20");
	assert_int_equal(json_integer_value(json_object_get(s1, "generation")), 3);
	assert_int_equal(json_integer_value(json_object_get(s1, "created_ms")), 1000);
	assert_string_equal(str_at(s1, "last_exec", "exec_id"), "e1");
	assert_string_equal(str_at(s1, "last_exec", "state"), "refused");
	assert_int_equal(json_integer_value(json_object_get(json_object_get(s1, "last_exec"), "accepted_ms")), 5001);
	assert_true(json_is_null(json_object_get(json_array_get(json_object_get(page, "sessions"), 0), "last_exec")));
	assert_true(json_is_null(json_object_get(json_array_get(json_object_get(page, "sessions"), 0), "sandbox")));
	json_decref(page);

	/* a sandbox proven gone is no sandbox */
	must(records_sandbox_set_state(r, "s1", 3, "gone", "pidfd: exited", &err), &err, "sandbox gone");
	q.identity = "alice";
	page = sessions(r, &q);
	ids_are(page, "s4,s1");
	assert_true(json_is_null(json_object_get(json_array_get(json_object_get(page, "sessions"), 1), "sandbox")));
	json_decref(page);
	q.all = true;
	page = sessions(r, &q);
	ids_are(page, "s4,s3,s1");
	json_decref(page);
	q = (struct sessions_query){ .state = "deleted" };
	page = sessions(r, &q);
	ids_are(page, "s3");
	json_decref(page);

	/* pages: each session on one page, next_before until the last */
	q = (struct sessions_query){ .all = true, .limit = 2 };
	page = sessions(r, &q);
	ids_are(page, "s4,s3");
	assert_string_equal(str_at(page, "next_before", NULL), "s3");
	json_decref(page);
	q.before = "s3";
	page = sessions(r, &q);
	ids_are(page, "s2,s1");
	assert_null(json_object_get(page, "next_before"));
	json_decref(page);

	/* refusals */
	q = (struct sessions_query){ .limit = 10, .before = "nosuch" };
	assert_int_equal(records_sessions_page(r, &q, &page, &err), RECORDS_NOT_FOUND);
	q = (struct sessions_query){ .limit = 10, .state = "sleeping" };
	assert_int_equal(records_sessions_page(r, &q, &page, &err), -1);
	assert_contains(err.msg, "one of active, deleting, deleted, reserved");
	q = (struct sessions_query){ .limit = RECORDS_SESSIONS_LIMIT_MAX + 1 };
	assert_int_equal(records_sessions_page(r, &q, &page, &err), -1);
	free(e);
	records_close(r);
}

/* Many sessions with the longest ids: a page stops before its budget, and walking the pages by
 * next_before visits each session once. */
static void test_sessions_page_budget(void **state)
{
	struct fixture *f = *state;
	struct records *r = open_ok(f->db);
	struct sessions_query q = { .limit = RECORDS_SESSIONS_LIMIT_MAX, .budget = RECORDS_PAGE_MIN_BYTES };
	char id[65], before[65] = "";
	int seen = 0, pages = 0;
	for (int i = 0; i < 600; i++) {
		snprintf(id, sizeof id, "%064d", i);
		session_with(r, id, "alice", "active", 1000 + i);
	}
	for (;;) {
		json_t *page = sessions(r, &q), *next;
		char *text = json_dumps(json_object_get(page, "sessions"), JSON_COMPACT);

		assert_non_null(text);
		assert_true(strlen(text) <= RECORDS_PAGE_MIN_BYTES);
		free(text);
		seen += (int)json_array_size(json_object_get(page, "sessions"));
		pages++;
		next = json_object_get(page, "next_before");
		if (!next) {
			json_decref(page);
			break;
		}
		snprintf(before, sizeof before, "%s", json_string_value(next));
		q.before = before;
		json_decref(page);
	}
	assert_int_equal(seen, 600);
	assert_true(pages > 1);
	records_close(r);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_migrate_v1_keeps_rows, setup, teardown),
		cmocka_unit_test_setup_teardown(test_migrate_failure_leaves_v1, setup, teardown),
		cmocka_unit_test_setup_teardown(test_migrate_concurrent_once, setup, teardown),
		cmocka_unit_test_setup_teardown(test_newer_version_refused, setup, teardown),
		cmocka_unit_test_setup_teardown(test_resolve_rules, setup, teardown),
		cmocka_unit_test_setup_teardown(test_resolve_state_filter, setup, teardown),
		cmocka_unit_test_setup_teardown(test_sessions_page, setup, teardown),
		cmocka_unit_test_setup_teardown(test_sessions_page_budget, setup, teardown),
	};

	/* SQLite's file alone: its lock and journal mode. */
	const struct CMUnitTest sqlite_only[] = {
		cmocka_unit_test_setup_teardown(test_wal_switch_locked_fails, setup, teardown),
	};

	int failed = cmocka_run_group_tests_name("records_operator on sqlite", tests, NULL, NULL);

	failed += cmocka_run_group_tests_name("records_operator, the SQLite file", sqlite_only, NULL, NULL);

	on_postgres = true;
	return failed + pgtest_run_group("records_operator on postgres", tests, sizeof tests / sizeof tests[0]);
}
