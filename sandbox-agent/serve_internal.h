/* `sandbox-agent serve`'s two files' shared parts: serve.c (the listener, the agent's setup) hands
 * each accepted connection to serve_conn.c. Only serve*.c include it (tests/layering_check.py). */
#ifndef SB_SERVE_INTERNAL_H
#define SB_SERVE_INTERNAL_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include "boundary.h"
#include "journal.h"
#include "prebuilt.h"
#include "privdir.h"
#include "tls.h"

struct agent {
	struct boundary b;
	struct prebuilt pre;       /* the next call's init, built while idle (prebuilt.h) */
	struct secrets *sec;
	struct tls_config *tls;
	struct privdir state, receipts, journal_dir; /* held from start (R1): every write goes through them */
	struct journal journal;
	uint64_t generation;
	char *features_json;
	pthread_mutex_t lock;      /* guards the fields below */
	bool busy;
	char running_id[EXEC_ID_MAX + 1];
	int cancel_efd;            /* written by a Cancel, read by the running exec's boundary */
	int connections;
};

/* Serve the accepted connection fd on a thread of its own (serve_conn.c); fd is consumed. */
void serve_conn_start(struct agent *a, int fd);
/* --net-socket unix:PATH (serve_netsock.c): a thread handing the manager listeners on this network
 * namespace's 127.0.0.1, one per request. 0, or -1 with err. */
int serve_netsock_start(const char *listen, struct sb_err *err);

#endif
