/* Unit tests for common/users_db.c and manager/backend/process_users.c: the sandbox's passwd and group carry an entry for
 * its own ids, first, exactly when the host's have none; the host's lines follow unchanged; a file
 * others may not read stays out; an oversized one is refused before anything is written; glibc's
 * own parser, reading the result, finds the sandbox's user by uid and by name. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>
#include <errno.h>
#include <fcntl.h>
#include <pwd.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include "process.h"
#include "users_db.h"
#include "testutil.h"

static const char host_pw[] = "root:x:0:0:root:/root:/bin/bash\n"
			      "sandbox:x:1234:1234:a host user of that name:/home/sandbox:/bin/sh\n"
			      "this line is not an entry\n"
			      "sbtest:x:1001:1001::/home/sbtest:/bin/bash"; /* no final newline */
static const char line[] = "sandbox:x:2000000001:2000000001:sandbox:/w/.scratch:/bin/bash\n";

static char *text_of(const char *host, size_t len, bool group, unsigned id)
{
	struct sb_err err;
	char *out = NULL;
	size_t n = 0;
	bool added = false;

	assert_int_equal(users_db_text(host, len, group ? "sandbox:x:2000000001:\n" : line, group, id, &out, &n, &added,
				       &err), 0);
	assert_true(added == (strstr(out, "2000000001") == out + strlen("sandbox:x:")));
	assert_int_equal(n, strlen(out));
	return out;
}

/* The sandbox's uid is no host user's: its line comes first, the host's whole text after it. */
static void test_absent_id_added_first(void **state)
{
	cleanup_free char *out = text_of(host_pw, strlen(host_pw), false, 2000000001u);
	char want[512];

	(void)state;
	snprintf(want, sizeof want, "%s%s\n", line, host_pw);
	assert_string_equal(out, want);
}

/* A host user with the id (an unprivileged manager's own user) keeps its name: nothing is added. */
static void test_present_id_unchanged(void **state)
{
	cleanup_free char *pw = text_of(host_pw, strlen(host_pw), false, 1001);
	cleanup_free char *root = text_of(host_pw, strlen(host_pw), false, 0);
	static const char host_gr[] = "root:x:0:\nnogroup:x:65534:\n";
	cleanup_free char *gr = text_of(host_gr, strlen(host_gr), true, 65534);
	cleanup_free char *gr_new = text_of(host_gr, strlen(host_gr), true, 2000000001u);

	(void)state;
	assert_null(strstr(pw, "2000000001"));
	assert_int_equal(strlen(pw), strlen(host_pw) + 1); /* the final newline only */
	assert_null(strstr(root, "2000000001"));
	assert_string_equal(gr, host_gr);
	assert_string_equal(gr_new, "sandbox:x:2000000001:\nroot:x:0:\nnogroup:x:65534:\n");
}

/* No host file (or one others may not read): the sandbox's entry alone. */
static void test_empty_host(void **state)
{
	cleanup_free char *out = text_of("", 0, false, 2000000001u);

	(void)state;
	assert_string_equal(out, line);
}

/* glibc's parser, reading the result as NSS's `files` would inside: the uid is "sandbox", and
 * "sandbox" is the uid, though the host has a user of that name too. */
static void test_result_parses(void **state)
{
	cleanup_free char *out = text_of(host_pw, strlen(host_pw), false, 2000000001u);
	FILE *f = fmemopen(out, strlen(out), "r");
	struct passwd *pw;
	bool by_uid = false, first_sandbox_ours = false, seen_sandbox = false;

	(void)state;
	assert_non_null(f);
	while ((pw = fgetpwent(f)) != NULL) {
		if (pw->pw_uid == 2000000001u)
			by_uid = strcmp(pw->pw_name, "sandbox") == 0 && strcmp(pw->pw_dir, "/w/.scratch") == 0;
		if (strcmp(pw->pw_name, "sandbox") == 0 && !seen_sandbox) {
			first_sandbox_ours = pw->pw_uid == 2000000001u;
			seen_sandbox = true;
		}
	}
	fclose(f);
	assert_true(by_uid);
	assert_true(first_sandbox_ours);
}

struct dirs {
	char host[64], out[80];
};

/* A host /etc of the test's own and the output directory inside it, made before each test that
 * writes files and removed after it, a failed one included. */
static int dirs_make(void **state)
{
	static struct dirs d;

	snprintf(d.host, sizeof d.host, "/tmp/test_users.XXXXXX");
	if (mkdtemp(d.host) == NULL)
		return -1;
	snprintf(d.out, sizeof d.out, "%s/out", d.host);
	*state = &d;
	return 0;
}

static void file_put(const char *dir, const char *name, const char *text, mode_t mode)
{
	char path[128];
	int fd;

	snprintf(path, sizeof path, "%s/%s", dir, name);
	fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, mode);
	assert_true(fd >= 0);
	assert_int_equal(write(fd, text, strlen(text)), (ssize_t)strlen(text));
	assert_int_equal(fchmod(fd, mode), 0);
	close(fd);
}

static char *file_get(const char *dir, const char *name, mode_t *mode)
{
	char path[128];
	char *text = calloc(1, 4096);
	struct stat st;
	int fd;

	snprintf(path, sizeof path, "%s/%s", dir, name);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	assert_true(fd >= 0);
	assert_int_equal(fstat(fd, &st), 0);
	*mode = st.st_mode & 07777;
	assert_true(read(fd, text, 4095) >= 0);
	close(fd);
	return text;
}

static int dirs_remove(void **state)
{
	const struct dirs *d = *state;

	return test_rmtree(d->host);
}

/* Both files written, 0644, replaced whole on a second start (a changed uid, no stale line); the
 * host's group file, which others may not read, left out. */
static void test_files_written(void **state)
{
	const struct dirs d = *(const struct dirs *)*state;
	struct sb_err err;
	cleanup_free char *pw = NULL, *gr = NULL, *pw2 = NULL;
	mode_t mode;

	file_put(d.host, "passwd", "root:x:0:0:root:/root:/bin/bash\n", 0644);
	file_put(d.host, "group", "root:x:0:\nsecret:x:7:\n", 0600);
	assert_int_equal(users_files_write(d.out, d.host, 2000000001u, 2000000001u, "/w/.scratch", &err), 0);
	pw = file_get(d.out, "passwd", &mode);
	assert_int_equal(mode, 0644);
	assert_string_equal(pw + strlen(line), "root:x:0:0:root:/root:/bin/bash\n");
	assert_int_equal(strncmp(pw, "sandbox:x:2000000001:2000000001:sandbox:/w/.scratch:", 52), 0);
	gr = file_get(d.out, "group", &mode);
	assert_string_equal(gr, "sandbox:x:2000000001:\n");
	assert_int_equal(users_files_write(d.out, d.host, 2000000002u, 2000000002u, "/w/.scratch", &err), 0);
	pw2 = file_get(d.out, "passwd", &mode);
	assert_null(strstr(pw2, "2000000001"));
	assert_non_null(strstr(pw2, "sandbox:x:2000000002:2000000002:"));
}

/* A host file over the bound is refused with its size, before a byte is read; a home that would
 * break the line is refused. Nothing is written either way. */
static void test_refused(void **state)
{
	const struct dirs d = *(const struct dirs *)*state;
	struct sb_err err;
	char path[128];
	int fd;

	snprintf(path, sizeof path, "%s/passwd", d.host);
	fd = open(path, O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
	assert_true(fd >= 0);
	assert_int_equal(ftruncate(fd, (4 << 20) + 1), 0);
	close(fd);
	assert_int_equal(users_files_write(d.out, d.host, 2000000001u, 2000000001u, "/w", &err), -1);
	assert_int_equal(err.errnum, EFBIG);
	assert_non_null(strstr(err.msg, "4194305 bytes, more than the 4194304"));
	snprintf(path, sizeof path, "%s/passwd", d.out);
	assert_int_equal(access(path, F_OK), -1);
	assert_int_equal(users_files_write(d.out, d.host, 2000000001u, 2000000001u, "/w:0:0:x:/:/bin/sh\nroot", &err), -1);
	assert_int_equal(err.errnum, EINVAL);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_absent_id_added_first),
		cmocka_unit_test(test_present_id_unchanged),
		cmocka_unit_test(test_empty_host),
		cmocka_unit_test(test_result_parses),
		cmocka_unit_test_setup_teardown(test_files_written, dirs_make, dirs_remove),
		cmocka_unit_test_setup_teardown(test_refused, dirs_make, dirs_remove),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
