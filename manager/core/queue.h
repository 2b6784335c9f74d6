/* Per-session FIFO serialization: calls of one session run one at a time, in order of arrival;
 * different sessions never wait for each other. A ticket lock per session: take a ticket on
 * arrival, run when it is served. No thread is created here; callers bring their own. */
#ifndef SB_QUEUE_H
#define SB_QUEUE_H

#include <stdint.h>

struct queue;

struct queue *queue_new(void);
void queue_free(struct queue *q);

/* Block until every earlier call of this session has left; returns the caller's ticket. */
uint64_t queue_enter(struct queue *q, const char *session);
/* Take the session's turn only if nobody holds or waits for it: 1 with the turn held, else 0.
 * Never blocks, so a caller holding another session's turn cannot deadlock on this one. */
int queue_try_enter(struct queue *q, const char *session);
/* Let the next call of this session run. */
void queue_leave(struct queue *q, const char *session);
/* How many calls of the session are in the queue or running (for `session show`). */
unsigned queue_depth(struct queue *q, const char *session);

#endif
