/* Unit tests for common/log.c's lines and common/error.c's messages (issue 27): a line's "ts" is
 * RFC 3339 in UTC with milliseconds (it was float seconds, printed as 1796285189.6930001), and a
 * message says its cause once (a rule's refusal no longer ends in ": Invalid argument"). */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>
#include <jansson.h>
#include <regex.h>

#include "error.h"
#include "log.h"

static void test_timestamp(void **state)
{
	char ts[SB_LOG_TS_LEN];

	(void)state;
	assert_string_equal(sb_log_timestamp(1796285189693, ts), "2026-12-03T08:06:29.693Z");
	assert_string_equal(sb_log_timestamp(1796285189000, ts), "2026-12-03T08:06:29.000Z");
	assert_string_equal(sb_log_timestamp(951782400999, ts), "2000-02-29T00:00:00.999Z"); /* a leap day */
	assert_string_equal(sb_log_timestamp(0, ts), "1970-01-01T00:00:00.000Z");
}

/* One line as it is written: stderr into a file, read back and parsed. */
static void test_line(void **state)
{
	char path[] = "/tmp/test_log.XXXXXX", text[4096];
	int fd = mkstemp(path), saved = dup(2);
	regex_t re;
	json_error_t jerr;
	json_t *line;
	FILE *f;

	(void)state;
	assert_true(fd >= 0 && saved >= 0);
	assert_int_equal(dup2(fd, 2), 2);
	sb_log_init("test_log");
	sb_warn("one %s", "line");
	fflush(stderr);
	assert_int_equal(dup2(saved, 2), 2);
	close(saved);
	f = fopen(path, "r");
	assert_non_null(f);
	assert_non_null(fgets(text, sizeof text, f));
	fclose(f);
	close(fd);
	unlink(path);
	line = json_loads(text, 0, &jerr);
	assert_non_null(line);
	assert_true(json_is_string(json_object_get(line, "ts")));
	assert_int_equal(regcomp(&re, "^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}\\.[0-9]{3}Z$",
				 REG_EXTENDED | REG_NOSUB), 0);
	assert_int_equal(regexec(&re, json_string_value(json_object_get(line, "ts")), 0, NULL, 0), 0);
	regfree(&re);
	assert_string_equal(json_string_value(json_object_get(line, "level")), "warn");
	assert_string_equal(json_string_value(json_object_get(line, "component")), "test_log");
	assert_string_equal(json_string_value(json_object_get(line, "msg")), "one line");
	json_decref(line);
}

static void test_cause_once(void **state)
{
	struct sb_err err;

	(void)state;
	assert_int_equal(sb_invalid(&err, "config: idle-seconds must be a whole number, not '%s'", "soon"), -1);
	assert_string_equal(err.msg, "config: idle-seconds must be a whole number, not 'soon'");
	assert_int_equal(err.errnum, EINVAL);
	assert_int_equal(sb_refuse(&err, EAGAIN, "%d cancels already wait", 64), -1);
	assert_string_equal(err.msg, "64 cancels already wait");
	assert_int_equal(err.errnum, EAGAIN);
	/* a system call's failure keeps the system's words: they are its cause */
	errno = ENOENT;
	assert_int_equal(sb_fail_errno(&err, "opening %s", "/x"), -1);
	assert_string_equal(err.msg, "opening /x: No such file or directory");
	assert_int_equal(sb_fail(&err, EINVAL, "mounting /proc"), -1);
	assert_string_equal(err.msg, "mounting /proc: Invalid argument");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_timestamp),
		cmocka_unit_test(test_line),
		cmocka_unit_test(test_cause_once),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
