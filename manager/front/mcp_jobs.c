/* The tools/call queue of `sandbox-manager mcp` (see mcp_jobs.h). It must never run a command
 * itself: no shell, no exec, no fallback when the daemon is unreachable.
 *
 * Threads: the transports' threads validate and queue calls and answer everything else at once;
 * one worker runs the queued calls in order of arrival, so a cancellation is read and acted on
 * while a call blocks on the daemon. Every message about a call goes to the sink it came from. */
#include "mcp_jobs.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "bash_tool.h"
#include "clock.h"
#include "daemon_call.h"
#include "live_summary.h"
#include "log.h"

#define PROGRESS_EVERY_MS 15000
#define PROGRESS_LINE_MS 1000 /* at most one progress a second, however fast the output comes */
/* Calls waiting for the worker, from every transport: a client that sends faster than its session
 * runs them is answered at once beyond this (nothing ran), instead of growing the queue without
 * bound (issue 27). The session runs one command at a time: 64 waiting is minutes of work. */
#define JOBS_QUEUED_MAX 64

/* One tools/call that passed validation. */
struct mcp_job {
	json_t *id;             /* the request's id */
	json_t *progress_token; /* params._meta.progressToken, or NULL */
	struct mcp_sink *sink;  /* where its messages go */
	int structured, modern; /* how its result is shaped */
	struct daemon_exec exec; /* its tag: "mcp-<pid>-<n>" */
	int cancel_requested;   /* under jobs.lock */
	int64_t progress_next;  /* the worker's: when the next progress is due (0: not yet running) */
	int64_t progress_last;  /* the worker's: when the last one went */
	char line[LIVE_SUMMARY_MAX + 1]; /* the worker's: the newest output line, terminal-safe */
	bool line_new;          /* it came after the last progress */
	struct mcp_job *next;
};

static struct {
	struct mcp_settings st;
	struct daemon_peer peer;
	pthread_mutex_t lock;   /* everything below */
	pthread_cond_t changed;
	struct mcp_job *head, *tail; /* waiting for the worker */
	struct mcp_job *running;
	int closing;
	unsigned long calls;
	pthread_t worker;
} jobs = { .lock = PTHREAD_MUTEX_INITIALIZER, .changed = PTHREAD_COND_INITIALIZER };

const struct bash_tool_view *mcp_jobs_view(int structured, struct bash_tool_view *v)
{
	v->max_output_chars = jobs.st.max_output_chars;
	v->structured = structured;
	return v;
}

int mcp_jobs_config(long long *max_timeout, long long *default_timeout, struct sb_err *err)
{
	return daemon_call_config(&jobs.peer, max_timeout, default_timeout, err);
}

/* ---- validation and the queue (a transport's thread) ---- */

static void job_free(struct mcp_job *j)
{
	if (j == NULL)
		return;
	json_decref(j->id);
	json_decref(j->progress_token);
	free(j->exec.command);
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

/* Under jobs.lock. */
static unsigned jobs_queued(void)
{
	unsigned n = 0;

	for (struct mcp_job *j = jobs.head; j != NULL; j = j->next)
		n++;
	return n;
}

static void job_enqueue(struct mcp_job *j)
{
	pthread_mutex_lock(&jobs.lock);
	if (jobs_queued() >= JOBS_QUEUED_MAX) {
		pthread_mutex_unlock(&jobs.lock);
		sb_warn("mcp: refused a call: %d calls already wait for this session's turn", JOBS_QUEUED_MAX);
		job_finish(j->sink, mcp_error_msg(j->id, RPC_INTERNAL, NULL,
						  "%d calls already wait for this session's turn: this one did not run; "
						  "send it again once some have finished", JOBS_QUEUED_MAX));
		job_free(j);
		return;
	}
	if (id_in_flight(j->sink, j->id)) {
		pthread_mutex_unlock(&jobs.lock);
		job_finish(j->sink, mcp_error_msg(j->id, RPC_INVALID_REQUEST, NULL,
						  "request id already in use by a call in flight"));
		job_free(j);
		return;
	}
	snprintf(j->exec.tag, sizeof j->exec.tag, "mcp-%d-%lu", (int)getpid(), ++jobs.calls);
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
	struct bash_tool_view v;
	struct mcp_job *j;
	json_t *refusal;

	mcp_jobs_view(structured, &v);
	if ((j = calloc(1, sizeof *j)) == NULL) {
		job_finish(sink, mcp_error_msg(id, RPC_INTERNAL, NULL, "out of memory"));
		return;
	}
	if (daemon_call_args(&jobs.peer, &v, json_object_get(params, "arguments"), &j->exec, &refusal) < 0) {
		job_free(j);
		job_finish(sink, mcp_result_msg(id, refusal, modern));
		return;
	}
	j->id = json_incref(id);
	j->progress_token = json_incref(json_object_get(json_object_get(params, "_meta"), "progressToken"));
	j->sink = sink;
	j->structured = structured;
	j->modern = modern;
	job_enqueue(j);
}

/* ---- the worker ---- */

/* While the call runs, when the client asked: a progress notification with the newest output line
 * when one came (at most one a PROGRESS_LINE_MS), else every PROGRESS_EVERY_MS; progress is the
 * whole seconds elapsed, which the spacing keeps increasing. */
static void job_progress(void *ctx, int64_t started)
{
	struct mcp_job *j = ctx;
	int64_t now = clock_mono_ms();
	char message[LIVE_SUMMARY_MAX + 64];
	json_t *msg;

	if (j->progress_next == 0)
		j->progress_next = started + PROGRESS_EVERY_MS; /* the first after a whole interval */
	if (j->progress_token == NULL || now < j->progress_last + PROGRESS_LINE_MS ||
	    (now < j->progress_next && !j->line_new))
		return;
	j->progress_next = now + PROGRESS_EVERY_MS;
	j->progress_last = now;
	j->line_new = false;
	if (j->line[0] != '\0')
		snprintf(message, sizeof message, "%llds: %s", (long long)((now - started) / 1000), j->line);
	else
		snprintf(message, sizeof message, "the command is still running");
	msg = json_pack("{s:s, s:s, s:{s:O, s:I, s:I, s:s}}", "jsonrpc", "2.0", "method", "notifications/progress",
			"params", "progressToken", j->progress_token, "progress", (json_int_t)((now - started) / 1000),
			"total", (json_int_t)j->exec.timeout, "message", message);
	if (msg != NULL)
		j->sink->send(j->sink, msg);
}

/* A live chunk (daemon_call.h): its last line becomes the next progress's message. */
static void job_output(void *ctx, json_t *chunk)
{
	struct mcp_job *j = ctx;
	json_t *text = json_object_get(chunk, "text");

	if (live_summary_take(j->line, json_string_value(text) ?: "", json_string_length(text),
			      json_is_true(json_object_get(chunk, "escaped"))))
		j->line_new = true;
}

/* The daemon's answer as a tool result. */
static json_t *job_run(struct mcp_job *j)
{
	struct daemon_wait w = { &jobs.lock, &j->cancel_requested, job_progress, j,
				 j->progress_token != NULL ? job_output : NULL };
	struct bash_tool_view v;

	return daemon_call_bash(&jobs.peer, mcp_jobs_view(j->structured, &v), &j->exec, &w);
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
	struct mcp_job *dropped = NULL;
	char running[DAEMON_CALL_TAG_MAX] = "";
	int64_t at_once = 0;

	pthread_mutex_lock(&jobs.lock);
	if (jobs.running != NULL && jobs.running->sink == sink && (id == NULL || json_equal(jobs.running->id, id))) {
		jobs.running->cancel_requested = 1;
		memcpy(running, jobs.running->exec.tag, sizeof running);
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
	if (running[0] != '\0')
		daemon_call_cancel(&jobs.peer, running, &at_once);
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
	jobs.peer = (struct daemon_peer){ st->managers, st->session, "mcp" };
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
