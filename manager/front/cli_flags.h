/* The flags of every front-end command (cli.c's client commands, `mcp`, `codex-bridge`): one
 * parser, and one wording of a usage error: one line saying what was wrong, then the command's
 * usage, on stderr (exit MCLI_USAGE); `-h`/`--help` prints the usage on stdout (exit 0). */
#ifndef SB_CLI_FLAGS_H
#define SB_CLI_FLAGS_H

#include <jansson.h>
#include <stddef.h>

/* A command's usage text (synopsis, flags), here and nowhere else. */
struct command {
	const char *name;  /* as typed after sandbox-manager: "session create" */
	const char *usage; /* the whole text -h prints */
};

/* The lines of the flags several commands share. */
#define SOCKET_HELP                                                                                         \
	"  --socket PATH          a manager's control socket; repeatable, up to 8, tried in order, and\n"      \
	"                         a session's owner is followed (default $SANDBOX_MANAGER_SOCKET, paths\n"     \
	"                         separated by ':'); or tls://HOST:PORT, mutual TLS with --tls-cert,\n"  \
	"                         --tls-key and --tls-ca FILE (or $SANDBOX_MANAGER_TLS_CERT, _KEY, _CA)\n"
#define HELP_HELP "  -h, --help             this text\n"
#define OUTPUT_CHARS_HELP                                                                                   \
	"  --max-output-chars N   the tool result's text, about N bytes at most (500 to 4194304;\n"            \
	"                         default 30000); the whole output is kept in a file it names\n"

/* One long flag; flags_parse fills value/set (a repeatable flag's values into the array). */
struct flag {
	const char *name;
	int has_arg;
	const char *value;
	json_t *values; /* non-NULL: repeatable, collected here */
	int set;
};

#define FLAGS_MAX 15
#define FLAGS_DONE (-1) /* flags_parse printed the usage (help, or a usage error): *code is the exit */

/* "sandbox-manager NAME: what was wrong", then c's usage, on stderr; returns MCLI_USAGE. */
int usage_error(const struct command *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* opts_next (common/opts.h) over argv with c's flags (and -h/--help): `--flag VALUE` and
 * `--flag=VALUE`, never an abbreviation. Returns the index of the first argument after the flags
 * (after a "--" that ends them), or FLAGS_DONE with *code 0 for help and MCLI_USAGE for an
 * unknown or abbreviated flag or a missing value (one line, then the usage, on stderr). */
int flags_parse(const struct command *c, int argc, char **argv, struct flag *flags, size_t n, int *code);
/* flags_parse for a command that takes no arguments besides its flags. */
int flags_only(const struct command *c, int argc, char **argv, struct flag *flags, size_t n, int *code);
/* A required flag that was not given: the usage error, or 0. */
int flag_required(const struct command *c, const struct flag *f);
/* A whole number from min to max (digits only), or -1. */
long flag_number(const char *text, long min, long max);
/* --max-output-chars N of the bash tool's front ends: 0 with *out, or the usage error. */
int flag_output_chars(const struct command *c, const char *text, size_t *out);

#endif
