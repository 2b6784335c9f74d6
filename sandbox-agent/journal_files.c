/* The journal's files (journal.h): an exec's entry file, the two slots of .running and their ends in
 * .ends, encoded, decoded and, after a crash, restored. Each record carries the SHA-256 of its text,
 * so a torn one is told from a whole one. Never writes through a path: only through the journal's
 * held descriptors (R1). */
#include "journal_internal.h"
#include "clock.h"
#include "fdio.h"
#include "json_text.h"
#include "log.h"
#include "random.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <jansson.h>
#include <mbedtls/sha256.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

int entry_name(const char *exec_id, const char *suffix, char *out, size_t len, struct sb_err *err)
{
	if ((size_t)snprintf(out, len, "%s.json%s", exec_id, suffix) >= len)
		return sb_fail(err, ENAMETOOLONG, "journal name for exec '%s' is too long", exec_id);
	return 0;
}

/* Everything goes through the journal's descriptor, opened before any command ran (R1). */
int entry_write(const struct privdir *dir, const char *exec_id, const char *text, size_t len,
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

int entry_store(const struct privdir *dir, const char *exec_id, json_t *obj, struct sb_err *err)
{
	size_t len;
	char *text = sb_json_dumps(obj, JSON_COMPACT, &len);
	int rc;

	if (text == NULL)
		return sb_fail(err, ENOMEM, "serialising journal entry");
	rc = entry_write(dir, exec_id, text, len, err);
	free(text);
	return rc;
}

static bool still_named(int dirfd, const char *name, int fd)
{
	struct stat held, named;

	return fstat(fd, &held) == 0 && fstatat(dirfd, name, &named, AT_SYMLINK_NOFOLLOW) == 0 &&
	       held.st_dev == named.st_dev && held.st_ino == named.st_ino;
}

json_t *entry_load(const struct privdir *dir, const char *exec_id, struct sb_err *err)
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
	/* A prune renames an entry away and then empties it (journal.c entry_keep_freed): what was
	 * read is whole only if the name still holds that file. Else it was pruned while it was read,
	 * and reads as pruned before the open: no entry. */
	if (!still_named(dir->fd, name, fd)) {
		json_decref(obj);
		obj = NULL;
	} else if (obj == NULL)
		sb_fail(err, EIO, "journal entry %s/%s is damaged: %s", dir->path, name, jerr.text);
	else if (strcmp(json_string_value(json_object_get(obj, "exec_id")) ?: "", exec_id) != 0) {
		/* Never another exec's outcome under this one's name. Only a crash of the machine on
		 * a filesystem without a journal could leave one: a kept entry's file (entry_keep_freed)
		 * reused by a later exec while the directory block that still named it was not written. */
		json_decref(obj);
		obj = NULL;
		sb_fail(err, EIO, "journal entry %s/%s is damaged: it names another exec", dir->path, name);
	}
	close(fd);
	return obj;
}

static json_t *lost_result(const char *exec_id)
{
	return json_pack("{s:s, s:s, s:n, s:n, s:s}", "exec_id", exec_id, "status", "uncertain", "exit_code", "signal",
			 "error", "the agent restarted while this exec was running; its outcome is unknown");
}

/* Close an entry an earlier agent left running: uncertain, and said so. */
void entry_close_lost(const struct privdir *dir, const char *exec_id)
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
int slot_encode(const struct journal_slot *sl, char out[SLOT_BYTES], struct sb_err *err)
{
	json_t *obj = json_pack("{s:I, s:s, s:I, s:I}", "seq", (json_int_t)sl->seq, "exec_id", sl->exec_id,
				"generation", (json_int_t)sl->generation, "accepted_at_ms", (json_int_t)clock_real_ms());
	size_t len = 0;
	char *text = obj ? sb_json_dumps(obj, JSON_COMPACT, &len) : NULL;
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
void slot_decode(const char buf[SLOT_BYTES], struct journal_slot *sl)
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

bool entry_exists(const struct privdir *dir, const char *exec_id)
{
	char name[NAME_MAX + 1];
	struct sb_err err;

	return entry_name(exec_id, "", name, sizeof name, &err) == 0 &&
	       faccessat(dir->fd, name, F_OK, AT_SYMLINK_NOFOLLOW) == 0;
}

/* A slot's exec without a whole entry: the earlier agent died with it accepted, or while its
 * finished entry was being made durable (a crash of the machine may leave that file torn). Its
 * entry is written (durably) before the slot can be reused. */
int slot_close_lost(const struct privdir *dir, const struct journal_slot *sl, struct sb_err *err)
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
int fixed_open(struct journal *j, const char *name, size_t size, int *out, struct sb_err *err)
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
int end_encode(uint64_t seq, const char *text, size_t len, char **out, size_t *out_len)
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
json_t *end_load(const struct journal *j, int i, const struct journal_slot *sl)
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
/* release: the blocks reserved past the file's end given back first (fd_reserve_release), which
 * needs the file open for writing; a failure there leaves them allocated and is not the sync's. */
static int sync_named(const struct privdir *dir, const char *name, bool release, struct sb_err *err)
{
	int fd = openat(dir->fd, name, (release ? O_RDWR : O_RDONLY) | O_NOFOLLOW | O_CLOEXEC), rc = 0;

	if (fd < 0)
		return sb_fail_errno(err, "opening %s/%s", dir->path, name);
	if (release)
		(void)fd_reserve_release(fd);
	if (fsync(fd) < 0)
		rc = sb_fail_errno(err, "syncing %s/%s", dir->path, name);
	close(fd);
	if (rc == 0 && fsync(dir->fd) < 0)
		rc = sb_fail_errno(err, "syncing directory %s", dir->path);
	return rc;
}

int file_sync(const struct privdir *dir, const char *name, struct sb_err *err)
{
	return sync_named(dir, name, false, err);
}

int receipt_file_sync(const struct privdir *dir, const char *name, struct sb_err *err)
{
	return sync_named(dir, name, true, err);
}

void receipt_room_release(const struct privdir *dir, const char *name)
{
	int fd = openat(dir->fd, name, O_RDWR | O_NOFOLLOW | O_CLOEXEC);

	if (fd < 0) {
		sb_warn("journal: giving back the room of %s/%s: %s", dir->path, name, strerror(errno));
		return;
	}
	(void)fd_reserve_release(fd);
	close(fd);
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

/* A slot's end whole, its files maybe not (the agent died between the end and the entry file's
 * write): the entry file is kept when it is whole and finished (what the agent wrote last,
 * the end's text, or an entry that replaced it durably), else written from the end; the receipt
 * the entry names is written from it unless the file holds exactly its bytes; both then synced. */
int end_restore(struct journal *j, const struct journal_slot *sl, json_t *end, struct sb_err *err)
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

		rc = file_holds(j->receipts, name, receipt, len) ? receipt_file_sync(j->receipts, name, err) :
			fd_file_replace(j->receipts->fd, j->receipts->path, name, tmp, 0600, receipt, len, err);
	}
	json_decref(file);
	if (rc < 0)
		sb_err_prefix(err, "journal: restoring the end of exec '%s'", sl->exec_id);
	return rc;
}

/* ---- the boot mark ---- */

static bool boot_id_valid(const char *s, size_t len)
{
	if (len != BOOT_ID_LEN)
		return false;
	for (size_t i = 0; i < len; i++)
		if (i == 8 || i == 13 || i == 18 || i == 23 ? s[i] != '-' : strchr("0123456789abcdef", s[i]) == NULL)
			return false;
	return true;
}

int journal_boot_id(char out[BOOT_ID_LEN + 1], struct sb_err *err)
{
	char buf[BOOT_ID_LEN + 2];
	ssize_t n;
	int fd;

#ifdef SB_FAILPOINTS
	const char *fake = getenv("SB_FAILPOINT_BOOT_ID");

	if (fake != NULL && fake[0] != '\0') {
		if (!boot_id_valid(fake, strlen(fake)))
			return sb_fail(err, EINVAL, "SB_FAILPOINT_BOOT_ID is not a boot id");
		memcpy(out, fake, BOOT_ID_LEN + 1);
		return 0;
	}
#endif
	fd = open("/proc/sys/kernel/random/boot_id", O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return sb_fail_errno(err, "reading the boot id");
	n = read(fd, buf, sizeof buf);
	close(fd);
	if (n != BOOT_ID_LEN + 1 || buf[BOOT_ID_LEN] != '\n' || !boot_id_valid(buf, BOOT_ID_LEN))
		return sb_fail(err, EIO, "reading the boot id: /proc/sys/kernel/random/boot_id is not one");
	memcpy(out, buf, BOOT_ID_LEN);
	out[BOOT_ID_LEN] = '\0';
	return 0;
}

/* The mark as found: 0 none (zeros: a new journal, or an older agent's, which synced every
 * record), 1 a whole one (boot and doubt filled), -1 damaged. */
static int boot_mark_read(const char buf[BOOT_BYTES], char boot[BOOT_ID_LEN + 1], bool *doubt)
{
	size_t i;

	for (i = 0; i < BOOT_BYTES && buf[i] == '\0'; i++) {
	}
	if (i == BOOT_BYTES)
		return 0;
	if (!boot_id_valid(buf, BOOT_ID_LEN) || buf[BOOT_ID_LEN] != ' ' || (buf[BOOT_ID_LEN + 1] != '0' &&
	    buf[BOOT_ID_LEN + 1] != '1') || buf[BOOT_ID_LEN + 2] != '\n')
		return -1;
	memcpy(boot, buf, BOOT_ID_LEN);
	boot[BOOT_ID_LEN] = '\0';
	*doubt = buf[BOOT_ID_LEN + 1] == '1';
	return 1;
}

/* Reads the mark, decides j->doubt, and writes this boot's (doubt kept: it never ends for this
 * journal), fdatasynced: every unsynced record from here on is this boot's, whatever happens to
 * the machine, because the mark that names it is on disk first. */
int boot_mark_take(struct journal *j, struct sb_err *err)
{
	char buf[BOOT_BYTES], was[BOOT_ID_LEN + 1] = "";
	bool doubt = false;
	int fd, found;

	if (fixed_open(j, BOOT_NAME, BOOT_BYTES, &fd, err) < 0)
		return -1;
	if (pread(fd, buf, sizeof buf, 0) != (ssize_t)sizeof buf) {
		close(fd);
		return sb_fail(err, EIO, "reading journal %s/%s", j->dir->path, BOOT_NAME);
	}
	found = boot_mark_read(buf, was, &doubt);
	j->doubt = found < 0 || doubt || (found == 1 && strcmp(was, j->boot) != 0);
	if (j->doubt)
		snprintf(j->doubt_why, sizeof j->doubt_why, "the machine restarted since this sandbox's journal was "
			 "written (boot %.8s, now %.8s) and its records were not synced: this exec's may be lost",
			 found != 1 ? "unknown" : strcmp(was, j->boot) == 0 ? "earlier" : was, j->boot);
	memset(buf, 0, sizeof buf);
	snprintf(buf, sizeof buf, "%s %c\n", j->boot, j->doubt ? '1' : '0');
	if (pwrite(fd, buf, sizeof buf, 0) != (ssize_t)sizeof buf || fdatasync(fd) < 0) {
		sb_fail_errno(err, "writing journal %s/%s", j->dir->path, BOOT_NAME);
		close(fd);
		return -1;
	}
	close(fd);
	if (j->doubt)
		sb_warn("journal %s: %s; no exec is accepted on it", j->dir->path, j->doubt_why);
	return 0;
}
