/* The one checked formatter for paths and file names, used by both programs: a path that does not
 * fit its buffer is an error (ENAMETOOLONG), never a shorter path that names something else. */
#ifndef SB_PATHFMT_H
#define SB_PATHFMT_H

#include <stddef.h>

#include "error.h"

/* snprintf into out (len bytes). 0 when the whole result fits; -1 with err->errnum ENAMETOOLONG
 * (EINVAL for an encoding error) otherwise, and out then holds no usable path. */
int path_fmt(char *out, size_t len, struct sb_err *err, const char *fmt, ...) __attribute__((format(printf, 4, 5)));

#endif
