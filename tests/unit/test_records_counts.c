/* Unit tests for records_counts() (manager/records/records_counts.c), what status and metrics report: every exec
 * and session state counted, zeros included; uncertain execs counted as open only on sessions not
 * deleted, listed by session newest first with their newest exec; reserved sessions listed; both
 * lists bounded; and the time of one count over 100,000 execs (printed, bounded loosely). Every
 * test runs on both stores: SQLite, then PostgreSQL (tests/support/pgtest.h). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <limits.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "clock.h"
#include "pathfmt.h"
#include "records.h"
#include "pgtest.h"
#include "testutil.h"

static bool on_postgres; /* the second run of the tests */

struct fixture {
	char dir[PATH_MAX];
	char pgdb[64];         /* on PostgreSQL: the test's database */
	struct records *r;
};

static int setup(void **state)
{
	struct fixture *f = calloc(1, sizeof *f);
	char db[PATH_MAX];
	struct sb_err err;

	assert_non_null(f);
	snprintf(f->dir, sizeof f->dir, "/tmp/test_records_counts.XXXXXX");
	assert_non_null(mkdtemp(f->dir));
	if (on_postgres) {
		char store[PATH_MAX + 128];

		pgtest_new_db(f->pgdb, sizeof f->pgdb, store, sizeof store);
		must(records_open_store(store, &f->r, &err), &err, "records_open_store");
	} else {
		assert_int_equal(path_fmt(db, sizeof db, &err, "%s/records.db", f->dir), 0);
		must(records_open(db, &f->r, &err), &err, "records_open");
	}
	*state = f;
	return 0;
}

static int teardown(void **state)
{
	struct fixture *f = *state;

	records_close(f->r);
	test_rmtree(f->dir);
	free(f);
	return 0;
}

static void session_add(struct records *r, const char *id, const char *state, int64_t created_ms)
{
	struct session_row s = { .generation = 1, .created_ms = created_ms };
	struct sb_err err;

	snprintf(s.id, sizeof s.id, "%s", id);
	snprintf(s.identity, sizeof s.identity, "alice");
	snprintf(s.state, sizeof s.state, "active");
	must(records_session_insert(r, &s, &err), &err, "records_session_insert");
	if (strcmp(state, "active") != 0)
		must(records_session_set_state(r, id, state, &err), &err, "records_session_set_state");
}

/* An exec accepted at accepted_ms and moved to state (accepted, dispatched or a final one). */
static void exec_add(struct records *r, const char *id, const char *session, int64_t accepted_ms, const char *state)
{
	struct exec_row *e = calloc(1, sizeof *e);
	struct sb_err err;

	assert_non_null(e);
	snprintf(e->id, sizeof e->id, "%s", id);
	snprintf(e->session, sizeof e->session, "%s", session);
	snprintf(e->state, sizeof e->state, "accepted");
	snprintf(e->command, sizeof e->command, "true");
	e->timeout_seconds = 30;
	e->accepted_ms = accepted_ms;
	must(records_exec_insert(r, e, &err), &err, "records_exec_insert");
	free(e);
	if (strcmp(state, "dispatched") == 0)
		must(records_exec_dispatched(r, id, 1, "00", "process:1:1", "{}", &err), &err, "records_exec_dispatched");
	else if (strcmp(state, "accepted") != 0)
		must(records_exec_finish(r, id, state, NULL, NULL, "test", &err), &err, "records_exec_finish");
}

static json_t *counts(struct records *r)
{
	struct sb_err err;
	json_t *c = records_counts(r, &err);

	if (c == NULL)
		fail_msg("records_counts: %s", err.msg);
	return c;
}

static long long at(json_t *c, const char *group, const char *key)
{
	json_t *v = json_object_get(json_object_get(c, group), key);

	if (!json_is_integer(v))
		fail_msg("no %s.%s in the counts", group, key);
	return (long long)json_integer_value(v);
}

static void test_counts_empty(void **state)
{
	struct fixture *f = *state;
	json_t *c = counts(f->r);
	const char *key;
	json_t *v;

	assert_int_equal(json_object_size(json_object_get(c, "execs")), 8);
	json_object_foreach(json_object_get(c, "execs"), key, v)
		assert_int_equal(json_integer_value(v), 0);
	assert_int_equal(json_object_size(json_object_get(c, "sessions")), 4);
	assert_int_equal(at(c, "sessions", "active"), 0);
	assert_int_equal(at(c, "sessions", "reserved"), 0);
	assert_int_equal(json_integer_value(json_object_get(c, "uncertain_open")), 0);
	assert_int_equal(json_array_size(json_object_get(c, "uncertain_sessions")), 0);
	assert_int_equal(json_array_size(json_object_get(c, "reserved_sessions")), 0);
	json_decref(c);
}

static void test_counts_states(void **state)
{
	struct fixture *f = *state;
	json_t *c, *u;

	session_add(f->r, "s1", "active", 1);
	session_add(f->r, "s2", "active", 2);
	session_add(f->r, "gone", "deleted", 3);
	session_add(f->r, "held", "reserved", 4);
	exec_add(f->r, "e1", "s1", 10, "exited");
	exec_add(f->r, "e2", "s1", 11, "exited");
	exec_add(f->r, "e3", "s1", 12, "timed_out");
	exec_add(f->r, "e4", "s1", 13, "uncertain");
	exec_add(f->r, "e5", "s1", 14, "uncertain");
	exec_add(f->r, "e6", "s2", 20, "uncertain");
	exec_add(f->r, "e7", "gone", 30, "uncertain"); /* a deleted session's: nothing left to reconcile */
	exec_add(f->r, "e8", "s2", 21, "signaled");
	exec_add(f->r, "e9", "s2", 22, "refused");
	exec_add(f->r, "e10", "s2", 23, "cancelled");
	exec_add(f->r, "e11", "held", 40, "dispatched");
	exec_add(f->r, "e12", "held", 41, "accepted");
	c = counts(f->r);
	assert_int_equal(at(c, "execs", "exited"), 2);
	assert_int_equal(at(c, "execs", "timed_out"), 1);
	assert_int_equal(at(c, "execs", "uncertain"), 4);
	assert_int_equal(at(c, "execs", "signaled"), 1);
	assert_int_equal(at(c, "execs", "refused"), 1);
	assert_int_equal(at(c, "execs", "cancelled"), 1);
	assert_int_equal(at(c, "execs", "dispatched"), 1);
	assert_int_equal(at(c, "execs", "accepted"), 1);
	assert_int_equal(at(c, "sessions", "active"), 2);
	assert_int_equal(at(c, "sessions", "deleted"), 1);
	assert_int_equal(at(c, "sessions", "reserved"), 1);
	assert_int_equal(at(c, "sessions", "deleting"), 0);
	assert_int_equal(json_integer_value(json_object_get(c, "uncertain_open")), 3);
	u = json_object_get(c, "uncertain_sessions");
	assert_int_equal(json_array_size(u), 2);
	/* newest first: s2's uncertain exec (20) is newer than s1's newest (14) */
	assert_string_equal(json_string_value(json_object_get(json_array_get(u, 0), "session")), "s2");
	assert_int_equal(json_integer_value(json_object_get(json_array_get(u, 0), "uncertain")), 1);
	assert_string_equal(json_string_value(json_object_get(json_array_get(u, 0), "newest_exec")), "e6");
	assert_string_equal(json_string_value(json_object_get(json_array_get(u, 1), "session")), "s1");
	assert_int_equal(json_integer_value(json_object_get(json_array_get(u, 1), "uncertain")), 2);
	assert_string_equal(json_string_value(json_object_get(json_array_get(u, 1), "newest_exec")), "e5");
	assert_int_equal(json_array_size(json_object_get(c, "reserved_sessions")), 1);
	assert_string_equal(json_string_value(json_array_get(json_object_get(c, "reserved_sessions"), 0)), "held");
	json_decref(c);
}

static void test_counts_lists_bounded(void **state)
{
	struct fixture *f = *state;
	char id[32], exec[32];
	json_t *c;

	for (int i = 0; i < 2 * RECORDS_COUNTS_LIST_MAX; i++) {
		snprintf(id, sizeof id, "u%02d", i);
		snprintf(exec, sizeof exec, "x%02d", i);
		session_add(f->r, id, "active", i);
		exec_add(f->r, exec, id, 100 + i, "uncertain");
		snprintf(id, sizeof id, "r%02d", i);
		session_add(f->r, id, "reserved", 1000 + i);
	}
	c = counts(f->r);
	assert_int_equal(json_integer_value(json_object_get(c, "uncertain_open")), 2 * RECORDS_COUNTS_LIST_MAX);
	assert_int_equal(at(c, "sessions", "reserved"), 2 * RECORDS_COUNTS_LIST_MAX);
	assert_int_equal(json_array_size(json_object_get(c, "uncertain_sessions")), RECORDS_COUNTS_LIST_MAX);
	assert_int_equal(json_array_size(json_object_get(c, "reserved_sessions")), RECORDS_COUNTS_LIST_MAX);
	assert_string_equal(json_string_value(json_object_get(json_array_get(json_object_get(c, "uncertain_sessions"), 0),
							      "session")), "u19");
	assert_string_equal(json_string_value(json_array_get(json_object_get(c, "reserved_sessions"), 0)), "r19");
	json_decref(c);
}

/* Status and every scrape hold the records' mutex for one count: measure it on a large file. */
static void test_counts_time(void **state)
{
	struct fixture *f = *state;
	int64_t t0, ms;
	json_t *c;

	session_add(f->r, "big", "active", 1);
	/* one statement, through a second connection: the inserts are the setup, not what is measured */
	{
		static const char fill[] =
			"WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 100000)"
			" INSERT INTO execs (id, session, turn, state, command, timeout_seconds, accepted_ms)"
			" SELECT 'b' || i, 'big', 0, CASE i % 7 WHEN 0 THEN 'exited' WHEN 1 THEN 'exited'"
			" WHEN 2 THEN 'exited' WHEN 3 THEN 'timed_out' WHEN 4 THEN 'signaled'"
			" WHEN 5 THEN 'refused' ELSE 'uncertain' END, 'true', 30, i FROM n";
		struct sb_err err;
		char db[PATH_MAX], msg[512];
		sqlite3 *raw;

		if (on_postgres) {
			if (pgtest_exec(f->pgdb, fill, msg, sizeof msg) != 0)
				fail_msg("filling the execs: %s", msg);
		} else {
			assert_int_equal(path_fmt(db, sizeof db, &err, "%s/records.db", f->dir), 0);
			assert_int_equal(sqlite3_open(db, &raw), SQLITE_OK);
			assert_int_equal(sqlite3_exec(raw, fill, NULL, NULL, NULL), SQLITE_OK);
			sqlite3_close(raw);
		}
	}
	t0 = clock_mono_ms();
	c = counts(f->r);
	ms = clock_mono_ms() - t0;
	fprintf(stderr, "  records_counts over 100000 execs: %lld ms\n", (long long)ms);
	assert_int_equal(at(c, "execs", "exited"), 42857);
	assert_int_equal(at(c, "execs", "uncertain"), 14285);
	assert_int_equal(json_integer_value(json_object_get(c, "uncertain_open")), 14285);
	assert_true(ms < 2000);
	json_decref(c);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_counts_empty, setup, teardown),
		cmocka_unit_test_setup_teardown(test_counts_states, setup, teardown),
		cmocka_unit_test_setup_teardown(test_counts_lists_bounded, setup, teardown),
		cmocka_unit_test_setup_teardown(test_counts_time, setup, teardown),
	};

	int failed = cmocka_run_group_tests_name("records_counts on sqlite", tests, NULL, NULL);

	on_postgres = true;
	return failed + pgtest_run_group("records_counts on postgres", tests, sizeof tests / sizeof tests[0]);
}
