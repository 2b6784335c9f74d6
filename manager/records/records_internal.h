/* What the files of manager/records/ share and nothing else may include (tests/layering_check.py):
 * the connection and its lock, the statements both stores run, scope-bound cleanup of statements
 * and locks, the statement helpers, JSON out of columns, and the bounding of records (invariant 13).
 * Every value reaches SQL as a bound parameter through these helpers; none of them builds SQL from
 * strings. */
#ifndef SB_RECORDS_INTERNAL_H
#define SB_RECORDS_INTERNAL_H

#include <errno.h>
#include <jansson.h>
#include <pthread.h>
#include <libpq-fe.h>
#include <sqlite3.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "cleanup.h"
#include "error.h"
#include "records.h"

#define ID_MAX 64 /* session and exec ids: the rows' id[65] */

/* The two stores behind records.h. Every file of manager/records/ but the two store files
 * (records_sqlite.c, records_pg.c) and their schemas speaks to either through the statements
 * below, with one SQL text that both dialects read: ?N parameters (PostgreSQL gets $N), a
 * "rowid" column (SQLite's own; an identity column in PostgreSQL), no dialect's functions. */
enum store_kind { STORE_SQLITE, STORE_POSTGRES };

/* What step() answers, for either store. */
#define DB_OK 0
#define DB_ERROR 1
#define DB_ROW 100
#define DB_DONE 101

#define STMT_PARAMS 13 /* the most parameters any statement here has */
#define STMT_KEPT 96   /* statements kept prepared per connection */

/* One statement in use. SQLite: its prepared statement. PostgreSQL: the parameters bound so far
 * (text, or int8 as decimal text), the result of its one execution and the row being read; it is
 * prepared on the connection (PQprepare) at its first execution, with the types its binds gave. */
struct stmt {
	struct records *r;
	const char *sql;
	bool kept, busy;
	sqlite3_stmt *sq;
	char *text;                    /* PostgreSQL, kept: its own copy of sql (SQLite keeps one in sq) */
	char name[16];                 /* PostgreSQL: its prepared name, "" until prepared */
	int nparams;
	const char *values[STMT_PARAMS];
	Oid types[STMT_PARAMS];
	char ints[STMT_PARAMS][24];
	char *owned[STMT_PARAMS];      /* copies made for bind_textn */
	PGresult *res;
	int row;                       /* the row read, -1 before the first */
};

struct records {
	pthread_mutex_t lock;  /* held for a whole call: its statements and the store's message belong together */
	enum store_kind kind;
	sqlite3 *db;
	PGconn *pg;
	char name[160];        /* the store as messages name it: a path, or "postgres (database D on H)" */
	char pg_error[512];    /* PostgreSQL: the last failure's message */
	int64_t changes;       /* PostgreSQL: rows the last statement changed */
	size_t output_limit;   /* bytes of text per stream in a stored or served record */
	unsigned prepared;     /* PostgreSQL: statements prepared on this connection, for their names */
	char fence[65];        /* records_set_fence: the manager id every write about a session must own it as; "" none */
	struct stmt kept[STMT_KEPT];
	struct checkpointer *checkpointer; /* SQLite: the WAL's checkpoint thread (records_sqlite.c), or NULL */
	bool (*full)(void *ctx);  /* records_set_full_hook, or NULL */
	void *full_ctx;
};

/* ---------------------------------------------------------------- statements prepared once (records.c) */

/* A statement for sql on r's connection: the one prepared before when it is free, else a new one,
 * kept for the next call while there is room. Parsing SQL was a sixth of the daemon's CPU per call
 * (issue 18). sql is what the callers pass: a constant. */
int stmt_prepare(struct records *r, const char *sql, struct stmt **st, struct sb_err *err);

/* Done with st (NULL: nothing): a kept statement is reset for the next caller, any other freed. */
void stmt_release(struct stmt *st);

/* ---------------------------------------------------------------- the stores (records_sqlite.c, records_pg.c) */

int sqlite_open(struct records *r, const char *path, struct sb_err *err);
void sqlite_close(struct records *r);
int sqlite_stmt_prepare(struct stmt *st, struct sb_err *err);
void sqlite_stmt_reset(struct stmt *st);
void sqlite_stmt_free(struct stmt *st);

int pg_open(struct records *r, const char *conninfo, struct sb_err *err);
void pg_close(struct records *r);
int pg_step(struct stmt *st);
int pg_exec(struct records *r, const char *sql);
void pg_stmt_reset(struct stmt *st);

/* ---------------------------------------------------------------- scope-bound cleanup */

static inline void stmt_finalizep(struct stmt **st)
{
	stmt_release(*st); /* its code repeats the last step's, already handled */
}

static inline void records_unlockp(struct records **r)
{
	if (*r)
		pthread_mutex_unlock(&(*r)->lock);
}

#define cleanup_stmt __attribute__((cleanup(stmt_finalizep)))
/* The guard variable exists only for its scope, hence unused. */
#define cleanup_unlock __attribute__((cleanup(records_unlockp), unused))

static inline struct records *records_lock(struct records *r)
{
	pthread_mutex_lock(&r->lock);
	return r;
}

/* ---------------------------------------------------------------- small helpers */

static inline const char *db_errmsg(struct records *r)
{
	return r->kind == STORE_SQLITE ? sqlite3_errmsg(r->db) : r->pg_error;
}

/* Whether the store's last failure was for want of space on its filesystem: SQLite's "database or
 * disk is full", or an I/O error whose write got ENOSPC. PostgreSQL's disk is its server's. */
static inline bool db_full(struct records *r)
{
	int code = r->kind == STORE_SQLITE ? sqlite3_errcode(r->db) : SQLITE_OK;

	return code == SQLITE_FULL || (code == SQLITE_IOERR && sqlite3_system_errno(r->db) == ENOSPC);
}

/* "records: <context>: <the store's message>"; errnum 0, since the failure is the store's, not a
 * syscall's, except ENOSPC when the store's filesystem is full (db_full): the manager's disk bound
 * (rule N4) gives room back and writes the record again. */
static inline int db_fail(struct records *r, struct sb_err *err, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
static inline int db_fail(struct records *r, struct sb_err *err, const char *fmt, ...)
{
	char context[512];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(context, sizeof context, fmt, ap);
	va_end(ap);
	return sb_refuse(err, db_full(r) ? ENOSPC : 0, "records: %s: %s", context, db_errmsg(r));
}

static inline int oom_fail(struct sb_err *err, const char *what)
{
	return sb_fail(err, ENOMEM, "records: %s", what);
}

/* A required text argument: present, not empty, at most max bytes. */
static inline int check_arg(const char *what, const char *s, size_t max, struct sb_err *err)
{
	if (!s || !*s)
		return sb_invalid(err, "records: %s is missing", what);
	if (strnlen(s, max + 1) > max)
		return sb_invalid(err, "records: %s is longer than %zu bytes", what, max);
	return 0;
}

/* A text field of a caller's row: NUL-terminated inside its array, and not empty when required. */
static inline int check_field(const char *what, const char *s, size_t size, bool required, struct sb_err *err)
{
	if (strnlen(s, size) == size)
		return sb_invalid(err, "records: %s is not terminated within its %zu bytes", what, size);
	if (required && !*s)
		return sb_invalid(err, "records: %s is missing", what);
	return 0;
}

static inline bool is_final_state(const char *state)
{
	static const char *const finals[] = { "exited", "signaled", "timed_out", "cancelled", "uncertain", "refused" };

	for (size_t i = 0; i < sizeof finals / sizeof finals[0]; i++)
		if (strcmp(state, finals[i]) == 0)
			return true;
	return false;
}

static inline void copy_text(char *dst, size_t size, const char *src)
{
	snprintf(dst, size, "%s", src ? src : "");
}

/* ---------------------------------------------------------------- statements (records.c) */

static inline int prepare(struct records *r, const char *sql, struct stmt **st, struct sb_err *err)
{
	return stmt_prepare(r, sql, st, err);
}

/* Binds are no-ops once *rc holds an error, so a run of binds is checked once, at step(). The
 * text must outlive the statement's step (the callers' arguments and rows do). */
void bind_text(struct stmt *st, int i, const char *s, int *rc);
/* n bytes of s (the record's copy of a command: PostgreSQL's text must be UTF-8, so there the
 * bytes that are not become the text "\xNN", as they are served from either store). */
void bind_textn(struct stmt *st, int i, const char *s, size_t n, int *rc);
void bind_int(struct stmt *st, int i, int64_t v, int *rc);

/* DB_ROW, DB_DONE, or the binds' or the step's error (the store's message is set for either). */
int step(struct stmt *st, int bind_rc);

/* Rows the last INSERT, UPDATE or DELETE changed. */
int64_t db_changes(struct records *r);

const char *col_text(struct stmt *st, int i);
size_t col_bytes(struct stmt *st, int i);
int64_t col_int(struct stmt *st, int i);
bool col_null(struct stmt *st, int i);

/* Run one constant statement without parameters or rows (BEGIN, COMMIT, the schema). */
static inline int exec_sql(struct records *r, const char *sql, const char *what, struct sb_err *err)
{
	int rc = r->kind == STORE_SQLITE ? (sqlite3_exec(r->db, sql, NULL, NULL, NULL) == SQLITE_OK ? 0 : -1) :
		 pg_exec(r, sql);

	return rc == 0 ? 0 : db_fail(r, err, "%s", what);
}

/* A query that answers one integer (a pragma, a version); NULL reads as 0. */
static inline int query_int(struct records *r, const char *sql, int64_t *out, struct sb_err *err)
{
	struct stmt *st cleanup_stmt = NULL;

	if (prepare(r, sql, &st, err) != 0)
		return -1;
	if (step(st, DB_OK) != DB_ROW)
		return db_fail(r, err, "reading %s", sql);
	*out = col_int(st, 0);
	return 0;
}

/* ---------------------------------------------------------------- JSON out of columns (records.c) */

static inline json_t *col_json_int(struct stmt *st, int i)
{
	return col_null(st, i) ? json_null() : json_integer(col_int(st, i));
}

/* Stored text as a JSON string; bytes that are not UTF-8 become the text "\xNN". */
json_t *col_json_text(struct stmt *st, int i);

/* Stored JSON parsed back; text that is not JSON stays a string. */
json_t *col_json_parsed(struct stmt *st, int i);

/* An object of n keys and their values; NULL when any value is NULL (out of memory) or a set
 * fails. Every value is consumed either way. */
json_t *json_row(const char *const keys[], json_t *const values[], size_t n);

/* One JSON value per row (row_json builds it) into an array; NULL with err on failure. */
json_t *rows_json(struct records *r, struct stmt *st, int bind_rc, json_t *(*row_json)(struct stmt *),
		      const char *what, struct sb_err *err);

/* The first column as text: a row_json for lists of ids. */
json_t *id_json(struct stmt *st);

/* ---------------------------------------------------------------- fencing (records_lease.c) */

/* The fence's manager id to bind as the writes' ?me, or NULL (no fence: the statements' clause
 * `(?me IS NULL OR EXISTS (...))` is then true and nothing changes). */
static inline const char *fence_me(const struct records *r)
{
	return r->fence[0] ? r->fence : NULL;
}

/* After a fenced write changed no row: 1 when the fence does not hold now for session (its owner
 * is not r's fence manager, or, with generation non-NULL, its generation is another), err then the
 * "fenced: ..." message with errnum ESTALE; 0 when it holds or there is no fence (the caller's own
 * refusal applies); -1 with err when the session cannot be read. The exec form finds the session
 * through the exec row. */
int fence_refused(struct records *r, const char *session, const uint64_t *generation, struct sb_err *err);
int fence_refused_exec(struct records *r, const char *exec_id, const uint64_t *generation, struct sb_err *err);

/* ---------------------------------------------------------------- the schema (records_schema.c) */

/* Create the schema on a new store or migrate an older one, in one transaction; a newer one is
 * refused. SQLite: records_schema.c; PostgreSQL: records_pg_schema.c. */
int schema_ensure(struct records *r, const char *path, struct sb_err *err);
int pg_schema_ensure(struct records *r, struct sb_err *err);

/* ---------------------------------------------------------------- bounded records (records_bound.c) */

/* Both streams of a result (an object; anything else is left alone) within limit bytes of text:
 * 1 when either was shortened, 0 when both fit, -1 out of memory. */
int result_bound(json_t *result, const json_t *receipt, size_t limit);

/* The result text as stored, bounded; a new string, or NULL (no memory). */
char *result_for_record(const char *result_json, const char *receipt_json, size_t limit);

/* Bytes of v serialised as control_send() serialises it (JSON_COMPACT, escapes included). */
size_t json_size(const json_t *v);

/* rec (consumed) made to fit room bytes; a new reference marked "truncated", or NULL out of memory. */
json_t *record_fit(json_t *rec, size_t room);

#endif
