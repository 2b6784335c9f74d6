/* Unit tests for common/opts.c, the one option parser of both programs, and for `serve`'s use of
 * it (manager/core/config.c): `--opt VALUE` and `--opt=VALUE` are one option, an abbreviation is
 * an unknown option (issue 27: `serve --conf FILE` ran on the defaults), and each usage error
 * says which option was wrong. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "config.h"
#include "opts.h"

static const struct option longopts[] = {
	{ "config", 1, NULL, 'c' }, { "config-check", 0, NULL, 'k' }, { "json", 0, NULL, 'j' },
	{ "state-dir", 1, NULL, 's' }, { "help", 0, NULL, 'h' }, { NULL, 0, NULL, 0 },
};

/* Parses argv (NULL-terminated); the options' letters and values into got ("c=F,j,"), and the
 * last return (OPTS_END or OPTS_BAD) with err. */
static int parse(char **argv, char *got, size_t len, struct sb_err *err)
{
	int argc = 0, opt;

	while (argv[argc] != NULL)
		argc++;
	got[0] = '\0';
	opts_reset();
	while ((opt = opts_next(argc, argv, "h", longopts, NULL, err)) >= 0) {
		size_t n = strlen(got);

		snprintf(got + n, len - n, optarg != NULL ? "%c=%s," : "%c,", opt, optarg);
	}
	return opt;
}

static void test_both_spellings(void **state)
{
	char got[256];
	struct sb_err err;

	(void)state;
	assert_int_equal(parse((char *[]){ "serve", "--config", "a.json", "--state-dir=/s", "--json", "-h", NULL }, got,
			       sizeof got, &err),
			 OPTS_END);
	assert_string_equal(got, "c=a.json,s=/s,j,h,");
	assert_int_equal(parse((char *[]){ "serve", "--config=b.json", "--config-check", NULL }, got, sizeof got, &err),
			 OPTS_END);
	assert_string_equal(got, "c=b.json,k,");
	/* An empty value is a value. */
	assert_int_equal(parse((char *[]){ "serve", "--state-dir=", NULL }, got, sizeof got, &err), OPTS_END);
	assert_string_equal(got, "s=,");
}

static void test_abbreviation_refused(void **state)
{
	char got[256];
	struct sb_err err;

	(void)state;
	/* getopt_long alone takes each of these as --state-dir (or --json) without a word. */
	assert_int_equal(parse((char *[]){ "serve", "--state", "/s", NULL }, got, sizeof got, &err), OPTS_BAD);
	assert_string_equal(err.msg, "unknown option '--state' (options are spelt out whole: --state-dir)");
	assert_int_equal(parse((char *[]){ "serve", "--stat=/s", NULL }, got, sizeof got, &err), OPTS_BAD);
	assert_string_equal(err.msg, "unknown option '--stat' (options are spelt out whole: --state-dir)");
	assert_int_equal(parse((char *[]){ "serve", "--js", NULL }, got, sizeof got, &err), OPTS_BAD);
	assert_string_equal(err.msg, "unknown option '--js' (options are spelt out whole: --json)");
	assert_string_equal(got, "");
}

static void test_usage_errors(void **state)
{
	char got[256];
	struct sb_err err;

	(void)state;
	assert_int_equal(parse((char *[]){ "serve", "--nope=1", NULL }, got, sizeof got, &err), OPTS_BAD);
	assert_string_equal(err.msg, "unknown option '--nope'");
	assert_int_equal(parse((char *[]){ "serve", "-x", NULL }, got, sizeof got, &err), OPTS_BAD);
	assert_string_equal(err.msg, "unknown option '-x'");
	assert_int_equal(parse((char *[]){ "serve", "--config", NULL }, got, sizeof got, &err), OPTS_BAD);
	assert_string_equal(err.msg, "option '--config' needs a value");
	assert_int_equal(parse((char *[]){ "serve", "--json=1", NULL }, got, sizeof got, &err), OPTS_BAD);
	assert_string_equal(err.msg, "option '--json' takes no value");
	/* Ambiguous (--config or --config-check): unknown, as every other prefix. */
	assert_int_equal(parse((char *[]){ "serve", "--con", NULL }, got, sizeof got, &err), OPTS_BAD);
	assert_string_equal(err.msg, "unknown option '--con'");
}

static void test_operands_end_options(void **state)
{
	char got[256];
	struct sb_err err;

	(void)state;
	assert_int_equal(parse((char *[]){ "exec", "--json", "--", "--conf", NULL }, got, sizeof got, &err), OPTS_END);
	assert_string_equal(got, "j,");
	assert_int_equal(optind, 3);
	assert_int_equal(parse((char *[]){ "exec", "ls", "--json", NULL }, got, sizeof got, &err), OPTS_END);
	assert_string_equal(got, "");
	assert_int_equal(optind, 1);
}

/* serve's flags: the file named by --config=FILE is read (it used to be parsed and dropped), and
 * --conf FILE is a usage error, not the defaults. */
static void test_serve_config_file(void **state)
{
	char dir[] = "/tmp/test_opts.XXXXXX", file[64], state_dir[64], flag[80];
	struct config c;
	struct sb_err err;
	FILE *f;

	(void)state;
	assert_non_null(mkdtemp(dir));
	snprintf(file, sizeof file, "%s/c.json", dir);
	snprintf(state_dir, sizeof state_dir, "%s/state", dir);
	f = fopen(file, "w");
	assert_non_null(f);
	fputs("{\"idle-seconds\": 321, \"max-timeout-seconds\": 77, \"default-timeout-seconds\": 7,"
	      " \"egress-allow\": [\"api.internal\", \".corp.example:8443\"]}", f);
	fclose(f);
	snprintf(flag, sizeof flag, "--config=%s", file);
	memset(&c, 0, sizeof c);
	assert_int_equal(config_load(&c, 8, (char *[]){ "serve", flag, "--state-dir", state_dir, "--agent=/bin/true", "--idle-seconds=9",
					     "--egress-allow", "10.0.0.1:443", NULL },
				     &err),
			 0);
	/* egress-allow: the file's array, then the flag's, in order */
	assert_int_equal(c.egress_allow.n, 3);
	assert_string_equal(c.egress_allow.rules[0].host, "api.internal");
	assert_string_equal(c.egress_allow.rules[1].host, ".corp.example");
	assert_int_equal(c.egress_allow.rules[1].port, 8443);
	assert_true(c.egress_allow.rules[2].literal);
	/* The file's settings, and a flag over the file's whatever their order. */
	assert_int_equal(c.max_timeout, 77);
	assert_int_equal(c.idle_seconds, 9);
	config_free(&c);
	memset(&c, 0, sizeof c);
	assert_int_equal(config_load(&c, 5, (char *[]){ "serve", "--conf", file, "--state-dir", state_dir, NULL }, &err),
			 CONFIG_BAD_FLAG);
	assert_string_equal(err.msg, "unknown option '--conf' (options are spelt out whole: --config)");
	config_free(&c);
	unlink(file);
	rmdir(dir);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_both_spellings),
		cmocka_unit_test(test_abbreviation_refused),
		cmocka_unit_test(test_usage_errors),
		cmocka_unit_test(test_operands_end_options),
		cmocka_unit_test(test_serve_config_file),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
