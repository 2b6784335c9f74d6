/* The one option parser (see opts.h): getopt_long, then a check that a long option was typed
 * whole. getopt_long takes any unambiguous prefix, so a misspelt option silently meant another
 * (`serve --conf FILE` ran on the defaults, issue 27): here it is a usage error instead. */
#include "opts.h"

#include <stdio.h>
#include <string.h>

void opts_reset(void)
{
	optind = 1;
}

/* The option as typed, up to a '=' (what a message names). */
static int token_len(const char *token)
{
	const char *eq = strchr(token, '=');

	return eq != NULL ? (int)(eq - token) : (int)strlen(token);
}

/* The argument that named the option just returned: `--opt VALUE` took two arguments (optarg is
 * the second, whole), `--opt=VALUE` and `--flag` one. */
static const char *option_token(char **argv)
{
	return optarg != NULL && optind >= 2 && optarg == argv[optind - 1] ? argv[optind - 2] : argv[optind - 1];
}

static int refuse(struct sb_err *err, int opt, char **argv)
{
	const char *token = argv[optind - 1];

	if (opt == ':')
		return sb_fail(err, 0, "option '%s' needs a value", token);
	/* optopt: a long option's val when it was given a value it takes none of, a short option's
	 * letter when unknown, 0 for an unknown long option. */
	if (optopt != 0 && strncmp(token, "--", 2) == 0)
		return sb_fail(err, 0, "option '%.*s' takes no value", token_len(token), token);
	if (optopt != 0)
		return sb_fail(err, 0, "unknown option '-%c'", optopt);
	return sb_fail(err, 0, "unknown option '%.*s'", token_len(token), token);
}

int opts_next(int argc, char **argv, const char *shortopts, const struct option *longopts, int *longindex,
	      struct sb_err *err)
{
	char spec[64];
	const char *token;
	int idx = -1, opt;

	/* '+': stop at the first operand (a command follows some); ':': a missing value is told apart. */
	if (snprintf(spec, sizeof spec, "+:%s", shortopts) >= (int)sizeof spec) {
		sb_fail(err, 0, "too many short options");
		return OPTS_BAD;
	}
	opterr = 0;
	optarg = NULL;
	opt = getopt_long(argc, argv, spec, longopts, &idx);
	if (longindex != NULL)
		*longindex = idx;
	if (opt == -1)
		return OPTS_END;
	if (opt == '?' || opt == ':') {
		refuse(err, opt, argv);
		return OPTS_BAD;
	}
	token = option_token(argv);
	if (idx >= 0 && (strncmp(token, "--", 2) != 0 || (int)strlen(longopts[idx].name) != token_len(token) - 2)) {
		sb_fail(err, 0, "unknown option '%.*s' (options are spelt out whole: --%s)", token_len(token), token,
			longopts[idx].name);
		return OPTS_BAD;
	}
	return opt;
}
