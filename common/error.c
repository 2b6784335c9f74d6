/* The error convention (see error.h): fixed-size, caller-owned, no allocation. */
#include "error.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

/* words: add strerror(errnum), the system's cause, after the message. */
static void err_vfill(struct sb_err *err, int errnum, int words, const char *fmt, va_list ap)
{
	int n = vsnprintf(err->msg, sizeof err->msg, fmt, ap);

	err->errnum = errnum;
	if (n < 0) {
		err->msg[0] = '\0';
		n = 0;
	}
	if (words && errnum != 0 && (size_t)n < sizeof err->msg)
		snprintf(err->msg + n, sizeof err->msg - (size_t)n, ": %s", strerror(errnum));
}

int sb_fail(struct sb_err *err, int errnum, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	err_vfill(err, errnum, 1, fmt, ap);
	va_end(ap);
	return -1;
}

int sb_invalid(struct sb_err *err, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	err_vfill(err, EINVAL, 0, fmt, ap);
	va_end(ap);
	return -1;
}

int sb_refuse(struct sb_err *err, int errnum, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	err_vfill(err, errnum, 0, fmt, ap);
	va_end(ap);
	return -1;
}

int sb_fail_errno(struct sb_err *err, const char *fmt, ...)
{
	int saved = errno;
	va_list ap;

	va_start(ap, fmt);
	err_vfill(err, saved, 1, fmt, ap);
	va_end(ap);
	errno = saved;
	return -1;
}

void sb_err_prefix(struct sb_err *err, const char *fmt, ...)
{
	char prefix[SB_ERR_MSG_MAX];
	size_t plen, olen;
	va_list ap;
	int n;

	va_start(ap, fmt);
	n = vsnprintf(prefix, sizeof prefix - 2, fmt, ap);
	va_end(ap);
	if (n < 0)
		return;
	plen = strlen(prefix);
	memcpy(prefix + plen, ": ", 3);
	plen += 2;
	/* Shift the old message right, truncating its end if the whole no longer fits. */
	olen = strnlen(err->msg, sizeof err->msg - 1);
	if (plen + olen > sizeof err->msg - 1)
		olen = sizeof err->msg - 1 - plen;
	memmove(err->msg + plen, err->msg, olen);
	memcpy(err->msg, prefix, plen);
	err->msg[plen + olen] = '\0';
}

void sb_err_clear(struct sb_err *err)
{
	err->errnum = 0;
	err->msg[0] = '\0';
}
