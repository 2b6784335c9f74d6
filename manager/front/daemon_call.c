/* The front ends' calls to the daemon (see daemon_call.h). It must never run a command itself: no
 * shell, no exec, no fallback when the daemon is unreachable. Every call has a connection of its
 * own while it runs, so the threads of a front end call at once without sharing one; one whose
 * answer came whole is kept for the next call (one at most), which then skips the connect and the
 * daemon's new connection thread (issue 18). */
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
#include "control_limits.h"
#include "log.h"
#include "mcp_shape.h"

#define QUICK_CALL_MS 10000  /* config and cancel: the daemon answers these at once */
#define ANSWER_MARGIN_S 300  /* beyond a call's timeout: the daemon's own margins and reconcile */
#define CANCEL_RETRY_MS 1000 /* a cancel that found nothing running yet is sent again */
#define POLL_MS 250

/* The timeout settings, once per process: a front end serves one daemon. */
static struct {
	pthread_mutex_t lock;
	int have;
	long long max_timeout, default_timeout;
} config = { .lock = PTHREAD_MUTEX_INITIALIZER };

static int socket_timeout(int fd, int ms, struct sb_err *err)
{
	struct timeval tv = { ms / 1000, (ms % 1000) * 1000 };

	if (setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv) < 0 ||
	    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv) < 0)
		return sb_fail_errno(err, "setting a timeout on the manager connection");
	return 0;
}

/* The kept connection: between two calls it carries nothing, so anything to read on it (the
 * daemon's close, at its stop or restart) means it is done with. */
static struct {
	pthread_mutex_t lock;
	int fd;
} kept = { PTHREAD_MUTEX_INITIALIZER, -1 };

static int kept_take(void)
{
	struct pollfd p = { -1, POLLIN, 0 };

	pthread_mutex_lock(&kept.lock);
	p.fd = kept.fd;
	kept.fd = -1;
	pthread_mutex_unlock(&kept.lock);
	if (p.fd >= 0 && poll(&p, 1, 0) != 0) {
		close(p.fd);
		p.fd = -1;
	}
	return p.fd;
}

/* A connection whose answer was read whole, for the next call; closed when one is kept already. */
static void kept_put(int fd)
{
	pthread_mutex_lock(&kept.lock);
	if (kept.fd < 0) {
		kept.fd = fd;
		fd = -1;
	}
	pthread_mutex_unlock(&kept.lock);
	if (fd >= 0)
		close(fd);
}

/* Connect (or take the kept connection) and send one request (consumed; NULL: out of memory).
 * -1: nothing reached the daemon, so nothing ran. A send on the kept connection that fails
 * delivered no whole request (the daemon acts on whole frames only): it is sent once more on a
 * new connection. */
static int daemon_open(const struct daemon_peer *d, json_t *req, struct sb_err *err)
{
	int fd = req ? kept_take() : sb_fail(err, ENOMEM, "out of memory");

	if (fd >= 0 && control_send(fd, req, CONTROL_REQUEST_CAP, err) < 0) {
		close(fd);
		fd = -1;
	}
	if (fd < 0 && req != NULL) {
		fd = control_connect(d->socket_path, err);
		if (fd >= 0 && control_send(fd, req, CONTROL_REQUEST_CAP, err) < 0) {
			close(fd);
			fd = -1;
		}
	}
	json_decref(req);
	return fd;
}

json_t *daemon_call_quick(const struct daemon_peer *d, json_t *req, struct sb_err *err)
{
	json_t *resp = NULL;
	int fd = daemon_open(d, req, err), rc;

	if (fd < 0)
		return NULL;
	rc = socket_timeout(fd, QUICK_CALL_MS, err);
	if (rc == 0 && (rc = control_recv(fd, CONTROL_RESPONSE_CAP, &resp, err)) == 0)
		sb_fail(err, EPIPE, "the manager closed the connection without answering");
	if (rc > 0)
		kept_put(fd);
	else
		close(fd);
	return rc > 0 ? resp : NULL;
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

/* Wait for the exec's answer on fd while acting on w; 1 with *resp, else -1. */
static int exec_wait(const struct daemon_peer *d, const struct daemon_exec *x, const struct daemon_wait *w, int fd,
		     json_t **resp, struct sb_err *err)
{
	int64_t started = clock_mono_ms(), deadline = started + (x->timeout + ANSWER_MARGIN_S) * 1000, cancel_next = 0;

	for (;;) {
		struct pollfd p = { fd, POLLIN, 0 };
		int n = poll(&p, 1, POLL_MS), cancel;

		if (n < 0 && errno != EINTR)
			return sb_fail_errno(err, "waiting for the manager");
		if (n > 0) {
			n = control_recv(fd, CONTROL_RESPONSE_CAP, resp, err);
			return n > 0 ? 1 : n == 0 ? sb_fail(err, EPIPE, "the manager closed the connection") : -1;
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
	json_t *resp = NULL;
	struct sb_err err;
	char why[SB_ERR_MSG_MAX + 200];
	int fd;

	/* Unset, the daemon would apply its default instead of the timeout asked for: not sent. */
	if (req != NULL && x->timeout_given && json_object_set_new(req, "timeout_seconds", json_integer(x->timeout)) != 0) {
		json_decref(req);
		req = NULL;
	}
	fd = daemon_open(d, req, &err);
	if (fd < 0) {
		/* Nothing reached the daemon, so nothing ran; and nothing runs here instead. */
		snprintf(why, sizeof why, "sandbox-manager unavailable: %s", err.msg);
		return bash_tool_refusal(v, why);
	}
	if (exec_wait(d, x, w, fd, &resp, &err) < 0) {
		close(fd);
		/* The request was sent: the command may have run. Say so, never guess. */
		snprintf(why, sizeof why, "sandbox-manager unavailable: %s before the result arrived; the command may "
			 "have run: check `sandbox-manager records --session %s` before running it again", err.msg,
			 d->session);
		return bash_tool_lost(v, why, x->timeout);
	}
	kept_put(fd);
	return bash_tool_answer(v, resp, x->timeout);
}
