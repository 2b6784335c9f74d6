/* Unit tests for manager/workspace/ with real git repositories in temporary directories: creating
 * a session workspace, reusing the base clone, branches, scratch, refusals that leave nothing
 * behind, bad names and paths, recheck, open, delete, the mount plan and the volume probe. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <limits.h>
#include <linux/landlock.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "gitconfig.h"
#include "gitrun.h"
#include "workspace.h"
#include "testutil.h"

struct fixture {
	char dir[PATH_MAX];    /* mkdtemp root */
	char volume[PATH_MAX]; /* <dir>/volume */
	char src[PATH_MAX];    /* <dir>/proj: a repository with one commit on main */
	char head[64];         /* that commit */
};

/* ---------------------------------------------------------------- helpers */

/* snprintf for a path: a truncated one fails the test (it would name another file). */
static void pathf(char *out, size_t size, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void pathf(char *out, size_t size, const char *fmt, ...)
{
	va_list ap;
	int n;

	va_start(ap, fmt);
	n = vsnprintf(out, size, fmt, ap);
	va_end(ap);
	if (n < 0 || (size_t)n >= size)
		fail_msg("path too long (%d bytes for %zu): %s", n, size, out);
}

static void git_ok(const char *const args[])
{
	struct sb_err err;

	if (gitrun_check(args, NULL, NULL, &err) != 0)
		fail_msg("git failed: %s", err.msg);
}

/* git's stdout (trimmed), or NULL when git exits non-zero. */
static char *git_out(const char *const args[])
{
	struct gitrun_result res;
	struct sb_err err;
	char *out = NULL;

	if (gitrun(args, NULL, &res, &err) != 0)
		fail_msg("git could not run: %s", err.msg);
	if (res.exit_code == 0) {
		res.out[strcspn(res.out, "\n")] = '\0';
		out = res.out;
		res.out = NULL;
	}
	gitrun_result_free(&res);
	return out;
}

static void write_file(const char *path, const char *text)
{
	FILE *f = fopen(path, "w");

	assert_non_null(f);
	assert_true(fputs(text, f) >= 0);
	assert_int_equal(fclose(f), 0);
}

static bool exists(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static bool exists(const char *fmt, ...)
{
	char path[PATH_MAX * 2];
	struct stat st;
	va_list ap;

	int n;

	va_start(ap, fmt);
	n = vsnprintf(path, sizeof path, fmt, ap);
	va_end(ap);
	if (n < 0 || (size_t)n >= sizeof path)
		fail_msg("path too long: %s", path);
	return lstat(path, &st) == 0;
}

static int dir_entries(const char *path)
{
	DIR *d = opendir(path);
	struct dirent *de;
	int n = 0;

	if (d == NULL)
		return -1;
	while ((de = readdir(d)) != NULL)
		if (strcmp(de->d_name, ".") != 0 && strcmp(de->d_name, "..") != 0)
			n++;
	closedir(d);
	return n;
}

/* A repository at path with README committed on main. */
static void repo_make(const char *path, char head[64])
{
	char file[PATH_MAX + 16];
	char *out;

	git_ok((const char *[]){ "init", "--quiet", "--initial-branch=main", path, NULL });
	pathf(file, sizeof file, "%s/README", path);
	write_file(file, "hello\n");
	git_ok((const char *[]){ "-C", path, "add", "README", NULL });
	git_ok((const char *[]){ "-C", path, "-c", "user.name=t", "-c", "user.email=t@example.com", "commit",
				 "--quiet", "-m", "first", NULL });
	out = git_out((const char *[]){ "-C", path, "rev-parse", "HEAD", NULL });
	assert_non_null(out);
	if (head != NULL)
		pathf(head, 64, "%s", out);
	free(out);
}

static int setup(void **state)
{
	struct fixture *fx = calloc(1, sizeof *fx);

	assert_non_null(fx);
	pathf(fx->dir, sizeof fx->dir, "/tmp/test-workspace-XXXXXX");
	assert_non_null(mkdtemp(fx->dir));
	pathf(fx->volume, sizeof fx->volume, "%s/volume", fx->dir);
	assert_int_equal(mkdir(fx->volume, 0755), 0);
	pathf(fx->src, sizeof fx->src, "%s/proj", fx->dir);
	repo_make(fx->src, fx->head);
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

static void create_ok(struct fixture *fx, const char *session, const char *branch, struct workspace *ws)
{
	struct sb_err err;

	if (workspace_create(fx->volume, "alice", session, fx->src, branch, ws, &err) != 0)
		fail_msg("workspace_create: %s", err.msg);
}

/* ---------------------------------------------------------------- create */

static void test_create_layout_and_branch(void **state)
{
	struct fixture *fx = *state;
	char expect[PATH_MAX * 2], readme[PATH_MAX + 16];
	struct workspace ws;
	struct stat st;
	char *out;

	create_ok(fx, "s1", NULL, &ws);
	pathf(expect, sizeof expect, "%s/identities/alice/workspaces/s1", fx->volume);
	assert_string_equal(ws.worktree, expect);
	pathf(expect, sizeof expect, "%s/identities/alice/repositories/proj", fx->volume);
	assert_string_equal(ws.repo_dir, expect);
	assert_string_equal(ws.repo_name, "proj");
	assert_string_equal(ws.branch, "sandbox/s1");
	assert_string_equal(ws.source, fx->src);
	assert_string_equal(ws.worktree_name, "s1");
	assert_true(ws.base_created);
	pathf(expect, sizeof expect, "%s/worktrees/s1", ws.repo_dir);
	assert_string_equal(ws.worktree_git_dir, expect);
	pathf(expect, sizeof expect, "%s/.sandbox-tmp", ws.worktree);
	assert_string_equal(ws.scratch, expect);

	/* The base clone is bare; the worktree holds the committed file on the session branch. */
	out = git_out((const char *[]){ "--git-dir", ws.repo_dir, "rev-parse", "--is-bare-repository", NULL });
	assert_string_equal(out, "true");
	free(out);
	pathf(readme, sizeof readme, "%s/README", ws.worktree);
	assert_true(exists("%s", readme));
	out = git_out((const char *[]){ "-C", ws.worktree, "symbolic-ref", "HEAD", NULL });
	assert_string_equal(out, "refs/heads/sandbox/s1");
	free(out);
	out = git_out((const char *[]){ "-C", ws.worktree, "rev-parse", "HEAD", NULL });
	assert_string_equal(out, fx->head);
	free(out);

	/* A closed volume (rule N3): search only down to the identity, its group's below, the worktree
	 * its own. */
	pathf(expect, sizeof expect, "%s/identities", fx->volume);
	assert_int_equal(stat(expect, &st), 0);
	assert_int_equal(st.st_mode & 0777, 0711);
	pathf(expect, sizeof expect, "%s/identities/alice", fx->volume);
	assert_int_equal(stat(expect, &st), 0);
	assert_int_equal(st.st_mode & 0777, 0711);
	for (int i = 0; i < 2; i++) {
		pathf(expect, sizeof expect, "%s/identities/alice/%s", fx->volume, i ? "workspaces" : "repositories");
		assert_int_equal(stat(expect, &st), 0);
		assert_int_equal(st.st_mode & 0777, 0710);
		assert_int_equal(st.st_gid, getegid());
	}
	assert_int_equal(stat(ws.worktree, &st), 0);
	assert_int_equal(st.st_mode & 0777, 0700);
	/* The identity's private directories exist and are 0700. */
	assert_int_equal(stat(ws.repo_dir, &st), 0);
	pathf(expect, sizeof expect, "%s/identities/alice/private-state", fx->volume);
	assert_int_equal(stat(expect, &st), 0);
	assert_int_equal(st.st_mode & 0777, 0700);
	pathf(expect, sizeof expect, "%s/identities/alice/provider-auth", fx->volume);
	assert_int_equal(stat(expect, &st), 0);
	assert_int_equal(st.st_mode & 0777, 0700);
	workspace_free(&ws);
}

static void test_second_session_reuses_base(void **state)
{
	struct fixture *fx = *state;
	struct workspace a, b;
	char objects[PATH_MAX + 16];
	struct stat st1, st2;

	create_ok(fx, "s1", NULL, &a);
	pathf(objects, sizeof objects, "%s/objects", a.repo_dir);
	assert_int_equal(stat(objects, &st1), 0);
	/* A commit added to the source afterwards must not show up: the base is not cloned again. */
	git_ok((const char *[]){ "-C", fx->src, "-c", "user.name=t", "-c", "user.email=t@example.com", "commit",
				 "--quiet", "--allow-empty", "-m", "later", NULL });
	create_ok(fx, "s2", NULL, &b);
	assert_false(b.base_created);
	assert_string_equal(a.repo_dir, b.repo_dir);
	assert_int_equal(stat(objects, &st2), 0);
	assert_int_equal(st1.st_ino, st2.st_ino);
	assert_string_equal(b.branch, "sandbox/s2");
	assert_string_equal(b.worktree_name, "s2");
	{
		char *out = git_out((const char *[]){ "-C", b.worktree, "rev-parse", "HEAD", NULL });

		assert_string_equal(out, fx->head);
		free(out);
	}
	/* One base clone for the identity, and nothing else in repositories/. */
	{
		char repos[PATH_MAX + 64];

		pathf(repos, sizeof repos, "%s/identities/alice/repositories", fx->volume);
		assert_int_equal(dir_entries(repos), 1);
	}
	workspace_free(&a);
	workspace_free(&b);
}

static void test_same_name_other_source(void **state)
{
	struct fixture *fx = *state;
	char other[PATH_MAX];
	struct workspace a, b;
	struct sb_err err;

	create_ok(fx, "s1", NULL, &a);
	pathf(other, sizeof other, "%s/elsewhere", fx->dir);
	assert_int_equal(mkdir(other, 0755), 0);
	pathf(other, sizeof other, "%s/elsewhere/proj.git", fx->dir);
	repo_make(other, NULL);
	assert_int_equal(workspace_create(fx->volume, "alice", "s2", other, NULL, &b, &err), 0);
	assert_string_not_equal(a.repo_dir, b.repo_dir);
	assert_true(strncmp(b.repo_name, "proj-", 5) == 0);
	assert_int_equal(strlen(b.repo_name), strlen("proj-") + 16);
	workspace_free(&a);
	workspace_free(&b);
}

static void test_file_url_and_bare_source(void **state)
{
	struct fixture *fx = *state;
	char url[PATH_MAX + 16], bare[PATH_MAX];
	struct workspace a, b;
	struct sb_err err;

	pathf(url, sizeof url, "file://%s", fx->src);
	assert_int_equal(workspace_create(fx->volume, "alice", "s1", url, NULL, &a, &err), 0);
	assert_string_equal(a.source, fx->src);
	pathf(bare, sizeof bare, "%s/bare.git", fx->dir);
	git_ok((const char *[]){ "clone", "--quiet", "--bare", fx->src, bare, NULL });
	if (workspace_create(fx->volume, "alice", "s2", bare, NULL, &b, &err) != 0)
		fail_msg("%s", err.msg);
	assert_string_equal(b.repo_name, "bare");
	assert_true(exists("%s/README", b.worktree));
	workspace_free(&a);
	workspace_free(&b);
}

static void test_named_branch_and_existing_branch(void **state)
{
	struct fixture *fx = *state;
	struct workspace a, b;
	char *out;

	create_ok(fx, "s1", "feature/fix-probe", &a);
	assert_string_equal(a.branch, "feature/fix-probe");
	out = git_out((const char *[]){ "-C", a.worktree, "symbolic-ref", "--short", "HEAD", NULL });
	assert_string_equal(out, "feature/fix-probe");
	free(out);
	/* "main" came with the clone: it is checked out, not created. */
	create_ok(fx, "s2", "main", &b);
	out = git_out((const char *[]){ "-C", b.worktree, "symbolic-ref", "--short", "HEAD", NULL });
	assert_string_equal(out, "main");
	free(out);
	workspace_free(&a);
	workspace_free(&b);
}

static void test_bad_branch_names(void **state)
{
	struct fixture *fx = *state;
	static const char *const bad[] = { "bad..name", "-x", "a b", "@{-1}", "x.lock", "HEAD", "end/", "", NULL };
	struct workspace ws;
	struct sb_err err;

	for (size_t i = 0; bad[i] != NULL; i++) {
		assert_int_equal(workspace_create(fx->volume, "alice", "s1", fx->src, bad[i], &ws, &err), -1);
		if (strstr(err.msg, "branch name") == NULL)
			fail_msg("branch '%s': %s", bad[i], err.msg);
	}
	assert_false(exists("%s/identities", fx->volume));
}

static void test_scratch_ignored_and_git_works(void **state)
{
	struct fixture *fx = *state;
	char file[PATH_MAX * 2], exclude[PATH_MAX + 32];
	struct workspace ws;
	struct stat st;
	char *out;

	create_ok(fx, "s1", NULL, &ws);
	assert_int_equal(lstat(ws.scratch, &st), 0);
	assert_true(S_ISDIR(st.st_mode));
	assert_int_equal(st.st_mode & 0777, 0700);
	pathf(file, sizeof file, "%s/report.txt", ws.scratch);
	write_file(file, "findings\n");
	out = git_out((const char *[]){ "-C", ws.worktree, "status", "--porcelain", "--untracked-files=all", NULL });
	assert_string_equal(out, "");
	free(out);
	/* The pattern sits in the common dir's info/exclude, once, even after a second session. */
	pathf(exclude, sizeof exclude, "%s/info/exclude", ws.repo_dir);
	{
		struct workspace b;
		char text[8192];
		const char *line;
		FILE *f;
		size_t n;

		create_ok(fx, "s2", NULL, &b);
		f = fopen(exclude, "r");
		assert_non_null(f);
		n = fread(text, 1, sizeof text - 1, f);
		fclose(f);
		text[n] = '\0';
		line = strstr(text, "\n/.sandbox-tmp/\n");
		assert_non_null(line);
		assert_null(strstr(line + strlen("\n/.sandbox-tmp/\n"), "/.sandbox-tmp/"));
		workspace_free(&b);
	}
	/* An ordinary change is seen, committed on the session branch, with its reflog in logs/. */
	pathf(file, sizeof file, "%s/README", ws.worktree);
	write_file(file, "changed\n");
	out = git_out((const char *[]){ "-C", ws.worktree, "status", "--porcelain", NULL });
	assert_string_equal(out, " M README");
	free(out);
	git_ok((const char *[]){ "-C", ws.worktree, "-c", "user.name=t", "-c", "user.email=t@example.com",
				 "commit", "--quiet", "-am", "patch", NULL });
	assert_true(exists("%s/logs/refs/heads/sandbox/s1", ws.repo_dir));
	out = git_out((const char *[]){ "--git-dir", ws.repo_dir, "log", "-1", "--format=%s", "sandbox/s1", NULL });
	assert_string_equal(out, "patch");
	free(out);
	workspace_free(&ws);
}

/* ---------------------------------------------------------------- refusals leave nothing */

struct refused_case {
	const char *key;     /* as given to git config */
	const char *value;
	const char *listed;  /* as it must appear in the message */
};

static const struct refused_case refused[] = {
	{ "include.path", "/etc/gitconfig", "config key include.path can load other configuration; "
	  "remove it or use a clone without it" },
	{ "includeIf.gitdir:/srv/.path", "/etc/gitconfig", "config key includeif.gitdir:/srv/.path can load" },
	{ "filter.x.smudge", "cat", "config key filter.x.smudge can run a program" },
	{ "core.fsmonitor", "/usr/bin/monitor", "config key core.fsmonitor can run a program" },
	{ "core.hooksPath", "/tmp/hooks", "config key core.hookspath can run a program" },
	{ "core.sshCommand", "ssh -i k", "config key core.sshcommand can run a program" },
	{ "diff.x.textconv", "cat", "config key diff.x.textconv can run a program" },
	{ "merge.x.driver", "cat %A", "config key merge.x.driver can run a program" },
	{ "credential.helper", "store", "config key credential.helper can run a program" },
	{ "core.pager", "less", "config key core.pager can run a program" },
};

static void nothing_left(struct fixture *fx, const char *session)
{
	char path[PATH_MAX * 2];

	pathf(path, sizeof path, "%s/identities/alice/workspaces/%s", fx->volume, session);
	assert_false(exists("%s", path));
	pathf(path, sizeof path, "%s/identities/alice/repositories", fx->volume);
	assert_true(dir_entries(path) <= 0);
}

static void test_refused_key(void **state)
{
	struct fixture *fx = *state;
	const struct refused_case *c = NULL;
	char config[PATH_MAX + 16];

	for (size_t i = 0; i < sizeof refused / sizeof refused[0]; i++) {
		struct workspace ws;
		struct sb_err err;

		c = &refused[i];
		pathf(config, sizeof config, "%s/.git/config", fx->src);
		git_ok((const char *[]){ "config", "--file", config, c->key, c->value, NULL });
		assert_int_equal(workspace_create(fx->volume, "alice", "s1", fx->src, NULL, &ws, &err), -1);
		if (strstr(err.msg, c->listed) == NULL || strstr(err.msg, "repository refused: ") == NULL)
			fail_msg("key %s: message was: %s", c->key, err.msg);
		assert_non_null(strstr(err.msg, "creating the workspace of session s1: "));
		nothing_left(fx, "s1");
		git_ok((const char *[]){ "config", "--file", config, "--unset", c->key, NULL });
	}
	/* With the keys gone the same repository is accepted. */
	{
		struct workspace ws;

		create_ok(fx, "s1", NULL, &ws);
		workspace_free(&ws);
	}
}

/* A key that appears in an already-used base clone refuses the next session, which leaves no
 * worktree and no branch behind; the first session is untouched. */
static void test_refused_after_clone_leaves_nothing(void **state)
{
	struct fixture *fx = *state;
	char config[PATH_MAX + 16];
	struct workspace a, b;
	struct sb_err err;
	char *out;

	create_ok(fx, "s1", NULL, &a);
	pathf(config, sizeof config, "%s/config", a.repo_dir);
	git_ok((const char *[]){ "config", "--file", config, "filter.lfs.process", "git-lfs filter-process", NULL });
	assert_int_equal(workspace_create(fx->volume, "alice", "s2", fx->src, NULL, &b, &err), -1);
	assert_non_null(strstr(err.msg, "repository refused: config key filter.lfs.process"));
	assert_false(exists("%s/identities/alice/workspaces/s2", fx->volume));
	out = git_out((const char *[]){ "--git-dir", a.repo_dir, "rev-parse", "--verify", "--quiet",
					"refs/heads/sandbox/s2", NULL });
	assert_null(out);
	assert_true(exists("%s/README", a.worktree));
	/* Before the next sandbox, the recheck refuses the first session too: opened again, as a new
	 * sandbox of it opens it (mutation M11c: the open that skipped the recheck), and checked again. */
	assert_int_equal(workspace_open(fx->volume, "alice", "s1", &b, &err), -1);
	assert_non_null(strstr(err.msg, "config key filter.lfs.process"));
	assert_int_equal(workspace_recheck(&a, &err), -1);
	assert_non_null(strstr(err.msg, "config key filter.lfs.process"));
	workspace_free(&a);
}

static void test_bad_names_and_paths(void **state)
{
	struct fixture *fx = *state;
	static const char *const bad_identities[] = {
		"../x", ".hidden", "-x", "", "a/b", "a b", "x\n",
		"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa", NULL,
	};
	char path[PATH_MAX + 32], notrepo[PATH_MAX];
	struct workspace ws;
	struct sb_err err;

	for (size_t i = 0; bad_identities[i] != NULL; i++) {
		assert_int_equal(workspace_create(fx->volume, bad_identities[i], "s1", fx->src, NULL, &ws, &err), -1);
		if (strstr(err.msg, "identity name") == NULL)
			fail_msg("identity '%s': %s", bad_identities[i], err.msg);
	}
	assert_int_equal(workspace_create(fx->volume, "alice", "../s1", fx->src, NULL, &ws, &err), -1);
	assert_non_null(strstr(err.msg, "session name ../s1 starts with '.'"));
	assert_int_equal(workspace_create(fx->volume, "a/b", "s1", fx->src, NULL, &ws, &err), -1);
	assert_non_null(strstr(err.msg, "identity name a/b has a character outside A-Z a-z 0-9 . _ - at position 2"));

	pathf(path, sizeof path, "%s/does-not-exist", fx->dir);
	assert_int_equal(workspace_create(fx->volume, "alice", "s1", path, NULL, &ws, &err), -1);
	assert_non_null(strstr(err.msg, "repository path "));
	assert_non_null(strstr(err.msg, "/does-not-exist does not exist"));
	assert_int_equal(workspace_create(fx->volume, "alice", "s1", "proj", NULL, &ws, &err), -1);
	assert_non_null(strstr(err.msg, "repository path proj is relative; give an absolute path"));
	assert_int_equal(workspace_create(fx->volume, "alice", "s1", "git@example.com:x/y.git", NULL, &ws, &err), -1);
	assert_non_null(strstr(err.msg, "uses an unsupported transport"));
	assert_int_equal(workspace_create(fx->volume, "alice", "s1", "ext::sh -c id", NULL, &ws, &err), -1);
	assert_non_null(strstr(err.msg, "uses an unsupported transport"));
	assert_int_equal(workspace_create(fx->volume, "alice", "s1", "ssh://example.com/x", NULL, &ws, &err), -1);
	assert_non_null(strstr(err.msg, "uses an unsupported transport"));
	assert_int_equal(workspace_create(fx->volume, "alice", "s1", "https://me:token@example.com/x.git", NULL,
					  &ws, &err), -1);
	assert_non_null(strstr(err.msg, "carries credentials"));
	assert_int_equal(workspace_create(fx->volume, "alice", "s1", "https://example.com/x y", NULL, &ws, &err), -1);
	assert_non_null(strstr(err.msg, "has a space"));
	assert_int_equal(workspace_create(fx->volume, "alice", "s1", "file://relative/x", NULL, &ws, &err), -1);
	assert_non_null(strstr(err.msg, "must name an absolute path"));
	pathf(notrepo, sizeof notrepo, "%s/plain", fx->dir);
	assert_int_equal(mkdir(notrepo, 0755), 0);
	assert_int_equal(workspace_create(fx->volume, "alice", "s1", notrepo, NULL, &ws, &err), -1);
	assert_non_null(strstr(err.msg, "is not a git repository"));
	pathf(path, sizeof path, "%s/nope", fx->dir);
	assert_int_equal(workspace_create(path, "alice", "s1", fx->src, NULL, &ws, &err), -1);
	assert_non_null(strstr(err.msg, "volume "));
	/* None of these created anything on the volume. */
	assert_false(exists("%s/identities", fx->volume));
}

static void test_session_twice_refused(void **state)
{
	struct fixture *fx = *state;
	struct workspace a, b;
	struct sb_err err;

	create_ok(fx, "s1", NULL, &a);
	assert_int_equal(workspace_create(fx->volume, "alice", "s1", fx->src, NULL, &b, &err), -1);
	assert_non_null(strstr(err.msg, "session s1 already has a workspace at "));
	/* The failed call took nothing of the first one away. */
	assert_int_equal(workspace_recheck(&a, &err), 0);
	workspace_free(&a);
}

static void test_empty_repository_refused(void **state)
{
	struct fixture *fx = *state;
	char empty[PATH_MAX];
	struct workspace ws;
	struct sb_err err;

	pathf(empty, sizeof empty, "%s/empty", fx->dir);
	git_ok((const char *[]){ "init", "--quiet", empty, NULL });
	assert_int_equal(workspace_create(fx->volume, "alice", "s1", empty, NULL, &ws, &err), -1);
	assert_non_null(strstr(err.msg, "has no commit on its default branch"));
	nothing_left(fx, "s1");
}

/* ---------------------------------------------------------------- recheck, open, delete */

static void test_recheck(void **state)
{
	struct fixture *fx = *state;
	char path[PATH_MAX + 32], saved[PATH_MAX + 32];
	struct workspace ws;
	struct sb_err err;

	create_ok(fx, "s1", NULL, &ws);
	assert_int_equal(workspace_recheck(&ws, &err), 0);
	/* A command removed the scratch folder: it comes back. */
	assert_int_equal(rmdir(ws.scratch), 0);
	assert_int_equal(workspace_recheck(&ws, &err), 0);
	assert_true(exists("%s", ws.scratch));
	/* A redirected ownership pointer is refused. */
	pathf(path, sizeof path, "%s/.git", ws.worktree);
	pathf(saved, sizeof saved, "%s/.git.saved", ws.worktree);
	assert_int_equal(rename(path, saved), 0);
	write_file(path, "gitdir: /tmp/elsewhere\n");
	assert_int_equal(workspace_recheck(&ws, &err), -1);
	assert_non_null(strstr(err.msg, "was changed outside normal git use"));
	assert_int_equal(rename(saved, path), 0);
	pathf(path, sizeof path, "%s/commondir", ws.worktree_git_dir);
	write_file(path, "/tmp\n");
	assert_int_equal(workspace_recheck(&ws, &err), -1);
	assert_non_null(strstr(err.msg, "points to /tmp, not to "));
	write_file(path, "../..\n");
	assert_int_equal(workspace_recheck(&ws, &err), 0);
	/* Worktree config (read when extensions.worktreeConfig is on) is checked too. */
	pathf(path, sizeof path, "%s/config.worktree", ws.worktree_git_dir);
	git_ok((const char *[]){ "config", "--file", path, "core.editor", "vi", NULL });
	assert_int_equal(workspace_recheck(&ws, &err), -1);
	assert_non_null(strstr(err.msg, "config key core.editor"));
	assert_non_null(strstr(err.msg, "checking the workspace of session s1: "));
	workspace_free(&ws);
}

static void test_open_existing(void **state)
{
	struct fixture *fx = *state;
	struct workspace a, b;
	struct sb_err err;

	create_ok(fx, "s1", "topic", &a);
	if (workspace_open(fx->volume, "alice", "s1", &b, &err) != 0)
		fail_msg("%s", err.msg);
	assert_string_equal(a.worktree, b.worktree);
	assert_string_equal(a.repo_dir, b.repo_dir);
	assert_string_equal(a.repo_name, b.repo_name);
	assert_string_equal(a.worktree_git_dir, b.worktree_git_dir);
	assert_string_equal(a.branch, b.branch);
	assert_string_equal(a.source, b.source);
	assert_string_equal(a.scratch, b.scratch);
	workspace_free(&b);
	assert_int_equal(workspace_open(fx->volume, "alice", "nope", &b, &err), -1);
	assert_non_null(strstr(err.msg, "opening the workspace of session nope"));
	workspace_free(&a);
}

static void test_delete_keeps_branch(void **state)
{
	struct fixture *fx = *state;
	char file[PATH_MAX + 16];
	struct workspace ws, again;
	struct sb_err err;
	char *out;

	create_ok(fx, "s1", NULL, &ws);
	pathf(file, sizeof file, "%s/README", ws.worktree);
	write_file(file, "the patch\n");
	git_ok((const char *[]){ "-C", ws.worktree, "-c", "user.name=t", "-c", "user.email=t@example.com",
				 "commit", "--quiet", "-am", "patch", NULL });
	write_file(file, "dirty, uncommitted\n");
	if (workspace_delete(&ws, true, NULL, &err) != 0)
		fail_msg("%s", err.msg);
	assert_false(exists("%s", ws.worktree));
	assert_false(exists("%s", ws.worktree_git_dir));
	assert_true(exists("%s/HEAD", ws.repo_dir));
	out = git_out((const char *[]){ "--git-dir", ws.repo_dir, "log", "-1", "--format=%s", "sandbox/s1", NULL });
	assert_string_equal(out, "patch");
	free(out);

	/* The kept branch carries the patch into a new workspace of the same session name. */
	create_ok(fx, "s1", "sandbox/s1", &again);
	assert_true(exists("%s/README", again.worktree));
	out = git_out((const char *[]){ "-C", again.worktree, "log", "-1", "--format=%s", NULL });
	assert_string_equal(out, "patch");
	free(out);

	/* Deleting with the branch removes both. */
	assert_int_equal(workspace_delete(&again, false, NULL, &err), 0);
	assert_false(exists("%s", again.worktree));
	out = git_out((const char *[]){ "--git-dir", ws.repo_dir, "rev-parse", "--verify", "--quiet",
					"refs/heads/sandbox/s1", NULL });
	assert_null(out);
	workspace_free(&ws);
	workspace_free(&again);
}

static void test_delete_damaged_worktree(void **state)
{
	struct fixture *fx = *state;
	char dotgit[PATH_MAX + 16];
	struct workspace ws;
	struct sb_err err;

	create_ok(fx, "s1", NULL, &ws);
	/* A worktree whose .git pointer is gone: git cannot remove it, the fallback does. */
	pathf(dotgit, sizeof dotgit, "%s/.git", ws.worktree);
	assert_int_equal(unlink(dotgit), 0);
	if (workspace_delete(&ws, true, NULL, &err) != 0)
		fail_msg("%s", err.msg);
	assert_false(exists("%s", ws.worktree));
	assert_false(exists("%s", ws.worktree_git_dir));
	workspace_free(&ws);
}

/* The damaged-worktree fallback removes the directory itself (fstree): a link a command left in
 * the worktree goes, its target outside stays, content and all. */
static void test_delete_fallback_keeps_link_targets(void **state)
{
	struct fixture *fx = *state;
	char path[PATH_MAX + 32], outside[PATH_MAX];
	struct workspace ws;
	struct sb_err err;
	FILE *f;

	pathf(outside, sizeof outside, "%s/outside", fx->dir);
	assert_int_equal(mkdir(outside, 0755), 0);
	pathf(path, sizeof path, "%s/keep", outside);
	f = fopen(path, "we");
	assert_non_null(f);
	fputs("keep\n", f);
	assert_int_equal(fclose(f), 0);
	create_ok(fx, "s1", NULL, &ws);
	pathf(path, sizeof path, "%s/out", ws.worktree);
	assert_int_equal(symlink(outside, path), 0);
	pathf(path, sizeof path, "%s/.git", ws.worktree);
	assert_int_equal(unlink(path), 0);
	if (workspace_delete(&ws, true, NULL, &err) != 0)
		fail_msg("%s", err.msg);
	assert_false(exists("%s", ws.worktree));
	assert_true(exists("%s/keep", outside));
	workspace_free(&ws);
}

/* The guard refuses a worktree outside the identity's workspaces/, and its message names that
 * directory correctly (it was once read after the layout holding it was freed). */
static void test_delete_guard_outside_workspaces(void **state)
{
	struct fixture *fx = *state;
	char want[PATH_MAX + 64];
	struct workspace ws;
	struct sb_err err;
	char *real = realpath(fx->volume, NULL);

	assert_non_null(real);
	create_ok(fx, "s1", NULL, &ws);
	free(ws.worktree);
	ws.worktree = strdup(fx->dir);
	assert_non_null(ws.worktree);
	assert_int_equal(workspace_delete(&ws, true, NULL, &err), -1);
	assert_int_equal(err.errnum, EINVAL);
	pathf(want, sizeof want, "is not under %s/identities/%s/workspaces", real, ws.identity);
	assert_contains(err.msg, want);
	assert_true(exists("%s", fx->dir));
	workspace_free(&ws);
	free(real);
}

/* packed-refs.d/ is writable by every sandbox of the identity: a command can replace the packed
 * refs with a link to a root-only file. The delete's git (worktree remove, prune, branch -D) reads
 * the packed refs, and git quotes a line it cannot parse in its error; so unconfined reads would
 * carry the file's first line into the manager's message and log. Its reads are confined to the
 * repository (gitrun read_roots), and writes only refs/, logs/, packed-refs.d/: the branch's
 * deletion fails (its packed-refs lock would follow the link), the workspace is deleted, the branch
 * kept, and nothing is written through the link. */
static void test_delete_reads_confined(void **state)
{
	struct fixture *fx = *state;
	static const char marker[] = "SECRET-MARKER-c0ffee hunter2";
	char secret[PATH_MAX + 16], packed[PATH_MAX + 64];
	struct workspace ws;
	struct sb_err err;
	struct stat st;
	bool kept = false;
	FILE *f;

	/* The confinement is Landlock's; without it gitrun warns and runs unconfined. */
	if (syscall(SYS_landlock_create_ruleset, NULL, 0, LANDLOCK_CREATE_RULESET_VERSION) < 1)
		skip();
	pathf(secret, sizeof secret, "%s/secret", fx->dir);
	f = fopen(secret, "we");
	assert_non_null(f);
	assert_int_equal(fchmod(fileno(f), 0600), 0);
	fprintf(f, "%s\n", marker);
	assert_int_equal(fclose(f), 0);
	create_ok(fx, "s1", NULL, &ws);
	pathf(packed, sizeof packed, "%s/packed-refs.d/packed-refs", ws.repo_dir);
	assert_int_equal(unlink(packed), 0);
	assert_int_equal(symlink(secret, packed), 0);
	/* The worktree goes; the branch, whose deletion would rewrite packed-refs through the link,
	 * is kept (git's "Permission denied" is logged; test_gitrun shows no content is read). */
	must(workspace_delete(&ws, false, &kept, &err), &err, "workspace_delete");
	assert_true(kept);
	assert_int_equal(stat(secret, &st), 0);
	assert_int_equal(st.st_size, (off_t)sizeof marker);
	assert_int_equal(st.st_mode & 07777, 0600);
	workspace_free(&ws);
}

/* A review's race, made deterministic: a command of another session points packed-refs.d/packed-refs
 * at ../config (read-only to every sandbox) just before a branch deletion. git's packed-refs lock
 * follows the link; the rewrite must not land on config: a refs run may write refs/, logs/ and
 * packed-refs.d/ only, so the lock outside is refused and config is unchanged. */
static void test_delete_writes_confined(void **state)
{
	struct fixture *fx = *state;
	char packed[PATH_MAX + 64], config[PATH_MAX + 16], before[4096], after[4096];
	struct workspace ws;
	struct sb_err err;
	bool kept = false;
	FILE *f;
	size_t nb, na;

	if (syscall(SYS_landlock_create_ruleset, NULL, 0, LANDLOCK_CREATE_RULESET_VERSION) < 1)
		skip();
	create_ok(fx, "s1", NULL, &ws);
	pathf(config, sizeof config, "%s/config", ws.repo_dir);
	f = fopen(config, "re");
	assert_non_null(f);
	nb = fread(before, 1, sizeof before, f);
	fclose(f);
	pathf(packed, sizeof packed, "%s/packed-refs.d/packed-refs", ws.repo_dir);
	assert_int_equal(unlink(packed), 0);
	assert_int_equal(symlink("../config", packed), 0);
	must(workspace_delete(&ws, false, &kept, &err), &err, "workspace_delete");
	assert_true(kept);
	f = fopen(config, "re");
	assert_non_null(f);
	na = fread(after, 1, sizeof after, f);
	fclose(f);
	assert_int_equal(na, nb);
	assert_memory_equal(after, before, nb);
	workspace_free(&ws);
}

/* ---------------------------------------------------------------- the mount plan */

static void test_mount_plan(void **state)
{
	struct fixture *fx = *state;
	struct expected {
		const char *base;
		const char *suffix;
		enum mount_mode mode;
		bool is_file;
	};
	struct workspace ws;
	struct mount_plan plan;
	struct sb_err err;

	create_ok(fx, "s1", NULL, &ws);
	{
		const struct expected want[] = {
			{ ws.repo_dir, "", MOUNT_RO, false },
			{ ws.repo_dir, "/packed-refs.d", MOUNT_RW, false },
			{ ws.repo_dir, "/objects", MOUNT_RW, false },
			{ ws.repo_dir, "/objects/info/alternates", MOUNT_RO, true },
			{ ws.repo_dir, "/refs", MOUNT_RW, false },
			{ ws.repo_dir, "/logs", MOUNT_RW, false },
			{ ws.repo_dir, "/worktrees/s1", MOUNT_RW, false },
			{ ws.repo_dir, "/worktrees/s1/commondir", MOUNT_RO, true },
			{ ws.repo_dir, "/worktrees/s1/gitdir", MOUNT_RO, true },
			{ ws.worktree, "", MOUNT_RW, false },
			{ ws.worktree, "/.git", MOUNT_RO, true },
		};
		size_t n = sizeof want / sizeof want[0];

		if (mount_plan_build(&ws, &plan, &err) != 0)
			fail_msg("%s", err.msg);
		assert_int_equal(plan.n, n);
		for (size_t i = 0; i < n; i++) {
			char path[PATH_MAX * 2];

			pathf(path, sizeof path, "%s%s", want[i].base, want[i].suffix);
			assert_string_equal(plan.entries[i].source, path);
			assert_string_equal(plan.entries[i].target, path); /* same absolute paths */
			assert_int_equal(plan.entries[i].mode, want[i].mode);
			assert_int_equal(plan.entries[i].is_file, want[i].is_file);
			assert_non_null(plan.entries[i].why);
			assert_null(strstr(path, "private-state"));
			assert_null(strstr(path, "provider-auth"));
		}
	}
	assert_string_equal(plan.workdir, ws.worktree);
	assert_string_equal(plan.scratch, ws.scratch);

	/* The JSON form, as docs and backends print it. */
	{
		json_t *j = mount_plan_to_json(&plan);
		json_t *m;

		assert_non_null(j);
		assert_string_equal(json_string_value(json_object_get(j, "workdir")), ws.worktree);
		assert_string_equal(json_string_value(json_object_get(json_object_get(j, "env"), "TMPDIR")),
				    ws.scratch);
		assert_int_equal(json_array_size(json_object_get(j, "mounts")), plan.n);
		m = json_array_get(json_object_get(j, "mounts"), 3); /* objects/info/alternates */
		assert_string_equal(json_string_value(json_object_get(m, "mode")), "ro");
		assert_string_equal(json_string_value(json_object_get(m, "type")), "file");
		json_decref(j);
	}
	{
		FILE *devnull = fopen("/dev/null", "w");

		assert_non_null(devnull);
		assert_int_equal(mount_plan_print(&plan, devnull, &err), 0);
		fclose(devnull);
	}
	mount_plan_free(&plan);
	workspace_free(&ws);
}

/* packed-refs is a link into packed-refs.d/ (the plan makes that directory writable); git keeps
 * the link when it rewrites the file, as when a packed branch is deleted. */
static void test_packed_refs_link(void **state)
{
	struct fixture *fx = *state;
	char link[PATH_MAX + 32], target[PATH_MAX];
	struct workspace a, b;
	struct sb_err err;
	ssize_t n;
	char *out;

	create_ok(fx, "s1", NULL, &a);
	pathf(link, sizeof link, "%s/packed-refs", a.repo_dir);
	n = readlink(link, target, sizeof target - 1);
	assert_true(n > 0);
	target[n] = '\0';
	assert_string_equal(target, "packed-refs.d/packed-refs");
	assert_true(exists("%s/packed-refs.d/packed-refs", a.repo_dir));
	/* "main" came with the clone, so it is a packed ref; deleting it rewrites packed-refs. */
	create_ok(fx, "s2", "main", &b);
	assert_int_equal(workspace_delete(&b, false, NULL, &err), 0);
	out = git_out((const char *[]){ "--git-dir", a.repo_dir, "rev-parse", "--verify", "--quiet",
					"refs/heads/main", NULL });
	assert_null(out);
	n = readlink(link, target, sizeof target - 1);
	assert_true(n > 0);
	target[n] = '\0';
	assert_string_equal(target, "packed-refs.d/packed-refs");
	assert_int_equal(workspace_recheck(&a, &err), 0);
	workspace_free(&a);
	workspace_free(&b);
}

/* Everything the manager logs while fn runs, read back from a temporary file that stood in for
 * stderr (the log's one JSON line per message). */
static char *logged_during(void (*fn)(void *), void *arg)
{
	char path[] = "/tmp/test-workspace-log-XXXXXX";
	int fd = mkstemp(path), saved = dup(STDERR_FILENO);
	static char text[65536];
	ssize_t n;

	assert_true(fd >= 0 && saved >= 0);
	assert_int_equal(unlink(path), 0);
	fflush(stderr);
	assert_true(dup2(fd, STDERR_FILENO) >= 0);
	fn(arg);
	fflush(stderr);
	assert_true(dup2(saved, STDERR_FILENO) >= 0);
	close(saved);
	n = pread(fd, text, sizeof text - 1, 0);
	close(fd);
	assert_true(n >= 0);
	text[n] = '\0';
	return text;
}

struct create_args {
	struct fixture *fx;
	const char *session;
	struct workspace *ws;
	int rc;
	struct sb_err err;
};

static void create_call(void *arg)
{
	struct create_args *a = arg;

	a->rc = workspace_create(a->fx->volume, "alice", a->session, a->fx->src, NULL, a->ws, &a->err);
}

/* Rule N5: what session s1's command planted decides s1 alone. It wrote an include into its own
 * config.worktree, a link in the shared logs/ (the reflog the next session's branch would get, to a
 * file outside the volume), a FIFO among the shared refs and a FIFO in its own metadata (git's
 * worktree add reads every worktree's HEAD and would block on it). A new session is still created:
 * the planted entries are removed, each logged, nothing is written through the link; s1's own next
 * preparation is refused for its config.worktree, naming s1; the new session's is not. */
static void test_planted_entries_decide_their_session(void **state)
{
	struct fixture *fx = *state;
	char victim[PATH_MAX], dir[PATH_MAX + 64], link[PATH_MAX + 64], fifo[PATH_MAX + 64], own[PATH_MAX + 64];
	char cfg[PATH_MAX + 64];
	struct workspace a, b;
	struct create_args args = { .fx = fx, .session = "s2", .ws = &b };
	struct sb_err err;
	struct stat st;
	const char *log;

	create_ok(fx, "s1", NULL, &a);
	pathf(victim, sizeof victim, "%s/victim", fx->dir);
	write_file(victim, "precious\n");
	/* As a command would: git in a bare base does not create reflogs, but appends to one that
	 * exists, following a link. */
	for (const char *const *p = (const char *const[]){ "refs", "refs/heads", "refs/heads/sandbox", NULL }; *p; p++) {
		pathf(dir, sizeof dir, "%s/logs/%s", a.repo_dir, *p);
		assert_true(mkdir(dir, 0755) == 0 || errno == EEXIST);
	}
	pathf(link, sizeof link, "%s/s2", dir);
	assert_int_equal(symlink(victim, link), 0);
	pathf(fifo, sizeof fifo, "%s/refs/heads/planted-fifo", a.repo_dir);
	assert_int_equal(mkfifo(fifo, 0644), 0);
	pathf(own, sizeof own, "%s/HEAD.fifo", a.worktree_git_dir);
	assert_int_equal(mkfifo(own, 0644), 0);
	pathf(cfg, sizeof cfg, "%s/config.worktree", a.worktree_git_dir);
	git_ok((const char *[]){ "config", "--file", cfg, "include.path", "/etc/gitconfig", NULL });

	log = logged_during(create_call, &args);
	if (args.rc != 0)
		fail_msg("a new session was refused for what s1 planted: %s", args.err.msg);
	assert_false(exists("%s", link));
	assert_false(exists("%s", fifo));
	assert_false(exists("%s", own));
	assert_int_equal(stat(victim, &st), 0);
	assert_int_equal(st.st_size, strlen("precious\n"));
	assert_contains(log, "removed a symbolic link at ");
	assert_contains(log, "logs/refs/heads/sandbox/s2 -> ");
	assert_contains(log, "removed a FIFO at ");
	assert_contains(log, "refs/heads/planted-fifo");
	assert_contains(log, "worktrees/s1/HEAD.fifo, planted by a command of session s1 (its own worktree metadata)");

	must(workspace_recheck(&b, &err), &err, "the new session's recheck");
	assert_int_equal(workspace_recheck(&a, &err), -1);
	assert_contains(err.msg, "checking the workspace of session s1: ");
	assert_contains(err.msg, "config key include.path");
	workspace_free(&a);
	workspace_free(&b);
}

/* After a call, the manager sweeps with the call's session named (execpath.c call_sweep): the log
 * says who planted what; only the named worktree's metadata is swept besides the shared parts. */
struct sweep_args {
	const char *repo, *name;
	int rc;
	struct sb_err err;
};

static void sweep_call(void *arg)
{
	struct sweep_args *a = arg;

	a->rc = workspace_sweep(a->repo, a->name, "a command of session s1 (exec e1)", &a->err);
}

static void test_sweep_names_the_planter(void **state)
{
	struct fixture *fx = *state;
	char link[PATH_MAX + 64], other[PATH_MAX + 64];
	struct workspace a, b;
	struct sweep_args args;
	const char *log;

	create_ok(fx, "s1", NULL, &a);
	create_ok(fx, "s2", NULL, &b);
	pathf(link, sizeof link, "%s/packed-refs.d/packed-refs", a.repo_dir);
	assert_int_equal(unlink(link), 0);
	assert_int_equal(symlink("../config", link), 0);
	pathf(other, sizeof other, "%s/planted", b.worktree_git_dir);
	assert_int_equal(symlink("/", other), 0);
	args = (struct sweep_args){ .repo = a.repo_dir, .name = a.worktree_name };
	log = logged_during(sweep_call, &args);
	must(args.rc, &args.err, "workspace_sweep");
	assert_false(exists("%s", link));
	assert_contains(log, "packed-refs.d/packed-refs -> ../config, planted by a command of session s1 (exec e1)");
	/* s2's metadata is not s1's call's to sweep: left for s2's own sweep or the next preparation. */
	assert_true(exists("%s", other));
	workspace_free(&a);
	workspace_free(&b);
}

struct swapper {
	char a[PATH_MAX + 64], b[PATH_MAX + 64], outside[PATH_MAX + 16];
	volatile bool stop;
	unsigned long swaps;
};

/* Swaps a directory in refs/ with a link to a directory outside, again and again; when the sweep
 * removed the link, a new one takes its place. */
static void *swap_loop(void *arg)
{
	struct swapper *sw = arg;
	struct stat st;

	while (!sw->stop) {
		if (syscall(SYS_renameat2, AT_FDCWD, sw->a, AT_FDCWD, sw->b, RENAME_EXCHANGE) == 0)
			sw->swaps++;
		else if (errno == ENOENT && symlink(sw->outside, lstat(sw->a, &st) != 0 ? sw->a : sw->b) != 0)
			continue; /* the other side was made meanwhile: swap again */
	}
	return NULL;
}

struct recheck_loop {
	struct workspace *ws;
	char *outside_link;
	int runs, failed;
	struct sb_err err;
};

static void recheck_many(void *arg)
{
	struct recheck_loop *r = arg;
	struct stat st;

	for (int i = 0; i < r->runs; i++) {
		if (workspace_recheck(r->ws, &r->err) != 0)
			r->failed++;
		/* A sweep that followed the link would have removed the link it found outside. */
		if (lstat(r->outside_link, &st) != 0)
			fail_msg("the sweep removed %s, outside the repository", r->outside_link);
	}
}

/* The sweep walks by descriptor: while a command keeps swapping a directory in refs/ with a link to a
 * directory outside (which holds a link of its own), each sweep removes the swapped-in link itself
 * and never lists or removes anything it reached through it: the outside link stays, no log line
 * names it, and no recheck fails. (A walk by path would lstat a directory, then open the link in its
 * place and remove what lies outside.) */
static void test_symlink_check_not_redirected(void **state)
{
	struct fixture *fx = *state;
	char path[PATH_MAX + 64];
	struct swapper sw = { .stop = false };
	struct workspace ws;
	struct recheck_loop r = { .ws = &ws, .outside_link = path, .runs = 150 };
	pthread_t thread;
	const char *log;

	pathf(sw.outside, sizeof sw.outside, "%s/outside", fx->dir);
	assert_int_equal(mkdir(sw.outside, 0755), 0);
	pathf(path, sizeof path, "%s/OUTSIDE-LINK", sw.outside);
	assert_int_equal(symlink("/", path), 0);
	create_ok(fx, "s1", NULL, &ws);
	pathf(sw.a, sizeof sw.a, "%s/refs/heads/d", ws.repo_dir);
	pathf(sw.b, sizeof sw.b, "%s/swap-link", fx->dir);
	assert_int_equal(mkdir(sw.a, 0755), 0);
	assert_int_equal(symlink(sw.outside, sw.b), 0);
	assert_int_equal(pthread_create(&thread, NULL, swap_loop, &sw), 0);
	log = logged_during(recheck_many, &r);
	sw.stop = true;
	assert_int_equal(pthread_join(thread, NULL), 0);
	assert_true(sw.swaps > 0);
	if (r.failed > 0)
		fail_msg("%d of %d rechecks failed, the last: %s", r.failed, r.runs, r.err.msg);
	assert_contains(log, "refs/heads/d -> ");
	assert_null(strstr(log, "OUTSIDE-LINK"));
	workspace_free(&ws);
}

/* A second session's plan names only its own worktree and metadata. */
static void test_mount_plan_other_session_absent(void **state)
{
	struct fixture *fx = *state;
	struct workspace a, b;
	struct mount_plan plan;
	struct sb_err err;

	create_ok(fx, "s1", NULL, &a);
	create_ok(fx, "s2", NULL, &b);
	assert_int_equal(mount_plan_build(&b, &plan, &err), 0);
	for (size_t i = 0; i < plan.n; i++) {
		assert_null(strstr(plan.entries[i].source, "/workspaces/s1"));
		assert_null(strstr(plan.entries[i].source, "/worktrees/s1"));
	}
	mount_plan_free(&plan);
	workspace_free(&a);
	workspace_free(&b);
}

/* A symbolic link where the plan expects a directory would carry a bind mount out of the
 * workspace: the plan refuses. */
static void test_mount_plan_refuses_symlink(void **state)
{
	struct fixture *fx = *state;
	char logs[PATH_MAX + 16], saved[PATH_MAX + 16];
	struct workspace ws;
	struct mount_plan plan;
	struct sb_err err;

	create_ok(fx, "s1", NULL, &ws);
	pathf(logs, sizeof logs, "%s/logs", ws.repo_dir);
	pathf(saved, sizeof saved, "%s/logs.saved", ws.repo_dir);
	assert_int_equal(rename(logs, saved), 0);
	assert_int_equal(symlink("/etc", logs), 0);
	assert_int_equal(mount_plan_build(&ws, &plan, &err), -1);
	assert_non_null(strstr(err.msg, "logs is a symbolic link"));
	assert_null(plan.entries);
	workspace_free(&ws);
}

/* ---------------------------------------------------------------- the volume probe */

static void test_volume_probe(void **state)
{
	struct fixture *fx = *state;
	char missing[PATH_MAX + 16];
	struct sb_err err;

	if (volume_probe("/tmp", &err) != 0)
		fail_msg("%s", err.msg);
	assert_int_equal(volume_probe(fx->volume, &err), 0);
	assert_int_equal(dir_entries(fx->volume), 0); /* the probe cleans up after itself */
	pathf(missing, sizeof missing, "%s/missing", fx->dir);
	assert_int_equal(volume_probe(missing, &err), -1);
	assert_non_null(strstr(err.msg, "refused: cannot create a directory in it"));
}

static int owner_self(void *ctx, const char *identity, struct workspace_owner *out, struct sb_err *err)
{
	(void)ctx;
	(void)identity;
	(void)err;
	out->uid = geteuid();
	out->gid = getegid();
	return 0;
}

/* The check at start refuses a volume other users can list, naming the path and the fix: each
 * directory of the closed layout opened up in turn (and, as root, one given to another group). */
static void test_volume_closed_check(void **state)
{
	struct fixture *fx = *state;
	char path[PATH_MAX + 64], fix[PATH_MAX + 128];
	struct workspace ws;
	struct sb_err err;
	static const struct {
		const char *sub;
		mode_t open, closed;
	} cases[] = {
		{ "", 0755, 0711 },
		{ "/identities", 0755, 0711 },
		{ "/identities/alice", 0751, 0711 },
		{ "/identities/alice/repositories", 0711, 0710 },
		{ "/identities/alice/workspaces", 0750, 0710 },
		{ "/identities/alice/workspaces/s1", 0705, 0700 },
		{ "/identities/alice/private-state", 0710, 0700 },
	};

	assert_int_equal(chmod(fx->volume, 0711), 0);
	create_ok(fx, "s1", NULL, &ws);
	must(volume_closed_check(fx->volume, owner_self, NULL, &err), &err, "the volume as made");
	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		pathf(path, sizeof path, "%s%s", fx->volume, cases[i].sub);
		assert_int_equal(chmod(path, cases[i].open), 0);
		assert_int_equal(volume_closed_check(fx->volume, owner_self, NULL, &err), -1);
		pathf(fix, sizeof fix, "volume refused: %s has mode %04o", path, (unsigned)cases[i].open);
		assert_contains(err.msg, fix);
		pathf(fix, sizeof fix, "fix: chmod %04o %s", (unsigned)cases[i].closed, path);
		assert_contains(err.msg, fix);
		assert_int_equal(chmod(path, cases[i].closed), 0);
	}
	must(volume_closed_check(fx->volume, owner_self, NULL, &err), &err, "the volume closed again");
	if (geteuid() == 0) {
		pathf(path, sizeof path, "%s/identities/alice/workspaces", fx->volume);
		assert_int_equal(chown(path, (uid_t)-1, 65534), 0);
		assert_int_equal(chmod(path, 0710), 0);
		assert_int_equal(volume_closed_check(fx->volume, owner_self, NULL, &err), -1);
		assert_contains(err.msg, "belongs to group 65534, not to the identity's group");
		assert_contains(err.msg, "fix: chgrp ");
	}
	workspace_free(&ws);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_create_layout_and_branch, setup, teardown),
		cmocka_unit_test_setup_teardown(test_second_session_reuses_base, setup, teardown),
		cmocka_unit_test_setup_teardown(test_same_name_other_source, setup, teardown),
		cmocka_unit_test_setup_teardown(test_file_url_and_bare_source, setup, teardown),
		cmocka_unit_test_setup_teardown(test_named_branch_and_existing_branch, setup, teardown),
		cmocka_unit_test_setup_teardown(test_bad_branch_names, setup, teardown),
		cmocka_unit_test_setup_teardown(test_scratch_ignored_and_git_works, setup, teardown),
		cmocka_unit_test_setup_teardown(test_refused_key, setup, teardown),
		cmocka_unit_test_setup_teardown(test_refused_after_clone_leaves_nothing, setup, teardown),
		cmocka_unit_test_setup_teardown(test_bad_names_and_paths, setup, teardown),
		cmocka_unit_test_setup_teardown(test_session_twice_refused, setup, teardown),
		cmocka_unit_test_setup_teardown(test_empty_repository_refused, setup, teardown),
		cmocka_unit_test_setup_teardown(test_recheck, setup, teardown),
		cmocka_unit_test_setup_teardown(test_open_existing, setup, teardown),
		cmocka_unit_test_setup_teardown(test_delete_keeps_branch, setup, teardown),
		cmocka_unit_test_setup_teardown(test_delete_damaged_worktree, setup, teardown),
		cmocka_unit_test_setup_teardown(test_delete_fallback_keeps_link_targets, setup, teardown),
		cmocka_unit_test_setup_teardown(test_delete_guard_outside_workspaces, setup, teardown),
		cmocka_unit_test_setup_teardown(test_delete_writes_confined, setup, teardown),
		cmocka_unit_test_setup_teardown(test_delete_reads_confined, setup, teardown),
		cmocka_unit_test_setup_teardown(test_mount_plan, setup, teardown),
		cmocka_unit_test_setup_teardown(test_mount_plan_other_session_absent, setup, teardown),
		cmocka_unit_test_setup_teardown(test_packed_refs_link, setup, teardown),
		cmocka_unit_test_setup_teardown(test_planted_entries_decide_their_session, setup, teardown),
		cmocka_unit_test_setup_teardown(test_sweep_names_the_planter, setup, teardown),
		cmocka_unit_test_setup_teardown(test_symlink_check_not_redirected, setup, teardown),
		cmocka_unit_test_setup_teardown(test_mount_plan_refuses_symlink, setup, teardown),
		cmocka_unit_test_setup_teardown(test_volume_probe, setup, teardown),
		cmocka_unit_test_setup_teardown(test_volume_closed_check, setup, teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
