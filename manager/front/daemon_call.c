/* The front ends' calls to the daemon (see daemon_call.h). It must never run a command itself: no
 * shell, no exec, no fallback when the daemon is unreachable. Every call has a connection of its
 * own while it runs, so the threads of a front end call at once without sharing one; one whose
 * answer came whole is kept for the next call to that manager (one per manager), which then skips
 * the connect and the daemon's new connection thread (issue 18). Which manager is asked is
 * follow.c's rule: the first reachable of the list, then the session's owner. */
#include "daemon_call.h"

#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "clock.h"
#include "control.h"
#include "control_client.h"
#include "control_limits.h"
#include "log.h"
#include "mcp_shape.h"

#define QUICK_CALL_MS 10000  /* config and cancel: the daemon answers these at once */
#define ANSWER_MARGIN_S 300  /* beyond a call's timeout: the daemon's own margins and reconcile */
#define CANCEL_RETRY_MS 1000 /* a cancel that found nothing running yet is sent again */
#define POLL_MS 250
#define ANSWER_READ_MS 60000 /* an answer that has begun arrives whole within this */

/* The timeout settings, once per process: a front end serves one daemon. */
static struct {
	pthread_mutex_t lock;
	int have;
	long long max_timeout, default_timeout;
} config = { .lock = PTHREAD_MUTEX_INITIALIZER };

/* The kept connections, one per manager (by its socket path, so a call that followed an owner
 * never sends to one manager on another's connection): between two calls one carries nothing, so
 * anything to read on it (the daemon's close, at its stop or restart) means it is done with. */
static struct {
	pthread_mutex_t lock;
	struct {
		char path[FOLLOW_PATH_MAX];
		struct control_conn *conn;
	} slot[FOLLOW_SOCKETS_MAX];
} kept = { .lock = PTHREAD_MUTEX_INITIALIZER };

static void conn_drop(struct control_conn *c)
{
	if (c == NULL)
		return;
	control_conn_close(c);
	free(c);
}

static struct control_conn *kept_take(const char *path)
{
	struct control_conn *c = NULL;

	pthread_mutex_lock(&kept.lock);
	for (size_t i = 0; i < FOLLOW_SOCKETS_MAX && c == NULL; i++)
		if (kept.slot[i].conn != NULL && strcmp(kept.slot[i].path, path) == 0) {
			c = kept.slot[i].conn;
			kept.slot[i].conn = NULL;
		}
	pthread_mutex_unlock(&kept.lock);
	if (c != NULL && control_conn_wait(c, 0) != 0) {
		conn_drop(c);
		c = NULL;
	}
	return c;
}

/* A connection to path whose answer was read whole, for the next call; closed when that manager
 * has one kept already, or every slot is another manager's. */
static void kept_put(const char *path, struct control_conn *c)
{
	size_t i, free_slot = FOLLOW_SOCKETS_MAX;

	pthread_mutex_lock(&kept.lock);
	for (i = 0; i < FOLLOW_SOCKETS_MAX; i++) {
		if (kept.slot[i].path[0] != '\0' && strcmp(kept.slot[i].path, path) == 0)
			break;
		if (kept.slot[i].path[0] == '\0' && free_slot == FOLLOW_SOCKETS_MAX)
			free_slot = i;
	}
	if (i == FOLLOW_SOCKETS_MAX && free_slot < FOLLOW_SOCKETS_MAX && strlen(path) < FOLLOW_PATH_MAX) {
		i = free_slot;
		memcpy(kept.slot[i].path, path, strlen(path) + 1);
	}
	if (i < FOLLOW_SOCKETS_MAX && kept.slot[i].conn == NULL) {
		kept.slot[i].conn = c;
		c = NULL;
	}
	pthread_mutex_unlock(&kept.lock);
	conn_drop(c);
}

/* Take the kept connection to path, or connect, and send one request (not consumed). -1: nothing
 * reached that manager, so nothing ran. A send on the kept connection that fails delivered no
 * whole request (the daemon acts on whole frames only): it is sent once more on a new connection. */
static struct control_conn *daemon_open(const char *path, json_t *req, struct sb_err *err)
{
	struct control_conn *c = kept_take(path);

	/* A request is sent within QUICK_CALL_MS or not at all (a kept TLS session's deadline is
	 * absolute: the last call's would have passed). */
	if (c != NULL && (control_conn_set_timeout(c, QUICK_CALL_MS, err) < 0 || control_conn_send(c, req, err) < 0)) {
		conn_drop(c);
		c = NULL;
	}
	if (c == NULL) {
		c = calloc(1, sizeof *c);
		if (c == NULL) {
			sb_fail(err, ENOMEM, "out of memory");
			return NULL;
		}
		if (control_conn_open(c, path, err) < 0) {
			free(c);
			return NULL;
		}
		if (control_conn_set_timeout(c, QUICK_CALL_MS, err) < 0 || control_conn_send(c, req, err) < 0) {
			conn_drop(c);
			c = NULL;
		}
	}
	return c;
}

/* One call as follow_call asks it of one manager: a quick answer (x NULL), or the exec of x
 * waited for while acting on w. */
struct call {
	const struct daemon_peer *d;
	const struct daemon_exec *x;
	const struct daemon_wait *w;
};

static int exec_wait(const struct daemon_peer *d, const struct daemon_exec *x, const struct daemon_wait *w,
		     struct control_conn *conn, json_t **resp, struct sb_err *err);

static int quick_wait(struct control_conn *conn, json_t **resp, struct sb_err *err)
{
	int rc = control_conn_set_timeout(conn, QUICK_CALL_MS, err);

	if (rc == 0 && (rc = control_conn_recv(conn, resp, err)) == 0)
		sb_fail(err, EPIPE, "the manager closed the connection without answering");
	return rc > 0 ? 1 : -1;
}

static int call_exchange(void *ctx, const char *path, json_t *req, json_t **resp, struct sb_err *err)
{
	const struct call *c = ctx;
	struct control_conn *conn = daemon_open(path, req, err);

	if (conn == NULL)
		return FOLLOW_NOT_SENT;
	if ((c->x != NULL ? exec_wait(c->d, c->x, c->w, conn, resp, err) : quick_wait(conn, resp, err)) < 0) {
		conn_drop(conn);
		return FOLLOW_LOST;
	}
	kept_put(path, conn);
	return FOLLOW_ANSWERED;
}

/* A bash call's cancellation, asked for while it waits for a dead owner's lease: not sent then. */
static int call_stop(void *ctx)
{
	const struct call *c = ctx;
	int cancelled;

	if (c->w == NULL)
		return 0;
	pthread_mutex_lock(c->w->lock);
	cancelled = *c->w->cancelled;
	pthread_mutex_unlock(c->w->lock);
	return cancelled;
}

json_t *daemon_call_quick(const struct daemon_peer *d, json_t *req, struct sb_err *err)
{
	struct call c = { d, NULL, NULL };
	json_t *resp = NULL;

	if (req == NULL)
		sb_fail(err, ENOMEM, "out of memory");
	else if (follow_call(d->managers, req, call_exchange, NULL, &c, &resp, err) != FOLLOW_ANSWERED)
		resp = NULL;
	json_decref(req);
	return resp;
}

int daemon_call_config(const struct daemon_peer *d, long long *max_timeout, long long *default_timeout,
		       struct sb_err *err)
{
	json_t *resp, *max, *dflt;
	int ok;

	pthread_mutex_lock(&config.lock);
	ok = config.have;
	*max_timeout = config.max_timeout;
	*default_timeout = config.default_timeout;
	pthread_mutex_unlock(&config.lock);
	if (ok)
		return 0;
	resp = daemon_call_quick(d, json_pack("{s:s}", "op", "config"), err);
	if (resp == NULL)
		return -1;
	max = json_object_get(resp, "max_timeout_seconds");
	dflt = json_object_get(resp, "default_timeout_seconds");
	ok = json_is_true(json_object_get(resp, "ok")) && json_is_integer(max) && json_is_integer(dflt);
	pthread_mutex_lock(&config.lock);
	if (ok) {
		config.max_timeout = json_integer_value(max);
		config.default_timeout = json_integer_value(dflt);
		config.have = 1;
	}
	*max_timeout = config.max_timeout;
	*default_timeout = config.default_timeout;
	pthread_mutex_unlock(&config.lock);
	json_decref(resp);
	return ok ? 0 : sb_fail(err, EPROTO, "the manager's config answer has no timeout settings");
}

int daemon_call_args(const struct daemon_peer *d, const struct bash_tool_view *v, json_t *args,
		     struct daemon_exec *x, json_t **refusal)
{
	char msg[512], why[SB_ERR_MSG_MAX + 64];
	struct sb_err err;
	long long max, def;

	if (daemon_call_config(d, &max, &def, &err) < 0) {
		snprintf(why, sizeof why, "sandbox-manager unavailable: %s", err.msg);
		*refusal = bash_tool_refusal(v, why);
		return -1;
	}
	if (bash_tool_args(args, max, &x->command, &x->timeout_given, msg, sizeof msg) < 0) {
		sb_info("%s: a call refused before reaching the manager: %s", d->who, msg);
		snprintf(why, sizeof why, "invalid arguments: %s", msg);
		*refusal = bash_tool_refusal(v, why);
		return -1;
	}
	x->timeout = x->timeout_given ? json_integer_value(json_object_get(args, "timeout_seconds")) : def;
	return 0;
}

void daemon_call_cancel(const struct daemon_peer *d, const char *tag, int64_t *next_ms)
{
	struct sb_err err;
	json_t *resp;

	if (*next_ms < 0 || clock_mono_ms() < *next_ms)
		return;
	/* Tagged: only this call is cancelled, never another client's call on the same session. */
	resp = daemon_call_quick(d, json_pack("{s:s, s:s, s:s}", "op", "cancel", "session", d->session, "tag", tag),
				 &err);
	*next_ms = clock_mono_ms() + CANCEL_RETRY_MS;
	if (resp == NULL) {
		sb_warn("%s: cancel of %s: %s", d->who, tag, err.msg);
	} else if (!json_is_true(json_object_get(resp, "ok"))) {
		sb_warn("%s: cancel of %s refused: %s", d->who, tag,
			json_string_value(json_object_get(json_object_get(resp, "error"), "message")) ?: "no reason");
	} else if (json_is_string(json_object_get(resp, "cancelled"))) {
		sb_info("%s: cancelled exec %s (%s)", d->who, json_string_value(json_object_get(resp, "cancelled")), tag);
		*next_ms = -1;
	}
	json_decref(resp);
}

/* Wait for the exec's answer on conn while acting on w; 1 with *resp, else -1. */
static int exec_wait(const struct daemon_peer *d, const struct daemon_exec *x, const struct daemon_wait *w,
		     struct control_conn *conn, json_t **resp, struct sb_err *err)
{
	int64_t started = clock_mono_ms(), deadline = started + (x->timeout + ANSWER_MARGIN_S) * 1000, cancel_next = 0;

	for (;;) {
		int n = control_conn_wait(conn, POLL_MS), cancel;

		if (n < 0 && errno != EINTR)
			return sb_fail_errno(err, "waiting for the manager");
		if (n > 0) {
			/* Its first byte is here: the rest of the answer has a bound. */
			if (control_conn_set_timeout(conn, ANSWER_READ_MS, err) < 0)
				return -1;
			n = control_conn_recv(conn, resp, err);
			if (n > 0 && w->output != NULL && json_object_get(*resp, "ok") == NULL &&
			    json_is_object(json_object_get(*resp, "output"))) {
				/* A live chunk, not the answer: the answer's bound starts again at its first byte. */
				w->output(w->ctx, json_object_get(*resp, "output"));
				json_decref(*resp);
				*resp = NULL;
				if (control_conn_set_timeout(conn, 0, err) < 0)
					return -1;
				n = 0;
			} else {
				return n > 0 ? 1 : n == 0 ? sb_fail(err, EPIPE, "the manager closed the connection") : -1;
			}
		}
		pthread_mutex_lock(w->lock);
		cancel = *w->cancelled;
		pthread_mutex_unlock(w->lock);
		if (cancel)
			daemon_call_cancel(d, x->tag, &cancel_next);
		else if (w->waiting != NULL)
			w->waiting(w->ctx, started);
		if (clock_mono_ms() > deadline)
			return sb_fail(err, ETIMEDOUT, "no answer from the manager %d s after the call's timeout",
				       ANSWER_MARGIN_S);
	}
}

json_t *daemon_call_bash(const struct daemon_peer *d, const struct bash_tool_view *v, const struct daemon_exec *x,
			 const struct daemon_wait *w)
{
	/* Beyond what the text can show whole, the manager keeps the whole output for the model. */
	json_t *req = json_pack("{s:s, s:s, s:s, s:s, s:I}", "op", "exec", "session", d->session, "command", x->command,
				"tag", x->tag, "keep_output", (json_int_t)mcp_shape_budget(v->max_output_chars));
	struct call c = { d, x, w };
	json_t *resp = NULL;
	struct sb_err err;
	char why[SB_ERR_MSG_MAX + 200];
	int rc;

	/* Unset, the daemon would apply its default instead of the timeout asked for: not sent. */
	if (req != NULL && ((x->timeout_given && json_object_set_new(req, "timeout_seconds", json_integer(x->timeout)) != 0) ||
			    (w != NULL && w->output != NULL && json_object_set_new(req, "stream", json_true()) != 0))) {
		json_decref(req);
		req = NULL;
	}
	rc = FOLLOW_NOT_SENT;
	if (req == NULL)
		sb_fail(&err, ENOMEM, "out of memory");
	else
		rc = follow_call(d->managers, req, call_exchange, call_stop, &c, &resp, &err);
	json_decref(req);
	if (rc == FOLLOW_NOT_SENT) {
		/* Nothing reached a daemon, so nothing ran; and nothing runs here instead. */
		snprintf(why, sizeof why, "sandbox-manager unavailable: %s", err.msg);
		return bash_tool_refusal(v, why);
	}
	if (rc == FOLLOW_LOST) {
		/* The request was sent: the command may have run. Say so, never guess. */
		snprintf(why, sizeof why, "sandbox-manager unavailable: %s before the result arrived; the command may "
			 "have run: check `sandbox-manager records --session %s` before running it again", err.msg,
			 d->session);
		return bash_tool_lost(v, why, x->timeout);
	}
	return bash_tool_answer(v, resp, x->timeout);
}
