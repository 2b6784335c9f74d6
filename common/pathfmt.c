/* Checked path formatting (see pathfmt.h). Never returns a truncated path as a success. */
#include "pathfmt.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>

int path_fmt(char *out, size_t len, struct sb_err *err, const char *fmt, ...)
{
	va_list ap;
	int n;

	va_start(ap, fmt);
	n = vsnprintf(out, len, fmt, ap);
	va_end(ap);
	if (n < 0)
		return sb_invalid(err, "formatting a path from '%s' failed", fmt);
	if ((size_t)n >= len) {
		/* The message shows the cut path on purpose (it says which one); out is not a path now. */
		sb_fail(err, ENAMETOOLONG, "path too long (%d bytes, at most %zu): %s...", n, len ? len - 1 : 0, out);
		if (len > 0)
			out[0] = '\0';
		return -1;
	}
	return 0;
}
