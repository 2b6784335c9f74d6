/* Detached threads, and work beside the caller (see thread.h). */
#include "thread.h"

#include <pthread.h>

int sb_thread_detached(void *(*fn)(void *), void *arg, struct sb_err *err)
{
	pthread_attr_t attr;
	pthread_t t;
	int rc = pthread_attr_init(&attr);

	if (rc == 0)
		rc = pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
	if (rc == 0)
		rc = pthread_create(&t, &attr, fn, arg);
	pthread_attr_destroy(&attr);
	return rc == 0 ? 0 : sb_fail(err, rc, "starting a thread");
}

void sb_beside_start(struct sb_beside *b, void *(*fn)(void *), void *arg)
{
	b->fn = fn;
	b->arg = arg;
	b->started = pthread_create(&b->thread, NULL, fn, arg) == 0;
}

void sb_beside_join(struct sb_beside *b)
{
	if (b->started)
		pthread_join(b->thread, NULL);
	else
		b->fn(b->arg);
	b->started = false;
}
