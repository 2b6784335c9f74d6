/* The front ends' calls to the daemon's control socket (mcp_jobs.c, codex_bridge.c): the timeout
 * settings, the quick calls it answers at once, and the exec of one `bash` call, waited for while a
 * cancellation is acted on, its answer turned into the tool's result (bash_tool.h). Nothing here
 * runs a command, and an unreachable daemon is a refusal or an uncertain outcome, never a fallback. */
#ifndef SB_DAEMON_CALL_H
#define SB_DAEMON_CALL_H

#include <jansson.h>
#include <pthread.h>
#include <stdint.h>

#include "bash_tool.h"
#include "error.h"
#include "follow.h"

#define DAEMON_CALL_TAG_MAX 40 /* "mcp-<pid>-<n>", "codex-<pid>-<n>" and the terminator */

/* The managers a front end calls (the owner of the session is followed: follow.h), for one
 * session; set once, before any thread starts. */
struct daemon_peer {
	const struct follow_list *managers;
	const char *session;
	const char *who; /* the front end, in logs: "mcp", "codex-bridge" */
};

/* One `bash` call as the daemon is asked it. */
struct daemon_exec {
	char tag[DAEMON_CALL_TAG_MAX]; /* sent with the exec and its cancel: only this call is cancelled */
	char *command;                 /* malloc'd by daemon_call_args */
	long long timeout;             /* what the daemon applies: asked for, else its default */
	int timeout_given;             /* sent only when asked for */
};

/* What the wait looks at every POLL_MS: *cancelled, read under lock, says a cancellation was asked
 * for; until then waiting (NULL: none) may tell the caller's client (progress). */
struct daemon_wait {
	pthread_mutex_t *lock;
	const int *cancelled;
	void (*waiting)(void *ctx, int64_t started_ms);
	void *ctx;
	/* Set: the exec asks for live output and each chunk's "output" object comes here (live_send.h),
	 * on the waiting thread, before the answer; NULL: none is asked for. */
	void (*output)(void *ctx, json_t *chunk);
};

/* A request (consumed) the daemon answers at once (config, cancel), bounded in time so no client
 * is held up; its answer (a new reference), or NULL with err. */
json_t *daemon_call_quick(const struct daemon_peer *d, json_t *req, struct sb_err *err);

/* The daemon's timeout settings: asked once per process, then kept; -1 with err when it cannot be
 * reached or its answer has none. */
int daemon_call_config(const struct daemon_peer *d, long long *max_timeout, long long *default_timeout,
		       struct sb_err *err);

/* A bash call's arguments (params.arguments) against the daemon's settings: 0 with x->command,
 * x->timeout and x->timeout_given set; -1 with *refusal, the tool result to answer with. */
int daemon_call_args(const struct daemon_peer *d, const struct bash_tool_view *v, json_t *args,
		     struct daemon_exec *x, json_t **refusal);

/* The tagged cancel of x's exec, sent when *next_ms is due (0: at once) and again every second
 * while the daemon finds nothing running yet (the call may still be starting its sandbox); *next_ms
 * is -1 once it cancelled one. */
void daemon_call_cancel(const struct daemon_peer *d, const char *tag, int64_t *next_ms);

/* Run x in the daemon and wait for its answer, acting on w: the tool result (a new reference;
 * NULL: out of memory), an answer, a refusal (nothing reached the daemon, so nothing ran) or lost
 * (the request was sent and no answer came: the command may have run). */
json_t *daemon_call_bash(const struct daemon_peer *d, const struct bash_tool_view *v, const struct daemon_exec *x,
			 const struct daemon_wait *w);

#endif
