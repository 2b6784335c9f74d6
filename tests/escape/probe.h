/* What the syscall-probing attack programs share: one line per probe ("NAME errno=E", read by the
 * tests) and a count of the probes whose outcome was not the expected one (the exit status). */
#ifndef ESCAPE_PROBE_H
#define ESCAPE_PROBE_H

#include <errno.h>
#include <stdio.h>

#include "guard.h"

static int failures;

/* Prints NAME errno=E; counts a failure unless the outcome is WANT (0: the call must succeed). */
static inline void report(const char *name, long r, int e, int want)
{
	int got = r < 0 ? e : 0;

	printf("%s errno=%s\n", name, guard_errname(got));
	if (got != want)
		failures++;
}

#define PROBE(name, want, call) \
	do { \
		long r_; \
		errno = 0; \
		r_ = (long)(call); \
		report((name), r_, errno, (want)); \
	} while (0)

#endif
