/* landlock_restrict_command (sandbox-agent/landlock.c): in the read-only world a command opens for
 * writing only beneath its writable roots, whatever a file's mode and whoever runs it, root included
 * (mutation M4: without the rule, only the unprivileged run of special_files_shut noticed, since DAC
 * stops uid 65534 at root's files first). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "landlock.h"

/* In a child restricted to writing beneath root: the errno of opening path for write (0 = opened). */
static int write_errno_beneath(const char *root, const char *path)
{
	int fds[2], seen = -1, status;
	pid_t pid;

	assert_int_equal(pipe(fds), 0);
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		const char *roots[] = { root };
		struct sb_err err;
		int fd, e = 0;

		if (landlock_restrict_command(landlock_abi(), false, roots, 1, &err) < 0)
			_exit(90);
		fd = open(path, O_WRONLY | O_CLOEXEC);
		if (fd < 0)
			e = errno;
		else
			close(fd);
		_exit(write(fds[1], &e, sizeof e) == sizeof e ? 0 : 91);
	}
	close(fds[1]);
	assert_int_equal(read(fds[0], &seen, sizeof seen), sizeof seen);
	close(fds[0]);
	assert_int_equal(waitpid(pid, &status, 0), pid);
	assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
	return seen;
}

static void test_writes_only_beneath_roots(void **state)
{
	char base[] = "/var/tmp/test_landlock.XXXXXX", inside[PATH_MAX], outside[PATH_MAX], in_file[PATH_MAX + 8],
	     out_file[PATH_MAX + 8];
	int fd;

	(void)state;
	if (landlock_abi() < 1)
		skip(); /* by design: a kernel without Landlock (`sandbox-agent check` says so) */
	assert_non_null(mkdtemp(base));
	snprintf(inside, sizeof inside, "%s/in", base);
	snprintf(outside, sizeof outside, "%s/out", base);
	snprintf(in_file, sizeof in_file, "%s/f", inside);
	snprintf(out_file, sizeof out_file, "%s/f", outside);
	assert_int_equal(mkdir(inside, 0700), 0);
	assert_int_equal(mkdir(outside, 0700), 0);
	fd = open(in_file, O_CREAT | O_WRONLY | O_CLOEXEC, 0666);
	assert_true(fd >= 0);
	close(fd);
	fd = open(out_file, O_CREAT | O_WRONLY | O_CLOEXEC, 0666);
	assert_true(fd >= 0);
	close(fd);
	/* the process's own files, mode 0666: only Landlock can refuse the second */
	assert_int_equal(write_errno_beneath(inside, in_file), 0);
	assert_int_equal(write_errno_beneath(inside, out_file), EACCES);
	unlink(in_file);
	unlink(out_file);
	rmdir(inside);
	rmdir(outside);
	rmdir(base);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_writes_only_beneath_roots),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
