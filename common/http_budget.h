/* The budget of an HTTP listener's connections that have not proved anything yet (issue 26, N1: no
 * listener lets an unauthenticated peer hold shared capacity). At most `cap` of them at once; a new
 * one takes a free slot or the oldest one's, and that one is shut down, so whoever connects can hold
 * slots only until newer connections come. The metrics listener puts every connection here; MCP
 * HTTP puts each one here until its bearer token is checked. Owns no socket: it shuts a descriptor
 * down, never closes it (the listener does, after http_budget_leave). */
#ifndef SB_HTTP_BUDGET_H
#define SB_HTTP_BUDGET_H

#include <pthread.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#define HTTP_BUDGET_MAX 16

struct http_budget {
	pthread_mutex_t lock;
	const char *name;   /* for the log line of an eviction */
	size_t cap;         /* 1..HTTP_BUDGET_MAX */
	uint64_t seq;
	struct {
		const void *owner; /* NULL: the slot is free */
		int fd;
		uint64_t seq;
	} slot[HTTP_BUDGET_MAX];
};

#define HTTP_BUDGET_INIT(label, n) { .lock = PTHREAD_MUTEX_INITIALIZER, .name = (label), .cap = (n) }

/* owner's connection (fd) takes a slot; with none free the oldest holder's fd is shut down (its
 * listener sees the end and closes it) and its slot is owner's. */
void http_budget_enter(struct http_budget *b, const void *owner, int fd);
/* owner proved itself, or its connection ends: its slot is free (if it still holds one). Call it
 * before the descriptor is closed, so an eviction never shuts down a reused descriptor. */
void http_budget_leave(struct http_budget *b, const void *owner);
/* How many slots are held (tests, logs). */
size_t http_budget_held(struct http_budget *b);

/* libmicrohttpd's own complaints (a malformed head, one too large), for MHD_OPTION_EXTERNAL_LOGGER with
 * the listener's name ("metrics", "mcp") as its argument: at debug level, since any peer can cause them. */
void http_mhd_log(void *listener, const char *fmt, va_list ap);

#endif
