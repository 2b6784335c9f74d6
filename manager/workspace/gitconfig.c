/* The repository refusal check (see gitconfig.h). Owns the list of refused config keys and the
 * alternates rule. Reads config only through `git config --list -z` (git's own parser, includes
 * off) run by gitrun; must never follow an include or run anything the repository names. A path
 * too long for its buffer is an error, never a shorter path: a truncated name reads as "no such
 * file", and the check would pass a file it never read. */
#include "gitconfig.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#include "gitrun.h"
#include "pathfmt.h"

#define FIX "; remove it or use a clone without it"
#define ALTERNATES_MAX (64 * 1024)

enum rule_sub { SUB_NONE, SUB_EITHER, SUB_REQUIRED };   /* is a subsection part of the key? */
enum rule_when { WHEN_ALWAYS, WHEN_NOT_BOOL, WHEN_BANG, WHEN_ABSOLUTE };

struct rule {
	const char *section;   /* compared without case */
	enum rule_sub sub;
	const char *name;      /* the last part of the key; NULL matches any */
	enum rule_when when;   /* which values are refused */
	const char *why;
};

#define LOADS_CONFIG "can load other configuration"
#define RUNS(what) "can run a program (" what ")"

/* Keys that make git run a program or read more configuration. Trusted manager commands add
 * their own protections (gitrun.h), but a repository shared with every sandbox of the identity
 * must not carry these at all: some other trusted tool, or a later git, may honour them.
 * Judged and left out: receive.* (only matters when something pushes into the base clone, and its
 * hooks are off), ssh.variant (only changes ssh's arguments; ssh itself is not an allowed
 * transport), http.* and protocol.* (no programs; GIT_ALLOW_PROTOCOL outranks protocol.*.allow),
 * url.*.insteadOf (rewrites URLs only to allowed transports), core.attributesFile (reads a file;
 * attributes alone cannot name a program without one of the keys below). */
static const struct rule rules[] = {
	{ "include", SUB_EITHER, NULL, WHEN_ALWAYS, LOADS_CONFIG },
	{ "includeif", SUB_EITHER, NULL, WHEN_ALWAYS, LOADS_CONFIG },
	{ "filter", SUB_EITHER, NULL, WHEN_ALWAYS, RUNS("a content filter on checkout and add") },
	{ "core", SUB_NONE, "fsmonitor", WHEN_NOT_BOOL, RUNS("a file-system monitor on status") },
	{ "core", SUB_NONE, "hookspath", WHEN_ALWAYS, RUNS("hooks from a directory it chooses") },
	{ "core", SUB_NONE, "sshcommand", WHEN_ALWAYS, RUNS("an ssh command") },
	{ "core", SUB_NONE, "gitproxy", WHEN_ALWAYS, RUNS("a proxy command") },
	{ "core", SUB_NONE, "pager", WHEN_ALWAYS, RUNS("a pager") },
	{ "core", SUB_NONE, "editor", WHEN_ALWAYS, RUNS("an editor") },
	{ "core", SUB_NONE, "askpass", WHEN_ALWAYS, RUNS("a password prompt") },
	{ "core", SUB_NONE, "alternaterefscommand", WHEN_ALWAYS, RUNS("an alternate-refs command") },
	{ "core", SUB_NONE, "worktree", WHEN_ALWAYS, "points git's working tree at another directory" },
	{ "sequence", SUB_NONE, "editor", WHEN_ALWAYS, RUNS("a sequence editor") },
	{ "diff", SUB_NONE, "external", WHEN_ALWAYS, RUNS("an external diff") },
	{ "diff", SUB_REQUIRED, "textconv", WHEN_ALWAYS, RUNS("a text conversion on diff") },
	{ "diff", SUB_REQUIRED, "command", WHEN_ALWAYS, RUNS("a diff driver") },
	{ "merge", SUB_REQUIRED, "driver", WHEN_ALWAYS, RUNS("a merge driver") },
	{ "difftool", SUB_REQUIRED, "cmd", WHEN_ALWAYS, RUNS("a diff tool") },
	{ "difftool", SUB_REQUIRED, "path", WHEN_ALWAYS, RUNS("a diff tool") },
	{ "mergetool", SUB_REQUIRED, "cmd", WHEN_ALWAYS, RUNS("a merge tool") },
	{ "mergetool", SUB_REQUIRED, "path", WHEN_ALWAYS, RUNS("a merge tool") },
	{ "interactive", SUB_NONE, "difffilter", WHEN_ALWAYS, RUNS("a diff filter") },
	{ "credential", SUB_EITHER, NULL, WHEN_ALWAYS, RUNS("a credential helper") " or hold credentials" },
	{ "uploadpack", SUB_EITHER, NULL, WHEN_ALWAYS, "configures upload-pack, which " RUNS("a hook") },
	{ "pager", SUB_EITHER, NULL, WHEN_NOT_BOOL, RUNS("a pager") },
	{ "alias", SUB_EITHER, NULL, WHEN_BANG, RUNS("a shell command") },
	{ "gpg", SUB_NONE, "program", WHEN_ALWAYS, RUNS("a signing program") },
	{ "gpg", SUB_REQUIRED, "program", WHEN_ALWAYS, RUNS("a signing program") },
	{ "gpg", SUB_REQUIRED, "defaultkeycommand", WHEN_ALWAYS, RUNS("a key command") },
	{ "remote", SUB_REQUIRED, "uploadpack", WHEN_ALWAYS, RUNS("upload-pack for local fetches") },
	{ "remote", SUB_REQUIRED, "receivepack", WHEN_ALWAYS, RUNS("receive-pack for local pushes") },
	{ "remote", SUB_REQUIRED, "vcs", WHEN_ALWAYS, RUNS("a remote helper") },
	{ "submodule", SUB_REQUIRED, "update", WHEN_BANG, RUNS("a shell command on submodule update") },
	{ "trailer", SUB_REQUIRED, "command", WHEN_ALWAYS, RUNS("a trailer command") },
	{ "trailer", SUB_REQUIRED, "cmd", WHEN_ALWAYS, RUNS("a trailer command") },
	{ "sendemail", SUB_EITHER, "tocmd", WHEN_ALWAYS, RUNS("a recipients command") },
	{ "sendemail", SUB_EITHER, "cccmd", WHEN_ALWAYS, RUNS("a recipients command") },
	{ "sendemail", SUB_EITHER, "sendmailcmd", WHEN_ALWAYS, RUNS("a mail program") },
	{ "sendemail", SUB_EITHER, "smtpserver", WHEN_ABSOLUTE, RUNS("a mail program") },
	{ "browser", SUB_REQUIRED, "cmd", WHEN_ALWAYS, RUNS("a browser") },
	{ "browser", SUB_REQUIRED, "path", WHEN_ALWAYS, RUNS("a browser") },
	{ "man", SUB_REQUIRED, "cmd", WHEN_ALWAYS, RUNS("a manual viewer") },
	{ "man", SUB_REQUIRED, "path", WHEN_ALWAYS, RUNS("a manual viewer") },
	{ "guitool", SUB_REQUIRED, "cmd", WHEN_ALWAYS, RUNS("a gui tool") },
	{ "instaweb", SUB_NONE, "httpd", WHEN_ALWAYS, RUNS("a web server") },
	{ "lfs", SUB_REQUIRED, "path", WHEN_ALWAYS, RUNS("a git-lfs transfer agent") },
	{ "lfs", SUB_REQUIRED, "clean", WHEN_ALWAYS, RUNS("a git-lfs extension") },
	{ "lfs", SUB_REQUIRED, "smudge", WHEN_ALWAYS, RUNS("a git-lfs extension") },
};

/* git's boolean spellings; a key written without "= value" (value NULL) means true. */
static bool value_is_bool(const char *value)
{
	static const char *const words[] = { "true", "false", "yes", "no", "on", "off", "1", "0", "", NULL };

	if (value == NULL)
		return true;
	for (size_t i = 0; words[i] != NULL; i++)
		if (strcasecmp(value, words[i]) == 0)
			return true;
	return false;
}

static bool rule_value_matches(const struct rule *r, const char *value)
{
	switch (r->when) {
	case WHEN_NOT_BOOL:
		return !value_is_bool(value);
	case WHEN_BANG:
		return value != NULL && value[0] == '!';
	case WHEN_ABSOLUTE:
		return value != NULL && value[0] == '/';
	case WHEN_ALWAYS:
		break;
	}
	return true;
}

static bool rule_key_matches(const struct rule *r, const char *key)
{
	const char *first = strchr(key, '.');
	const char *last = strrchr(key, '.');
	bool has_sub;

	if (first == NULL)
		return false;
	if (strlen(r->section) != (size_t)(first - key) || strncasecmp(key, r->section, (size_t)(first - key)) != 0)
		return false;
	has_sub = last != first;
	if ((r->sub == SUB_NONE && has_sub) || (r->sub == SUB_REQUIRED && !has_sub))
		return false;
	return r->name == NULL || strcasecmp(last + 1, r->name) == 0;
}

const char *gitconfig_key_refused(const char *key, const char *value)
{
	for (size_t i = 0; i < sizeof rules / sizeof rules[0]; i++)
		if (rule_key_matches(&rules[i], key) && rule_value_matches(&rules[i], value))
			return rules[i].why;
	return NULL;
}

/* Record one finding; takes copies. Returns 0, or -1 when memory ran out. */
static int finding_add(struct gitconfig_findings *found, const char *what, const char *file,
		       const char *why, struct sb_err *err)
{
	struct gitconfig_finding *v = realloc(found->v, (found->n + 1) * sizeof *v);

	if (v == NULL)
		return sb_fail(err, ENOMEM, "recording a refused key");
	found->v = v;
	v[found->n].what = strdup(what);
	v[found->n].file = strdup(file);
	v[found->n].why = why;
	if (v[found->n].what == NULL || v[found->n].file == NULL) {
		free(v[found->n].what);
		free(v[found->n].file);
		return sb_fail(err, ENOMEM, "recording a refused key");
	}
	found->n++;
	return 0;
}

/* Walk `git config --list -z` output: entries end with NUL; "key\nvalue", or "key" alone. */
static int entries_scan(char *list, size_t len, const char *file, struct gitconfig_findings *found,
			struct sb_err *err)
{
	char *p = list, *end = list + len;

	while (p < end) {
		size_t n = strnlen(p, (size_t)(end - p));
		char *nl = memchr(p, '\n', n);
		const char *value = NULL, *why;
		char what[512];

		if (nl != NULL) {
			*nl = '\0';
			value = nl + 1;
		}
		why = gitconfig_key_refused(p, value);
		if (why != NULL) {
			/* Only the message's name of the key is cut short; the check saw all of it. */
			snprintf(what, sizeof what, "config key %.400s", p);
			if (finding_add(found, what, file, why, err) != 0)
				return -1;
		}
		p += n + 1;
	}
	return 0;
}

/* A config file that git would read must be a plain file: a link could be swapped later. */
static int config_file_kind(const char *path, struct gitconfig_findings *found, bool *present,
			    struct sb_err *err)
{
	struct stat st;

	*present = false;
	if (lstat(path, &st) != 0) {
		if (errno == ENOENT)
			return 0;
		return sb_fail_errno(err, "inspecting %s", path);
	}
	if (!S_ISREG(st.st_mode))
		return finding_add(found, "config file", path,
				   "is not a regular file (a symbolic link could point anywhere); "
				   "replace it with a plain file", err);
	*present = true;
	return 0;
}

static int config_file_scan(const char *path, struct gitconfig_findings *found, struct sb_err *err)
{
	const char *args[] = { "config", "--file", path, "--no-includes", "--list", "-z", NULL };
	/* Reads confined to the file itself: config.worktree lies in the sandbox-writable
	 * worktrees/<name>/, and a link swapped in after the check must not make root's git list a
	 * root-only file in git-config syntax (gitrun.h read_roots). */
	const char *const reads[] = { path, NULL };
	struct gitrun_opts opts = { .write_roots = gitrun_read_only, .read_roots = reads };
	struct gitrun_result res;
	bool present;
	int rc;

	if (config_file_kind(path, found, &present, err) != 0)
		return -1;
	if (!present)
		return 0;
	rc = gitrun_check(args, &opts, &res, err);
	if (rc == 0 && res.out_truncated)
		rc = sb_fail(err, EFBIG, "more than %u bytes of settings", GITRUN_OUTPUT_LIMIT);
	if (rc == 0)
		rc = entries_scan(res.out, res.out_len, path, found, err);
	else
		sb_err_prefix(err, "reading config file %s", path);
	gitrun_result_free(&res);
	return rc;
}

/* config.worktree of one linked worktree (read by git when extensions.worktreeConfig is on;
 * checked whether or not it is on, since a sandbox could turn it on later only by changing the
 * read-only config). Only that worktree's git reads it, and only its own session's sandbox can
 * write it: it decides that session alone. */
static int worktree_scan(const char *common_dir, const char *worktree, struct gitconfig_findings *found,
			 struct sb_err *err)
{
	char file[PATH_MAX];

	if (worktree[0] == '\0')
		return 0;
	if (strchr(worktree, '/') != NULL || strcmp(worktree, "..") == 0 || strcmp(worktree, ".") == 0)
		return sb_fail(err, EINVAL, "worktree name %.64s is not one name", worktree);
	if (path_fmt(file, sizeof file, err, "%s/worktrees/%s/config.worktree", common_dir, worktree) < 0)
		return -1;
	return config_file_scan(file, found, err);
}

/* config.worktree of every linked worktree: for a source repository, which no session owns. */
static int worktrees_scan(const char *common_dir, struct gitconfig_findings *found, struct sb_err *err)
{
	char *dirpath = NULL;
	struct dirent *de;
	DIR *d;
	int rc = 0;

	if (asprintf(&dirpath, "%s/worktrees", common_dir) < 0)
		return sb_fail(err, ENOMEM, "listing worktrees");
	d = opendir(dirpath);
	if (d == NULL) {
		rc = errno == ENOENT ? 0 : sb_fail_errno(err, "listing %s", dirpath);
		free(dirpath);
		return rc;
	}
	while (rc == 0 && (errno = 0, de = readdir(d)) != NULL) {
		char *file = NULL;

		if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
			continue;
		if (asprintf(&file, "%s/%s/config.worktree", dirpath, de->d_name) < 0)
			rc = sb_fail(err, ENOMEM, "listing worktrees");
		else
			rc = config_file_scan(file, found, err);
		free(file);
	}
	if (rc == 0 && errno != 0)
		rc = sb_fail_errno(err, "listing %s", dirpath);
	closedir(d);
	free(dirpath);
	return rc;
}

/* Is path (resolved) inside root (resolved)? */
static bool path_inside(const char *path, const char *root)
{
	size_t n = strlen(root);

	return strncmp(path, root, n) == 0 && path[n] == '/';
}

/* PATH of the repository at COMMON_DIR (objects, config, ...) into OUT; ENAMETOOLONG, never a
 * truncated path. */
static int repo_path(char *out, size_t len, const char *common_dir, const char *name, struct sb_err *err)
{
	if (path_fmt(out, len, err, "%s/%s", common_dir, name) == 0)
		return 0;
	sb_err_prefix(err, "repository refused: its %s cannot be checked, the path is longer than %zu bytes; "
		      "use a shorter path for the repository", name, len - 1);
	return -1;
}

/* One alternates line: a directory of objects, absolute or relative to objects/. */
static int alternate_check(const char *line, const char *objects_dir, const char *root,
			   const char *file, struct gitconfig_findings *found, struct sb_err *err)
{
	char joined[PATH_MAX * 2], resolved[PATH_MAX], what[PATH_MAX + 64];
	bool absolute = line[0] == '/';

	/* Only the message's copy of the line is cut short. */
	snprintf(what, sizeof what, "objects/info/alternates entry %.4000s", line);
	if (line[0] == '"')
		return finding_add(found, what, file, "is quoted, which is not supported here; "
				   "repack without alternates (git repack -a -d) and delete the file", err);
	/* A cut-short entry could resolve inside the root while git, reading all of it, leaves it. */
	if (path_fmt(joined, sizeof joined, err, "%s%s%s", absolute ? "" : objects_dir, absolute ? "" : "/",
		     line) < 0)
		return sb_fail(err, ENAMETOOLONG, "repository refused: an objects/info/alternates entry of %zu "
			       "bytes is longer than this check resolves (%zu) (in %s); repack without alternates "
			       "(git repack -a -d) and delete the file", strlen(line), sizeof joined - 1, file);
	if (realpath(joined, resolved) == NULL)
		return finding_add(found, what, file, "names a directory that does not exist; "
				   "repack without alternates (git repack -a -d) and delete the file", err);
	if (!path_inside(resolved, root))
		return finding_add(found, what, file, "reads objects from outside this identity's "
				   "repositories, which no session owns; repack without alternates "
				   "(git repack -a -d) and delete the file", err);
	return 0;
}

static int alternates_read(const char *path, char **text, struct sb_err *err)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
	size_t len = 0;
	ssize_t n;

	*text = NULL;
	if (fd < 0)
		return errno == ENOENT ? 0 : sb_fail_errno(err, "opening %s", path);
	*text = malloc(ALTERNATES_MAX + 1);
	if (*text == NULL) {
		close(fd);
		return sb_fail(err, ENOMEM, "reading %s", path);
	}
	while (len < ALTERNATES_MAX && (n = read(fd, *text + len, ALTERNATES_MAX - len)) != 0) {
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0) {
			close(fd);
			return sb_fail_errno(err, "reading %s", path);
		}
		len += (size_t)n;
	}
	close(fd);
	(*text)[len] = '\0';
	return 0;
}

static int alternates_scan(const char *common_dir, const char *root, struct gitconfig_findings *found,
			   struct sb_err *err)
{
	char objects[PATH_MAX], file[PATH_MAX], root_real[PATH_MAX];
	char *text, *save = NULL;
	int rc;

	if (repo_path(objects, sizeof objects, common_dir, "objects", err) < 0 ||
	    repo_path(file, sizeof file, common_dir, "objects/info/alternates", err) < 0)
		return -1;
	if (realpath(root, root_real) == NULL)
		return sb_fail_errno(err, "resolving %s", root);
	if (alternates_read(file, &text, err) != 0) {
		/* O_NOFOLLOW refuses a symbolic link: say so rather than fail the scan. */
		if (err->errnum != ELOOP)
			return -1;
		return finding_add(found, "objects/info/alternates", file, "is a symbolic link; "
				   "replace it with a plain file", err);
	}
	rc = 0;
	for (char *line = text ? strtok_r(text, "\n", &save) : NULL; rc == 0 && line != NULL;
	     line = strtok_r(NULL, "\n", &save)) {
		line[strcspn(line, "\r")] = '\0';
		if (line[0] == '\0' || line[0] == '#')
			continue;
		rc = alternate_check(line, objects, root_real, file, found, err);
	}
	free(text);
	return rc;
}

int gitconfig_scan(const char *common_dir, const char *alternates_root, const char *worktree,
		   struct gitconfig_findings *found, struct sb_err *err)
{
	static const char *const top[] = { "config", "config.worktree", NULL };
	char path[PATH_MAX];

	found->v = NULL;
	found->n = 0;
	for (size_t i = 0; top[i] != NULL; i++) {
		if (repo_path(path, sizeof path, common_dir, top[i], err) < 0 ||
		    config_file_scan(path, found, err) != 0)
			return -1;
	}
	if (worktree == NULL ? worktrees_scan(common_dir, found, err) != 0 :
			       worktree_scan(common_dir, worktree, found, err) != 0)
		return -1;
	if (alternates_root != NULL && alternates_scan(common_dir, alternates_root, found, err) != 0)
		return -1;
	return 0;
}

/* "repository refused: <what> <why> (in <file>)", then the other findings' names. */
static int refusal_message(const struct gitconfig_findings *found, struct sb_err *err)
{
	const struct gitconfig_finding *f = &found->v[0];
	bool is_key = strncmp(f->what, "config key ", 11) == 0;
	size_t used;

	sb_fail(err, 0, "repository refused: %s %s%s (in %s)", f->what, f->why, is_key ? FIX : "", f->file);
	used = strlen(err->msg);
	for (size_t i = 1; i < found->n && used < sizeof err->msg - 1; i++) {
		int n = snprintf(err->msg + used, sizeof err->msg - used, "%s%s",
				 i == 1 ? "; also refused: " : ", ", found->v[i].what);

		used = n < 0 ? sizeof err->msg - 1 : used + (size_t)n;
	}
	return -1;
}

int gitconfig_check(const char *common_dir, const char *alternates_root, const char *worktree,
		    struct sb_err *err)
{
	struct gitconfig_findings found;
	int rc = gitconfig_scan(common_dir, alternates_root, worktree, &found, err);

	if (rc == 0 && found.n > 0)
		rc = refusal_message(&found, err);
	gitconfig_findings_free(&found);
	return rc;
}

void gitconfig_findings_free(struct gitconfig_findings *found)
{
	for (size_t i = 0; i < found->n; i++) {
		free(found->v[i].what);
		free(found->v[i].file);
	}
	free(found->v);
	found->v = NULL;
	found->n = 0;
}

int gitconfig_get(const char *file, const char *key, char **value, struct sb_err *err)
{
	const char *args[] = { "config", "--file", file, "--no-includes", "--get", key, NULL };
	const char *const reads[] = { file, NULL }; /* as in config_file_scan() */
	struct gitrun_opts opts = { .write_roots = gitrun_read_only, .read_roots = reads };
	struct gitrun_result res;
	int rc;

	*value = NULL;
	if (gitrun(args, &opts, &res, err) != 0) {
		gitrun_result_free(&res);
		return -1;
	}
	if (res.exit_code == 1) {
		rc = 1;
	} else if (res.exit_code != 0) {
		rc = sb_fail(err, 0, "reading %s from %s: %s", key, file, res.errout);
	} else {
		res.out[strcspn(res.out, "\n")] = '\0';
		*value = res.out;
		res.out = NULL;
		rc = 0;
	}
	gitrun_result_free(&res);
	return rc;
}
