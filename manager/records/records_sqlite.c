/* The SQLite store (the embedded default, see records.h): opening its one file (the file's mode,
 * WAL, the connection's settings), closing it, and its statements for records.c. Must never open
 * a file through a symbolic link, nor leave the file or its sidecars readable by others. */
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
#include "clock.h"
#include "fdio.h"
#include "log.h"
#include "records_internal.h"

#define BUSY_TIMEOUT_MS 5000   /* another process (a second manager, the sqlite3 shell) holding the lock */
#define WAL_RETRY_MS 10         /* wal_enable: between two tries of the switch */
#define CHECKPOINT_PAGES 1000  /* SQLite's own auto-checkpoint threshold, kept: see checkpointer_start */

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
	struct stmt *st cleanup_stmt = NULL;
	const char *mode;
	int64_t deadline;

	/* The pragma answers the mode now in force: a file system without shared memory stays put. */
	if (prepare(r, "PRAGMA journal_mode = WAL", &st, err) != 0)
		return -1;
	/* Two connections switching one new file at once: each reads it, then wants to write, and SQLite
	 * answers one of them SQLITE_BUSY at once (its busy handler not called: waiting would deadlock
	 * the two). The other finishes the switch; this one asks again, within the busy timeout. The
	 * bound is the clock, not a count of tries: against a lock another process keeps, each try
	 * waits the whole busy timeout in the handler first. */
	deadline = clock_deadline_after(BUSY_TIMEOUT_MS);
	while (step(st, DB_OK) != DB_ROW) {
		if (sqlite3_errcode(r->db) != SQLITE_BUSY || clock_remaining_ms(deadline) == 0)
			return db_fail(r, err, "switching %s to WAL", path);
		sqlite3_reset(st->sq);
		sqlite3_sleep(WAL_RETRY_MS);
	}
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
	if (query_int(r, "PRAGMA foreign_keys", &v, err) != 0)
		return -1;
	if (v != 1)
		return sb_fail(err, 0, "records: this SQLite does not enforce foreign keys");
	return 0;
}

/* ---------------------------------------------------------------- the WAL's checkpoint, off the calls' path */

/* SQLite's default checkpoint runs inside the commit that takes the WAL past 1000 pages: that call
 * paid the checkpoint's syncs of the WAL and the database (2-11 ms measured, once in about 65 warm
 * calls: the call's `record` step). Here a commit only notes that a checkpoint is due
 * (sqlite3_wal_hook, under the commit's own lock), and a thread with a connection of its own runs
 * it: PASSIVE, so it never waits for nor blocks a writer; what it cannot copy yet is copied at the
 * next one. The threshold is SQLite's, so what a power loss can take (the commits since the last
 * checkpoint's sync: db_configure) is bounded as before; a kill -9 loses nothing, as before. */
struct checkpointer {
	pthread_t thread;
	pthread_mutex_t lock;
	pthread_cond_t wake;
	bool due, stop;
	sqlite3 *db;         /* the checkpointer's own connection: never the calls' */
	unsigned long runs;  /* checkpoints that ran through (records_sqlite_checkpoints) */
};

static int wal_committed(void *arg, sqlite3 *db, const char *name, int pages)
{
	struct checkpointer *ck = arg;

	(void)db;
	(void)name;
	if (pages >= CHECKPOINT_PAGES) {
		pthread_mutex_lock(&ck->lock);
		ck->due = true;
		pthread_cond_signal(&ck->wake);
		pthread_mutex_unlock(&ck->lock);
	}
	return SQLITE_OK;
}

static void *checkpointer_main(void *arg)
{
	struct checkpointer *ck = arg;

	pthread_mutex_lock(&ck->lock);
	for (;;) {
		int rc;

		while (!ck->due && !ck->stop)
			pthread_cond_wait(&ck->wake, &ck->lock);
		if (ck->stop)
			break;
		ck->due = false;
		pthread_mutex_unlock(&ck->lock);
		rc = sqlite3_wal_checkpoint_v2(ck->db, NULL, SQLITE_CHECKPOINT_PASSIVE, NULL, NULL);
		/* Busy: another checkpoint (another process) runs; the next commit asks again. */
		if (rc != SQLITE_OK && rc != SQLITE_BUSY)
			sb_warn("records: checkpointing the WAL: %s (the next commit tries again)", sqlite3_errmsg(ck->db));
		pthread_mutex_lock(&ck->lock);
		if (rc == SQLITE_OK)
			ck->runs++;
	}
	pthread_mutex_unlock(&ck->lock);
	return NULL;
}

static void checkpointer_free(struct checkpointer *ck)
{
	sqlite3_close_v2(ck->db);
	pthread_cond_destroy(&ck->wake);
	pthread_mutex_destroy(&ck->lock);
	free(ck);
}

/* The calls' connection stops checkpointing only once the thread runs: if it cannot start,
 * SQLite's own checkpoint in the commit stays, as before (slower, never unsafe). */
static void checkpointer_start(struct records *r, const char *path)
{
	struct checkpointer *ck = calloc(1, sizeof *ck);

	if (ck == NULL)
		return;
	if (pthread_mutex_init(&ck->lock, NULL) != 0) {
		free(ck);
		return;
	}
	if (pthread_cond_init(&ck->wake, NULL) != 0) {
		pthread_mutex_destroy(&ck->lock);
		free(ck);
		return;
	}
	if (sqlite3_open_v2(path, &ck->db, SQLITE_OPEN_FULLMUTEX | SQLITE_OPEN_READWRITE | SQLITE_OPEN_NOFOLLOW,
			    NULL) != SQLITE_OK ||
	    sqlite3_busy_timeout(ck->db, BUSY_TIMEOUT_MS) != SQLITE_OK ||
	    /* a read: the connection learns the file is in WAL mode (else it checkpoints nothing) */
	    sqlite3_exec(ck->db, "SELECT count(*) FROM sqlite_master", NULL, NULL, NULL) != SQLITE_OK ||
	    pthread_create(&ck->thread, NULL, checkpointer_main, ck) != 0) {
		sb_warn("records: no checkpoint thread for %s; commits checkpoint the WAL themselves", path);
		checkpointer_free(ck);
		return;
	}
	r->checkpointer = ck;
	sqlite3_wal_hook(r->db, wal_committed, ck); /* replaces the auto-checkpoint: wal_autocheckpoint reads 0 */
}

static void checkpointer_stop(struct records *r)
{
	struct checkpointer *ck = r->checkpointer;

	if (ck == NULL)
		return;
	sqlite3_wal_hook(r->db, NULL, NULL);
	pthread_mutex_lock(&ck->lock);
	ck->stop = true;
	pthread_cond_signal(&ck->wake);
	pthread_mutex_unlock(&ck->lock);
	pthread_join(ck->thread, NULL);
	checkpointer_free(ck); /* not the last connection: its close leaves the WAL to the calls' one */
	r->checkpointer = NULL;
}

unsigned long records_sqlite_checkpoints(struct records *r)
{
	unsigned long n = 0;

	if (r->checkpointer != NULL) {
		pthread_mutex_lock(&r->checkpointer->lock);
		n = r->checkpointer->runs;
		pthread_mutex_unlock(&r->checkpointer->lock);
	}
	return n;
}

/* ---------------------------------------------------------------- opening and closing */

int sqlite_open(struct records *r, const char *path, struct sb_err *err)
{
	if (check_arg("database path", path, PATH_MAX - 8, err) != 0 || db_file_prepare(path, err) != 0)
		return -1;
	copy_text(r->name, sizeof r->name, path);
	/* FULLMUTEX: SQLite's own locking too, though every call here also holds r->lock.
	 * NOFOLLOW: the file was just checked not to be a symbolic link; keep it so.
	 * Close-on-exec: SQLite's unix VFS opens the file, -wal and -shm with O_CLOEXEC (test_records
	 * checks /proc/self/fd), so a sandbox runtime started by the manager inherits none of them. */
	if (sqlite3_open_v2(path, &r->db, SQLITE_OPEN_FULLMUTEX | SQLITE_OPEN_CREATE | SQLITE_OPEN_READWRITE |
				SQLITE_OPEN_NOFOLLOW, NULL) != SQLITE_OK) {
		if (r->db)
			return sb_fail(err, sqlite3_system_errno(r->db), "records: opening %s: %s", path,
				       sqlite3_errmsg(r->db));
		return oom_fail(err, "opening the records");
	}
	if (db_configure(r, path, err) != 0 || schema_ensure(r, path, err) != 0)
		return -1;
	checkpointer_start(r, path);
	return 0;
}

/* Every statement is released by the call that used it and the kept ones are finalized before
 * (records_close), so the close itself cannot be busy; the last connection's close checkpoints
 * the WAL into the database file. */
void sqlite_close(struct records *r)
{
	checkpointer_stop(r);
	sqlite3_close_v2(r->db);
	r->db = NULL;
}

/* ---------------------------------------------------------------- statements */

int sqlite_stmt_prepare(struct stmt *st, struct sb_err *err)
{
	if (sqlite3_prepare_v3(st->r->db, st->sql, -1, SQLITE_PREPARE_PERSISTENT, &st->sq, NULL) != SQLITE_OK)
		return db_fail(st->r, err, "preparing \"%.60s...\"", st->sql);
	return 0;
}

/* Reset ends its read or write of the file; the next caller binds its own values. */
void sqlite_stmt_reset(struct stmt *st)
{
	sqlite3_reset(st->sq);
	sqlite3_clear_bindings(st->sq);
}

void sqlite_stmt_free(struct stmt *st)
{
	sqlite3_finalize(st->sq);
	st->sq = NULL;
}
