/* Metrics (see metrics.h): the counters every thread updates and their text exposition. Owns no
 * I/O: status.c gathers the gauges, daemon.c and metrics_http.c hand the text out. Every update is
 * a few additions under one mutex, so a call never waits on a scrape for longer than a copy. */
#include "metrics.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "clock.h"

static const char *const step_names[METRICS_STEPS] = { "queue", "sandbox", "dispatch", "command", "receipt",
							"record" };
static const char *const exec_statuses[] = { "exited", "signaled", "timed_out", "cancelled", "uncertain",
					     "refused" };
#define EXEC_STATUSES (sizeof exec_statuses / sizeof exec_statuses[0])

/* Upper bounds in ms, and as rendered in `le` (seconds): from a record commit to the longest
 * command the default max-timeout-seconds allows. */
static const int64_t bucket_ms[] = { 1, 5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000, 10000, 30000, 60000,
				     120000, 300000, 600000 };
static const char *const bucket_le[] = { "0.001", "0.005", "0.01", "0.025", "0.05", "0.1", "0.25", "0.5", "1",
					 "2.5", "5", "10", "30", "60", "120", "300", "600" };
#define BUCKETS (sizeof bucket_ms / sizeof bucket_ms[0])
_Static_assert(sizeof bucket_le / sizeof bucket_le[0] == BUCKETS, "one rendered bound per bucket");

struct histogram {
	uint64_t in_bucket[BUCKETS + 1]; /* not cumulative; the last one is over every bound (+Inf only) */
	uint64_t count;
	int64_t sum_us;
};

static struct {
	pthread_mutex_t lock;
	struct histogram steps[METRICS_STEPS];
	uint64_t execs[EXEC_STATUSES];
	int64_t connections;
	uint64_t live_bytes[2]; /* live output passed to readers, and skipped by them */
	int64_t start_ms;
} mt = { .lock = PTHREAD_MUTEX_INITIALIZER };

void metrics_start(void)
{
	pthread_mutex_lock(&mt.lock);
	mt.start_ms = clock_mono_ms();
	pthread_mutex_unlock(&mt.lock);
}

int64_t metrics_uptime_ms(void)
{
	int64_t start;

	pthread_mutex_lock(&mt.lock);
	start = mt.start_ms;
	pthread_mutex_unlock(&mt.lock);
	return clock_mono_ms() - start;
}

void metrics_observe_step_us(enum metrics_step step, int64_t us)
{
	size_t b = 0;

	if ((unsigned)step >= METRICS_STEPS)
		return;
	if (us < 0)
		us = 0;
	while (b < BUCKETS && us > bucket_ms[b] * 1000)
		b++;
	pthread_mutex_lock(&mt.lock);
	mt.steps[step].in_bucket[b]++;
	mt.steps[step].count++;
	mt.steps[step].sum_us += us;
	pthread_mutex_unlock(&mt.lock);
}

void metrics_observe_step(enum metrics_step step, int64_t ms)
{
	metrics_observe_step_us(step, ms > INT64_MAX / 1000 ? INT64_MAX : ms * 1000);
}

/* The lap's clock: CLOCK_MONOTONIC in microseconds (clock.h keeps milliseconds, for deadlines). */
static int64_t mono_us(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

void metrics_lap_start(struct metrics_lap *lap)
{
	lap->mark_us = mono_us();
}

void metrics_lap(struct metrics_lap *lap, enum metrics_step step)
{
	int64_t now = mono_us();

	metrics_observe_step_us(step, now - lap->mark_us);
	lap->mark_us = now;
}

void metrics_exec_ended(const char *status)
{
	for (size_t i = 0; status != NULL && i < EXEC_STATUSES; i++) {
		if (strcmp(status, exec_statuses[i]) == 0) {
			pthread_mutex_lock(&mt.lock);
			mt.execs[i]++;
			pthread_mutex_unlock(&mt.lock);
			return;
		}
	}
}

void metrics_connection_opened(void)
{
	pthread_mutex_lock(&mt.lock);
	mt.connections++;
	pthread_mutex_unlock(&mt.lock);
}

void metrics_connection_closed(void)
{
	pthread_mutex_lock(&mt.lock);
	mt.connections--;
	pthread_mutex_unlock(&mt.lock);
}

void metrics_live_output(uint64_t streamed, uint64_t skipped)
{
	pthread_mutex_lock(&mt.lock);
	mt.live_bytes[0] += streamed;
	mt.live_bytes[1] += skipped;
	pthread_mutex_unlock(&mt.lock);
}

void metrics_reset(void)
{
	pthread_mutex_lock(&mt.lock);
	memset(mt.live_bytes, 0, sizeof mt.live_bytes);
	memset(mt.steps, 0, sizeof mt.steps);
	memset(mt.execs, 0, sizeof mt.execs);
	mt.connections = 0;
	pthread_mutex_unlock(&mt.lock);
}

/* ---- the text exposition ---- */

/* A label value as the format quotes it: backslash, double quote and newline escaped. */
static void label_value(FILE *f, const char *v)
{
	for (; *v != '\0'; v++) {
		if (*v == '\\' || *v == '"')
			fprintf(f, "\\%c", *v);
		else if (*v == '\n')
			fputs("\\n", f);
		else
			fputc(*v, f);
	}
}

static void family(FILE *f, const char *name, const char *type, const char *help)
{
	fprintf(f, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

static void seconds(FILE *f, int64_t ms)
{
	fprintf(f, "%lld.%03lld", (long long)(ms / 1000), (long long)(ms % 1000));
}

static void seconds_us(FILE *f, int64_t us)
{
	fprintf(f, "%lld.%06lld", (long long)(us / 1000000), (long long)(us % 1000000));
}

static void gauge(FILE *f, const char *name, const char *help, int64_t value)
{
	family(f, name, "gauge", help);
	fprintf(f, "%s %lld\n", name, (long long)value);
}

static void render_histograms(FILE *f, const struct histogram *h)
{
	family(f, "sandbox_manager_call_step_seconds", "histogram",
	       "Time of each step of a call (exec), by step; see docs/operations.md, Metrics.");
	for (size_t s = 0; s < METRICS_STEPS; s++) {
		uint64_t cumulative = 0;

		for (size_t b = 0; b < BUCKETS; b++) {
			cumulative += h[s].in_bucket[b];
			fprintf(f, "sandbox_manager_call_step_seconds_bucket{step=\"%s\",le=\"%s\"} %llu\n", step_names[s],
				bucket_le[b], (unsigned long long)cumulative);
		}
		fprintf(f, "sandbox_manager_call_step_seconds_bucket{step=\"%s\",le=\"+Inf\"} %llu\n", step_names[s],
			(unsigned long long)h[s].count);
		fprintf(f, "sandbox_manager_call_step_seconds_sum{step=\"%s\"} ", step_names[s]);
		seconds_us(f, h[s].sum_us);
		fprintf(f, "\nsandbox_manager_call_step_seconds_count{step=\"%s\"} %llu\n", step_names[s],
			(unsigned long long)h[s].count);
	}
}

int metrics_render(const struct metrics_gauges *g, char **text, size_t *len, struct sb_err *err)
{
	struct histogram steps[METRICS_STEPS];
	uint64_t execs[EXEC_STATUSES];
	int64_t connections, uptime = metrics_uptime_ms();
	uint64_t live[2];
	FILE *f;

	/* A copy under the lock, rendered outside it: a call's update never waits on the formatting. */
	pthread_mutex_lock(&mt.lock);
	memcpy(steps, mt.steps, sizeof steps);
	memcpy(execs, mt.execs, sizeof execs);
	connections = mt.connections;
	memcpy(live, mt.live_bytes, sizeof live);
	pthread_mutex_unlock(&mt.lock);

	*text = NULL;
	*len = 0;
	f = open_memstream(text, len);
	if (f == NULL)
		return sb_fail_errno(err, "rendering the metrics");
	family(f, "sandbox_manager_build_info", "gauge", "Always 1; the labels say which manager this is.");
	fputs("sandbox_manager_build_info{version=\"", f);
	label_value(f, g->version ? g->version : "");
	fputs("\",backend=\"", f);
	label_value(f, g->backend ? g->backend : "");
	fputs("\"} 1\n", f);
	family(f, "sandbox_manager_uptime_seconds", "gauge", "Time since the manager started.");
	fputs("sandbox_manager_uptime_seconds ", f);
	seconds(f, uptime);
	fputc('\n', f);
	family(f, "sandbox_manager_execs_total", "counter", "Execs ended and recorded by this manager, by status.");
	for (size_t i = 0; i < EXEC_STATUSES; i++)
		fprintf(f, "sandbox_manager_execs_total{status=\"%s\"} %llu\n", exec_statuses[i],
			(unsigned long long)execs[i]);
	render_histograms(f, steps);
	family(f, "sandbox_manager_sandboxes", "gauge", "Live sandboxes, by state: busy while a call runs in it.");
	fprintf(f, "sandbox_manager_sandboxes{state=\"idle\"} %lld\n", (long long)g->sandboxes_idle);
	fprintf(f, "sandbox_manager_sandboxes{state=\"busy\"} %lld\n", (long long)g->sandboxes_busy);
	family(f, "sandbox_manager_sessions", "gauge", "Sessions in the records, by state.");
	fprintf(f, "sandbox_manager_sessions{state=\"active\"} %lld\n", (long long)g->sessions_active);
	fprintf(f, "sandbox_manager_sessions{state=\"deleting\"} %lld\n", (long long)g->sessions_deleting);
	fprintf(f, "sandbox_manager_sessions{state=\"deleted\"} %lld\n", (long long)g->sessions_deleted);
	fprintf(f, "sandbox_manager_sessions{state=\"reserved\"} %lld\n", (long long)g->sessions_reserved);
	gauge(f, "sandbox_manager_uncertain_execs", "Uncertain execs of sessions not deleted: to reconcile by hand.",
	      g->uncertain);
	gauge(f, "sandbox_manager_reserved_sessions", "Sessions whose sandbox's end is not proven, or that recovery "
	      "could not settle: for an operator.", g->sessions_reserved);
	gauge(f, "sandbox_manager_unsettled_sessions", "Reserved sessions this start's recovery could not settle: "
	      "an exec left in flight, for resolve.", g->sessions_unsettled);
	gauge(f, "sandbox_manager_execs_in_flight", "Execs accepted or dispatched, not yet ended.", g->in_flight);
	gauge(f, "sandbox_manager_control_connections", "Control socket connections open now.", connections);
	family(f, "sandbox_manager_live_output_bytes_total", "counter", "Live output of running execs passed on to "
	       "their clients and followers (streamed), and bytes a slow reader skipped (skipped).");
	fprintf(f, "sandbox_manager_live_output_bytes_total{kind=\"streamed\"} %llu\n", (unsigned long long)live[0]);
	fprintf(f, "sandbox_manager_live_output_bytes_total{kind=\"skipped\"} %llu\n", (unsigned long long)live[1]);
	if (ferror(f)) {
		fclose(f);
		free(*text);
		*text = NULL;
		return sb_fail(err, ENOMEM, "rendering the metrics: out of memory");
	}
	if (fclose(f) != 0) {
		free(*text);
		*text = NULL;
		return sb_fail_errno(err, "rendering the metrics");
	}
	return 0;
}
