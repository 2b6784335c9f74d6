/* Unit tests for common/cleanup.h: a marked variable is released when its scope ends (the
 * descriptor is closed, errno kept), and a stolen one is not. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>
#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <string.h>
#include <unistd.h>

#include "cleanup.h"

static bool fd_open(int fd)
{
	return fcntl(fd, F_GETFD) != -1;
}

static int scope_close(int *seen)
{
	int fd cleanup_close = open("/dev/null", O_RDONLY | O_CLOEXEC);

	*seen = fd;
	errno = ENOSPC; /* what a failing call left; the cleanup must not change it */
	return -1;
}

static int scope_steal(void)
{
	int fd cleanup_close = open("/dev/null", O_RDONLY | O_CLOEXEC);

	return steal_fd(&fd);
}

static void test_close(void **state)
{
	int fd = -1, kept;

	(void)state;
	assert_int_equal(scope_close(&fd), -1);
	assert_int_equal(errno, ENOSPC);
	assert_true(fd >= 0);
	assert_false(fd_open(fd));
	kept = scope_steal();
	assert_true(fd_open(kept));
	close(kept);
}

static char *scope_strdup(bool keep)
{
	char *s cleanup_free = strdup("owned");

	assert_non_null(s);
	return keep ? steal_pointer(&s) : NULL; /* freed at the brace unless stolen (ASan checks both) */
}

static void test_free_and_steal(void **state)
{
	char *kept;
	json_t *j cleanup_json = json_object();
	json_t *held;

	(void)state;
	assert_null(scope_strdup(false));
	kept = scope_strdup(true);
	assert_string_equal(kept, "owned");
	free(kept);
	held = steal_pointer(&j);
	assert_null(j);
	assert_true(json_is_object(held));
	json_decref(held);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_close),
		cmocka_unit_test(test_free_and_steal),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
