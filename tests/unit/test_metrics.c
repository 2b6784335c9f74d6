/* Unit tests for manager/observe/metrics.c: the exposition's shape (every sample declared by HELP and TYPE
 * first, one family each), the histogram's buckets (cumulative, +Inf equal to _count, _sum in
 * seconds), execs counted by status only for final states, label values escaped, the gauges as
 * given, and counters that stay right with eight threads updating at once. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "metrics.h"

static const struct metrics_gauges gauges = {
	.version = "0.1.0", .backend = "process", .sandboxes_idle = 2, .sandboxes_busy = 1, .sessions_active = 4,
	.sessions_deleting = 0, .sessions_deleted = 7, .sessions_reserved = 1, .sessions_unsettled = 1, .uncertain = 3, .in_flight = 1,
};

static char *render(const struct metrics_gauges *g)
{
	struct sb_err err;
	char *text = NULL;
	size_t len = 0;

	if (metrics_render(g, &text, &len, &err) != 0)
		fail_msg("metrics_render: %s", err.msg);
	assert_int_equal(strlen(text), len);
	return text;
}

/* The value of the sample whose name and labels are exactly series; fails when there is none. */
static double sample(const char *text, const char *series)
{
	size_t n = strlen(series);

	for (const char *line = text; line != NULL && *line; line = strchr(line, '\n') ? strchr(line, '\n') + 1 : NULL)
		if (strncmp(line, series, n) == 0 && line[n] == ' ')
			return strtod(line + n + 1, NULL);
	fail_msg("no sample %s in:\n%s", series, text);
	return -1;
}

static int has_line(const char *text, const char *line)
{
	const char *p = strstr(text, line);

	return p != NULL && (p == text || p[-1] == '\n') && p[strlen(line)] == '\n';
}

static void test_shape(void **state)
{
	char *text, *copy, *save = NULL, declared[64][80];
	size_t families = 0;

	(void)state;
	metrics_reset();
	text = render(&gauges);
	assert_true(text[strlen(text) - 1] == '\n');
	copy = strdup(text);
	assert_non_null(copy);
	for (char *line = strtok_r(copy, "\n", &save); line != NULL; line = strtok_r(NULL, "\n", &save)) {
		char name[80], type[16];
		size_t base;
		int known = 0;

		if (strncmp(line, "# HELP ", 7) == 0)
			continue;
		if (sscanf(line, "# TYPE %79s %15s", name, type) == 2) {
			for (size_t i = 0; i < families; i++)
				if (strcmp(declared[i], name) == 0)
					fail_msg("family %s declared twice", name);
			assert_true(strcmp(type, "counter") == 0 || strcmp(type, "gauge") == 0 ||
				    strcmp(type, "histogram") == 0);
			assert_true(families < 64);
			snprintf(declared[families++], sizeof declared[0], "%s", name);
			continue;
		}
		/* a sample: NAME[{LABELS}] VALUE, of a family declared before it */
		base = strcspn(line, "{ ");
		assert_true(base > 0 && base < sizeof name);
		memcpy(name, line, base);
		name[base] = '\0';
		assert_true(strspn(name, "abcdefghijklmnopqrstuvwxyz_") == base);
		for (size_t i = 0; i < families; i++) {
			size_t d = strlen(declared[i]);

			if (strcmp(name, declared[i]) == 0 ||
			    (strncmp(name, declared[i], d) == 0 &&
			     (strcmp(name + d, "_bucket") == 0 || strcmp(name + d, "_sum") == 0 || strcmp(name + d, "_count") == 0)))
				known = 1;
		}
		if (!known)
			fail_msg("sample before its TYPE: %s", line);
		{
			char *end, *value = strrchr(line, ' ');

			assert_non_null(value);
			strtod(value + 1, &end);
			assert_true(end != value + 1 && *end == '\0');
		}
	}
	assert_int_equal(families, 12);
	assert_true(has_line(text, "sandbox_manager_build_info{version=\"0.1.0\",backend=\"process\"} 1"));
	free(copy);
	free(text);
}

/* Live output: what readers got and what they skipped, each its own sample, summed. */
static void test_live_output_bytes(void **state)
{
	char *text;

	(void)state;
	metrics_reset();
	metrics_live_output(100, 0);
	metrics_live_output(16384, 65536);
	text = render(&gauges);
	assert_true(has_line(text, "sandbox_manager_live_output_bytes_total{kind=\"streamed\"} 16484"));
	assert_true(has_line(text, "sandbox_manager_live_output_bytes_total{kind=\"skipped\"} 65536"));
	free(text);
}

static void test_histogram_buckets(void **state)
{
	char *text;

	(void)state;
	metrics_reset();
	metrics_observe_step(METRICS_STEP_QUEUE, 0);
	metrics_observe_step(METRICS_STEP_QUEUE, 3);
	metrics_observe_step(METRICS_STEP_QUEUE, 7);
	metrics_observe_step(METRICS_STEP_QUEUE, 2000);
	metrics_observe_step(METRICS_STEP_QUEUE, 700000); /* over every bound: +Inf only */
	metrics_observe_step(METRICS_STEP_RECORD, 1);      /* on a bound: counted in it (le is "<=") */
	metrics_observe_step(METRICS_STEPS, 5);            /* no such step: ignored */
	text = render(&gauges);
	assert_true(has_line(text, "sandbox_manager_call_step_seconds_bucket{step=\"queue\",le=\"0.001\"} 1"));
	assert_true(has_line(text, "sandbox_manager_call_step_seconds_bucket{step=\"queue\",le=\"0.005\"} 2"));
	assert_true(has_line(text, "sandbox_manager_call_step_seconds_bucket{step=\"queue\",le=\"0.01\"} 3"));
	assert_true(has_line(text, "sandbox_manager_call_step_seconds_bucket{step=\"queue\",le=\"1\"} 3"));
	assert_true(has_line(text, "sandbox_manager_call_step_seconds_bucket{step=\"queue\",le=\"2.5\"} 4"));
	assert_true(has_line(text, "sandbox_manager_call_step_seconds_bucket{step=\"queue\",le=\"600\"} 4"));
	assert_true(has_line(text, "sandbox_manager_call_step_seconds_bucket{step=\"queue\",le=\"+Inf\"} 5"));
	assert_true(has_line(text, "sandbox_manager_call_step_seconds_count{step=\"queue\"} 5"));
	assert_true(has_line(text, "sandbox_manager_call_step_seconds_sum{step=\"queue\"} 702.010000"));
	assert_true(has_line(text, "sandbox_manager_call_step_seconds_bucket{step=\"record\",le=\"0.001\"} 1"));
	assert_true(has_line(text, "sandbox_manager_call_step_seconds_count{step=\"record\"} 1"));
	assert_true(has_line(text, "sandbox_manager_call_step_seconds_count{step=\"command\"} 0"));
	assert_true(has_line(text, "sandbox_manager_call_step_seconds_bucket{step=\"command\",le=\"+Inf\"} 0"));
	/* cumulative: never smaller than the bucket before, and +Inf is _count */
	{
		static const char *const les[] = { "0.001", "0.005", "0.01", "0.025", "0.05", "0.1", "0.25", "0.5", "1",
						   "2.5", "5", "10", "30", "60", "120", "300", "600", "+Inf" };
		char series[128];
		double last = 0;

		for (size_t i = 0; i < sizeof les / sizeof les[0]; i++) {
			double v;

			snprintf(series, sizeof series, "sandbox_manager_call_step_seconds_bucket{step=\"queue\",le=\"%s\"}",
				 les[i]);
			v = sample(text, series);
			assert_true(v >= last);
			last = v;
		}
		assert_true(last == sample(text, "sandbox_manager_call_step_seconds_count{step=\"queue\"}"));
	}
	free(text);
}

static void test_lap(void **state)
{
	struct metrics_lap lap;
	char *text;

	(void)state;
	metrics_reset();
	metrics_lap_start(&lap);
	usleep(30 * 1000);
	metrics_lap(&lap, METRICS_STEP_COMMAND);
	metrics_lap(&lap, METRICS_STEP_RECEIPT); /* right after: the mark moved, so this one is short */
	text = render(&gauges);
	assert_true(sample(text, "sandbox_manager_call_step_seconds_sum{step=\"command\"}") >= 0.030);
	assert_true(sample(text, "sandbox_manager_call_step_seconds_bucket{step=\"command\",le=\"0.025\"}") == 0);
	assert_true(sample(text, "sandbox_manager_call_step_seconds_bucket{step=\"receipt\",le=\"0.005\"}") == 1);
	free(text);
}

static void test_execs_and_gauges(void **state)
{
	struct metrics_gauges g = gauges;
	char *text;

	(void)state;
	metrics_reset();
	metrics_exec_ended("exited");
	metrics_exec_ended("exited");
	metrics_exec_ended("timed_out");
	metrics_exec_ended("uncertain");
	metrics_exec_ended("accepted"); /* not an end */
	metrics_exec_ended("bogus");
	metrics_exec_ended(NULL);
	metrics_connection_opened();
	metrics_connection_opened();
	metrics_connection_closed();
	g.version = "1.0 \"q\" \\ x\ny";
	text = render(&g);
	assert_true(has_line(text, "sandbox_manager_execs_total{status=\"exited\"} 2"));
	assert_true(has_line(text, "sandbox_manager_execs_total{status=\"timed_out\"} 1"));
	assert_true(has_line(text, "sandbox_manager_execs_total{status=\"uncertain\"} 1"));
	assert_true(has_line(text, "sandbox_manager_execs_total{status=\"signaled\"} 0"));
	assert_null(strstr(text, "status=\"accepted\""));
	assert_null(strstr(text, "bogus"));
	assert_true(has_line(text, "sandbox_manager_build_info{version=\"1.0 \\\"q\\\" \\\\ x\\ny\",backend=\"process\"} 1"));
	assert_true(has_line(text, "sandbox_manager_control_connections 1"));
	assert_true(has_line(text, "sandbox_manager_sandboxes{state=\"idle\"} 2"));
	assert_true(has_line(text, "sandbox_manager_sandboxes{state=\"busy\"} 1"));
	assert_true(has_line(text, "sandbox_manager_sessions{state=\"active\"} 4"));
	assert_true(has_line(text, "sandbox_manager_sessions{state=\"deleted\"} 7"));
	assert_true(has_line(text, "sandbox_manager_sessions{state=\"reserved\"} 1"));
	assert_true(has_line(text, "sandbox_manager_reserved_sessions 1"));
	assert_true(has_line(text, "sandbox_manager_unsettled_sessions 1"));
	assert_true(has_line(text, "sandbox_manager_uncertain_execs 3"));
	assert_true(has_line(text, "sandbox_manager_execs_in_flight 1"));
	free(text);
}

#define THREADS 8
#define ROUNDS 5000

static void *hammer(void *arg)
{
	(void)arg;
	for (int i = 0; i < ROUNDS; i++) {
		metrics_observe_step(METRICS_STEP_DISPATCH, i % 40);
		metrics_exec_ended("refused");
		metrics_connection_opened();
		metrics_connection_closed();
	}
	return NULL;
}

static void test_threads(void **state)
{
	pthread_t t[THREADS];
	char *text;

	(void)state;
	metrics_reset();
	for (int i = 0; i < THREADS; i++)
		assert_int_equal(pthread_create(&t[i], NULL, hammer, NULL), 0);
	for (int i = 0; i < THREADS; i++)
		pthread_join(t[i], NULL);
	text = render(&gauges);
	assert_true(sample(text, "sandbox_manager_call_step_seconds_count{step=\"dispatch\"}") == THREADS * ROUNDS);
	assert_true(sample(text, "sandbox_manager_call_step_seconds_bucket{step=\"dispatch\",le=\"+Inf\"}") ==
		    THREADS * ROUNDS);
	assert_true(sample(text, "sandbox_manager_execs_total{status=\"refused\"}") == THREADS * ROUNDS);
	assert_true(sample(text, "sandbox_manager_control_connections") == 0);
	free(text);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_shape),
		cmocka_unit_test(test_histogram_buckets),
		cmocka_unit_test(test_live_output_bytes),
		cmocka_unit_test(test_lap),
		cmocka_unit_test(test_execs_and_gauges),
		cmocka_unit_test(test_threads),
	};

	metrics_start();
	return cmocka_run_group_tests(tests, NULL, NULL);
}
