/* Unit tests for sandbox-agent/journal.c: a finished entry, built around the result's own text
 * (no parse of it), reads back as the same result and receipt, is valid JSON with no duplicate
 * member, and a result that is not a JSON object is refused before anything is written. */
#include <setjmp.h>
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
#include <unistd.h>

#include "journal.h"

struct fixture {
	char dir[64];
	struct privdir journal;
};

static int setup(void **state)
{
	struct fixture *f = calloc(1, sizeof *f);
	struct sb_err err;

	assert_non_null(f);
	snprintf(f->dir, sizeof f->dir, "/tmp/test-journal.XXXXXX");
	assert_non_null(mkdtemp(f->dir));
	assert_int_equal(chmod(f->dir, 0700), 0);
	assert_int_equal(privdir_open(&f->journal, f->dir, false, 077, &err), 0);
	*state = f;
	return 0;
}

static int teardown(void **state)
{
	struct fixture *f = *state;
	char path[128];

	for (const char *const *n = (const char *const[]){ "e1.json", "e2.json", "e3.json", NULL }; *n; n++) {
		snprintf(path, sizeof path, "%s/%s", f->dir, *n);
		unlink(path);
	}
	privdir_close(&f->journal);
	rmdir(f->dir);
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

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_finished_entry_reads_back, setup, teardown),
		cmocka_unit_test_setup_teardown(test_finished_without_receipt, setup, teardown),
		cmocka_unit_test_setup_teardown(test_result_not_an_object_refused, setup, teardown),
	};
	return cmocka_run_group_tests_name("journal", tests, NULL, NULL);
}
