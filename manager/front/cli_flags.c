/* The flags of every front-end command (see cli_flags.h), parsed by the programs' one option
 * parser (common/opts.h), which words each usage error once. */
#include "cli_flags.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

#include "cli.h"
#include "mcp_shape.h"
#include "opts.h"

int usage_error(const struct command *c, const char *fmt, ...)
{
	va_list ap;

	fprintf(stderr, "sandbox-manager %s: ", c->name);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fprintf(stderr, "\n%s", c->usage);
	return MCLI_USAGE;
}

int flags_parse(const struct command *c, int argc, char **argv, struct flag *flags, size_t n, int *code)
{
	struct option longopts[FLAGS_MAX + 2];
	struct sb_err err;
	int opt;

	if (n > FLAGS_MAX)
		n = FLAGS_MAX;
	for (size_t i = 0; i < n; i++)
		longopts[i] = (struct option){ flags[i].name, flags[i].has_arg, NULL, (int)i + 256 };
	longopts[n] = (struct option){ "help", 0, NULL, 'h' };
	longopts[n + 1] = (struct option){ NULL, 0, NULL, 0 };
	opts_reset();
	while ((opt = opts_next(argc, argv, "h", longopts, NULL, &err)) != OPTS_END) {
		struct flag *f;

		if (opt == 'h') {
			fputs(c->usage, stdout);
			*code = 0;
			return FLAGS_DONE;
		}
		if (opt == OPTS_BAD) {
			*code = usage_error(c, "%s", err.msg);
			return FLAGS_DONE;
		}
		f = &flags[opt - 256];
		f->set = 1;
		f->value = optarg;
		if (f->values != NULL && json_array_append_new(f->values, json_string(optarg)) != 0) {
			*code = usage_error(c, "--%s '%s' is not UTF-8 text", f->name, optarg);
			return FLAGS_DONE;
		}
	}
	return optind;
}

int flags_only(const struct command *c, int argc, char **argv, struct flag *flags, size_t n, int *code)
{
	int i = flags_parse(c, argc, argv, flags, n, code);

	if (i != FLAGS_DONE && i < argc) {
		*code = usage_error(c, "unexpected argument '%s'", argv[i]);
		return FLAGS_DONE;
	}
	return i;
}

int flag_required(const struct command *c, const struct flag *f)
{
	return f->set ? 0 : usage_error(c, "--%s is required", f->name);
}

long flag_number(const char *text, long min, long max)
{
	char *end;
	long v;

	if (text[0] < '0' || text[0] > '9')
		return -1;
	v = strtol(text, &end, 10);
	return *end != '\0' || v < min || v > max ? -1 : v;
}

_Static_assert(MCP_OUTPUT_CHARS_MIN == 500 && MCP_OUTPUT_CHARS_MAX == 4194304 && MCP_OUTPUT_CHARS_DEFAULT == 30000,
	       "OUTPUT_CHARS_HELP and the --max-output-chars message state these bounds");

int flag_output_chars(const struct command *c, const char *text, size_t *out)
{
	long v = flag_number(text, MCP_OUTPUT_CHARS_MIN, MCP_OUTPUT_CHARS_MAX);

	if (v < 0)
		return usage_error(c, "--max-output-chars takes a number from 500 to 4194304, not '%s'", text);
	*out = (size_t)v;
	return 0;
}
