/* The records tests' PostgreSQL store: one throwaway server per test program (tests/support/pg.sh,
 * on a unix socket in a temporary directory), a new database per test, and raw SQL on it for the
 * checks that write around records.h (the schema's triggers, its version). Header-only, like
 * testutil.h; needs libpq (the unit tests link the daemon's libraries). */
#ifndef SB_PGTEST_H
#define SB_PGTEST_H

#include <fcntl.h>
#include <libpq-fe.h>
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "testutil.h"

static struct {
	char dir[PATH_MAX];   /* the server's directory: its data, log and socket */
	unsigned databases;   /* made so far, for their names */
	bool up;
} pgtest;

/* Run tests/support/pg.sh (PG_SH overrides the path) with cmd: its exit status. */
static inline int pgtest_script(const char *cmd)
{
	const char *script = getenv("PG_SH") ? getenv("PG_SH") : "tests/support/pg.sh";
	int status;
	pid_t pid = fork();

	if (pid < 0)
		return -1;
	if (pid == 0) {
		int null = open("/dev/null", O_WRONLY | O_CLOEXEC);

		if (null >= 0)
			dup2(null, STDOUT_FILENO); /* its settings line: the tests build their own */
		execlp("bash", "bash", script, cmd, pgtest.dir, (char *)NULL);
		_exit(127);
	}
	if (waitpid(pid, &status, 0) != pid)
		return -1;
	return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

/* 0: the server is up; 77: no PostgreSQL binaries (skip; pg.sh fails instead when CI=true); -1. */
static inline int pgtest_start(void)
{
	int rc;

	snprintf(pgtest.dir, sizeof pgtest.dir, "/tmp/pgtest.XXXXXX");
	if (!mkdtemp(pgtest.dir))
		return -1;
	rc = pgtest_script("start");
	if (rc != 0) {
		test_rmtree(pgtest.dir);
		return rc == 77 ? 77 : -1;
	}
	pgtest.up = true;
	return 0;
}

static inline void pgtest_stop(void)
{
	if (!pgtest.up)
		return;
	if (pgtest_script("stop") != 0)
		fprintf(stderr, "pgtest: stopping the server in %s failed\n", pgtest.dir);
	test_rmtree(pgtest.dir);
	pgtest.up = false;
}

/* Raw SQL on database db (NULL: postgres); 0, or -1 with PostgreSQL's message in msg. */
static inline int pgtest_exec(const char *db, const char *sql, char *msg, size_t size)
{
	char conninfo[PATH_MAX + 128];
	PGconn *c;
	PGresult *res;
	int rc;

	snprintf(conninfo, sizeof conninfo, "host=%s port=5432 user=sbrecords dbname=%s", pgtest.dir,
		 db ? db : "postgres");
	c = PQconnectdb(conninfo);
	res = PQstatus(c) == CONNECTION_OK ? PQexec(c, sql) : NULL;
	rc = res && (PQresultStatus(res) == PGRES_COMMAND_OK || PQresultStatus(res) == PGRES_TUPLES_OK) ? 0 : -1;
	if (msg)
		snprintf(msg, size, "%s", res ? PQresultErrorMessage(res) : PQerrorMessage(c));
	PQclear(res);
	PQfinish(c);
	return rc;
}

/* The first column of the first row of sql with text parameters on database db: a new string,
 * or NULL with PostgreSQL's message in msg (an UPDATE answers the rows it changed). */
static inline char *pgtest_text(const char *db, const char *sql, int n, const char *const *values, char *msg,
				size_t size)
{
	char conninfo[PATH_MAX + 128];
	PGconn *c;
	PGresult *res;
	char *out = NULL;

	snprintf(conninfo, sizeof conninfo, "host=%s port=5432 user=sbrecords dbname=%s", pgtest.dir, db);
	c = PQconnectdb(conninfo);
	res = PQstatus(c) == CONNECTION_OK ? PQexecParams(c, sql, n, NULL, values, NULL, NULL, 0) : NULL;
	if (res && PQresultStatus(res) == PGRES_TUPLES_OK && PQntuples(res) > 0)
		out = strdup(PQgetvalue(res, 0, 0));
	else if (res && PQresultStatus(res) == PGRES_COMMAND_OK)
		out = strdup(PQcmdTuples(res));
	if (msg)
		snprintf(msg, size, "%s", res ? PQresultErrorMessage(res) : PQerrorMessage(c));
	PQclear(res);
	PQfinish(c);
	return out;
}

/* A new, empty database: its name in db, and the records' store string for it in store. */
static inline void pgtest_new_db(char *db, size_t db_size, char *store, size_t store_size)
{
	char sql[128], msg[512];

	snprintf(db, db_size, "t%u_%d", pgtest.databases++, (int)getpid());
	snprintf(sql, sizeof sql, "CREATE DATABASE %s", db);
	if (pgtest_exec(NULL, sql, msg, sizeof msg) != 0)
		fail_msg("pgtest: %s: %s", sql, msg);
	snprintf(store, store_size, "postgres:host=%s port=5432 user=sbrecords dbname=%s", pgtest.dir, db);
}

/* Run a group of tests on PostgreSQL: skipped (said so) when the binaries are missing, except in CI. */
static inline int pgtest_run_group(const char *name, const struct CMUnitTest *tests, size_t n)
{
	int rc = pgtest_start();

	if (rc == 77) {
		fprintf(stderr, "[  SKIPPED ] %s: no PostgreSQL 15 binaries (%s); CI=true fails here instead\n", name,
			getenv("PG_BIN") ? getenv("PG_BIN") : "/usr/lib/postgresql/15/bin");
		return 0;
	}
	if (rc != 0) {
		fprintf(stderr, "[  FAILED  ] %s: the test PostgreSQL did not start (tests/support/pg.sh)\n", name);
		return 1;
	}
	rc = _cmocka_run_group_tests(name, tests, n, NULL, NULL);
	pgtest_stop();
	return rc;
}

#endif
