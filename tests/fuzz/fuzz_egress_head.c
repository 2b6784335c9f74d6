/* libFuzzer target: egress_head_parse (manager/egress/egress_head.c) over a sandbox's first bytes,
 * then egress_target_parse and the allow-list's match on the target it found. Checks that a head
 * is taken only whole and within EGRESS_HEAD_MAX, that its method and target keep to their
 * grammar, that a shorter prefix of a head is never a head, and that input over the bound without
 * an end is refused as such. Must never touch files, sockets or the network (no egress_resolve). */
#include <ctype.h>
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "egress_allow.h"
#include "egress_head.h"

static void check_target(const char *target)
{
	static struct egress_allow a;
	static int ready;
	char host[EGRESS_HOST_MAX + 1];
	uint16_t port;
	bool literal;
	struct sb_err err;

	if (!ready) {
		egress_allow_add(&a, "api.internal", &err);
		egress_allow_add(&a, ".corp.example:8443", &err);
		egress_allow_add(&a, "10.0.0.1:443", &err);
		ready = 1;
	}
	if (egress_target_parse(target, host, &port, &literal, &err) < 0)
		return;
	if (port == 0 || strlen(host) == 0 || strlen(host) > EGRESS_HOST_MAX)
		abort();
	for (const char *c = host; *c != '\0'; c++)
		if (isupper((unsigned char)*c))
			abort(); /* compared in lower case only */
	(void)egress_allow_match(&a, host, port, literal);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	const char *buf = (const char *)data;
	struct egress_head h, h2;
	struct sb_err err;
	size_t used = 0, used2 = 0;
	int rc = egress_head_parse(buf, size, &h, &used, &err);

	if (rc == 1) {
		if (used > size || used > EGRESS_HEAD_MAX || used < 4 || memcmp(buf + used - 4, "\r\n\r\n", 4) != 0)
			abort();
		if (h.method[0] == '\0' || strspn(h.method, "ABCDEFGHIJKLMNOPQRSTUVWXYZ") != strlen(h.method))
			abort();
		for (const char *c = h.target; *c != '\0'; c++)
			if (*c <= 0x20 || *c >= 0x7f)
				abort();
		if (h.minor != 0 && h.minor != 1)
			abort();
		/* one byte short of its end, it is not a head yet */
		if (egress_head_parse(buf, used - 1, &h2, &used2, &err) == 1)
			abort();
		check_target(h.target);
	} else if (rc == 0) {
		if (size >= EGRESS_HEAD_MAX)
			abort(); /* over the bound, an unfinished head is refused, never waited for */
	} else if (size >= EGRESS_HEAD_MAX && err.errnum != E2BIG && err.errnum != EINVAL) {
		abort();
	}
	return 0;
}
