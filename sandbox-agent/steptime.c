/* Step timestamps (see steptime.h). Owns the shared page; never lets anything but clock values
 * into it, and costs nothing when the switch is off. */
#include "steptime.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

struct steptime *steptime_page;
static unsigned wakeups; /* the agent's wait loop, this call (steptime_wakeup) */

static const char *const step_names[STEP_COUNT] = {
	[STEP_MAIN] = "main",           [STEP_REQUEST] = "request",        [STEP_BEGUN] = "begin",
	[STEP_PREPARED] = "prepare",    [STEP_VIEW] = "view",
	[STEP_CLONED] = "clone",        [STEP_RELEASED] = "idmaps",        [STEP_INIT_GO] = "init_go",
	[STEP_INIT_HIDDEN] = "hide",    [STEP_INIT_WORLD] = "world",       [STEP_INIT_PROC] = "proc",
	[STEP_INIT_DROPPED] = "drop",   [STEP_CMD_START] = "cmd_fork",     [STEP_CMD_LANDLOCK] = "landlock",
	[STEP_CMD_EXEC] = "seccomp",    [STEP_INIT_REAPED] = "cmd_ran",    [STEP_AGENT_REAPED] = "teardown",
	[STEP_RECEIPT] = "receipt",     [STEP_RESULT] = "result_json",     [STEP_JOURNAL] = "journal",
	[STEP_END] = "result",
};

void steptime_init(void)
{
	const char *on = getenv("SANDBOX_AGENT_TIMING");
	void *p;

	if (on == NULL || strcmp(on, "1") != 0)
		return;
	/* Shared, so the marks of init and the command (copies of this process) reach the agent. */
	p = mmap(NULL, sizeof *steptime_page, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	if (p == MAP_FAILED)
		return; /* a diagnostic only: the agent runs the same without it */
	steptime_page = p;
	steptime_mark_on(STEP_MAIN);
}

void steptime_mark_on(enum step s)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	steptime_page->ns[s] = (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

void steptime_wakeup(void)
{
	if (steptime_page != NULL)
		wakeups++;
}

void steptime_reset(void)
{
	if (steptime_page != NULL)
		memset(steptime_page, 0, sizeof *steptime_page);
	wakeups = 0;
}

void steptime_report(const char *what)
{
	char line[1024];
	size_t len = 0;
	int64_t prev = 0, first = 0;

	if (steptime_page == NULL)
		return;
	for (int s = 0; s < STEP_COUNT; s++) {
		int64_t t = steptime_page->ns[s];
		int n;

		if (t == 0)
			continue;
		if (first == 0)
			first = prev = t;
		n = snprintf(line + len, sizeof line - len, " %s=%lld", step_names[s], (long long)((t - prev) / 1000));
		if (n < 0 || (size_t)n >= sizeof line - len)
			break;
		len += (size_t)n;
		prev = t;
	}
	fprintf(stderr, "sandbox-agent timing (%s, us since the previous step):%s total=%lld wakeups=%u\n", what,
		line, (long long)((prev - first) / 1000), wakeups);
}
