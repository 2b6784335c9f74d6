/* The tools/call queue of `sandbox-manager mcp` (see mcp_jobs.h). It must never run a command
 * itself: no shell, no exec, no fallback when the daemon is unreachable.
 *
 * Threads: the transports' threads validate and queue calls and answer everything else at once;
 * one worker runs the queued calls in order of arrival, so a cancellation is read and acted on
 * while a call blocks on the daemon. Every message about a call goes to the sink it came from. */
#include "mcp_jobs.h"

#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "bash_tool.h"
#include "clock.h"
#include "control.h"
#include "control_limits.h"
#include "log.h"
#include "mcp_shape.h"

#define QUICK_CALL_MS 10000             /* config and cancel: the daemon answers these at once */
#define ANSWER_MARGIN_S 300             /* beyond a call's timeout: the daemon's own margins and reconcile */
#define CANCEL_RETRY_MS 1000            /* a cancel that found nothing running yet is sent again */
#define PROGRESS_EVERY_MS 15000
#define POLL_MS 250

/* One tools/call that passed validation. */
struct mcp_job {
	json_t *id;             /* the request's id */
	json_t *progress_token; /* params._meta.progressToken, or NULL */
	struct mcp_sink *sink;  /* where its messages go */
	int structured, modern; /* how its result is shaped */
	char *command;
	long long timeout;      /* what the daemon applies: asked for, else its default */
	int timeout_given;
	int cancel_requested;   /* under jobs.lock */
	char tag[40];           /* sent with the exec and its cancel: "mcp-<pid>-<n>" */
	struct mcp_job *next;
};

static struct {
	struct mcp_settings st;
	pthread_mutex_t lock;   /* everything below */
	pthread_cond_t changed;
	struct mcp_job *head, *tail; /* waiting for the worker */
	struct mcp_job *running;
	int closing;
	int have_config;
	long long max_timeout, default_timeout;
	unsigned long calls;
	pthread_t worker;
} jobs = { .lock = PTHREAD_MUTEX_INITIALIZER, .changed = PTHREAD_COND_INITIALIZER };

const struct bash_tool_view *mcp_jobs_view(int structured, struct bash_tool_view *v)
{
	v->max_output_chars = jobs.st.max_output_chars;
	v->structured = structured;
	return v;
}

/* ---- the daemon ---- */

static int socket_timeout(int fd, int ms, struct sb_err *err)
{
	struct timeval tv = { ms / 1000, (ms % 1000) * 1000 };

	if (setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv) < 0 ||
	    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv) < 0)
		return sb_fail_errno(err, "setting a timeout on the manager connection");
	return 0;
}

/* Connect and send one request (consumed). -1: nothing reached the daemon, so nothing ran. */
static int daemon_open(json_t *req, struct sb_err *err)
{
	int fd = control_connect(jobs.st.socket_path, err);

	if (fd >= 0 && control_send(fd, req, CONTROL_REQUEST_CAP, err) < 0) {
		close(fd);
		fd = -1;
	}
	json_decref(req);
	return fd;
}

/* A request the daemon answers at once (config, cancel); bounded so no client is held up. */
static json_t *daemon_quick(json_t *req, struct sb_err *err)
{
	json_t *resp = NULL;
	int fd = daemon_open(req, err), rc;

	if (fd < 0)
		return NULL;
	rc = socket_timeout(fd, QUICK_CALL_MS, err);
	if (rc == 0 && (rc = control_recv(fd, CONTROL_RESPONSE_CAP, &resp, err)) == 0)
		sb_fail(err, EPIPE, "the manager closed the connection without answering");
	close(fd);
	return rc > 0 ? resp : NULL;
}

int mcp_jobs_config(long long *max_timeout, long long *default_timeout, struct sb_err *err)
{
	json_t *resp;
	int ok;

	pthread_mutex_lock(&jobs.lock);
	ok = jobs.have_config;
	*max_timeout = jobs.max_timeout;
	*default_timeout = jobs.default_timeout;
	pthread_mutex_unlock(&jobs.lock);
	if (ok)
		return 0;
	resp = daemon_quick(json_pack("{s:s}", "op", "config"), err);
	if (resp == NULL)
		return -1;
	ok = json_is_true(json_object_get(resp, "ok")) &&
	     json_is_integer(json_object_get(resp, "max_timeout_seconds")) &&
	     json_is_integer(json_object_get(resp, "default_timeout_seconds"));
	pthread_mutex_lock(&jobs.lock);
	if (ok) {
		jobs.max_timeout = json_integer_value(json_object_get(resp, "max_timeout_seconds"));
		jobs.default_timeout = json_integer_value(json_object_get(resp, "default_timeout_seconds"));
		jobs.have_config = 1;
	}
	*max_timeout = jobs.max_timeout;
	*default_timeout = jobs.default_timeout;
	pthread_mutex_unlock(&jobs.lock);
	json_decref(resp);
	return ok ? 0 : sb_fail(err, EPROTO, "the manager's config answer has no timeout settings");
}

/* ---- validation and the queue (a transport's thread) ---- */

static void job_free(struct mcp_job *j)
{
	if (j == NULL)
		return;
	json_decref(j->id);
	json_decref(j->progress_token);
	free(j->command);
	free(j);
}

/* The last of a call: its answer (consumed, may be NULL: none), then done. */
static void job_finish(struct mcp_sink *sink, json_t *msg)
{
	if (msg != NULL)
		sink->send(sink, msg);
	sink->done(sink);
}

/* Same id from the same client as a call still in flight? (the spec forbids reusing one; ids of
 * different HTTP clients are theirs). Under jobs.lock. */
static int id_in_flight(const struct mcp_sink *sink, json_t *id)
{
	if (jobs.running != NULL && jobs.running->sink == sink && json_equal(jobs.running->id, id))
		return 1;
	for (struct mcp_job *j = jobs.head; j != NULL; j = j->next)
		if (j->sink == sink && json_equal(j->id, id))
			return 1;
	return 0;
}

static void job_enqueue(struct mcp_job *j)
{
	pthread_mutex_lock(&jobs.lock);
	if (id_in_flight(j->sink, j->id)) {
		pthread_mutex_unlock(&jobs.lock);
		job_finish(j->sink, mcp_error_msg(j->id, RPC_INVALID_REQUEST, NULL,
						  "request id already in use by a call in flight"));
		job_free(j);
		return;
	}
	snprintf(j->tag, sizeof j->tag, "mcp-%d-%lu", (int)getpid(), ++jobs.calls);
	if (jobs.tail != NULL)
		jobs.tail->next = j;
	else
		jobs.head = j;
	jobs.tail = j;
	pthread_cond_broadcast(&jobs.changed);
	pthread_mutex_unlock(&jobs.lock);
}

void mcp_jobs_call(json_t *id, json_t *params, struct mcp_sink *sink, int structured, int modern)
{
	json_t *args = json_object_get(params, "arguments");
	struct bash_tool_view v;
	struct mcp_job *j;
	struct sb_err err;
	long long max, def;
	char msg[512], why[SB_ERR_MSG_MAX + 64];

	mcp_jobs_view(structured, &v);
	if (mcp_jobs_config(&max, &def, &err) < 0) {
		snprintf(why, sizeof why, "sandbox-manager unavailable: %s", err.msg);
		job_finish(sink, mcp_result_msg(id, bash_tool_refusal(&v, why), modern));
		return;
	}
	if ((j = calloc(1, sizeof *j)) == NULL) {
		job_finish(sink, mcp_error_msg(id, RPC_INTERNAL, NULL, "out of memory"));
		return;
	}
	if (bash_tool_args(args, max, &j->command, &j->timeout_given, msg, sizeof msg) < 0) {
		sb_info("mcp: a call refused before reaching the manager: %s", msg);
		job_free(j);
		snprintf(why, sizeof why, "invalid arguments: %s", msg);
		job_finish(sink, mcp_result_msg(id, bash_tool_refusal(&v, why), modern));
		return;
	}
	j->timeout = j->timeout_given ? json_integer_value(json_object_get(args, "timeout_seconds")) : def;
	j->id = json_incref(id);
	j->progress_token = json_incref(json_object_get(json_object_get(params, "_meta"), "progressToken"));
	j->sink = sink;
	j->structured = structured;
	j->modern = modern;
	job_enqueue(j);
}

/* ---- the worker ---- */

/* A cancellation was asked for: tell the daemon, again while it finds nothing running yet (the
 * call may still be starting its sandbox). The worker, and the reader once when the cancellation comes. */
static void job_cancel_send(const struct mcp_job *j, int64_t *next_ms)
{
	struct sb_err err;
	json_t *resp;

	if (*next_ms < 0 || clock_mono_ms() < *next_ms)
		return;
	/* Tagged: only this call is cancelled, never another client's call on the same session. */
	resp = daemon_quick(json_pack("{s:s, s:s, s:s}", "op", "cancel", "session", jobs.st.session, "tag", j->tag),
			    &err);
	if (resp == NULL) {
		sb_warn("mcp: cancel: %s", err.msg);
		*next_ms = clock_mono_ms() + CANCEL_RETRY_MS;
	} else if (!json_is_true(json_object_get(resp, "ok"))) {
		sb_warn("mcp: cancel refused: %s",
			json_string_value(json_object_get(json_object_get(resp, "error"), "message")) ?: "no reason");
		*next_ms = clock_mono_ms() + CANCEL_RETRY_MS;
	} else if (json_is_string(json_object_get(resp, "cancelled"))) {
		sb_info("mcp: cancelled exec %s", json_string_value(json_object_get(resp, "cancelled")));
		*next_ms = -1;
	} else {
		*next_ms = clock_mono_ms() + CANCEL_RETRY_MS;
	}
	json_decref(resp);
}

static void job_progress(struct mcp_job *j, int64_t started, int64_t *next_ms)
{
	int64_t now = clock_mono_ms();
	json_t *msg;

	if (j->progress_token == NULL || now < *next_ms)
		return;
	*next_ms = now + PROGRESS_EVERY_MS;
	msg = json_pack("{s:s, s:s, s:{s:O, s:I, s:I, s:s}}", "jsonrpc", "2.0", "method", "notifications/progress",
			"params", "progressToken", j->progress_token, "progress", (json_int_t)((now - started) / 1000),
			"total", (json_int_t)j->timeout, "message", "the command is still running");
	if (msg != NULL)
		j->sink->send(j->sink, msg);
}

/* Wait for the exec's answer on fd while acting on cancellation; 1 with *resp, else -1. */
static int job_wait(struct mcp_job *j, int fd, json_t **resp, struct sb_err *err)
{
	int64_t started = clock_mono_ms(), deadline = started + (j->timeout + ANSWER_MARGIN_S) * 1000;
	int64_t cancel_next = 0, progress_next = started + PROGRESS_EVERY_MS;

	for (;;) {
		struct pollfd p = { fd, POLLIN, 0 };
		int n = poll(&p, 1, POLL_MS), cancel;

		if (n < 0 && errno != EINTR)
			return sb_fail_errno(err, "waiting for the manager");
		if (n > 0) {
			n = control_recv(fd, CONTROL_RESPONSE_CAP, resp, err);
			return n > 0 ? 1 : n == 0 ? sb_fail(err, EPIPE, "the manager closed the connection") : -1;
		}
		pthread_mutex_lock(&jobs.lock);
		cancel = j->cancel_requested;
		pthread_mutex_unlock(&jobs.lock);
		if (cancel)
			job_cancel_send(j, &cancel_next);
		else
			job_progress(j, started, &progress_next);
		if (clock_mono_ms() > deadline)
			return sb_fail(err, ETIMEDOUT, "no answer from the manager %d s after the call's timeout",
				       ANSWER_MARGIN_S);
	}
}

/* The daemon's answer (consumed) as a tool result. */
static json_t *job_run(struct mcp_job *j)
{
	json_t *req = json_pack("{s:s, s:s, s:s, s:s}", "op", "exec", "session", jobs.st.session, "command",
				j->command, "tag", j->tag);
	json_t *resp = NULL;
	struct bash_tool_view v;
	struct sb_err err;
	char why[SB_ERR_MSG_MAX + 160];
	int fd;

	mcp_jobs_view(j->structured, &v);
	if (req != NULL && j->timeout_given)
		json_object_set_new(req, "timeout_seconds", json_integer(j->timeout));
	/* Beyond what the text can show whole, the manager keeps the whole output for the model. */
	if (req != NULL && json_object_set_new(req, "keep_output",
					       json_integer((json_int_t)mcp_shape_budget(jobs.st.max_output_chars))) != 0) {
		json_decref(req);
		req = NULL;
	}
	fd = req ? daemon_open(req, &err) : (sb_fail(&err, ENOMEM, "out of memory"), -1);
	if (fd < 0) {
		/* Nothing reached the daemon, so nothing ran; and nothing runs here instead. */
		snprintf(why, sizeof why, "sandbox-manager unavailable: %s", err.msg);
		return bash_tool_refusal(&v, why);
	}
	if (job_wait(j, fd, &resp, &err) < 0) {
		close(fd);
		/* The request was sent: the command may have run. Say so, never guess. */
		snprintf(why, sizeof why, "sandbox-manager unavailable: %s before the result arrived; the command may "
			 "have run: check `sandbox-manager records --session %s` before running it again", err.msg,
			 jobs.st.session);
		return bash_tool_lost(&v, why, j->timeout);
	}
	close(fd);
	return bash_tool_answer(&v, resp, j->timeout);
}

static void *worker_main(void *arg)
{
	(void)arg;
	for (;;) {
		struct mcp_job *j;
		json_t *result;
		int cancelled;

		pthread_mutex_lock(&jobs.lock);
		while (jobs.head == NULL && !jobs.closing)
			pthread_cond_wait(&jobs.changed, &jobs.lock);
		j = jobs.head;
		if (j == NULL) {
			pthread_mutex_unlock(&jobs.lock);
			return NULL;
		}
		jobs.head = j->next;
		if (jobs.head == NULL)
			jobs.tail = NULL;
		jobs.running = j;
		pthread_mutex_unlock(&jobs.lock);

		result = job_run(j);
		pthread_mutex_lock(&jobs.lock);
		cancelled = j->cancel_requested;
		jobs.running = NULL;
		pthread_cond_broadcast(&jobs.changed);
		pthread_mutex_unlock(&jobs.lock);
		/* The spec: no response to a cancelled request (its sender ignores one anyway). */
		if (cancelled) {
			json_decref(result);
			job_finish(j->sink, NULL);
		} else if (result == NULL) {
			job_finish(j->sink, mcp_error_msg(j->id, RPC_INTERNAL, NULL, "out of memory building the result"));
		} else {
			job_finish(j->sink, mcp_result_msg(j->id, result, j->modern));
		}
		job_free(j);
	}
}

/* Cancel the calls of sink that match id (NULL: all): a queued one is dropped (it never reached
 * the daemon), the running one is cancelled in the daemon by the worker. */
static void cancel_matching(struct mcp_sink *sink, json_t *id)
{
	struct mcp_job *dropped = NULL, now = { .tag = "" };
	int64_t at_once = 0;

	pthread_mutex_lock(&jobs.lock);
	if (jobs.running != NULL && jobs.running->sink == sink && (id == NULL || json_equal(jobs.running->id, id))) {
		jobs.running->cancel_requested = 1;
		memcpy(now.tag, jobs.running->tag, sizeof now.tag);
		sb_info("mcp: the client cancelled the running call: cancelling it in the manager");
	}
	for (struct mcp_job **p = &jobs.head; *p != NULL;) {
		struct mcp_job *j = *p;

		if (j->sink == sink && (id == NULL || json_equal(j->id, id))) {
			*p = j->next;
			j->next = dropped;
			dropped = j;
			sb_info("mcp: the client cancelled a queued call: dropped before it reached the manager");
		} else {
			p = &j->next;
		}
	}
	jobs.tail = NULL;
	for (struct mcp_job *t = jobs.head; t != NULL; t = t->next)
		jobs.tail = t;
	pthread_mutex_unlock(&jobs.lock);
	/* Sent at once from here too: a client that cancels often stops this server right after (Claude
	 * Code does, within the worker's poll), and the call would then run on to its timeout. The
	 * worker repeats it while the daemon finds nothing running yet. */
	if (now.tag[0] != '\0')
		job_cancel_send(&now, &at_once);
	while (dropped != NULL) {
		struct mcp_job *j = dropped;

		dropped = j->next;
		job_finish(j->sink, NULL);
		job_free(j);
	}
}

void mcp_jobs_cancel_id(struct mcp_sink *sink, json_t *id)
{
	if (id != NULL)
		cancel_matching(sink, id);
}

void mcp_jobs_cancel_sink(struct mcp_sink *sink)
{
	cancel_matching(sink, NULL);
}

int mcp_jobs_start(const struct mcp_settings *st)
{
	jobs.st = *st;
	return pthread_create(&jobs.worker, NULL, worker_main, NULL) == 0 ? 0 : -1;
}

/* The transport ended: the calls already received are answered for a while (a client may close
 * its end and still read); then the ones not started are dropped and a running one is left to
 * the daemon, which finishes and records it. */
int mcp_jobs_drain(int seconds)
{
	struct timespec until;
	int rc = 0;

	clock_gettime(CLOCK_REALTIME, &until);
	until.tv_sec += seconds;
	pthread_mutex_lock(&jobs.lock);
	jobs.closing = 1;
	pthread_cond_broadcast(&jobs.changed);
	while ((jobs.head != NULL || jobs.running != NULL) && rc == 0)
		rc = pthread_cond_timedwait(&jobs.changed, &jobs.lock, &until);
	while (jobs.head != NULL) {
		struct mcp_job *j = jobs.head;

		jobs.head = j->next;
		job_free(j); /* the transport is gone: nothing to tell */
	}
	jobs.tail = NULL;
	if (jobs.running != NULL) {
		sb_warn("mcp: the client is gone and a call is still running after %d s: leaving it to the manager, "
			"which records its end", seconds);
		return 1;
	}
	pthread_mutex_unlock(&jobs.lock);
	return pthread_join(jobs.worker, NULL) == 0 ? 0 : -1;
}
