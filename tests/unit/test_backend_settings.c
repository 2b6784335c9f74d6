/* Unit tests for manager/backend/backend_settings.c: the one computation of the limits a container
 * runtime (podman, Kubernetes) applies from its settings, which `status` and the session reports show. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "backend.h"
#include "backend_internal.h"

static void test_limits_set(void **state)
{
	struct sandbox_limits l;

	(void)state;
	l.cgroup[0] = 'x';
	backend_limits_configured(&l, 256 << 20, 64 << 20, 512ll << 20, 128, 1500000000ll);
	assert_int_equal(l.tmp_bytes, 256 << 20);
	assert_int_equal(l.shm_bytes, 64 << 20);
	assert_int_equal(l.memory_max, 512ll << 20);
	assert_int_equal(l.pids_max, 128);
	assert_int_equal(l.cpu_quota_us, 150000); /* 1.5 CPUs: 150 ms of every 100 ms period */
	assert_int_equal(l.cpu_period_us, 100000);
	assert_string_equal(l.cgroup, ""); /* the runtime's own cgroup: not ours to name */
}

/* A setting of 0 is no limit, said as -1 (sessions.c reports null), never as a limit of 0. */
static void test_limits_unset(void **state)
{
	struct sandbox_limits l;

	(void)state;
	backend_limits_configured(&l, 1, 2, 0, 0, 0);
	assert_int_equal(l.tmp_bytes, 1);
	assert_int_equal(l.shm_bytes, 2);
	assert_int_equal(l.memory_max, -1);
	assert_int_equal(l.pids_max, -1);
	assert_int_equal(l.cpu_quota_us, -1);
	assert_int_equal(l.cpu_period_us, -1);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_limits_set),
		cmocka_unit_test(test_limits_unset),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
