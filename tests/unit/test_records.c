/* Unit tests for manager/records/ on real SQLite files in temporary directories: open, reopen and
 * the file's settings (WAL, mode 0600, close-on-exec, schema version), sessions, grants, sandboxes,
 * the exec life cycle and the transitions it refuses, eight threads at once, and a writer killed
 * with SIGKILL in the middle of a transaction. The same tests (all but the SQLite file's own) run
 * again on PostgreSQL (tests/support/pgtest.h: a server of their own, a database per test), with
 * that store's refusals (a newer schema, a server that is not there). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "control.h"
#include "pathfmt.h"
#include "random.h"
#include "records.h"
#include "result.h"
#include "pgtest.h"
#include "testutil.h"

/* The second run: every test's store is a new PostgreSQL database (setup), pg_store names it. */
static bool on_postgres;
static char pg_db[64], pg_store[PATH_MAX + 128];

struct fixture {
	char dir[PATH_MAX];  /* mkdtemp root */
	char db[PATH_MAX];   /* <dir>/records.db */
};

/* ---------------------------------------------------------------- helpers */

static int setup(void **state)
{
	struct fixture *f = calloc(1, sizeof *f);
	struct sb_err err;

	assert_non_null(f);
	snprintf(f->dir, sizeof f->dir, "/tmp/test_records.XXXXXX");
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

static void expect_msg(const struct sb_err *err, const char *needle)
{
	if (!strstr(err->msg, needle))
		fail_msg("expected \"%s\" in the error, got \"%s\"", needle, err->msg);
}

static struct records *open_ok(const char *path)
{
	struct records *r = NULL;
	struct sb_err err;

	if ((on_postgres ? records_open_store(pg_store, &r, &err) : records_open(path, &r, &err)) != 0)
		fail_msg("records_open: %s", err.msg);
	return r;
}

static void session_add(struct records *r, const char *id)
{
	struct session_row s = { .generation = 1 };
	struct sb_err err;

	snprintf(s.id, sizeof s.id, "%s", id);
	snprintf(s.identity, sizeof s.identity, "alice");
	snprintf(s.repo, sizeof s.repo, "/srv/repos/manifests");
	snprintf(s.worktree, sizeof s.worktree, "/volume/identities/alice/workspaces/%s", id);
	snprintf(s.branch, sizeof s.branch, "agent/%s", id);
	if (records_session_insert(r, &s, &err) != 0)
		fail_msg("records_session_insert: %s", err.msg);
}

/* exec_row is 66 KB: kept off the (thread) stacks. */
static struct exec_row *exec_new(const char *id, const char *session, int64_t accepted_ms)
{
	struct exec_row *e = calloc(1, sizeof *e);

	assert_non_null(e);
	snprintf(e->id, sizeof e->id, "%s", id);
	snprintf(e->session, sizeof e->session, "%s", session);
	snprintf(e->command, sizeof e->command, "kubectl get pods -n %s", session);
	e->turn = 3;
	e->timeout_seconds = 30;
	e->accepted_ms = accepted_ms;
	return e;
}

static void exec_add(struct records *r, const char *id, const char *session, int64_t accepted_ms)
{
	struct exec_row *e = exec_new(id, session, accepted_ms);
	struct sb_err err;

	if (records_exec_insert(r, e, &err) != 0)
		fail_msg("records_exec_insert: %s", err.msg);
	free(e);
}

static void exec_state_is(struct records *r, const char *id, const char *state)
{
	struct exec_row *e = calloc(1, sizeof *e);
	struct sb_err err;

	assert_non_null(e);
	if (records_exec_get(r, id, e, &err) != RECORDS_FOUND)
		fail_msg("records_exec_get %s: %s", id, err.msg);
	assert_string_equal(e->state, state);
	free(e);
}

static sqlite3 *raw_open(const char *path)
{
	sqlite3 *db = NULL;

	assert_int_equal(sqlite3_open_v2(path, &db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE, NULL), SQLITE_OK);
	return db;
}

static char *raw_text(sqlite3 *db, const char *sql)
{
	sqlite3_stmt *st = NULL;
	char *out;

	assert_int_equal(sqlite3_prepare_v2(db, sql, -1, &st, NULL), SQLITE_OK);
	assert_int_equal(sqlite3_step(st), SQLITE_ROW);
	out = strdup((const char *)sqlite3_column_text(st, 0));
	sqlite3_finalize(st);
	return out;
}

/* sql's first value through a second connection, on the test's store (SQLite: the file at path). */
static char *store_text(const char *path, const char *sql)
{
	char msg[512], *out;
	sqlite3 *db;

	if (on_postgres) {
		if (!(out = pgtest_text(pg_db, sql, 0, NULL, msg, sizeof msg)))
			fail_msg("%s: %s", sql, msg);
		return out;
	}
	db = raw_open(path);
	out = raw_text(db, sql);
	sqlite3_close(db);
	return out;
}

/* sql through a second connection is refused, with want in the store's message. */
static void store_refuses(const char *path, const char *sql, const char *want)
{
	char msg[512];
	sqlite3 *db;

	if (on_postgres) {
		if (pgtest_exec(pg_db, sql, msg, sizeof msg) == 0)
			fail_msg("%s was not refused", sql);
	} else {
		db = raw_open(path);
		if (sqlite3_exec(db, sql, NULL, NULL, NULL) == SQLITE_OK)
			fail_msg("%s was not refused", sql);
		snprintf(msg, sizeof msg, "%s", sqlite3_errmsg(db));
		sqlite3_close(db);
	}
	if (want && !strstr(msg, want))
		fail_msg("%s: expected \"%s\" in \"%s\"", sql, want, msg);
}

static void json_is(json_t *j, const char *expected)
{
	char *text = json_dumps(j, JSON_COMPACT | JSON_ENCODE_ANY);

	assert_non_null(text);
	assert_string_equal(text, expected);
	free(text);
}

static mode_t mode_of(const char *fmt, const char *path)
{
	char p[PATH_MAX + 8];
	struct stat st;

	snprintf(p, sizeof p, fmt, path);
	if (stat(p, &st) != 0)
		fail_msg("stat %s: %s", p, strerror(errno));
	return st.st_mode & 07777;
}

/* ---------------------------------------------------------------- opening */

static void test_reopen_keeps_data(void **state)
{
	struct fixture *f = *state;
	struct records *r = open_ok(f->db);
	struct session_row s;
	struct sb_err err;
	json_t *grants;
	char *version;

	session_add(r, "s1");
	assert_int_equal(records_grant_set(r, "s1", "kubernetes:staging", "read", &err), 0);
	exec_add(r, "e1", "s1", 0);
	assert_int_equal(records_exec_dispatched(r, "e1", 1, "00ff", "process:10:20", NULL, &err), 0);
	assert_int_equal(records_exec_finish(r, "e1", "exited", "{\"exit_code\":0}", "{}", NULL, &err), 0);
	records_close(r);

	r = open_ok(f->db);
	assert_int_equal(records_session_get(r, "s1", &s, &err), RECORDS_FOUND);
	assert_string_equal(s.identity, "alice");
	assert_string_equal(s.worktree, "/volume/identities/alice/workspaces/s1");
	exec_state_is(r, "e1", "exited");
	grants = records_grants(r, "s1", &err);
	json_is(grants, "{\"kubernetes:staging\":\"read\"}");
	json_decref(grants);
	records_close(r);

	version = store_text(f->db, on_postgres ? "SELECT version FROM records_schema" : "PRAGMA user_version");
	assert_string_equal(version, "7");
	free(version);
}

/* Every descriptor on a file in dir is close-on-exec; returns how many there were. */
static int check_cloexec_fds(const char *dir)
{
	DIR *d = opendir("/proc/self/fd");
	struct dirent *de;
	int count = 0;

	assert_non_null(d);
	while ((de = readdir(d))) {
		char link[64], target[PATH_MAX];
		ssize_t n;
		int fd = atoi(de->d_name);

		if (de->d_name[0] == '.' || fd == dirfd(d))
			continue;
		snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
		n = readlink(link, target, sizeof target - 1);
		if (n < 0)
			continue;
		target[n] = '\0';
		if (strncmp(target, dir, strlen(dir)) != 0)
			continue;
		count++;
		if (!(fcntl(fd, F_GETFD) & FD_CLOEXEC))
			fail_msg("fd %d on %s is not close-on-exec", fd, target);
	}
	closedir(d);
	return count;
}

static void test_wal_mode_and_cloexec(void **state)
{
	struct fixture *f = *state;
	mode_t old = umask(022); /* a permissive umask must not leak into the files' modes */
	struct records *r = open_ok(f->db);
	sqlite3 *db;
	char *mode;

	session_add(r, "s1"); /* a write, so -wal and -shm exist and are open */
	assert_int_equal(mode_of("%s", f->db), 0600);
	assert_int_equal(mode_of("%s-wal", f->db), 0600);
	assert_int_equal(mode_of("%s-shm", f->db), 0600);
	/* The database file, its -wal and its -shm at least. */
	assert_true(check_cloexec_fds(f->dir) >= 3);

	db = raw_open(f->db);
	mode = raw_text(db, "PRAGMA journal_mode");
	assert_string_equal(mode, "wal");
	free(mode);
	sqlite3_close(db);
	records_close(r);

	/* A file left too open by someone else is tightened on the next open. */
	assert_int_equal(chmod(f->db, 0644), 0);
	r = open_ok(f->db);
	assert_int_equal(mode_of("%s", f->db), 0600);
	records_close(r);
	umask(old);
}

static void test_open_refusals(void **state)
{
	struct fixture *f = *state;
	char path[PATH_MAX + 32];
	struct records *r = NULL;
	struct sb_err err;
	sqlite3 *db;

	snprintf(path, sizeof path, "%s/missing/records.db", f->dir);
	assert_int_equal(records_open(path, &r, &err), -1);
	assert_null(r);
	expect_msg(&err, "its directory must exist");

	/* A symbolic link in place of the database is not followed. */
	snprintf(path, sizeof path, "%s/link.db", f->dir);
	assert_int_equal(symlink(f->db, path), 0);
	assert_int_equal(records_open(path, &r, &err), -1);
	expect_msg(&err, "link.db");

	/* A file written by a newer schema is refused, not misread. */
	db = raw_open(f->db);
	assert_int_equal(sqlite3_exec(db, "PRAGMA user_version = 99", NULL, NULL, NULL), SQLITE_OK);
	sqlite3_close(db);
	assert_int_equal(records_open(f->db, &r, &err), -1);
	assert_null(r);
	expect_msg(&err, "has schema version 99, newer than this sandbox-manager understands (7)");
}

/* ---------------------------------------------------------------- sessions and grants */

static void test_sessions(void **state)
{
	struct fixture *f = *state;
	struct records *r = open_ok(f->db);
	struct session_row s;
	struct sb_err err;
	uint64_t gen = 0;

	session_add(r, "s1");
	assert_int_equal(records_session_get(r, "s1", &s, &err), RECORDS_FOUND);
	assert_string_equal(s.id, "s1");
	assert_string_equal(s.repo, "/srv/repos/manifests");
	assert_string_equal(s.branch, "agent/s1");
	assert_string_equal(s.state, "active"); /* the default */
	assert_int_equal(s.generation, 1);
	assert_int_equal(s.turn, 0);
	assert_true(s.created_ms > 0);

	assert_int_equal(records_session_get(r, "nope", &s, &err), RECORDS_NOT_FOUND);
	expect_msg(&err, "no session nope");

	/* A duplicate id carries SQLite's message with the context. */
	memset(&s, 0, sizeof s);
	snprintf(s.id, sizeof s.id, "s1");
	snprintf(s.identity, sizeof s.identity, "bob");
	assert_int_equal(records_session_insert(r, &s, &err), -1);
	assert_string_equal(err.msg, on_postgres ? "records: inserting session s1: duplicate key value violates unique "
						   "constraint \"sessions_pkey\" (Key (id)=(s1) already exists.)" :
		"records: inserting session s1: UNIQUE constraint failed: sessions.id");

	assert_int_equal(records_session_bump_generation(r, "s1", &gen, &err), 0);
	assert_int_equal(gen, 2);
	assert_int_equal(records_session_bump_generation(r, "s1", &gen, &err), 0);
	assert_int_equal(gen, 3);
	assert_int_equal(records_session_bump_generation(r, "nope", &gen, &err), -1);
	expect_msg(&err, "no session nope");

	assert_int_equal(records_session_set_turn(r, "s1", 5, &err), 0);
	assert_int_equal(records_session_set_state(r, "s1", "deleting", &err), 0);
	assert_int_equal(records_session_get(r, "s1", &s, &err), RECORDS_FOUND);
	assert_int_equal(s.generation, 3);
	assert_int_equal(s.turn, 5);
	assert_string_equal(s.state, "deleting");
	assert_int_equal(records_session_set_turn(r, "nope", 1, &err), -1);
	assert_int_equal(records_session_set_state(r, "nope", "deleted", &err), -1);
	expect_msg(&err, "no session nope");
	records_close(r);
}

/* Rule N2: each identity one slot of the manager's id range, the same on every connection of the
 * store, never changed or given back; a used-up range refuses and records nothing. */
static void test_identity_slots(void **state)
{
	struct fixture *f = *state;
	struct records *r = open_ok(f->db), *r2 = open_ok(f->db);
	struct sb_err err;
	int64_t slot = -1;
	char *n;

	assert_int_equal(records_identity_slot(r, "alice", 0, 1000, &slot, &err), RECORDS_NOT_FOUND);
	assert_int_equal(records_identity_slot(r, "alice", 3, 1000, &slot, &err), RECORDS_FOUND);
	assert_int_equal(slot, 0);
	assert_int_equal(records_identity_slot(r2, "bob", 3, 1001, &slot, &err), RECORDS_FOUND);
	assert_int_equal(slot, 1);
	/* The other connection (another manager) reads alice's slot, never gives her another. */
	assert_int_equal(records_identity_slot(r2, "alice", 3, 1002, &slot, &err), RECORDS_FOUND);
	assert_int_equal(slot, 0);
	assert_int_equal(records_identity_slot(r, "carol", 3, 1003, &slot, &err), RECORDS_FOUND);
	assert_int_equal(slot, 2);
	assert_int_equal(records_identity_slot(r, "dave", 3, 1004, &slot, &err), RECORDS_REFUSED);
	expect_msg(&err, "the manager's id range is used up: its 3 slots are given to 3 identities");
	assert_int_equal(records_identity_slot(r, "dave", 0, 1004, &slot, &err), RECORDS_NOT_FOUND);
	assert_int_equal(records_identity_slot(r, "", 3, 1004, &slot, &err), -1);
	n = store_text(f->db, "SELECT count(*) FROM identity_ids");
	assert_string_equal(n, "3");
	free(n);
	/* The store itself holds the rule for any writer: one slot per identity, never moved or freed. */
	store_refuses(f->db, "INSERT INTO identity_ids (identity, slot, assigned_ms) VALUES ('eve', 1, 0)",
		      on_postgres ? "identity_ids_slot_key" : "UNIQUE constraint failed: identity_ids.slot");
	store_refuses(f->db, "UPDATE identity_ids SET slot = 7 WHERE identity = 'bob'", "an identity keeps its ids");
	store_refuses(f->db, "DELETE FROM identity_ids WHERE identity = 'bob'", "an identity keeps its ids");
	records_close(r2);
	records_close(r);
}

static void grants_are(struct records *r, const char *session, const char *expected)
{
	struct sb_err err;
	json_t *g = records_grants(r, session, &err);

	if (!g)
		fail_msg("records_grants: %s", err.msg);
	json_is(g, expected);
	json_decref(g);
}

static void test_grants(void **state)
{
	struct fixture *f = *state;
	struct records *r = open_ok(f->db);
	struct sb_err err;

	session_add(r, "s1");
	grants_are(r, "s1", "{}");
	assert_int_equal(records_grant_set(r, "s1", "kubernetes:staging", "read", &err), 0);
	assert_int_equal(records_grant_set(r, "s1", "aws:prod", "write", &err), 0);
	assert_int_equal(records_grant_set(r, "s1", "kubernetes:staging", "write", &err), 0); /* replaces */
	grants_are(r, "s1", "{\"aws:prod\":\"write\",\"kubernetes:staging\":\"write\"}");

	assert_int_equal(records_grant_revoke(r, "s1", "aws:prod", &err), 0);
	grants_are(r, "s1", "{\"kubernetes:staging\":\"write\"}");
	assert_int_equal(records_grant_revoke(r, "s1", "aws:prod", &err), -1);
	expect_msg(&err, "session s1 has no grant on aws:prod to revoke");

	assert_int_equal(records_grant_set(r, "nope", "aws:prod", "read", &err), -1);
	expect_msg(&err, on_postgres ? "violates foreign key constraint" : "FOREIGN KEY constraint failed");
	assert_int_equal(records_grant_set(r, "s1", "bad\xff", "read", &err), -1);
	expect_msg(&err, "not UTF-8");
	records_close(r);
}

/* ---------------------------------------------------------------- sandboxes */

static void sandbox_fill(struct sandbox_row *s, const char *session, uint64_t generation, const char *state)
{
	memset(s, 0, sizeof *s);
	snprintf(s->session, sizeof s->session, "%s", session);
	s->generation = generation;
	snprintf(s->backend, sizeof s->backend, "process");
	snprintf(s->runtime_id, sizeof s->runtime_id, "process:%llu:99", (unsigned long long)generation + 100);
	snprintf(s->address, sizeof s->address, "unix:/state/sandboxes/%s/agent.sock", session);
	snprintf(s->private_dir, sizeof s->private_dir, "/state/sandboxes/%s", session);
	snprintf(s->state, sizeof s->state, "%s", state);
	snprintf(s->grants_json, sizeof s->grants_json, "{\"kubernetes:staging\":\"read\"}");
	s->started_ms = 12345;
}

static size_t not_gone_count(struct records *r)
{
	struct sb_err err;
	json_t *list = records_sandboxes_not_gone(r, &err);
	size_t n;

	if (!list)
		fail_msg("records_sandboxes_not_gone: %s", err.msg);
	n = json_array_size(list);
	json_decref(list);
	return n;
}

static void test_sandboxes(void **state)
{
	struct fixture *f = *state;
	struct records *r = open_ok(f->db);
	struct sandbox_row s, got;
	struct sb_err err;
	json_t *list;

	session_add(r, "s1");
	assert_int_equal(records_sandbox_get(r, "s1", &got, &err), RECORDS_NOT_FOUND);
	sandbox_fill(&s, "s1", 1, "starting");
	assert_int_equal(records_sandbox_upsert(r, &s, &err), 0);
	sandbox_fill(&s, "s1", 1, "running"); /* same generation: an update */
	assert_int_equal(records_sandbox_upsert(r, &s, &err), 0);
	assert_int_equal(records_sandbox_get(r, "s1", &got, &err), RECORDS_FOUND);
	assert_int_equal(got.generation, 1);
	assert_string_equal(got.state, "running");
	assert_string_equal(got.runtime_id, "process:101:99");
	assert_string_equal(got.address, "unix:/state/sandboxes/s1/agent.sock");
	assert_string_equal(got.grants_json, "{\"kubernetes:staging\":\"read\"}");
	assert_int_equal(got.started_ms, 12345);

	/* A live sandbox is never replaced: its record is the only way to find and stop it. */
	sandbox_fill(&s, "s1", 2, "starting");
	assert_int_equal(records_sandbox_upsert(r, &s, &err), -1);
	expect_msg(&err, "session s1 has sandbox generation 1 (running): generation 2 may replace it only once it is gone");
	sandbox_fill(&s, "s1", 1, "gone");
	assert_int_equal(records_sandbox_upsert(r, &s, &err), -1);
	expect_msg(&err, "with its evidence, not by upsert");

	assert_int_equal(records_sandbox_set_state(r, "s1", 1, "stopping", NULL, &err), 0);
	assert_int_equal(records_sandbox_set_state(r, "s1", 0, "gone", "reaped", &err), -1);
	expect_msg(&err, "sandbox of session s1 is generation 1, not 0: refusing a stale state change");
	assert_int_equal(records_sandbox_set_state(r, "s1", 1, "gone", NULL, &err), -1);
	expect_msg(&err, "cannot be recorded gone without evidence");
	assert_int_equal(records_sandbox_set_state(r, "nope", 1, "stopping", NULL, &err), -1);
	expect_msg(&err, "no sandbox for session nope");
	assert_int_equal(not_gone_count(r), 1);

	assert_int_equal(records_sandbox_set_state(r, "s1", 1, "gone", "pidfd: agent init reaped", &err), 0);
	assert_int_equal(not_gone_count(r), 0);
	assert_int_equal(records_sandbox_set_state(r, "s1", 1, "running", NULL, &err), -1);
	expect_msg(&err, "is already gone: a gone sandbox stays gone");

	/* Once gone, only a newer generation replaces it. */
	sandbox_fill(&s, "s1", 1, "starting");
	assert_int_equal(records_sandbox_upsert(r, &s, &err), -1);
	sandbox_fill(&s, "s1", 2, "starting");
	assert_int_equal(records_sandbox_upsert(r, &s, &err), 0);
	list = records_sandboxes_not_gone(r, &err);
	assert_non_null(list);
	json_is(list, "[{\"session\":\"s1\",\"generation\":2,\"backend\":\"process\",\"runtime_id\":\"process:102:99\","
		      "\"address\":\"unix:/state/sandboxes/s1/agent.sock\",\"private_dir\":\"/state/sandboxes/s1\","
		      "\"state\":\"starting\",\"grants\":{\"kubernetes:staging\":\"read\"},"
		      "\"started_ms\":12345,\"evidence\":null}]");
	json_decref(list);
	records_close(r);
}

/* A reserved session gets its workspace back only once every sandbox of it is proven gone. */
static void test_release_reserved(void **state)
{
	struct fixture *f = *state;
	struct records *r = open_ok(f->db);
	struct session_row got;
	struct sandbox_row s;
	struct sb_err err;

	session_add(r, "s1");
	session_add(r, "s2");
	sandbox_fill(&s, "s1", 1, "running");
	assert_int_equal(records_sandbox_upsert(r, &s, &err), 0);
	assert_int_equal(records_sandbox_set_state(r, "s1", 1, "unproven", "container still running", &err), 0);
	assert_int_equal(records_session_set_state(r, "s1", "reserved", &err), 0);
	assert_int_equal(records_sessions_release(r, &err), 0);
	assert_int_equal(records_session_get(r, "s1", &got, &err), RECORDS_FOUND);
	assert_string_equal(got.state, "reserved");
	assert_int_equal(records_sandbox_set_state(r, "s1", 1, "gone", "exited (podman)", &err), 0);
	assert_int_equal(records_sessions_release(r, &err), 1);
	assert_int_equal(records_session_get(r, "s1", &got, &err), RECORDS_FOUND);
	assert_string_equal(got.state, "active");
	/* nothing else moves: an active or deleted session stays as it is */
	assert_int_equal(records_session_set_state(r, "s2", "deleted", &err), 0);
	assert_int_equal(records_sessions_release(r, &err), 0);
	assert_int_equal(records_session_get(r, "s2", &got, &err), RECORDS_FOUND);
	assert_string_equal(got.state, "deleted");
	records_close(r);
}

/* A session recovery could not settle (an exec of it still in flight) stays reserved, its sandbox
 * gone or not: the release waits for the exec's end (recovery.c recovery_reserve; resolve.c). */
static void test_release_waits_for_in_flight(void **state)
{
	struct fixture *f = *state;
	struct records *r = open_ok(f->db);
	struct session_row got;
	struct sb_err err;

	session_add(r, "s1");
	exec_add(r, "e1", "s1", 1000);
	assert_int_equal(records_exec_dispatched(r, "e1", 1, "00", "process:1:1", NULL, &err), 0);
	assert_int_equal(records_session_set_state(r, "s1", "reserved", &err), 0);
	assert_int_equal(records_sessions_release(r, &err), 0);
	assert_int_equal(records_session_get(r, "s1", &got, &err), RECORDS_FOUND);
	assert_string_equal(got.state, "reserved");
	assert_int_equal(records_exec_finish(r, "e1", "uncertain", NULL, NULL, "left by recovery", &err), 0);
	assert_int_equal(records_sessions_release(r, &err), 1);
	assert_int_equal(records_session_get(r, "s1", &got, &err), RECORDS_FOUND);
	assert_string_equal(got.state, "active");
	records_close(r);
}

/* ---------------------------------------------------------------- execs */

/* Every exec of the session, oldest first: the pages of records_page() (newest first), in turn. */
static json_t *execs_of(struct records *r, const char *session)
{
	struct records_query q = { .session = session, .limit = RECORDS_PAGE_LIMIT_MAX };
	char before[128] = "";
	json_t *all = json_array(), *page, *rec;
	struct sb_err err;
	size_t i;

	assert_non_null(all);
	do {
		q.before = before[0] ? before : NULL;
		page = NULL;
		if (records_page(r, &q, &page, &err) != RECORDS_FOUND)
			fail_msg("records_page: %s", err.msg);
		json_array_foreach(json_object_get(page, "records"), i, rec)
			assert_int_equal(json_array_insert(all, 0, rec), 0);
		snprintf(before, sizeof before, "%s", json_string_value(json_object_get(page, "next_before")) ?: "");
		json_decref(page);
	} while (before[0]);
	return all;
}

static void test_exec_lifecycle(void **state)
{
	struct fixture *f = *state;
	struct records *r = open_ok(f->db);
	struct exec_row *e = calloc(1, sizeof *e);
	struct sb_err err;
	json_t *list, *o, *ids;

	assert_non_null(e);
	session_add(r, "s1");
	exec_add(r, "e1", "s1", 1000);
	assert_int_equal(records_exec_get(r, "e1", e, &err), RECORDS_FOUND);
	assert_string_equal(e->state, "accepted");
	assert_string_equal(e->command, "kubectl get pods -n s1");
	assert_int_equal(e->turn, 3);
	assert_int_equal(e->timeout_seconds, 30);
	assert_int_equal(e->accepted_ms, 1000);
	assert_int_equal(e->generation, 0);
	assert_string_equal(e->nonce_hex, "");
	ids = records_exec_ids_in_state(r, NULL, "accepted", &err);
	json_is(ids, "[\"e1\"]");
	json_decref(ids);

	assert_int_equal(records_exec_dispatched(r, "e1", 7, "a1b2c3", "process:10:20", NULL, &err), 0);
	assert_int_equal(records_exec_get(r, "e1", e, &err), RECORDS_FOUND);
	assert_string_equal(e->state, "dispatched");
	assert_int_equal(e->generation, 7);
	assert_string_equal(e->nonce_hex, "a1b2c3");
	assert_string_equal(e->sandbox, "process:10:20");
	assert_true(e->dispatched_ms > 0);
	ids = records_exec_ids_in_state(r, NULL, "dispatched", &err);
	json_is(ids, "[\"e1\"]");
	json_decref(ids);

	assert_int_equal(records_exec_finish(r, "e1", "exited", "{\"status\":\"exited\",\"exit_code\":0}",
					     "{\"nonce\":\"a1b2c3\",\"verified\":true}", NULL, &err), 0);
	assert_int_equal(records_exec_get(r, "e1", e, &err), RECORDS_FOUND);
	assert_string_equal(e->state, "exited");
	assert_true(e->finished_ms >= e->dispatched_ms);

	/* Refused straight from accepted, with a reason; and one accepted earlier lists first. */
	exec_add(r, "e2", "s1", 2000);
	assert_int_equal(records_exec_finish(r, "e2", "refused", NULL, NULL, "timeout over the cap", &err), 0);
	exec_add(r, "e0", "s1", 500);

	list = execs_of(r, "s1");
	assert_int_equal(json_array_size(list), 3);
	assert_string_equal(json_string_value(json_object_get(json_array_get(list, 0), "exec_id")), "e0");
	o = json_array_get(list, 1);
	assert_int_equal(json_object_size(o), 17); /* ... "reason", "authority", "resolution" */
	assert_true(json_is_null(json_object_get(o, "resolution")));
	assert_string_equal(json_string_value(json_object_get(o, "exec_id")), "e1");
	assert_string_equal(json_string_value(json_object_get(o, "session")), "s1");
	assert_int_equal(json_integer_value(json_object_get(o, "turn")), 3);
	assert_string_equal(json_string_value(json_object_get(o, "state")), "exited");
	assert_string_equal(json_string_value(json_object_get(o, "command")), "kubectl get pods -n s1");
	assert_int_equal(json_integer_value(json_object_get(o, "timeout_seconds")), 30);
	assert_int_equal(json_integer_value(json_object_get(o, "generation")), 7);
	assert_string_equal(json_string_value(json_object_get(o, "nonce")), "a1b2c3");
	assert_string_equal(json_string_value(json_object_get(o, "sandbox")), "process:10:20");
	assert_int_equal(json_integer_value(json_object_get(o, "accepted_ms")), 1000);
	assert_true(json_is_integer(json_object_get(o, "dispatched_ms")));
	assert_true(json_is_integer(json_object_get(o, "finished_ms")));
	assert_int_equal(json_integer_value(json_object_get(json_object_get(o, "result"), "exit_code")), 0);
	assert_true(json_is_true(json_object_get(json_object_get(o, "receipt"), "verified")));
	assert_true(json_is_null(json_object_get(o, "reason")));

	o = json_array_get(list, 2);
	assert_string_equal(json_string_value(json_object_get(o, "state")), "refused");
	assert_string_equal(json_string_value(json_object_get(o, "reason")), "timeout over the cap");
	assert_true(json_is_null(json_object_get(o, "generation")));
	assert_true(json_is_null(json_object_get(o, "nonce")));
	assert_true(json_is_null(json_object_get(o, "dispatched_ms")));
	assert_true(json_is_null(json_object_get(o, "result")));
	assert_true(json_is_null(json_object_get(o, "receipt")));
	json_decref(list);

	session_add(r, "other");
	list = execs_of(r, "other");
	assert_int_equal(json_array_size(list), 0);
	json_decref(list);
	free(e);
	records_close(r);
}

static void test_exec_forbidden_transitions(void **state)
{
	struct fixture *f = *state;
	struct records *r = open_ok(f->db);
	struct exec_row *e;
	struct sb_err err;

	session_add(r, "s1");
	exec_add(r, "e1", "s1", 0);
	assert_int_equal(records_exec_dispatched(r, "e1", 1, "00", "process:1:1", NULL, &err), 0);
	assert_int_equal(records_exec_dispatched(r, "e1", 1, "00", "process:1:1", NULL, &err), -1);
	assert_string_equal(err.msg, "records: exec e1 is not accepted (state dispatched): never dispatched twice");

	assert_int_equal(records_exec_finish(r, "e1", "running", NULL, NULL, NULL, &err), -1);
	expect_msg(&err, "exec e1 cannot finish as running: a final state is one of");
	assert_int_equal(records_exec_finish(r, "e1", "accepted", NULL, NULL, NULL, &err), -1);
	exec_state_is(r, "e1", "dispatched");

	assert_int_equal(records_exec_finish(r, "e1", "uncertain", NULL, NULL, "agent connection lost", &err), 0);
	assert_int_equal(records_exec_finish(r, "e1", "exited", "{}", "{}", NULL, &err), -1);
	assert_string_equal(err.msg,
			    "records: exec e1 already finished (state uncertain): an exec finished once stays finished");
	assert_int_equal(records_exec_dispatched(r, "e1", 2, "01", "process:1:1", NULL, &err), -1);
	assert_string_equal(err.msg, "records: exec e1 is not accepted (state uncertain): never dispatched twice");
	exec_state_is(r, "e1", "uncertain");

	assert_int_equal(records_exec_dispatched(r, "nope", 1, "00", "process:1:1", NULL, &err), -1);
	expect_msg(&err, "no exec nope");
	assert_int_equal(records_exec_finish(r, "nope", "exited", NULL, NULL, NULL, &err), -1);
	expect_msg(&err, "no exec nope");

	exec_add(r, "e2", "s1", 0);
	assert_int_equal(records_exec_dispatched(r, "e2", 1, "not-hex", "process:1:1", NULL, &err), -1);
	expect_msg(&err, "the nonce must be hex");
	exec_state_is(r, "e2", "accepted");

	e = exec_new("e1", "s1", 0);
	assert_int_equal(records_exec_insert(r, e, &err), -1);
	assert_string_equal(err.msg, on_postgres ? "records: inserting exec e1: duplicate key value violates unique "
						   "constraint \"execs_pkey\" (Key (id)=(e1) already exists.)" :
		"records: inserting exec e1: UNIQUE constraint failed: execs.id");
	snprintf(e->id, sizeof e->id, "e3");
	snprintf(e->state, sizeof e->state, "dispatched");
	assert_int_equal(records_exec_insert(r, e, &err), -1);
	expect_msg(&err, "cannot start in state dispatched");
	snprintf(e->state, sizeof e->state, "accepted");
	snprintf(e->session, sizeof e->session, "nope");
	assert_int_equal(records_exec_insert(r, e, &err), -1);
	expect_msg(&err, on_postgres ? "violates foreign key constraint" : "FOREIGN KEY constraint failed");
	free(e);

	/* The same line holds for a writer that bypasses records.c. */
	store_refuses(f->db, "UPDATE execs SET state = 'dispatched' WHERE id = 'e1'", "an exec state only moves forward");
	store_refuses(f->db, "UPDATE execs SET state = 'finished' WHERE id = 'e2'", NULL);
	exec_state_is(r, "e1", "uncertain");
	records_close(r);
}

/* Text that is not JSON (a receipt as received) or not UTF-8 (a command from a shell) is kept. */
static void test_exec_odd_text_kept(void **state)
{
	struct fixture *f = *state;
	struct records *r = open_ok(f->db);
	struct exec_row *e = exec_new("e1", "s1", 0);
	struct sb_err err;
	json_t *list, *o;

	session_add(r, "s1");
	snprintf(e->command, sizeof e->command, "printf '\xff\xfe' caf\xc3\xa9");
	assert_int_equal(records_exec_insert(r, e, &err), 0);
	assert_int_equal(records_exec_finish(r, "e1", "uncertain", "not json {", "raw receipt", "no receipt", &err), 0);
	list = execs_of(r, "s1");
	o = json_array_get(list, 0);
	assert_string_equal(json_string_value(json_object_get(o, "command")), "printf '\\xff\\xfe' caf\xc3\xa9");
	assert_string_equal(json_string_value(json_object_get(o, "result")), "not json {");
	assert_string_equal(json_string_value(json_object_get(o, "receipt")), "raw receipt");
	json_decref(list);
	free(e);
	records_close(r);
}

/* ---------------------------------------------------------------- bounded records (invariant 13) */

#define MB2 2000000u
#define SHA_OUT "5625a0308fe0441f86d870732ec3fab5c565aec00cf8a3e73721334e8b3098ef"
#define SHA_ERR "0d5c5e8ad5b3b7f1c0f66e3a30a5a2b4bd3b0e1a2e4f8d1c7b6a5f4e3d2c1b0a"

/* n bytes of control characters (1..31: each a 6-byte \u00XX escape in JSON), no NUL. */
static char *control_chars(size_t n, unsigned seed)
{
	char *b = malloc(n + 1);

	assert_non_null(b);
	for (size_t i = 0; i < n; i++)
		b[i] = (char)(1 + (i * 7 + seed) % 31);
	b[n] = '\0';
	return b;
}

/* The agent's text for n raw bytes that are not UTF-8 (common/textesc.c textesc_encode):
 * "\xNN" for each byte that starts no sequence and "\\" for a backslash. */
static char *escaped_binary(size_t n, size_t *len)
{
	char *b = malloc(4 * n + 1), *w = b;

	assert_non_null(b);
	for (size_t i = 0; i < n; i++) {
		unsigned char c = (unsigned char)(0x80 + (i * 13) % 0x80);

		if (i % 5 == 0)
			w += sprintf(w, "\\\\");
		else if (i % 5 == 1)
			*w++ = (char)('A' + i % 26);
		else
			w += sprintf(w, "\\x%02x", c);
	}
	*w = '\0';
	*len = (size_t)(w - b);
	return b;
}

static const char *receipt_text(void)
{
	return "{\"nonce\":\"a1\",\"exec_id\":\"x\",\"stdout_bytes\":2000000,\"stdout_sha256\":\"" SHA_OUT "\","
	       "\"stderr_sha256\":\"" SHA_ERR "\",\"hmac_sha256\":\"00\"}";
}

/* An agent result with these texts for its streams (counted as whole streams of *_bytes). */
static char *result_text(const char *out, size_t out_len, const char *err_text, size_t err_len, bool err_escaped)
{
	json_t *j = json_pack("{s:s, s:i, s:n, s:s%, s:s%, s:I, s:I, s:b, s:b, s:b, s:b, s:i}", "status", "exited",
			      "exit_code", 0, "signal", "stdout", out, out_len, "stderr", err_text, err_len,
			      "stdout_bytes", (json_int_t)MB2, "stderr_bytes", (json_int_t)MB2, "stdout_truncated", 1,
			      "stderr_truncated", 1, "stdout_escaped", 0, "stderr_escaped", err_escaped, "duration_ms", 5);
	char *t;

	assert_non_null(j);
	t = json_dumps(j, JSON_COMPACT);
	json_decref(j);
	assert_non_null(t);
	return t;
}

static void exec_finished(struct records *r, const char *id, const char *session, int64_t accepted_ms,
			  const char *result, const char *receipt)
{
	struct sb_err err;

	exec_add(r, id, session, accepted_ms);
	if (records_exec_finish(r, id, "exited", result, receipt, NULL, &err) != 0)
		fail_msg("records_exec_finish %s: %s", id, err.msg);
}

/* A page as the daemon answers it, checked against the cap; returns the page (caller frees). */
static json_t *page_get(struct records *r, const struct records_query *q, size_t *answer_bytes)
{
	size_t budget = q->budget == 0 ? RECORDS_PAGE_BYTES : q->budget < RECORDS_PAGE_MIN_BYTES ?
			RECORDS_PAGE_MIN_BYTES : q->budget;
	json_t *page = NULL;
	struct sb_err err;

	if (records_page(r, q, &page, &err) != RECORDS_FOUND)
		fail_msg("records_page: %s", err.msg);
	assert_true(json_is_array(json_object_get(page, "records")));
	/* the answer as the daemon sends it: the page, "ok" and at most an exec id more than the records */
	assert_int_equal(json_object_set_new(page, "ok", json_true()), 0);
	*answer_bytes = json_dumpb(page, NULL, 0, JSON_COMPACT);
	if (*answer_bytes > budget + 128)
		fail_msg("a page's answer is %zu bytes, over its budget of %zu", *answer_bytes, budget);
	if (*answer_bytes >= CONTROL_RESPONSE_CAP)
		fail_msg("a page's answer is %zu bytes, over the control cap", *answer_bytes);
	return page;
}

static const char *str_of(json_t *o, const char *key)
{
	return json_string_value(json_object_get(o, key));
}

/* Every backslash of an escaped stream's text starts a whole escape: no cut split one. */
static void escapes_whole(const char *s, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		if (s[i] != '\\')
			continue;
		if (i + 1 < n && s[i + 1] == '\\') {
			i++;
			continue;
		}
		if (!(i + 3 < n && s[i + 1] == 'x' && strchr("0123456789abcdef", s[i + 2]) &&
		      strchr("0123456789abcdef", s[i + 3])))
			fail_msg("a split escape at byte %zu of %zu: \"%.8s\"", i, n, s + i);
		i += 3;
	}
}

/* The exec result rule's decoder (docs/operations.md; manager/front/cli.c stream_write applies it). */
static size_t stream_decode(const char *s, size_t n, bool escaped, uint8_t *out)
{
	size_t w = 0;
	unsigned v;

	for (size_t i = 0; i < n; i++) {
		if (escaped && s[i] == '\\' && i + 1 < n && s[i + 1] == '\\') {
			out[w++] = '\\';
			i++;
		} else if (escaped && s[i] == '\\') {
			assert_true(i + 3 < n && s[i + 1] == 'x');
			assert_int_equal(sscanf(s + i + 2, "%2x", &v), 1);
			out[w++] = (uint8_t)v;
			i += 3;
		} else {
			out[w++] = (uint8_t)s[i];
		}
	}
	return w;
}

/* Binary output, NUL first: the agent's result (sandbox-agent/result.c, as the agent sends it) is
 * recorded as a result, state exited, and a page gives back text that decodes to the very bytes. */
static void test_records_binary_output_round_trip(void **state)
{
	struct fixture *f = *state;
	struct records *r = open_ok(f->db);
	static const size_t sizes[] = { 3, 100, 4096 };
	struct sb_err err;

	session_add(r, "s1");
	for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++) {
		struct exec_request req = { .generation = 1 };
		struct exec_outcome o = { .status = EXEC_EXITED };
		struct records_query q = { 0 };
		uint8_t in[4096], back[4096];
		size_t n = sizes[k], bytes;
		json_t *j, *page, *rec, *res, *text;
		char *wire;

		snprintf(req.exec_id, sizeof req.exec_id, "bin%zu", k);
		if (k == 0)
			memcpy(in, "a\0b", 3);
		else
			assert_int_equal(sb_random_bytes(in, n, &err), 0);
		assert_int_equal(output_init(&o.out, 1 << 16, &err), 0);
		assert_int_equal(output_init(&o.err, 1 << 16, &err), 0);
		output_feed(&o.out, in, n);
		output_feed(&o.err, in, n);
		output_finish(&o.out);
		output_finish(&o.err);
		j = result_to_json(&req, &o, NULL);
		assert_non_null(j);
		wire = json_dumps(j, JSON_COMPACT);
		assert_non_null(wire);
		exec_finished(r, req.exec_id, "s1", 1000 + (int64_t)k, wire, NULL);

		q.exec_id = req.exec_id;
		page = page_get(r, &q, &bytes);
		rec = json_array_get(json_object_get(page, "records"), 0);
		assert_string_equal(str_of(rec, "state"), "exited");
		res = json_object_get(rec, "result");
		if (!json_is_object(res))
			fail_msg("exec %s: the record keeps no result object (%s)", req.exec_id,
				 json_is_string(res) ? json_string_value(res) : "null");
		assert_string_equal(str_of(res, "status"), "exited");
		assert_int_equal(json_integer_value(json_object_get(res, "stdout_bytes")), n);
		assert_true(json_is_true(json_object_get(res, "stdout_escaped")));
		text = json_object_get(res, "stdout");
		assert_int_equal(stream_decode(json_string_value(text), json_string_length(text), true, back), n);
		assert_memory_equal(back, in, n);
		text = json_object_get(res, "stderr");
		assert_int_equal(stream_decode(json_string_value(text), json_string_length(text), true, back), n);
		assert_memory_equal(back, in, n);
		json_decref(page);
		json_decref(j);
		free(wire);
		output_free(&o.out);
		output_free(&o.err);
	}
	records_close(r);
}

/* A command prints 2 MB on each stream: the record keeps 64 KiB of each, head and tail, with the
 * whole streams' byte counts and the receipt's digests. */
static void test_records_output_bounded_when_written(void **state)
{
	struct fixture *f = *state;
	struct records *r = open_ok(f->db);
	struct records_query q = { .exec_id = "e1" };
	size_t elen, bytes;
	char *out = control_chars(MB2, 0), *errt = escaped_binary(MB2 / 4, &elen);
	char *result = result_text(out, MB2, errt, elen, true);
	char *stored_len;
	json_t *page, *rec, *res;
	const char *so, *se;

	session_add(r, "s1");
	exec_finished(r, "e1", "s1", 1000, result, receipt_text());
	/* what is stored is bounded: 64 KiB of text per stream, 6 bytes per control character */
	stored_len = store_text(f->db, "SELECT length(result_json) FROM execs WHERE id = 'e1'");
	if (atol(stored_len) > 2 * 6 * (long)RECORDS_OUTPUT_LIMIT_DEFAULT + 4096)
		fail_msg("the stored result is %s bytes", stored_len);
	free(stored_len);

	page = page_get(r, &q, &bytes);
	rec = json_array_get(json_object_get(page, "records"), 0);
	res = json_object_get(rec, "result");
	so = str_of(res, "stdout");
	se = str_of(res, "stderr");
	assert_true(json_string_length(json_object_get(res, "stdout")) <= RECORDS_OUTPUT_LIMIT_DEFAULT + 96);
	assert_true(json_string_length(json_object_get(res, "stderr")) <= RECORDS_OUTPUT_LIMIT_DEFAULT + 96);
	assert_int_equal(json_integer_value(json_object_get(res, "stdout_bytes")), MB2);
	assert_true(json_is_true(json_object_get(res, "stdout_truncated")));
	assert_true(json_is_true(json_object_get(res, "stderr_truncated")));
	assert_string_equal(str_of(res, "stdout_sha256"), SHA_OUT);
	assert_string_equal(str_of(res, "stderr_sha256"), SHA_ERR);
	/* head and tail of the original, a marker between them */
	assert_memory_equal(so, out, RECORDS_OUTPUT_LIMIT_DEFAULT / 2);
	assert_memory_equal(so + json_string_length(json_object_get(res, "stdout")) - RECORDS_OUTPUT_LIMIT_DEFAULT / 2,
			    out + MB2 - RECORDS_OUTPUT_LIMIT_DEFAULT / 2, RECORDS_OUTPUT_LIMIT_DEFAULT / 2);
	assert_non_null(strstr(so, "bytes of this output are not kept in the record"));
	escapes_whole(se, json_string_length(json_object_get(res, "stderr")));
	/* written bounded, so served as written: nothing shortened for the page */
	assert_null(json_object_get(rec, "truncated"));
	json_decref(page);
	free(out);
	free(errt);
	free(result);
	records_close(r);
}

/* Many records of 2 MB streams, more than one answer could hold: every page stays under the cap,
 * and paging with `before` walks every record exactly once, newest first. */
static void test_records_pages_flood(void **state)
{
	struct fixture *f = *state;
	struct records *r = open_ok(f->db);
	enum { N = 52, BIG = 4 };
	char id[16], *big_out = control_chars(MB2, 1), *small = control_chars(RECORDS_OUTPUT_LIMIT_DEFAULT, 2);
	char *big = result_text(big_out, MB2, big_out, MB2, false);
	char *small_result = result_text(small, RECORDS_OUTPUT_LIMIT_DEFAULT, small, RECORDS_OUTPUT_LIMIT_DEFAULT, false);
	const unsigned limits[] = { RECORDS_PAGE_LIMIT_MAX, 7 };
	size_t total = 0;

	session_add(r, "s1");
	session_add(r, "s2");
	for (int i = 0; i < N; i++) {
		snprintf(id, sizeof id, "e%02d", i);
		/* accepted times collide in pairs: insertion order breaks the tie */
		exec_finished(r, id, "s1", 1000 + i / 2, i < BIG ? big : small_result, receipt_text());
	}
	exec_finished(r, "other", "s2", 5000, small_result, receipt_text());
	for (size_t l = 0; l < sizeof limits / sizeof limits[0]; l++) {
		struct records_query q = { .session = "s1", .limit = limits[l] };
		char before[16] = "";
		int next = N - 1, pages = 0;

		for (;;) {
			size_t bytes;
			json_t *page = page_get(r, &q, &bytes), *rec;
			size_t i;

			pages++;
			json_array_foreach(json_object_get(page, "records"), i, rec) {
				snprintf(id, sizeof id, "e%02d", next--);
				assert_string_equal(str_of(rec, "exec_id"), id);
				assert_int_equal(json_integer_value(json_object_get(json_object_get(rec, "result"),
										    "stdout_bytes")), MB2);
				if (l == 0)
					total += json_dumpb(rec, NULL, 0, JSON_COMPACT);
			}
			assert_true(json_array_size(json_object_get(page, "records")) <= limits[l]);
			if (!json_object_get(page, "next_before")) {
				json_decref(page);
				break;
			}
			snprintf(before, sizeof before, "%s", str_of(page, "next_before"));
			q.before = before;
			json_decref(page);
			assert_true(pages < N);
		}
		assert_int_equal(next, -1); /* reached the first record */
		if (l == 0)
			assert_true(pages >= 2);
		else
			assert_int_equal(pages, (N + 6) / 7);
	}
	/* the test means something: all of them would not fit one answer */
	if (total <= CONTROL_RESPONSE_CAP)
		fail_msg("the records total %zu bytes as JSON: not more than the cap", total);
	free(big_out);
	free(small);
	free(big);
	free(small_result);
	records_close(r);
}

static void test_records_page_state_and_refusals(void **state)
{
	struct fixture *f = *state;
	struct records *r = open_ok(f->db);
	struct records_query q = { .session = "s1", .limit = 2, .state = "refused" };
	struct sb_err err;
	json_t *page = NULL;
	size_t bytes;
	char id[16];

	session_add(r, "s1");
	for (int i = 0; i < 6; i++) {
		snprintf(id, sizeof id, "e%d", i);
		exec_add(r, id, "s1", 100 + i);
		if (i % 2 == 0)
			assert_int_equal(records_exec_finish(r, id, "refused", NULL, NULL, "no", &err), 0);
	}
	page = page_get(r, &q, &bytes);
	json_is(json_object_get(page, "next_before"), "\"e2\"");
	assert_string_equal(str_of(json_array_get(json_object_get(page, "records"), 0), "exec_id"), "e4");
	assert_string_equal(str_of(json_array_get(json_object_get(page, "records"), 1), "exec_id"), "e2");
	json_decref(page);
	q.before = "e2";
	page = page_get(r, &q, &bytes);
	assert_int_equal(json_array_size(json_object_get(page, "records")), 1);
	assert_string_equal(str_of(json_array_get(json_object_get(page, "records"), 0), "exec_id"), "e0");
	assert_null(json_object_get(page, "next_before"));
	json_decref(page);
	q = (struct records_query){ .session = "s1", .limit = 20, .state = "accepted" };
	page = page_get(r, &q, &bytes);
	assert_int_equal(json_array_size(json_object_get(page, "records")), 3);
	json_decref(page);

	/* a deleted session's records stay readable */
	assert_int_equal(records_session_set_state(r, "s1", "deleted", &err), 0);
	q = (struct records_query){ .session = "s1", .limit = 20 };
	page = page_get(r, &q, &bytes);
	assert_int_equal(json_array_size(json_object_get(page, "records")), 6);
	json_decref(page);

	q = (struct records_query){ .session = "nope", .limit = 20 };
	assert_int_equal(records_page(r, &q, &page, &err), RECORDS_NOT_FOUND);
	expect_msg(&err, "no session nope");
	q = (struct records_query){ .session = "s1", .limit = 20, .before = "zz" };
	assert_int_equal(records_page(r, &q, &page, &err), RECORDS_NOT_FOUND);
	expect_msg(&err, "has no exec zz");
	q = (struct records_query){ .exec_id = "zz" };
	assert_int_equal(records_page(r, &q, &page, &err), RECORDS_NOT_FOUND);
	q = (struct records_query){ .session = "s1", .limit = 20, .state = "running" };
	assert_int_equal(records_page(r, &q, &page, &err), -1);
	assert_int_equal(err.errnum, EINVAL);
	q = (struct records_query){ .session = "s1", .limit = RECORDS_PAGE_LIMIT_MAX + 1 };
	assert_int_equal(records_page(r, &q, &page, &err), -1);
	q = (struct records_query){ .session = "s1", .limit = 0 };
	assert_int_equal(records_page(r, &q, &page, &err), -1);
	q = (struct records_query){ .session = "s1", .exec_id = "e1", .limit = 1 };
	assert_int_equal(records_page(r, &q, &page, &err), -1);
	assert_null(page);
	records_close(r);
}

/* Set a column of one exec directly, as a writer that bypasses records.c (or an older version) would. */
static void raw_set(const char *path, const char *id, const char *column, const char *text)
{
	sqlite3 *db;
	sqlite3_stmt *st = NULL;
	char sql[128], msg[512], *changed;

	snprintf(sql, sizeof sql, "UPDATE execs SET %s = $1 WHERE id = $2", column);
	if (on_postgres) {
		changed = pgtest_text(pg_db, sql, 2, (const char *const[]){ text, id }, msg, sizeof msg);
		if (!changed || strcmp(changed, "1") != 0)
			fail_msg("%s: %s", sql, msg);
		free(changed);
		return;
	}
	db = raw_open(path);
	assert_int_equal(sqlite3_prepare_v2(db, sql, -1, &st, NULL), SQLITE_OK);
	assert_int_equal(sqlite3_bind_text(st, 1, text, -1, SQLITE_STATIC), SQLITE_OK);
	assert_int_equal(sqlite3_bind_text(st, 2, id, -1, SQLITE_STATIC), SQLITE_OK);
	assert_int_equal(sqlite3_step(st), SQLITE_DONE);
	assert_int_equal(sqlite3_changes(db), 1);
	sqlite3_finalize(st);
	sqlite3_close(db);
}

/* Records written by older versions hold whole outputs (the agent's 1 MiB per stream): they are
 * served bounded, flagged, with the receipt's digests. */
static void test_records_old_format_bounded(void **state)
{
	struct fixture *f = *state;
	struct records *r = open_ok(f->db);
	struct records_query q = { .session = "s1", .limit = 20 };
	char *out = control_chars(1024 * 1024, 3), *result = result_text(out, 1024 * 1024, out, 1024 * 1024, false);
	json_t *page, *rec, *res;
	size_t bytes;

	session_add(r, "s1");
	exec_finished(r, "old", "s1", 1, "{}", NULL);
	raw_set(f->db, "old", "result_json", result);
	raw_set(f->db, "old", "receipt_json", receipt_text());
	page = page_get(r, &q, &bytes);
	rec = json_array_get(json_object_get(page, "records"), 0);
	res = json_object_get(rec, "result");
	assert_true(json_is_true(json_object_get(rec, "truncated")));
	assert_true(json_string_length(json_object_get(res, "stdout")) <= RECORDS_OUTPUT_LIMIT_DEFAULT + 96);
	assert_true(json_string_length(json_object_get(res, "stderr")) <= RECORDS_OUTPUT_LIMIT_DEFAULT + 96);
	assert_int_equal(json_integer_value(json_object_get(res, "stdout_bytes")), MB2);
	assert_string_equal(str_of(res, "stdout_sha256"), SHA_OUT);
	assert_true(bytes < 2 * 6 * RECORDS_OUTPUT_LIMIT_DEFAULT + 8192);
	json_decref(page);
	free(out);
	free(result);
	records_close(r);
}

/* One record too large for any page on its own (every field huge, as only a writer bypassing
 * records.c could make it): served shortened, never refused, ids, counts and digests intact;
 * the smallest budget gets the summary. */
static void test_records_huge_single_record(void **state)
{
	struct fixture *f = *state;
	struct records *r = open_ok(f->db);
	char *big = control_chars(320 * 1024, 4), *result;
	json_t *res = json_pack("{s:s, s:i, s:s, s:s, s:I, s:I, s:s, s:[s,s]}", "status", "exited", "exit_code", 0,
				"stdout", big, "stderr", big, "stdout_bytes", (json_int_t)MB2, "stderr_bytes",
				(json_int_t)MB2, "junk", big, "more", big, big);
	const size_t budgets[] = { 0, RECORDS_PAGE_MIN_BYTES, 1 };

	assert_non_null(res);
	for (int i = 0; i < 1000; i++) {
		char key[600];

		/* long keys: no string shortening can make these fit */
		snprintf(key, sizeof key, "%0500d\x01\x02", i);
		json_object_set_new(res, key, json_integer(i));
	}
	result = json_dumps(res, JSON_COMPACT);
	json_decref(res);
	assert_non_null(result);
	session_add(r, "s1");
	exec_finished(r, "small", "s1", 1, "{}", NULL);
	exec_finished(r, "huge", "s1", 2, "{}", NULL);
	raw_set(f->db, "huge", "result_json", result);
	raw_set(f->db, "huge", "receipt_json", big);   /* not JSON: kept as a string */
	raw_set(f->db, "huge", "reason", big);
	raw_set(f->db, "huge", "command", big);
	for (size_t b = 0; b < sizeof budgets / sizeof budgets[0]; b++) {
		struct records_query q = { .session = "s1", .limit = 20, .budget = budgets[b] };
		json_t *page, *rec;
		size_t bytes;

		page = page_get(r, &q, &bytes);
		rec = json_array_get(json_object_get(page, "records"), 0);
		assert_string_equal(str_of(rec, "exec_id"), "huge");
		assert_string_equal(str_of(rec, "state"), "exited");
		assert_true(json_is_true(json_object_get(rec, "truncated")));
		assert_int_equal(json_integer_value(json_object_get(json_object_get(rec, "result"), "stdout_bytes")), MB2);
		assert_int_equal(json_integer_value(json_object_get(json_object_get(rec, "result"), "exit_code")), 0);
		/* the small one follows, on this page or the next */
		if (json_array_size(json_object_get(page, "records")) == 1)
			json_is(json_object_get(page, "next_before"), "\"huge\"");
		else
			assert_string_equal(str_of(json_array_get(json_object_get(page, "records"), 1), "exec_id"), "small");
		if (b == 0)
			assert_null(json_object_get(rec, "omitted")); /* room enough to keep shortened texts */
		else
			assert_non_null(json_object_get(rec, "omitted")); /* the summary */
		json_decref(page);
		q.exec_id = "huge";
		q.session = NULL;
		page = page_get(r, &q, &bytes);
		assert_string_equal(str_of(json_array_get(json_object_get(page, "records"), 0), "exec_id"), "huge");
		json_decref(page);
	}
	free(big);
	free(result);
	records_close(r);
}

/* The records op's errors quote what the records hold; a message that is not UTF-8 (cut inside a
 * character at SB_ERR_MSG_MAX, say) still makes an answer, never none (control.c control_error). */
static void test_control_error_not_utf8(void **state)
{
	char long_msg[SB_ERR_MSG_MAX + 8];
	json_t *e;

	(void)state;
	e = control_error("not_found", "no exec caf\xc3 here");
	assert_non_null(e);
	assert_string_equal(json_string_value(json_object_get(json_object_get(e, "error"), "message")), "no exec caf? here");
	json_decref(e);
	memset(long_msg, 'a', sizeof long_msg);
	long_msg[SB_ERR_MSG_MAX - 2] = '\xc3';   /* the cut falls inside this character */
	long_msg[SB_ERR_MSG_MAX - 1] = '\xa9';
	long_msg[sizeof long_msg - 1] = '\0';
	e = control_error("internal", "%s", long_msg);
	assert_non_null(e);
	json_decref(e);
}

/* ---------------------------------------------------------------- threads and crashes */

struct worker {
	pthread_t thread;
	struct records *r;
	int index;
	char error[SB_ERR_MSG_MAX];
};

static void *worker_main(void *arg)
{
	struct worker *w = arg;
	struct exec_row *e = calloc(1, sizeof *e);
	struct sb_err err;

	if (!e)
		return NULL;
	snprintf(e->session, sizeof e->session, "s1");
	snprintf(e->command, sizeof e->command, "true");
	for (int i = 0; i < 100 && !w->error[0]; i++) {
		snprintf(e->id, sizeof e->id, "t%d-%03d", w->index, i);
		if (records_exec_insert(w->r, e, &err) != 0 ||
		    records_exec_dispatched(w->r, e->id, 1, "abcd", "process:1:1", NULL, &err) != 0 ||
		    records_exec_finish(w->r, e->id, "exited", "{\"exit_code\":0}", "{}", NULL, &err) != 0)
			snprintf(w->error, sizeof w->error, "%s", err.msg);
	}
	free(e);
	return NULL;
}

static void test_concurrent_inserts(void **state)
{
	struct fixture *f = *state;
	struct records *r = open_ok(f->db);
	struct worker workers[8];
	struct sb_err err;
	json_t *list, *ids;

	session_add(r, "s1");
	for (int i = 0; i < 8; i++) {
		workers[i] = (struct worker){ .r = r, .index = i };
		assert_int_equal(pthread_create(&workers[i].thread, NULL, worker_main, &workers[i]), 0);
	}
	for (int i = 0; i < 8; i++) {
		assert_int_equal(pthread_join(workers[i].thread, NULL), 0);
		if (workers[i].error[0])
			fail_msg("worker %d: %s", i, workers[i].error);
	}
	list = execs_of(r, "s1");
	assert_int_equal(json_array_size(list), 800);
	json_decref(list);
	ids = records_exec_ids_in_state(r, NULL, "exited", &err);
	assert_int_equal(json_array_size(ids), 800);
	json_decref(ids);
	for (int t = 0; t < 8; t++) {
		for (int i = 0; i < 100; i++) {
			char id[32];

			snprintf(id, sizeof id, "t%d-%03d", t, i);
			exec_state_is(r, id, "exited");
		}
	}
	records_close(r);
}

static off_t file_size(const char *path, const char *suffix)
{
	char p[PATH_MAX + 8];
	struct stat st;

	snprintf(p, sizeof p, "%s%s", path, suffix);
	return stat(p, &st) == 0 ? st.st_size : -1;
}

/* Child, a manager about to die: commits exec "committed", then writes many rows in a second
 * transaction until SQLite has spilled some of them into the WAL, and kills itself with SIGKILL
 * before that transaction commits. Any exit code means a step failed (the code says which). */
static void crash_child(const char *path)
{
	static char command[8192];
	struct records *r;
	struct sb_err err;
	sqlite3_stmt *st;
	sqlite3 *db;
	off_t committed_wal;

	if (records_open(path, &r, &err) != 0)
		_exit(10);
	session_add(r, "s1");
	exec_add(r, "committed", "s1", 0);
	committed_wal = file_size(path, "-wal");
	memset(command, 'x', sizeof command - 1);
	if (sqlite3_open_v2(path, &db, SQLITE_OPEN_READWRITE, NULL) != SQLITE_OK ||
	    sqlite3_exec(db, "PRAGMA cache_size = 10; BEGIN IMMEDIATE", NULL, NULL, NULL) != SQLITE_OK ||
	    sqlite3_prepare_v2(db, "INSERT INTO execs (id, session, turn, state, command, timeout_seconds, accepted_ms)"
			       " VALUES (?1, 's1', 0, 'accepted', ?2, 1, 1)", -1, &st, NULL) != SQLITE_OK)
		_exit(11);
	for (int i = 0; i < 200; i++) {
		char id[32];

		snprintf(id, sizeof id, "uncommitted-%d", i);
		if (sqlite3_bind_text(st, 1, id, -1, SQLITE_TRANSIENT) != SQLITE_OK ||
		    sqlite3_bind_text(st, 2, command, -1, SQLITE_STATIC) != SQLITE_OK ||
		    sqlite3_step(st) != SQLITE_DONE || sqlite3_reset(st) != SQLITE_OK)
			_exit(12);
	}
	if (file_size(path, "-wal") <= committed_wal)
		_exit(13); /* nothing of the open transaction reached the file: the test would prove little */
	kill(getpid(), SIGKILL);
	_exit(14);
}

static void test_crash_keeps_committed(void **state)
{
	struct fixture *f = *state;
	struct records *r;
	struct exec_row *e = calloc(1, sizeof *e);
	struct sb_err err;
	json_t *list;
	sqlite3 *db;
	char *check;
	int status;
	pid_t pid;

	assert_non_null(e);
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0)
		crash_child(f->db);
	assert_int_equal(waitpid(pid, &status, 0), pid);
	if (!WIFSIGNALED(status) || WTERMSIG(status) != SIGKILL)
		fail_msg("the child did not die by SIGKILL (status 0x%x)", status);

	r = open_ok(f->db);
	assert_int_equal(records_exec_get(r, "committed", e, &err), RECORDS_FOUND);
	assert_string_equal(e->state, "accepted");
	assert_int_equal(records_exec_get(r, "uncommitted-0", e, &err), RECORDS_NOT_FOUND);
	list = execs_of(r, "s1");
	assert_int_equal(json_array_size(list), 1);
	json_decref(list);
	records_close(r);

	db = raw_open(f->db);
	check = raw_text(db, "PRAGMA integrity_check");
	assert_string_equal(check, "ok");
	free(check);
	sqlite3_close(db);
	free(e);
}

/* The WAL's checkpoint runs on the store's own thread, never inside a commit (records_sqlite.c:
 * SQLite's default ran it in the commit that took the WAL past 1000 pages, 2-11 ms of that call).
 * Past those pages the thread says it ran, and the database file has taken the WAL's pages while
 * the store is still open. Without the thread its count stays 0 (the commit checkpoints). */
static void test_checkpoint_off_the_calls(void **state)
{
	struct fixture *f = *state;
	struct records *r = open_ok(f->db);
	char id[16], *out = control_chars(RECORDS_OUTPUT_LIMIT_DEFAULT, 3);
	char *result = result_text(out, RECORDS_OUTPUT_LIMIT_DEFAULT, out, RECORDS_OUTPUT_LIMIT_DEFAULT, false);
	struct stat before, after;
	int waited = 0;

	assert_int_equal(stat(f->db, &before), 0);
	session_add(r, "s1");
	/* each record holds two streams of 64 KiB: 60 of them are well past 1000 pages of 4 KiB */
	for (int i = 0; i < 60; i++) {
		snprintf(id, sizeof id, "ck%02d", i);
		exec_finished(r, id, "s1", 1000 + i, result, receipt_text());
	}
	while (records_sqlite_checkpoints(r) == 0 && waited++ < 1000)
		usleep(10 * 1000);
	if (records_sqlite_checkpoints(r) == 0)
		fail_msg("no checkpoint ran on the store's thread within 10 s of 60 large records");
	assert_int_equal(stat(f->db, &after), 0);
	if (after.st_size <= before.st_size)
		fail_msg("the database file did not grow while open (%lld -> %lld bytes)", (long long)before.st_size,
			 (long long)after.st_size);
	free(out);
	free(result);
	records_close(r);
}

/* Two connections to one store (two handles here; several managers later): each transition is one
 * compare-and-set on the current state, so of two threads racing to dispatch or to finish the same
 * exec, exactly one wins, every time, and the loser is told the state it found. */
struct racer {
	pthread_t thread;
	struct records *r;
	pthread_barrier_t *start;
	int index, won_dispatch, won_finish;
	char error[SB_ERR_MSG_MAX + 16];
};

static void *racer_main(void *arg)
{
	struct racer *w = arg;
	struct sb_err err;
	char id[32];

	for (int i = 0; i < 50; i++) {
		snprintf(id, sizeof id, "race-%02d", i);
		pthread_barrier_wait(w->start);
		if (records_exec_dispatched(w->r, id, 1, "abcd", "process:1:1", NULL, &err) == 0)
			w->won_dispatch++;
		else if (!strstr(err.msg, "never dispatched twice"))
			snprintf(w->error, sizeof w->error, "dispatch: %s", err.msg);
		pthread_barrier_wait(w->start);
		if (records_exec_finish(w->r, id, w->index ? "exited" : "uncertain", NULL, NULL, NULL, &err) == 0)
			w->won_finish++;
		else if (!strstr(err.msg, "an exec finished once stays finished"))
			snprintf(w->error, sizeof w->error, "finish: %s", err.msg);
	}
	return NULL;
}

static void test_two_connections_one_transition(void **state)
{
	struct fixture *f = *state;
	struct records *r = open_ok(f->db);
	struct racer w[2];
	pthread_barrier_t start;
	char id[32];

	session_add(r, "s1");
	for (int i = 0; i < 50; i++) {
		snprintf(id, sizeof id, "race-%02d", i);
		exec_add(r, id, "s1", 1000 + i);
	}
	assert_int_equal(pthread_barrier_init(&start, NULL, 2), 0);
	for (int i = 0; i < 2; i++) {
		w[i] = (struct racer){ .r = open_ok(f->db), .start = &start, .index = i };
		assert_int_equal(pthread_create(&w[i].thread, NULL, racer_main, &w[i]), 0);
	}
	for (int i = 0; i < 2; i++) {
		assert_int_equal(pthread_join(w[i].thread, NULL), 0);
		records_close(w[i].r);
		if (w[i].error[0])
			fail_msg("connection %d: %s", i, w[i].error);
	}
	pthread_barrier_destroy(&start);
	assert_int_equal(w[0].won_dispatch + w[1].won_dispatch, 50);
	assert_int_equal(w[0].won_finish + w[1].won_finish, 50);
	for (int i = 0; i < 50; i++) {
		struct exec_row *e = calloc(1, sizeof *e);
		struct sb_err err;

		assert_non_null(e);
		snprintf(id, sizeof id, "race-%02d", i);
		assert_int_equal(records_exec_get(r, id, e, &err), RECORDS_FOUND);
		assert_true(strcmp(e->state, "exited") == 0 || strcmp(e->state, "uncertain") == 0);
		free(e);
	}
	records_close(r);
}

/* ---------------------------------------------------------------- the PostgreSQL store's own */

/* A database written by a newer schema is refused and left as it was; a server that is not there,
 * or a store that is neither, is a clear error naming it, never its password. */
static void test_pg_open_refusals(void **state)
{
	struct fixture *f = *state;
	struct records *r = open_ok(f->db);
	char store[PATH_MAX + 160], msg[512], *version;
	struct sb_err err;

	records_close(r);
	r = NULL;
	if (pgtest_exec(pg_db, "UPDATE records_schema SET version = 99", msg, sizeof msg) != 0)
		fail_msg("%s", msg);
	assert_int_equal(records_open_store(pg_store, &r, &err), -1);
	assert_null(r);
	expect_msg(&err, "has schema version 99, newer than this sandbox-manager understands (7)");
	expect_msg(&err, pg_db);
	version = store_text(f->db, "SELECT version FROM records_schema");
	assert_string_equal(version, "99");
	free(version);

	snprintf(store, sizeof store, "postgres:host=%s/absent port=5432 user=sbrecords dbname=nowhere password=s3cret",
		 f->dir);
	assert_int_equal(records_open_store(store, &r, &err), -1);
	assert_null(r);
	expect_msg(&err, "cannot connect to the store postgres (database nowhere on ");
	if (strstr(err.msg, "s3cret"))
		fail_msg("the password is in the message: %s", err.msg);

	assert_int_equal(records_open_store("mysql:localhost", &r, &err), -1);
	expect_msg(&err, "the store must be sqlite:PATH or postgres:CONNINFO");
	assert_int_equal(records_open_store("sqlite:", &r, &err), -1);
	expect_msg(&err, "database path is missing");
}

/* The server ends the manager's connection: that call fails and says so, the next one reconnects
 * (prepared statements again), and nothing committed is lost. The connection's socket, before and
 * after, is close-on-exec (libpq's), so no sandbox runtime the manager starts inherits it. */
static void test_pg_connection_lost(void **state)
{
	struct fixture *f = *state;
	struct records *r = open_ok(f->db);
	char sql[256], msg[512];
	struct session_row s;
	struct sb_err err;

	session_add(r, "s1");
	assert_int_equal(records_session_get(r, "s1", &s, &err), RECORDS_FOUND);
	assert_int_equal(check_cloexec_fds("socket:"), 1);
	snprintf(sql, sizeof sql, "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = '%s'"
		 " AND pid <> pg_backend_pid()", pg_db);
	if (pgtest_exec(NULL, sql, msg, sizeof msg) != 0)
		fail_msg("%s", msg);
	assert_int_equal(records_session_get(r, "s1", &s, &err), -1);
	expect_msg(&err, "the connection to postgres (database");
	expect_msg(&err, "reconnected for the next call");
	assert_int_equal(records_session_get(r, "s1", &s, &err), RECORDS_FOUND);
	assert_string_equal(s.identity, "alice");
	session_add(r, "s2");
	assert_int_equal(check_cloexec_fds("socket:"), 1);
	records_close(r);
}

int main(void)
{
	const struct CMUnitTest pg_tests[] = {
		cmocka_unit_test_setup_teardown(test_reopen_keeps_data, setup, teardown),
		cmocka_unit_test_setup_teardown(test_pg_open_refusals, setup, teardown),
		cmocka_unit_test_setup_teardown(test_pg_connection_lost, setup, teardown),
		cmocka_unit_test_setup_teardown(test_sessions, setup, teardown),
		cmocka_unit_test_setup_teardown(test_identity_slots, setup, teardown),
		cmocka_unit_test_setup_teardown(test_grants, setup, teardown),
		cmocka_unit_test_setup_teardown(test_sandboxes, setup, teardown),
		cmocka_unit_test_setup_teardown(test_release_reserved, setup, teardown),
		cmocka_unit_test_setup_teardown(test_release_waits_for_in_flight, setup, teardown),
		cmocka_unit_test_setup_teardown(test_exec_lifecycle, setup, teardown),
		cmocka_unit_test_setup_teardown(test_exec_forbidden_transitions, setup, teardown),
		cmocka_unit_test_setup_teardown(test_exec_odd_text_kept, setup, teardown),
		cmocka_unit_test_setup_teardown(test_records_output_bounded_when_written, setup, teardown),
		cmocka_unit_test_setup_teardown(test_records_pages_flood, setup, teardown),
		cmocka_unit_test_setup_teardown(test_records_page_state_and_refusals, setup, teardown),
		cmocka_unit_test_setup_teardown(test_records_old_format_bounded, setup, teardown),
		cmocka_unit_test_setup_teardown(test_records_huge_single_record, setup, teardown),
		cmocka_unit_test_setup_teardown(test_records_binary_output_round_trip, setup, teardown),
		cmocka_unit_test_setup_teardown(test_concurrent_inserts, setup, teardown),
		cmocka_unit_test_setup_teardown(test_two_connections_one_transition, setup, teardown),
	};
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_reopen_keeps_data, setup, teardown),
		cmocka_unit_test_setup_teardown(test_wal_mode_and_cloexec, setup, teardown),
		cmocka_unit_test_setup_teardown(test_open_refusals, setup, teardown),
		cmocka_unit_test_setup_teardown(test_sessions, setup, teardown),
		cmocka_unit_test_setup_teardown(test_identity_slots, setup, teardown),
		cmocka_unit_test_setup_teardown(test_grants, setup, teardown),
		cmocka_unit_test_setup_teardown(test_sandboxes, setup, teardown),
		cmocka_unit_test_setup_teardown(test_release_reserved, setup, teardown),
		cmocka_unit_test_setup_teardown(test_exec_lifecycle, setup, teardown),
		cmocka_unit_test_setup_teardown(test_exec_forbidden_transitions, setup, teardown),
		cmocka_unit_test_setup_teardown(test_exec_odd_text_kept, setup, teardown),
		cmocka_unit_test_setup_teardown(test_records_output_bounded_when_written, setup, teardown),
		cmocka_unit_test_setup_teardown(test_records_pages_flood, setup, teardown),
		cmocka_unit_test_setup_teardown(test_records_page_state_and_refusals, setup, teardown),
		cmocka_unit_test_setup_teardown(test_records_old_format_bounded, setup, teardown),
		cmocka_unit_test_setup_teardown(test_records_huge_single_record, setup, teardown),
		cmocka_unit_test_setup_teardown(test_records_binary_output_round_trip, setup, teardown),
		cmocka_unit_test(test_control_error_not_utf8),
		cmocka_unit_test_setup_teardown(test_concurrent_inserts, setup, teardown),
		cmocka_unit_test_setup_teardown(test_two_connections_one_transition, setup, teardown),
		cmocka_unit_test_setup_teardown(test_crash_keeps_committed, setup, teardown),
		cmocka_unit_test_setup_teardown(test_checkpoint_off_the_calls, setup, teardown),
	};

	int failed = cmocka_run_group_tests_name("records on sqlite", tests, NULL, NULL);

	/* The same functions on the other store; the SQLite file's own tests (WAL, its mode, a link
	 * refused, a killed writer, a newer user_version) have their PostgreSQL counterparts above. */
	on_postgres = true;
	return failed + pgtest_run_group("records on postgres", pg_tests, sizeof pg_tests / sizeof pg_tests[0]);
}
