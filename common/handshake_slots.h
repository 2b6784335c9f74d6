/* Slots for connections still in their TLS handshake: the only capacity a peer holds before its
 * certificate verified (N1: nothing unauthenticated holds shared capacity). A listener takes a slot
 * at accept and gives it back when the handshake ended; when every slot is taken, the oldest
 * connection still in its handshake is shut down for the newcomer, so connections that never finish
 * a handshake cannot keep a verified peer out (a flood has to outpace every handshake to delay one).
 * Used by the agent's listener (sandbox-agent/serve_conn.c) and the manager's TLS control listener
 * (manager/core/control_tls.c). */
#ifndef SB_HANDSHAKE_SLOTS_H
#define SB_HANDSHAKE_SLOTS_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#define HANDSHAKE_SLOTS_MAX 64u

struct handshake_slots {
	pthread_mutex_t lock;
	unsigned n; /* slots in use by this listener, 1..HANDSHAKE_SLOTS_MAX */
	struct {
		int fd;
		uint64_t seq; /* 0: free */
	} slot[HANDSHAKE_SLOTS_MAX];
	uint64_t seq;
	uint64_t shut; /* connections shut down for a newer one, for tests and logs */
};

/* A connection's hold on a slot. */
struct handshake_ticket {
	unsigned slot;
	uint64_t seq;
};

#define HANDSHAKE_SLOTS_INIT(count) { .lock = PTHREAD_MUTEX_INITIALIZER, .n = (count) }

/* Take a slot for fd (accepted, its handshake not yet begun). Never fails: with every slot taken,
 * the oldest holder's connection is shut down (shutdown(2), not closed: its descriptor stays its
 * thread's, which finds the slot gone at handshake_slots_give). */
void handshake_slots_take(struct handshake_slots *t, int fd, struct handshake_ticket *tk);

/* Give the slot back once the handshake ended, before the fd is closed or handed on. False when the
 * connection had been shut down for a newer one: it must not be served, even if its handshake had
 * just completed. */
bool handshake_slots_give(struct handshake_slots *t, const struct handshake_ticket *tk);

#endif
