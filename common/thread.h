/* Detached worker threads (one per connection in both programs): started or refused with a
 * reason, never left half-made. */
#ifndef SB_THREAD_H
#define SB_THREAD_H

#include "error.h"

/* Start fn(arg) on a detached thread. On failure nothing runs and arg stays the caller's. */
int sb_thread_detached(void *(*fn)(void *), void *arg, struct sb_err *err);

#endif
