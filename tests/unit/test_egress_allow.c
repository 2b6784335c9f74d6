/* Unit tests for manager/egress/egress_allow.c, the egress proxy's allow-list: patterns (exact,
 * .suffix, IP literals, ports), what a CONNECT target may be, the match (case, trailing dots,
 * suffix boundaries, literals only as listed), the 403's list, and the resolution's refusal of
 * loopback and unspecified addresses unless listed literally. Resolves only literals and
 * "localhost" (/etc/hosts): no network. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <string.h>

#include "egress_allow.h"

static struct egress_allow allow_of(const char *const *patterns)
{
	struct egress_allow a = { .n = 0 };
	struct sb_err err;

	for (size_t i = 0; patterns[i] != NULL; i++)
		if (egress_allow_add(&a, patterns[i], &err) < 0)
			fail_msg("egress_allow_add(%s): %s", patterns[i], err.msg);
	return a;
}

/* Whether target ("host:port") is admitted by a, through egress_target_parse as the proxy does;
 * -1 when the target itself is refused. */
static int admits(const struct egress_allow *a, const char *target)
{
	char host[EGRESS_HOST_MAX + 1];
	uint16_t port;
	bool literal;
	struct sb_err err;

	if (egress_target_parse(target, host, &port, &literal, &err) < 0)
		return -1;
	return egress_allow_match(a, host, port, literal) != NULL;
}

static void test_patterns_refused(void **state)
{
	static const char *const bad[] = { "", ":443", "api..internal", "api.internal.", ".", "..corp", "-a.b",
					   "a-.b", "a_b.c", "a b", "api.internal:0", "api.internal:65536",
					   "api.internal:44x", "api.internal:", "[::1", "[api.internal]:443",
					   "::1:443", ".10.0.0.1", "2130706433", "127.1", "0x7f000001", "0177.0.0.1",
					   "a/b", NULL };
	struct egress_allow a = { .n = 0 };
	struct sb_err err;

	(void)state;
	for (size_t i = 0; bad[i] != NULL; i++)
		if (egress_allow_add(&a, bad[i], &err) == 0)
			fail_msg("pattern '%s' was taken", bad[i]);
	assert_int_equal(a.n, 0);
	assert_int_equal(egress_allow_add(&a, "api.internal.", &err), -1);
	assert_non_null(strstr(err.msg, "no trailing dot"));
}

static void test_match_exact_and_suffix(void **state)
{
	static const char *const p[] = { "API.Internal", ".corp.example:8443", "10.0.0.1:443", "[2001:db8::1]:443",
					 NULL };
	struct egress_allow a = allow_of(p);

	(void)state;
	assert_int_equal(admits(&a, "api.internal:443"), 1);     /* port 443 by default */
	assert_int_equal(admits(&a, "API.INTERNAL:443"), 1);     /* case-insensitive */
	assert_int_equal(admits(&a, "api.internal:80"), 0);      /* another port */
	assert_int_equal(admits(&a, "api.internal.:443"), -1);   /* no trailing dot tricks */
	assert_int_equal(admits(&a, "x.api.internal:443"), 0);   /* exact is exact */
	assert_int_equal(admits(&a, "a.corp.example:8443"), 1);
	assert_int_equal(admits(&a, "a.b.corp.example:8443"), 1);
	assert_int_equal(admits(&a, "corp.example:8443"), 0);    /* the suffix's subdomains only */
	assert_int_equal(admits(&a, "xcorp.example:8443"), 0);   /* a label boundary */
	assert_int_equal(admits(&a, "a.corp.example:443"), 0);
	assert_int_equal(admits(&a, "10.0.0.1:443"), 1);
	assert_int_equal(admits(&a, "10.0.0.2:443"), 0);
	assert_int_equal(admits(&a, "[2001:db8:0::1]:443"), 1);  /* one text form per address */
	assert_int_equal(admits(&a, "api.internal"), -1);        /* a target names its port */
	assert_int_equal(admits(&a, "0x0a000001:443"), -1);      /* no other spelling of an address */
}

/* An address is admitted only when listed as that address: never by a name rule or a suffix. */
static void test_literals_only_as_listed(void **state)
{
	static const char *const p[] = { ".0.0.1", NULL };
	static const char *const names[] = { "localhost:443", ".corp.example", NULL };
	struct egress_allow a = { .n = 0 }, b = allow_of(names);
	struct sb_err err;

	(void)state;
	assert_int_equal(egress_allow_add(&a, p[0], &err), -1);
	assert_int_equal(admits(&b, "127.0.0.1:443"), 0);
	assert_int_equal(admits(&b, "10.corp.example:443"), 1);  /* a name that merely starts with digits */
}

static void test_describe(void **state)
{
	static const char *const p[] = { "api.internal", ".corp.example:443", "[::1]:8080", NULL };
	struct egress_allow a = allow_of(p), none = { .n = 0 };
	char out[256];

	(void)state;
	egress_allow_describe(&a, out, sizeof out);
	assert_string_equal(out, "api.internal:443, .corp.example:443, [::1]:8080");
	egress_allow_describe(&none, out, sizeof out);
	assert_string_equal(out, "none");
	egress_allow_describe(&a, out, 10); /* cut, never overrun */
	assert_int_equal(strlen(out), 9);
}

static void test_full(void **state)
{
	struct egress_allow a = { .n = 0 };
	struct sb_err err;

	(void)state;
	for (int i = 0; i < EGRESS_ALLOW_MAX; i++)
		assert_int_equal(egress_allow_add(&a, "a.example", &err), 0);
	assert_int_equal(egress_allow_add(&a, "a.example", &err), -1);
	assert_non_null(strstr(err.msg, "at most"));
}

/* A session's own list as its record keeps it, added to the manager's: each word by the same rules;
 * an empty list adds nothing; a broken word, an empty one (two spaces) or a trailing space refused. */
static void test_add_words(void **state)
{
	static const char *const p[] = { "api.internal", NULL };
	struct egress_allow a = allow_of(p);
	struct sb_err err;

	(void)state;
	assert_int_equal(egress_allow_add_words(&a, "", &err), 0);
	assert_int_equal(a.n, 1);
	assert_int_equal(egress_allow_add_words(&a, "192.0.2.1:18444 .corp.example:8443", &err), 0);
	assert_int_equal(a.n, 3);
	assert_int_equal(admits(&a, "192.0.2.1:18444"), 1);
	assert_int_equal(admits(&a, "git.corp.example:8443"), 1);
	assert_int_equal(admits(&a, "api.internal:443"), 1);
	assert_int_equal(admits(&a, "192.0.2.1:443"), 0);
	assert_int_equal(egress_allow_add_words(&a, "ok.example api.internal.", &err), -1);
	assert_non_null(strstr(err.msg, "trailing dot"));
	assert_int_equal(egress_allow_add_words(&a, "a.example  b.example", &err), -1);
	assert_int_equal(egress_allow_add_words(&a, "a.example ", &err), -1);
}

/* The manager's own listeners live on its loopback: a name resolving there is refused, the same
 * address listed literally is not; an unspecified address neither. */
static void test_resolve_loopback(void **state)
{
	static const char *const p[] = { "localhost:18081", "127.0.0.1:18081", "0.0.0.0:18081", NULL };
	struct egress_allow a = allow_of(p);
	struct sockaddr_storage sa;
	socklen_t len;
	struct sb_err err;
	const struct egress_rule *r;

	(void)state;
	r = egress_allow_match(&a, "localhost", 18081, false);
	assert_non_null(r);
	assert_int_equal(egress_resolve(r, "localhost", 18081, &sa, &len, &err), -1);
	assert_non_null(strstr(err.msg, "resolves only to loopback"));
	r = egress_allow_match(&a, "127.0.0.1", 18081, true);
	assert_non_null(r);
	assert_int_equal(egress_resolve(r, "127.0.0.1", 18081, &sa, &len, &err), 0);
	assert_int_equal(sa.ss_family, AF_INET);
	assert_int_equal(ntohs(((struct sockaddr_in *)&sa)->sin_port), 18081);
	assert_int_equal(ntohl(((struct sockaddr_in *)&sa)->sin_addr.s_addr), INADDR_LOOPBACK);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_patterns_refused),      cmocka_unit_test(test_match_exact_and_suffix),
		cmocka_unit_test(test_literals_only_as_listed), cmocka_unit_test(test_describe),
		cmocka_unit_test(test_full),                  cmocka_unit_test(test_resolve_loopback),
		cmocka_unit_test(test_add_words),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
