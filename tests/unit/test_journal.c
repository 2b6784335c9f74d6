/* Unit tests for sandbox-agent/journal.c: a finished entry, built around the result's own text (no
 * parse of it), reads back as the same result and receipt, is valid JSON with no duplicate member,
 * and a result that is not a JSON object is refused before anything is written. The begin slots: a
 * begin is found running without a file of its own; a journal opened again (the agent restarted)
 * closes a begun exec as uncertain and refuses its id; a torn slot is an exec that never started;
 * a slot whose exec has not finished is never overwritten; a prune leaves a quarter of the cap
 * free, the oldest entries gone first. The ends: an end durable in its slot is
 * the outcome, its files made whole from it by a restart (an agent killed before it wrote them); the
 * end's path and the settler sync nothing, and a slot is free once its receipt's room is given back; a torn or half-written end is an exec closed as uncertain, never a result; an end a
 * reused slot left behind is never read as the new exec's; an end written through the spare file
 * made ahead is exactly the end's, even over a spare an earlier life left. Pruned entries are kept
 * as empty files (at most the bound) and the next spare is made from the oldest, its inode reused;
 * an earlier life's are taken over, emptied before use, links never followed; a lookup that raced a
 * prune reads no entry, never a damaged one. The boot (issue 32: the
 * begin and the end are not synced): a journal opened under another boot id than the one it was
 * written under is in doubt: an exec with no record (its begin lost with the machine) is
 * JOURNAL_IN_DOUBT, never unknown, a whole record still reads as it was, no exec is accepted, and
 * the doubt stays across further opens; a damaged boot mark is doubt too. */
#include <dirent.h>
#include <errno.h>
#include <setjmp.h>
#include <stdbool.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <fcntl.h>
#include <jansson.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "fdio.h"
#include "journal.h"

struct fixture {
	char dir[64], rdir[64];
	struct privdir journal_dir, receipts;
	struct journal journal;
};

static int setup(void **state)
{
	struct fixture *f = calloc(1, sizeof *f);
	struct sb_err err;

	assert_non_null(f);
	snprintf(f->dir, sizeof f->dir, "/tmp/test-journal.XXXXXX");
	assert_non_null(mkdtemp(f->dir));
	assert_int_equal(chmod(f->dir, 0700), 0);
	assert_int_equal(privdir_open(&f->journal_dir, f->dir, false, 077, &err), 0);
	snprintf(f->rdir, sizeof f->rdir, "/tmp/test-receipts.XXXXXX");
	assert_non_null(mkdtemp(f->rdir));
	assert_int_equal(privdir_open(&f->receipts, f->rdir, false, 077, &err), 0);
	assert_int_equal(journal_open(&f->journal, &f->journal_dir, &f->receipts, &err), 0);
	*state = f;
	return 0;
}

/* Every file of a test's directory (no subdirectories), then the directory. */
static void dir_remove(const char *dir)
{
	DIR *dh = opendir(dir);
	struct dirent *d;
	char path[512];

	while (dh != NULL && (d = readdir(dh)) != NULL) {
		if (strcmp(d->d_name, ".") == 0 || strcmp(d->d_name, "..") == 0)
			continue;
		snprintf(path, sizeof path, "%s/%s", dir, d->d_name);
		unlink(path);
	}
	if (dh != NULL)
		closedir(dh);
	rmdir(dir);
}

static int teardown(void **state)
{
	struct fixture *f = *state;

	journal_close(&f->journal);
	privdir_close(&f->journal_dir);
	privdir_close(&f->receipts);
	dir_remove(f->dir);
	dir_remove(f->rdir);
	free(f);
	return 0;
}

/* The entry as it is on disk, parsed strictly (duplicate members refused). */
static json_t *entry_on_disk(const struct fixture *f, const char *name)
{
	char path[128];
	json_error_t jerr;
	json_t *obj;

	snprintf(path, sizeof path, "%s/%s", f->dir, name);
	obj = json_load_file(path, JSON_REJECT_DUPLICATES, &jerr);
	if (obj == NULL)
		fail_msg("%s: %s", path, jerr.text);
	return obj;
}

static void test_finished_entry_reads_back(void **state)
{
	struct fixture *f = *state;
	/* Escapes, non-ASCII, nesting and a member named like the entry's own: all kept as they are. */
	const char *result = "{\"exec_id\":\"e1\",\"status\":\"exited\",\"exit_code\":0,\"stdout\":\"a\\\"b\\\\c\\n\\u00e9\","
			     "\"receipt\":{\"verified\":true},\"state\":\"not the entry's\"}";
	const char *receipt = "{\"mac\":\"x\\\"y\"}\n";
	struct journal_entry e;
	struct sb_err err;
	json_t *disk, *want, *got;

	assert_int_equal(journal_begin(&f->journal, "e1", 7, &err), 0);
	assert_int_equal(journal_finish(&f->journal, "e1", 7, result, receipt, &err), 0);
	assert_int_equal(journal_lookup(&f->journal, "e1", &e, &err), 0);
	assert_int_equal(e.state, JOURNAL_FINISHED);
	assert_int_equal(e.generation, 7);
	assert_string_equal(e.receipt_text, receipt);
	want = json_loads(result, 0, NULL);
	got = json_loads(e.result_json, 0, NULL);
	assert_non_null(want);
	assert_non_null(got);
	assert_true(json_equal(want, got));
	json_decref(want);
	json_decref(got);
	journal_entry_free(&e);

	disk = entry_on_disk(f, "e1.json");
	assert_string_equal(json_string_value(json_object_get(disk, "state")), "finished");
	assert_string_equal(json_string_value(json_object_get(disk, "exec_id")), "e1");
	assert_int_equal(json_integer_value(json_object_get(disk, "generation")), 7);
	assert_int_equal(json_object_size(disk), 5);
	json_decref(disk);
}

static void test_finished_without_receipt(void **state)
{
	struct fixture *f = *state;
	struct journal_entry e;
	struct sb_err err;

	assert_int_equal(journal_begin(&f->journal, "e2", 1, &err), 0);
	assert_int_equal(journal_finish(&f->journal, "e2", 1, "{\"status\":\"refused\"}", NULL, &err), 0);
	assert_int_equal(journal_lookup(&f->journal, "e2", &e, &err), 0);
	assert_int_equal(e.state, JOURNAL_FINISHED);
	assert_null(e.receipt_text);
	assert_string_equal(e.result_json, "{\"status\":\"refused\"}");
	journal_entry_free(&e);
}

static void test_result_not_an_object_refused(void **state)
{
	struct fixture *f = *state;
	struct journal_entry e;
	struct sb_err err;

	assert_int_equal(journal_begin(&f->journal, "e3", 1, &err), 0);
	assert_int_equal(journal_finish(&f->journal, "e3", 1, "[1,2]", NULL, &err), -1);
	assert_non_null(strstr(err.msg, "not a JSON object"));
	assert_int_equal(journal_finish(&f->journal, "e3", 1, "", NULL, &err), -1);
	/* The running entry is left as it was. */
	assert_int_equal(journal_lookup(&f->journal, "e3", &e, &err), 0);
	assert_int_equal(e.state, JOURNAL_RUNNING);
	journal_entry_free(&e);
}

static bool entry_file(const struct fixture *f, const char *name)
{
	char path[128];

	snprintf(path, sizeof path, "%s/%s", f->dir, name);
	return access(path, F_OK) == 0;
}

/* The file's inode number, 0 when there is none; its size in *size when asked. */
static ino_t file_ino(const struct fixture *f, const char *name, off_t *size)
{
	char path[128];
	struct stat st;

	snprintf(path, sizeof path, "%s/%s", f->dir, name);
	if (lstat(path, &st) < 0)
		return 0;
	if (size != NULL)
		*size = st.st_size;
	return st.st_ino;
}

/* An exec begun and finished, then the prune serve starts after its result, waited for. */
static void finish_pruned(struct fixture *f, const char *id, const char *result)
{
	struct sb_err err;

	assert_int_equal(journal_finish(&f->journal, id, 1, result, NULL, &err), 0);
	journal_prune_start(&f->journal, id);
	journal_prune_wait(&f->journal);
}

/* The journal as a restarted agent opens it. */
static void reopen(struct fixture *f)
{
	struct sb_err err;

	journal_close(&f->journal);
	assert_int_equal(journal_open(&f->journal, &f->journal_dir, &f->receipts, &err), 0);
}

static void expect_state(struct fixture *f, const char *id, enum journal_state want, const char *status)
{
	struct journal_entry e;
	struct sb_err err;
	json_t *r;

	assert_int_equal(journal_lookup(&f->journal, id, &e, &err), 0);
	assert_int_equal(e.state, want);
	if (status != NULL) {
		r = json_loads(e.result_json, 0, NULL);
		assert_non_null(r);
		assert_string_equal(json_string_value(json_object_get(r, "status")), status);
		json_decref(r);
	}
	journal_entry_free(&e);
}

/* The agent restarted "after a crash of the machine": the journal opened under another boot id. */
#define OTHER_BOOT "00000000-0000-4000-8000-000000000032"
static void reopen_boot(struct fixture *f, const char *boot)
{
	struct sb_err err;

	journal_close(&f->journal);
	assert_int_equal(journal_open_boot(&f->journal, &f->journal_dir, &f->receipts, boot, &err), 0);
}

/* What a crash of the machine leaves when the page cache held the begin: the slot as it was before
 * (zeros here: the journal's first exec). */
static void slots_lost(struct fixture *f)
{
	char path[128], zeros[1024] = { 0 };
	int fd;

	snprintf(path, sizeof path, "%s/.running", f->dir);
	fd = open(path, O_WRONLY);
	assert_true(fd >= 0);
	assert_int_equal(pwrite(fd, zeros, sizeof zeros, 0), (ssize_t)sizeof zeros);
	close(fd);
}

static void test_other_boot_lost_begin_in_doubt(void **state)
{
	struct fixture *f = *state;
	struct sb_err err;

	assert_int_equal(journal_begin(&f->journal, "a", 1, &err), 0);
	slots_lost(f);
	reopen_boot(f, OTHER_BOOT);
	assert_true(f->journal.doubt);
	/* a may have run: never unknown. */
	expect_state(f, "a", JOURNAL_IN_DOUBT, NULL);
	expect_state(f, "never-sent", JOURNAL_IN_DOUBT, NULL);
	/* Nor may it run again under its id (or any other: nothing tells a lost id from a new one). */
	assert_int_equal(journal_begin(&f->journal, "a", 1, &err), -1);
	assert_int_equal(err.errnum, EIO);
	assert_non_null(strstr(err.msg, "the machine restarted"));
	assert_int_equal(journal_begin(&f->journal, "b", 1, &err), -1);
	/* Opened again under the same (new) boot: still in doubt, the lost record is not back. */
	reopen_boot(f, OTHER_BOOT);
	expect_state(f, "a", JOURNAL_IN_DOUBT, NULL);
	assert_int_equal(journal_begin(&f->journal, "b", 1, &err), -1);
}

/* Whole records from another boot say what they said: the digest of each and the receipt's HMAC
 * make a surviving record true, only a missing one is in doubt. */
static void test_other_boot_whole_records_kept(void **state)
{
	struct fixture *f = *state;
	struct sb_err err;

	assert_int_equal(journal_begin(&f->journal, "a", 1, &err), 0);
	assert_int_equal(journal_finish(&f->journal, "a", 1, "{\"status\":\"exited\"}", NULL, &err), 0);
	assert_int_equal(journal_begin(&f->journal, "c", 1, &err), 0);
	reopen_boot(f, OTHER_BOOT);
	expect_state(f, "a", JOURNAL_FINISHED, "exited");
	expect_state(f, "c", JOURNAL_FINISHED, "uncertain");
}

/* The same boot (the agent killed, the machine up): the page cache kept every record, so an id
 * with none was never begun: unknown, and the journal serves on. */
static void test_same_boot_not_in_doubt(void **state)
{
	struct fixture *f = *state;
	char boot[BOOT_ID_LEN + 1];
	struct sb_err err;

	snprintf(boot, sizeof boot, "%s", f->journal.boot);
	assert_int_equal(journal_begin(&f->journal, "a", 1, &err), 0);
	reopen_boot(f, boot);
	assert_false(f->journal.doubt);
	expect_state(f, "never-sent", JOURNAL_UNKNOWN, NULL);
	assert_int_equal(journal_begin(&f->journal, "b", 1, &err), 0);
}

/* A boot mark that is neither zeros nor whole (a crash of the machine in its write) names no boot:
 * in doubt. Zeros (an older agent's journal, every record synced) are not. */
static void test_damaged_boot_mark_in_doubt(void **state)
{
	struct fixture *f = *state;
	char path[128], boot[BOOT_ID_LEN + 1], zeros[128] = { 0 };
	int fd;

	snprintf(boot, sizeof boot, "%s", f->journal.boot);
	snprintf(path, sizeof path, "%s/.boot", f->dir);
	fd = open(path, O_WRONLY);
	assert_true(fd >= 0);
	assert_int_equal(pwrite(fd, zeros, sizeof zeros, 0), (ssize_t)sizeof zeros);
	reopen_boot(f, boot);
	assert_false(f->journal.doubt);
	assert_int_equal(pwrite(fd, "X", 1, 3), 1);
	close(fd);
	reopen_boot(f, boot);
	assert_true(f->journal.doubt);
	expect_state(f, "never-sent", JOURNAL_IN_DOUBT, NULL);
}

static void test_begin_is_a_slot(void **state)
{
	struct fixture *f = *state;
	struct journal_pending p;
	struct journal_entry e;
	struct sb_err err;

	assert_int_equal(journal_begin(&f->journal, "a", 4, &err), 0);
	assert_false(entry_file(f, "a.json"));
	assert_int_equal(journal_lookup(&f->journal, "a", &e, &err), 0);
	assert_int_equal(e.state, JOURNAL_RUNNING);
	assert_int_equal(e.generation, 4);
	journal_entry_free(&e);
	assert_int_equal(journal_begin(&f->journal, "a", 4, &err), -1);
	assert_int_equal(err.errnum, EEXIST);
	/* Written, not yet synced: nothing may report it finished. */
	assert_int_equal(journal_finish_write(&f->journal, "a", 4, "{\"status\":\"exited\"}", NULL, &p, &err), 0);
	assert_true(entry_file(f, "a.json"));
	expect_state(f, "a", JOURNAL_RUNNING, NULL);
	assert_int_equal(journal_finish_sync(&f->journal, "a", &p, &err), 0);
	expect_state(f, "a", JOURNAL_FINISHED, "exited");
	expect_state(f, "never", JOURNAL_UNKNOWN, NULL);
}

static void test_restart_closes_begun_as_uncertain(void **state)
{
	struct fixture *f = *state;
	struct sb_err err;

	assert_int_equal(journal_begin(&f->journal, "a", 1, &err), 0);
	assert_int_equal(journal_finish(&f->journal, "a", 1, "{\"status\":\"exited\"}", NULL, &err), 0);
	assert_int_equal(journal_begin(&f->journal, "b", 1, &err), 0);
	assert_int_equal(journal_finish(&f->journal, "b", 1, "{\"status\":\"exited\"}", NULL, &err), 0);
	/* c overwrites a's slot (a is finished on disk); the agent dies with c running. */
	assert_int_equal(journal_begin(&f->journal, "c", 1, &err), 0);
	reopen(f);
	expect_state(f, "a", JOURNAL_FINISHED, "exited");
	expect_state(f, "b", JOURNAL_FINISHED, "exited");
	expect_state(f, "c", JOURNAL_FINISHED, "uncertain");
	assert_true(entry_file(f, "c.json"));
	assert_int_equal(journal_begin(&f->journal, "c", 1, &err), -1);
	assert_int_equal(err.errnum, EEXIST);
	/* Opened again: nothing changes, the closed entry stays as it is. */
	reopen(f);
	expect_state(f, "c", JOURNAL_FINISHED, "uncertain");
}

static void test_torn_slot_never_started(void **state)
{
	struct fixture *f = *state;
	struct sb_err err;
	char path[128];
	int fd;

	assert_int_equal(journal_begin(&f->journal, "a", 1, &err), 0);
	/* A crash in the slot's write: its text and its digest disagree. */
	snprintf(path, sizeof path, "%s/.running", f->dir);
	fd = open(path, O_WRONLY);
	assert_true(fd >= 0);
	assert_int_equal(pwrite(fd, "X", 1, 70), 1);
	close(fd);
	reopen(f);
	expect_state(f, "a", JOURNAL_UNKNOWN, NULL);
	assert_false(entry_file(f, "a.json"));
}

static void test_open_slots_never_overwritten(void **state)
{
	struct fixture *f = *state;
	struct sb_err err;

	/* Two execs whose finish never came (a failed write): both slots stay theirs, and a third
	 * begin gets a file of its own. */
	assert_int_equal(journal_begin(&f->journal, "x", 1, &err), 0);
	assert_int_equal(journal_begin(&f->journal, "y", 1, &err), 0);
	assert_int_equal(journal_begin(&f->journal, "z", 1, &err), 0);
	assert_true(entry_file(f, "z.json"));
	expect_state(f, "x", JOURNAL_RUNNING, NULL);
	expect_state(f, "y", JOURNAL_RUNNING, NULL);
	expect_state(f, "z", JOURNAL_RUNNING, NULL);
	reopen(f);
	expect_state(f, "x", JOURNAL_FINISHED, "uncertain");
	expect_state(f, "y", JOURNAL_FINISHED, "uncertain");
	expect_state(f, "z", JOURNAL_FINISHED, "uncertain");
}

/* A begin that fell back to a file of its own is replaced only when synced: until then it reads
 * as running, like a slot's. */
static void test_fallback_finished_when_synced(void **state)
{
	struct fixture *f = *state;
	struct journal_pending p;
	struct sb_err err;

	assert_int_equal(journal_begin(&f->journal, "x", 1, &err), 0);
	assert_int_equal(journal_begin(&f->journal, "y", 1, &err), 0);
	assert_int_equal(journal_begin(&f->journal, "z", 1, &err), 0);
	assert_int_equal(journal_finish_write(&f->journal, "z", 1, "{\"status\":\"exited\"}", NULL, &p, &err), 0);
	expect_state(f, "z", JOURNAL_RUNNING, NULL);
	assert_int_equal(journal_finish_sync(&f->journal, "z", &p, &err), 0);
	expect_state(f, "z", JOURNAL_FINISHED, "exited");
	reopen(f);
	expect_state(f, "z", JOURNAL_FINISHED, "exited");
}

/* Past the cap, the oldest entries go, never those of the execs in the slots (the last two). */
static void test_prune_spares_the_slots(void **state)
{
	struct fixture *f = *state;
	size_t big = 25u << 20;
	char *result = malloc(big + 16);
	struct sb_err err;
	ino_t a_ino = 0;
	off_t size = -1;

	assert_non_null(result);
	memset(result, 'x', big + 16);
	memcpy(result, "{\"o\":\"", 6);
	memcpy(result + big, "\"}", 3);
	for (const char *const *id = (const char *const[]){ "a", "b", "c", NULL }; *id; id++) {
		assert_int_equal(journal_begin(&f->journal, *id, 1, &err), 0);
		finish_pruned(f, *id, result);
		if (a_ino == 0)
			a_ino = file_ino(f, "a.json", NULL);
	}
	free(result);
	assert_false(entry_file(f, "a.json"));
	assert_true(entry_file(f, "b.json"));
	assert_true(entry_file(f, "c.json"));
	/* a's file is kept, emptied (its 25 MiB given back), under a name no lookup reads. */
	assert_int_equal(file_ino(f, ".freed.0", &size), a_ino);
	assert_int_equal(size, 0);
	expect_state(f, "a", JOURNAL_UNKNOWN, NULL);
}

/* A prune leaves at most JOURNAL_PRUNE_TO, the oldest entries gone first: nine entries of just
 * under 8 MiB pass the cap at the ninth, which leaves six (the newest), not eight, so the next scan
 * of the directory is three entries away instead of at the next call. */
static void test_prune_leaves_room(void **state)
{
	struct fixture *f = *state;
	size_t big = (8u << 20) - 4096; /* with its entry's own members, just under 8 MiB */
	char *result = malloc(big + 16);
	struct sb_err err;
	char id[16], name[32]; /* room for any int: -Wformat-truncation at -O1 */

	/* At most two pruned entries kept: the third is removed, as before the keeping. */
	f->journal.freed_max = 2;
	assert_non_null(result);
	memset(result, 'x', big + 16);
	memcpy(result, "{\"o\":\"", 6);
	memcpy(result + big, "\"}", 3);
	for (int i = 0; i < 9; i++) {
		snprintf(id, sizeof id, "e%d", i);
		assert_int_equal(journal_begin(&f->journal, id, 1, &err), 0);
		finish_pruned(f, id, result);
	}
	free(result);
	assert_true(f->journal.bytes <= JOURNAL_PRUNE_TO);
	for (int i = 0; i < 9; i++) {
		snprintf(name, sizeof name, "e%d.json", i);
		assert_int_equal(entry_file(f, name), i >= 3);
	}
	assert_true(entry_file(f, ".freed.0"));
	assert_true(entry_file(f, ".freed.1"));
	assert_false(entry_file(f, ".freed.2"));
}

/* ---- the ends ---- */

#define END_RESULT "{\"exec_id\":\"a\",\"status\":\"exited\",\"exit_code\":3,\"stdout\":\"out\\n\"}"
#define END_RECEIPT "{\"exec_id\":\"a\",\"mac\":\"0123\",\"status\":\"exited\"}"

static void file_put(const char *dir, const char *name, const char *text)
{
	char path[128];
	FILE *fp;

	snprintf(path, sizeof path, "%s/%s", dir, name);
	fp = fopen(path, "w");
	assert_non_null(fp);
	assert_int_equal(fputs(text, fp) >= 0, 1);
	assert_int_equal(fclose(fp), 0);
}

/* The file's bytes, or NULL when it does not exist (malloc'd). */
static char *file_get(const char *dir, const char *name)
{
	char path[128], *buf = calloc(1, 4096);
	FILE *fp;

	snprintf(path, sizeof path, "%s/%s", dir, name);
	fp = fopen(path, "r");
	assert_non_null(buf);
	if (fp == NULL) {
		free(buf);
		return NULL;
	}
	assert_true(fread(buf, 1, 4095, fp) < 4095);
	fclose(fp);
	return buf;
}

/* Exec a begun and ended in its slot, its receipt file written first (as serve does). */
static void end_a(struct fixture *f)
{
	struct sb_err err;

	assert_int_equal(journal_begin(&f->journal, "a", 5, &err), 0);
	file_put(f->rdir, "a.json", END_RECEIPT);
	assert_int_equal(journal_end(&f->journal, "a", 5, END_RESULT, END_RECEIPT, &err), 1);
}

static void expect_a_finished(struct fixture *f)
{
	struct journal_entry e;
	struct sb_err err;
	char *r;

	expect_state(f, "a", JOURNAL_FINISHED, "exited");
	assert_int_equal(journal_lookup(&f->journal, "a", &e, &err), 0);
	assert_int_equal(e.generation, 5);
	assert_string_equal(e.receipt_text, END_RECEIPT);
	journal_entry_free(&e);
	r = file_get(f->rdir, "a.json");
	assert_non_null(r);
	assert_string_equal(r, END_RECEIPT);
	free(r);
}

/* a's entry file as the end wrote it: whole JSON (no duplicate member), its outcome the end's. */
static void expect_a_on_disk(const struct fixture *f)
{
	json_t *disk = entry_on_disk(f, "a.json");

	assert_int_equal(json_integer_value(json_object_get(json_object_get(disk, "result"), "exit_code")), 3);
	json_decref(disk);
}

static void end_bytes_damage(struct fixture *f, int slot, off_t at, const char *bytes, size_t len)
{
	char path[128];
	int fd;

	snprintf(path, sizeof path, "%s/.ends", f->dir);
	fd = open(path, O_WRONLY);
	assert_true(fd >= 0);
	assert_int_equal(pwrite(fd, bytes, len, (off_t)slot * 65536 + at), (ssize_t)len);
	close(fd);
}

/* a ended, then its entry's bytes put under b's name as well: what a crash of the machine without a
 * filesystem journal could leave (a kept entry's reused file under its old name). */
static void a_ended_and_copied_to_b(struct fixture *f)
{
	char *text;

	end_a(f);
	journal_settle_wait(&f->journal);
	text = file_get(f->dir, "a.json");
	assert_non_null(text);
	file_put(f->dir, "b.json", text);
	free(text);
}

/* An entry the machine's crash tore (nothing syncs one, issue 32) or filled with another exec's
 * bytes: on the same boot it is damaged (an error: nothing lost it), from another boot the record
 * may be lost: in doubt, answered uncertain, never an error and never the other exec's outcome. */
static void test_other_boot_damaged_entry_in_doubt(void **state)
{
	struct fixture *f = *state;
	struct journal_entry e;
	struct sb_err err;

	a_ended_and_copied_to_b(f);
	file_put(f->dir, "c.json", "{\"exec_id\":\"c\",\"sta"); /* torn */
	assert_int_equal(journal_lookup(&f->journal, "c", &e, &err), -1);
	assert_non_null(strstr(err.msg, "damaged"));
	reopen_boot(f, OTHER_BOOT);
	expect_state(f, "b", JOURNAL_IN_DOUBT, NULL);
	expect_state(f, "c", JOURNAL_IN_DOUBT, NULL);
	expect_a_finished(f);
}

/* Ended: reported finished at once, from its file, the same bytes as its end's. */
static void test_end_in_slot(void **state)
{
	struct fixture *f = *state;

	end_a(f);
	expect_a_finished(f);
	expect_a_on_disk(f);
	journal_settle_wait(&f->journal);
	reopen(f);
	expect_a_finished(f);
}

/* A power loss after the end's sync, before the settler synced the files: the entry lost (or torn),
 * the receipt lost. The restart writes both from the end: the reported outcome stands. */
static void test_end_restores_lost_files(void **state)
{
	struct fixture *f = *state;
	char path[128];

	end_a(f);
	snprintf(path, sizeof path, "%s/a.json", f->dir);
	assert_int_equal(truncate(path, 10), 0);
	snprintf(path, sizeof path, "%s/a.json", f->rdir);
	assert_int_equal(unlink(path), 0);
	reopen(f);
	expect_a_finished(f);
	/* And a receipt torn to other bytes of the same length is replaced, not trusted. */
	file_put(f->rdir, "a.json", "{\"exec_id\":\"a\",\"mac\":\"9999\",\"status\":\"exited\"}");
	reopen(f);
	expect_a_finished(f);
}

/* The end through the spare made ahead (issue 32): the entry lands under its own name, the spare is
 * used up, and the next spare is made anew. A spare an earlier life left with other bytes in it is
 * removed, never written over: the entry read back is exactly the end's, with nothing after it. */
static void test_end_through_the_spare(void **state)
{
	struct fixture *f = *state;
	struct sb_err err;
	char *left;

	file_put(f->dir, ".spare.entry",
		 "{\"exec_id\":\"zz\",\"state\":\"finished\",\"stale\":\"bytes after the entry\"}");
	assert_int_equal(journal_spare_make(&f->journal, &err), 0);
	left = file_get(f->dir, ".spare.entry");
	assert_non_null(left);
	assert_string_equal(left, "");
	free(left);
	end_a(f);
	assert_null(file_get(f->dir, ".spare.entry"));
	expect_a_on_disk(f);
	expect_a_finished(f);
	assert_int_equal(journal_spare_make(&f->journal, &err), 0);
	left = file_get(f->dir, ".spare.entry");
	assert_non_null(left);
	free(left);
	/* A restart neither reads the spare as an exec nor minds it. */
	journal_settle_wait(&f->journal);
	reopen(f);
	expect_a_finished(f);
	left = file_get(f->dir, ".spare.entry");
	assert_non_null(left);
	assert_string_equal(left, "");
	free(left);
}

/* The next spare is the oldest entry a prune kept (issue 32): no inode allocated, none freed. The
 * entry written through it is exactly the end's, its file a's old one. */
static void test_spare_from_a_pruned_entry(void **state)
{
	struct fixture *f = *state;
	char *big = malloc(25u << 20), *left;
	struct sb_err err;
	ino_t kept;

	assert_non_null(big);
	memset(big, 'x', 25u << 20);
	memcpy(big, "{\"o\":\"", 6);
	memcpy(big + (25u << 20) - 3, "\"}", 3);
	for (const char *const *id = (const char *const[]){ "p", "q", "r", NULL }; *id; id++) {
		assert_int_equal(journal_begin(&f->journal, *id, 1, &err), 0);
		finish_pruned(f, *id, big);
	}
	free(big);
	kept = file_ino(f, ".freed.0", NULL);
	assert_true(kept != 0);
	assert_int_equal(journal_spare_make(&f->journal, &err), 0);
	assert_int_equal(file_ino(f, ".spare.entry", NULL), kept);
	assert_int_equal(file_ino(f, ".freed.0", NULL), 0);
	assert_int_equal(f->journal.freed_lo, f->journal.freed_hi);
	end_a(f);
	assert_int_equal(file_ino(f, "a.json", NULL), kept);
	expect_a_on_disk(f);
	expect_a_finished(f);
	/* None kept: a new file, as before. */
	assert_int_equal(journal_spare_make(&f->journal, &err), 0);
	left = file_get(f->dir, ".spare.entry");
	assert_non_null(left);
	assert_string_equal(left, "");
	free(left);
}

/* A prune that lands between a lookup's open of an entry and its read (journal.c entry_keep_freed:
 * renamed away, then emptied). This program's json_loadfd stands in for jansson's (a definition in
 * the program wins over the shared library's) and does that prune first when armed. */
static const char *prune_at_read; /* the directory whose a.json is pruned at the next read */

json_t *json_loadfd(int input, size_t flags, json_error_t *error)
{
	size_t len = 0, cap = 1 << 16;
	char *buf = malloc(cap), from[160], to[160];
	ssize_t n;
	json_t *obj;

	assert_non_null(buf);
	if (prune_at_read != NULL) {
		snprintf(from, sizeof from, "%s/a.json", prune_at_read);
		snprintf(to, sizeof to, "%s/.freed.0", prune_at_read);
		assert_int_equal(rename(from, to), 0);
		assert_int_equal(truncate(to, 0), 0);
		prune_at_read = NULL;
	}
	while ((n = read(input, buf + len, cap - len)) > 0)
		if ((len += (size_t)n) == cap) {
			buf = realloc(buf, cap *= 2);
			assert_non_null(buf);
		}
	obj = json_loadb(buf, len, flags, error);
	free(buf);
	return obj;
}

/* The lookup then says what it would have said had the prune come first: no entry, never a
 * damaged one (which a Query would report as an error). */
static void test_entry_pruned_while_read(void **state)
{
	struct fixture *f = *state;

	end_a(f);
	journal_settle_wait(&f->journal);
	expect_a_finished(f);
	prune_at_read = f->dir;
	expect_state(f, "a", JOURNAL_UNKNOWN, NULL);
	assert_null(prune_at_read);
}

/* An entry file that names another exec is never read as this one's outcome: it is damaged (a
 * crash of the machine without a filesystem journal could leave a kept entry's reused file under
 * its old name). */
static void test_entry_of_another_exec_refused(void **state)
{
	struct fixture *f = *state;
	struct journal_entry e;
	struct sb_err err;

	a_ended_and_copied_to_b(f);
	assert_int_equal(journal_lookup(&f->journal, "b", &e, &err), -1);
	assert_non_null(strstr(err.msg, "names another exec"));
	expect_a_finished(f);
}

/* An earlier life's kept entries are taken over by the next (issue 32). One that still holds bytes
 * (a crash between the prune's rename and its emptying) is emptied before it is the spare: the
 * entry written through it is exactly the end's. A number missing from the range is skipped; a
 * kept name that is not a plain file (a link here) is removed, never followed, and the spare made
 * anew. Names too far apart for the bound are removed at the open. */
static void test_kept_entries_after_restart(void **state)
{
	struct fixture *f = *state;
	char path[160], stale[3000], *left;
	struct sb_err err;
	ino_t five;

	/* Longer than the entry that goes into it: a byte left over would show. */
	memset(stale, 's', sizeof stale - 1);
	stale[sizeof stale - 1] = '\0';
	file_put(f->dir, ".freed.5", stale);
	file_put(f->dir, ".freed.8", "");
	file_put(f->dir, "precious", "kept");
	snprintf(path, sizeof path, "%s/.freed.7", f->dir);
	assert_int_equal(symlink("precious", path), 0);
	five = file_ino(f, ".freed.5", NULL);
	reopen(f);
	assert_int_equal(f->journal.freed_lo, 5);
	assert_int_equal(f->journal.freed_hi, 9);
	assert_int_equal(journal_spare_make(&f->journal, &err), 0);
	assert_int_equal(file_ino(f, ".spare.entry", NULL), five);
	end_a(f);
	expect_a_on_disk(f);
	expect_a_finished(f);
	/* 6 is missing: a new spare. */
	assert_int_equal(journal_spare_make(&f->journal, &err), 0);
	assert_true(file_ino(f, ".spare.entry", NULL) != 0);
	assert_int_equal(f->journal.freed_lo, 7);
	/* The spare is there already: 7 waits. */
	assert_int_equal(journal_spare_make(&f->journal, &err), 0);
	assert_int_equal(f->journal.freed_lo, 7);
	assert_int_equal(unlink(strcat(strcpy(path, f->dir), "/.spare.entry")), 0);
	spare_file_close(&f->journal.spare);
	spare_file_init(&f->journal.spare, ".spare.entry");
	/* 7 is a link: removed, not followed; the spare made anew; 8 next. */
	assert_int_equal(journal_spare_make(&f->journal, &err), 0);
	assert_int_equal(file_ino(f, ".freed.7", NULL), 0);
	left = file_get(f->dir, "precious");
	assert_string_equal(left, "kept");
	free(left);
	assert_int_equal(f->journal.freed_lo, 8);
	/* Too far apart for the bound: removed at the open. */
	file_put(f->dir, ".freed.40000", "");
	reopen(f);
	assert_int_equal(f->journal.freed_lo, f->journal.freed_hi);
	assert_false(entry_file(f, ".freed.8"));
	assert_false(entry_file(f, ".freed.40000"));
	/* Names it never makes are left alone. */
	file_put(f->dir, ".freed.01", "");
	file_put(f->dir, ".freed.x", "");
	reopen(f);
	assert_int_equal(f->journal.freed_lo, f->journal.freed_hi);
	assert_true(entry_file(f, ".freed.01"));
}

/* The receipt written into a room reserved past its end (receipt.c room_write, issue 32): the
 * settler gives the room's spare blocks back when it syncs the receipt, after the result, so the
 * call never pays the truncate. The receipt's bytes are unchanged. */
static void test_settler_gives_the_room_back(void **state)
{
	struct fixture *f = *state;
	struct sb_err err;
	struct stat st;
	char path[128];
	int fd;

	snprintf(path, sizeof path, "%s/a.json", f->rdir);
	fd = open(path, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
	assert_true(fd >= 0);
	assert_int_equal(fd_reserve(fd, 8192), 0);
	assert_int_equal(pwrite(fd, END_RECEIPT, strlen(END_RECEIPT), 0), (ssize_t)strlen(END_RECEIPT));
	assert_int_equal(fstat(fd, &st), 0);
	/* Where the filesystem cannot reserve past the end the room was allocated up to it, and
	 * room_write cuts it as it always did. */
	if (st.st_size != (off_t)strlen(END_RECEIPT))
		assert_int_equal(ftruncate(fd, (off_t)strlen(END_RECEIPT)), 0);
	close(fd);
	assert_true(st.st_blocks * 512 >= 8192);
	assert_int_equal(journal_begin(&f->journal, "a", 5, &err), 0);
	assert_int_equal(journal_end(&f->journal, "a", 5, END_RESULT, END_RECEIPT, &err), 1);
	journal_settle_wait(&f->journal);
	assert_int_equal(stat(path, &st), 0);
	assert_int_equal(st.st_size, strlen(END_RECEIPT));
	assert_true(st.st_blocks * 512 <= 4096);
	expect_a_finished(f);
}

/* A kill -9 or power loss between the end's write and its sync: a torn end (its digest disagrees)
 * or half of it written (the rest what the slot held). Never the result: closed as uncertain. */
static void test_torn_end_is_uncertain(void **state)
{
	struct fixture *f = *state;
	char path[128];

	end_a(f);
	end_bytes_damage(f, 0, 90, "X", 1);
	snprintf(path, sizeof path, "%s/a.json", f->dir);
	assert_int_equal(unlink(path), 0);
	reopen(f);
	expect_state(f, "a", JOURNAL_FINISHED, "uncertain");
}

static void test_half_end_is_uncertain(void **state)
{
	struct fixture *f = *state;
	char path[128], zeros[64] = { 0 };

	end_a(f);
	/* The end is ~200 bytes: its second half never reached the disk. */
	end_bytes_damage(f, 0, 100, zeros, sizeof zeros);
	snprintf(path, sizeof path, "%s/a.json", f->dir);
	assert_int_equal(unlink(path), 0);
	reopen(f);
	expect_state(f, "a", JOURNAL_FINISHED, "uncertain");
}

/* A reused slot keeps the older exec's end (a's) beside the new begin (c's): the restart closes c as
 * uncertain, never as a's outcome, and a stays as it was. */
static void test_stale_end_never_read(void **state)
{
	struct fixture *f = *state;
	struct sb_err err;

	end_a(f);
	assert_int_equal(journal_begin(&f->journal, "b", 1, &err), 0);
	assert_int_equal(journal_end(&f->journal, "b", 1, "{\"status\":\"exited\"}", NULL, &err), 1);
	assert_int_equal(journal_begin(&f->journal, "c", 1, &err), 0); /* a's slot, once a's files are synced */
	reopen(f);
	expect_state(f, "c", JOURNAL_FINISHED, "uncertain");
	expect_state(f, "b", JOURNAL_FINISHED, "exited");
	expect_a_finished(f);
}

/* An entry the agent replaced durably after the end (a receipt that could not be synced: the
 * result made uncertain) outranks the end: a restart keeps it, and restores no receipt. */
static void test_whole_entry_outranks_end(void **state)
{
	struct fixture *f = *state;
	struct sb_err err;
	char *r;

	assert_int_equal(journal_begin(&f->journal, "a", 5, &err), 0);
	assert_int_equal(journal_end(&f->journal, "a", 5, END_RESULT, END_RECEIPT, &err), 1);
	journal_settle_wait(&f->journal);
	file_put(f->dir, "a.json",
		 "{\"exec_id\":\"a\",\"generation\":5,\"state\":\"finished\",\"result\":{\"status\":\"uncertain\"}}");
	reopen(f);
	expect_state(f, "a", JOURNAL_FINISHED, "uncertain");
	r = file_get(f->rdir, "a.json");
	assert_null(r);
}

/* fsync and fdatasync as this program's own (a definition here wins over libc's for the journal's
 * calls), counted while armed: the end's path and the settler sync nothing (issue 32). */
static bool syncs_counted;
static int syncs;

int fsync(int fd)
{
	syncs += syncs_counted;
	return (int)syscall(SYS_fsync, fd);
}

int fdatasync(int fd)
{
	syncs += syncs_counted;
	return (int)syscall(SYS_fdatasync, fd);
}

/* A begin, its end, its entry file and its receipt's room given back: page-cache writes only, no
 * sync at all (the settler's four fsyncs cut, issue 32; a crash of the machine is the boot mark's,
 * test_other_boot_*). A slot is free once the settler has been at it, even when the receipt file
 * was gone (b's: nothing waits to be made durable): the next two begins take both slots, no file of
 * their own, the third gets one, and a restart on the same boot still answers a and b. */
static void test_ended_without_a_sync(void **state)
{
	struct fixture *f = *state;
	struct sb_err err;

	syncs = 0;
	syncs_counted = true;
	end_a(f);
	journal_settle_wait(&f->journal);
	syncs_counted = false;
	assert_int_equal(syncs, 0);
	expect_a_finished(f);
	assert_int_equal(journal_begin(&f->journal, "b", 1, &err), 0);
	assert_int_equal(journal_end(&f->journal, "b", 1, "{\"status\":\"exited\"}", END_RECEIPT, &err), 1);
	journal_settle_wait(&f->journal);
	assert_int_equal(journal_begin(&f->journal, "c", 1, &err), 0);
	assert_int_equal(journal_begin(&f->journal, "d", 1, &err), 0);
	assert_false(entry_file(f, "c.json"));
	assert_false(entry_file(f, "d.json"));
	assert_int_equal(journal_begin(&f->journal, "e", 1, &err), 0);
	assert_true(entry_file(f, "e.json")); /* both slots open: a file of its own */
	reopen(f);
	expect_a_finished(f);
	expect_state(f, "b", JOURNAL_FINISHED, "exited");
	expect_state(f, "c", JOURNAL_FINISHED, "uncertain");
	expect_state(f, "d", JOURNAL_FINISHED, "uncertain");
	expect_state(f, "e", JOURNAL_FINISHED, "uncertain");
}

/* Too big for its slot's end: the files' own syncs (journal_finish_write), the slot open till then. */
static void test_big_end_takes_the_files(void **state)
{
	struct fixture *f = *state;
	size_t big = 70u << 10;
	char *result = malloc(big + 16);
	struct sb_err err;

	assert_non_null(result);
	memset(result, 'x', big + 16);
	memcpy(result, "{\"o\":\"", 6);
	memcpy(result + big, "\"}", 3);
	assert_int_equal(journal_begin(&f->journal, "a", 1, &err), 0);
	assert_int_equal(journal_end(&f->journal, "a", 1, result, NULL, &err), 0);
	assert_false(entry_file(f, "a.json"));
	expect_state(f, "a", JOURNAL_RUNNING, NULL);
	assert_int_equal(journal_finish(&f->journal, "a", 1, result, NULL, &err), 0);
	free(result);
	expect_state(f, "a", JOURNAL_FINISHED, NULL);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_finished_entry_reads_back, setup, teardown),
		cmocka_unit_test_setup_teardown(test_finished_without_receipt, setup, teardown),
		cmocka_unit_test_setup_teardown(test_result_not_an_object_refused, setup, teardown),
		cmocka_unit_test_setup_teardown(test_begin_is_a_slot, setup, teardown),
		cmocka_unit_test_setup_teardown(test_restart_closes_begun_as_uncertain, setup, teardown),
		cmocka_unit_test_setup_teardown(test_torn_slot_never_started, setup, teardown),
		cmocka_unit_test_setup_teardown(test_open_slots_never_overwritten, setup, teardown),
		cmocka_unit_test_setup_teardown(test_fallback_finished_when_synced, setup, teardown),
		cmocka_unit_test_setup_teardown(test_prune_spares_the_slots, setup, teardown),
		cmocka_unit_test_setup_teardown(test_prune_leaves_room, setup, teardown),
		cmocka_unit_test_setup_teardown(test_end_in_slot, setup, teardown),
		cmocka_unit_test_setup_teardown(test_end_restores_lost_files, setup, teardown),
		cmocka_unit_test_setup_teardown(test_end_through_the_spare, setup, teardown),
		cmocka_unit_test_setup_teardown(test_spare_from_a_pruned_entry, setup, teardown),
		cmocka_unit_test_setup_teardown(test_kept_entries_after_restart, setup, teardown),
		cmocka_unit_test_setup_teardown(test_entry_pruned_while_read, setup, teardown),
		cmocka_unit_test_setup_teardown(test_entry_of_another_exec_refused, setup, teardown),
		cmocka_unit_test_setup_teardown(test_torn_end_is_uncertain, setup, teardown),
		cmocka_unit_test_setup_teardown(test_half_end_is_uncertain, setup, teardown),
		cmocka_unit_test_setup_teardown(test_stale_end_never_read, setup, teardown),
		cmocka_unit_test_setup_teardown(test_whole_entry_outranks_end, setup, teardown),
		cmocka_unit_test_setup_teardown(test_ended_without_a_sync, setup, teardown),
		cmocka_unit_test_setup_teardown(test_big_end_takes_the_files, setup, teardown),
		cmocka_unit_test_setup_teardown(test_other_boot_lost_begin_in_doubt, setup, teardown),
		cmocka_unit_test_setup_teardown(test_other_boot_whole_records_kept, setup, teardown),
		cmocka_unit_test_setup_teardown(test_other_boot_damaged_entry_in_doubt, setup, teardown),
		cmocka_unit_test_setup_teardown(test_same_boot_not_in_doubt, setup, teardown),
		cmocka_unit_test_setup_teardown(test_damaged_boot_mark_in_doubt, setup, teardown),
		cmocka_unit_test_setup_teardown(test_settler_gives_the_room_back, setup, teardown),
	};
	return cmocka_run_group_tests_name("journal", tests, NULL, NULL);
}
