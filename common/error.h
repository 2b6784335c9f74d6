/* The one error convention of infra-sandbox, used by both programs.
 *
 * A function that can fail returns 0 on success and -1 on failure, and fills the caller's
 * struct sb_err with the errno (0 when none applies) and a message for people. The struct is
 * caller-owned and fixed-size, so it also works between clone() and execve() where nothing
 * may be allocated. Callers add context on the way up with sb_err_prefix():
 *   "preparing exec 3f2a: mounting /proc: Operation not permitted"
 */
#ifndef SB_ERROR_H
#define SB_ERROR_H

#include <stddef.h>

#define SB_ERR_MSG_MAX 1024

struct sb_err {
	int errnum;                /* errno value, or 0 when the failure is not a system error */
	char msg[SB_ERR_MSG_MAX];  /* complete message, errno text included */
};

/* Fill err with the message and strerror(errnum) (a system call's cause); returns -1 so callers
 * can `return sb_fail(...)`. */
int sb_fail(struct sb_err *err, int errnum, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

/* A value or request refused by a rule of this code: errnum EINVAL (callers tell "invalid" by it),
 * and the message alone, which says which rule: strerror's "Invalid argument" would only repeat it. */
int sb_invalid(struct sb_err *err, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

/* Like sb_invalid, for another errnum: a failure this code decides (a bound reached), whose
 * message says the cause; errnum still classifies it, its words are not added. */
int sb_refuse(struct sb_err *err, int errnum, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

/* Same as sb_fail(err, errno, ...): for the common case right after a failed syscall. */
int sb_fail_errno(struct sb_err *err, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

/* Put "context: " in front of the message already in err; keeps errnum. */
void sb_err_prefix(struct sb_err *err, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

void sb_err_clear(struct sb_err *err);

#endif
