/* The manager's records in SQLite (see records.h): opening the one connection (the file's mode,
 * WAL, the connection's settings), closing it, and JSON out of columns for the other files of
 * manager/records/ (records_internal.h). The rows live in records_sessions.c and records_execs.c,
 * the pages in records_pages.c, the counts in records_counts.c, the schema in records_schema.c,
 * and the bounding of outputs in records_bound.c.
 * Must never build SQL from strings (every value is a bound parameter), never let an exec's state
 * go backwards, never call a sandbox gone without evidence, never store a key, and never store or
 * serve an answer that grows with what a command prints (invariant 13: bounded outputs, pages). */
#include "records.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "cleanup.h"
#include "fdio.h"
#include "records_internal.h"
#include "utf8.h"

#define BUSY_TIMEOUT_MS 5000   /* another process (a second manager, the sqlite3 shell) holding the lock */

/* ---------------------------------------------------------------- opening */

/* The database file is created 0600 here, before SQLite opens it: SQLite creates -wal and -shm with
 * the database file's mode (fchmod, so the umask does not matter). An existing file is tightened,
 * and so are sidecars left by an older run. The directory must exist: the manager's private state
 * is made (0700) by whoever owns it, not as a side effect of opening records. */
static int tighten_sidecar(const char *path, const char *suffix, struct sb_err *err)
{
	char side[PATH_MAX];
	int fd cleanup_close = -1;

	if ((size_t)snprintf(side, sizeof side, "%s%s", path, suffix) >= sizeof side)
		return sb_fail(err, ENAMETOOLONG, "records: %s%s", path, suffix);
	fd = open(side, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
	if (fd < 0)
		return errno == ENOENT ? 0 : sb_fail_errno(err, "records: opening %s", side);
	if (fd_private_tighten(fd, side, err) != 0) {
		sb_err_prefix(err, "records");
		return -1;
	}
	return 0;
}

/* common/fdio.c's private file: 0600, no link, a regular file. */
static int db_file_prepare(const char *path, struct sb_err *err)
{
	int fd cleanup_close = fd_private_open(path, err);

	if (fd < 0) {
		sb_err_prefix(err, "records");
		return -1;
	}
	if (tighten_sidecar(path, "-wal", err) != 0 || tighten_sidecar(path, "-shm", err) != 0)
		return -1;
	return 0;
}

static int wal_enable(struct records *r, const char *path, struct sb_err *err)
{
	sqlite3_stmt *st cleanup_stmt = NULL;
	const char *mode;

	/* The pragma answers the mode now in force: a file system without shared memory stays put. */
	if (prepare(r, "PRAGMA journal_mode = WAL", &st, err) != 0)
		return -1;
	if (sqlite3_step(st) != SQLITE_ROW)
		return db_fail(r, err, "switching %s to WAL", path);
	mode = col_text(st, 0);
	if (!mode || strcasecmp(mode, "wal") != 0)
		return sb_fail(err, 0, "records: %s stayed in journal mode %s instead of WAL: put the state directory "
			       "on a local file system", path, mode ? mode : "(none)");
	return 0;
}

/* Connection settings. WAL + synchronous=NORMAL: a commit is appended to the WAL by write(2)
 * before sqlite3_step returns, so a kill -9 of the manager at any point keeps every committed
 * transaction (the kernel has the pages); only a power loss or kernel crash can lose the last few,
 * and never corrupts the file. Durability against a process kill is the requirement here; FULL
 * would add an fsync per commit for the power-loss case only. */
static int db_configure(struct records *r, const char *path, struct sb_err *err)
{
	int64_t v = 0;

	if (sqlite3_busy_timeout(r->db, BUSY_TIMEOUT_MS) != SQLITE_OK)
		return db_fail(r, err, "setting the busy timeout on %s", path);
	if (wal_enable(r, path, err) != 0)
		return -1;
	if (exec_sql(r, "PRAGMA synchronous = NORMAL", "setting synchronous=NORMAL", err) != 0 ||
	    exec_sql(r, "PRAGMA foreign_keys = ON", "turning foreign keys on", err) != 0)
		return -1;
	if (pragma_int(r, "PRAGMA foreign_keys", &v, err) != 0)
		return -1;
	if (v != 1)
		return sb_fail(err, 0, "records: this SQLite does not enforce foreign keys");
	return 0;
}

int records_open(const char *path, struct records **out, struct sb_err *err)
{
	struct records *r;

	*out = NULL;
	if (check_arg("database path", path, PATH_MAX - 8, err) != 0 || db_file_prepare(path, err) != 0)
		return -1;
	r = calloc(1, sizeof *r);
	if (!r)
		return oom_fail(err, "opening the records");
	pthread_mutex_init(&r->lock, NULL);
	r->output_limit = RECORDS_OUTPUT_LIMIT_DEFAULT;
	/* FULLMUTEX: SQLite's own locking too, though every call here also holds r->lock.
	 * NOFOLLOW: the file was just checked not to be a symbolic link; keep it so.
	 * Close-on-exec: SQLite's unix VFS opens the file, -wal and -shm with O_CLOEXEC (test_records
	 * checks /proc/self/fd), so a sandbox runtime started by the manager inherits none of them. */
	if (sqlite3_open_v2(path, &r->db, SQLITE_OPEN_FULLMUTEX | SQLITE_OPEN_CREATE | SQLITE_OPEN_READWRITE |
				SQLITE_OPEN_NOFOLLOW, NULL) != SQLITE_OK) {
		if (r->db)
			sb_fail(err, sqlite3_system_errno(r->db), "records: opening %s: %s", path, sqlite3_errmsg(r->db));
		else
			oom_fail(err, "opening the records");
		records_close(r);
		return -1;
	}
	if (db_configure(r, path, err) != 0 || schema_ensure(r, path, err) != 0) {
		records_close(r);
		return -1;
	}
	*out = r;
	return 0;
}

void records_set_output_limit(struct records *r, size_t limit)
{
	struct records *locked cleanup_unlock = records_lock(r);

	r->output_limit = limit < RECORDS_OUTPUT_LIMIT_MIN ? RECORDS_OUTPUT_LIMIT_MIN :
			  limit > RECORDS_OUTPUT_LIMIT_MAX ? RECORDS_OUTPUT_LIMIT_MAX : limit;
}

/* ---------------------------------------------------------------- statements prepared once */

/* Process-wide (a statement's cleanup knows only the statement), for every open connection; each
 * entry is used by one caller at a time, and every use is under its connection's lock as well. */
#define STMT_KEPT 96
static struct {
	pthread_mutex_t lock;
	struct {
		sqlite3 *db;
		const char *sql;
		sqlite3_stmt *st;
		bool busy;
	} e[STMT_KEPT];
} kept = { .lock = PTHREAD_MUTEX_INITIALIZER };

int stmt_prepare(struct records *r, const char *sql, sqlite3_stmt **st, struct sb_err *err)
{
	size_t i, room = STMT_KEPT;

	pthread_mutex_lock(&kept.lock);
	for (i = 0; i < STMT_KEPT; i++) {
		if (kept.e[i].st == NULL) {
			room = room < STMT_KEPT ? room : i;
		} else if (!kept.e[i].busy && kept.e[i].db == r->db && kept.e[i].sql == sql &&
			   strcmp(sqlite3_sql(kept.e[i].st), sql) == 0) {
			/* Same text, not only the same address: a caller's buffer may hold another. */
			kept.e[i].busy = true;
			*st = kept.e[i].st;
			pthread_mutex_unlock(&kept.lock);
			return 0;
		}
	}
	pthread_mutex_unlock(&kept.lock);
	if (sqlite3_prepare_v3(r->db, sql, -1, SQLITE_PREPARE_PERSISTENT, st, NULL) != SQLITE_OK)
		return db_fail(r, err, "preparing \"%.60s...\"", sql);
	pthread_mutex_lock(&kept.lock);
	if (room < STMT_KEPT && kept.e[room].st == NULL) {
		kept.e[room].db = r->db;
		kept.e[room].sql = sql;
		kept.e[room].st = *st;
		kept.e[room].busy = true;
	}
	pthread_mutex_unlock(&kept.lock);
	return 0;
}

void stmt_release(sqlite3_stmt *st)
{
	if (st == NULL)
		return;
	pthread_mutex_lock(&kept.lock);
	for (size_t i = 0; i < STMT_KEPT; i++) {
		if (kept.e[i].st == st) {
			/* Reset ends its read or write of the file; the next caller binds its own values. */
			sqlite3_reset(st);
			sqlite3_clear_bindings(st);
			kept.e[i].busy = false;
			pthread_mutex_unlock(&kept.lock);
			return;
		}
	}
	pthread_mutex_unlock(&kept.lock);
	sqlite3_finalize(st);
}

/* The connection's kept statements, before it closes. */
static void stmts_forget(sqlite3 *db)
{
	pthread_mutex_lock(&kept.lock);
	for (size_t i = 0; i < STMT_KEPT; i++) {
		if (kept.e[i].st != NULL && kept.e[i].db == db) {
			sqlite3_finalize(kept.e[i].st);
			memset(&kept.e[i], 0, sizeof kept.e[i]);
		}
	}
	pthread_mutex_unlock(&kept.lock);
}

void records_close(struct records *r)
{
	if (!r)
		return;
	/* Every statement is released by the call that used it and the kept ones are finalized here,
	 * so the close itself cannot be busy; the last connection's close checkpoints the WAL into the
	 * database file. */
	if (r->db)
		stmts_forget(r->db);
	sqlite3_close_v2(r->db);
	pthread_mutex_destroy(&r->lock);
	free(r);
}

/* ---------------------------------------------------------------- JSON out of columns */

/* A JSON string for stored text. jansson refuses bytes that are not UTF-8 (a command given on the
 * command line may hold some); they become the text "\xNN" so nothing is dropped silently. */
static json_t *json_text(const char *s, size_t n)
{
	const unsigned char *p = (const unsigned char *)s;
	char *buf;
	size_t len = 0;
	json_t *j = json_stringn(s, n);

	if (j || !(buf = malloc(4 * n + 1)))
		return j;
	for (size_t i = 0; i < n;) {
		size_t k = utf8_seq_len(p + i, n - i);

		if (k == 0) {
			len += (size_t)sprintf(buf + len, "\\x%02x", p[i]);
			i++;
		} else {
			memcpy(buf + len, p + i, k);
			len += k;
			i += k;
		}
	}
	j = json_stringn(buf, len);
	free(buf);
	return j;
}

json_t *col_json_text(sqlite3_stmt *st, int i)
{
	const char *t = col_text(st, i);

	return t ? json_text(t, (size_t)sqlite3_column_bytes(st, i)) : json_null();
}

/* Stored JSON parsed back; text that is not JSON (a receipt as the agent sent it) stays a string,
 * since a record keeps what it was given. */
json_t *col_json_parsed(sqlite3_stmt *st, int i)
{
	const char *t = col_text(st, i);
	size_t n = (size_t)sqlite3_column_bytes(st, i);
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
json_t *rows_json(struct records *r, sqlite3_stmt *st, int bind_rc, json_t *(*row_json)(sqlite3_stmt *),
		  const char *what, struct sb_err *err)
{
	json_t *list cleanup_json = json_array();
	int rc;

	if (!list) {
		oom_fail(err, what);
		return NULL;
	}
	while ((rc = step(st, bind_rc)) == SQLITE_ROW) {
		if (json_array_append_new(list, row_json(st)) != 0) {
			oom_fail(err, what);
			return NULL;
		}
	}
	if (rc != SQLITE_DONE) {
		db_fail(r, err, "%s", what);
		return NULL;
	}
	return steal_pointer(&list);
}


json_t *id_json(sqlite3_stmt *st)
{
	return col_json_text(st, 0);
}
