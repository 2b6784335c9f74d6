/* Unit tests for manager/core/cancel.c: the cancels kept for calls not running yet (a tagged cancel
 * that comes first is taken once, by the call of that session and tag; the table's bounds; no
 * sandbox is live there, so those cancels find nothing running); and a cancel that comes while the
 * call's thread asks the runtime for evidence (execpath.c call_sandbox_proven_gone): its stop waits
 * for the probe's end, so stop() and evidence() never run on one handle at once. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "call.h"
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

/* The table's bound, over many sessions (each under its own bound, below). */
static void bounded(void **state)
{
	struct manager *m = manager_new();
	struct sb_err err;
	char id[65], tag[32], session[16];

	(void)state;
	assert_int_equal(cancel(m, "s0", "taken", id, &err), 2);
	assert_true(take(m, "s0", "taken", "e1"));
	for (int i = 1; i < CANCEL_PENDING_MAX; i++) {
		snprintf(tag, sizeof tag, "t-%d", i);
		snprintf(session, sizeof session, "s%d", i / CANCEL_PENDING_PER_SESSION + 1);
		assert_int_equal(cancel(m, session, tag, id, &err), 2);
	}
	/* full: the taken one makes room, the waiting ones stay */
	assert_int_equal(cancel(m, "s100", "one-more", id, &err), 2);
	assert_int_equal(cancel(m, "s100", "over", id, &err), -1);
	assert_non_null(strstr(err.msg, "64 cancels already wait for their calls"));
	assert_int_equal(cancel(m, "s0", "taken", id, &err), -1); /* its answer made the room */
	assert_true(take(m, "s1", "t-1", "e2"));
	/* past its lifetime an entry is no cancel at all, and its slot is free */
	for (int i = 0; i < CANCEL_PENDING_MAX; i++)
		if (strcmp(m->pending[i].tag, "t-2") == 0)
			m->pending[i].until_ms = 1;
	assert_false(take(m, "s1", "t-2", "e3"));
	free(m);
}

/* Issue 27: a tagged cancel that comes after its call ended (the answer was on its way to the
 * client) found nothing running and was kept for a call that would never come, 12 minutes each:
 * 64 of them, one client's, refused every other session's cancel. */
static void late_cancels_keep_nothing(void **state)
{
	struct manager *m = manager_new();
	struct sb_err err;
	char id[65], tag[32], exec_id[32];

	(void)state;
	for (int i = 0; i < CANCEL_PENDING_MAX; i++) {
		snprintf(tag, sizeof tag, "late-%d", i);
		snprintf(exec_id, sizeof exec_id, "e%d", i);
		cancel_call_ended(m, "s1", tag, exec_id); /* the call ended, its answer is on its way */
		assert_int_equal(cancel(m, "s1", tag, id, &err), 1); /* then its cancel: that exec, ended */
		assert_string_equal(id, exec_id);
	}
	/* another session's cancel that comes first is kept, as before */
	assert_int_equal(cancel(m, "s2", "first", id, &err), 2);
	assert_true(take(m, "s2", "first", "f1"));
	/* a late cancel racing its call's end (after its sandbox was released, before the end was
	 * noted) is taken by that end: it waits for nothing */
	assert_int_equal(cancel(m, "s3", "race", id, &err), 2);
	cancel_call_ended(m, "s3", "race", "r1");
	assert_int_equal(cancel(m, "s3", "race", id, &err), 1);
	assert_string_equal(id, "r1");
	assert_false(take(m, "s3", "race", "r2"));
	free(m);
}

/* Cancels of tags no call ever carries (or whose call's end was forgotten): one session keeps at
 * most CANCEL_PENDING_PER_SESSION waiting, so it cannot take the room of the others. */
static void bounded_per_session(void **state)
{
	struct manager *m = manager_new();
	struct sb_err err;
	char id[65], tag[32];

	(void)state;
	for (int i = 0; i < CANCEL_PENDING_PER_SESSION; i++) {
		snprintf(tag, sizeof tag, "never-%d", i);
		assert_int_equal(cancel(m, "s1", tag, id, &err), 2);
	}
	assert_int_equal(cancel(m, "s1", "one-more", id, &err), -1);
	assert_non_null(strstr(err.msg, "session s1 has 8 cancels waiting for their calls"));
	for (int s = 2; s < 2 + (CANCEL_PENDING_MAX - CANCEL_PENDING_PER_SESSION) / CANCEL_PENDING_PER_SESSION; s++) {
		char session[16];

		snprintf(session, sizeof session, "s%d", s);
		for (int i = 0; i < CANCEL_PENDING_PER_SESSION; i++) {
			snprintf(tag, sizeof tag, "t-%d", i);
			assert_int_equal(cancel(m, session, tag, id, &err), 2);
		}
	}
	free(m);
}

/* A backend whose evidence() lets a cancel in, as a client's would come on another thread while the
 * probe waits, and counts what ran when. */
static struct {
	struct manager *m;
	int stops, evidences, stops_during_probe, gone;
	bool in_probe;
} fake;

static int fake_stop(struct backend *be, struct sandbox_handle *h, struct sb_err *err)
{
	(void)be, (void)h, (void)err;
	fake.stops++;
	if (fake.in_probe)
		fake.stops_during_probe++;
	return 0;
}

static int fake_evidence(struct backend *be, struct sandbox_handle *h, int timeout_ms, struct sb_err *err)
{
	char id[65];
	struct sb_err cerr;

	(void)be, (void)timeout_ms;
	fake.in_probe = true;
	fake.evidences++;
	/* The client's cancel, mid-probe: it finds the call running, and its stop is deferred. */
	assert_int_equal(cancel_session_call(fake.m, "s1", "mcp-1-1", "cancelled by request", id, sizeof id, &cerr), 1);
	assert_string_equal(id, "e1");
	fake.in_probe = false;
	if (fake.gone) {
		snprintf(h->evidence, sizeof h->evidence, "fake: gone");
		return 0;
	}
	return sb_fail(err, ETIMEDOUT, "fake: still running");
}

static const struct backend_ops fake_ops = { .name = "fake", .stop = fake_stop, .evidence = fake_evidence };

static void cancel_during_probe(int gone)
{
	struct manager *m = manager_new();
	struct backend be = { &fake_ops, NULL };
	struct live_sandbox *l = calloc(1, sizeof *l);
	struct call *c = calloc(1, sizeof *c);

	assert_non_null(l);
	assert_non_null(c);
	memset(&fake, 0, sizeof fake);
	fake.m = m;
	fake.gone = gone;
	m->backend = &be;
	snprintf(l->session, sizeof l->session, "s1");
	snprintf(l->h.runtime_id, sizeof l->h.runtime_id, "fake:1");
	snprintf(l->running_exec, sizeof l->running_exec, "e1");
	snprintf(l->running_tag, sizeof l->running_tag, "mcp-1-1");
	l->busy = true;
	m->live = l;
	snprintf(c->exec_id, sizeof c->exec_id, "e1");
	c->sandbox = l;
	assert_int_equal(call_sandbox_proven_gone(m, c), gone);
	assert_int_equal(fake.evidences, 1);
	assert_int_equal(fake.stops_during_probe, 0); /* never both at once */
	/* Not proven gone: the deferred stop ran as the probe returned; gone: nothing left to stop. */
	assert_int_equal(fake.stops, gone ? 0 : 1);
	assert_false(l->probing);
	assert_false(l->stop_deferred);
	assert_string_equal(l->cancel_reason, "cancelled by request");
	/* Once the reason is set, no probe runs again: the cancel's stop and the retire decide. */
	assert_false(call_sandbox_proven_gone(m, c));
	assert_int_equal(fake.evidences, 1);
	free(c);
	free(l);
	free(m);
}

static void cancel_during_probe_not_gone(void **state)
{
	(void)state;
	cancel_during_probe(0);
}

static void cancel_during_probe_gone(void **state)
{
	(void)state;
	cancel_during_probe(1);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(taken_once_by_its_call),
		cmocka_unit_test(bounded),
		cmocka_unit_test(late_cancels_keep_nothing),
		cmocka_unit_test(bounded_per_session),
		cmocka_unit_test(cancel_during_probe_not_gone),
		cmocka_unit_test(cancel_during_probe_gone),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
