/* Unit tests for manager/front/lines.c: the one line reader of the stdio front ends. Lines cut
 * across reads, empty lines skipped, a line over the cap passed once as overlong and its bytes
 * dropped (the next line read whole), a last line without its newline, no cap with SIZE_MAX; and
 * lines_read_until: once the stop descriptor is readable, the whole lines already written are still
 * passed, without blocking, and a line without its newline is dropped. */
#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "fdio.h"
#include "lines.h"

#define SEEN_MAX 16

static struct {
	size_t n;
	char *line[SEEN_MAX];
	size_t len[SEEN_MAX];
	int overlong[SEEN_MAX];
} seen;

static void record(const char *line, size_t len, int overlong)
{
	assert_true(seen.n < SEEN_MAX);
	assert_true(overlong ? line == NULL && len == 0 : len > 0);
	seen.line[seen.n] = overlong ? NULL : strndup(line, len);
	seen.len[seen.n] = len;
	seen.overlong[seen.n] = overlong;
	seen.n++;
}

static void seen_reset(void)
{
	for (size_t i = 0; i < seen.n; i++)
		free(seen.line[i]);
	memset(&seen, 0, sizeof seen);
}

/* lines_read over a pipe fed len bytes of data by a child, in pieces of step bytes. */
static int read_fed(const char *data, size_t len, size_t step, size_t cap)
{
	int p[2], rc, status;
	pid_t child;

	seen_reset();
	assert_int_equal(pipe(p), 0);
	child = fork();
	assert_true(child >= 0);
	if (child == 0) {
		close(p[0]);
		for (size_t off = 0; off < len; off += step)
			if (fd_write_all(p[1], data + off, len - off < step ? len - off : step) < 0)
				_exit(1);
		_exit(0);
	}
	close(p[1]);
	rc = lines_read(p[0], cap, record);
	close(p[0]);
	assert_int_equal(waitpid(child, &status, 0), child);
	assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
	return rc;
}

static void test_lines_across_reads(void **state)
{
	static const char data[] = "{\"a\":1}\n\n\nsecond line\r\nlast without newline";

	(void)state;
	/* One byte a write: every line is cut across reads. */
	assert_int_equal(read_fed(data, strlen(data), 1, 1024), 0);
	assert_int_equal(seen.n, 3);
	assert_string_equal(seen.line[0], "{\"a\":1}");
	assert_string_equal(seen.line[1], "second line\r"); /* what a line is, is the caller's to judge */
	assert_string_equal(seen.line[2], "last without newline");
	assert_int_equal(seen.overlong[0] + seen.overlong[1] + seen.overlong[2], 0);
	seen_reset();
}

static void test_overlong_dropped_once(void **state)
{
	size_t big = 300000, len = 0;
	char *data = malloc(big + 64);

	(void)state;
	assert_non_null(data);
	len += (size_t)sprintf(data, "short\n");
	memset(data + len, 'x', big);
	len += big;
	len += (size_t)sprintf(data + len, "\nafter\n");
	/* A cap of exactly the short line: at the cap is whole, past it is overlong. */
	assert_int_equal(read_fed(data, len, 4096, 5), 0);
	assert_int_equal(seen.n, 3);
	assert_string_equal(seen.line[0], "short");
	assert_int_equal(seen.overlong[1], 1);
	assert_string_equal(seen.line[2], "after");
	/* The same without a cap: the long line whole, across many reads. */
	assert_int_equal(read_fed(data, len, 65536, SIZE_MAX), 0);
	assert_int_equal(seen.n, 3);
	assert_int_equal(seen.len[1], big);
	assert_int_equal(seen.overlong[1], 0);
	assert_int_equal(seen.line[1][0], 'x');
	assert_int_equal(seen.line[1][big - 1], 'x');
	seen_reset();
	free(data);
}

static void test_overlong_last_line(void **state)
{
	static const char data[] = "ok\n0123456789";

	(void)state;
	/* An overlong line cut by the end of input is still reported, once. */
	assert_int_equal(read_fed(data, strlen(data), 3, 4), 0);
	assert_int_equal(seen.n, 2);
	assert_string_equal(seen.line[0], "ok");
	assert_int_equal(seen.overlong[1], 1);
	seen_reset();
}

static void test_read_error(void **state)
{
	(void)state;
	seen_reset();
	/* A descriptor that cannot be read: -1, nothing handed on. */
	assert_int_equal(lines_read(-1, 16, record), -1);
	assert_int_equal(errno, EBADF);
	assert_int_equal(seen.n, 0);
}

/* The peer wrote its lines, then signalled (the stop pipe stands for the signalfd): every whole line
 * is passed, the unfinished one is not, and the read returns 1 with the writer still holding its end
 * open (it would block forever otherwise). */
static void test_stop_reads_what_is_there(void **state)
{
	static const char data[] = "{\"cancel\":1}\n\nsecond\nunfinished";
	int p[2], s[2];

	(void)state;
	seen_reset();
	assert_int_equal(pipe(p), 0);
	assert_int_equal(pipe(s), 0);
	assert_int_equal(fd_write_all(p[1], data, strlen(data)), 0);
	assert_int_equal(fd_write_all(s[1], "x", 1), 0);
	assert_int_equal(lines_read_until(p[0], s[0], 1024, record), 1);
	assert_int_equal(seen.n, 2);
	assert_string_equal(seen.line[0], "{\"cancel\":1}");
	assert_string_equal(seen.line[1], "second");
	/* Nothing written at all: the stop alone returns at once. */
	seen_reset();
	assert_int_equal(lines_read_until(p[0], s[0], 1024, record), 1);
	assert_int_equal(seen.n, 0);
	/* More than a chunk already there: all of it, across reads. */
	{
		size_t big = 3 * 65536;
		char *buf = malloc(big);

		assert_non_null(buf);
		memset(buf, 'a', big);
		buf[big / 2] = '\n';
		buf[big - 1] = '\n';
		close(p[0]);
		close(p[1]);
		assert_int_equal(pipe(p), 0);
		assert_true(fcntl(p[1], F_SETPIPE_SZ, (int)(4 * 65536)) >= (int)big);
		assert_int_equal(fd_write_all(p[1], buf, big), 0);
		free(buf);
		assert_int_equal(lines_read_until(p[0], s[0], big, record), 1);
		assert_int_equal(seen.n, 2);
		assert_int_equal(seen.len[0], big / 2);
		assert_int_equal(seen.len[1], big - big / 2 - 2);
	}
	seen_reset();
	close(p[0]);
	close(p[1]);
	close(s[0]);
	close(s[1]);
}

/* Before any stop, the end of file is as lines_read's: 0, and the last line is passed. */
static void test_until_end_of_file(void **state)
{
	int p[2], s[2];

	(void)state;
	seen_reset();
	assert_int_equal(pipe(p), 0);
	assert_int_equal(pipe(s), 0);
	assert_int_equal(fd_write_all(p[1], "one\nlast", 8), 0);
	close(p[1]);
	assert_int_equal(lines_read_until(p[0], s[0], 1024, record), 0);
	assert_int_equal(seen.n, 2);
	assert_string_equal(seen.line[1], "last");
	seen_reset();
	close(p[0]);
	close(s[0]);
	close(s[1]);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_lines_across_reads),
		cmocka_unit_test(test_overlong_dropped_once),
		cmocka_unit_test(test_overlong_last_line),
		cmocka_unit_test(test_read_error),
		cmocka_unit_test(test_stop_reads_what_is_there),
		cmocka_unit_test(test_until_end_of_file),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
