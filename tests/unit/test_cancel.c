/* Unit tests for manager/core/cancel.c: the cancels kept for calls not running yet (a tagged cancel
 * that comes first is taken once, by the call of that session and tag; the table's bounds). No
 * sandbox is live, so every cancel here finds nothing running. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "manager.h"

static struct manager *manager_new(void)
{
	struct manager *m = calloc(1, sizeof *m);

	assert_non_null(m);
	m->cfg.max_timeout = 600;
	pthread_mutex_init(&m->lock, NULL);
	return m;
}

static int cancel(struct manager *m, const char *session, const char *tag, char exec_id[65], struct sb_err *err)
{
	exec_id[0] = '\0';
	return cancel_session_call(m, session, tag, "cancelled by request", exec_id, 65, err);
}

static bool take(struct manager *m, const char *session, const char *tag, const char *exec_id)
{
	bool taken;

	pthread_mutex_lock(&m->lock);
	taken = cancel_pending_take(m, session, tag, exec_id);
	pthread_mutex_unlock(&m->lock);
	return taken;
}

static void taken_once_by_its_call(void **state)
{
	struct manager *m = manager_new();
	struct sb_err err;
	char id[65];

	(void)state;
	assert_int_equal(cancel(m, "s1", NULL, id, &err), 0); /* untagged: nothing runs, nothing kept */
	assert_false(take(m, "s1", "", "e0"));
	assert_int_equal(cancel(m, "s1", "mcp-1-1", id, &err), 2);
	assert_int_equal(cancel(m, "s1", "mcp-1-1", id, &err), 2); /* repeated: still the one waiting */
	assert_false(take(m, "s2", "mcp-1-1", "e1"));          /* another session's call */
	assert_false(take(m, "s1", "mcp-1-2", "e1"));          /* another tag */
	assert_true(take(m, "s1", "mcp-1-1", "e1"));
	assert_false(take(m, "s1", "mcp-1-1", "e2"));          /* once: never a second call */
	assert_int_equal(cancel(m, "s1", "mcp-1-1", id, &err), 1);
	assert_string_equal(id, "e1");                          /* the repeat hears which exec */
	free(m);
}

static void bounded(void **state)
{
	struct manager *m = manager_new();
	struct sb_err err;
	char id[65], tag[32];

	(void)state;
	assert_int_equal(cancel(m, "s1", "taken", id, &err), 2);
	assert_true(take(m, "s1", "taken", "e1"));
	for (int i = 1; i < CANCEL_PENDING_MAX; i++) {
		snprintf(tag, sizeof tag, "t-%d", i);
		assert_int_equal(cancel(m, "s1", tag, id, &err), 2);
	}
	/* full: the taken one makes room, the waiting ones stay */
	assert_int_equal(cancel(m, "s1", "one-more", id, &err), 2);
	assert_int_equal(cancel(m, "s1", "over", id, &err), -1);
	assert_non_null(strstr(err.msg, "64 cancels already wait for their calls"));
	assert_int_equal(cancel(m, "s1", "taken", id, &err), -1); /* its answer made the room */
	assert_true(take(m, "s1", "t-1", "e2"));
	/* past its lifetime an entry is no cancel at all, and its slot is free */
	for (int i = 0; i < CANCEL_PENDING_MAX; i++)
		if (strcmp(m->pending[i].tag, "t-2") == 0)
			m->pending[i].until_ms = 1;
	assert_false(take(m, "s1", "t-2", "e3"));
	free(m);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(taken_once_by_its_call),
		cmocka_unit_test(bounded),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
