/* Clock helpers (see clock.h). Only clock_gettime: safe in a signal handler and after fork. */
#include "clock.h"

#include <limits.h>
#include <time.h>

static int64_t clock_ms(clockid_t id)
{
	struct timespec ts;

	/* Cannot fail with these clock ids and a valid pointer (clock_gettime(2): EINVAL, EFAULT). */
	clock_gettime(id, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

int64_t clock_mono_ms(void)
{
	return clock_ms(CLOCK_MONOTONIC);
}

int64_t clock_real_ms(void)
{
	return clock_ms(CLOCK_REALTIME);
}

int64_t clock_deadline_after(int64_t timeout_ms)
{
	return clock_mono_ms() + (timeout_ms > 0 ? timeout_ms : 0);
}

void clock_mono_timespec_after(int wait_ms, struct timespec *out)
{
	clock_gettime(CLOCK_MONOTONIC, out);
	out->tv_sec += wait_ms / 1000;
	out->tv_nsec += (long)(wait_ms % 1000) * 1000000L;
	if (out->tv_nsec >= 1000000000L) {
		out->tv_sec++;
		out->tv_nsec -= 1000000000L;
	}
}

int clock_remaining_ms(int64_t deadline_ms)
{
	int64_t left = deadline_ms - clock_mono_ms();

	return left <= 0 ? 0 : left > INT_MAX ? INT_MAX : (int)left;
}
