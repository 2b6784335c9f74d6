/* Unit tests for common/http_budget.c: the unauthenticated connections' budget of the HTTP listeners
 * (issue 26, N1). A full budget sheds its oldest connection (its peer reads the end), never a newer
 * one and never one that left; a connection that left frees its slot. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cmocka.h>

#include "http_budget.h"

#define N 4

/* 1: the peer of pair p has been shut down (reads the end at once); 0: still open. */
static int peer_ended(int pair[2])
{
	char b;

	return recv(pair[1], &b, 1, MSG_DONTWAIT) == 0;
}

static void test_budget_sheds_the_oldest(void **state)
{
	struct http_budget b = HTTP_BUDGET_INIT("test", N);
	int pair[N + 2][2];
	int owner[N + 2];

	(void)state;
	for (int i = 0; i < N + 2; i++)
		assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, pair[i]), 0);
	for (int i = 0; i < N; i++)
		http_budget_enter(&b, &owner[i], pair[i][0]);
	assert_int_equal(http_budget_held(&b), N);
	for (int i = 0; i < N; i++)
		assert_int_equal(peer_ended(pair[i]), 0);
	/* One more: the oldest (0) is shut down, the others keep theirs. */
	http_budget_enter(&b, &owner[N], pair[N][0]);
	assert_int_equal(http_budget_held(&b), N);
	assert_int_equal(peer_ended(pair[0]), 1);
	for (int i = 1; i <= N; i++)
		assert_int_equal(peer_ended(pair[i]), 0);
	/* 1 proves itself and leaves: the next one takes its slot and sheds nobody. */
	http_budget_leave(&b, &owner[1]);
	assert_int_equal(http_budget_held(&b), N - 1);
	http_budget_enter(&b, &owner[N + 1], pair[N + 1][0]);
	assert_int_equal(http_budget_held(&b), N);
	for (int i = 1; i <= N + 1; i++)
		assert_int_equal(peer_ended(pair[i]), 0);
	/* Leaving twice, or after an eviction, frees nothing of anyone else's. */
	http_budget_leave(&b, &owner[0]);
	http_budget_leave(&b, &owner[1]);
	assert_int_equal(http_budget_held(&b), N);
	for (int i = 0; i < N + 2; i++) {
		close(pair[i][0]);
		close(pair[i][1]);
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_budget_sheds_the_oldest),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
