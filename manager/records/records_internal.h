/* What the files of manager/records/ share and nothing else may include (tests/layering_check.py):
 * the connection and its lock, scope-bound cleanup of statements and locks, the statement helpers,
 * JSON out of columns, and the bounding of records (invariant 13). Every value reaches SQL as a
 * bound parameter through these helpers; none of them builds SQL from strings. */
#ifndef SB_RECORDS_INTERNAL_H
#define SB_RECORDS_INTERNAL_H

#include <errno.h>
#include <jansson.h>
#include <pthread.h>
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

struct records {
	pthread_mutex_t lock;  /* held for a whole call: its statements and sqlite3_errmsg() belong together */
	sqlite3 *db;
	size_t output_limit;   /* bytes of text per stream in a stored or served record */
};

/* ---------------------------------------------------------------- statements prepared once (records.c) */

/* A statement for sql on r's connection: the one prepared before when it is free (reset, its
 * bindings cleared), else a new one, kept for the next call while there is room. Parsing SQL was a
 * sixth of the daemon's CPU per call (issue 18). sql is what the callers pass: a constant. */
int stmt_prepare(struct records *r, const char *sql, sqlite3_stmt **st, struct sb_err *err);

/* Done with st (NULL: nothing): a kept statement is reset for the next caller, any other finalized. */
void stmt_release(sqlite3_stmt *st);

/* ---------------------------------------------------------------- scope-bound cleanup */

static inline void stmt_finalizep(sqlite3_stmt **st)
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

/* "records: <context>: <SQLite's message>"; errnum 0, since the failure is SQLite's, not a syscall's. */
static inline int db_fail(struct records *r, struct sb_err *err, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
static inline int db_fail(struct records *r, struct sb_err *err, const char *fmt, ...)
{
	char context[512];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(context, sizeof context, fmt, ap);
	va_end(ap);
	return sb_fail(err, 0, "records: %s: %s", context, sqlite3_errmsg(r->db));
}

static inline int oom_fail(struct sb_err *err, const char *what)
{
	return sb_fail(err, ENOMEM, "records: %s", what);
}

/* A required text argument: present, not empty, at most max bytes. */
static inline int check_arg(const char *what, const char *s, size_t max, struct sb_err *err)
{
	if (!s || !*s)
		return sb_fail(err, EINVAL, "records: %s is missing", what);
	if (strnlen(s, max + 1) > max)
		return sb_fail(err, EINVAL, "records: %s is longer than %zu bytes", what, max);
	return 0;
}

/* A text field of a caller's row: NUL-terminated inside its array, and not empty when required. */
static inline int check_field(const char *what, const char *s, size_t size, bool required, struct sb_err *err)
{
	if (strnlen(s, size) == size)
		return sb_fail(err, EINVAL, "records: %s is not terminated within its %zu bytes", what, size);
	if (required && !*s)
		return sb_fail(err, EINVAL, "records: %s is missing", what);
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

/* ---------------------------------------------------------------- statements */

static inline int prepare(struct records *r, const char *sql, sqlite3_stmt **st, struct sb_err *err)
{
	return stmt_prepare(r, sql, st, err);
}

/* Binds are no-ops once *rc holds an error, so a run of binds is checked once, at step(). */
static inline void bind_text(sqlite3_stmt *st, int i, const char *s, int *rc)
{
	if (*rc == SQLITE_OK)
		*rc = s ? sqlite3_bind_text(st, i, s, -1, SQLITE_STATIC) : sqlite3_bind_null(st, i);
}

static inline void bind_textn(sqlite3_stmt *st, int i, const char *s, size_t n, int *rc)
{
	if (*rc == SQLITE_OK)
		*rc = sqlite3_bind_text(st, i, s, (int)n, SQLITE_STATIC);
}

static inline void bind_int(sqlite3_stmt *st, int i, int64_t v, int *rc)
{
	if (*rc == SQLITE_OK)
		*rc = sqlite3_bind_int64(st, i, v);
}

/* The step's result code, or the binds' error (SQLite has set its message for either). */
static inline int step(sqlite3_stmt *st, int bind_rc)
{
	return bind_rc != SQLITE_OK ? bind_rc : sqlite3_step(st);
}

static inline const char *col_text(sqlite3_stmt *st, int i)
{
	return (const char *)sqlite3_column_text(st, i);
}

/* Run one constant statement without parameters or rows (BEGIN, COMMIT, the schema). */
static inline int exec_sql(struct records *r, const char *sql, const char *what, struct sb_err *err)
{
	if (sqlite3_exec(r->db, sql, NULL, NULL, NULL) != SQLITE_OK)
		return db_fail(r, err, "%s", what);
	return 0;
}

/* A pragma that answers one integer. */
static inline int pragma_int(struct records *r, const char *sql, int64_t *out, struct sb_err *err)
{
	sqlite3_stmt *st cleanup_stmt = NULL;

	if (prepare(r, sql, &st, err) != 0)
		return -1;
	if (sqlite3_step(st) != SQLITE_ROW)
		return db_fail(r, err, "reading %s", sql);
	*out = sqlite3_column_int64(st, 0);
	return 0;
}

/* ---------------------------------------------------------------- JSON out of columns (records.c) */

static inline json_t *col_json_int(sqlite3_stmt *st, int i)
{
	if (sqlite3_column_type(st, i) == SQLITE_NULL)
		return json_null();
	return json_integer(sqlite3_column_int64(st, i));
}

/* Stored text as a JSON string; bytes that are not UTF-8 become the text "\xNN". */
json_t *col_json_text(sqlite3_stmt *st, int i);

/* Stored JSON parsed back; text that is not JSON stays a string. */
json_t *col_json_parsed(sqlite3_stmt *st, int i);

/* An object of n keys and their values; NULL when any value is NULL (out of memory) or a set
 * fails. Every value is consumed either way. */
json_t *json_row(const char *const keys[], json_t *const values[], size_t n);

/* One JSON value per row (row_json builds it) into an array; NULL with err on failure. */
json_t *rows_json(struct records *r, sqlite3_stmt *st, int bind_rc, json_t *(*row_json)(sqlite3_stmt *),
		      const char *what, struct sb_err *err);

/* The first column as text: a row_json for lists of ids. */
json_t *id_json(sqlite3_stmt *st);

/* ---------------------------------------------------------------- the schema (records_schema.c) */

/* Create the schema on a new file or migrate an older one, in one transaction; a newer one is refused. */
int schema_ensure(struct records *r, const char *path, struct sb_err *err);

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
