/* The journal (see journal.h). A begin is a slot of .running overwritten in place, an end the
 * same slot's part of .ends, and the entry and receipt files an end stands for new files: none of
 * them synced (.boot says which boot they are from: a crash of the machine makes the journal one in
 * doubt, docs/reliability.md "Scoped to the boot"); each record carries the SHA-256 of its text, or
 * is whole JSON, so a torn one is told from a whole one. The settler thread gives a receipt's room
 * back after the result. An entry replaced (a running file closed) is written to a temporary name,
 * fsynced, renamed into place and the directory fsynced: the old entry or the new one, never half. */
#include "journal_internal.h"
#include "journal.h"
#include "clock.h"
#include "failpoint.h"
#include "fdio.h"
#include "json_text.h"
#include "log.h"
#include "random.h"
#include "thread.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <jansson.h>
#include <mbedtls/sha256.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <time.h>
#include <unistd.h>

#include "linux_calls.h" /* after the system headers: it fills in what musl lacks */

/* The settler: gives back the blocks each receipt's room reserved past its end (receipt.c
 * room_write), off the call's path (the result is out). Nothing is synced here: the end's files
 * hold for this boot (issue 32, docs/performance.md "Cut: the settler syncs nothing"). A slot is
 * reused once its room is given back, so the slot is the settler's queue. */
static void *settler(void *arg)
{
	struct journal *j = arg;
	char id[EXEC_ID_MAX + 1], name[NAME_MAX + 1];
	struct sb_err err;
	int i;

	pthread_mutex_lock(&j->lock);
	while (!j->settler_stop) {
		for (i = 0; i < 2; i++)
			if (j->slot[i].room_pending)
				break;
		if (i == 2) {
			pthread_cond_wait(&j->changed, &j->lock);
			continue;
		}
		snprintf(id, sizeof id, "%s", j->slot[i].exec_id);
		pthread_mutex_unlock(&j->lock);
		FAILPOINT("agent.journal.settling");
		if (entry_name(id, "", name, sizeof name, &err) == 0)
			receipt_room_release(j->receipts, name);
		pthread_mutex_lock(&j->lock);
		j->slot[i].room_pending = false;
		pthread_cond_broadcast(&j->changed);
	}
	j->settler_running = false;
	pthread_cond_broadcast(&j->changed);
	pthread_mutex_unlock(&j->lock);
	return NULL;
}

void journal_settle_wait(struct journal *j)
{
	pthread_mutex_lock(&j->lock);
	while (j->settler_running && (j->slot[0].room_pending || j->slot[1].room_pending))
		pthread_cond_wait(&j->changed, &j->lock);
	pthread_mutex_unlock(&j->lock);
}

/* ---- pruned entries kept for the next spares ----
 * On ext4 without a journal (this project's test machines' root filesystem) an inode allocation
 * skips every inode freed in the last 60-360 s, one inode-table lookup each, so a prune that
 * removed some 13 000 entries made each later create slower by up to ~2 ms of CPU, and at the cap
 * a prune comes about once a minute (docs/performance.md, "Cut: pruned entries kept for the next
 * spares"). So a prune renames an entry to .freed.<n> and empties it, and the next spare is made
 * from it: at the cap no inode is freed or allocated per call. A dot name: no entry's, never
 * read by a lookup or counted by the prune. */
#define FREED_PREFIX ".freed."

static void freed_name(uint64_t n, char out[32])
{
	snprintf(out, 32, FREED_PREFIX "%" PRIu64, n);
}

/* n from a name freed_name made; false for any other name. */
static bool freed_parse(const char *name, uint64_t *n)
{
	const char *digits = name + strlen(FREED_PREFIX);
	char *end;

	if (strncmp(name, FREED_PREFIX, strlen(FREED_PREFIX)) != 0 || digits[0] < '0' || digits[0] > '9' ||
	    (digits[0] == '0' && digits[1] != '\0') || strlen(digits) > 19)
		return false;
	*n = strtoull(digits, &end, 10);
	return *end == '\0';
}

/* An earlier life's kept entries: their range taken over when it is within the bound (a number
 * missing in it is skipped at its take), else removed, as unknown as an earlier life's spare.
 * Whatever bytes one still holds (a crash between its rename and its emptying) go at its take. */
static void freed_adopt(struct journal *j, DIR *dh, uint64_t lo, uint64_t hi, size_t count)
{
	struct dirent *d;
	uint64_t n;

	if (count == 0)
		return;
	if (hi - lo <= j->freed_max) {
		j->freed_lo = lo;
		j->freed_hi = hi;
		return;
	}
	rewinddir(dh);
	while ((d = readdir(dh)) != NULL)
		if (freed_parse(d->d_name, &n))
			unlinkat(dirfd(dh), d->d_name, 0);
}

int journal_open(struct journal *j, const struct privdir *dir, const struct privdir *receipts, struct sb_err *err)
{
	char boot[BOOT_ID_LEN + 1];

	/* Once, here: the boot every unsynced record of this agent's life belongs to. */
	if (journal_boot_id(boot, err) < 0)
		return -1;
	return journal_open_boot(j, dir, receipts, boot, err);
}

int journal_open_boot(struct journal *j, const struct privdir *dir, const struct privdir *receipts,
		      const char *boot, struct sb_err *err)
{
	char buf[2 * SLOT_BYTES];
	uint64_t kept, freed_lo = 0, freed_hi = 0;
	size_t freed_count = 0;
	struct dirent *d;
	DIR *dh;
	int fd;

	memset(j, 0, sizeof *j);
	j->freed_max = JOURNAL_FREED_MAX;
	snprintf(j->boot, sizeof j->boot, "%s", boot);
	j->dir = dir;
	j->receipts = receipts;
	j->slots_fd = j->ends_fd = -1;
	pthread_mutex_init(&j->lock, NULL);
	spare_file_init(&j->spare, ".spare.entry");
	pthread_cond_init(&j->changed, NULL);
	if (fixed_open(j, SLOTS_NAME, sizeof buf, &j->slots_fd, err) < 0 ||
	    fixed_open(j, ENDS_NAME, 2 * END_BYTES, &j->ends_fd, err) < 0 || boot_mark_take(j, err) < 0)
		return -1;
	if (pread(j->slots_fd, buf, sizeof buf, 0) != (ssize_t)sizeof buf)
		return sb_fail(err, EIO, "reading journal %s/%s", dir->path, SLOTS_NAME);
	for (int i = 0; i < 2; i++) {
		json_t *end;
		int rc;

		slot_decode(buf + i * SLOT_BYTES, &j->slot[i]);
		if (j->slot[i].seq == 0)
			continue;
		/* A durable end is the exec's outcome (it may have been reported): its files are made
		 * whole from it, never closed as uncertain. */
		end = end_load(j, i, &j->slot[i]);
		rc = end != NULL ? end_restore(j, &j->slot[i], end, err) : slot_close_lost(dir, &j->slot[i], err);
		json_decref(end);
		if (rc < 0)
			return -1;
	}
	/* fdopendir takes the descriptor over: give it a copy and rewind; the held one stays ours. */
	fd = fcntl(dir->fd, F_DUPFD_CLOEXEC, 0);
	if (fd < 0 || (dh = fdopendir(fd)) == NULL) {
		if (fd >= 0)
			close(fd);
		return sb_fail_errno(err, "reading journal %s", dir->path);
	}
	rewinddir(dh);
	while ((d = readdir(dh)) != NULL) {
		char id[256];
		size_t n = strlen(d->d_name);

		if (freed_parse(d->d_name, &kept)) {
			if (freed_count++ == 0 || kept < freed_lo)
				freed_lo = kept;
			if (kept >= freed_hi)
				freed_hi = kept + 1;
			continue;
		}
		if (n <= 5 || n >= sizeof id || strcmp(d->d_name + n - 5, ".json") != 0)
			continue;
		memcpy(id, d->d_name, n - 5);
		id[n - 5] = '\0';
		entry_close_lost(dir, id);
	}
	freed_adopt(j, dh, freed_lo, freed_hi, freed_count);
	closedir(dh);
	/* Unknown until counted: the first finish reads the directory once (journal_prune). */
	j->bytes = (uint64_t)JOURNAL_MAX_BYTES + 1;
	j->settler_running = true;
	if (sb_thread_detached(settler, j, err) < 0) {
		j->settler_running = false;
		return -1;
	}
	return 0;
}

void journal_close(struct journal *j)
{
	struct sb_err err;
	char name[NAME_MAX + 1];

	pthread_mutex_lock(&j->lock);
	j->settler_stop = true;
	pthread_cond_broadcast(&j->changed);
	while (j->settler_running || j->pruning)
		pthread_cond_wait(&j->changed, &j->lock);
	pthread_mutex_unlock(&j->lock);
	for (int i = 0; i < 2; i++)
		if (j->slot[i].room_pending && entry_name(j->slot[i].exec_id, "", name, sizeof name, &err) == 0)
			receipt_room_release(j->receipts, name);
	if (j->slots_fd >= 0)
		close(j->slots_fd);
	if (j->ends_fd >= 0)
		close(j->ends_fd);
	j->slots_fd = j->ends_fd = -1;
	spare_file_close(&j->spare);
	pthread_cond_destroy(&j->changed);
	pthread_mutex_destroy(&j->lock);
}

/* The slot a begin may overwrite: one whose exec has ended (its end and its entry file written)
 * and whose receipt's room the settler has given back, the older of two; a slot the settler is on
 * is waited for (lock held). -1 when both are open (a finish failed, or two execs run): the begin
 * then writes a file of its own. */
static int slot_free(struct journal *j)
{
	int best;

	for (;;) {
		bool wait = false;

		best = -1;
		for (int i = 0; i < 2; i++) {
			const struct journal_slot *sl = &j->slot[i];

			if (sl->open)
				continue;
			if (sl->room_pending)
				wait = wait || j->settler_running;
			else if (best < 0 || sl->seq < j->slot[best].seq)
				best = i;
		}
		if (best >= 0 || !wait)
			return best;
		pthread_cond_wait(&j->changed, &j->lock);
	}
}

static bool slot_holds(const struct journal *j, const char *exec_id, bool open_only)
{
	for (int i = 0; i < 2; i++)
		if (j->slot[i].seq != 0 && (j->slot[i].open || !open_only) && strcmp(j->slot[i].exec_id, exec_id) == 0)
			return true;
	return false;
}

/* A slot needs no space, but the exec's end does (its receipt and finished entry: new files). An
 * exec whose end could not be written would run and then be uncertain; it is refused before it
 * runs instead, as when the begin itself was a new file (docs/reliability.md, a full private
 * directory). Room for three blocks and two inodes: what the old begin, the receipt and the entry
 * took at the least. Root may use the blocks reserved for it. */
static int room_check(const struct journal *j, const char *exec_id, struct sb_err *err)
{
	struct statvfs v;
	unsigned long long blocks;

	if (fstatvfs(j->dir->fd, &v) < 0)
		return sb_fail_errno(err, "journal entry for exec '%s': inspecting %s", exec_id, j->dir->path);
	blocks = geteuid() == 0 ? v.f_bfree : v.f_bavail;
	if (blocks * v.f_frsize < 3ull * v.f_bsize || (v.f_files != 0 && v.f_favail < 2))
		return sb_fail(err, ENOSPC, "journal entry for exec '%s': writing %s: no room for the exec's end", exec_id,
			       j->dir->path);
	return 0;
}

int journal_begin(struct journal *j, const char *exec_id, uint64_t generation, struct sb_err *err)
{
	struct journal_slot next = { .generation = generation, .open = true };
	char buf[SLOT_BYTES];
	json_t *obj;
	int i, rc;

	if (!exec_id_valid(exec_id))
		return sb_invalid(err, "journal: invalid exec id");
	/* An id whose begin the machine's crash lost may be this one: it could run twice. */
	if (j->doubt)
		return sb_fail(err, EIO, "exec '%s': %s; a new sandbox must serve", exec_id, j->doubt_why);
	pthread_mutex_lock(&j->lock);
	if (entry_exists(j->dir, exec_id) || slot_holds(j, exec_id, false)) {
		pthread_mutex_unlock(&j->lock);
		return sb_fail(err, EEXIST, "exec '%s' was accepted before; exec ids are never reused", exec_id);
	}
	i = slot_free(j);
	pthread_mutex_unlock(&j->lock);
	if (room_check(j, exec_id, err) < 0)
		return -1;
	if (i < 0) {
		/* Both slots hold execs whose end is not on disk: neither may be overwritten. */
		obj = json_pack("{s:s, s:I, s:s, s:I}", "exec_id", exec_id, "generation", (json_int_t)generation,
				"state", "running", "accepted_at_ms", (json_int_t)clock_real_ms());
		rc = obj ? entry_store(j->dir, exec_id, obj, err) : sb_fail(err, ENOMEM, "building journal entry");
		json_decref(obj);
		return rc;
	}
	next.seq = (j->slot[0].seq > j->slot[1].seq ? j->slot[0].seq : j->slot[1].seq) + 1;
	snprintf(next.exec_id, sizeof next.exec_id, "%s", exec_id);
	if (slot_encode(&next, buf, err) < 0)
		return -1;
	/* In place, in a file whose size never changes, and not synced (issue 32): the page cache
	 * keeps it through any death of the agent; a crash of the machine may lose it, and then the
	 * next open finds .boot naming another boot and answers every missing record uncertain. */
	if (pwrite(j->slots_fd, buf, sizeof buf, (off_t)i * SLOT_BYTES) != (ssize_t)sizeof buf)
		return sb_fail_errno(err, "journal entry for exec '%s': writing %s/%s", exec_id, j->dir->path,
				     SLOTS_NAME);
	pthread_mutex_lock(&j->lock);
	j->slot[i] = next;
	pthread_mutex_unlock(&j->lock);
	return 0;
}

struct entry_stat {
	char name[256];
	struct timespec mtime; /* to the nanosecond: a second holds hundreds of calls */
	off_t size;
};

static int by_mtime(const void *a, const void *b)
{
	const struct entry_stat *x = a, *y = b;

	if (x->mtime.tv_sec != y->mtime.tv_sec)
		return (x->mtime.tv_sec > y->mtime.tv_sec) - (x->mtime.tv_sec < y->mtime.tv_sec);
	return (x->mtime.tv_nsec > y->mtime.tv_nsec) - (x->mtime.tv_nsec < y->mtime.tv_nsec);
}

static void bytes_add(struct journal *j, size_t len)
{
	pthread_mutex_lock(&j->lock);
	j->bytes += len;
	pthread_mutex_unlock(&j->lock);
}

/* A pruned entry renamed to the next .freed.<n> and emptied (its blocks given back now, as a
 * removal would: the cap counts bytes), offered to journal_spare_make only once empty. Renamed
 * before it is emptied, so a lookup never reads it emptied under its own name (entry_load checks
 * the name still holds what it read). false when the bound is reached or the rename failed: the
 * caller removes it. Only a prune adds (one at a time: journal_prune_start), a spare's make takes. */
static bool entry_keep_freed(struct journal *j, int dfd, const char *name)
{
	char freed[32];
	uint64_t n;
	bool full;
	int fd;

	pthread_mutex_lock(&j->lock);
	n = j->freed_hi;
	full = n - j->freed_lo >= j->freed_max;
	pthread_mutex_unlock(&j->lock);
	freed_name(n, freed);
	if (full || renameat2(dfd, name, dfd, freed, RENAME_NOREPLACE) < 0)
		return false;
	fd = openat(dfd, freed, O_WRONLY | O_TRUNC | O_NOFOLLOW | O_CLOEXEC);
	if (fd >= 0)
		close(fd); /* else its take empties it */
	pthread_mutex_lock(&j->lock);
	j->freed_hi = n + 1;
	pthread_mutex_unlock(&j->lock);
	return true;
}

/* Keep the journal under JOURNAL_MAX_BYTES by removing the oldest entries other than keep and
 * those of the execs in the slots: a slot whose entry was gone would read, after a restart, as an
 * exec that never finished. Down to JOURNAL_PRUNE_TO, a quarter below the cap: the next scan of
 * the directory is then 16 MiB of entries away, not on every call once the cap is reached (a
 * session of small calls has some 50 000 entries there, and reading their sizes and times took
 * 0.17 s on the machine of docs/performance.md: each call's, past the cap). */
static void journal_prune(struct journal *j, const char *keep)
{
	const struct privdir *dir = j->dir;
	struct entry_stat *all = NULL;
	size_t n = 0, cap = 0;
	off_t total = 0;
	struct dirent *d;
	uint64_t before;
	int fd;
	DIR *dh;

	FAILPOINT("agent.journal.pruning");
	pthread_mutex_lock(&j->lock);
	before = j->bytes;
	pthread_mutex_unlock(&j->lock);
	fd = fcntl(dir->fd, F_DUPFD_CLOEXEC, 0);
	if (fd < 0 || (dh = fdopendir(fd)) == NULL) {
		if (fd >= 0)
			close(fd);
		return;
	}
	rewinddir(dh);
	while ((d = readdir(dh)) != NULL) {
		struct stat st;

		if (d->d_name[0] == '.' || strlen(d->d_name) >= sizeof all->name ||
		    fstatat(dirfd(dh), d->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0)
			continue;
		if (n == cap) {
			struct entry_stat *grown = realloc(all, (cap = cap ? 2 * cap : 64) * sizeof *all);

			if (grown == NULL)
				break;
			all = grown;
		}
		snprintf(all[n].name, sizeof all[n].name, "%s", d->d_name);
		all[n].mtime = st.st_mtim;
		all[n].size = st.st_size;
		total += st.st_size;
		n++;
	}
	qsort(all, n, sizeof *all, by_mtime);
	for (size_t i = 0; i < n && total > (off_t)JOURNAL_PRUNE_TO; i++) {
		char id[sizeof all->name];
		size_t n_id = strlen(all[i].name);
		bool held;

		if (strncmp(all[i].name, keep, strlen(keep)) == 0)
			continue;
		/* "<id>.json": the slots are asked by id. */
		snprintf(id, sizeof id, "%.*s", n_id > 5 ? (int)(n_id - 5) : (int)n_id, all[i].name);
		pthread_mutex_lock(&j->lock);
		held = slot_holds(j, id, false);
		pthread_mutex_unlock(&j->lock);
		if (held)
			continue;
		if (entry_keep_freed(j, dirfd(dh), all[i].name) || unlinkat(dirfd(dh), all[i].name, 0) == 0)
			total -= all[i].size;
	}
	closedir(dh);
	free(all);
	/* What the entries the scan counted still hold, plus what was written since it began (the
	 * execs that ran meanwhile; some the scan may have counted too): never under the real total. */
	pthread_mutex_lock(&j->lock);
	j->bytes = (total > 0 ? (uint64_t)total : 0) + (j->bytes - before);
	pthread_mutex_unlock(&j->lock);
}

static void *pruner(void *arg)
{
	struct journal *j = arg;

	journal_prune(j, j->prune_keep);
	pthread_mutex_lock(&j->lock);
	j->pruning = false;
	pthread_cond_broadcast(&j->changed);
	pthread_mutex_unlock(&j->lock);
	return NULL;
}

void journal_prune_start(struct journal *j, const char *keep)
{
	struct sb_err err;
	bool due;

	/* Counted up by every write (a replaced entry twice: never under the real total), so the
	 * directory is only read when the cap may have been passed, not after every call. */
	pthread_mutex_lock(&j->lock);
	due = j->bytes > JOURNAL_MAX_BYTES && !j->pruning && !j->settler_stop;
	if (due) {
		j->pruning = true;
		snprintf(j->prune_keep, sizeof j->prune_keep, "%s", keep);
	}
	pthread_mutex_unlock(&j->lock);
	if (due && sb_thread_detached(pruner, j, &err) < 0) {
		sb_warn("journal: %s (pruning on this thread)", err.msg);
		pruner(j);
	}
}

void journal_prune_wait(struct journal *j)
{
	pthread_mutex_lock(&j->lock);
	while (j->pruning)
		pthread_cond_wait(&j->changed, &j->lock);
	pthread_mutex_unlock(&j->lock);
}

/* The entry's text is built around the result's own text, not from a parse of it: the result is
 * the JSON object this process just serialised (serve_conn.c exec_run), up to 2 MiB of it, and a parse,
 * a tree and a second dump of that would hold three more copies of every output byte at once
 * (docs/performance.md, "Memory"). Only the small members go through jansson. */
static char *entry_finished_text(const char *exec_id, uint64_t generation, const char *result_json,
				 const char *receipt_text, size_t *len)
{
	json_t *head = json_pack("{s:s, s:I, s:s, s:s?}", "exec_id", exec_id, "generation", (json_int_t)generation,
				 "state", "finished", "receipt", receipt_text);
	size_t head_len = 0, result_len = strlen(result_json);
	char *head_text = head ? sb_json_dumps(head, JSON_COMPACT, &head_len) : NULL;
	char *text = NULL;

	json_decref(head);
	/* head_text is "{...}": the result goes in before its closing brace. */
	if (head_len >= 2 && head_text[head_len - 1] == '}' && (text = malloc(head_len + result_len + 12)) != NULL) {
		memcpy(text, head_text, head_len - 1);
		*len = head_len - 1;
		memcpy(text + *len, ",\"result\":", 10);
		*len += 10;
		memcpy(text + *len, result_json, result_len);
		*len += result_len;
		text[(*len)++] = '}';
		text[*len] = '\0';
	}
	free(head_text);
	return text;
}

int journal_spare_make(struct journal *j, struct sb_err *err)
{
	char from[32];
	uint64_t n;
	bool kept;
	int rc;

	pthread_mutex_lock(&j->lock);
	n = j->freed_lo;
	kept = n < j->freed_hi;
	pthread_mutex_unlock(&j->lock);
	if (kept) {
		freed_name(n, from);
		rc = spare_file_adopt(&j->spare, j->dir, from, err);
		if (rc == 1)
			return 0; /* a spare already: this one waits for the next make */
		/* Taken, or gone (a number an earlier life skipped), or refused: the next is next. */
		pthread_mutex_lock(&j->lock);
		if (j->freed_lo == n)
			j->freed_lo = n + 1;
		pthread_mutex_unlock(&j->lock);
		if (rc == 0)
			return 0;
		if (err->errnum != ENOENT) {
			sb_warn("journal: %s (removed; the spare is made anew)", err->msg);
			unlinkat(j->dir->fd, from, 0);
		}
	}
	return spare_file_make(&j->spare, j->dir, 0, err);
}

int journal_end(struct journal *j, const char *exec_id, uint64_t generation, const char *result_json,
		const char *receipt_text, struct sb_err *err)
{
	char name[NAME_MAX + 1], *text, *buf = NULL;
	size_t len = 0, buf_len = 0;
	struct journal_slot sl = { 0 };
	int i, fd;

	if (result_json[0] != '{')
		return sb_invalid(err, "journal: the result of exec '%s' is not a JSON object", exec_id);
	if (entry_name(exec_id, "", name, sizeof name, err) < 0)
		return -1;
	pthread_mutex_lock(&j->lock);
	for (i = 0; i < 2; i++)
		if (j->slot[i].open && strcmp(j->slot[i].exec_id, exec_id) == 0)
			break;
	if (i < 2)
		sl = j->slot[i];
	pthread_mutex_unlock(&j->lock);
	/* A begin that fell back to a file of its own, or an end too big for its slot: the files'
	 * own syncs (journal_finish_write). */
	if (i == 2 || strlen(result_json) + (receipt_text ? strlen(receipt_text) : 0) > END_BYTES)
		return 0;
	text = entry_finished_text(exec_id, generation, result_json, receipt_text, &len);
	if (text == NULL)
		return sb_fail(err, ENOMEM, "building journal entry");
	if (end_encode(sl.seq, text, len, &buf, &buf_len) < 0) {
		free(text);
		return 0;
	}
	/* In place, in a file whose size never changes, unsynced like the begin (.boot covers the
	 * machine's crash). A write that failed leaves an end the files' own path outranks
	 * (end_restore keeps a whole entry). */
	ssize_t wrote = pwrite(j->ends_fd, buf, buf_len, (off_t)i * END_BYTES);

	FAILPOINT("agent.journal.end_written");
	if (wrote != (ssize_t)buf_len) {
		sb_warn("journal: exec '%s': writing its end in %s/%s: %s", exec_id, j->dir->path, ENDS_NAME,
			strerror(errno));
		free(buf);
		free(text);
		return 0;
	}
	free(buf);
	FAILPOINT("agent.journal.end_synced");
	/* Kept now (this boot). The file is for the readers of the running agent (a Query, the
	 * prune), never synced either. Until it is written the slot stays open: a Query says running. */
	bytes_add(j, len);
	/* Through the spare when there is one; else (or it failed) a new file, which fails the same
	 * way on a name that exists. */
	fd = spare_file_take(&j->spare, j->dir, name, text, len);
	if (fd < 0)
		fd = fd_file_write_new(j->dir->fd, j->dir->path, name, 0600, text, len, err);
	free(text);
	if (fd < 0) {
		/* The end holds it: a restart writes the file from it. The slot stays held. */
		sb_err_prefix(err, "journal entry for exec '%s'", exec_id);
		sb_error("%s (kept in its slot's end)", err->msg);
		return 1;
	}
	close(fd);
	pthread_mutex_lock(&j->lock);
	j->slot[i].open = false;
	j->slot[i].room_pending = receipt_text != NULL && j->receipts != NULL;
	pthread_cond_broadcast(&j->changed);
	pthread_mutex_unlock(&j->lock);
	return 1;
}

int journal_finish_write(struct journal *j, const char *exec_id, uint64_t generation, const char *result_json,
			 const char *receipt_text, struct journal_pending *p, struct sb_err *err)
{
	char name[NAME_MAX + 1];
	size_t len = 0;
	char *text;
	int rc;

	p->fd = -1;
	p->text = NULL;
	/* The cheap half of what a parse checked: an object, not some other value or nothing. */
	if (result_json[0] != '{')
		return sb_invalid(err, "journal: the result of exec '%s' is not a JSON object", exec_id);
	if (strlen(result_json) + (receipt_text ? strlen(receipt_text) : 0) > ENTRY_MAX_BYTES)
		return sb_fail(err, EFBIG, "journal: entry for exec '%s' is over %u bytes", exec_id, ENTRY_MAX_BYTES);
	if (entry_name(exec_id, "", name, sizeof name, err) < 0)
		return -1;
	text = entry_finished_text(exec_id, generation, result_json, receipt_text, &len);
	if (text == NULL)
		return sb_fail(err, ENOMEM, "building journal entry");
	bytes_add(j, len);
	/* A begin in a slot left no file: the entry is new, and a crash that tears it leaves the
	 * slot, which a restart reads as "may have run". A begin that fell back to a file of its own
	 * (both slots open) is replaced whole, durably, by journal_finish_sync. */
	if (entry_exists(j->dir, exec_id)) {
		p->text = text;
		p->len = len;
		return 0;
	}
	p->fd = fd_file_write_new(j->dir->fd, j->dir->path, name, 0600, text, len, err);
	rc = p->fd < 0 ? -1 : 0;
	if (rc < 0)
		sb_err_prefix(err, "journal entry for exec '%s'", exec_id);
	free(text);
	return rc;
}

void journal_pending_drop(struct journal_pending *p)
{
	if (p->fd >= 0)
		close(p->fd);
	free(p->text);
	p->fd = -1;
	p->text = NULL;
}

int journal_finish_sync(struct journal *j, const char *exec_id, struct journal_pending *p, struct sb_err *err)
{
	int rc = 0;

	if (p->text != NULL) {
		rc = entry_write(j->dir, exec_id, p->text, p->len, err);
		free(p->text);
		p->text = NULL;
	} else if (p->fd >= 0) {
		if (fsync(p->fd) < 0)
			rc = sb_fail_errno(err, "journal entry for exec '%s': syncing", exec_id);
		if (close(p->fd) < 0 && rc == 0)
			rc = sb_fail_errno(err, "journal entry for exec '%s': closing", exec_id);
		p->fd = -1;
		if (rc == 0 && fsync(j->dir->fd) < 0)
			rc = sb_fail_errno(err, "journal entry for exec '%s': syncing directory %s", exec_id, j->dir->path);
	}
	if (rc < 0)
		return -1; /* the slot stays open: a restart still reads the exec as begun */
	pthread_mutex_lock(&j->lock);
	for (int i = 0; i < 2; i++)
		if (j->slot[i].seq != 0 && strcmp(j->slot[i].exec_id, exec_id) == 0)
			j->slot[i].open = false;
	pthread_mutex_unlock(&j->lock);
	return 0;
}

int journal_finish(struct journal *j, const char *exec_id, uint64_t generation, const char *result_json,
		   const char *receipt_text, struct sb_err *err)
{
	struct journal_pending p;

	if (journal_finish_write(j, exec_id, generation, result_json, receipt_text, &p, err) < 0)
		return -1;
	return journal_finish_sync(j, exec_id, &p, err);
}

int journal_lookup(struct journal *j, const char *exec_id, struct journal_entry *out, struct sb_err *err)
{
	json_t *obj;
	const char *state;

	memset(out, 0, sizeof *out);
	sb_err_clear(err);
	/* An open slot wins over the file: the finished entry exists before it is durable (it is
	 * written, then synced with the receipt), and nothing may be reported before that. The slot
	 * is closed only once both are durable (journal_finish_sync). */
	pthread_mutex_lock(&j->lock);
	for (int i = 0; i < 2; i++)
		if (j->slot[i].open && strcmp(j->slot[i].exec_id, exec_id) == 0) {
			out->state = JOURNAL_RUNNING;
			out->generation = j->slot[i].generation;
		}
	pthread_mutex_unlock(&j->lock);
	if (out->state == JOURNAL_RUNNING)
		return 0;
	obj = entry_load(j->dir, exec_id, err);
	if (obj == NULL && j->doubt && (err->msg[0] == '\0' || err->errnum == EIO)) {
		/* No entry, or a damaged one (nothing syncs an entry, issue 32: the machine's crash may
		 * have torn it, or left another exec's bytes under its name): the record may be lost.
		 * Never "unknown", and never an error a reader could not settle. */
		if (err->msg[0] != '\0')
			sb_warn("journal: %s; in doubt, answered uncertain", err->msg);
		sb_err_clear(err);
		out->state = JOURNAL_IN_DOUBT;
		return 0;
	}
	if (obj == NULL)
		return err->msg[0] ? -1 : 0;
	memset(out, 0, sizeof *out);
	state = json_string_value(json_object_get(obj, "state"));
	out->generation = (uint64_t)json_integer_value(json_object_get(obj, "generation"));
	out->state = state && strcmp(state, "finished") == 0 ? JOURNAL_FINISHED : JOURNAL_RUNNING;
	if (out->state == JOURNAL_FINISHED) {
		const char *receipt = json_string_value(json_object_get(obj, "receipt"));

		out->result_json = json_dumps(json_object_get(obj, "result"), JSON_COMPACT);
		out->receipt_text = receipt ? strdup(receipt) : NULL;
	}
	json_decref(obj);
	return 0;
}

void journal_entry_free(struct journal_entry *e)
{
	free(e->result_json);
	free(e->receipt_text);
	e->result_json = e->receipt_text = NULL;
}
