/* The agent's secret page (sandbox-agent/secret.c): what it holds is gone in every child a fork or
 * clone makes (MADV_WIPEONFORK), so init and the command never hold the receipt key or the nonce,
 * not even in memory they could not read (mutation M17). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "secret.h"

/* The child's view of the page, reported by its exit status: 0 all zero, 1 anything left. */
static int child_view(const struct secrets *s)
{
	int status;
	pid_t pid = fork();

	assert_true(pid >= 0);
	if (pid == 0) {
		uint8_t zero[sizeof *s];

		memset(zero, 0, sizeof zero);
		_exit(memcmp(s, zero, sizeof zero) == 0 ? 0 : 1);
	}
	assert_int_equal(waitpid(pid, &status, 0), pid);
	assert_true(WIFEXITED(status));
	return WEXITSTATUS(status);
}

static void test_child_sees_zeroes(void **state)
{
	struct sb_err err;
	struct secrets *s = secrets_alloc(&err);

	(void)state;
	if (s == NULL)
		fail_msg("secrets_alloc: %s", err.msg);
	memset(s->key, 0xA5, sizeof s->key);
	memset(s->nonce, 0x5A, sizeof s->nonce);
	assert_int_equal(child_view(s), 0);
	/* the parent keeps them */
	assert_int_equal(s->key[0], 0xA5);
	assert_int_equal(s->nonce[SECRET_NONCE_BYTES - 1], 0x5A);
	secrets_free(s);
}

/* The test's own check: memory that is not the secret page is copied, as any fork copies it. */
static void test_plain_memory_is_copied(void **state)
{
	static struct secrets plain;

	(void)state;
	memset(plain.key, 0xA5, sizeof plain.key);
	assert_int_equal(child_view(&plain), 1);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_child_sees_zeroes),
		cmocka_unit_test(test_plain_memory_is_copied),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
