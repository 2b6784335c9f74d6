/* Detached worker threads (one per connection in both programs): started or refused with a
 * reason, never left half-made. And work done beside the caller's, joined before its result is used. */
#ifndef SB_THREAD_H
#define SB_THREAD_H

#include <pthread.h>
#include <stdbool.h>

#include "error.h"

/* Start fn(arg) on a detached thread. On failure nothing runs and arg stays the caller's. */
int sb_thread_detached(void *(*fn)(void *), void *arg, struct sb_err *err);

/* fn(arg) beside the caller (a start's independent steps: issue 32): on a thread of its own from
 * sb_beside_start, or, when no thread can be had, on the caller's own at sb_beside_join, in series.
 * Either way fn has run exactly once when sb_beside_join returns. */
struct sb_beside {
	pthread_t thread;
	bool started;
	void *(*fn)(void *);
	void *arg;
};
void sb_beside_start(struct sb_beside *b, void *(*fn)(void *), void *arg);
void sb_beside_join(struct sb_beside *b);

#endif
