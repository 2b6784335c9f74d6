/* The one copy of the clock helpers, for both programs: milliseconds on the monotonic clock (for
 * deadlines and durations) and on the real-time clock (for records and receipts). Async-signal-safe
 * (clock_gettime only, no locks, no allocation), so init and code between clone() and execve() may
 * call them too. */
#ifndef SB_CLOCK_H
#define SB_CLOCK_H

#include <stdint.h>
#include <time.h>

/* CLOCK_MONOTONIC in ms: for deadlines and durations; never jumps with the wall clock. */
int64_t clock_mono_ms(void);

/* CLOCK_REALTIME in ms since the epoch: for what is recorded or shown (started_ms, expiry). */
int64_t clock_real_ms(void);

/* The monotonic deadline timeout_ms from now (a negative timeout is 0: already due). */
int64_t clock_deadline_after(int64_t timeout_ms);

/* The CLOCK_MONOTONIC time wait_ms from now, for pthread_cond_timedwait on a condition variable
 * whose clock is CLOCK_MONOTONIC. */
void clock_mono_timespec_after(int wait_ms, struct timespec *out);

/* What is left until a monotonic deadline, for poll(): 0 once it has passed, at most INT_MAX. */
int clock_remaining_ms(int64_t deadline_ms);

#endif
