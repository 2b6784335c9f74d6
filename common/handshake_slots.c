/* Slots for connections in their TLS handshake, the oldest shut down for a newer one (see
 * handshake_slots.h). */
#include "handshake_slots.h"

#include <sys/socket.h>

void handshake_slots_take(struct handshake_slots *t, int fd, struct handshake_ticket *tk)
{
	unsigned i, oldest = 0, n = t->n;

	if (n == 0 || n > HANDSHAKE_SLOTS_MAX)
		n = HANDSHAKE_SLOTS_MAX;
	pthread_mutex_lock(&t->lock);
	for (i = 0; i < n; i++) {
		if (t->slot[i].seq == 0)
			break;
		if (t->slot[i].seq < t->slot[oldest].seq)
			oldest = i;
	}
	if (i == n) {
		/* The holder gives its slot back (under this lock) before it closes its descriptor, so
		 * while the slot is its own the number still names its connection, never a reused one. */
		i = oldest;
		(void)shutdown(t->slot[i].fd, SHUT_RDWR);
		t->shut++;
	}
	t->slot[i].fd = fd;
	t->slot[i].seq = ++t->seq;
	tk->slot = i;
	tk->seq = t->seq;
	pthread_mutex_unlock(&t->lock);
}

bool handshake_slots_give(struct handshake_slots *t, const struct handshake_ticket *tk)
{
	bool ours;

	pthread_mutex_lock(&t->lock);
	ours = t->slot[tk->slot].seq == tk->seq;
	if (ours)
		t->slot[tk->slot].seq = 0;
	pthread_mutex_unlock(&t->lock);
	return ours;
}
