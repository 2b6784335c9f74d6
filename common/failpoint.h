/* Failpoints for the reliability tests (docs/reliability.md): FAILPOINT("manager.exec.sent") marks a
 * step of a call where a test may stop the process dead. They exist only in a build with
 * -DSB_FAILPOINTS (`make failpoints`, into $(BUILD)/fp); in every other build a failpoint is nothing,
 * and its name is not in the binary. Never arms itself: only SB_FAILPOINT, read once at start. */
#ifndef SB_FAILPOINT_H
#define SB_FAILPOINT_H

#ifdef SB_FAILPOINTS
#include <stdbool.h>

/* SB_FAILPOINT=NAME[:N][:stop] arms one point: its Nth hit (default the first) fires. A malformed
 * value ends the process at start (exit 2), so a typo cannot pass for a point never reached. */

/* True exactly once, at the armed point's Nth hit; false for every other name. Thread-safe. */
bool failpoint_hit(const char *name);

/* At the Nth hit: SIGKILL to the whole process, or SIGSTOP with ":stop" (a test acts while it is
 * stopped, then sends SIGCONT). Both are logged first. */
void failpoint_fire(const char *name);

/* Arms SPEC (SB_FAILPOINT's syntax) and resets the count; -1 when malformed (nothing armed). */
int failpoint_arm(const char *spec);

#define FAILPOINT(name) failpoint_fire(name)
#else
#define FAILPOINT(name) do { } while (0)
#endif

#endif
