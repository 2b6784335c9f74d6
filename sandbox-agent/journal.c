/* The journal (see journal.h). Each entry is written to a temporary name, fsynced, renamed into
 * place and the directory fsynced: a crash leaves the old entry or the new one, never half. */
#include "journal.h"
#include "clock.h"
#include "fdio.h"
#include "log.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define ENTRY_MAX_BYTES (JOURNAL_MAX_BYTES / 2)

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

/* Close an entry an earlier agent left running: uncertain, and said so. */
static void entry_close_lost(const struct privdir *dir, const char *exec_id)
{
	struct sb_err err;
	json_t *obj = entry_load(dir, exec_id, &err);
	json_t *result;

	if (obj == NULL || strcmp(json_string_value(json_object_get(obj, "state")) ?: "", "running") != 0) {
		json_decref(obj);
		return;
	}
	result = json_pack("{s:s, s:s, s:n, s:n, s:s}", "exec_id", exec_id, "status", "uncertain", "exit_code",
			   "signal", "error", "the agent restarted while this exec was running; its outcome is unknown");
	json_object_set_new(obj, "state", json_string("finished"));
	json_object_set_new(obj, "result", result);
	if (entry_store(dir, exec_id, obj, &err) < 0)
		sb_warn("journal: %s", err.msg);
	json_decref(obj);
}

int journal_open(const struct privdir *dir, struct sb_err *err)
{
	struct dirent *d;
	DIR *dh;
	/* fdopendir takes the descriptor over: give it a copy and rewind; the held one stays ours. */
	int fd = fcntl(dir->fd, F_DUPFD_CLOEXEC, 0);

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
	return 0;
}

int journal_begin(const struct privdir *dir, const char *exec_id, uint64_t generation, struct sb_err *err)
{
	char name[NAME_MAX + 1];
	json_t *obj;
	int rc;

	if (entry_name(exec_id, "", name, sizeof name, err) < 0)
		return -1;
	if (faccessat(dir->fd, name, F_OK, AT_SYMLINK_NOFOLLOW) == 0)
		return sb_fail(err, EEXIST, "exec '%s' was accepted before; exec ids are never reused", exec_id);
	obj = json_pack("{s:s, s:I, s:s, s:I}", "exec_id", exec_id, "generation", (json_int_t)generation, "state",
			"running", "accepted_at_ms", (json_int_t)clock_real_ms());
	rc = obj ? entry_store(dir, exec_id, obj, err) : sb_fail(err, ENOMEM, "building journal entry");
	json_decref(obj);
	return rc;
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

/* Keep the journal under JOURNAL_MAX_BYTES by removing the oldest entries other than keep. */
static void journal_prune(const struct privdir *dir, const char *keep)
{
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
		if (strncmp(all[i].name, keep, strlen(keep)) == 0)
			continue;
		if (unlinkat(dirfd(dh), all[i].name, 0) == 0)
			total -= all[i].size;
	}
	closedir(dh);
	free(all);
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

int journal_finish(const struct privdir *dir, const char *exec_id, uint64_t generation, const char *result_json,
		   const char *receipt_text, struct sb_err *err)
{
	size_t len = 0;
	char *text;
	int rc;

	/* The cheap half of what a parse checked: an object, not some other value or nothing. */
	if (result_json[0] != '{')
		return sb_fail(err, EINVAL, "journal: the result of exec '%s' is not a JSON object", exec_id);
	if (strlen(result_json) + (receipt_text ? strlen(receipt_text) : 0) > ENTRY_MAX_BYTES)
		return sb_fail(err, EFBIG, "journal: entry for exec '%s' is over %u bytes", exec_id, ENTRY_MAX_BYTES);
	text = entry_finished_text(exec_id, generation, result_json, receipt_text, &len);
	if (text == NULL)
		return sb_fail(err, ENOMEM, "building journal entry");
	rc = entry_write(dir, exec_id, text, len, err);
	free(text);
	if (rc == 0)
		journal_prune(dir, exec_id);
	return rc;
}

int journal_lookup(const struct privdir *dir, const char *exec_id, struct journal_entry *out, struct sb_err *err)
{
	json_t *obj;
	const char *state;

	memset(out, 0, sizeof *out);
	sb_err_clear(err);
	obj = entry_load(dir, exec_id, err);
	if (obj == NULL)
		return err->msg[0] ? -1 : 0;
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
