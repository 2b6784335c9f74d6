/* Unit tests for the leases, the managers and the fence of manager/records/ (schema version 3),
 * on SQLite and again on PostgreSQL (tests/support/pgtest.h): a version 2 store migrated with its
 * rows (a failed migration leaves version 2), the four cases of records_lease_take, two managers
 * taking one expired session at once (one wins), registration refused while another incarnation's
 * heartbeat is fresh, heartbeats that renew every lease of theirs and are refused to a stale
 * incarnation, a clean stop that releases; and every fenced write refused, with the row unchanged,
 * to the manager whose session was taken over, accepted again for the new owner, the generation
 * check of exec dispatched and sandbox upsert, and the same writes accepted without a fence. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "records.h"
#include "pgtest.h"
#include "testutil.h"

static bool on_postgres;
static char pg_db[64], pg_store[PATH_MAX + 128];

struct fixture {
	char dir[PATH_MAX];
	char db[PATH_MAX + 16];
};

/* ---------------------------------------------------------------- helpers */

static int setup(void **state)
{
	struct fixture *f = calloc(1, sizeof *f);

	assert_non_null(f);
	snprintf(f->dir, sizeof f->dir, "/tmp/test_records_lease.XXXXXX");
	assert_non_null(mkdtemp(f->dir));
	snprintf(f->db, sizeof f->db, "%s/records.db", f->dir);
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

static int store_open(const char *path, struct records **r, struct sb_err *err)
{
	return on_postgres ? records_open_store(pg_store, r, err) : records_open(path, r, err);
}

/* A handle on the test's store, fenced as manager fence (NULL: none). */
static struct records *open_ok(const char *path, const char *fence)
{
	struct records *r = NULL;
	struct sb_err err;

	if (store_open(path, &r, &err) != 0)
		fail_msg("records_open: %s", err.msg);
	if (fence)
		records_set_fence(r, fence);
	return r;
}

/* Raw SQL on the test's store, around records.h. */
static void raw_exec(const char *path, const char *sql)
{
	char msg[512];
	sqlite3 *db = NULL;

	if (on_postgres) {
		if (pgtest_exec(pg_db, sql, msg, sizeof msg) != 0)
			fail_msg("%s: %s", sql, msg);
		return;
	}
	assert_int_equal(sqlite3_open_v2(path, &db, SQLITE_OPEN_READWRITE, NULL), SQLITE_OK);
	if (sqlite3_exec(db, sql, NULL, NULL, NULL) != SQLITE_OK)
		fail_msg("%s: %s", sql, sqlite3_errmsg(db));
	sqlite3_close(db);
}

static long long raw_int(const char *path, const char *sql)
{
	char msg[512], *text;
	sqlite3 *db = NULL;
	sqlite3_stmt *st = NULL;
	long long v;

	if (on_postgres) {
		if (!(text = pgtest_text(pg_db, sql, 0, NULL, msg, sizeof msg)))
			fail_msg("%s: %s", sql, msg);
		v = strtoll(text, NULL, 10);
		free(text);
		return v;
	}
	assert_int_equal(sqlite3_open_v2(path, &db, SQLITE_OPEN_READWRITE, NULL), SQLITE_OK);
	if (sqlite3_prepare_v2(db, sql, -1, &st, NULL) != SQLITE_OK || sqlite3_step(st) != SQLITE_ROW)
		fail_msg("%s: %s", sql, sqlite3_errmsg(db));
	v = sqlite3_column_int64(st, 0);
	sqlite3_finalize(st);
	sqlite3_close(db);
	return v;
}

#define VERSION_SQL (on_postgres ? "SELECT version FROM records_schema" : "PRAGMA user_version")

/* A session at generation 1, owned by owner ("" none) until lease_ms. */
static void session_owned(struct records *r, const char *id, const char *owner, int64_t lease_ms)
{
	struct session_row s = { .generation = 1, .created_ms = 1000, .lease_expires_ms = lease_ms };
	struct sb_err err;

	snprintf(s.id, sizeof s.id, "%s", id);
	snprintf(s.identity, sizeof s.identity, "alice");
	snprintf(s.owner, sizeof s.owner, "%s", owner);
	if (records_session_insert(r, &s, &err) != 0)
		fail_msg("records_session_insert: %s", err.msg);
}

static struct session_row session_of(struct records *r, const char *id)
{
	struct session_row s;
	struct sb_err err;

	if (records_session_get(r, id, &s, &err) != RECORDS_FOUND)
		fail_msg("records_session_get %s: %s", id, err.msg);
	return s;
}

static void registered(struct records *r, const char *id, const char *incarnation, const char *address, int64_t now)
{
	struct sb_err err;

	if (records_manager_register(r, id, incarnation, address, now, 5000, &err) != RECORDS_FOUND)
		fail_msg("records_manager_register %s: %s", id, err.msg);
}

static struct exec_row *exec_new(const char *id, const char *session)
{
	struct exec_row *e = calloc(1, sizeof *e);

	assert_non_null(e);
	snprintf(e->id, sizeof e->id, "%s", id);
	snprintf(e->session, sizeof e->session, "%s", session);
	snprintf(e->command, sizeof e->command, "make test");
	e->turn = 1;
	e->timeout_seconds = 30;
	e->accepted_ms = 1500;
	return e;
}

static int exec_insert(struct records *r, const char *id, const char *session, struct sb_err *err)
{
	struct exec_row *e = exec_new(id, session);
	int rc = records_exec_insert(r, e, err);

	free(e);
	return rc;
}

/* The exec's state, "" when there is no such exec. */
static void exec_state_is(struct records *r, const char *id, const char *state)
{
	struct exec_row *e = calloc(1, sizeof *e);
	struct sb_err err;
	int rc;

	assert_non_null(e);
	rc = records_exec_get(r, id, e, &err);
	if (!*state)
		assert_int_equal(rc, RECORDS_NOT_FOUND);
	else if (rc != RECORDS_FOUND)
		fail_msg("records_exec_get %s: %s", id, err.msg);
	else
		assert_string_equal(e->state, state);
	free(e);
}

static struct sandbox_row sandbox_new(const char *session, uint64_t generation, const char *runtime_id)
{
	struct sandbox_row b = { .generation = generation, .started_ms = 1600 };

	snprintf(b.session, sizeof b.session, "%s", session);
	snprintf(b.backend, sizeof b.backend, "process");
	snprintf(b.runtime_id, sizeof b.runtime_id, "%s", runtime_id);
	snprintf(b.address, sizeof b.address, "unix:/run/sb/%s.sock", session);
	snprintf(b.state, sizeof b.state, "running");
	return b;
}

/* A write the fence refused: -1, ESTALE, "fenced: " first, the session, its owner and generation. */
static void expect_fenced(int rc, const struct sb_err *err, const char *owner, unsigned generation)
{
	char want[96];

	if (rc != -1)
		fail_msg("a fenced write returned %d (%s)", rc, rc == 0 ? "written" : err->msg);
	assert_int_equal(err->errnum, ESTALE);
	if (strncmp(err->msg, "fenced: ", 8) != 0)
		fail_msg("not a fence's refusal: %s", err->msg);
	assert_contains(err->msg, "session s1 ");
	snprintf(want, sizeof want, "owned by manager %s (generation %u)", owner, generation);
	assert_contains(err->msg, want);
}

static char *grants_text(struct records *r, const char *session)
{
	struct sb_err err;
	json_t *g = records_grants(r, session, &err);
	char *text;

	if (!g)
		fail_msg("records_grants: %s", err.msg);
	text = json_dumps(g, JSON_COMPACT | JSON_SORT_KEYS);
	json_decref(g);
	assert_non_null(text);
	return text;
}

/* ---------------------------------------------------------------- migration */

/* Version 2 as it stands today: version 3's to 7's columns, index and tables taken away. */
static const char SQLITE_TO_V2[] =
	"DROP TABLE identity_ids; DROP TABLE managers; DROP INDEX sessions_owner; ALTER TABLE sessions DROP COLUMN owner;"
	" ALTER TABLE sessions DROP COLUMN lease_expires_ms; ALTER TABLE sessions DROP COLUMN network;"
	" ALTER TABLE sessions DROP COLUMN egress_allow; PRAGMA user_version = 2;";
static const char PG_TO_V2[] =
	"DROP TABLE identity_ids; DROP FUNCTION identity_ids_final; DROP TABLE managers; DROP INDEX sessions_owner;"
	" ALTER TABLE sessions DROP COLUMN owner, DROP COLUMN lease_expires_ms, DROP COLUMN network,"
	"  DROP COLUMN egress_allow;"
	" UPDATE records_schema SET version = 2;";
static const char V2_ROWS[] =
	"INSERT INTO sessions (id, identity, repo, worktree, branch, state, generation, turn, created_ms)"
	" VALUES ('s1', 'alice', '/srv/repo', '/vol/alice/s1', 'sandbox/s1', 'active', 5, 2, 1000);"
	"INSERT INTO execs (id, session, turn, state, command, timeout_seconds, accepted_ms)"
	" VALUES ('e1', 's1', 2, 'accepted', 'echo one', 30, 1001);";

static long long owner_columns(const char *path)
{
	return raw_int(path, on_postgres ? "SELECT count(*) FROM information_schema.columns WHERE table_name = 'sessions'"
					   " AND column_name IN ('owner', 'lease_expires_ms')" :
					   "SELECT count(*) FROM pragma_table_info('sessions')"
					   " WHERE name IN ('owner', 'lease_expires_ms')");
}

static void v2_store(const char *path)
{
	records_close(open_ok(path, NULL));
	raw_exec(path, on_postgres ? PG_TO_V2 : SQLITE_TO_V2);
	raw_exec(path, V2_ROWS);
	assert_int_equal(raw_int(path, VERSION_SQL), 2);
	assert_int_equal(owner_columns(path), 0);
}

static void test_migrate_v2(void **state)
{
	struct fixture *f = *state;
	struct records *r;
	struct session_row s;
	struct lease l;
	struct sb_err err;

	v2_store(f->db);
	r = open_ok(f->db, NULL);
	assert_int_equal(raw_int(f->db, VERSION_SQL), 7);
	assert_int_equal(owner_columns(f->db), 2);
	s = session_of(r, "s1");
	assert_string_equal(s.identity, "alice");
	/* version 4: a session of before keeps the network it had the most of */
	assert_string_equal(s.network, "open");
	/* version 7: and has no egress allow-list of its own */
	assert_string_equal(s.egress_allow, "");
	assert_int_equal(s.generation, 5);
	assert_int_equal(s.turn, 2);
	assert_string_equal(s.owner, "");
	assert_int_equal(s.lease_expires_ms, 0);
	exec_state_is(r, "e1", "accepted");
	/* the old session is nobody's: the first manager takes it, without a new generation */
	registered(r, "m1", "0123456789abcdef0123456789abcdef", "/run/m1.sock", 2000);
	assert_int_equal(records_lease_take(r, "s1", "m1", 2000, 5000, &l, &err), RECORDS_FOUND);
	assert_string_equal(l.owner, "m1");
	assert_int_equal(l.generation, 5);
	assert_string_equal(l.previous, "");
	/* version 6: the CHECK admits proxy beside open and none, and still nothing else */
	s.network[0] = '\0';
	snprintf(s.id, sizeof s.id, "s2");
	snprintf(s.network, sizeof s.network, "proxy");
	snprintf(s.egress_allow, sizeof s.egress_allow, "api.internal:443 .corp.example:443");
	assert_int_equal(records_session_insert(r, &s, &err), 0);
	assert_string_equal(session_of(r, "s2").network, "proxy");
	assert_string_equal(session_of(r, "s2").egress_allow, "api.internal:443 .corp.example:443");
	snprintf(s.id, sizeof s.id, "s3");
	snprintf(s.network, sizeof s.network, "maybe");
	assert_int_equal(records_session_insert(r, &s, &err), -1);
	records_close(r);
	r = open_ok(f->db, NULL); /* a second open changes nothing */
	assert_int_equal(raw_int(f->db, VERSION_SQL), 7);
	assert_string_equal(session_of(r, "s1").owner, "m1");
	records_close(r);
}

/* A migration that cannot complete is rolled back whole: version 2, no new column. */
static void test_migrate_v2_failure_and_newer(void **state)
{
	struct fixture *f = *state;
	struct records *r = NULL;
	struct sb_err err;

	v2_store(f->db);
	raw_exec(f->db, "CREATE TABLE managers (x INTEGER);");
	assert_int_equal(store_open(f->db, &r, &err), -1);
	assert_null(r);
	assert_contains(err.msg, "migrating the records from schema version 2 to 3");
	assert_int_equal(raw_int(f->db, VERSION_SQL), 2);
	assert_int_equal(owner_columns(f->db), 0);
	assert_int_equal(raw_int(f->db, "SELECT count(*) FROM sessions"), 1);

	raw_exec(f->db, on_postgres ? "DROP TABLE managers; UPDATE records_schema SET version = 8;" :
				      "DROP TABLE managers; PRAGMA user_version = 8;");
	assert_int_equal(store_open(f->db, &r, &err), -1);
	assert_contains(err.msg, "has schema version 8, newer than this sandbox-manager understands (7)");
	assert_int_equal(raw_int(f->db, VERSION_SQL), 8);
}

/* ---------------------------------------------------------------- leases */

static void test_lease_take_cases(void **state)
{
	struct fixture *f = *state;
	struct records *r = open_ok(f->db, NULL);
	struct sessions_query q = { .limit = 10 };
	struct session_row s;
	struct lease l;
	struct sb_err err;
	json_t *page;

	registered(r, "m1", "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa", "/run/m1.sock", 1000);
	registered(r, "m2", "bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb", "/run/m2.sock", 1000);
	session_owned(r, "s1", "m1", 3000);
	s = session_of(r, "s1");
	assert_string_equal(s.owner, "m1");
	assert_int_equal(s.lease_expires_ms, 3000);

	/* owner == me: one read, nothing written (same generation, the expiry as it was) */
	assert_int_equal(records_lease_take(r, "s1", "m1", 2000, 5000, &l, &err), RECORDS_FOUND);
	assert_string_equal(l.owner, "m1");
	assert_int_equal(l.expires_ms, 3000);
	assert_int_equal(l.generation, 1);
	assert_string_equal(l.previous, "");
	assert_int_equal(session_of(r, "s1").lease_expires_ms, 3000);
	/* the heartbeat renews it */
	assert_int_equal(records_manager_heartbeat(r, "m1", "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa", 2000, 5000, &err),
			 RECORDS_FOUND);

	/* another's live lease (to its last ms): refused with its owner, address and expiry */
	for (int64_t now = 3000; now <= 7000; now += 4000) {
		assert_int_equal(records_lease_take(r, "s1", "m2", now, 5000, &l, &err), RECORDS_REFUSED);
		assert_string_equal(l.owner, "m1");
		assert_string_equal(l.address, "/run/m1.sock");
		assert_int_equal(l.expires_ms, 7000);
		assert_int_equal(l.generation, 1);
		assert_contains(err.msg, "session s1 is owned by manager m1 (its control socket /run/m1.sock)");
	}
	s = session_of(r, "s1");
	assert_string_equal(s.owner, "m1");
	assert_int_equal(s.lease_expires_ms, 7000);
	assert_int_equal(s.generation, 1);

	/* expired: taken over, generation + 1, previous the old owner */
	assert_int_equal(records_lease_take(r, "s1", "m2", 7001, 5000, &l, &err), RECORDS_FOUND);
	assert_string_equal(l.owner, "m2");
	assert_string_equal(l.address, "/run/m2.sock");
	assert_int_equal(l.expires_ms, 12001);
	assert_int_equal(l.generation, 2);
	assert_string_equal(l.previous, "m1");
	s = session_of(r, "s1");
	assert_string_equal(s.owner, "m2");
	assert_int_equal(s.generation, 2);
	assert_int_equal(s.lease_expires_ms, 12001);

	/* taken again by the new owner: no new generation, no previous */
	assert_int_equal(records_lease_take(r, "s1", "m2", 8000, 5000, &l, &err), RECORDS_FOUND);
	assert_int_equal(l.generation, 2);
	assert_string_equal(l.previous, "");
	assert_int_equal(l.expires_ms, 12001);

	/* released by a clean stop, then taken by anyone without a new generation */
	assert_int_equal(records_manager_unregister(r, "m2", "bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb", &err), RECORDS_FOUND);
	assert_int_equal(records_lease_get(r, "s1", &l, &err), RECORDS_FOUND);
	assert_string_equal(l.owner, "");
	assert_string_equal(l.address, "");
	assert_int_equal(l.expires_ms, 0);
	assert_int_equal(l.generation, 2);
	assert_int_equal(records_lease_take(r, "s1", "m1", 9000, 5000, &l, &err), RECORDS_FOUND);
	assert_string_equal(l.owner, "m1");
	assert_int_equal(l.generation, 2);
	assert_string_equal(l.previous, "");
	assert_int_equal(records_lease_get(r, "s1", &l, &err), RECORDS_FOUND);
	assert_string_equal(l.owner, "m1");
	assert_string_equal(l.address, "/run/m1.sock");
	assert_int_equal(l.expires_ms, 14000);

	/* an owner with no managers row: refused with an empty address */
	session_owned(r, "s2", "m9", 50000);
	assert_int_equal(records_lease_take(r, "s2", "m1", 9000, 5000, &l, &err), RECORDS_REFUSED);
	assert_string_equal(l.owner, "m9");
	assert_string_equal(l.address, "");
	assert_int_equal(records_lease_take(r, "nope", "m1", 9000, 5000, &l, &err), RECORDS_NOT_FOUND);
	assert_int_equal(records_lease_get(r, "nope", &l, &err), RECORDS_NOT_FOUND);
	assert_int_equal(records_lease_take(r, "s1", "m1", 9000, -1, &l, &err), -1);
	assert_int_equal(err.errnum, EINVAL);

	/* the page of sessions names each owner, or null */
	session_owned(r, "s3", "", 0);
	assert_int_equal(records_sessions_page(r, &q, &page, &err), RECORDS_FOUND);
	assert_int_equal(json_array_size(json_object_get(page, "sessions")), 3);
	for (size_t i = 0; i < 3; i++) {
		json_t *row = json_array_get(json_object_get(page, "sessions"), i);
		const char *id = json_string_value(json_object_get(row, "session"));
		json_t *owner = json_object_get(row, "owner");

		if (strcmp(id, "s3") == 0)
			assert_true(json_is_null(owner));
		else
			assert_string_equal(json_string_value(owner), strcmp(id, "s1") == 0 ? "m1" : "m9");
	}
	json_decref(page);
	records_close(r);
}

struct taker {
	pthread_t thread;
	struct records *r;
	const char *me;
	pthread_barrier_t *start;
	int won;
	char error[SB_ERR_MSG_MAX + 64];
};

static void *taker_main(void *arg)
{
	struct taker *t = arg;
	struct lease l;
	struct sb_err err;
	char id[32];

	for (int i = 0; i < 20; i++) {
		int rc;

		snprintf(id, sizeof id, "race-%02d", i);
		pthread_barrier_wait(t->start);
		rc = records_lease_take(t->r, id, t->me, 5000, 5000, &l, &err);
		if (rc == RECORDS_FOUND) {
			t->won++;
			if (l.generation != 2 || strcmp(l.previous, "m1") != 0)
				snprintf(t->error, sizeof t->error, "%s won with generation %llu from '%s'", id,
					 (unsigned long long)l.generation, l.previous);
		} else if (rc != RECORDS_REFUSED) {
			snprintf(t->error, sizeof t->error, "%.20s: %s", id, err.msg);
		}
	}
	return NULL;
}

/* Two managers take the same expired sessions at once: one takes each over, once. */
static void test_lease_takeover_race(void **state)
{
	struct fixture *f = *state;
	struct records *r = open_ok(f->db, NULL);
	struct taker t[2] = { { .me = "m2" }, { .me = "m3" } };
	pthread_barrier_t start;
	char id[32];

	for (int i = 0; i < 20; i++) {
		snprintf(id, sizeof id, "race-%02d", i);
		session_owned(r, id, "m1", 100);
	}
	assert_int_equal(pthread_barrier_init(&start, NULL, 2), 0);
	for (int i = 0; i < 2; i++) {
		t[i].r = open_ok(f->db, NULL);
		t[i].start = &start;
		assert_int_equal(pthread_create(&t[i].thread, NULL, taker_main, &t[i]), 0);
	}
	for (int i = 0; i < 2; i++) {
		assert_int_equal(pthread_join(t[i].thread, NULL), 0);
		records_close(t[i].r);
		if (t[i].error[0])
			fail_msg("taker %s: %s", t[i].me, t[i].error);
	}
	pthread_barrier_destroy(&start);
	assert_int_equal(t[0].won + t[1].won, 20);
	for (int i = 0; i < 20; i++) {
		struct session_row s;

		snprintf(id, sizeof id, "race-%02d", i);
		s = session_of(r, id);
		assert_int_equal(s.generation, 2);
		assert_true(strcmp(s.owner, "m2") == 0 || strcmp(s.owner, "m3") == 0);
	}
	records_close(r);
}

/* ---------------------------------------------------------------- managers */

static void test_manager_register(void **state)
{
	struct fixture *f = *state;
	struct records *r = open_ok(f->db, NULL);
	const char *a = "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa", *b = "bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb";
	struct sb_err err;

	assert_int_equal(records_manager_register(r, "m1", a, "/run/a.sock", 1000, 3000, &err), RECORDS_FOUND);
	/* the same incarnation again (a restart of the registration) is its own */
	assert_int_equal(records_manager_register(r, "m1", a, "/run/a.sock", 1500, 3000, &err), RECORDS_FOUND);
	assert_int_equal(records_manager_register(r, "m1", b, "/run/b.sock", 2000, 3000, &err), RECORDS_REFUSED);
	assert_string_equal(err.msg, "manager id m1 is in use by a running manager (its address /run/a.sock, "
				     "heartbeat 500 ms ago)");
	assert_int_equal(records_manager_heartbeat(r, "m1", a, 2500, 3000, &err), RECORDS_FOUND);
	/* fresh until heartbeat + lease: refused at 5499, taken at 5500 */
	assert_int_equal(records_manager_register(r, "m1", b, "/run/b.sock", 5499, 3000, &err), RECORDS_REFUSED);
	assert_int_equal(raw_int(f->db, "SELECT count(*) FROM managers WHERE incarnation = 'aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa'"
				 " AND heartbeat_ms = 2500"), 1);
	assert_int_equal(records_manager_register(r, "m1", b, "/run/b.sock", 5500, 3000, &err), RECORDS_FOUND);
	assert_int_equal(raw_int(f->db, "SELECT count(*) FROM managers WHERE id = 'm1' AND address = '/run/b.sock'"
				 " AND incarnation = 'bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb' AND heartbeat_ms = 5500"), 1);
	/* the old incarnation's heartbeat and clean stop are refused: the id is another's now */
	assert_int_equal(records_manager_heartbeat(r, "m1", a, 5600, 3000, &err), RECORDS_REFUSED);
	assert_contains(err.msg, "manager id m1 is no longer this manager's");
	assert_int_equal(records_manager_unregister(r, "m1", a, &err), RECORDS_REFUSED);
	assert_int_equal(raw_int(f->db, "SELECT count(*) FROM managers"), 1);
	assert_int_equal(records_manager_register(r, "m1", a, "/run/a.sock", 5700, 3000, &err), RECORDS_REFUSED);
	/* bad arguments */
	assert_int_equal(records_manager_register(r, "", a, "/run/a.sock", 1, 3000, &err), -1);
	assert_int_equal(err.errnum, EINVAL);
	assert_int_equal(records_manager_register(r, "m2", a, NULL, 1, 3000, &err), -1);
	assert_int_equal(err.errnum, EINVAL);
	records_close(r);
}

static void test_heartbeat_and_unregister(void **state)
{
	struct fixture *f = *state;
	struct records *r = open_ok(f->db, NULL);
	const char *a = "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa", *stale = "cccccccccccccccccccccccccccccccc";
	struct sb_err err;

	registered(r, "m1", a, "/run/m1.sock", 500);
	session_owned(r, "s1", "m1", 100);
	session_owned(r, "s2", "m1", 100);
	session_owned(r, "s3", "m2", 100);
	session_owned(r, "s4", "", 0);
	assert_int_equal(records_manager_heartbeat(r, "m1", a, 1000, 2000, &err), RECORDS_FOUND);
	assert_int_equal(session_of(r, "s1").lease_expires_ms, 3000);
	assert_int_equal(session_of(r, "s2").lease_expires_ms, 3000);
	assert_int_equal(session_of(r, "s3").lease_expires_ms, 100);
	assert_int_equal(session_of(r, "s4").lease_expires_ms, 0);
	assert_int_equal(raw_int(f->db, "SELECT heartbeat_ms FROM managers WHERE id = 'm1'"), 1000);
	/* a stale incarnation renews nothing, nor a manager without a row */
	assert_int_equal(records_manager_heartbeat(r, "m1", stale, 2000, 2000, &err), RECORDS_REFUSED);
	assert_int_equal(records_manager_heartbeat(r, "m2", stale, 2000, 2000, &err), RECORDS_REFUSED);
	assert_int_equal(session_of(r, "s1").lease_expires_ms, 3000);
	assert_int_equal(session_of(r, "s3").lease_expires_ms, 100);
	assert_int_equal(raw_int(f->db, "SELECT heartbeat_ms FROM managers WHERE id = 'm1'"), 1000);

	/* a clean stop by a stale incarnation releases nothing; by ours, its sessions and its row */
	assert_int_equal(records_manager_unregister(r, "m1", stale, &err), RECORDS_REFUSED);
	assert_string_equal(session_of(r, "s1").owner, "m1");
	assert_int_equal(records_manager_unregister(r, "m1", a, &err), RECORDS_FOUND);
	for (int i = 1; i <= 2; i++) {
		struct session_row s = session_of(r, i == 1 ? "s1" : "s2");

		assert_string_equal(s.owner, "");
		assert_int_equal(s.lease_expires_ms, 0);
	}
	assert_string_equal(session_of(r, "s3").owner, "m2");
	assert_int_equal(raw_int(f->db, "SELECT count(*) FROM managers"), 0);
	assert_int_equal(raw_int(f->db, "SELECT count(*) FROM sessions WHERE owner IS NULL"), 3);
	assert_int_equal(records_manager_unregister(r, "m1", a, &err), RECORDS_REFUSED);
	records_close(r);
}

/* A clean stop keeps what it cannot hand over whole: a session with a sandbox not proven gone or
 * an exec not settled stays the manager's, for a takeover (which settles) after its lease. */
static void test_unregister_keeps_in_flight(void **state)
{
	struct fixture *f = *state;
	struct records *r = open_ok(f->db, NULL);
	const char *a = "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa";
	struct sandbox_row sb = sandbox_new("s2", 1, "process:1:1");
	struct sb_err err;

	registered(r, "m1", a, "/run/m1.sock", 500);
	session_owned(r, "s1", "m1", 100);
	session_owned(r, "s2", "m1", 100);
	session_owned(r, "s3", "m1", 100);
	session_owned(r, "s4", "m1", 100);
	assert_int_equal(records_sandbox_upsert(r, &sb, &err), 0);
	assert_int_equal(exec_insert(r, "e3", "s3", &err), 0);
	assert_int_equal(exec_insert(r, "e4", "s4", &err), 0);
	assert_int_equal(records_exec_finish(r, "e4", "refused", NULL, NULL, "settled", &err), 0);
	assert_int_equal(records_manager_unregister(r, "m1", a, &err), RECORDS_FOUND);
	assert_string_equal(session_of(r, "s1").owner, "");
	assert_string_equal(session_of(r, "s2").owner, "m1"); /* its sandbox is not proven gone */
	assert_string_equal(session_of(r, "s3").owner, "m1"); /* its exec is accepted */
	assert_string_equal(session_of(r, "s4").owner, "");   /* its exec is settled */
	assert_int_equal(session_of(r, "s2").lease_expires_ms, 100);
	records_close(r);
}

/* What recovery settles, per session: the sessions with an exec in flight or a sandbox not gone,
 * and one session's execs in a state (not every session's). */
static void test_in_flight_per_session(void **state)
{
	struct fixture *f = *state;
	struct records *r = open_ok(f->db, NULL);
	struct sandbox_row sb = sandbox_new("s2", 1, "process:1:1");
	struct sb_err err;
	json_t *v;
	char *text;

	session_owned(r, "s1", "m1", 100);
	session_owned(r, "s2", "m1", 100);
	session_owned(r, "s3", "m2", 100);
	session_owned(r, "s4", "", 0);
	assert_int_equal(exec_insert(r, "e1", "s1", &err), 0);
	assert_int_equal(exec_insert(r, "e1b", "s1", &err), 0);
	assert_int_equal(exec_insert(r, "e3", "s3", &err), 0);
	assert_int_equal(records_exec_finish(r, "e3", "refused", NULL, NULL, "settled", &err), 0);
	assert_int_equal(exec_insert(r, "e4", "s4", &err), 0);
	assert_int_equal(records_sandbox_upsert(r, &sb, &err), 0);

	v = records_sessions_in_flight(r, &err);
	assert_non_null(v);
	text = json_dumps(v, JSON_COMPACT);
	assert_string_equal(text, "[\"s1\",\"s2\",\"s4\"]");
	free(text);
	json_decref(v);
	v = records_exec_ids_in_state(r, "s1", "accepted", &err);
	text = json_dumps(v, JSON_COMPACT);
	assert_string_equal(text, "[\"e1\",\"e1b\"]");
	free(text);
	json_decref(v);
	v = records_exec_ids_in_state(r, NULL, "accepted", &err);
	assert_int_equal(json_array_size(v), 3);
	json_decref(v);
	v = records_exec_ids_in_state(r, "s3", "accepted", &err);
	assert_int_equal(json_array_size(v), 0);
	json_decref(v);
	records_close(r);
}

/* ---------------------------------------------------------------- the fence */

/* s1 owned by m1 (r1's fence), its lease expired, with an accepted exec e1 and e2, a dispatched e3,
 * a running sandbox of generation 1 and a grant; then m2 (r2) takes it over: generation 2. */
static void fence_scene(struct records *r1, struct records *r2)
{
	struct sandbox_row b = sandbox_new("s1", 1, "process:10:20");
	struct lease l;
	struct sb_err err;

	registered(r1, "m1", "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa", "/run/m1.sock", 100);
	registered(r2, "m2", "bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb", "/run/m2.sock", 100);
	session_owned(r1, "s1", "m1", 1000);
	assert_int_equal(exec_insert(r1, "e1", "s1", &err), 0);
	assert_int_equal(exec_insert(r1, "e2", "s1", &err), 0);
	assert_int_equal(exec_insert(r1, "e3", "s1", &err), 0);
	assert_int_equal(records_exec_dispatched(r1, "e3", 1, "00ff", "process:10:20", NULL, &err), 0);
	if (records_sandbox_upsert(r1, &b, &err) != 0)
		fail_msg("upsert: %s", err.msg);
	assert_int_equal(records_grant_set(r1, "s1", "kubernetes:staging", "read", &err), 0);
	assert_int_equal(records_session_set_turn(r1, "s1", 4, &err), 0);
	assert_int_equal(records_lease_take(r2, "s1", "m2", 2000, 5000, &l, &err), RECORDS_FOUND);
	assert_int_equal(l.generation, 2);
	assert_string_equal(l.previous, "m1");
}

/* Every fenced write of the manager that lost s1 is refused, and nothing it tried is in the rows. */
static void test_fence_refuses_old_owner(void **state)
{
	struct fixture *f = *state;
	struct records *r1 = open_ok(f->db, "m1"), *r2 = open_ok(f->db, "m2");
	struct sandbox_row b = sandbox_new("s1", 2, "process:66:66"), got;
	struct session_row s;
	uint64_t generation = 0;
	struct sb_err err;
	char *grants;

	fence_scene(r1, r2);
	expect_fenced(exec_insert(r1, "e9", "s1", &err), &err, "m2", 2);
	exec_state_is(r2, "e9", "");
	expect_fenced(records_exec_dispatched(r1, "e1", 2, "00ff", "process:10:20", NULL, &err), &err, "m2", 2);
	exec_state_is(r2, "e1", "accepted");
	expect_fenced(records_exec_finish(r1, "e2", "exited", "{\"exit_code\":0}", NULL, NULL, &err), &err, "m2", 2);
	exec_state_is(r2, "e2", "accepted");
	expect_fenced(records_exec_finish(r1, "e3", "uncertain", NULL, NULL, "lost", &err), &err, "m2", 2);
	exec_state_is(r2, "e3", "dispatched");
	expect_fenced(records_sandbox_upsert(r1, &b, &err), &err, "m2", 2);
	b.generation = 1; /* within its generation, as an update of the row */
	expect_fenced(records_sandbox_upsert(r1, &b, &err), &err, "m2", 2);
	assert_int_equal(records_sandbox_get(r2, "s1", &got, &err), RECORDS_FOUND);
	assert_string_equal(got.runtime_id, "process:10:20");
	assert_int_equal(got.generation, 1);
	expect_fenced(records_sandbox_set_state(r1, "s1", 1, "gone", "it ended", &err), &err, "m2", 2);
	assert_int_equal(records_sandbox_get(r2, "s1", &got, &err), RECORDS_FOUND);
	assert_string_equal(got.state, "running");
	expect_fenced(records_session_set_state(r1, "s1", "deleting", &err), &err, "m2", 2);
	expect_fenced(records_session_bump_generation(r1, "s1", &generation, &err), &err, "m2", 2);
	assert_int_equal(generation, 0);
	expect_fenced(records_session_set_turn(r1, "s1", 9, &err), &err, "m2", 2);
	s = session_of(r2, "s1");
	assert_string_equal(s.state, "active");
	assert_int_equal(s.generation, 2);
	assert_int_equal(s.turn, 4);
	assert_string_equal(s.owner, "m2");
	expect_fenced(records_grant_set(r1, "s1", "kubernetes:prod", "write", &err), &err, "m2", 2);
	expect_fenced(records_grant_set(r1, "s1", "kubernetes:staging", "write", &err), &err, "m2", 2);
	expect_fenced(records_grant_revoke(r1, "s1", "kubernetes:staging", &err), &err, "m2", 2);
	grants = grants_text(r2, "s1");
	assert_string_equal(grants, "{\"kubernetes:staging\":\"read\"}");
	free(grants);
	assert_contains(err.msg, "manager m1 may not write it");

	/* not fenced: a new session, an operator's word, the lease functions */
	session_owned(r1, "s5", "m1", 9000);
	assert_string_equal(session_of(r2, "s5").owner, "m1");
	records_close(r1);
	records_close(r2);
}

/* The new owner's writes are accepted; the generation is checked by dispatch and upsert; the
 * answers of the state compare-and-sets stay what they were when the fence holds. */
static void test_fence_accepts_new_owner(void **state)
{
	struct fixture *f = *state;
	struct records *r1 = open_ok(f->db, "m1"), *r2 = open_ok(f->db, "m2");
	struct sandbox_row b = sandbox_new("s1", 2, "process:30:40"), got;
	uint64_t generation = 0;
	struct sb_err err;
	char *grants;

	fence_scene(r1, r2);
	assert_int_equal(exec_insert(r2, "e9", "s1", &err), 0);
	exec_state_is(r2, "e9", "accepted");
	/* a dispatch to the generation before the takeover is fenced, to the session's own it is not */
	expect_fenced(records_exec_dispatched(r2, "e1", 1, "00ff", "process:10:20", NULL, &err), &err, "m2", 2);
	assert_contains(err.msg, "manager m2 at generation 1 may not write it");
	exec_state_is(r2, "e1", "accepted");
	assert_int_equal(records_exec_dispatched(r2, "e1", 2, "00ff", "process:30:40", NULL, &err), 0);
	assert_int_equal(records_exec_dispatched(r2, "e1", 2, "00ff", "process:30:40", NULL, &err), -1);
	assert_int_equal(err.errnum, 0);
	assert_contains(err.msg, "is not accepted (state dispatched): never dispatched twice");
	assert_int_equal(records_exec_finish(r2, "e3", "uncertain", NULL, NULL, "settled after takeover", &err), 0);
	assert_int_equal(records_exec_finish(r2, "e3", "exited", NULL, NULL, NULL, &err), -1);
	assert_int_equal(err.errnum, 0);
	assert_contains(err.msg, "already finished (state uncertain)");
	assert_int_equal(records_exec_finish(r2, "nope", "exited", NULL, NULL, NULL, &err), -1);
	assert_contains(err.msg, "no exec nope");

	/* the old sandbox (generation 1) is still live: upsert of 2 refused by its own rule, not the fence */
	assert_int_equal(records_sandbox_upsert(r2, &b, &err), -1);
	assert_int_equal(err.errnum, 0);
	assert_contains(err.msg, "may replace it only once it is gone");
	assert_int_equal(records_sandbox_set_state(r2, "s1", 1, "gone", "pid 10 reaped", &err), 0);
	assert_int_equal(records_sandbox_set_state(r2, "s1", 1, "stopping", NULL, &err), -1);
	assert_int_equal(err.errnum, 0);
	assert_contains(err.msg, "is already gone");
	b.generation = 1; /* not the session's generation: fenced */
	expect_fenced(records_sandbox_upsert(r2, &b, &err), &err, "m2", 2);
	b.generation = 2;
	assert_int_equal(records_sandbox_upsert(r2, &b, &err), 0);
	assert_int_equal(records_sandbox_get(r2, "s1", &got, &err), RECORDS_FOUND);
	assert_string_equal(got.runtime_id, "process:30:40");
	assert_int_equal(got.generation, 2);

	assert_int_equal(records_session_bump_generation(r2, "s1", &generation, &err), 0);
	assert_int_equal(generation, 3);
	/* the sandbox of generation 2 cannot be updated once the session is at 3, nor e9 dispatched to it */
	expect_fenced(records_sandbox_upsert(r2, &b, &err), &err, "m2", 3);
	expect_fenced(records_exec_dispatched(r2, "e9", 2, "00ff", "process:30:40", NULL, &err), &err, "m2", 3);
	exec_state_is(r2, "e9", "accepted");
	assert_int_equal(records_exec_dispatched(r2, "e9", 3, "00ff", "process:30:40", NULL, &err), 0);
	assert_int_equal(records_session_set_turn(r2, "s1", 5, &err), 0);
	assert_int_equal(records_session_set_state(r2, "s1", "deleting", &err), 0);
	assert_int_equal(records_session_set_state(r2, "nope", "deleting", &err), -1);
	assert_int_equal(err.errnum, 0);
	assert_contains(err.msg, "no session nope");
	assert_int_equal(records_grant_set(r2, "s1", "kubernetes:prod", "write", &err), 0);
	assert_int_equal(records_grant_revoke(r2, "s1", "kubernetes:staging", &err), 0);
	assert_int_equal(records_grant_revoke(r2, "s1", "kubernetes:staging", &err), -1);
	assert_int_equal(err.errnum, 0);
	assert_contains(err.msg, "has no grant on kubernetes:staging to revoke");
	grants = grants_text(r2, "s1");
	assert_string_equal(grants, "{\"kubernetes:prod\":\"write\"}");
	free(grants);
	assert_int_equal(session_of(r2, "s1").turn, 5);
	records_close(r1);
	records_close(r2);
}

/* The same writes of the manager that lost s1, on a handle without a fence: accepted. What refused
 * them above is the fence, and without records_set_fence nothing changes. */
static void test_no_fence_writes_as_before(void **state)
{
	struct fixture *f = *state;
	struct records *r1 = open_ok(f->db, "m1"), *r2 = open_ok(f->db, "m2"), *r0 = open_ok(f->db, NULL);
	uint64_t generation = 0;
	struct sb_err err;

	fence_scene(r1, r2);
	assert_int_equal(exec_insert(r0, "e9", "s1", &err), 0);
	assert_int_equal(records_exec_dispatched(r0, "e1", 1, "00ff", "process:10:20", NULL, &err), 0);
	assert_int_equal(records_exec_finish(r0, "e2", "exited", NULL, NULL, NULL, &err), 0);
	assert_int_equal(records_sandbox_set_state(r0, "s1", 1, "stopping", NULL, &err), 0);
	assert_int_equal(records_session_bump_generation(r0, "s1", &generation, &err), 0);
	assert_int_equal(generation, 3);
	assert_int_equal(records_session_set_turn(r0, "s1", 8, &err), 0);
	assert_int_equal(records_grant_set(r0, "s1", "kubernetes:prod", "write", &err), 0);
	assert_int_equal(records_grant_revoke(r0, "s1", "kubernetes:prod", &err), 0);
	assert_int_equal(records_session_set_state(r0, "s1", "deleting", &err), 0);
	/* a fence set to "" is no fence */
	records_set_fence(r1, "");
	assert_int_equal(records_session_set_turn(r1, "s1", 9, &err), 0);
	assert_int_equal(session_of(r0, "s1").turn, 9);
	records_close(r0);
	records_close(r1);
	records_close(r2);
}

/* A fenced release of reserved sessions leaves another manager's alone. */
static void test_fence_release_own_only(void **state)
{
	struct fixture *f = *state;
	struct records *r1 = open_ok(f->db, "m1");
	struct sb_err err;

	session_owned(r1, "s1", "m1", 9000);
	session_owned(r1, "s2", "m2", 9000);
	session_owned(r1, "s3", "", 0);
	raw_exec(f->db, "UPDATE sessions SET state = 'reserved';");
	assert_int_equal(records_sessions_release(r1, &err), 2);
	assert_string_equal(session_of(r1, "s1").state, "active");
	assert_string_equal(session_of(r1, "s2").state, "reserved");
	assert_string_equal(session_of(r1, "s3").state, "active");
	records_close(r1);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_migrate_v2, setup, teardown),
		cmocka_unit_test_setup_teardown(test_migrate_v2_failure_and_newer, setup, teardown),
		cmocka_unit_test_setup_teardown(test_lease_take_cases, setup, teardown),
		cmocka_unit_test_setup_teardown(test_lease_takeover_race, setup, teardown),
		cmocka_unit_test_setup_teardown(test_manager_register, setup, teardown),
		cmocka_unit_test_setup_teardown(test_heartbeat_and_unregister, setup, teardown),
		cmocka_unit_test_setup_teardown(test_unregister_keeps_in_flight, setup, teardown),
		cmocka_unit_test_setup_teardown(test_in_flight_per_session, setup, teardown),
		cmocka_unit_test_setup_teardown(test_fence_refuses_old_owner, setup, teardown),
		cmocka_unit_test_setup_teardown(test_fence_accepts_new_owner, setup, teardown),
		cmocka_unit_test_setup_teardown(test_no_fence_writes_as_before, setup, teardown),
		cmocka_unit_test_setup_teardown(test_fence_release_own_only, setup, teardown),
	};
	int failed = cmocka_run_group_tests_name("records leases on sqlite", tests, NULL, NULL);

	on_postgres = true;
	return failed + pgtest_run_group("records leases on postgres", tests, sizeof tests / sizeof tests[0]);
}
