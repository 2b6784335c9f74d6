/* Unit tests for manager/workspace/gitrun.c's confinement (issue 13, rule R3): with read roots, root's git
 * reads nothing outside them and the system's files, even through a symbolic link a command
 * planted in a repository's writable parts, and executes nothing from a repository; ordinary
 * trusted git operations still work inside the roots. Each attack is first run unconfined, to
 * show that it would leak there. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/landlock.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "gitrun.h"
#include "testutil.h"

#define MARKER "SECRET-MARKER-7d1f hunter2"
#define HEX_MARKER "5ec2e7aa5ec2e7aa5ec2e7aa5ec2e7aa5ec2e7aa"

struct fixture {
	char dir[PATH_MAX];    /* mkdtemp root */
	char src[PATH_MAX];    /* a repository with one commit on main */
	char repo[PATH_MAX];   /* a bare clone of it, with packed-refs */
	char secret[PATH_MAX]; /* outside both: 0600, one line */
};

static void path_join(char *out, size_t size, const char *a, const char *b)
{
	int n = snprintf(out, size, "%s/%s", a, b);

	assert_true(n > 0 && (size_t)n < size);
}

static void write_file(const char *path, const char *text, mode_t mode)
{
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, mode);

	assert_true(fd >= 0);
	assert_int_equal(write(fd, text, strlen(text)), (ssize_t)strlen(text));
	assert_int_equal(fchmod(fd, mode), 0);
	assert_int_equal(close(fd), 0);
}

static void git_ok(const char *const args[])
{
	struct sb_err err;

	if (gitrun_check(args, NULL, NULL, &err) != 0)
		fail_msg("git failed: %s", err.msg);
}

static int setup(void **state)
{
	struct fixture *fx = calloc(1, sizeof *fx);
	char file[PATH_MAX];

	assert_non_null(fx);
	snprintf(fx->dir, sizeof fx->dir, "/tmp/test-gitrun-XXXXXX");
	assert_non_null(mkdtemp(fx->dir));
	path_join(fx->src, sizeof fx->src, fx->dir, "src");
	path_join(fx->repo, sizeof fx->repo, fx->dir, "repo.git");
	path_join(fx->secret, sizeof fx->secret, fx->dir, "secret");
	git_ok((const char *[]){ "init", "--quiet", "--initial-branch=main", fx->src, NULL });
	path_join(file, sizeof file, fx->src, "README");
	write_file(file, "hello\n", 0644);
	git_ok((const char *[]){ "-C", fx->src, "add", "README", NULL });
	git_ok((const char *[]){ "-C", fx->src, "-c", "user.name=t", "-c", "user.email=t@example.com", "commit",
				 "--quiet", "-m", "first", NULL });
	git_ok((const char *[]){ "clone", "--quiet", "--bare", "--no-local", "--", fx->src, fx->repo, NULL });
	/* Root-only under a root test run: git as root could read it, a sandbox could not. */
	write_file(fx->secret, MARKER "\n", 0600);
	*state = fx;
	return 0;
}

static int teardown(void **state)
{
	struct fixture *fx = *state;

	assert_int_equal(test_rmtree(fx->dir), 0);
	free(fx);
	return 0;
}

static bool landlock_available(void)
{
	return syscall(SYS_landlock_create_ruleset, NULL, 0, LANDLOCK_CREATE_RULESET_VERSION) >= 1;
}

/* Run git; out gets stdout and stderr together. Returns the exit code (-1: could not run). */
static int git_capture(const char *const args[], const struct gitrun_opts *opts, char *out, size_t size)
{
	struct gitrun_result res;
	struct sb_err err;
	int code;

	if (gitrun(args, opts, &res, &err) != 0) {
		snprintf(out, size, "gitrun: %s", err.msg);
		gitrun_result_free(&res);
		return -1;
	}
	snprintf(out, size, "%s\n%s", res.out, res.errout);
	code = res.exit_code;
	gitrun_result_free(&res);
	return code;
}

static void plant_link(const char *target, const char *repo, const char *name)
{
	char link[PATH_MAX];

	path_join(link, sizeof link, repo, name);
	(void)unlink(link);
	assert_int_equal(symlink(target, link), 0);
}

/* packed-refs.d/packed-refs is sandbox-writable: a link there to a root-only file makes any ref
 * lookup of root's git read it, and git quotes the line it cannot parse in its error. */
static void test_planted_packed_refs_not_read(void **state)
{
	struct fixture *fx = *state;
	const char *const reads[] = { fx->repo, NULL };
	const struct gitrun_opts open_reads = { .write_roots = gitrun_read_only };
	const struct gitrun_opts confined = { .write_roots = gitrun_read_only, .read_roots = reads };
	char gitdir[PATH_MAX + 16], out[8192];
	const char *args[] = { gitdir, "rev-parse", "--verify", "--quiet", "HEAD^{commit}", NULL };

	if (!landlock_available())
		skip();
	snprintf(gitdir, sizeof gitdir, "--git-dir=%s", fx->repo);
	plant_link(fx->secret, fx->repo, "packed-refs");
	/* The premise: with reads unconfined, the secret's line reaches git's error. */
	assert_int_not_equal(git_capture(args, &open_reads, out, sizeof out), 0);
	assert_contains(out, MARKER);
	/* Confined: git cannot open the file; a clear error, and nothing of the secret. */
	assert_int_not_equal(git_capture(args, &confined, out, sizeof out), 0);
	assert_null(strstr(out, MARKER));
	assert_contains(out, "packed-refs");
	assert_contains(out, "Permission denied");
}

/* refs/ is sandbox-writable: a loose ref linked to a file outside is printed by rev-parse and
 * for-each-ref unconfined (the file's first 40 hex digits), refused confined. */
static void test_planted_loose_ref_not_read(void **state)
{
	struct fixture *fx = *state;
	const char *const reads[] = { fx->repo, NULL };
	const struct gitrun_opts open_reads = { .write_roots = gitrun_read_only };
	const struct gitrun_opts confined = { .write_roots = gitrun_read_only, .read_roots = reads };
	char gitdir[PATH_MAX + 16], out[8192];
	const char *const cmds[][3] = { { "rev-parse", "refs/heads/evil", NULL }, { "for-each-ref", NULL, NULL } };

	if (!landlock_available())
		skip();
	snprintf(gitdir, sizeof gitdir, "--git-dir=%s", fx->repo);
	write_file(fx->secret, HEX_MARKER "\n", 0600);
	plant_link(fx->secret, fx->repo, "refs/heads/evil");
	for (size_t i = 0; i < 2; i++) {
		const char *args[] = { gitdir, cmds[i][0], cmds[i][1], NULL };

		git_capture(args, &open_reads, out, sizeof out);
		assert_contains(out, HEX_MARKER);
		git_capture(args, &confined, out, sizeof out);
		assert_null(strstr(out, HEX_MARKER));
	}
}

/* Inside its roots, trusted git works as before: reads a repository, adds a worktree, clones. */
static void test_confined_git_works(void **state)
{
	struct fixture *fx = *state;
	char gitdir[PATH_MAX + 16], wt[PATH_MAX], clone[PATH_MAX], srcgit[PATH_MAX], out[8192];
	const char *const reads[] = { fx->repo, NULL };
	const char *const wt_roots[] = { fx->repo, wt, NULL };
	const char *const src_reads[] = { fx->src, srcgit, NULL };
	const char *const clone_roots[] = { clone, NULL };
	const struct gitrun_opts read_only = { .write_roots = gitrun_read_only, .read_roots = reads };
	const struct gitrun_opts wt_opts = { .write_roots = wt_roots, .read_roots = reads };
	const struct gitrun_opts clone_opts = { .write_roots = clone_roots, .read_roots = src_reads };

	if (!landlock_available())
		skip();
	snprintf(gitdir, sizeof gitdir, "--git-dir=%s", fx->repo);
	path_join(wt, sizeof wt, fx->dir, "wt");
	path_join(clone, sizeof clone, fx->dir, "clone.git");
	path_join(srcgit, sizeof srcgit, fx->src, ".git");
	assert_int_equal(git_capture((const char *[]){ gitdir, "rev-parse", "--verify", "HEAD^{commit}", NULL },
				     &read_only, out, sizeof out), 0);
	assert_int_equal(mkdir(wt, 0755), 0);
	assert_int_equal(git_capture((const char *[]){ gitdir, "worktree", "add", "--quiet", "-b", "s1", "--", wt, NULL },
				     &wt_opts, out, sizeof out), 0);
	assert_int_equal(git_capture((const char *[]){ gitdir, "branch", "--list", "s1", NULL }, &read_only, out,
				     sizeof out), 0);
	assert_contains(out, "s1");
	assert_int_equal(mkdir(clone, 0755), 0);
	if (git_capture((const char *[]){ "clone", "--bare", "--no-local", "--quiet", "--", fx->src, clone, NULL },
			&clone_opts, out, sizeof out) != 0)
		fail_msg("confined clone: %s", out);
}

/* Nothing in a repository is executable by confined git, even when something makes git run it
 * (here an alias; hooks are already off). */
static void test_nothing_in_repository_executes(void **state)
{
	struct fixture *fx = *state;
	const char *const reads[] = { fx->repo, NULL };
	const struct gitrun_opts open_reads = { .write_roots = gitrun_read_only };
	const struct gitrun_opts confined = { .write_roots = gitrun_read_only, .read_roots = reads };
	char gitdir[PATH_MAX + 16], script[PATH_MAX], alias[PATH_MAX + 32], out[8192];
	const char *args[] = { gitdir, "-c", alias, "planted", NULL };

	if (!landlock_available())
		skip();
	snprintf(gitdir, sizeof gitdir, "--git-dir=%s", fx->repo);
	path_join(script, sizeof script, fx->repo, "planted.sh");
	write_file(script, "#!/bin/sh\necho PLANTED-RAN\n", 0755);
	snprintf(alias, sizeof alias, "alias.planted=!%s", script);
	git_capture(args, &open_reads, out, sizeof out);
	assert_contains(out, "PLANTED-RAN");
	assert_int_not_equal(git_capture(args, &confined, out, sizeof out), 0);
	assert_null(strstr(out, "PLANTED-RAN"));
}

/* A root must be the directory itself, never a link to one: refused before git starts. */
static void test_root_link_refused(void **state)
{
	struct fixture *fx = *state;
	char link[PATH_MAX];
	const char *const reads[] = { link, NULL };
	const struct gitrun_opts confined = { .write_roots = gitrun_read_only, .read_roots = reads };
	struct gitrun_result res;
	struct sb_err err;

	if (!landlock_available())
		skip();
	path_join(link, sizeof link, fx->dir, "repo-link");
	assert_int_equal(symlink(fx->repo, link), 0);
	assert_int_equal(gitrun((const char *[]){ "--version", NULL }, &confined, &res, &err), -1);
	gitrun_result_free(&res);
	assert_int_equal(err.errnum, ELOOP);
	assert_contains(err.msg, "confine git");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_planted_packed_refs_not_read, setup, teardown),
		cmocka_unit_test_setup_teardown(test_planted_loose_ref_not_read, setup, teardown),
		cmocka_unit_test_setup_teardown(test_confined_git_works, setup, teardown),
		cmocka_unit_test_setup_teardown(test_nothing_in_repository_executes, setup, teardown),
		cmocka_unit_test_setup_teardown(test_root_link_refused, setup, teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
