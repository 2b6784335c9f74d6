/* Unit tests for common/json_text.c sb_json_seed: after it, jansson's first object opens nothing.
 * Left to itself, jansson seeds its hashes on the first json_object() from /dev/urandom, opened
 * without O_CLOEXEC (json_text.h says why that matters). open() is this program's own (a definition
 * here wins over libc's for libjansson's call, as test_journal's fsync does), and counts what jansson
 * opens. A control case, in a child that has not seeded, shows the count sees jansson's own open;
 * the seeded case then shows there is none. Each case needs a process whose jansson has made no object
 * yet: the control runs in a child, and nothing in this program makes a JSON value before either. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>
#include <fcntl.h>
#include <jansson.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "json_text.h"

static int urandom_opens;

int open(const char *path, int flags, ...)
{
	mode_t mode = 0;

	if (flags & (O_CREAT | O_TMPFILE)) {
		va_list ap;

		va_start(ap, flags);
		mode = va_arg(ap, mode_t);
		va_end(ap);
	}
	if (strcmp(path, "/dev/urandom") == 0)
		urandom_opens++;
	return (int)syscall(SYS_openat, AT_FDCWD, path, flags, mode);
}

/* An object with a few members: the first json_object() is where jansson seeds. */
static void make_an_object(void)
{
	json_t *j = json_object();

	assert_non_null(j);
	assert_int_equal(json_object_set_new(j, "exec_id", json_string("0123456789abcdef")), 0);
	assert_int_equal(json_object_set_new(j, "status", json_string("exited")), 0);
	assert_non_null(json_object_get(j, "status"));
	json_decref(j);
}

/* The control: unseeded, jansson opens /dev/urandom once on its first object (so the count works). */
static void test_unseeded_jansson_opens_urandom(void **state)
{
	(void)state;
	pid_t pid = fork();
	int status;

	assert_true(pid >= 0);
	if (pid == 0) {
		make_an_object();
		_exit(urandom_opens == 1 ? 0 : 10 + urandom_opens);
	}
	assert_int_equal(waitpid(pid, &status, 0), pid);
	assert_true(WIFEXITED(status));
	assert_int_equal(WEXITSTATUS(status), 0);
}

static void test_seeded_jansson_opens_nothing(void **state)
{
	(void)state;
	struct sb_err err;

	assert_int_equal(sb_json_seed(&err), 0);
	make_an_object();
	assert_int_equal(urandom_opens, 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_unseeded_jansson_opens_urandom),
		cmocka_unit_test(test_seeded_jansson_opens_nothing),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
