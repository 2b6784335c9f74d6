/* The manager's metrics: the in-process counters (execs by status, each call's time by step, open
 * control connections) behind one mutex, and their Prometheus text exposition (format 0.0.4) with
 * the gauges the caller reads from the records and the live list (status.c). No series is ever
 * labelled with a session, an exec or anything else a client chooses: the set of series is fixed.
 * Times are measured in microseconds on the monotonic clock and exposed in seconds: a warm call's
 * steps take well under a millisecond each, and `make bench` divides their sums (issue 18). */
#ifndef SB_METRICS_H
#define SB_METRICS_H

#include <stddef.h>
#include <stdint.h>

#include "error.h"

/* The steps of one call (execpath.c), in order; docs/operations.md "Metrics" says what each holds. */
enum metrics_step {
	METRICS_STEP_QUEUE,    /* waiting for the session's turn */
	METRICS_STEP_SANDBOX,  /* the accepted record, the checks, the sandbox obtained (prepared if none is live) */
	METRICS_STEP_DISPATCH, /* the second check, the agent's connection, the dispatched record */
	METRICS_STEP_COMMAND,  /* the agent's exec: the command, then its result and receipt sent back */
	METRICS_STEP_RECEIPT,  /* the receipt verified (after a lost answer: asking the agent again first) */
	METRICS_STEP_RECORD,   /* the final record committed */
	METRICS_STEPS
};

/* A call's step clock: start it, then each metrics_lap() observes the time since the last mark
 * under its step and moves the mark, so each step boundary in execpath.c is one line. */
struct metrics_lap {
	int64_t mark_us;
};
void metrics_lap_start(struct metrics_lap *lap);
void metrics_lap(struct metrics_lap *lap, enum metrics_step step);
void metrics_observe_step(enum metrics_step step, int64_t ms);
void metrics_observe_step_us(enum metrics_step step, int64_t us);

/* An exec's end, once it is on record; a status that is not a final exec state is not counted. */
void metrics_exec_ended(const char *status);
void metrics_connection_opened(void);
void metrics_connection_closed(void);
/* Live output passed to a reader, and the bytes it skipped (live_exec.c). */
void metrics_live_output(uint64_t streamed, uint64_t skipped);

/* The daemon's start (called once, first); uptime is measured from it. */
void metrics_start(void);
int64_t metrics_uptime_ms(void);

/* What the caller reads at scrape time. */
struct metrics_gauges {
	const char *version;
	const char *backend;
	int64_t sandboxes_idle, sandboxes_busy;
	int64_t sessions_active, sessions_deleting, sessions_deleted, sessions_reserved; /* in the records */
	int64_t sessions_unsettled; /* of those reserved, the ones this start's recovery could not settle */
	int64_t uncertain;     /* uncertain execs of sessions not deleted (records_counts) */
	int64_t in_flight;     /* execs accepted or dispatched */
};

#define METRICS_CONTENT_TYPE "text/plain; version=0.0.4; charset=utf-8"

/* The whole exposition into *text (malloc'd, NUL-terminated, *len bytes), or -1 with err. */
int metrics_render(const struct metrics_gauges *g, char **text, size_t *len, struct sb_err *err);

/* Every counter back to zero (tests). */
void metrics_reset(void);

#endif
