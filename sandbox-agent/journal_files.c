/* The journal (see journal.h). A begin is a slot of .running overwritten in place and
 * fdatasynced, an end the same slot's part of .ends; each carries the SHA-256 of its text, so a torn
 * one is told from a whole one. The entry files an end stands for are new files, synced by the
 * settler thread; an entry replaced (a running file closed) is written to a temporary name,
 * fsynced, renamed into place and the directory fsynced: the old entry or the new one, never half. */
#include "journal.h"
#include "clock.h"
#include "failpoint.h"
#include "fdio.h"
#include "log.h"
#include "random.h"
#include "thread.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
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

#define ENTRY_MAX_BYTES (JOURNAL_MAX_BYTES / 2)
#define SLOTS_NAME ".running" /* a dot: never an exec id's entry, never pruned */
#define SLOT_BYTES 512
#define ENDS_NAME ".ends"
#define END_BYTES (64u * 1024u) /* the larger ends (big outputs) take the files' own syncs */

static int entry_name(const char *exec_id, const char *suffix, char *out, size_t len, struct sb_err *err)
{
	if ((size_t)snprintf(out, len, "%s.json%s", exec_id, suffix) >= len)
		return sb_fail(err, ENAMETOOLONG, "journal name for exec '%s' is too long", exec_id);
	return 0;
}

/* Everything goes through the journal's descriptor, opened before any command ran (R1). */
static int entry_write(const struct privdir *dir, const char *exec_id, const char *text, size_t len,
		       struct sb_err *err)
{
	char tmp[NAME_MAX + 1], final[NAME_MAX + 1];

	if (entry_name(exec_id, ".tmp", tmp, sizeof tmp, err) < 0 || entry_name(exec_id, "", final, sizeof final, err) < 0)
		return -1;
	/* common/fdio.c: the temporary written whole and fsynced, renamed, the directory fsynced. */
	if (fd_file_replace(dir->fd, dir->path, final, tmp, 0600, text, len, err) < 0) {
		sb_err_prefix(err, "journal entry for exec '%s'", exec_id);
		return -1;
	}
	return 0;
}

static int entry_store(const struct privdir *dir, const char *exec_id, json_t *obj, struct sb_err *err)
{
	char *text = json_dumps(obj, JSON_COMPACT);
	int rc;

	if (text == NULL)
		return sb_fail(err, ENOMEM, "serialising journal entry");
	rc = entry_write(dir, exec_id, text, strlen(text), err);
	free(text);
	return rc;
}

static json_t *entry_load(const struct privdir *dir, const char *exec_id, struct sb_err *err)
{
	char name[NAME_MAX + 1];
	json_error_t jerr;
	json_t *obj;
	int fd;

	sb_err_clear(err);
	if (entry_name(exec_id, "", name, sizeof name, err) < 0)
		return NULL;
	fd = openat(dir->fd, name, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0) {
		if (errno != ENOENT)
			sb_fail_errno(err, "opening journal entry %s/%s", dir->path, name);
		return NULL;
	}
	obj = json_loadfd(fd, JSON_REJECT_DUPLICATES, &jerr);
	close(fd);
	if (obj == NULL)
		sb_fail(err, EIO, "journal entry %s/%s is damaged: %s", dir->path, name, jerr.text);
	return obj;
}

static json_t *lost_result(const char *exec_id)
{
	return json_pack("{s:s, s:s, s:n, s:n, s:s}", "exec_id", exec_id, "status", "uncertain", "exit_code", "signal",
			 "error", "the agent restarted while this exec was running; its outcome is unknown");
}

/* Close an entry an earlier agent left running: uncertain, and said so. */
static void entry_close_lost(const struct privdir *dir, const char *exec_id)
{
	struct sb_err err;
	json_t *obj = entry_load(dir, exec_id, &err);

	if (obj == NULL || strcmp(json_string_value(json_object_get(obj, "state")) ?: "", "running") != 0) {
		json_decref(obj);
		return;
	}
	json_object_set_new(obj, "state", json_string("finished"));
	json_object_set_new(obj, "result", lost_result(exec_id));
	if (entry_store(dir, exec_id, obj, &err) < 0)
		sb_warn("journal: %s", err.msg);
	json_decref(obj);
}

/* ---- the slots ---- */

static void slot_digest(const char *text, size_t len, char hex[65])
{
	unsigned char d[32];

	(void)mbedtls_sha256_ret((const unsigned char *)text, len, d, 0);
	sb_hex_encode(d, sizeof d, hex);
}

/* A slot's bytes: the hex SHA-256 of the text, a space, the text, a newline, zeros to the end. */
static int slot_encode(const struct journal_slot *sl, char out[SLOT_BYTES], struct sb_err *err)
{
	json_t *obj = json_pack("{s:I, s:s, s:I, s:I}", "seq", (json_int_t)sl->seq, "exec_id", sl->exec_id,
				"generation", (json_int_t)sl->generation, "accepted_at_ms", (json_int_t)clock_real_ms());
	char *text = obj ? json_dumps(obj, JSON_COMPACT) : NULL;
	size_t len = text ? strlen(text) : 0;
	int rc = 0;

	json_decref(obj);
	if (text == NULL)
		return sb_fail(err, ENOMEM, "building journal entry");
	memset(out, 0, SLOT_BYTES);
	if (65 + len + 1 > SLOT_BYTES) {
		rc = sb_fail(err, E2BIG, "journal entry for exec '%s' does not fit its slot", sl->exec_id);
	} else {
		slot_digest(text, len, out);
		out[64] = ' ';
		memcpy(out + 65, text, len);
		out[65 + len] = '\n';
	}
	free(text);
	return rc;
}

/* A whole slot, or an empty one (zeros, torn, damaged: its command never started). */
static void slot_decode(const char buf[SLOT_BYTES], struct journal_slot *sl)
{
	const char *nl = memchr(buf + 65, '\n', SLOT_BYTES - 65);
	char hex[65];
	json_t *obj;
	const char *id;

	memset(sl, 0, sizeof *sl);
	if (buf[64] != ' ' || nl == NULL)
		return;
	slot_digest(buf + 65, (size_t)(nl - buf - 65), hex);
	if (memcmp(hex, buf, 64) != 0)
		return;
	obj = json_loadb(buf + 65, (size_t)(nl - buf - 65), JSON_REJECT_DUPLICATES, NULL);
	id = json_string_value(json_object_get(obj, "exec_id"));
	if (id != NULL && exec_id_valid(id) && json_integer_value(json_object_get(obj, "seq")) > 0) {
		sl->seq = (uint64_t)json_integer_value(json_object_get(obj, "seq"));
		sl->generation = (uint64_t)json_integer_value(json_object_get(obj, "generation"));
		snprintf(sl->exec_id, sizeof sl->exec_id, "%s", id);
	}
	json_decref(obj);
}

static bool entry_exists(const struct privdir *dir, const char *exec_id)
{
	char name[NAME_MAX + 1];
	struct sb_err err;

	return entry_name(exec_id, "", name, sizeof name, &err) == 0 &&
	       faccessat(dir->fd, name, F_OK, AT_SYMLINK_NOFOLLOW) == 0;
}

/* A slot's exec without a whole entry: the earlier agent died with it accepted, or while its
 * finished entry was being made durable (a crash of the machine may leave that file torn). Its
 * entry is written (durably) before the slot can be reused. */
static int slot_close_lost(const struct privdir *dir, const struct journal_slot *sl, struct sb_err *err)
{
	struct sb_err lerr;
	json_t *obj;
	int rc;

	if (sl->seq == 0)
		return 0;
	obj = entry_load(dir, sl->exec_id, &lerr);
	if (obj != NULL) {
		json_decref(obj);
		return 0; /* finished, or an older agent's running file that journal_open closes */
	}
	if (lerr.msg[0] != '\0')
		sb_warn("journal: %s: closed as uncertain", lerr.msg);
	obj = json_pack("{s:s, s:I, s:s, s:o}", "exec_id", sl->exec_id, "generation", (json_int_t)sl->generation,
			"state", "finished", "result", lost_result(sl->exec_id));
	rc = obj ? entry_store(dir, sl->exec_id, obj, err) : sb_fail(err, ENOMEM, "building journal entry");
	json_decref(obj);
	return rc;
}

/* A fixed file opened, or created whole (zeros written, not a hole: later writes allocate nothing)
 * and made durable with its name, once. */
static int fixed_open(struct journal *j, const char *name, size_t size, int *out, struct sb_err *err)
{
	struct stat st;
	int fd = openat(j->dir->fd, name, O_RDWR | O_NOFOLLOW | O_CLOEXEC);

	if (fd < 0 && errno == ENOENT) {
		char *zeros = calloc(1, size);
		int rc = zeros ? fd_file_create(j->dir->fd, j->dir->path, name, 0600, (uid_t)-1, (gid_t)-1, zeros,
					       size, err) :
				 sb_fail(err, ENOMEM, "creating journal %s/%s", j->dir->path, name);

		free(zeros);
		if (rc < 0)
			return -1;
		fd = openat(j->dir->fd, name, O_RDWR | O_NOFOLLOW | O_CLOEXEC);
	}
	if (fd < 0)
		return sb_fail_errno(err, "opening journal %s/%s", j->dir->path, name);
	if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode) || st.st_size != (off_t)size) {
		close(fd);
		return sb_fail(err, EIO, "journal %s/%s is not a file of %zu bytes", j->dir->path, name, size);
	}
	*out = fd;
	return 0;
}

/* ---- the ends ---- */

/* An end's bytes: the hex SHA-256 of the rest, a space, the begin's seq, a space, the finished
 * entry's text (compact JSON: no newline in it), a newline; what follows is stale. */
static int end_encode(uint64_t seq, const char *text, size_t len, char **out, size_t *out_len)
{
	char head[32];
	int n = snprintf(head, sizeof head, "%llu ", (unsigned long long)seq);
	size_t body = (size_t)n + len;
	char *buf;

	if (65 + body + 1 > END_BYTES || (buf = malloc(65 + body + 1)) == NULL)
		return -1;
	memcpy(buf + 65, head, (size_t)n);
	memcpy(buf + 65 + n, text, len);
	buf[65 + body] = '\n';
	slot_digest(buf + 65, body, buf);
	buf[64] = ' ';
	*out = buf;
	*out_len = 65 + body + 1;
	return 0;
}

/* The whole end of the begin sl (its seq, its exec id), parsed; NULL when the end is torn, damaged,
 * or an older exec's (the slot was reused: that exec's files were durable first). */
static json_t *end_load(const struct journal *j, int i, const struct journal_slot *sl)
{
	char *buf = malloc(END_BYTES), hex[65], *nl, *text;
	json_t *obj = NULL;
	unsigned long long seq;

	if (buf == NULL || pread(j->ends_fd, buf, END_BYTES, (off_t)i * END_BYTES) != (ssize_t)END_BYTES)
		goto out;
	nl = memchr(buf + 65, '\n', END_BYTES - 65);
	if (buf[64] != ' ' || nl == NULL)
		goto out;
	slot_digest(buf + 65, (size_t)(nl - buf - 65), hex);
	if (memcmp(hex, buf, 64) != 0)
		goto out;
	*nl = '\0';
	seq = strtoull(buf + 65, &text, 10);
	if (seq != sl->seq || *text != ' ')
		goto out;
	obj = json_loads(text + 1, JSON_REJECT_DUPLICATES, NULL);
	if (strcmp(json_string_value(json_object_get(obj, "exec_id")) ?: "", sl->exec_id) != 0 ||
	    strcmp(json_string_value(json_object_get(obj, "state")) ?: "", "finished") != 0) {
		json_decref(obj);
		obj = NULL;
	}
out:
	free(buf);
	return obj;
}

/* name in dir, then dir, fsynced: a file written unsynced made durable with its name. */
static int file_sync(const struct privdir *dir, const char *name, struct sb_err *err)
{
	int fd = openat(dir->fd, name, O_RDONLY | O_NOFOLLOW | O_CLOEXEC), rc = 0;

	if (fd < 0)
		return sb_fail_errno(err, "opening %s/%s", dir->path, name);
	if (fsync(fd) < 0)
		rc = sb_fail_errno(err, "syncing %s/%s", dir->path, name);
	close(fd);
	if (rc == 0 && fsync(dir->fd) < 0)
		rc = sb_fail_errno(err, "syncing directory %s", dir->path);
	return rc;
}

/* True when name in dir holds exactly text (len bytes). */
static bool file_holds(const struct privdir *dir, const char *name, const char *text, size_t len)
{
	int fd = openat(dir->fd, name, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
	char *buf = fd >= 0 ? malloc(len + 1) : NULL;
	bool same = false;
	ssize_t n = 0, got;

	if (buf != NULL) {
		while ((size_t)n < len + 1 && (got = read(fd, buf + n, len + 1 - (size_t)n)) > 0)
			n += got;
		same = (size_t)n == len && memcmp(buf, text, len) == 0;
	}
	free(buf);
	if (fd >= 0)
		close(fd);
	return same;
}

/* A slot's end durable, its files maybe not (the agent died, or the machine, before the settler
 * synced them): the entry file is kept when it is whole and finished (what the agent wrote last,
 * the end's text, or an entry that replaced it durably), else written from the end; the receipt
 * the entry names is written from it unless the file holds exactly its bytes; both then synced. */
static int end_restore(struct journal *j, const struct journal_slot *sl, json_t *end, struct sb_err *err)
{
	char name[NAME_MAX + 1], tmp[NAME_MAX + 1];
	struct sb_err lerr;
	json_t *file = entry_load(j->dir, sl->exec_id, &lerr), *truth;
	const char *receipt;
	int rc;

	if (entry_name(sl->exec_id, "", name, sizeof name, err) < 0 ||
	    entry_name(sl->exec_id, ".tmp", tmp, sizeof tmp, err) < 0)
		return -1;
	if (file != NULL && strcmp(json_string_value(json_object_get(file, "state")) ?: "", "finished") == 0) {
		truth = file;
		rc = file_sync(j->dir, name, err);
	} else {
		json_decref(file);
		file = NULL;
		truth = end;
		rc = entry_store(j->dir, sl->exec_id, end, err);
	}
	receipt = json_string_value(json_object_get(truth, "receipt"));
	if (rc == 0 && receipt != NULL && j->receipts != NULL) {
		size_t len = strlen(receipt);

		rc = file_holds(j->receipts, name, receipt, len) ? file_sync(j->receipts, name, err) :
			fd_file_replace(j->receipts->fd, j->receipts->path, name, tmp, 0600, receipt, len, err);
	}
	json_decref(file);
	if (rc < 0)
		sb_err_prefix(err, "journal: restoring the end of exec '%s'", sl->exec_id);
	return rc;
}

static bool slot_settling(const struct journal_slot *sl)
{
	return sl->files_pending && !sl->files_stuck;
}

/* The settler: syncs the files of each durable end off the call's path (the result is out). */
static void *settler(void *arg)
{
	struct journal *j = arg;
	char id[EXEC_ID_MAX + 1], name[NAME_MAX + 1];
	struct sb_err err;
	bool receipt;
	int i, rc;

	pthread_mutex_lock(&j->lock);
	while (!j->settler_stop) {
		for (i = 0; i < 2; i++)
			if (slot_settling(&j->slot[i]))
				break;
		if (i == 2) {
			pthread_cond_wait(&j->changed, &j->lock);
			continue;
		}
		snprintf(id, sizeof id, "%s", j->slot[i].exec_id);
		receipt = j->slot[i].has_receipt;
		pthread_mutex_unlock(&j->lock);
		FAILPOINT("agent.journal.settling");
		/* The receipt first: the entry carries its bytes too, but it is the file verify reads. */
		rc = entry_name(id, "", name, sizeof name, &err);
		if (rc == 0 && receipt && j->receipts != NULL)
			rc = file_sync(j->receipts, name, &err);
		if (rc == 0)
			rc = file_sync(j->dir, name, &err);
		if (rc < 0)
			sb_warn("journal: exec '%s': %s (its end stays in its slot)", id, err.msg);
		pthread_mutex_lock(&j->lock);
		if (rc == 0)
			j->slot[i].files_pending = false;
		else
			j->slot[i].files_stuck = true;
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
	while (j->settler_running && (slot_settling(&j->slot[0]) || slot_settling(&j->slot[1])))
		pthread_cond_wait(&j->changed, &j->lock);
	pthread_mutex_unlock(&j->lock);
}

int journal_open(struct journal *j, const struct privdir *dir, const struct privdir *receipts, struct sb_err *err)
{
	char buf[2 * SLOT_BYTES];
	struct dirent *d;
	DIR *dh;
	int fd;

	memset(j, 0, sizeof *j);
	j->dir = dir;
	j->receipts = receipts;
	j->slots_fd = j->ends_fd = -1;
	pthread_mutex_init(&j->lock, NULL);
	pthread_cond_init(&j->changed, NULL);
	if (fixed_open(j, SLOTS_NAME, sizeof buf, &j->slots_fd, err) < 0 ||
	    fixed_open(j, ENDS_NAME, 2 * END_BYTES, &j->ends_fd, err) < 0)
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

		if (n <= 5 || n >= sizeof id || strcmp(d->d_name + n - 5, ".json") != 0)
			continue;
		memcpy(id, d->d_name, n - 5);
		id[n - 5] = '\0';
		entry_close_lost(dir, id);
	}
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
	while (j->settler_running)
		pthread_cond_wait(&j->changed, &j->lock);
	pthread_mutex_unlock(&j->lock);
	for (int i = 0; i < 2; i++) {
		if (!slot_settling(&j->slot[i]) || entry_name(j->slot[i].exec_id, "", name, sizeof name, &err) < 0)
			continue;
		if ((j->slot[i].has_receipt && j->receipts != NULL && file_sync(j->receipts, name, &err) < 0) ||
		    file_sync(j->dir, name, &err) < 0)
			sb_warn("journal: exec '%s': %s (its end stays in its slot)", j->slot[i].exec_id, err.msg);
	}
	if (j->slots_fd >= 0)
		close(j->slots_fd);
	if (j->ends_fd >= 0)
		close(j->ends_fd);
	j->slots_fd = j->ends_fd = -1;
	pthread_cond_destroy(&j->changed);
	pthread_mutex_destroy(&j->lock);
}

/* The slot a begin may overwrite: one whose exec is settled (finished entry durable, and the files
 * of a durable end too: overwriting the begin makes the end stale), the older of two; a slot whose
 * files the settler is syncing is waited for (lock held). -1 when both are held (a finish failed, or
 * a sync): the begin then writes a file of its own. */
static int slot_free(struct journal *j)
{
	int best;

	for (;;) {
		bool wait = false;

		best = -1;
		for (int i = 0; i < 2; i++) {
			const struct journal_slot *sl = &j->slot[i];

			if (sl->open || sl->files_stuck)
				continue;
			if (sl->files_pending)
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
	/* In place, in a file whose size never changes: fdatasync flushes the block, no name and no
	 * inode change to commit. Durable before the command may start. */
	if (pwrite(j->slots_fd, buf, sizeof buf, (off_t)i * SLOT_BYTES) != (ssize_t)sizeof buf ||
	    fdatasync(j->slots_fd) < 0)
		return sb_fail_errno(err, "journal entry for exec '%s': writing %s/%s", exec_id, j->dir->path,
				     SLOTS_NAME);
	pthread_mutex_lock(&j->lock);
	j->slot[i] = next;
	pthread_mutex_unlock(&j->lock);
	return 0;
}

struct entry_stat {
	char name[256];
	time_t mtime;
	off_t size;
};

static int by_mtime(const void *a, const void *b)
{
	const struct entry_stat *x = a, *y = b;

	return (x->mtime > y->mtime) - (x->mtime < y->mtime);
}

/* Keep the journal under JOURNAL_MAX_BYTES by removing the oldest entries other than keep and
 * those of the execs in the slots: a slot whose entry was gone would read, after a restart, as an
 * exec that never finished. */
static void journal_prune(struct journal *j, const char *keep)
{
	/* Counted up by every write (a replaced entry twice: never under the real total), so the
	 * directory is only read when the cap may have been passed, not on every call. */
	if (j->bytes <= JOURNAL_MAX_BYTES)
		return;
	const struct privdir *dir = j->dir;
	struct entry_stat *all = NULL;
	size_t n = 0, cap = 0;
	off_t total = 0;
	struct dirent *d;
	int fd = fcntl(dir->fd, F_DUPFD_CLOEXEC, 0);
	DIR *dh;

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
		all[n].mtime = st.st_mtime;
		all[n].size = st.st_size;
		total += st.st_size;
		n++;
	}
	qsort(all, n, sizeof *all, by_mtime);
	for (size_t i = 0; i < n && total > (off_t)JOURNAL_MAX_BYTES; i++) {
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
		if (unlinkat(dirfd(dh), all[i].name, 0) == 0)
			total -= all[i].size;
	}
	closedir(dh);
	free(all);
	j->bytes = total > 0 ? (uint64_t)total : 0;
}

/* The entry's text is built around the result's own text, not from a parse of it: the result is
 * the JSON object this process just serialised (serve.c exec_run), up to 2 MiB of it, and a parse,
 * a tree and a second dump of that would hold three more copies of every output byte at once
 * (docs/performance.md, "Memory"). Only the small members go through jansson. */
static char *entry_finished_text(const char *exec_id, uint64_t generation, const char *result_json,
				 const char *receipt_text, size_t *len)
{
	json_t *head = json_pack("{s:s, s:I, s:s, s:s?}", "exec_id", exec_id, "generation", (json_int_t)generation,
				 "state", "finished", "receipt", receipt_text);
	char *head_text = head ? json_dumps(head, JSON_COMPACT) : NULL;
	size_t head_len = head_text ? strlen(head_text) : 0, result_len = strlen(result_json);
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
	/* In place, in a file whose size never changes: one fdatasync of blocks that exist. A write
	 * that failed leaves an end the files' own path outranks (end_restore keeps a whole entry). */
	ssize_t wrote = pwrite(j->ends_fd, buf, buf_len, (off_t)i * END_BYTES);

	FAILPOINT("agent.journal.end_written");
	if (wrote != (ssize_t)buf_len || fdatasync(j->ends_fd) < 0) {
		sb_warn("journal: exec '%s': writing its end in %s/%s: %s", exec_id, j->dir->path, ENDS_NAME,
			strerror(errno));
		free(buf);
		free(text);
		return 0;
	}
	free(buf);
	FAILPOINT("agent.journal.end_synced");
	/* Durable now. The file is for the readers of the running agent (a Query, the prune);
	 * synced by the settler. Until it is written the slot stays open: a Query says running. */
	j->bytes += len;
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
	j->slot[i].files_pending = true;
	j->slot[i].has_receipt = receipt_text != NULL;
	pthread_cond_broadcast(&j->changed);
	pthread_mutex_unlock(&j->lock);
	journal_prune(j, exec_id);
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
	j->bytes += len;
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
	journal_prune(j, exec_id);
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
