/* The manager's records (see records.h): opening either store and closing it, the statements
 * every other file of manager/records/ runs on either (records_internal.h), and JSON out of
 * columns. The SQLite store lives in records_sqlite.c, the PostgreSQL one in records_pg.c; the
 * rows in records_sessions.c, records_sandboxes.c and records_execs.c, the pages in
 * records_pages.c, the counts in records_counts.c, the schemas in records_schema.c and
 * records_pg_schema.c, and the bounding of outputs in records_bound.c.
 * Must never build SQL from strings (every value is a bound parameter), never let an exec's state
 * go backwards, never call a sandbox gone without evidence, never store a key, and never store or
 * serve an answer that grows with what a command prints (invariant 13: bounded outputs, pages). */
#include "records.h"

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cleanup.h"
#include "records_internal.h"
#include "utf8.h"

#define TEXTOID 25 /* PostgreSQL's type oids (server/catalog/pg_type_d.h, not in libpq-fe.h) */
#define INT8OID 20

/* ---------------------------------------------------------------- opening */

static struct records *records_new(void)
{
	struct records *r = calloc(1, sizeof *r);

	if (!r)
		return NULL;
	pthread_mutex_init(&r->lock, NULL);
	r->output_limit = RECORDS_OUTPUT_LIMIT_DEFAULT;
	return r;
}

static int records_start(struct records *r, enum store_kind kind, const char *where, struct records **out,
			 struct sb_err *err)
{
	int rc;

	if (!r)
		return oom_fail(err, "opening the records");
	r->kind = kind;
	rc = kind == STORE_SQLITE ? sqlite_open(r, where, err) : pg_open(r, where, err);
	if (rc != 0) {
		records_close(r);
		return -1;
	}
	*out = r;
	return 0;
}

int records_open(const char *path, struct records **out, struct sb_err *err)
{
	*out = NULL;
	return records_start(records_new(), STORE_SQLITE, path, out, err);
}

int records_open_store(const char *store, struct records **out, struct sb_err *err)
{
	*out = NULL;
	if (store && strncmp(store, "sqlite:", 7) == 0)
		return records_open(store + 7, out, err);
	if (store && strncmp(store, "postgres:", 9) == 0)
		return records_start(records_new(), STORE_POSTGRES, store + 9, out, err);
	return sb_invalid(err, "records: the store must be sqlite:PATH or postgres:CONNINFO, not '%.200s'",
			  store ? store : "");
}

const char *records_store_kind(const struct records *r)
{
	return r->kind == STORE_SQLITE ? "sqlite" : "postgres";
}

void records_set_full_hook(struct records *r, bool (*full)(void *ctx), void *ctx)
{
	pthread_mutex_lock(&r->lock);
	r->full = full;
	r->full_ctx = ctx;
	pthread_mutex_unlock(&r->lock);
}

void records_set_output_limit(struct records *r, size_t limit)
{
	struct records *locked cleanup_unlock = records_lock(r);

	r->output_limit = limit < RECORDS_OUTPUT_LIMIT_MIN ? RECORDS_OUTPUT_LIMIT_MIN :
			  limit > RECORDS_OUTPUT_LIMIT_MAX ? RECORDS_OUTPUT_LIMIT_MAX : limit;
}

void records_close(struct records *r)
{
	if (!r)
		return;
	for (size_t i = 0; i < STMT_KEPT; i++) {
		if (r->kept[i].sql && r->kind == STORE_SQLITE)
			sqlite_stmt_free(&r->kept[i]);
		free(r->kept[i].text);
	}
	if (r->kind == STORE_SQLITE)
		sqlite_close(r);
	else
		pg_close(r);
	pthread_mutex_destroy(&r->lock);
	free(r);
}

/* ---------------------------------------------------------------- statements prepared once */

/* Each connection's own: every use is under its lock (a call holds it from its first statement
 * to its last release). */
int stmt_prepare(struct records *r, const char *sql, struct stmt **out, struct sb_err *err)
{
	struct stmt *st = NULL;
	size_t i, room = STMT_KEPT;
	int rc = 0;

	for (i = 0; i < STMT_KEPT; i++) {
		struct stmt *k = &r->kept[i];

		if (k->sql == NULL) {
			room = room < STMT_KEPT ? room : i;
		} else if (!k->busy && k->sql == sql) {
			/* Same text, not only the same address: a caller's buffer may hold another. */
			if (strcmp(r->kind == STORE_SQLITE ? sqlite3_sql(k->sq) : k->text, sql) == 0) {
				k->busy = true;
				k->nparams = 0;
				k->row = -1;
				*out = k;
				return 0;
			}
		}
	}
	st = room < STMT_KEPT ? &r->kept[room] : calloc(1, sizeof *st);
	if (!st)
		return oom_fail(err, "preparing a statement");
	memset(st, 0, sizeof *st);
	st->r = r;
	st->sql = sql;
	st->kept = room < STMT_KEPT;
	st->row = -1;
	if (r->kind == STORE_SQLITE)
		rc = sqlite_stmt_prepare(st, err);
	else if (st->kept && !(st->text = strdup(sql)))
		rc = oom_fail(err, "keeping a statement");
	if (rc != 0) {
		if (st->kept)
			memset(st, 0, sizeof *st);
		else
			free(st);
		return -1;
	}
	st->busy = true;
	*out = st;
	return 0;
}

void stmt_release(struct stmt *st)
{
	if (st == NULL)
		return;
	if (st->r->kind == STORE_SQLITE) {
		if (!st->kept)
			sqlite_stmt_free(st);
		else
			sqlite_stmt_reset(st);
	} else {
		pg_stmt_reset(st);
	}
	if (st->kept)
		st->busy = false;
	else
		free(st);
}

/* ---------------------------------------------------------------- binds, steps and columns */

/* PostgreSQL: parameter i (from 1) is v, of type oid; *rc turns to an error past STMT_PARAMS. */
static void pg_bind(struct stmt *st, int i, const char *v, Oid oid, int *rc)
{
	if (i < 1 || i > STMT_PARAMS) {
		snprintf(st->r->pg_error, sizeof st->r->pg_error, "parameter %d is beyond the %d a statement has", i,
			 STMT_PARAMS);
		*rc = DB_ERROR;
		return;
	}
	st->values[i - 1] = v;
	st->types[i - 1] = oid;
	if (i > st->nparams)
		st->nparams = i;
}

void bind_text(struct stmt *st, int i, const char *s, int *rc)
{
	if (*rc != DB_OK)
		return;
	if (st->r->kind == STORE_SQLITE)
		*rc = s ? sqlite3_bind_text(st->sq, i, s, -1, SQLITE_STATIC) : sqlite3_bind_null(st->sq, i);
	else
		pg_bind(st, i, s, TEXTOID, rc);
}

/* Text with each byte that is not UTF-8, and each NUL, as "\xNN" (the project's escaping rule,
 * common/textesc.h): what PostgreSQL's text parameters take, and what col_json_text serves when the
 * stored bytes are not UTF-8. NUL-terminated; *len without the NUL. */
static char *text_utf8(const char *s, size_t n, size_t *len)
{
	const unsigned char *p = (const unsigned char *)s;
	char *buf = n < SIZE_MAX / 4 ? malloc(4 * n + 1) : NULL;

	*len = 0;
	if (!buf)
		return NULL;
	for (size_t i = 0; i < n;) {
		size_t k = p[i] ? utf8_seq_len(p + i, n - i) : 0;

		if (k == 0) {
			*len += (size_t)sprintf(buf + *len, "\\x%02x", p[i]);
			i++;
		} else {
			memcpy(buf + *len, p + i, k);
			*len += k;
			i += k;
		}
	}
	buf[*len] = '\0';
	return buf;
}

void bind_textn(struct stmt *st, int i, const char *s, size_t n, int *rc)
{
	size_t len;

	if (*rc != DB_OK)
		return;
	if (st->r->kind == STORE_SQLITE) {
		*rc = sqlite3_bind_text(st->sq, i, s, (int)n, SQLITE_STATIC);
		return;
	}
	if (i < 1 || i > STMT_PARAMS || !(st->owned[i - 1] = text_utf8(s, n, &len))) {
		snprintf(st->r->pg_error, sizeof st->r->pg_error, "no memory for parameter %d", i);
		*rc = DB_ERROR;
		return;
	}
	pg_bind(st, i, st->owned[i - 1], TEXTOID, rc);
}

void bind_int(struct stmt *st, int i, int64_t v, int *rc)
{
	if (*rc != DB_OK)
		return;
	if (st->r->kind == STORE_SQLITE) {
		*rc = sqlite3_bind_int64(st->sq, i, v);
		return;
	}
	if (i >= 1 && i <= STMT_PARAMS)
		snprintf(st->ints[i - 1], sizeof st->ints[i - 1], "%" PRId64, v);
	pg_bind(st, i, i >= 1 && i <= STMT_PARAMS ? st->ints[i - 1] : NULL, INT8OID, rc);
}

int step(struct stmt *st, int bind_rc)
{
	bool single;
	int rc;

	if (bind_rc != DB_OK)
		return DB_ERROR;
	if (st->r->kind == STORE_POSTGRES)
		return pg_step(st);
	single = sqlite3_get_autocommit(st->r->db);
	rc = sqlite3_step(st->sq);
	/* Out of space: SQLite rolled back the statement, or the whole transaction around it. The
	 * statement runs again once room is given back when it was a transaction of its own, or when
	 * the one around it is still open (a COMMIT among them); never after the rest was rolled back. */
	if (rc != SQLITE_ROW && rc != SQLITE_DONE && (single || !sqlite3_get_autocommit(st->r->db)) &&
	    db_full(st->r) && st->r->full != NULL && st->r->full(st->r->full_ctx)) {
		sqlite3_reset(st->sq);
		rc = sqlite3_step(st->sq);
	}
	return rc == SQLITE_ROW ? DB_ROW : rc == SQLITE_DONE ? DB_DONE : DB_ERROR;
}

int64_t db_changes(struct records *r)
{
	return r->kind == STORE_SQLITE ? sqlite3_changes(r->db) : r->changes;
}

bool col_null(struct stmt *st, int i)
{
	if (st->r->kind == STORE_SQLITE)
		return sqlite3_column_type(st->sq, i) == SQLITE_NULL;
	return !st->res || st->row < 0 || PQgetisnull(st->res, st->row, i);
}

const char *col_text(struct stmt *st, int i)
{
	if (st->r->kind == STORE_SQLITE)
		return (const char *)sqlite3_column_text(st->sq, i);
	return col_null(st, i) ? NULL : PQgetvalue(st->res, st->row, i);
}

size_t col_bytes(struct stmt *st, int i)
{
	if (st->r->kind == STORE_SQLITE)
		return (size_t)sqlite3_column_bytes(st->sq, i);
	return col_null(st, i) ? 0 : (size_t)PQgetlength(st->res, st->row, i);
}

int64_t col_int(struct stmt *st, int i)
{
	if (st->r->kind == STORE_SQLITE)
		return sqlite3_column_int64(st->sq, i);
	return col_null(st, i) ? 0 : strtoll(PQgetvalue(st->res, st->row, i), NULL, 10);
}

/* ---------------------------------------------------------------- JSON out of columns */

/* A JSON string for stored text. jansson refuses bytes that are not UTF-8 (a command given on the
 * command line may hold some); they become the text "\xNN" so nothing is dropped silently. */
static json_t *json_text(const char *s, size_t n)
{
	json_t *j = json_stringn(s, n);
	size_t len;
	char *buf;

	if (j || !(buf = text_utf8(s, n, &len)))
		return j;
	j = json_stringn(buf, len);
	free(buf);
	return j;
}

json_t *col_json_text(struct stmt *st, int i)
{
	const char *t = col_text(st, i);

	return t ? json_text(t, col_bytes(st, i)) : json_null();
}

/* Stored JSON parsed back; text that is not JSON (a receipt as the agent sent it) stays a string,
 * since a record keeps what it was given. */
json_t *col_json_parsed(struct stmt *st, int i)
{
	const char *t = col_text(st, i);
	size_t n = col_bytes(st, i);
	json_t *j;

	if (!t)
		return json_null();
	j = json_loadb(t, n, JSON_DECODE_ANY, NULL);
	return j ? j : json_text(t, n);
}

/* An object of n keys and their values; NULL when any value is NULL (out of memory) or a set
 * fails. Every value is consumed either way (json_object_set_new releases it on failure too). */
json_t *json_row(const char *const keys[], json_t *const values[], size_t n)
{
	json_t *obj = json_object();
	int bad = obj == NULL;

	for (size_t i = 0; i < n; i++) {
		if (!obj)
			json_decref(values[i]);
		else if (json_object_set_new(obj, keys[i], values[i]) != 0)
			bad = 1;
	}
	if (bad) {
		json_decref(obj);
		return NULL;
	}
	return obj;
}

/* Collect one JSON value per row (row_json builds it) into an array. */
json_t *rows_json(struct records *r, struct stmt *st, int bind_rc, json_t *(*row_json)(struct stmt *),
		  const char *what, struct sb_err *err)
{
	json_t *list cleanup_json = json_array();
	int rc;

	if (!list) {
		oom_fail(err, what);
		return NULL;
	}
	while ((rc = step(st, bind_rc)) == DB_ROW) {
		if (json_array_append_new(list, row_json(st)) != 0) {
			oom_fail(err, what);
			return NULL;
		}
	}
	if (rc != DB_DONE) {
		db_fail(r, err, "%s", what);
		return NULL;
	}
	return steal_pointer(&list);
}


json_t *id_json(struct stmt *st)
{
	return col_json_text(st, 0);
}
