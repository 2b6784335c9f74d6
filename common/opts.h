/* The one option parser of both programs: getopt_long's grammar (`--opt VALUE` and `--opt=VALUE`
 * for every option that takes a value; "--" ends the options; parsing stops at the first operand)
 * without its abbreviations: `--conf` is not `--config`, it is an unknown option. Each usage
 * error is worded here, once, into a struct sb_err; getopt's own messages are never printed. */
#ifndef SB_OPTS_H
#define SB_OPTS_H

#include <getopt.h>

#include "error.h"

#define OPTS_END (-1)
#define OPTS_BAD (-2) /* err says what: unknown, abbreviated, missing its value, or given one it takes none of */

/* Start over at argv[1] (getopt's state is global: each parse starts with this). */
void opts_reset(void);
/* The next option, as getopt_long returns it (its val, optarg set, *longindex the entry of
 * longopts or -1 for a short option), or OPTS_END (optind: the first operand), or OPTS_BAD.
 * shortopts: the short option letters alone ("h", or ""); longindex may be NULL. */
int opts_next(int argc, char **argv, const char *shortopts, const struct option *longopts, int *longindex,
	      struct sb_err *err);

#endif
