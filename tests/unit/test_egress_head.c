/* Unit tests for manager/egress/egress_head.c, the request head a sandbox sends its egress proxy:
 * a CONNECT head whole or not yet, the bytes after it left to the tunnel, each grammar rule that
 * ends a connection (bare LF, obs-fold, a control byte, a lower-case or long method, HTTP/2), and
 * the bounds (EGRESS_HEAD_MAX, EGRESS_FIELDS_MAX, EGRESS_TARGET_MAX) refused as bounds. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "egress_head.h"

static int parse(const char *text, struct egress_head *h, size_t *used, struct sb_err *err)
{
	return egress_head_parse(text, strlen(text), h, used, err);
}

static void test_connect_whole(void **state)
{
	static const char head[] = "CONNECT api.internal:443 HTTP/1.1\r\nHost: api.internal:443\r\n"
				   "Proxy-Connection: Keep-Alive\r\n\r\n";
	char buf[sizeof head + 8];
	struct egress_head h;
	struct sb_err err;
	size_t used = 0;

	(void)state;
	/* every prefix is "not yet" */
	for (size_t n = 0; n < sizeof head - 1; n++)
		assert_int_equal(egress_head_parse(head, n, &h, &used, &err), 0);
	/* the tunnel's first bytes may follow the head: they are not the head's */
	snprintf(buf, sizeof buf, "%s\x16\x03\x01", head);
	assert_int_equal(parse(buf, &h, &used, &err), 1);
	assert_int_equal(used, sizeof head - 1);
	assert_string_equal(h.method, "CONNECT");
	assert_string_equal(h.target, "api.internal:443");
	assert_int_equal(h.minor, 1);
	assert_int_equal(h.fields, 2);
	assert_int_equal(parse("CONNECT x:1 HTTP/1.0\r\n\r\n", &h, &used, &err), 1);
	assert_int_equal(h.minor, 0);
	assert_int_equal(h.fields, 0);
	assert_int_equal(parse("GET http://x/ HTTP/1.1\r\nA:\t b \x80\r\n\r\n", &h, &used, &err), 1);
	assert_string_equal(h.method, "GET");
}

static void test_malformed(void **state)
{
	static const char *const bad[] = {
		"CONNECT x:1 HTTP/1.1\n\r\n\r\n",            /* bare LF in the request line */
		"CONNECT x:1 HTTP/1.1\r\nA: b\nC: d\r\n\r\n", /* bare LF in a field */
		"CONNECT x:1 HTTP/1.1\r\n folded\r\n\r\n",   /* obs-fold */
		"CONNECT x:1 HTTP/1.1\r\nA: b\x01\r\n\r\n",   /* a control byte */
		"CONNECT x:1 HTTP/1.1\r\nA b\r\n\r\n",       /* no colon */
		"CONNECT x:1 HTTP/1.1\r\n: b\r\n\r\n",       /* no name */
		"connect x:1 HTTP/1.1\r\n\r\n",              /* methods are upper case */
		"CONNECT  x:1 HTTP/1.1\r\n\r\n",             /* two spaces */
		"CONNECT x:1 HTTP/2.0\r\n\r\n",
		"CONNECT x:1 HTTP/1.1 \r\n\r\n",
		"CONNECT x:1\r\n\r\n",
		"CONNECTCONNECTCONNECT x:1 HTTP/1.1\r\n\r\n", /* over EGRESS_METHOD_MAX */
		"\r\n\r\n",
		NULL,
	};
	struct egress_head h;
	struct sb_err err;
	size_t used;

	(void)state;
	for (size_t i = 0; bad[i] != NULL; i++)
		if (parse(bad[i], &h, &used, &err) != -1 || err.errnum != EINVAL)
			fail_msg("head %zu taken: %s", i, bad[i]);
	/* a NUL in the target (the parser is given lengths, not strings) */
	assert_int_equal(egress_head_parse("CONNECT x\0:1 HTTP/1.1\r\n\r\n", 26, &h, &used, &err), -1);
}

static void test_bounds(void **state)
{
	static char big[EGRESS_HEAD_MAX + 64];
	struct egress_head h;
	struct sb_err err;
	size_t used, n;

	(void)state;
	/* no end within EGRESS_HEAD_MAX: refused as a bound, never waited for */
	n = (size_t)snprintf(big, sizeof big, "CONNECT x:1 HTTP/1.1\r\nA: ");
	memset(big + n, 'a', sizeof big - n - 1);
	assert_int_equal(egress_head_parse(big, EGRESS_HEAD_MAX - 1, &h, &used, &err), 0);
	assert_int_equal(egress_head_parse(big, EGRESS_HEAD_MAX, &h, &used, &err), -1);
	assert_int_equal(err.errnum, E2BIG);
	/* the end just past the bound does not count */
	memcpy(big + EGRESS_HEAD_MAX - 2, "\r\n\r\n", 4);
	assert_int_equal(egress_head_parse(big, EGRESS_HEAD_MAX + 2, &h, &used, &err), -1);
	assert_int_equal(err.errnum, E2BIG);
	/* too many fields */
	n = (size_t)snprintf(big, sizeof big, "CONNECT x:1 HTTP/1.1\r\n");
	for (int i = 0; i <= EGRESS_FIELDS_MAX; i++)
		n += (size_t)snprintf(big + n, sizeof big - n, "A: b\r\n");
	snprintf(big + n, sizeof big - n, "\r\n");
	assert_int_equal(parse(big, &h, &used, &err), -1);
	assert_int_equal(err.errnum, E2BIG);
	/* a target over EGRESS_TARGET_MAX */
	n = (size_t)snprintf(big, sizeof big, "CONNECT ");
	memset(big + n, 'a', EGRESS_TARGET_MAX + 1);
	snprintf(big + n + EGRESS_TARGET_MAX + 1, sizeof big - n - EGRESS_TARGET_MAX - 1, ":1 HTTP/1.1\r\n\r\n");
	assert_int_equal(parse(big, &h, &used, &err), -1);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_connect_whole),
		cmocka_unit_test(test_malformed),
		cmocka_unit_test(test_bounds),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
