/* The PostgreSQL store (see records.h; `serve --store postgres:CONNINFO`): one libpq connection
 * behind the records' lock, its statements prepared once per connection (PQprepare, on their first
 * execution, with the types their binds gave) and run with parameters (PQexecPrepared), never with
 * values in the SQL. Must never name a password in a message (the connection info may hold one),
 * never retry a write whose outcome it did not see, and never run on a schema it does not know. */
#include <errno.h>
#include <libpq-fe.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "records_internal.h"

/* libpq's notices (CREATE ... IF NOT EXISTS, "skipping") are not the manager's to print. */
static void notice_ignore(void *arg, const char *message)
{
	(void)arg;
	(void)message;
}

/* The last failure's message, one line: its newlines become "; ". */
static void pg_error_set(struct records *r, const char *msg)
{
	size_t n;

	copy_text(r->pg_error, sizeof r->pg_error, msg && *msg ? msg : "no message from PostgreSQL");
	n = strlen(r->pg_error);
	while (n > 0 && (r->pg_error[n - 1] == '\n' || r->pg_error[n - 1] == ' '))
		r->pg_error[--n] = '\0';
	for (char *p = r->pg_error; (p = strchr(p, '\n')) != NULL;)
		*p = ';';
}

/* A statement's failure: PostgreSQL's message and its detail (which key, which row), without the
 * "ERROR:" prefix. */
static void pg_result_error(struct records *r, const PGresult *res)
{
	const char *primary = PQresultErrorField(res, PG_DIAG_MESSAGE_PRIMARY);
	const char *detail = PQresultErrorField(res, PG_DIAG_MESSAGE_DETAIL);
	char msg[sizeof r->pg_error];

	if (!primary) {
		pg_error_set(r, PQresultErrorMessage(res));
		return;
	}
	snprintf(msg, sizeof msg, "%s%s%s%s", primary, detail ? " (" : "", detail ? detail : "", detail ? ")" : "");
	pg_error_set(r, msg);
}

/* The store as messages name it: database, host (or socket directory) and port, never the password. */
static void pg_name(struct records *r)
{
	const char *db = PQdb(r->pg), *host = PQhost(r->pg), *port = PQport(r->pg);

	snprintf(r->name, sizeof r->name, "postgres (database %s on %s port %s)", db && *db ? db : "?",
		 host && *host ? host : "the default socket", port && *port ? port : "5432");
}

int pg_open(struct records *r, const char *conninfo, struct sb_err *err)
{
	/* An empty CONNINFO is libpq's defaults: PGHOST, PGDATABASE, PGUSER... of the environment.
	 * CONNINFO comes after the connect timeout, so its own connect_timeout (or PGCONNECT_TIMEOUT's)
	 * wins; without either, a server that does not answer fails the start in 10 s, not in the
	 * kernel's two minutes of SYN retries. */
	static const char *const keys[] = { "connect_timeout", "dbname", NULL };
	const char *values[] = { getenv("PGCONNECT_TIMEOUT") ? NULL : "10", conninfo ? conninfo : "", NULL };

	r->pg = PQconnectdbParams(keys, values, 1);
	if (!r->pg)
		return oom_fail(err, "connecting to PostgreSQL");
	pg_name(r);
	if (PQstatus(r->pg) != CONNECTION_OK) {
		pg_error_set(r, PQerrorMessage(r->pg));
		return sb_fail(err, 0, "records: cannot connect to the store %s: %s", r->name, r->pg_error);
	}
	PQsetNoticeProcessor(r->pg, notice_ignore, NULL);
	/* The records are UTF-8 text (bind_textn makes a command's other bytes text); the server
	 * version 15 is what the schema and its tests were written for. */
	if (PQsetClientEncoding(r->pg, "UTF8") != 0) {
		pg_error_set(r, PQerrorMessage(r->pg));
		return sb_fail(err, 0, "records: %s: setting the client encoding to UTF8: %s", r->name, r->pg_error);
	}
	if (PQserverVersion(r->pg) < 150000)
		return sb_fail(err, 0, "records: %s is PostgreSQL %d.%d: the store needs 15 or newer", r->name,
			       PQserverVersion(r->pg) / 10000, PQserverVersion(r->pg) % 10000);
	return pg_schema_ensure(r, err);
}

void pg_close(struct records *r)
{
	PQfinish(r->pg);
	r->pg = NULL;
}

/* A lost connection: its prepared statements are gone with it. The call that saw it fails (a
 * write may or may not have committed: the caller's records say what was in flight, as after a
 * kill); the next call finds the connection reset. */
static void pg_lost(struct records *r)
{
	char msg[sizeof r->pg_error];

	if (PQstatus(r->pg) != CONNECTION_BAD)
		return;
	copy_text(msg, sizeof msg, r->pg_error);
	PQreset(r->pg);
	for (size_t i = 0; i < STMT_KEPT; i++)
		r->kept[i].name[0] = '\0';
	snprintf(r->pg_error, sizeof r->pg_error, "%.300s (the connection to %.150s was lost; %s)", msg, r->name,
		 PQstatus(r->pg) == CONNECTION_OK ? "reconnected for the next call" : "it is still down");
	if (PQstatus(r->pg) == CONNECTION_OK)
		PQsetNoticeProcessor(r->pg, notice_ignore, NULL);
}

/* The SQL for PostgreSQL: ?N becomes $N (the statements here hold no ? in a literal). */
static char *pg_sql(const char *sql)
{
	char *out = strdup(sql);

	for (char *p = out; p && *p; p++)
		if (p[0] == '?' && p[1] >= '0' && p[1] <= '9')
			p[0] = '$';
	return out;
}

static bool pg_ok(struct records *r, PGresult *res)
{
	ExecStatusType status = res ? PQresultStatus(res) : PGRES_FATAL_ERROR;

	if (status == PGRES_COMMAND_OK || status == PGRES_TUPLES_OK)
		return true;
	if (res && PQstatus(r->pg) == CONNECTION_OK)
		pg_result_error(r, res);
	else
		pg_error_set(r, PQerrorMessage(r->pg));
	pg_lost(r);
	return false;
}

/* Its one execution, at the first step: prepared on the connection first when it is kept. */
static int pg_run(struct stmt *st)
{
	struct records *r = st->r;
	char *sql = NULL;
	PGresult *res;

	if (!st->kept || !st->name[0]) {
		if (!(sql = pg_sql(st->sql))) {
			pg_error_set(r, "no memory for a statement");
			return DB_ERROR;
		}
	}
	if (st->kept && !st->name[0]) {
		char name[sizeof st->name];

		snprintf(name, sizeof name, "sb%u", r->prepared++);
		res = PQprepare(r->pg, name, sql, st->nparams, st->types);
		if (!pg_ok(r, res)) {
			PQclear(res);
			free(sql);
			return DB_ERROR;
		}
		PQclear(res);
		memcpy(st->name, name, sizeof name);
	}
	if (st->kept)
		res = PQexecPrepared(r->pg, st->name, st->nparams, st->values, NULL, NULL, 0);
	else
		res = PQexecParams(r->pg, sql, st->nparams, st->types, st->values, NULL, NULL, 0);
	free(sql);
	if (!pg_ok(r, res)) {
		PQclear(res);
		return DB_ERROR;
	}
	st->res = res;
	r->changes = strtoll(PQcmdTuples(res), NULL, 10);
	return DB_OK;
}

int pg_step(struct stmt *st)
{
	if (!st->res && pg_run(st) != DB_OK)
		return DB_ERROR;
	if (st->row + 1 < PQntuples(st->res)) {
		st->row++;
		return DB_ROW;
	}
	return DB_DONE;
}

int pg_exec(struct records *r, const char *sql)
{
	PGresult *res = PQexec(r->pg, sql);
	bool ok = pg_ok(r, res);

	PQclear(res);
	return ok ? 0 : -1;
}

void pg_stmt_reset(struct stmt *st)
{
	PQclear(st->res);
	st->res = NULL;
	st->row = -1;
	st->nparams = 0;
	for (size_t i = 0; i < STMT_PARAMS; i++) {
		free(st->owned[i]);
		st->owned[i] = NULL;
		st->values[i] = NULL;
	}
}
