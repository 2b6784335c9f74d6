/* The unauthenticated connections' budget (see http_budget.h): one mutex, a few slots, no I/O but
 * the shutdown(2) of an evicted connection. */
#include "http_budget.h"

#include <stdio.h>
#include <string.h>
#include <sys/socket.h>

#include "log.h"

void http_budget_enter(struct http_budget *b, const void *owner, int fd)
{
	size_t pick = 0, cap = b->cap < HTTP_BUDGET_MAX ? b->cap : HTTP_BUDGET_MAX;

	pthread_mutex_lock(&b->lock);
	for (size_t i = 0; i < cap; i++) {
		if (b->slot[i].owner == NULL) {
			pick = i;
			break;
		}
		if (b->slot[i].seq < b->slot[pick].seq)
			pick = i;
	}
	if (b->slot[pick].owner != NULL) {
		sb_info("%s: %zu connections that have not proved anything: the oldest is closed", b->name, cap);
		/* Not close(): the listener owns the descriptor and closes it when it reads the end. */
		shutdown(b->slot[pick].fd, SHUT_RDWR);
	}
	b->slot[pick].owner = owner;
	b->slot[pick].fd = fd;
	b->slot[pick].seq = ++b->seq;
	pthread_mutex_unlock(&b->lock);
}

void http_budget_leave(struct http_budget *b, const void *owner)
{
	pthread_mutex_lock(&b->lock);
	for (size_t i = 0; i < HTTP_BUDGET_MAX; i++)
		if (b->slot[i].owner == owner)
			b->slot[i].owner = NULL;
	pthread_mutex_unlock(&b->lock);
}

size_t http_budget_held(struct http_budget *b)
{
	size_t n = 0;

	pthread_mutex_lock(&b->lock);
	for (size_t i = 0; i < HTTP_BUDGET_MAX; i++)
		n += b->slot[i].owner != NULL;
	pthread_mutex_unlock(&b->lock);
	return n;
}

void http_mhd_log(void *listener, const char *fmt, va_list ap)
{
	char line[256];

	vsnprintf(line, sizeof line, fmt, ap);
	line[strcspn(line, "\n")] = '\0';
	sb_debug("%s: http: %s", (const char *)listener, line);
}
