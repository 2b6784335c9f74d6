/* Where one call's time goes: a timestamp per step of the boundary, recorded by the agent, init and
 * the command, and reported on stderr when SANDBOX_AGENT_TIMING=1 (docs/performance.md). Off, a
 * mark is one load and one branch: the page is never mapped. It must never carry anything but
 * timestamps: on, it is the one page the agent shares with init and, until execve, the command. */
#ifndef SB_STEPTIME_H
#define SB_STEPTIME_H

#include <stdint.h>

enum step {
	STEP_MAIN,           /* agent: main() entered */
	STEP_REQUEST,        /* agent (serve): an Exec received, checked and claimed */
	STEP_BEGUN,          /* agent (serve): its journal entry durable, the command may start */
	STEP_PREPARED,       /* agent: keys loaded, boundary prepared (seccomp, Landlock probe) */
	STEP_VIEW,           /* agent: mountinfo read, aliases found, writable roots checked */
	STEP_CLONED,         /* agent: the namespaces exist (clone3 returned) */
	STEP_RELEASED,       /* agent: id maps written, init released */
	STEP_INIT_GO,        /* init: released */
	STEP_INIT_HIDDEN,    /* init: private tree, private directories hidden */
	STEP_INIT_WORLD,     /* init: the read-only world built (binds, /tmp, /dev) */
	STEP_INIT_PROC,      /* init: /proc mounted, pid_max set, in the working directory */
	STEP_INIT_DROPPED,   /* init: capabilities and ids dropped, not dumpable */
	STEP_CMD_START,      /* command: forked by init */
	STEP_CMD_LANDLOCK,   /* command: stdio, limits and its Landlock layer in place */
	STEP_CMD_EXEC,       /* command: seccomp loaded, about to execve */
	STEP_INIT_REAPED,    /* init: the command reaped */
	STEP_AGENT_REAPED,   /* agent: init reaped, the namespace empty */
	STEP_RECEIPT,        /* agent: receipt signed, written, verified (exec: and fsynced) */
	STEP_RESULT,         /* agent: the result's JSON text built */
	STEP_JOURNAL,        /* agent (serve): the finished entry written; it and the receipt fsynced */
	STEP_END,            /* agent: result printed / sent */
	STEP_COUNT
};

struct steptime {
	int64_t ns[STEP_COUNT]; /* CLOCK_MONOTONIC; 0: the step did not happen */
};

/* NULL unless SANDBOX_AGENT_TIMING=1 was set when the agent started (steptime_init). */
extern struct steptime *steptime_page;

/* Reads the switch; maps the shared page when it is on. Once, in main(). */
void steptime_init(void);

/* Async-signal-safe; no allocation: init and the command call it between clone() and execve(). */
void steptime_mark_on(enum step s);

static inline void steptime_mark(enum step s)
{
	if (steptime_page != 0)
		steptime_mark_on(s);
}

/* Counts one wake-up of the agent's wait loop (boundary_run.c). The count is the agent's own, never in
 * the shared page; the timing line reports it as wakeups=N: a loop that sleeps between events
 * wakes a few times for `true`, a spinning one thousands of times (agent_cleanup.sh's wait_no_spin). */
void steptime_wakeup(void);

/* Clears every mark (serve, as an exec is claimed: its steps then count from STEP_REQUEST). */
void steptime_reset(void);

/* One line on stderr with each step's offset from the previous one, in microseconds. */
void steptime_report(const char *what);

#endif
