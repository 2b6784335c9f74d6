/* The manager's records in SQLite (see records.h): the schema and its version, the one connection
 * and its mutex, and every read and write of sessions, grants, sandboxes and execs.
 * Must never build SQL from strings (every value is a bound parameter), never let an exec's state
 * go backwards, never call a sandbox gone without evidence, never store a key, and never store or
 * serve an answer that grows with what a command prints (invariant 13: bounded outputs, pages). */
#include "records.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <sqlite3.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "clock.h"

/* The schema this code reads and writes, kept in PRAGMA user_version. A file with a newer version
 * was written by a newer sandbox-manager and is refused rather than misread; an older one is
 * migrated step by step (schema_ensure). 2: operators' resolutions of uncertain execs. */
#define RECORDS_SCHEMA_VERSION 2
#define STR_(x) #x
#define STR(x) STR_(x)        /* a constant into SQL text */

#define ID_MAX 64              /* session and exec ids: the rows' id[65] */
#define BUSY_TIMEOUT_MS 5000   /* another process (a second manager, the sqlite3 shell) holding the lock */

struct records {
	pthread_mutex_t lock;  /* held for a whole call: its statements and sqlite3_errmsg() belong together */
	sqlite3 *db;
	size_t output_limit;   /* bytes of text per stream in a stored or served record */
};

/* ---------------------------------------------------------------- scope-bound cleanup */

static void stmt_finalizep(sqlite3_stmt **st)
{
	sqlite3_finalize(*st); /* a no-op on NULL; its code repeats the last step's, already handled */
}

static void records_unlockp(struct records **r)
{
	if (*r)
		pthread_mutex_unlock(&(*r)->lock);
}

static void closep(int *fd)
{
	if (*fd >= 0)
		close(*fd);
}

/* Rolls back a transaction left open when its scope ends (the commit clears the pointer). */
static void txn_rollbackp(struct records **r)
{
	if (*r)
		sqlite3_exec((*r)->db, "ROLLBACK", NULL, NULL, NULL);
}

#define cleanup_stmt __attribute__((cleanup(stmt_finalizep)))
/* The guard variable exists only for its scope, hence unused. */
#define cleanup_unlock __attribute__((cleanup(records_unlockp), unused))
#define cleanup_json __attribute__((cleanup(json_decrefp))) /* jansson's own helper */
#define cleanup_close __attribute__((cleanup(closep)))
#define cleanup_txn __attribute__((cleanup(txn_rollbackp)))

static struct records *records_lock(struct records *r)
{
	pthread_mutex_lock(&r->lock);
	return r;
}

/* Hand a JSON value on and clear the old owner, so cleanup_json does not release it. */
static json_t *steal_json(json_t **j)
{
	json_t *v = *j;

	*j = NULL;
	return v;
}

/* ---------------------------------------------------------------- small helpers */

/* "records: <context>: <SQLite's message>"; errnum 0, since the failure is SQLite's, not a syscall's. */
static int db_fail(struct records *r, struct sb_err *err, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
static int db_fail(struct records *r, struct sb_err *err, const char *fmt, ...)
{
	char context[512];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(context, sizeof context, fmt, ap);
	va_end(ap);
	return sb_fail(err, 0, "records: %s: %s", context, sqlite3_errmsg(r->db));
}

static int oom_fail(struct sb_err *err, const char *what)
{
	return sb_fail(err, ENOMEM, "records: %s", what);
}

/* A required text argument: present, not empty, at most max bytes. */
static int check_arg(const char *what, const char *s, size_t max, struct sb_err *err)
{
	if (!s || !*s)
		return sb_fail(err, EINVAL, "records: %s is missing", what);
	if (strnlen(s, max + 1) > max)
		return sb_fail(err, EINVAL, "records: %s is longer than %zu bytes", what, max);
	return 0;
}

/* A text field of a caller's row: NUL-terminated inside its array, and not empty when required. */
static int check_field(const char *what, const char *s, size_t size, bool required, struct sb_err *err)
{
	if (strnlen(s, size) == size)
		return sb_fail(err, EINVAL, "records: %s is not terminated within its %zu bytes", what, size);
	if (required && !*s)
		return sb_fail(err, EINVAL, "records: %s is missing", what);
	return 0;
}

static bool is_hex(const char *s)
{
	return *s && s[strspn(s, "0123456789abcdefABCDEF")] == '\0';
}

static bool is_final_state(const char *state)
{
	static const char *const finals[] = { "exited", "signaled", "timed_out", "cancelled", "uncertain", "refused" };

	for (size_t i = 0; i < sizeof finals / sizeof finals[0]; i++)
		if (strcmp(state, finals[i]) == 0)
			return true;
	return false;
}

static void copy_text(char *dst, size_t size, const char *src)
{
	snprintf(dst, size, "%s", src ? src : "");
}

/* ---------------------------------------------------------------- statements */

static int prepare(struct records *r, const char *sql, sqlite3_stmt **st, struct sb_err *err)
{
	if (sqlite3_prepare_v2(r->db, sql, -1, st, NULL) != SQLITE_OK)
		return db_fail(r, err, "preparing \"%.60s...\"", sql);
	return 0;
}

/* Binds are no-ops once *rc holds an error, so a run of binds is checked once, at step(). */
static void bind_text(sqlite3_stmt *st, int i, const char *s, int *rc)
{
	if (*rc == SQLITE_OK)
		*rc = s ? sqlite3_bind_text(st, i, s, -1, SQLITE_STATIC) : sqlite3_bind_null(st, i);
}

static void bind_textn(sqlite3_stmt *st, int i, const char *s, size_t n, int *rc)
{
	if (*rc == SQLITE_OK)
		*rc = sqlite3_bind_text(st, i, s, (int)n, SQLITE_STATIC);
}

static void bind_int(sqlite3_stmt *st, int i, int64_t v, int *rc)
{
	if (*rc == SQLITE_OK)
		*rc = sqlite3_bind_int64(st, i, v);
}

/* The step's result code, or the binds' error (SQLite has set its message for either). */
static int step(sqlite3_stmt *st, int bind_rc)
{
	return bind_rc != SQLITE_OK ? bind_rc : sqlite3_step(st);
}

static const char *col_text(sqlite3_stmt *st, int i)
{
	return (const char *)sqlite3_column_text(st, i);
}

/* Run one constant statement without parameters or rows (BEGIN, COMMIT, the schema). */
static int exec_sql(struct records *r, const char *sql, const char *what, struct sb_err *err)
{
	if (sqlite3_exec(r->db, sql, NULL, NULL, NULL) != SQLITE_OK)
		return db_fail(r, err, "%s", what);
	return 0;
}

/* A pragma that answers one integer. */
static int pragma_int(struct records *r, const char *sql, int64_t *out, struct sb_err *err)
{
	sqlite3_stmt *st cleanup_stmt = NULL;

	if (prepare(r, sql, &st, err) != 0)
		return -1;
	if (sqlite3_step(st) != SQLITE_ROW)
		return db_fail(r, err, "reading %s", sql);
	*out = sqlite3_column_int64(st, 0);
	return 0;
}

/* ---------------------------------------------------------------- JSON out of columns */

/* Length of the valid UTF-8 sequence at p (left bytes remain), or 0 when it is not one. */
static size_t utf8_len(const unsigned char *p, size_t left)
{
	size_t n;
	uint32_t cp;

	if (p[0] < 0x80)
		return 1;
	if (p[0] >= 0xc2 && p[0] <= 0xdf) {
		n = 2;
		cp = p[0] & 0x1f;
	} else if ((p[0] & 0xf0) == 0xe0) {
		n = 3;
		cp = p[0] & 0x0f;
	} else if (p[0] >= 0xf0 && p[0] <= 0xf4) {
		n = 4;
		cp = p[0] & 0x07;
	} else {
		return 0;
	}
	if (n > left)
		return 0;
	for (size_t i = 1; i < n; i++) {
		if ((p[i] & 0xc0) != 0x80)
			return 0;
		cp = cp << 6 | (p[i] & 0x3f);
	}
	if ((n == 3 && cp < 0x800) || (n == 4 && cp < 0x10000) || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff))
		return 0;
	return n;
}

static bool utf8_valid(const char *s)
{
	size_t n = strlen(s);

	for (size_t i = 0, k; i < n; i += k)
		if ((k = utf8_len((const unsigned char *)s + i, n - i)) == 0)
			return false;
	return true;
}

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
		size_t k = utf8_len(p + i, n - i);

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

static json_t *col_json_text(sqlite3_stmt *st, int i)
{
	const char *t = col_text(st, i);

	return t ? json_text(t, (size_t)sqlite3_column_bytes(st, i)) : json_null();
}

static json_t *col_json_int(sqlite3_stmt *st, int i)
{
	if (sqlite3_column_type(st, i) == SQLITE_NULL)
		return json_null();
	return json_integer(sqlite3_column_int64(st, i));
}

/* Stored JSON parsed back; text that is not JSON (a receipt as the agent sent it) stays a string,
 * since a record keeps what it was given. */
static json_t *col_json_parsed(sqlite3_stmt *st, int i)
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
static json_t *json_row(const char *const keys[], json_t *const values[], size_t n)
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
static json_t *rows_json(struct records *r, sqlite3_stmt *st, int bind_rc, json_t *(*row_json)(sqlite3_stmt *),
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
	return steal_json(&list);
}

/* ---------------------------------------------------------------- bounded records (invariant 13) */

/* A command decides what it prints, so nothing it prints may grow its record, or an answer made of
 * records, without bound: each stream keeps a head and a tail, and a page of records stops before
 * its budget. Every cut falls between whole tokens, so the text stays valid UTF-8 and an escaped
 * stream's "\\xNN" and "\\\\" (sandbox-agent/output.c output_to_utf8) are never split. */

/* Bytes of the token at s[i]: an escape of an escaped stream, else one UTF-8 sequence (1 for a
 * byte that starts none, which only raw text that is not JSON can hold). */
static size_t text_token(const char *s, size_t n, size_t i, bool escaped)
{
	size_t k;

	if (escaped && s[i] == '\\' && i + 1 < n && s[i + 1] == '\\')
		return 2;
	if (escaped && s[i] == '\\' && i + 3 < n && s[i + 1] == 'x')
		return 4;
	k = utf8_len((const unsigned char *)s + i, n - i);
	return k ? k : 1;
}

#define MARKER_FORMAT "\n[... %zu bytes of this output are not kept in the record ...]\n"
/* A text this much over its limit is one already shortened (head, marker, tail): it is not cut
 * again when a record written bounded is served. */
#define MARKER_MAX 96

/* The first limit/2 and the last limit - limit/2 bytes of s (n > limit), cut back to whole
 * tokens, with a marker between them that says how many bytes it stands for. A new string of
 * *len bytes (NUL-terminated), or NULL out of memory. */
static char *text_shorten(const char *s, size_t n, size_t limit, bool escaped, size_t *len)
{
	size_t head_cap = limit / 2, tail_from = n - (limit - head_cap), head = 0, tail = n;
	bool tail_found = false;
	char marker[96], *out;
	int mlen;

	for (size_t i = 0, k; i < n; i += k) {
		k = text_token(s, n, i, escaped);
		if (i + k <= head_cap)
			head = i + k;
		if (!tail_found && i >= tail_from) {
			tail = i;
			tail_found = true;
		}
	}
	mlen = snprintf(marker, sizeof marker, MARKER_FORMAT, tail - head);
	out = malloc(head + (size_t)mlen + (n - tail) + 1);
	if (!out)
		return NULL;
	memcpy(out, s, head);
	memcpy(out + head, marker, (size_t)mlen);
	memcpy(out + head + (size_t)mlen, s + tail, n - tail);
	*len = head + (size_t)mlen + (n - tail);
	out[*len] = '\0';
	return out;
}

/* A JSON string value shortened to limit bytes (a new reference), or NULL out of memory. */
static json_t *json_shorten(const json_t *text, size_t limit, bool escaped)
{
	size_t len;
	char *s = text_shorten(json_string_value(text), json_string_length(text), limit, escaped, &len);
	json_t *j = s ? json_stringn(s, len) : NULL;

	free(s);
	return j;
}

/* One stream of a result within limit bytes of text. "<name>_bytes" is the agent's count of the
 * whole stream and stays; "<name>_sha256" of the whole stream is the receipt's (verified before
 * the record is written), not recomputed. 1: the text was shortened, 0: it fits, -1: no memory. */
static int stream_bound(json_t *result, const char *name, size_t limit, const json_t *receipt)
{
	char key[32];
	json_t *text = json_object_get(result, name), *sha, *shorter;

	snprintf(key, sizeof key, "%s_sha256", name);
	sha = json_object_get(receipt, key);
	if (json_is_string(sha) && json_object_set(result, key, sha) != 0)
		return -1;
	if (!json_is_string(text) || json_string_length(text) <= limit + MARKER_MAX)
		return 0;
	snprintf(key, sizeof key, "%s_escaped", name);
	shorter = json_shorten(text, limit, json_is_true(json_object_get(result, key)));
	snprintf(key, sizeof key, "%s_truncated", name);
	if (!shorter || json_object_set_new(result, name, shorter) != 0 ||
	    json_object_set_new(result, key, json_true()) != 0)
		return -1;
	return 1;
}

/* Both streams of a result (an object; anything else is left alone): 1 when either was shortened. */
static int result_bound(json_t *result, const json_t *receipt, size_t limit)
{
	int out, err;

	if (!json_is_object(result))
		return 0;
	out = stream_bound(result, "stdout", limit, receipt);
	err = stream_bound(result, "stderr", limit, receipt);
	if (out < 0 || err < 0)
		return -1;
	return out || err;
}

/* The result text as stored: a JSON object with its streams bounded, or, when it is not JSON
 * (kept as given, see col_json_parsed), the text itself bounded. A new string, or NULL (no memory). */
static char *result_for_record(const char *result_json, const char *receipt_json, size_t limit)
{
	json_t *result cleanup_json = json_loads(result_json, JSON_REJECT_DUPLICATES, NULL);
	json_t *receipt cleanup_json = receipt_json ? json_loads(receipt_json, 0, NULL) : NULL;
	size_t n = strlen(result_json), len;

	if (json_is_object(result))
		return result_bound(result, receipt, limit) < 0 ? NULL : json_dumps(result, JSON_COMPACT);
	/* Both streams' worth: a result that is not JSON is one text. */
	return n <= 2 * limit + MARKER_MAX ? strdup(result_json) : text_shorten(result_json, n, 2 * limit, false, &len);
}

/* Bytes of v serialised as control_send() serialises it (JSON_COMPACT, escapes included). */
static size_t json_size(const json_t *v)
{
	return json_dumpb(v, NULL, 0, JSON_COMPACT | JSON_ENCODE_ANY);
}

/* Every string in v (at any depth) shortened to limit bytes, in place; -1 out of memory. */
static int strings_shorten(json_t *v, size_t limit)
{
	json_t *shorter;
	size_t i;

	if (json_is_array(v)) {
		for (i = 0; i < json_array_size(v); i++) {
			json_t *item = json_array_get(v, i);

			if (json_is_string(item) && json_string_length(item) > limit) {
				shorter = json_shorten(item, limit, false);
				if (!shorter || json_array_set_new(v, i, shorter) != 0)
					return -1;
			} else if (strings_shorten(item, limit) != 0) {
				return -1;
			}
		}
	} else if (json_is_object(v)) {
		for (void *it = json_object_iter(v); it; it = json_object_iter_next(v, it)) {
			json_t *item = json_object_iter_value(it);

			if (json_is_string(item) && json_string_length(item) > limit) {
				shorter = json_shorten(item, limit, false);
				if (!shorter || json_object_iter_set_new(v, it, shorter) != 0)
					return -1;
			} else if (strings_shorten(item, limit) != 0) {
				return -1;
			}
		}
	}
	return 0;
}

#define SUMMARY_TEXT_MAX 256  /* bytes of each string a summary keeps */

/* A scalar of a summary: numbers, booleans and null as they are, strings shortened, anything
 * else (objects, arrays) null. A new reference, or NULL out of memory. */
static json_t *summary_value(const json_t *v)
{
	if (json_is_string(v))
		return json_string_length(v) > SUMMARY_TEXT_MAX ? json_shorten(v, SUMMARY_TEXT_MAX, false) :
								  json_copy((json_t *)v);
	if (json_is_number(v) || json_is_boolean(v))
		return json_copy((json_t *)v);
	return json_null();
}

/* The named members of from (an object; else nothing) as summary values, into a new object. */
static json_t *summary_pick(const json_t *from, const char *const keys[], size_t n)
{
	json_t *to = json_object();

	for (size_t i = 0; to && i < n; i++) {
		json_t *v = json_object_get(from, keys[i]);

		if (v && json_object_set_new(to, keys[i], summary_value(v)) != 0) {
			json_decref(to);
			return NULL;
		}
	}
	return to;
}

/* What a record too large to serve even alone keeps: its ids, states and times, and the
 * result's and receipt's counts, flags and digests. Bounded by construction: a fixed set of keys,
 * each a number or at most SUMMARY_TEXT_MAX bytes of text (6 bytes each as JSON escapes), about
 * 50 KiB at worst, under RECORDS_PAGE_MIN_BYTES. */
static json_t *record_summary(const json_t *rec, size_t size)
{
	static const char *const top[] = { "exec_id", "session", "turn", "state", "command", "timeout_seconds",
					   "generation", "nonce", "sandbox", "accepted_ms", "dispatched_ms",
					   "finished_ms", "reason" };
	static const char *const result_keys[] = { "status", "exit_code", "signal", "stdout_bytes", "stderr_bytes",
						   "stdout_sha256", "stderr_sha256", "duration_ms", "error" };
	static const char *const receipt_keys[] = { "nonce", "verified", "status", "exit_code", "stdout_bytes",
						    "stderr_bytes", "stdout_sha256", "stderr_sha256" };
	static const char *const resolution_keys[] = { "outcome", "note", "by_uid", "by_name", "at_ms" };
	json_t *result = json_object_get(rec, "result"), *receipt = json_object_get(rec, "receipt");
	json_t *resolution = json_object_get(rec, "resolution");
	json_t *out = summary_pick(rec, top, sizeof top / sizeof top[0]);
	char note[256];

	snprintf(note, sizeof note, "the record is %zu bytes as JSON, more than one answer holds: its texts, its "
		 "authority and the result's and receipt's other fields are left out", size);
	if (!out || json_object_set_new(out, "result", json_is_object(result) ?
					summary_pick(result, result_keys, sizeof result_keys / sizeof result_keys[0]) :
					summary_value(result)) != 0 ||
	    json_object_set_new(out, "receipt", json_is_object(receipt) ?
				summary_pick(receipt, receipt_keys, sizeof receipt_keys / sizeof receipt_keys[0]) :
				summary_value(receipt)) != 0 ||
	    json_object_set_new(out, "resolution", json_is_object(resolution) ?
				summary_pick(resolution, resolution_keys, sizeof resolution_keys / sizeof resolution_keys[0]) :
				summary_value(resolution)) != 0 ||
	    json_object_set_new(out, "omitted", json_string(note)) != 0) {
		json_decref(out);
		return NULL;
	}
	/* The texts are gone: say so where a reader of each stream looks. */
	if (json_is_object(json_object_get(out, "result")) &&
	    (json_object_set_new(json_object_get(out, "result"), "stdout_truncated", json_true()) != 0 ||
	     json_object_set_new(json_object_get(out, "result"), "stderr_truncated", json_true()) != 0)) {
		json_decref(out);
		return NULL;
	}
	return out;
}

/* rec (consumed) made to fit room bytes: every string shortened to a share of the room, else the
 * summary, else (never expected: the summary is bounded) the exec id and state alone. A new
 * reference marked "truncated", or NULL out of memory. */
static json_t *record_fit(json_t *rec, size_t room)
{
	json_t *orig cleanup_json = rec;
	json_t *fit = json_deep_copy(orig);
	size_t size = json_size(orig);

	if (fit && (strings_shorten(fit, room / 64 > 1024 ? room / 64 : 1024) != 0 ||
		    json_object_set_new(fit, "truncated", json_true()) != 0)) {
		json_decref(fit);
		return NULL;
	}
	if (fit && json_size(fit) <= room)
		return fit;
	json_decref(fit);
	fit = record_summary(orig, size);
	if (fit && json_object_set_new(fit, "truncated", json_true()) == 0 && json_size(fit) <= room)
		return fit;
	json_decref(fit);
	fit = json_object();
	if (!fit || json_object_set_new(fit, "exec_id", summary_value(json_object_get(orig, "exec_id"))) != 0 ||
	    json_object_set_new(fit, "state", summary_value(json_object_get(orig, "state"))) != 0 ||
	    json_object_set_new(fit, "truncated", json_true()) != 0) {
		json_decref(fit);
		return NULL;
	}
	return fit;
}

/* ---------------------------------------------------------------- opening */

/* The database file is created 0600 here, before SQLite opens it: SQLite creates -wal and -shm with
 * the database file's mode (fchmod, so the umask does not matter). An existing file is tightened,
 * and so are sidecars left by an older run. The directory must exist: the manager's private state
 * is made (0700) by whoever owns it, not as a side effect of opening records. */
static int tighten_mode(int fd, const char *path, struct sb_err *err)
{
	struct stat st;

	if (fstat(fd, &st) != 0)
		return sb_fail_errno(err, "records: checking %s", path);
	if (!S_ISREG(st.st_mode))
		return sb_fail(err, EINVAL, "records: %s is not a regular file", path);
	if ((st.st_mode & 07777) != 0600 && fchmod(fd, 0600) != 0)
		return sb_fail_errno(err, "records: making %s mode 0600", path);
	return 0;
}

static int tighten_sidecar(const char *path, const char *suffix, struct sb_err *err)
{
	char side[PATH_MAX];
	int fd cleanup_close = -1;

	if ((size_t)snprintf(side, sizeof side, "%s%s", path, suffix) >= sizeof side)
		return sb_fail(err, ENAMETOOLONG, "records: %s%s", path, suffix);
	fd = open(side, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
	if (fd < 0)
		return errno == ENOENT ? 0 : sb_fail_errno(err, "records: opening %s", side);
	return tighten_mode(fd, side, err);
}

static int db_file_prepare(const char *path, struct sb_err *err)
{
	int fd cleanup_close = open(path, O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600);

	if (fd < 0 && errno == ENOENT)
		return sb_fail_errno(err, "records: creating %s (its directory must exist)", path);
	if (fd < 0)
		return sb_fail_errno(err, "records: opening %s", path);
	if (tighten_mode(fd, path, err) != 0)
		return -1;
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
	int64_t v;

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

static const char SCHEMA_V1[] =
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
	/* The functions below only move states forward (their UPDATEs carry the allowed source state);
	 * this trigger holds the same line for any other writer, the sqlite3 shell included. */
	"CREATE TRIGGER execs_state_forward BEFORE UPDATE OF state ON execs"
	"  WHEN NOT ((OLD.state = 'accepted' AND NEW.state <> 'accepted')"
	"         OR (OLD.state = 'dispatched' AND NEW.state NOT IN ('accepted', 'dispatched')))"
	"  BEGIN SELECT RAISE(ABORT, 'an exec state only moves forward'); END;"
	"PRAGMA user_version = 1;";

/* Version 2: an operator's word on an uncertain exec, one row per exec (the key), never changed or
 * removed, and only for an exec recorded uncertain; the exec's own row and state stay as they were.
 * The triggers hold those lines for any writer, the sqlite3 shell included. */
static const char SCHEMA_V2[] =
	"CREATE TABLE resolutions ("
	"  exec_id TEXT PRIMARY KEY NOT NULL REFERENCES execs(id),"
	"  outcome TEXT NOT NULL CHECK (outcome IN ('ran', 'not-ran', 'unknown')),"
	"  note TEXT NOT NULL CHECK (note <> ''),"
	"  by_uid INTEGER NOT NULL, by_name TEXT, at_ms INTEGER NOT NULL);"
	"CREATE TRIGGER resolutions_uncertain_only BEFORE INSERT ON resolutions"
	"  WHEN (SELECT state FROM execs WHERE id = NEW.exec_id) IS NOT 'uncertain'"
	"  BEGIN SELECT RAISE(ABORT, 'only an uncertain exec is resolved'); END;"
	"CREATE TRIGGER resolutions_final_update BEFORE UPDATE ON resolutions"
	"  BEGIN SELECT RAISE(ABORT, 'a resolution is final'); END;"
	"CREATE TRIGGER resolutions_final_delete BEFORE DELETE ON resolutions"
	"  BEGIN SELECT RAISE(ABORT, 'a resolution is final'); END;"
	"PRAGMA user_version = 2;";

static int schema_refuse_newer(const char *path, int64_t version, struct sb_err *err)
{
	return sb_fail(err, 0, "records: %s has schema version %lld, newer than this sandbox-manager understands (%d): "
		       "run the sandbox-manager that wrote it, or give this one another state directory",
		       path, (long long)version, RECORDS_SCHEMA_VERSION);
}

/* 1 -> 2, inside schema_ensure's transaction: the existing rows are not touched, only the new
 * table and its triggers are added, so a failed migration (rolled back) leaves a version 1 file. */
static int schema_migrate_v2(struct records *r, struct sb_err *err)
{
	return exec_sql(r, SCHEMA_V2, "migrating the records from schema version 1 to 2", err);
}

/* Create the schema on a new file (user_version 0), or migrate an older one, each step in turn.
 * BEGIN IMMEDIATE takes the write lock before the second read, so two managers opening one file at
 * once create or migrate it exactly once; the whole way is one transaction, so a file is never
 * left between two versions. */
static int schema_ensure(struct records *r, const char *path, struct sb_err *err)
{
	struct records *txn cleanup_txn = NULL;
	int64_t version;

	if (pragma_int(r, "PRAGMA user_version", &version, err) != 0)
		return -1;
	if (version == RECORDS_SCHEMA_VERSION)
		return 0;
	if (version > RECORDS_SCHEMA_VERSION || version < 0)
		return schema_refuse_newer(path, version, err);
	if (exec_sql(r, "BEGIN IMMEDIATE", "starting the schema transaction", err) != 0)
		return -1;
	txn = r;
	if (pragma_int(r, "PRAGMA user_version", &version, err) != 0)
		return -1;
	if (version > RECORDS_SCHEMA_VERSION || version < 0)
		return schema_refuse_newer(path, version, err);
	if (version == 0 && exec_sql(r, SCHEMA_V1, "creating the schema", err) != 0)
		return -1;
	if (version <= 1 && schema_migrate_v2(r, err) != 0)
		return -1;
	if (exec_sql(r, "COMMIT", "committing the schema", err) != 0)
		return -1;
	txn = NULL;
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

void records_close(struct records *r)
{
	if (!r)
		return;
	/* Every statement is finalized by the call that made it, so the close itself cannot be busy;
	 * the last connection's close checkpoints the WAL into the database file. */
	sqlite3_close_v2(r->db);
	pthread_mutex_destroy(&r->lock);
	free(r);
}

/* ---------------------------------------------------------------- sessions */

static int session_row_check(const struct session_row *s, struct sb_err *err)
{
	if (check_field("session id", s->id, sizeof s->id, true, err) != 0 ||
	    check_field("session identity", s->identity, sizeof s->identity, true, err) != 0 ||
	    check_field("session repository", s->repo, sizeof s->repo, false, err) != 0 ||
	    check_field("session worktree", s->worktree, sizeof s->worktree, false, err) != 0 ||
	    check_field("session branch", s->branch, sizeof s->branch, false, err) != 0 ||
	    check_field("session state", s->state, sizeof s->state, false, err) != 0)
		return -1;
	if (s->generation > INT64_MAX)
		return sb_fail(err, EINVAL, "records: session %s generation is out of range", s->id);
	return 0;
}

int records_session_insert(struct records *r, const struct session_row *s, struct sb_err *err)
{
	struct records *locked cleanup_unlock = records_lock(r);
	sqlite3_stmt *st cleanup_stmt = NULL;
	int rc = SQLITE_OK;

	if (session_row_check(s, err) != 0)
		return -1;
	if (prepare(r, "INSERT INTO sessions (id, identity, repo, worktree, branch, state, generation, turn,"
		       " created_ms) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)", &st, err) != 0)
		return -1;
	bind_text(st, 1, s->id, &rc);
	bind_text(st, 2, s->identity, &rc);
	bind_text(st, 3, s->repo, &rc);
	bind_text(st, 4, s->worktree, &rc);
	bind_text(st, 5, s->branch, &rc);
	bind_text(st, 6, *s->state ? s->state : "active", &rc);
	bind_int(st, 7, (int64_t)s->generation, &rc);
	bind_int(st, 8, s->turn, &rc);
	bind_int(st, 9, s->created_ms ? s->created_ms : clock_real_ms(), &rc);
	if (step(st, rc) != SQLITE_DONE)
		return db_fail(r, err, "inserting session %s", s->id);
	return 0;
}

int records_session_get(struct records *r, const char *id, struct session_row *out, struct sb_err *err)
{
	struct records *locked cleanup_unlock = records_lock(r);
	sqlite3_stmt *st cleanup_stmt = NULL;
	int rc = SQLITE_OK;

	memset(out, 0, sizeof *out);
	if (check_arg("session id", id, ID_MAX, err) != 0 ||
	    prepare(r, "SELECT id, identity, repo, worktree, branch, state, generation, turn, created_ms"
		       " FROM sessions WHERE id = ?1", &st, err) != 0)
		return -1;
	bind_text(st, 1, id, &rc);
	rc = step(st, rc);
	if (rc == SQLITE_DONE) {
		sb_fail(err, 0, "records: no session %s", id);
		return RECORDS_NOT_FOUND;
	}
	if (rc != SQLITE_ROW)
		return db_fail(r, err, "reading session %s", id);
	copy_text(out->id, sizeof out->id, col_text(st, 0));
	copy_text(out->identity, sizeof out->identity, col_text(st, 1));
	copy_text(out->repo, sizeof out->repo, col_text(st, 2));
	copy_text(out->worktree, sizeof out->worktree, col_text(st, 3));
	copy_text(out->branch, sizeof out->branch, col_text(st, 4));
	copy_text(out->state, sizeof out->state, col_text(st, 5));
	out->generation = (uint64_t)sqlite3_column_int64(st, 6);
	out->turn = sqlite3_column_int64(st, 7);
	out->created_ms = sqlite3_column_int64(st, 8);
	return RECORDS_FOUND;
}

/* After an UPDATE of one session: 0 when it changed a row, else "no session". */
static int session_changed(struct records *r, const char *id, struct sb_err *err)
{
	if (sqlite3_changes(r->db) == 0)
		return sb_fail(err, 0, "records: no session %s", id);
	return 0;
}

int records_session_set_state(struct records *r, const char *id, const char *state, struct sb_err *err)
{
	struct records *locked cleanup_unlock = records_lock(r);
	sqlite3_stmt *st cleanup_stmt = NULL;
	int rc = SQLITE_OK;

	if (check_arg("session id", id, ID_MAX, err) != 0 || check_arg("session state", state, 31, err) != 0 ||
	    prepare(r, "UPDATE sessions SET state = ?1 WHERE id = ?2", &st, err) != 0)
		return -1;
	bind_text(st, 1, state, &rc);
	bind_text(st, 2, id, &rc);
	if (step(st, rc) != SQLITE_DONE)
		return db_fail(r, err, "setting session %s to %s", id, state);
	return session_changed(r, id, err);
}

/* A reserved session is released only when none of its sandboxes is left without evidence: the
 * check and the change are one statement, so no sandbox row can slip in between. */
int records_sessions_release(struct records *r, struct sb_err *err)
{
	struct records *locked cleanup_unlock = records_lock(r);
	sqlite3_stmt *st cleanup_stmt = NULL;

	if (prepare(r, "UPDATE sessions SET state = 'active' WHERE state = 'reserved' AND NOT EXISTS"
		       " (SELECT 1 FROM sandboxes WHERE sandboxes.session = sessions.id AND sandboxes.state <> 'gone')",
		    &st, err) != 0)
		return -1;
	if (step(st, SQLITE_OK) != SQLITE_DONE)
		return db_fail(r, err, "releasing reserved sessions");
	return sqlite3_changes(r->db);
}

/* One statement (UPDATE ... RETURNING), so two threads or processes bumping at once each get
 * their own new value. */
int records_session_bump_generation(struct records *r, const char *id, uint64_t *generation, struct sb_err *err)
{
	struct records *locked cleanup_unlock = records_lock(r);
	sqlite3_stmt *st cleanup_stmt = NULL;
	int rc = SQLITE_OK;

	if (check_arg("session id", id, ID_MAX, err) != 0 ||
	    prepare(r, "UPDATE sessions SET generation = generation + 1 WHERE id = ?1 RETURNING generation",
		    &st, err) != 0)
		return -1;
	bind_text(st, 1, id, &rc);
	rc = step(st, rc);
	if (rc == SQLITE_DONE)
		return sb_fail(err, 0, "records: no session %s", id);
	if (rc != SQLITE_ROW)
		return db_fail(r, err, "bumping the generation of session %s", id);
	*generation = (uint64_t)sqlite3_column_int64(st, 0);
	/* Run the statement to its end so the change is committed before this returns. */
	if (sqlite3_step(st) != SQLITE_DONE)
		return db_fail(r, err, "bumping the generation of session %s", id);
	return 0;
}

int records_session_set_turn(struct records *r, const char *id, int64_t turn, struct sb_err *err)
{
	struct records *locked cleanup_unlock = records_lock(r);
	sqlite3_stmt *st cleanup_stmt = NULL;
	int rc = SQLITE_OK;

	if (check_arg("session id", id, ID_MAX, err) != 0 ||
	    prepare(r, "UPDATE sessions SET turn = ?1 WHERE id = ?2", &st, err) != 0)
		return -1;
	bind_int(st, 1, turn, &rc);
	bind_text(st, 2, id, &rc);
	if (step(st, rc) != SQLITE_DONE)
		return db_fail(r, err, "setting the turn of session %s", id);
	return session_changed(r, id, err);
}

/* ---------------------------------------------------------------- grants */

int records_grant_set(struct records *r, const char *session, const char *resource, const char *access,
		      struct sb_err *err)
{
	struct records *locked cleanup_unlock = records_lock(r);
	sqlite3_stmt *st cleanup_stmt = NULL;
	int rc = SQLITE_OK;

	if (check_arg("session id", session, ID_MAX, err) != 0 || check_arg("grant resource", resource, 1024, err) != 0 ||
	    check_arg("grant access", access, 64, err) != 0 ||
	    prepare(r, "INSERT INTO grants (session, resource, access) VALUES (?1, ?2, ?3)"
		       " ON CONFLICT (session, resource) DO UPDATE SET access = excluded.access", &st, err) != 0)
		return -1;
	/* They become the keys and values of records_grants(), which JSON needs in UTF-8. */
	if (!utf8_valid(resource) || !utf8_valid(access))
		return sb_fail(err, EINVAL, "records: grant for session %s is not UTF-8 text", session);
	bind_text(st, 1, session, &rc);
	bind_text(st, 2, resource, &rc);
	bind_text(st, 3, access, &rc);
	if (step(st, rc) != SQLITE_DONE)
		return db_fail(r, err, "granting %s=%s to session %s", resource, access, session);
	return 0;
}

/* Revoking a grant the session does not hold is an error: the caller retires the sandbox for a
 * revoke, and should not do that for nothing. */
int records_grant_revoke(struct records *r, const char *session, const char *resource, struct sb_err *err)
{
	struct records *locked cleanup_unlock = records_lock(r);
	sqlite3_stmt *st cleanup_stmt = NULL;
	int rc = SQLITE_OK;

	if (check_arg("session id", session, ID_MAX, err) != 0 || check_arg("grant resource", resource, 1024, err) != 0 ||
	    prepare(r, "DELETE FROM grants WHERE session = ?1 AND resource = ?2", &st, err) != 0)
		return -1;
	bind_text(st, 1, session, &rc);
	bind_text(st, 2, resource, &rc);
	if (step(st, rc) != SQLITE_DONE)
		return db_fail(r, err, "revoking %s from session %s", resource, session);
	if (sqlite3_changes(r->db) == 0)
		return sb_fail(err, 0, "records: session %s has no grant on %s to revoke", session, resource);
	return 0;
}

json_t *records_grants(struct records *r, const char *session, struct sb_err *err)
{
	struct records *locked cleanup_unlock = records_lock(r);
	sqlite3_stmt *st cleanup_stmt = NULL;
	json_t *grants cleanup_json = NULL;
	int rc = SQLITE_OK;

	if (check_arg("session id", session, ID_MAX, err) != 0 ||
	    prepare(r, "SELECT resource, access FROM grants WHERE session = ?1 ORDER BY resource", &st, err) != 0)
		return NULL;
	grants = json_object(); /* jansson keeps insertion order, so the object is sorted too */
	if (!grants) {
		oom_fail(err, "listing grants");
		return NULL;
	}
	bind_text(st, 1, session, &rc);
	if (rc != SQLITE_OK) {
		db_fail(r, err, "listing the grants of session %s", session);
		return NULL;
	}
	while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
		if (json_object_set_new(grants, col_text(st, 0), col_json_text(st, 1)) != 0) {
			oom_fail(err, "listing grants");
			return NULL;
		}
	}
	if (rc != SQLITE_DONE) {
		db_fail(r, err, "listing the grants of session %s", session);
		return NULL;
	}
	return steal_json(&grants);
}

/* ---------------------------------------------------------------- sandboxes */

static int sandbox_row_check(const struct sandbox_row *s, struct sb_err *err)
{
	if (check_field("sandbox session", s->session, sizeof s->session, true, err) != 0 ||
	    check_field("sandbox backend", s->backend, sizeof s->backend, true, err) != 0 ||
	    check_field("sandbox runtime id", s->runtime_id, sizeof s->runtime_id, false, err) != 0 ||
	    check_field("sandbox address", s->address, sizeof s->address, false, err) != 0 ||
	    check_field("sandbox private directory", s->private_dir, sizeof s->private_dir, false, err) != 0 ||
	    check_field("sandbox state", s->state, sizeof s->state, true, err) != 0 ||
	    check_field("sandbox grants", s->grants_json, sizeof s->grants_json, false, err) != 0)
		return -1;
	if (s->generation > INT64_MAX)
		return sb_fail(err, EINVAL, "records: sandbox generation of session %s is out of range", s->session);
	/* "gone" needs evidence, which only records_sandbox_set_state() takes. */
	if (strcmp(s->state, "gone") == 0)
		return sb_fail(err, EINVAL, "records: sandbox of session %s: record it gone with its evidence, not by upsert",
			       s->session);
	return 0;
}

/* Current generation and state of a session's sandbox row. */
static int sandbox_current(struct records *r, const char *session, int64_t *generation, char state[32],
			   struct sb_err *err)
{
	sqlite3_stmt *st cleanup_stmt = NULL;
	int rc = SQLITE_OK;

	if (prepare(r, "SELECT generation, state FROM sandboxes WHERE session = ?1", &st, err) != 0)
		return -1;
	bind_text(st, 1, session, &rc);
	rc = step(st, rc);
	if (rc == SQLITE_DONE)
		return RECORDS_NOT_FOUND;
	if (rc != SQLITE_ROW)
		return db_fail(r, err, "reading the sandbox of session %s", session);
	*generation = sqlite3_column_int64(st, 0);
	copy_text(state, 32, col_text(st, 1));
	return RECORDS_FOUND;
}

/* Why an upsert changed nothing: the row it would replace is live, or is not older. */
static int sandbox_upsert_refusal(struct records *r, const struct sandbox_row *s, struct sb_err *err)
{
	char state[32];
	int64_t generation;
	int found = sandbox_current(r, s->session, &generation, state, err);

	if (found != RECORDS_FOUND)
		return found < 0 ? -1 : sb_fail(err, 0, "records: sandbox of session %s vanished during upsert", s->session);
	return sb_fail(err, 0, "records: session %s has sandbox generation %lld (%s): generation %llu may replace it "
		       "only once it is gone, with evidence, and only with a newer generation",
		       s->session, (long long)generation, state, (unsigned long long)s->generation);
}

/* Insert the session's sandbox, update it within its generation, or replace a gone one with a newer
 * generation. Replacing a live or unproven sandbox would lose the only record of a runtime that may
 * still be running, so that is refused (the DO UPDATE's WHERE). */
int records_sandbox_upsert(struct records *r, const struct sandbox_row *s, struct sb_err *err)
{
	struct records *locked cleanup_unlock = records_lock(r);
	sqlite3_stmt *st cleanup_stmt = NULL;
	int rc = SQLITE_OK;

	if (sandbox_row_check(s, err) != 0 ||
	    prepare(r, "INSERT INTO sandboxes (session, generation, backend, runtime_id, address, private_dir,"
		       " state, grants_json, started_ms, evidence) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, NULL)"
		       " ON CONFLICT (session) DO UPDATE SET generation = excluded.generation,"
		       " backend = excluded.backend, runtime_id = excluded.runtime_id, address = excluded.address,"
		       " private_dir = excluded.private_dir, state = excluded.state,"
		       " grants_json = excluded.grants_json, started_ms = excluded.started_ms, evidence = NULL"
		       " WHERE (sandboxes.generation = excluded.generation AND sandboxes.state <> 'gone')"
		       " OR (sandboxes.state = 'gone' AND excluded.generation > sandboxes.generation)", &st, err) != 0)
		return -1;
	bind_text(st, 1, s->session, &rc);
	bind_int(st, 2, (int64_t)s->generation, &rc);
	bind_text(st, 3, s->backend, &rc);
	bind_text(st, 4, s->runtime_id, &rc);
	bind_text(st, 5, s->address, &rc);
	bind_text(st, 6, s->private_dir, &rc);
	bind_text(st, 7, s->state, &rc);
	bind_text(st, 8, *s->grants_json ? s->grants_json : "{}", &rc);
	bind_int(st, 9, s->started_ms ? s->started_ms : clock_real_ms(), &rc);
	if (step(st, rc) != SQLITE_DONE)
		return db_fail(r, err, "recording the sandbox of session %s", s->session);
	if (sqlite3_changes(r->db) == 0)
		return sandbox_upsert_refusal(r, s, err);
	return 0;
}

int records_sandbox_get(struct records *r, const char *session, struct sandbox_row *out, struct sb_err *err)
{
	struct records *locked cleanup_unlock = records_lock(r);
	sqlite3_stmt *st cleanup_stmt = NULL;
	int rc = SQLITE_OK;

	memset(out, 0, sizeof *out);
	if (check_arg("session id", session, ID_MAX, err) != 0 ||
	    prepare(r, "SELECT session, generation, backend, runtime_id, address, private_dir, state, grants_json,"
		       " started_ms, evidence FROM sandboxes WHERE session = ?1", &st, err) != 0)
		return -1;
	bind_text(st, 1, session, &rc);
	rc = step(st, rc);
	if (rc == SQLITE_DONE) {
		sb_fail(err, 0, "records: no sandbox for session %s", session);
		return RECORDS_NOT_FOUND;
	}
	if (rc != SQLITE_ROW)
		return db_fail(r, err, "reading the sandbox of session %s", session);
	copy_text(out->session, sizeof out->session, col_text(st, 0));
	out->generation = (uint64_t)sqlite3_column_int64(st, 1);
	copy_text(out->backend, sizeof out->backend, col_text(st, 2));
	copy_text(out->runtime_id, sizeof out->runtime_id, col_text(st, 3));
	copy_text(out->address, sizeof out->address, col_text(st, 4));
	copy_text(out->private_dir, sizeof out->private_dir, col_text(st, 5));
	copy_text(out->state, sizeof out->state, col_text(st, 6));
	copy_text(out->grants_json, sizeof out->grants_json, col_text(st, 7));
	out->started_ms = sqlite3_column_int64(st, 8);
	copy_text(out->evidence, sizeof out->evidence, col_text(st, 9));
	return RECORDS_FOUND;
}

/* Why a state change matched no row: no sandbox, another generation, or already gone. */
static int sandbox_state_refusal(struct records *r, const char *session, uint64_t generation, struct sb_err *err)
{
	char state[32];
	int64_t current;
	int found = sandbox_current(r, session, &current, state, err);

	if (found < 0)
		return -1;
	if (found == RECORDS_NOT_FOUND)
		return sb_fail(err, 0, "records: no sandbox for session %s", session);
	if ((uint64_t)current != generation)
		return sb_fail(err, 0, "records: sandbox of session %s is generation %lld, not %llu: refusing a stale "
			       "state change", session, (long long)current, (unsigned long long)generation);
	return sb_fail(err, 0, "records: sandbox generation %llu of session %s is already gone: a gone sandbox "
		       "stays gone", (unsigned long long)generation, session);
}

/* Only the row of that generation changes, and a gone sandbox stays gone; "gone" needs evidence. */
int records_sandbox_set_state(struct records *r, const char *session, uint64_t generation, const char *state,
			      const char *evidence, struct sb_err *err)
{
	struct records *locked cleanup_unlock = records_lock(r);
	sqlite3_stmt *st cleanup_stmt = NULL;
	int rc = SQLITE_OK;

	if (check_arg("session id", session, ID_MAX, err) != 0 || check_arg("sandbox state", state, 31, err) != 0)
		return -1;
	if (strcmp(state, "gone") == 0 && (!evidence || !*evidence))
		return sb_fail(err, EINVAL, "records: sandbox of session %s cannot be recorded gone without evidence "
			       "that all of its processes have ended", session);
	if (generation > INT64_MAX)
		return sb_fail(err, EINVAL, "records: sandbox generation %llu is out of range",
			       (unsigned long long)generation);
	if (prepare(r, "UPDATE sandboxes SET state = ?1, evidence = coalesce(?2, evidence)"
		       " WHERE session = ?3 AND generation = ?4 AND state <> 'gone'", &st, err) != 0)
		return -1;
	bind_text(st, 1, state, &rc);
	bind_text(st, 2, evidence, &rc);
	bind_text(st, 3, session, &rc);
	bind_int(st, 4, (int64_t)generation, &rc);
	if (step(st, rc) != SQLITE_DONE)
		return db_fail(r, err, "setting the sandbox of session %s to %s", session, state);
	if (sqlite3_changes(r->db) == 0)
		return sandbox_state_refusal(r, session, generation, err);
	return 0;
}

/* {"session", "generation", "backend", "runtime_id", "address", "private_dir", "state",
 *  "grants": <the snapshot parsed>, "started_ms", "evidence": <text or null>} */
static json_t *sandbox_json(sqlite3_stmt *st)
{
	static const char *const keys[] = { "session", "generation", "backend", "runtime_id", "address",
					    "private_dir", "state", "grants", "started_ms", "evidence" };
	json_t *values[] = { col_json_text(st, 0), col_json_int(st, 1), col_json_text(st, 2), col_json_text(st, 3),
			     col_json_text(st, 4), col_json_text(st, 5), col_json_text(st, 6), col_json_parsed(st, 7),
			     col_json_int(st, 8), col_json_text(st, 9) };

	return json_row(keys, values, sizeof values / sizeof values[0]);
}

json_t *records_sandboxes_not_gone(struct records *r, struct sb_err *err)
{
	struct records *locked cleanup_unlock = records_lock(r);
	sqlite3_stmt *st cleanup_stmt = NULL;

	if (prepare(r, "SELECT session, generation, backend, runtime_id, address, private_dir, state, grants_json,"
		       " started_ms, evidence FROM sandboxes WHERE state <> 'gone' ORDER BY session", &st, err) != 0)
		return NULL;
	return rows_json(r, st, SQLITE_OK, sandbox_json, "listing sandboxes not gone", err);
}

/* ---------------------------------------------------------------- execs */

static int exec_row_check(const struct exec_row *e, struct sb_err *err)
{
	if (check_field("exec id", e->id, sizeof e->id, true, err) != 0 ||
	    check_field("exec session", e->session, sizeof e->session, true, err) != 0 ||
	    check_field("exec state", e->state, sizeof e->state, false, err) != 0)
		return -1;
	/* A record starts accepted; dispatch and finish move it on, so nothing skips a step. */
	if (*e->state && strcmp(e->state, "accepted") != 0)
		return sb_fail(err, EINVAL, "records: exec %s cannot start in state %s: a new exec is accepted", e->id,
			       e->state);
	return 0;
}

/* Insert an accepted exec. The dispatch fields (generation, nonce, sandbox) are set by
 * records_exec_dispatched(), not here. The command is kept up to its first NUL or the end of its
 * array, whichever comes first: the record's copy. */
int records_exec_insert(struct records *r, const struct exec_row *e, struct sb_err *err)
{
	struct records *locked cleanup_unlock = records_lock(r);
	sqlite3_stmt *st cleanup_stmt = NULL;
	int rc = SQLITE_OK;

	if (exec_row_check(e, err) != 0 ||
	    prepare(r, "INSERT INTO execs (id, session, turn, state, command, timeout_seconds, accepted_ms)"
		       " VALUES (?1, ?2, ?3, 'accepted', ?4, ?5, ?6)", &st, err) != 0)
		return -1;
	bind_text(st, 1, e->id, &rc);
	bind_text(st, 2, e->session, &rc);
	bind_int(st, 3, e->turn, &rc);
	bind_textn(st, 4, e->command, strnlen(e->command, sizeof e->command - 1), &rc);
	bind_int(st, 5, e->timeout_seconds, &rc);
	bind_int(st, 6, e->accepted_ms ? e->accepted_ms : clock_real_ms(), &rc);
	if (step(st, rc) != SQLITE_DONE)
		return db_fail(r, err, "inserting exec %s", e->id);
	return 0;
}

/* The current state of an exec, to explain a refused transition. */
static int exec_state_of(struct records *r, const char *id, char state[16], struct sb_err *err)
{
	sqlite3_stmt *st cleanup_stmt = NULL;
	int rc = SQLITE_OK;

	if (prepare(r, "SELECT state FROM execs WHERE id = ?1", &st, err) != 0)
		return -1;
	bind_text(st, 1, id, &rc);
	rc = step(st, rc);
	if (rc == SQLITE_DONE)
		return sb_fail(err, 0, "records: no exec %s", id);
	if (rc != SQLITE_ROW)
		return db_fail(r, err, "reading exec %s", id);
	copy_text(state, 16, col_text(st, 0));
	return 0;
}

/* accepted -> dispatched, once: the WHERE makes a second dispatch change nothing, and that is an
 * error, so an exec is never sent to an agent twice (invariant 7). */
int records_exec_dispatched(struct records *r, const char *exec_id, uint64_t generation, const char *nonce_hex,
			    const char *sandbox, const char *authority, struct sb_err *err)
{
	struct records *locked cleanup_unlock = records_lock(r);
	sqlite3_stmt *st cleanup_stmt = NULL;
	char state[16];
	int rc = SQLITE_OK;

	if (check_arg("exec id", exec_id, ID_MAX, err) != 0 || check_arg("exec nonce", nonce_hex, 64, err) != 0 ||
	    check_arg("exec sandbox", sandbox, 255, err) != 0)
		return -1;
	if (!is_hex(nonce_hex) || generation > INT64_MAX)
		return sb_fail(err, EINVAL, "records: exec %s: the nonce must be hex and the generation in range", exec_id);
	if (prepare(r, "UPDATE execs SET state = 'dispatched', generation = ?1, nonce_hex = ?2, sandbox = ?3,"
		       " dispatched_ms = ?4, authority = ?6 WHERE id = ?5 AND state = 'accepted'", &st, err) != 0)
		return -1;
	bind_text(st, 6, authority, &rc);
	bind_int(st, 1, (int64_t)generation, &rc);
	bind_text(st, 2, nonce_hex, &rc);
	bind_text(st, 3, sandbox, &rc);
	bind_int(st, 4, clock_real_ms(), &rc);
	bind_text(st, 5, exec_id, &rc);
	if (step(st, rc) != SQLITE_DONE)
		return db_fail(r, err, "dispatching exec %s", exec_id);
	if (sqlite3_changes(r->db) == 1)
		return 0;
	if (exec_state_of(r, exec_id, state, err) != 0)
		return -1;
	return sb_fail(err, 0, "records: exec %s is not accepted (state %s): never dispatched twice", exec_id, state);
}

/* accepted|dispatched -> a final state, once. result_json and receipt_json are stored as given
 * (records_page parses them back, keeping text that is not JSON as a string). */
static void freep(char **p)
{
	free(*p);
}

int records_exec_finish(struct records *r, const char *exec_id, const char *state, const char *result_json,
			const char *receipt_json, const char *reason, struct sb_err *err)
{
	struct records *locked cleanup_unlock = records_lock(r);
	sqlite3_stmt *st cleanup_stmt = NULL;
	char *stored __attribute__((cleanup(freep))) = NULL;
	char current[16];
	int rc = SQLITE_OK;

	if (check_arg("exec id", exec_id, ID_MAX, err) != 0 || check_arg("exec state", state, 15, err) != 0)
		return -1;
	/* Bounded here, where every final record is written, so no caller can store a whole output. */
	if (result_json && !(stored = result_for_record(result_json, receipt_json, r->output_limit)))
		return oom_fail(err, "bounding the result of an exec");
	if (!is_final_state(state))
		return sb_fail(err, EINVAL, "records: exec %s cannot finish as %s: a final state is one of exited, "
			       "signaled, timed_out, cancelled, uncertain, refused", exec_id, state);
	if (prepare(r, "UPDATE execs SET state = ?1, result_json = ?2, receipt_json = ?3, reason = ?4,"
		       " finished_ms = ?5 WHERE id = ?6 AND state IN ('accepted', 'dispatched')", &st, err) != 0)
		return -1;
	bind_text(st, 1, state, &rc);
	bind_text(st, 2, stored, &rc);
	bind_text(st, 3, receipt_json, &rc);
	bind_text(st, 4, reason, &rc);
	bind_int(st, 5, clock_real_ms(), &rc);
	bind_text(st, 6, exec_id, &rc);
	if (step(st, rc) != SQLITE_DONE)
		return db_fail(r, err, "finishing exec %s as %s", exec_id, state);
	if (sqlite3_changes(r->db) == 1)
		return 0;
	if (exec_state_of(r, exec_id, current, err) != 0)
		return -1;
	return sb_fail(err, 0, "records: exec %s already finished (state %s): an exec finished once stays finished",
		       exec_id, current);
}

int records_exec_get(struct records *r, const char *exec_id, struct exec_row *out, struct sb_err *err)
{
	struct records *locked cleanup_unlock = records_lock(r);
	sqlite3_stmt *st cleanup_stmt = NULL;
	int rc = SQLITE_OK;

	memset(out, 0, sizeof *out);
	if (check_arg("exec id", exec_id, ID_MAX, err) != 0 ||
	    prepare(r, "SELECT id, session, turn, state, command, timeout_seconds, generation, nonce_hex, sandbox,"
		       " accepted_ms, dispatched_ms, finished_ms FROM execs WHERE id = ?1", &st, err) != 0)
		return -1;
	bind_text(st, 1, exec_id, &rc);
	rc = step(st, rc);
	if (rc == SQLITE_DONE) {
		sb_fail(err, 0, "records: no exec %s", exec_id);
		return RECORDS_NOT_FOUND;
	}
	if (rc != SQLITE_ROW)
		return db_fail(r, err, "reading exec %s", exec_id);
	/* Columns that are NULL before dispatch or finish read as 0 and "". */
	copy_text(out->id, sizeof out->id, col_text(st, 0));
	copy_text(out->session, sizeof out->session, col_text(st, 1));
	out->turn = sqlite3_column_int64(st, 2);
	copy_text(out->state, sizeof out->state, col_text(st, 3));
	copy_text(out->command, sizeof out->command, col_text(st, 4));
	out->timeout_seconds = (uint32_t)sqlite3_column_int64(st, 5);
	out->generation = (uint64_t)sqlite3_column_int64(st, 6);
	copy_text(out->nonce_hex, sizeof out->nonce_hex, col_text(st, 7));
	copy_text(out->sandbox, sizeof out->sandbox, col_text(st, 8));
	out->accepted_ms = sqlite3_column_int64(st, 9);
	out->dispatched_ms = sqlite3_column_int64(st, 10);
	out->finished_ms = sqlite3_column_int64(st, 11);
	return RECORDS_FOUND;
}

/* ---------------------------------------------------------------- operators' resolutions */

static bool is_outcome(const char *outcome)
{
	return strcmp(outcome, "ran") == 0 || strcmp(outcome, "not-ran") == 0 || strcmp(outcome, "unknown") == 0;
}

/* Why a resolution was not recorded: no exec (RECORDS_NOT_FOUND), or an exec that is not uncertain
 * or is resolved already (RECORDS_REFUSED). */
static int resolve_refusal(struct records *r, const char *exec_id, struct sb_err *err)
{
	sqlite3_stmt *st cleanup_stmt = NULL;
	int rc = SQLITE_OK;

	if (prepare(r, "SELECT e.state, x.outcome FROM execs e LEFT JOIN resolutions x ON x.exec_id = e.id"
		       " WHERE e.id = ?1", &st, err) != 0)
		return -1;
	bind_text(st, 1, exec_id, &rc);
	rc = step(st, rc);
	if (rc == SQLITE_DONE) {
		sb_fail(err, 0, "records: no exec %s", exec_id);
		return RECORDS_NOT_FOUND;
	}
	if (rc != SQLITE_ROW)
		return db_fail(r, err, "reading exec %s", exec_id);
	if (col_text(st, 1))
		sb_fail(err, 0, "exec %s is already resolved (%s): a resolution is final, the first one stays", exec_id,
			col_text(st, 1));
	else
		sb_fail(err, 0, "exec %s is %s, not uncertain: only an uncertain exec is resolved by an operator; its "
			"record is unchanged", exec_id, col_text(st, 0));
	return RECORDS_REFUSED;
}

/* One statement inserts the resolution only for an uncertain exec without one, so the check and
 * the write cannot be split by another writer; the exec's row itself is not written. */
int records_exec_resolve(struct records *r, const char *exec_id, struct exec_resolution *res, struct sb_err *err)
{
	struct records *locked cleanup_unlock = records_lock(r);
	sqlite3_stmt *st cleanup_stmt = NULL;
	int rc = SQLITE_OK;

	if (check_arg("exec id", exec_id, ID_MAX, err) != 0 || check_arg("outcome", res->outcome, 16, err) != 0)
		return -1;
	if (!is_outcome(res->outcome))
		return sb_fail(err, EINVAL, "records: the outcome must be ran, not-ran or unknown, not '%s'", res->outcome);
	if (!res->note || !*res->note || strnlen(res->note, RECORDS_NOTE_MAX + 1) > RECORDS_NOTE_MAX ||
	    !utf8_valid(res->note))
		return sb_fail(err, EINVAL, "records: the note must be 1 to %u bytes of UTF-8 text", RECORDS_NOTE_MAX);
	if (res->by_name && (strnlen(res->by_name, 257) > 256 || !utf8_valid(res->by_name)))
		return sb_fail(err, EINVAL, "records: the resolver's name must be at most 256 bytes of UTF-8 text");
	res->at_ms = clock_real_ms();
	if (prepare(r, "INSERT INTO resolutions (exec_id, outcome, note, by_uid, by_name, at_ms)"
		       " SELECT id, ?2, ?3, ?4, ?5, ?6 FROM execs WHERE id = ?1 AND state = 'uncertain'"
		       " ON CONFLICT (exec_id) DO NOTHING", &st, err) != 0)
		return -1;
	bind_text(st, 1, exec_id, &rc);
	bind_text(st, 2, res->outcome, &rc);
	bind_text(st, 3, res->note, &rc);
	bind_int(st, 4, res->by_uid, &rc);
	bind_text(st, 5, res->by_name, &rc);
	bind_int(st, 6, res->at_ms, &rc);
	if (step(st, rc) != SQLITE_DONE)
		return db_fail(r, err, "resolving exec %s", exec_id);
	if (sqlite3_changes(r->db) == 1)
		return RECORDS_FOUND;
	return resolve_refusal(r, exec_id, err);
}

/* {"exec_id", "session", "turn", "state", "command", "timeout_seconds", "generation", "nonce",
 *  "sandbox", "accepted_ms", "dispatched_ms", "finished_ms", "result", "receipt", "reason",
 *  "authority", "resolution": {"outcome", "note", "by_uid", "by_name", "at_ms"} or null};
 * a column not yet set (before dispatch or finish) is null. */
static json_t *exec_json(sqlite3_stmt *st)
{
	static const char *const keys[] = { "exec_id", "session", "turn", "state", "command", "timeout_seconds",
					    "generation", "nonce", "sandbox", "accepted_ms", "dispatched_ms",
					    "finished_ms", "result", "receipt", "reason", "authority", "resolution" };
	json_t *values[] = { col_json_text(st, 0), col_json_text(st, 1), col_json_int(st, 2), col_json_text(st, 3),
			     col_json_text(st, 4), col_json_int(st, 5), col_json_int(st, 6), col_json_text(st, 7),
			     col_json_text(st, 8), col_json_int(st, 9), col_json_int(st, 10), col_json_int(st, 11),
			     col_json_parsed(st, 12), col_json_parsed(st, 13), col_json_text(st, 14),
			     col_json_parsed(st, 15), col_json_parsed(st, 16) };

	return json_row(keys, values, sizeof values / sizeof values[0]);
}

static json_t *id_json(sqlite3_stmt *st)
{
	return col_json_text(st, 0);
}

json_t *records_exec_ids_in_state(struct records *r, const char *state, struct sb_err *err)
{
	struct records *locked cleanup_unlock = records_lock(r);
	sqlite3_stmt *st cleanup_stmt = NULL;
	int rc = SQLITE_OK;

	if (check_arg("exec state", state, 15, err) != 0 ||
	    prepare(r, "SELECT id FROM execs WHERE state = ?1 ORDER BY accepted_ms, rowid", &st, err) != 0)
		return NULL;
	bind_text(st, 1, state, &rc);
	return rows_json(r, st, rc, id_json, "listing execs by state", err);
}

/* ---------------------------------------------------------------- pages of records (invariant 13) */

static bool is_exec_state(const char *state)
{
	return strcmp(state, "accepted") == 0 || strcmp(state, "dispatched") == 0 || is_final_state(state);
}

static int page_query_check(const struct records_query *q, struct sb_err *err)
{
	if (!q->session == !q->exec_id)
		return sb_fail(err, EINVAL, "records: name a session or an exec, not both or neither");
	if (q->exec_id)
		return (q->before || q->state) ?
		       sb_fail(err, EINVAL, "records: before and state page a session's records, not one exec's") :
		       check_arg("exec id", q->exec_id, ID_MAX, err);
	if (check_arg("session id", q->session, ID_MAX, err) != 0 ||
	    (q->before && check_arg("before (an exec id)", q->before, ID_MAX, err) != 0))
		return -1;
	if (q->limit < 1 || q->limit > RECORDS_PAGE_LIMIT_MAX)
		return sb_fail(err, EINVAL, "records: limit must be from 1 to %u, not %u", RECORDS_PAGE_LIMIT_MAX, q->limit);
	if (q->state && !is_exec_state(q->state) && strcmp(q->state, "unresolved") != 0)
		return sb_fail(err, EINVAL, "records: state must be one of accepted, dispatched, exited, signaled, "
			       "timed_out, cancelled, uncertain, refused, or unresolved (uncertain and not resolved), "
			       "not '%s'", q->state);
	return 0;
}

/* The session exists (in any state: a deleted session's records stay readable), and the `before`
 * exec is one of its execs; *cursor_ms and *cursor_rowid receive that exec's place in the order. */
static int page_cursor(struct records *r, const struct records_query *q, int64_t *cursor_ms, int64_t *cursor_rowid,
		       struct sb_err *err)
{
	sqlite3_stmt *st cleanup_stmt = NULL;
	int rc = SQLITE_OK;

	if (prepare(r, "SELECT (SELECT count(*) FROM sessions WHERE id = ?1), e.accepted_ms, e.rowid"
		       " FROM (SELECT 1) LEFT JOIN execs e ON e.id = ?2 AND e.session = ?1", &st, err) != 0)
		return -1;
	bind_text(st, 1, q->session, &rc);
	bind_text(st, 2, q->before, &rc);
	if (step(st, rc) != SQLITE_ROW)
		return db_fail(r, err, "reading session %s", q->session);
	if (sqlite3_column_int64(st, 0) == 0) {
		sb_fail(err, 0, "records: no session %s", q->session);
		return RECORDS_NOT_FOUND;
	}
	if (q->before && sqlite3_column_type(st, 2) == SQLITE_NULL) {
		sb_fail(err, 0, "records: session %s has no exec %s to page before", q->session, q->before);
		return RECORDS_NOT_FOUND;
	}
	*cursor_ms = sqlite3_column_int64(st, 1);
	*cursor_rowid = sqlite3_column_int64(st, 2);
	return RECORDS_FOUND;
}

/* The resolution as one JSON column (SQLite's json_object escapes the note, stored as UTF-8). */
#define EXEC_COLUMNS "id, session, turn, state, command, timeout_seconds, generation, nonce_hex, sandbox," \
		     " accepted_ms, dispatched_ms, finished_ms, result_json, receipt_json, reason, authority," \
		     " (SELECT json_object('outcome', outcome, 'note', note, 'by_uid', by_uid, 'by_name', by_name," \
		     " 'at_ms', at_ms) FROM resolutions WHERE exec_id = execs.id)"

static int page_prepare(struct records *r, const struct records_query *q, sqlite3_stmt **st, int *brc,
			struct sb_err *err)
{
	int64_t cursor_ms = 0, cursor_rowid = 0;
	int found;

	*brc = SQLITE_OK;
	if (q->exec_id) {
		if (prepare(r, "SELECT " EXEC_COLUMNS " FROM execs WHERE id = ?1", st, err) != 0)
			return -1;
		bind_text(*st, 1, q->exec_id, brc);
		return RECORDS_FOUND;
	}
	found = page_cursor(r, q, &cursor_ms, &cursor_rowid, err);
	if (found != RECORDS_FOUND)
		return found;
	/* The row value compares (accepted_ms, rowid) as the ORDER BY does: each exec is on one page. */
	/* "unresolved": the uncertain execs no operator has resolved yet. */
	if (prepare(r, "SELECT " EXEC_COLUMNS " FROM execs WHERE session = ?1 AND (?2 IS NULL OR state = ?2 OR"
		       " (?2 = 'unresolved' AND state = 'uncertain' AND"
		       " NOT EXISTS (SELECT 1 FROM resolutions WHERE exec_id = execs.id)))"
		       " AND (?3 IS NULL OR (accepted_ms, rowid) < (?4, ?5))"
		       " ORDER BY accepted_ms DESC, rowid DESC LIMIT ?6", st, err) != 0)
		return -1;
	bind_text(*st, 1, q->session, brc);
	bind_text(*st, 2, q->state, brc);
	bind_text(*st, 3, q->before, brc);
	bind_int(*st, 4, cursor_ms, brc);
	bind_int(*st, 5, cursor_rowid, brc);
	bind_int(*st, 6, (int64_t)q->limit + 1, brc); /* one more than served says whether more remain */
	return RECORDS_FOUND;
}

/* One row as served: its streams bounded as when written (older records hold whole outputs),
 * then, when it is the page's first and larger than the room alone, made to fit. */
static json_t *page_record(struct records *r, sqlite3_stmt *st)
{
	json_t *rec = exec_json(st);
	int bounded = rec ? result_bound(json_object_get(rec, "result"), json_object_get(rec, "receipt"),
					 r->output_limit) : -1;

	if (bounded < 0 || (bounded == 1 && json_object_set_new(rec, "truncated", json_true()) != 0)) {
		json_decref(rec);
		return NULL;
	}
	return rec;
}

int records_page(struct records *r, const struct records_query *q, json_t **out, struct sb_err *err)
{
	struct records *locked cleanup_unlock = records_lock(r);
	sqlite3_stmt *st cleanup_stmt = NULL;
	json_t *list cleanup_json = NULL, *last cleanup_json = NULL, *page;
	size_t budget = q->budget ? q->budget : RECORDS_PAGE_BYTES, used = 2; /* "[]" */
	bool more = false;
	int rc, brc, found;

	*out = NULL;
	if (budget < RECORDS_PAGE_MIN_BYTES)
		budget = RECORDS_PAGE_MIN_BYTES;
	if (page_query_check(q, err) != 0)
		return -1;
	found = page_prepare(r, q, &st, &brc, err);
	if (found != RECORDS_FOUND)
		return found;
	if (!(list = json_array()))
		return oom_fail(err, "listing execs");
	while ((rc = step(st, brc)) == SQLITE_ROW) {
		size_t n = json_array_size(list), comma = n > 0, size;
		json_t *rec;

		if (q->session && n == q->limit) {
			more = true;
			break;
		}
		if (!(rec = page_record(r, st)))
			return oom_fail(err, "listing execs");
		size = json_size(rec);
		if (n > 0 && used + comma + size > budget) {
			/* The next page starts with it, where it is first and is served whatever its size. */
			json_decref(rec);
			more = true;
			break;
		}
		if (n == 0 && used + size > budget && !(rec = record_fit(rec, budget - used)))
			return oom_fail(err, "shortening an exec's record");
		used += comma + json_size(rec);
		json_decref(last);
		last = col_json_text(st, 0);
		if (json_array_append_new(list, rec) != 0 || !last)
			return oom_fail(err, "listing execs");
	}
	if (rc != SQLITE_ROW && rc != SQLITE_DONE)
		return db_fail(r, err, "listing execs");
	if (q->exec_id && json_array_size(list) == 0) {
		sb_fail(err, 0, "records: no exec %s", q->exec_id);
		return RECORDS_NOT_FOUND;
	}
	page = json_pack("{s:O}", "records", list);
	if (!page || (more && json_object_set(page, "next_before", last) != 0)) {
		json_decref(page);
		return oom_fail(err, "listing execs");
	}
	*out = page;
	return RECORDS_FOUND;
}

/* ---------------------------------------------------------------- counts (status and metrics) */

/* Every (state, count) row of sql into obj, whose keys were set to 0 beforehand: a state that has
 * no row stays 0, and one written by another writer (the sqlite3 shell) is counted too. */
static int counts_by_state(struct records *r, const char *sql, json_t *obj, struct sb_err *err)
{
	sqlite3_stmt *st cleanup_stmt = NULL;
	int rc;

	if (prepare(r, sql, &st, err) != 0)
		return -1;
	while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
		const char *state = col_text(st, 0);

		if (!state || json_object_set_new(obj, state, json_integer(sqlite3_column_int64(st, 1))) != 0)
			return oom_fail(err, "counting states (or a state that is not UTF-8 text)");
	}
	return rc == SQLITE_DONE ? 0 : db_fail(r, err, "counting states");
}

json_t *records_counts(struct records *r, struct sb_err *err)
{
	struct records *locked cleanup_unlock = records_lock(r);
	sqlite3_stmt *st cleanup_stmt = NULL;
	json_t *out cleanup_json = json_pack("{s:{s:i, s:i, s:i, s:i, s:i, s:i, s:i, s:i}, s:{s:i, s:i, s:i, s:i}, s:[]}",
					     "execs", "accepted", 0, "dispatched", 0, "exited", 0, "signaled", 0,
					     "timed_out", 0, "cancelled", 0, "uncertain", 0, "refused", 0, "sessions",
					     "active", 0, "deleting", 0, "deleted", 0, "reserved", 0,
					     "uncertain_sessions");
	json_t *list, *reserved;
	int64_t uncertain = 0;
	int rc;

	if (!out) {
		oom_fail(err, "counting");
		return NULL;
	}
	if (counts_by_state(r, "SELECT state, count(*) FROM execs GROUP BY state", json_object_get(out, "execs"),
			    err) != 0 ||
	    counts_by_state(r, "SELECT state, count(*) FROM sessions GROUP BY state", json_object_get(out, "sessions"),
			    err) != 0)
		return NULL;
	/* The uncertain execs someone still has to reconcile: not one an operator resolved (resolve.c),
	 * nor one of a deleted session (its workspace is gone). The bare e.id comes from the row of
	 * max(accepted_ms), the only min/max aggregate (SQLite's rule). */
	if (prepare(r, "SELECT e.session, count(*), e.id, max(e.accepted_ms) AS newest FROM execs e"
		       " JOIN sessions s ON s.id = e.session WHERE e.state = 'uncertain' AND s.state <> 'deleted'"
		       " AND NOT EXISTS (SELECT 1 FROM resolutions x WHERE x.exec_id = e.id)"
		       " GROUP BY e.session ORDER BY newest DESC", &st, err) != 0)
		return NULL;
	list = json_object_get(out, "uncertain_sessions");
	while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
		uncertain += sqlite3_column_int64(st, 1);
		if (json_array_size(list) < RECORDS_COUNTS_LIST_MAX &&
		    json_array_append_new(list, json_pack("{s:o, s:I, s:o}", "session", col_json_text(st, 0), "uncertain",
							  (json_int_t)sqlite3_column_int64(st, 1), "newest_exec",
							  col_json_text(st, 2))) != 0) {
			oom_fail(err, "listing uncertain execs");
			return NULL;
		}
	}
	if (rc != SQLITE_DONE) {
		db_fail(r, err, "counting uncertain execs");
		return NULL;
	}
	sqlite3_finalize(st);
	st = NULL;
	if (prepare(r, "SELECT id FROM sessions WHERE state = 'reserved' ORDER BY created_ms DESC, rowid DESC"
		       " LIMIT " STR(RECORDS_COUNTS_LIST_MAX), &st, err) != 0 ||
	    !(reserved = rows_json(r, st, SQLITE_OK, id_json, "listing reserved sessions", err)))
		return NULL;
	if (json_object_set_new(out, "reserved_sessions", reserved) != 0 ||
	    json_object_set_new(out, "uncertain_open", json_integer(uncertain)) != 0) {
		oom_fail(err, "counting");
		return NULL;
	}
	return steal_json(&out);
}

/* ---------------------------------------------------------------- pages of sessions (invariant 13) */

static bool is_session_state(const char *state)
{
	return strcmp(state, "active") == 0 || strcmp(state, "deleting") == 0 || strcmp(state, "deleted") == 0 ||
	       strcmp(state, "reserved") == 0;
}

static int sessions_query_check(const struct sessions_query *q, struct sb_err *err)
{
	if ((q->identity && check_arg("identity", q->identity, ID_MAX, err) != 0) ||
	    (q->before && check_arg("before (a session id)", q->before, ID_MAX, err) != 0))
		return -1;
	if (q->limit < 1 || q->limit > RECORDS_SESSIONS_LIMIT_MAX)
		return sb_fail(err, EINVAL, "records: limit must be from 1 to %u, not %u", RECORDS_SESSIONS_LIMIT_MAX,
			       q->limit);
	if (q->state && !is_session_state(q->state))
		return sb_fail(err, EINVAL, "records: a session's state is one of active, deleting, deleted, reserved, "
			       "not '%s'", q->state);
	return 0;
}

/* The `before` session's place in the order (created_ms, rowid). */
static int sessions_cursor(struct records *r, const char *before, int64_t *cursor_ms, int64_t *cursor_rowid,
			   struct sb_err *err)
{
	sqlite3_stmt *st cleanup_stmt = NULL;
	int rc = SQLITE_OK;

	if (prepare(r, "SELECT created_ms, rowid FROM sessions WHERE id = ?1", &st, err) != 0)
		return -1;
	bind_text(st, 1, before, &rc);
	rc = step(st, rc);
	if (rc == SQLITE_DONE) {
		sb_fail(err, 0, "records: no session %s to page before", before);
		return RECORDS_NOT_FOUND;
	}
	if (rc != SQLITE_ROW)
		return db_fail(r, err, "reading session %s", before);
	*cursor_ms = sqlite3_column_int64(st, 0);
	*cursor_rowid = sqlite3_column_int64(st, 1);
	return RECORDS_FOUND;
}

/* {"session", "identity", "state", "sandbox": runtime id or null, "generation", "created_ms",
 *  "last_exec": {"exec_id", "state", "accepted_ms", "finished_ms"} or null}. Every field is an id,
 * a state or a number (the runtime id at most 255 bytes), so a row is bounded by construction. */
static json_t *session_list_json(sqlite3_stmt *st)
{
	static const char *const keys[] = { "session", "identity", "state", "sandbox", "generation", "created_ms",
					    "last_exec" };
	static const char *const exec_keys[] = { "exec_id", "state", "accepted_ms", "finished_ms" };
	json_t *last = sqlite3_column_type(st, 6) == SQLITE_NULL ? json_null() :
		       json_row(exec_keys, (json_t *const[]){ col_json_text(st, 6), col_json_text(st, 7),
							       col_json_int(st, 8), col_json_int(st, 9) }, 4);
	json_t *values[] = { col_json_text(st, 0), col_json_text(st, 1), col_json_text(st, 2), col_json_text(st, 3),
			     col_json_int(st, 4), col_json_int(st, 5), last };

	return json_row(keys, values, sizeof values / sizeof values[0]);
}

int records_sessions_page(struct records *r, const struct sessions_query *q, json_t **out, struct sb_err *err)
{
	struct records *locked cleanup_unlock = records_lock(r);
	sqlite3_stmt *st cleanup_stmt = NULL;
	json_t *list cleanup_json = NULL, *last cleanup_json = NULL, *page;
	size_t budget = q->budget ? q->budget : RECORDS_PAGE_BYTES, used = 2; /* "[]" */
	int64_t cursor_ms = 0, cursor_rowid = 0;
	bool more = false;
	int brc = SQLITE_OK, rc, found;

	*out = NULL;
	if (budget < RECORDS_PAGE_MIN_BYTES)
		budget = RECORDS_PAGE_MIN_BYTES;
	if (sessions_query_check(q, err) != 0)
		return -1;
	if (q->before && (found = sessions_cursor(r, q->before, &cursor_ms, &cursor_rowid, err)) != RECORDS_FOUND)
		return found;
	/* Newest first; the row value compares (created_ms, rowid) as the ORDER BY does, so each
	 * session is on one page. The last exec is the session's newest by the records' own order. */
	if (prepare(r, "SELECT s.id, s.identity, s.state,"
		       " (SELECT b.runtime_id FROM sandboxes b WHERE b.session = s.id AND b.state <> 'gone'),"
		       " s.generation, s.created_ms, e.id, e.state, e.accepted_ms, e.finished_ms"
		       " FROM sessions s LEFT JOIN execs e ON e.rowid = (SELECT x.rowid FROM execs x"
		       " WHERE x.session = s.id ORDER BY x.accepted_ms DESC, x.rowid DESC LIMIT 1)"
		       " WHERE (?1 IS NULL OR s.identity = ?1)"
		       " AND (s.state = ?2 OR (?2 IS NULL AND (?3 OR s.state <> 'deleted')))"
		       " AND (?4 IS NULL OR (s.created_ms, s.rowid) < (?5, ?6))"
		       " ORDER BY s.created_ms DESC, s.rowid DESC LIMIT ?7", &st, err) != 0)
		return -1;
	bind_text(st, 1, q->identity, &brc);
	bind_text(st, 2, q->state, &brc);
	bind_int(st, 3, q->all, &brc);
	bind_text(st, 4, q->before, &brc);
	bind_int(st, 5, cursor_ms, &brc);
	bind_int(st, 6, cursor_rowid, &brc);
	bind_int(st, 7, (int64_t)q->limit + 1, &brc); /* one more than served says whether more remain */
	if (!(list = json_array()))
		return oom_fail(err, "listing sessions");
	while ((rc = step(st, brc)) == SQLITE_ROW) {
		size_t n = json_array_size(list), comma = n > 0;
		json_t *row;

		if (n == q->limit) {
			more = true;
			break;
		}
		if (!(row = session_list_json(st)))
			return oom_fail(err, "listing sessions");
		/* A row is a few KiB at most, far below any budget: the first always fits. */
		if (n > 0 && used + comma + json_size(row) > budget) {
			json_decref(row);
			more = true;
			break;
		}
		used += comma + json_size(row);
		json_decref(last);
		last = col_json_text(st, 0);
		if (json_array_append_new(list, row) != 0 || !last)
			return oom_fail(err, "listing sessions");
	}
	if (rc != SQLITE_ROW && rc != SQLITE_DONE)
		return db_fail(r, err, "listing sessions");
	page = json_pack("{s:O}", "sessions", list);
	if (!page || (more && json_object_set(page, "next_before", last) != 0)) {
		json_decref(page);
		return oom_fail(err, "listing sessions");
	}
	*out = page;
	return RECORDS_FOUND;
}
