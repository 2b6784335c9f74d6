/* `sandbox-agent serve`'s two files' shared parts: serve.c (the listener, the agent's setup) hands
 * each accepted connection to serve_conn.c. Only serve*.c include it (tests/layering_check.py). */
#ifndef SB_SERVE_INTERNAL_H
#define SB_SERVE_INTERNAL_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include "handshake_slots.h"
#include "boundary.h"
#include "journal.h"
#include "prebuilt.h"
#include "privdir.h"
#include "receipt.h"
#include "tls.h"

#define SERVE_NET_PORT_FIRST 3128 /* the egress proxy's port, then the edges' (manager/egress/) */
#define SERVE_NET_PORTS 32
#define SERVE_NET_CONNECTIONS_MAX 128

struct agent {
	struct boundary b;
	struct prebuilt pre;       /* the next call's init, built while idle (prebuilt.h) */
	struct secrets *sec;
	struct tls_config *tls;
	struct privdir state, receipts, journal_dir; /* held from start (R1): every write goes through them */
	struct spare_file spare;                     /* the next exec's receipt room, made ahead */
	struct journal journal;
	uint64_t generation;
	char *features_json;
	pthread_mutex_t lock;      /* guards the fields below */
	bool busy;
	char running_id[EXEC_ID_MAX + 1];
	int cancel_efd;            /* written by a Cancel, read by the running exec's boundary */
	int connections;           /* verified ones, counted against SERVE_MAX_CONNECTIONS (serve_conn.c) */
	/* Connections still in their handshake (serve_conn.c): whoever reaches the listener (a pod
	 * network without an enforcing NetworkPolicy) holds only these, the oldest shut down for a
	 * newer one, never a verified connection's room. Set up by serve_conn_init. */
	struct handshake_slots handshakes;
	/* Policy `proxy` over the agent's own link (serve_net.c): the listeners on this network's
	 * 127.0.0.1:SERVE_NET_PORT_FIRST + i (-1: none yet) and the connections turned into
	 * tunnels, which count against SERVE_NET_CONNECTIONS_MAX instead. */
	int net_listeners[SERVE_NET_PORTS];
	int net_connections;
};

/* The next exec's receipt room and journal entry made ahead (spare_file.h), at start and after
 * each result (serve_conn.c). */
void serve_spare_make(struct agent *a);
/* The connection bounds' state (serve_conn.c), before the listener accepts. */
void serve_conn_init(struct agent *a);
/* Serve the accepted connection fd on a thread of its own (serve_conn.c); fd is consumed. */
void serve_conn_start(struct agent *a, int fd);
/* --net-socket unix:PATH (serve_netsock.c): a thread handing the manager listeners on this network
 * namespace's 127.0.0.1, one per request. 0, or -1 with err. */
int serve_netsock_start(const char *listen, struct sb_err *err);

/* Policy `proxy` over the agent's own link (serve_net.c). serve_net_listen: the listener on
 * 127.0.0.1:port of this network, made at the first request for port (before any command runs:
 * the manager asks while preparing the sandbox) and kept; this connection then counts as a
 * tunnel. NULL, or why the request is refused. */
const char *serve_net_listen(struct agent *a, uint32_t port, int *listen_fd);
/* The next connection to listen_fd, answered NetAccepted over stream and carried inside tls (on
 * fd) both ways until both ends closed; returns early when the manager closes first. */
void serve_net_tunnel(struct tls_session *tls, int fd, struct sb_stream *stream, int listen_fd, uint32_t port);

#endif
