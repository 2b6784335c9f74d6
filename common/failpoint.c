/* Failpoints (failpoint.h): the armed point, its hit count and its action. Compiled to nothing
 * without -DSB_FAILPOINTS; with it, never fires on anything but SB_FAILPOINT's point. */
#ifdef SB_FAILPOINTS
#include "failpoint.h"

#include <errno.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "log.h"

#define FAILPOINT_NAME_MAX 128

static char armed[FAILPOINT_NAME_MAX];
static unsigned long target;
static bool stop_action;
static atomic_ulong hits;

int failpoint_arm(const char *spec)
{
	const char *colon = strchr(spec, ':');
	size_t len = colon ? (size_t)(colon - spec) : strlen(spec);
	unsigned long n = 1;
	bool stop = false;

	armed[0] = '\0';
	if (len == 0 || len >= sizeof armed)
		return -1;
	if (colon != NULL && colon[1] >= '0' && colon[1] <= '9') {
		char *end;

		errno = 0;
		n = strtoul(colon + 1, &end, 10);
		if (errno != 0 || n == 0)
			return -1;
		if (*end != '\0' && *end != ':')
			return -1;
		colon = *end == ':' ? end : NULL;
	}
	if (colon != NULL) {
		if (strcmp(colon + 1, "stop") != 0)
			return -1;
		stop = true;
	}
	memcpy(armed, spec, len);
	armed[len] = '\0';
	target = n;
	stop_action = stop;
	atomic_store(&hits, 0);
	return 0;
}

/* Read once, before main: every thread of the process sees the same armed point. */
__attribute__((constructor)) static void failpoint_init(void)
{
	const char *spec = getenv("SB_FAILPOINT");

	if (spec != NULL && spec[0] != '\0' && failpoint_arm(spec) < 0) {
		sb_error("SB_FAILPOINT='%s' is not NAME[:N][:stop] (N >= 1)", spec);
		_exit(2);
	}
}

bool failpoint_hit(const char *name)
{
	if (armed[0] == '\0' || strcmp(name, armed) != 0)
		return false;
	return atomic_fetch_add(&hits, 1) + 1 == target;
}

void failpoint_fire(const char *name)
{
	if (!failpoint_hit(name))
		return;
	sb_warn("failpoint %s reached (hit %lu): %s", name, target, stop_action ? "SIGSTOP" : "SIGKILL");
	/* kill(), not raise(): the signal is for the process, every thread of it. */
	kill(getpid(), stop_action ? SIGSTOP : SIGKILL);
}
#endif
