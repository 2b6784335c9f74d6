/* Unit tests for manager/core/queue.c: FIFO order within a session, no overlap, sessions in parallel. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <pthread.h>
#include <stdatomic.h>
#include <unistd.h>

#include "queue.h"

#define CALLS 40

static struct queue *q;
static atomic_int inside[2];
static atomic_int overlaps;
static int order[2][CALLS];
static atomic_int order_len[2];

struct call {
	int session;
	int seq;
};

static void *call_run(void *arg)
{
	struct call *c = arg;
	const char *name = c->session ? "s1" : "s0";

	queue_enter(q, name);
	if (atomic_fetch_add(&inside[c->session], 1) != 0)
		atomic_fetch_add(&overlaps, 1);
	order[c->session][atomic_fetch_add(&order_len[c->session], 1)] = c->seq;
	usleep(1000);
	atomic_fetch_sub(&inside[c->session], 1);
	queue_leave(q, name);
	return NULL;
}

static void test_fifo_without_overlap(void **state)
{
	pthread_t t[2][CALLS];
	struct call calls[2][CALLS];

	(void)state;
	q = queue_new();
	assert_non_null(q);
	/* Hold session 0 so every call queues up; start them in a known order. */
	queue_enter(q, "s0");
	for (int i = 0; i < CALLS; i++) {
		for (int s = 0; s < 2; s++) {
			calls[s][i] = (struct call){ s, i };
			assert_int_equal(pthread_create(&t[s][i], NULL, call_run, &calls[s][i]), 0);
		}
		/* Arrival order = creation order: wait until the call has its ticket. */
		while (queue_depth(q, "s0") < (unsigned)i + 2)
			usleep(100);
	}
	assert_int_equal(queue_depth(q, "s0"), CALLS + 1);
	queue_leave(q, "s0");
	for (int i = 0; i < CALLS; i++)
		for (int s = 0; s < 2; s++)
			pthread_join(t[s][i], NULL);
	assert_int_equal(atomic_load(&overlaps), 0);
	for (int i = 0; i < CALLS; i++)
		assert_int_equal(order[0][i], i);
	assert_int_equal(atomic_load(&order_len[1]), CALLS);
	assert_int_equal(queue_depth(q, "s0"), 0);
	queue_free(q);
}

static void test_sessions_do_not_wait_for_each_other(void **state)
{
	(void)state;
	q = queue_new();
	queue_enter(q, "a");
	/* "b" must get in at once while "a" is held. */
	queue_enter(q, "b");
	assert_int_equal(queue_depth(q, "a"), 1);
	assert_int_equal(queue_depth(q, "b"), 1);
	queue_leave(q, "b");
	queue_leave(q, "a");
	queue_free(q);
}

/* queue_try_enter takes a free turn and never waits for a held or awaited one (sandbox.c takes
 * another session's turn only so, while holding its own). */
static void test_try_enter_only_a_free_turn(void **state)
{
	struct queue *tq = queue_new();

	(void)state;
	assert_int_equal(queue_try_enter(tq, "s1"), 1);
	assert_int_equal(queue_depth(tq, "s1"), 1);
	assert_int_equal(queue_try_enter(tq, "s1"), 0); /* held: not taken, not queued */
	assert_int_equal(queue_depth(tq, "s1"), 1);
	assert_int_equal(queue_try_enter(tq, "s2"), 1); /* another session's turn is its own */
	queue_leave(tq, "s1");
	queue_leave(tq, "s2");
	assert_int_equal(queue_depth(tq, "s1"), 0);
	queue_enter(tq, "s1"); /* the lane was freed and made again: the ticket order still holds */
	assert_int_equal(queue_try_enter(tq, "s1"), 0);
	queue_leave(tq, "s1");
	queue_free(tq);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_fifo_without_overlap),
		cmocka_unit_test(test_sessions_do_not_wait_for_each_other),
		cmocka_unit_test(test_try_enter_only_a_free_turn),
	};
	return cmocka_run_group_tests_name("queue", tests, NULL, NULL);
}
