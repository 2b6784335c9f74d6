/* Unit tests for common/handshake_slots.c: the slots a connection holds before its certificate
 * verified, the oldest shut down for a newer one (N1). */
#include <poll.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cmocka.h>

#include "handshake_slots.h"

/* True when the peer of our end was shut down: our end reads its end of stream at once. */
static bool peer_shut(int fd)
{
	struct pollfd p = { .fd = fd, .events = POLLIN };
	char byte;

	return poll(&p, 1, 0) == 1 && recv(fd, &byte, 1, MSG_DONTWAIT) == 0;
}

static void test_oldest_shut_for_newer(void **state)
{
	struct handshake_slots t = HANDSHAKE_SLOTS_INIT(2);
	struct handshake_ticket tk[4];
	int sv[4][2];

	(void)state;
	for (int i = 0; i < 4; i++)
		assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv[i]), 0);
	handshake_slots_take(&t, sv[0][0], &tk[0]);
	handshake_slots_take(&t, sv[1][0], &tk[1]);
	assert_false(peer_shut(sv[0][1]));
	assert_int_equal(t.shut, 0);

	/* a third: the oldest (0) is shut down and loses its slot; 1 keeps its own */
	handshake_slots_take(&t, sv[2][0], &tk[2]);
	assert_true(peer_shut(sv[0][1]));
	assert_false(peer_shut(sv[1][1]));
	assert_false(handshake_slots_give(&t, &tk[0]));

	/* 1 finished its handshake: its slot is free, so a fourth takes it and shuts nobody down */
	assert_true(handshake_slots_give(&t, &tk[1]));
	handshake_slots_take(&t, sv[3][0], &tk[3]);
	assert_false(peer_shut(sv[2][1]));
	assert_int_equal(t.shut, 1);
	assert_true(handshake_slots_give(&t, &tk[2]));
	assert_true(handshake_slots_give(&t, &tk[3]));
	/* a ticket is given back once */
	assert_false(handshake_slots_give(&t, &tk[3]));
	for (int i = 0; i < 4; i++) {
		close(sv[i][0]);
		close(sv[i][1]);
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_oldest_shut_for_newer),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
