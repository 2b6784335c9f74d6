/* Which manager a front end calls, and how it follows a session's owner (docs/operations.md,
 * "Several managers"): the list of control sockets (--socket, repeatable, else
 * $SANDBOX_MANAGER_SOCKET split at ':'), parsed here and nowhere else, and the one follow rule the
 * CLI (cli.c) and the bash tool's calls (daemon_call.c) share. Nothing here knows what a request
 * asks; how one manager is asked (a connection per call, or a kept one) is the caller's exchange. */
#ifndef SB_FOLLOW_H
#define SB_FOLLOW_H

#include <jansson.h>
#include <stddef.h>

#include "error.h"

#define FOLLOW_SOCKETS_MAX 8          /* sockets a list may name */
#define FOLLOW_PATH_MAX 108           /* a unix socket path and its terminator (sun_path) */
#define FOLLOW_HOPS_MAX 5             /* resends after "owned" answers, in all */
#define FOLLOW_WAIT_MS_DEFAULT 60000  /* $SANDBOX_MANAGER_OWNED_WAIT_MS unset */
#define FOLLOW_WAIT_MS_MAX 3600000
#define FOLLOW_WAIT_MARGIN_MS 100     /* past the owner's lease expiry, before a resend to the list */

struct follow_list {
	size_t n;
	char path[FOLLOW_SOCKETS_MAX][FOLLOW_PATH_MAX];
	long owned_wait_ms; /* the longest a call waits, in all, for dead owners' leases */
};

/* The list from flags (the --socket values, a JSON array of strings, in order), else from
 * $SANDBOX_MANAGER_SOCKET; the wait from $SANDBOX_MANAGER_OWNED_WAIT_MS. 0, or -1 with err: no
 * socket named, more than FOLLOW_SOCKETS_MAX, an empty or too long path, a bad wait; flags NULL
 * (the array could not be made) is out of memory. */
int follow_list_parse(struct follow_list *l, const json_t *flags, struct sb_err *err);

/* What an exchange with one manager did. */
#define FOLLOW_ANSWERED 1  /* *resp holds its answer */
#define FOLLOW_NOT_SENT 0  /* nothing reached it whole (no connection, the send failed): nothing ran */
#define FOLLOW_LOST (-1)   /* sent, and no answer came: it may have run; never sent again */

/* Send req (not consumed) to the manager at path and read its answer. */
typedef int (*follow_exchange)(void *ctx, const char *path, json_t *req, json_t **resp, struct sb_err *err);
/* Nonzero: the caller gave the call up (a cancelled bash call): what waits for a lease stops. */
typedef int (*follow_stop)(void *ctx);

/* The follow rule: req to the first manager of l that takes it; on an answer of error kind "owned",
 * the same request to the answer's "address" when that is reachable, else, after waiting
 * retry_after_ms + FOLLOW_WAIT_MARGIN_MS (at most l->owned_wait_ms in all), to the first reachable
 * of l again (which takes the session over); at most FOLLOW_HOPS_MAX resends. FOLLOW_ANSWERED with
 * *resp (a new reference; the last "owned" refusal when no hop is left or the wait would pass its
 * bound, or stop (NULL: none) said so while it waited), FOLLOW_NOT_SENT with err (no manager
 * reachable: nothing ran), FOLLOW_LOST with err. */
int follow_call(const struct follow_list *l, json_t *req, follow_exchange x, follow_stop stop, void *ctx,
		json_t **resp, struct sb_err *err);

#endif
