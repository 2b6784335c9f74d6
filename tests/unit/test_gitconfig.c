/* Unit tests for manager/workspace/gitconfig.c (the repository refusal check) and manager/workspace/gitrun.c (the git
 * runner it stands on): the environment and protections of every git child, the deadline, the
 * output bound, each refused key, worktree config, symbolic links, alternates and paths too long
 * for the check's buffers. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "gitconfig.h"
#include "gitrun.h"
#include "testutil.h"

struct fixture {
	char dir[PATH_MAX];   /* mkdtemp root */
	char repo[PATH_MAX];  /* a non-bare repository: <dir>/repo */
	char gitdir[PATH_MAX];
};

static void git_ok(const char *const args[])
{
	struct sb_err err;

	if (gitrun_check(args, NULL, NULL, &err) != 0)
		fail_msg("git failed: %s", err.msg);
}

static void write_file(const char *path, const char *text)
{
	FILE *f = fopen(path, "w");

	assert_non_null(f);
	assert_true(fputs(text, f) >= 0);
	assert_int_equal(fclose(f), 0);
}

/* snprintf for the tests' paths and texts: a truncated one fails the test instead of naming
 * another file. */
__attribute__((format(printf, 3, 4))) static void fmt(char *out, size_t len, const char *f, ...)
{
	va_list ap;
	int n;

	va_start(ap, f);
	n = vsnprintf(out, len, f, ap);
	va_end(ap);
	if (n < 0 || (size_t)n >= len)
		fail_msg("test path or text too long: %s", out);
}

static int setup(void **state)
{
	struct fixture *fx = calloc(1, sizeof *fx);

	assert_non_null(fx);
	fmt(fx->dir, sizeof fx->dir, "/tmp/test-gitconfig-XXXXXX");
	assert_non_null(mkdtemp(fx->dir));
	fmt(fx->repo, sizeof fx->repo, "%s/repo", fx->dir);
	fmt(fx->gitdir, sizeof fx->gitdir, "%s/.git", fx->repo);
	git_ok((const char *[]){ "init", "--quiet", fx->repo, NULL });
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

/* `git config --file <repo config> key value`: how a repository gets a bad key. */
static void config_set(const char *file, const char *key, const char *value)
{
	git_ok((const char *[]){ "config", "--file", file, key, value, NULL });
}

/* ---------------------------------------------------------------- gitrun */

static void test_gitrun_env_and_protections(void **state)
{
	struct gitrun_result res;
	struct sb_err err;

	(void)state;
	/* Nothing from the manager's environment may reach git. */
	assert_int_equal(setenv("GIT_DIR", "/nonexistent-inherited", 1), 0);
	assert_int_equal(setenv("GIT_CONFIG_PARAMETERS", "'core.pager'='inherited-pager'", 1), 0);
	assert_int_equal(gitrun((const char *[]){ "config", "--list", NULL }, NULL, &res, &err), 0);
	assert_int_equal(res.exit_code, 0);
	assert_non_null(strstr(res.out, "core.hookspath=/dev/null\n"));
	assert_non_null(strstr(res.out, "core.fsmonitor=false\n"));
	assert_non_null(strstr(res.out, "credential.helper=\n"));
	assert_non_null(strstr(res.out, "safe.barerepository=explicit\n"));
	assert_null(strstr(res.out, "inherited-pager"));
	gitrun_result_free(&res);

	/* The environment a git child (here, an alias git runs for us) actually gets. */
	assert_int_equal(gitrun((const char *[]){ "-c", "alias.showenv=!env", "showenv", NULL }, NULL, &res,
				&err), 0);
	assert_int_equal(res.exit_code, 0);
	/* git puts its own exec dir in front of PATH for the programs it runs. */
	assert_non_null(strstr(res.out, ":" GITRUN_PATH "\n"));
	assert_non_null(strstr(res.out, "HOME=/nonexistent\n"));
	assert_non_null(strstr(res.out, "GIT_CONFIG_NOSYSTEM=1\n"));
	assert_non_null(strstr(res.out, "GIT_CONFIG_GLOBAL=/dev/null\n"));
	assert_non_null(strstr(res.out, "GIT_TERMINAL_PROMPT=0\n"));
	assert_null(strstr(res.out, "nonexistent-inherited"));
	gitrun_result_free(&res);
	unsetenv("GIT_DIR");
	unsetenv("GIT_CONFIG_PARAMETERS");
}

static void test_gitrun_descriptors_closed(void **state)
{
	struct gitrun_result res;
	struct sb_err err;
	FILE *leak = fopen("/dev/null", "r"); /* not close-on-exec: must still not reach git */

	(void)state;
	assert_non_null(leak);
	assert_int_equal(gitrun((const char *[]){ "-c", "alias.fds=!ls /proc/self/fd", "fds", NULL }, NULL,
				&res, &err), 0);
	fclose(leak);
	/* ls sees 0, 1, 2 and its own directory descriptor (3) only. */
	assert_string_equal(res.out, "0\n1\n2\n3\n");
	gitrun_result_free(&res);
}

static void test_gitrun_timeout_kills_the_group(void **state)
{
	struct fixture *fx = *state;
	char pidfile[PATH_MAX], alias[PATH_MAX + 64], text[32], proc[64];
	struct gitrun_opts opts = { .timeout_ms = 300 };
	struct gitrun_result res;
	struct sb_err err;
	time_t start = time(NULL);
	FILE *f;
	int pid;

	fmt(pidfile, sizeof pidfile, "%s/sleeper.pid", fx->dir);
	fmt(alias, sizeof alias, "alias.slow=!echo $$ > %s; exec sleep 30", pidfile);
	assert_int_equal(gitrun((const char *[]){ "-c", alias, "slow", NULL }, &opts, &res, &err), -1);
	assert_true(res.timed_out);
	assert_int_equal(err.errnum, ETIMEDOUT);
	assert_non_null(strstr(err.msg, "did not finish within 300 ms"));
	assert_true(time(NULL) - start < 5);
	gitrun_result_free(&res);
	/* The grandchild (sleep) was in git's process group and died with it. */
	f = fopen(pidfile, "r");
	assert_non_null(f);
	assert_non_null(fgets(text, sizeof text, f));
	fclose(f);
	pid = atoi(text);
	assert_true(pid > 1);
	for (int i = 0; i < 100; i++) {
		char stat[256] = "";

		fmt(proc, sizeof proc, "/proc/%d/stat", pid);
		f = fopen(proc, "r");
		if (f == NULL)
			return;
		if (fgets(stat, sizeof stat, f) == NULL)
			stat[0] = '\0';
		fclose(f);
		if (strstr(stat, ") Z ") != NULL)
			return; /* killed, waiting for its new parent to reap it */
		usleep(10000);
	}
	fail_msg("process %d outlived the git timeout", pid);
}

static void test_gitrun_output_bounded(void **state)
{
	struct gitrun_opts opts = { .output_limit = 8 };
	struct gitrun_result res;
	struct sb_err err;

	(void)state;
	assert_int_equal(gitrun((const char *[]){ "--version", NULL }, &opts, &res, &err), 0);
	assert_int_equal(res.exit_code, 0);
	assert_true(res.out_truncated);
	assert_int_equal(res.out_len, 8);
	assert_string_equal(res.out, "git vers");
	assert_true(res.out_total > 8);
	gitrun_result_free(&res);
}

static void test_gitrun_check_reports_git_error(void **state)
{
	struct sb_err err;

	(void)state;
	assert_int_equal(gitrun_check((const char *[]){ "--git-dir=/nonexistent/x", "rev-parse", "HEAD", NULL },
				      NULL, NULL, &err), -1);
	assert_non_null(strstr(err.msg, "git exited with status 128: fatal: "));
}

/* With write roots, git writes only beneath them, even through a symbolic link a command planted;
 * an empty list makes git read-only. */
static void test_gitrun_write_confinement(void **state)
{
	struct fixture *fx = *state;
	char outside[PATH_MAX], link[PATH_MAX + 64], probe[PATH_MAX + 64];
	struct gitrun_opts repo_only = { .write_roots = (const char *[]){ fx->repo, NULL } };
	struct gitrun_opts read_only = { .write_roots = gitrun_read_only };
	struct sb_err err;

	git_ok((const char *[]){ "-C", fx->repo, "-c", "user.name=t", "-c", "user.email=t@example.com", "commit",
				 "--quiet", "--allow-empty", "-m", "one", NULL });
	/* Inside the root: fine. */
	assert_int_equal(gitrun_check((const char *[]){ "-C", fx->repo, "branch", "inside", NULL }, &repo_only,
				      NULL, &err), 0);
	/* refs/heads/evil -> a directory outside the root: git cannot create the ref there. */
	fmt(outside, sizeof outside, "%s/outside", fx->dir);
	assert_int_equal(mkdir(outside, 0755), 0);
	fmt(link, sizeof link, "%s/refs/heads/evil", fx->gitdir);
	assert_int_equal(symlink(outside, link), 0);
	assert_int_equal(gitrun_check((const char *[]){ "-C", fx->repo, "branch", "evil/x", NULL }, &repo_only,
				      NULL, &err), -1);
	fmt(probe, sizeof probe, "%s/x", outside);
	assert_int_equal(access(probe, F_OK), -1);
	fmt(probe, sizeof probe, "%s/x.lock", outside);
	assert_int_equal(access(probe, F_OK), -1);
	/* Unconfined, the same command writes through the link: the confinement is what stops it. */
	assert_int_equal(gitrun_check((const char *[]){ "-C", fx->repo, "branch", "evil/x", NULL }, NULL, NULL,
				      &err), 0);
	fmt(probe, sizeof probe, "%s/x", outside);
	assert_int_equal(access(probe, F_OK), 0);
	/* Read-only: reading works, writing does not. */
	assert_int_equal(gitrun_check((const char *[]){ "-C", fx->repo, "rev-parse", "HEAD", NULL }, &read_only,
				      NULL, &err), 0);
	assert_int_equal(gitrun_check((const char *[]){ "-C", fx->repo, "branch", "nope", NULL }, &read_only,
				      NULL, &err), -1);
	assert_non_null(strstr(err.msg, "Permission denied"));
}

/* A child that cannot start says why (crun's rule: not just "exit 127"). */
static void test_gitrun_start_failure_reported(void **state)
{
	struct gitrun_opts opts = { .cwd = "/nonexistent-dir" };
	struct gitrun_result res;
	struct sb_err err;

	(void)state;
	assert_int_equal(gitrun((const char *[]){ "--version", NULL }, &opts, &res, &err), -1);
	assert_int_equal(err.errnum, ENOENT);
	assert_non_null(strstr(err.msg, "in /nonexistent-dir: chdir: No such file or directory"));
}

/* ---------------------------------------------------------------- the key list */

struct key_case {
	const char *key;
	const char *value;
	const char *listed; /* how git lists the key when it differs: section and name lower-cased */
};

static const struct key_case refused_keys[] = {
	{ "include.path", "/etc/gitconfig", NULL },
	{ "includeif.gitdir:/x/.path", "/etc/gitconfig", NULL },
	{ "filter.x.smudge", "cat", NULL },
	{ "filter.x.clean", "cat", NULL },
	{ "filter.x.process", "cat", NULL },
	{ "filter.x.required", "true", NULL },
	{ "core.fsmonitor", "/bin/monitor", NULL },
	{ "core.hookspath", "/tmp/hooks", NULL },
	{ "core.sshcommand", "ssh -i key", NULL },
	{ "core.pager", "less", NULL },
	{ "core.editor", "vi", NULL },
	{ "core.askpass", "/bin/askpass", NULL },
	{ "core.gitproxy", "/bin/proxy", NULL },
	{ "core.alternaterefscommand", "/bin/x", NULL },
	{ "core.worktree", "/elsewhere", NULL },
	{ "sequence.editor", "vi", NULL },
	{ "diff.external", "/bin/diff", NULL },
	{ "diff.x.textconv", "cat", NULL },
	{ "diff.x.command", "/bin/diff", NULL },
	{ "merge.x.driver", "cat %A", NULL },
	{ "difftool.x.cmd", "meld", NULL },
	{ "mergetool.x.path", "/bin/meld", NULL },
	{ "interactive.difffilter", "cat", NULL },
	{ "credential.helper", "store", NULL },
	{ "credential.https://example.com.helper", "store", NULL },
	{ "credential.username", "me", NULL },
	{ "uploadpack.packobjectshook", "/bin/x", NULL },
	{ "uploadpack.allowfilter", "true", NULL },
	{ "pager.log", "less", NULL },
	{ "alias.x", "!rm -rf /", NULL },
	{ "gpg.program", "/bin/gpg", NULL },
	{ "gpg.ssh.program", "/bin/ssh-keygen", NULL },
	{ "gpg.ssh.defaultkeycommand", "/bin/x", NULL },
	{ "remote.origin.uploadpack", "/bin/x", NULL },
	{ "remote.origin.receivepack", "/bin/x", NULL },
	{ "remote.origin.vcs", "x", NULL },
	{ "submodule.m.update", "!sh", NULL },
	{ "trailer.x.command", "/bin/x", NULL },
	{ "sendemail.sendmailcmd", "/bin/x", NULL },
	{ "sendemail.smtpserver", "/usr/sbin/sendmail", NULL },
	{ "browser.x.cmd", "/bin/x", NULL },
	{ "man.x.path", "/bin/x", NULL },
	{ "guitool.x.cmd", "/bin/x", NULL },
	{ "lfs.customtransfer.x.path", "/bin/x", NULL },
	/* git lists section and name in lower case, but a caller may not. */
	{ "Core.SshCommand", "ssh", "core.sshcommand" },
	{ "Filter.Big.Smudge", "cat", "filter.Big.smudge" },
};

static const struct key_case allowed_keys[] = {
	{ "user.name", "Someone", NULL },
	{ "core.bare", "true", NULL },
	{ "core.repositoryformatversion", "0", NULL },
	{ "core.fsmonitor", "false", NULL },
	{ "pager.log", "false", NULL },
	{ "pager.branch", NULL, NULL },
	{ "alias.co", "checkout", NULL },
	{ "remote.origin.url", "https://example.com/x.git", NULL },
	{ "remote.origin.fetch", "+refs/heads/*:refs/remotes/origin/*", NULL },
	{ "branch.main.remote", "origin", NULL },
	{ "diff.renames", "true", NULL },
	{ "merge.conflictstyle", "diff3", NULL },
	{ "http.proxy", "http://proxy:3128", NULL },
	{ "protocol.version", "2", NULL },
	{ "submodule.m.update", "checkout", NULL },
	{ "sendemail.smtpserver", "smtp.example.com", NULL },
	{ "gpg.format", "ssh", NULL },
	{ "receive.procreceiverefs", "refs/for", NULL },
	{ "ssh.variant", "ssh", NULL },
	/* Names that merely contain a refused word. */
	{ "corefilter.x", "1", NULL },
	{ "diff.textconv", "x", NULL },
	{ "merge.driver", "x", NULL },
};

static void test_key_classifier(void **state)
{
	(void)state;
	for (size_t i = 0; i < sizeof refused_keys / sizeof refused_keys[0]; i++)
		if (gitconfig_key_refused(refused_keys[i].key, refused_keys[i].value) == NULL)
			fail_msg("key %s = %s was allowed", refused_keys[i].key, refused_keys[i].value);
	for (size_t i = 0; i < sizeof allowed_keys / sizeof allowed_keys[0]; i++)
		if (gitconfig_key_refused(allowed_keys[i].key, allowed_keys[i].value) != NULL)
			fail_msg("key %s = %s was refused", allowed_keys[i].key,
				 allowed_keys[i].value ? allowed_keys[i].value : "(no value)");
}

/* ---------------------------------------------------------------- scans of real repositories */

static void test_clean_repository_passes(void **state)
{
	struct fixture *fx = *state;
	struct sb_err err;

	assert_int_equal(gitconfig_check(fx->gitdir, NULL, NULL, &err), 0);
}

static void test_each_refused_key_in_a_real_config(void **state)
{
	struct fixture *fx = *state;
	char config[PATH_MAX];

	fmt(config, sizeof config, "%s/config", fx->gitdir);
	for (size_t i = 0; i < sizeof refused_keys / sizeof refused_keys[0]; i++) {
		const struct key_case *k = &refused_keys[i];
		char expect[256];
		struct sb_err err;

		/* A fresh config per key, so each refusal is about that key alone. */
		write_file(config, "[core]\n\trepositoryformatversion = 0\n\tbare = false\n");
		config_set(config, k->key, k->value);
		assert_int_equal(gitconfig_check(fx->gitdir, NULL, NULL, &err), -1);
		fmt(expect, sizeof expect, "repository refused: config key %s ", k->listed ? k->listed : k->key);
		if (strstr(err.msg, expect) != err.msg)
			fail_msg("for %s: message was: %s", k->key, err.msg);
		assert_non_null(strstr(err.msg, config));
	}
}

static void test_message_for_people(void **state)
{
	struct fixture *fx = *state;
	char config[PATH_MAX], expect[PATH_MAX + 200];
	struct gitconfig_findings found;
	struct sb_err err;

	fmt(config, sizeof config, "%s/config", fx->gitdir);
	config_set(config, "include.path", "/etc/other");
	fmt(expect, sizeof expect, "repository refused: config key include.path can load other "
		 "configuration; remove it or use a clone without it (in %s)", config);
	assert_int_equal(gitconfig_check(fx->gitdir, NULL, NULL, &err), -1);
	assert_string_equal(err.msg, expect);
	assert_int_equal(err.errnum, 0);

	/* Every offender is found, in file order ([core] comes first), and the message names the
	 * others too. */
	config_set(config, "filter.lfs.smudge", "git-lfs smudge %f");
	config_set(config, "core.pager", "less");
	assert_int_equal(gitconfig_scan(fx->gitdir, NULL, NULL, &found, &err), 0);
	assert_int_equal(found.n, 3);
	assert_string_equal(found.v[0].what, "config key core.pager");
	assert_string_equal(found.v[1].what, "config key include.path");
	assert_string_equal(found.v[2].what, "config key filter.lfs.smudge");
	gitconfig_findings_free(&found);
	assert_int_equal(gitconfig_check(fx->gitdir, NULL, NULL, &err), -1);
	assert_non_null(strstr(err.msg, "; also refused: config key include.path, config key filter.lfs.smudge"));
}

/* The include is read as a key, never followed: the included file's keys do not appear. */
static void test_include_not_followed(void **state)
{
	struct fixture *fx = *state;
	char config[PATH_MAX], other[PATH_MAX];
	struct gitconfig_findings found;
	struct sb_err err;

	fmt(config, sizeof config, "%s/config", fx->gitdir);
	fmt(other, sizeof other, "%s/other.cfg", fx->dir);
	write_file(other, "[core]\n\tpager = less\n");
	config_set(config, "include.path", other);
	assert_int_equal(gitconfig_scan(fx->gitdir, NULL, NULL, &found, &err), 0);
	assert_int_equal(found.n, 1);
	assert_string_equal(found.v[0].what, "config key include.path");
	gitconfig_findings_free(&found);
}

static void test_worktree_config_checked(void **state)
{
	struct fixture *fx = *state;
	char dir[PATH_MAX], file[PATH_MAX + 32];
	struct sb_err err;

	fmt(dir, sizeof dir, "%s/worktrees", fx->gitdir);
	assert_int_equal(mkdir(dir, 0755), 0);
	fmt(dir, sizeof dir, "%s/worktrees/wt1", fx->gitdir);
	assert_int_equal(mkdir(dir, 0755), 0);
	fmt(file, sizeof file, "%s/config.worktree", dir);
	config_set(file, "core.hooksPath", "/tmp/hooks");
	assert_int_equal(gitconfig_check(fx->gitdir, NULL, NULL, &err), -1);
	assert_non_null(strstr(err.msg, "config key core.hookspath"));
	assert_non_null(strstr(err.msg, file));

	/* The main worktree's config.worktree too. */
	assert_int_equal(unlink(file), 0);
	fmt(file, sizeof file, "%s/config.worktree", fx->gitdir);
	config_set(file, "diff.pdf.textconv", "pdftotext");
	assert_int_equal(gitconfig_check(fx->gitdir, NULL, NULL, &err), -1);
	assert_non_null(strstr(err.msg, "config key diff.pdf.textconv"));
}

static void test_symlinked_config_refused(void **state)
{
	struct fixture *fx = *state;
	char config[PATH_MAX], other[PATH_MAX];
	struct sb_err err;

	fmt(config, sizeof config, "%s/config", fx->gitdir);
	fmt(other, sizeof other, "%s/real-config", fx->dir);
	assert_int_equal(rename(config, other), 0);
	assert_int_equal(symlink(other, config), 0);
	assert_int_equal(gitconfig_check(fx->gitdir, NULL, NULL, &err), -1);
	assert_non_null(strstr(err.msg, "repository refused: config file is not a regular file"));
}

static void test_unreadable_config_is_an_error(void **state)
{
	struct fixture *fx = *state;
	char config[PATH_MAX];
	struct sb_err err;

	fmt(config, sizeof config, "%s/config", fx->gitdir);
	write_file(config, "[core\n\tbroken\n");
	assert_int_equal(gitconfig_check(fx->gitdir, NULL, NULL, &err), -1);
	assert_non_null(strstr(err.msg, "reading config file "));
	assert_non_null(strstr(err.msg, "fatal: bad config line"));
}

static void test_alternates(void **state)
{
	struct fixture *fx = *state;
	char alt[PATH_MAX], root[PATH_MAX], inside[PATH_MAX], text[PATH_MAX * 2];
	struct sb_err err;

	/* The "identity's repositories": fx->dir holds both this repo and a sibling object store. */
	fmt(root, sizeof root, "%s", fx->dir);
	fmt(inside, sizeof inside, "%s/shared-objects", fx->dir);
	assert_int_equal(mkdir(inside, 0755), 0);
	fmt(alt, sizeof alt, "%s/objects/info/alternates", fx->gitdir);

	write_file(alt, "");
	assert_int_equal(gitconfig_check(fx->gitdir, root, NULL, &err), 0);

	fmt(text, sizeof text, "# a comment\n%s\n", inside);
	write_file(alt, text);
	assert_int_equal(gitconfig_check(fx->gitdir, root, NULL, &err), 0);
	/* Relative entries are relative to objects/. */
	write_file(alt, "../../../shared-objects\n");
	assert_int_equal(gitconfig_check(fx->gitdir, root, NULL, &err), 0);

	write_file(alt, "/usr\n");
	assert_int_equal(gitconfig_check(fx->gitdir, root, NULL, &err), -1);
	assert_non_null(strstr(err.msg, "repository refused: objects/info/alternates entry /usr reads "
				"objects from outside this identity's repositories"));
	/* Without a root (a source repository), alternates are not judged. */
	assert_int_equal(gitconfig_check(fx->gitdir, NULL, NULL, &err), 0);

	write_file(alt, "/nonexistent/objects\n");
	assert_int_equal(gitconfig_check(fx->gitdir, root, NULL, &err), -1);
	assert_non_null(strstr(err.msg, "names a directory that does not exist"));

	/* A look-alike prefix (<root>-evil) is not inside <root>. */
	fmt(inside, sizeof inside, "%s-evil", fx->dir);
	assert_int_equal(mkdir(inside, 0755), 0);
	fmt(text, sizeof text, "%s\n", inside);
	write_file(alt, text);
	assert_int_equal(gitconfig_check(fx->gitdir, root, NULL, &err), -1);
	assert_non_null(strstr(err.msg, "reads objects from outside"));
	assert_int_equal(rmdir(inside), 0);

	assert_int_equal(unlink(alt), 0);
	assert_int_equal(symlink("/etc/hostname", alt), 0);
	assert_int_equal(gitconfig_check(fx->gitdir, root, NULL, &err), -1);
	assert_non_null(strstr(err.msg, "objects/info/alternates is a symbolic link"));
}

/* A directory under fx->dir whose path is exactly `len` bytes long, made of components of the
 * letter c (one letter per chain, so chains do not meet). */
static void long_dir(const struct fixture *fx, char c, char *path, size_t len)
{
	fmt(path, PATH_MAX, "%s", fx->dir);
	while (strlen(path) < len) {
		size_t n = strlen(path), left = len - n - 1, part = left > 200 ? 200 : left;

		/* Never leave a last component of fewer than 2 bytes. */
		if (left > 200 && left - 200 < 2)
			part = 100;
		path[n] = '/';
		memset(path + n + 1, c, part);
		path[n + 1 + part] = '\0';
		assert_int_equal(mkdir(path, 0755), 0);
	}
	assert_int_equal(strlen(path), len);
}

/* Removes what long_dir made, deepest first: nftw (test_rmtree) cannot name the files below it. */
static void long_dir_remove(const struct fixture *fx, char *path)
{
	while (strlen(path) > strlen(fx->dir)) {
		assert_int_equal(rmdir(path), 0);
		*strrchr(path, '/') = '\0';
	}
}

/* A path cut short to fit its buffer names another file (or none): the check must refuse, not
 * pass a file it never read. */
static void test_long_paths_refused(void **state)
{
	struct fixture *fx = *state;
	char common[PATH_MAX], dir[PATH_MAX], root[PATH_MAX];
	struct sb_err err;
	char *line;
	size_t n;
	int fd, rc;

	/* <common>/objects fits in PATH_MAX, <common>/objects/info/alternates does not: git, working
	 * relative to the repository, reads it; a truncated name would read as "no alternates". */
	long_dir(fx, 'a', common, PATH_MAX - 1 - strlen("/objects/info/alter"));
	assert_int_equal(chdir(common), 0);
	assert_int_equal(mkdir("objects", 0755), 0);
	assert_int_equal(mkdir("objects/info", 0755), 0);
	write_file("objects/info/alternates", "/usr\n");
	assert_int_equal(chdir("/"), 0);
	rc = gitconfig_check(common, fx->dir, NULL, &err);
	/* Removed before judging, so a failure leaves nothing that teardown could not remove. */
	assert_int_equal(chdir(common), 0);
	assert_int_equal(unlink("objects/info/alternates"), 0);
	assert_int_equal(rmdir("objects/info"), 0);
	assert_int_equal(rmdir("objects"), 0);
	assert_int_equal(chdir("/"), 0);
	long_dir_remove(fx, common);
	assert_int_equal(rc, -1);
	assert_int_equal(err.errnum, ENAMETOOLONG);
	assert_non_null(strstr(err.msg, "repository refused: its objects/info/alternates cannot be checked"));

	/* The same for config.worktree: <common>/config and <common>/worktrees fit, it does not,
	 * and a truncated name would skip the refused key in it. */
	long_dir(fx, 'c', dir, PATH_MAX - 1 - strlen("/config.wor"));
	assert_int_equal(chdir(dir), 0);
	write_file("config.worktree", "[core]\n\tfsmonitor = /tmp/run-me\n");
	assert_int_equal(chdir("/"), 0);
	rc = gitconfig_check(dir, NULL, NULL, &err);
	assert_int_equal(chdir(dir), 0);
	assert_int_equal(unlink("config.worktree"), 0);
	assert_int_equal(chdir("/"), 0);
	long_dir_remove(fx, dir);
	assert_int_equal(rc, -1);
	assert_int_equal(err.errnum, ENAMETOOLONG);
	assert_non_null(strstr(err.msg, "repository refused: its config.worktree cannot be checked"));

	/* An entry longer than the check's buffer: its first 8191 bytes resolve inside the root
	 * ("<repo>/objects/./././..."), all of it resolves to /usr. */
	fmt(root, sizeof root, "%s", fx->dir);
	fmt(dir, sizeof dir, "%s/objects/info/alternates", fx->gitdir);
	line = malloc(3 * PATH_MAX);
	assert_non_null(line);
	n = (size_t)snprintf(line, 3 * PATH_MAX, "%s/objects", fx->gitdir);
	while (n < 2 * PATH_MAX + 8)
		n += (size_t)snprintf(line + n, 3 * PATH_MAX - n, "/.");
	n += (size_t)snprintf(line + n, 3 * PATH_MAX - n, "%s", "/../../../../../../../../../../../usr\n");
	fd = open(dir, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	assert_true(fd >= 0);
	assert_int_equal(write(fd, line, n), (ssize_t)n);
	assert_int_equal(close(fd), 0);
	free(line);
	assert_int_equal(gitconfig_check(fx->gitdir, root, NULL, &err), -1);
	assert_int_equal(err.errnum, ENAMETOOLONG);
	assert_non_null(strstr(err.msg, "repository refused: an objects/info/alternates entry of"));
}

static void test_gitconfig_get(void **state)
{
	struct fixture *fx = *state;
	char config[PATH_MAX];
	struct sb_err err;
	char *value;

	fmt(config, sizeof config, "%s/config", fx->gitdir);
	config_set(config, "remote.origin.url", "/some/where");
	assert_int_equal(gitconfig_get(config, "remote.origin.url", &value, &err), 0);
	assert_string_equal(value, "/some/where");
	free(value);
	assert_int_equal(gitconfig_get(config, "remote.nothing.url", &value, &err), 1);
	assert_null(value);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_gitrun_env_and_protections),
		cmocka_unit_test(test_gitrun_descriptors_closed),
		cmocka_unit_test_setup_teardown(test_gitrun_timeout_kills_the_group, setup, teardown),
		cmocka_unit_test(test_gitrun_output_bounded),
		cmocka_unit_test_setup_teardown(test_gitrun_write_confinement, setup, teardown),
		cmocka_unit_test(test_gitrun_start_failure_reported),
		cmocka_unit_test(test_gitrun_check_reports_git_error),
		cmocka_unit_test(test_key_classifier),
		cmocka_unit_test_setup_teardown(test_clean_repository_passes, setup, teardown),
		cmocka_unit_test_setup_teardown(test_each_refused_key_in_a_real_config, setup, teardown),
		cmocka_unit_test_setup_teardown(test_message_for_people, setup, teardown),
		cmocka_unit_test_setup_teardown(test_include_not_followed, setup, teardown),
		cmocka_unit_test_setup_teardown(test_worktree_config_checked, setup, teardown),
		cmocka_unit_test_setup_teardown(test_symlinked_config_refused, setup, teardown),
		cmocka_unit_test_setup_teardown(test_unreadable_config_is_an_error, setup, teardown),
		cmocka_unit_test_setup_teardown(test_alternates, setup, teardown),
		cmocka_unit_test_setup_teardown(test_long_paths_refused, setup, teardown),
		cmocka_unit_test_setup_teardown(test_gitconfig_get, setup, teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
