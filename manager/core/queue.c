/* The per-session queue (see queue.h). One mutex guards the table; each session has a condition
 * variable and two counters: tickets handed out and the ticket now served. A session entry lives
 * while anyone holds or waits for a ticket, so the table stays as small as the live sessions. */
#include "queue.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct lane {
	char session[65];
	uint64_t next_ticket, serving;
	unsigned users;          /* holders + waiters; the lane is freed at 0 */
	pthread_cond_t turn;
	struct lane *next;
};

struct queue {
	pthread_mutex_t lock;
	struct lane *lanes;
};

struct queue *queue_new(void)
{
	struct queue *q = calloc(1, sizeof *q);

	if (q != NULL)
		pthread_mutex_init(&q->lock, NULL);
	return q;
}

void queue_free(struct queue *q)
{
	while (q != NULL && q->lanes != NULL) {
		struct lane *l = q->lanes;

		q->lanes = l->next;
		pthread_cond_destroy(&l->turn);
		free(l);
	}
	if (q != NULL)
		pthread_mutex_destroy(&q->lock);
	free(q);
}

static struct lane *lane_find(struct queue *q, const char *session, int create)
{
	struct lane *l;

	for (l = q->lanes; l != NULL; l = l->next)
		if (strcmp(l->session, session) == 0)
			return l;
	if (!create)
		return NULL;
	/* Out of memory here would break ordering for good: abort loudly rather than run a
	 * call out of turn. */
	l = calloc(1, sizeof *l);
	if (l == NULL)
		abort();
	snprintf(l->session, sizeof l->session, "%s", session);
	pthread_cond_init(&l->turn, NULL);
	l->next = q->lanes;
	q->lanes = l;
	return l;
}

uint64_t queue_enter(struct queue *q, const char *session)
{
	struct lane *l;
	uint64_t ticket;

	pthread_mutex_lock(&q->lock);
	l = lane_find(q, session, 1);
	ticket = l->next_ticket++;
	l->users++;
	while (l->serving != ticket)
		pthread_cond_wait(&l->turn, &q->lock);
	pthread_mutex_unlock(&q->lock);
	return ticket;
}

int queue_try_enter(struct queue *q, const char *session)
{
	int taken;

	pthread_mutex_lock(&q->lock);
	taken = lane_find(q, session, 0) == NULL;
	if (taken) {
		struct lane *l = lane_find(q, session, 1);

		l->next_ticket++;
		l->users++;
	}
	pthread_mutex_unlock(&q->lock);
	return taken;
}

static void lane_drop(struct queue *q, struct lane *gone)
{
	struct lane **p;

	for (p = &q->lanes; *p != NULL; p = &(*p)->next)
		if (*p == gone) {
			*p = gone->next;
			pthread_cond_destroy(&gone->turn);
			free(gone);
			return;
		}
}

void queue_leave(struct queue *q, const char *session)
{
	struct lane *l;

	pthread_mutex_lock(&q->lock);
	l = lane_find(q, session, 0);
	if (l != NULL) {
		l->serving++;
		l->users--;
		if (l->users == 0)
			lane_drop(q, l);
		else
			pthread_cond_broadcast(&l->turn);
	}
	pthread_mutex_unlock(&q->lock);
}

unsigned queue_depth(struct queue *q, const char *session)
{
	struct lane *l;
	unsigned n;

	pthread_mutex_lock(&q->lock);
	l = lane_find(q, session, 0);
	n = l ? l->users : 0;
	pthread_mutex_unlock(&q->lock);
	return n;
}
