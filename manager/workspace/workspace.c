/* Workspaces (see workspace.h): names, the identity's directories, base clones, session worktrees,
 * scratch, deletion, the mount plan and the volume probe. Every git command goes through gitrun.
 * Must never put private-state/ or provider-auth/ (or anything outside this session's worktree and
 * its repository) into a mount plan, and never leave half of a workspace behind on failure.
 *
 * Base clone: BARE. The repository directory is itself the common git dir, so no branch is held
 * checked out by a main worktree (any branch can be a session's), no second copy of the files sits
 * on the volume, and the mount plan has one directory to protect. Cloned with --no-local: git's
 * local-clone shortcut hard-links or copies the source's object files (and follows its
 * alternates); a hard link would let a sandbox that can write objects/ change the source's files.
 *
 * Trusted git and the sandboxes share the base clone: sandboxes of the identity can write its
 * objects/, refs/, logs/ and packed-refs.d/. So every git command here runs with gitrun's Landlock
 * write confinement (only the repository and the worktree at hand), and creates and rechecks
 * refuse symbolic links planted there.
 *
 * Locking: every create and delete of one identity holds an exclusive flock() on
 * private-state/workspace.lock, so two sessions on a new repository cannot both clone it, and a
 * failed create can remove the base clone it made without pulling it from under someone else. */
#include "workspace.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/openat2.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "fdio.h"
#include "pathfmt.h"
#include "fstree.h"
#include "gitconfig.h"
#include "gitrun.h"
#include "log.h"

static void cleanup_freep(void *p)
{
	free(*(void **)p);
}

static void cleanup_closep(int *fd)
{
	if (*fd >= 0)
		close(*fd);
}

#define cleanup_free __attribute__((cleanup(cleanup_freep)))
#define cleanup_close __attribute__((cleanup(cleanup_closep)))

/* Hand a pointer on and clear the old owner, so cleanup_free does not free it. */
static void *steal_pointer(void *pp)
{
	void **p = pp;
	void *v = *p;

	*p = NULL;
	return v;
}

/* ---------------------------------------------------------------- small helpers */

/* *out = formatted string. Returns 0, or -1 (ENOMEM) with err filled. */
static int path_alloc_fmt(char **out, struct sb_err *err, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int path_alloc_fmt(char **out, struct sb_err *err, const char *fmt, ...)
{
	va_list ap;
	int n;

	va_start(ap, fmt);
	n = vasprintf(out, fmt, ap);
	va_end(ap);
	if (n < 0) {
		*out = NULL;
		return sb_fail(err, ENOMEM, "building a path");
	}
	return 0;
}

/* A copy of untrusted text that is safe to put in a message: non-printable bytes become '?'. */
static void printable(char *out, size_t size, const char *in)
{
	size_t i;

	for (i = 0; i + 1 < size && in[i] != '\0'; i++)
		out[i] = in[i] >= 0x20 && in[i] < 0x7f ? in[i] : '?';
	out[i] = '\0';
}

/* Read a small file without following a final symlink; trailing newlines removed.
 * Returns 0, or -1 with errno in err (ENOENT when it does not exist, EFBIG when it is too big). */
static int file_read_small(const char *path, char *buf, size_t size, struct sb_err *err)
{
	cleanup_close int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
	size_t len = 0;
	ssize_t n;

	if (fd < 0)
		return sb_fail_errno(err, "reading %s", path);
	while (len + 1 < size && (n = read(fd, buf + len, size - 1 - len)) != 0) {
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return sb_fail_errno(err, "reading %s", path);
		len += (size_t)n;
	}
	if (len + 1 >= size)
		return sb_fail(err, EFBIG, "reading %s: more than %zu bytes", path, size - 1);
	while (len > 0 && (buf[len - 1] == '\n' || buf[len - 1] == '\r'))
		len--;
	buf[len] = '\0';
	return 0;
}

/* Create a directory, or accept an existing real directory (never a symlink to one).
 * mode is enforced on directories this call creates; private ones (0700) are also corrected. */
static int dir_ensure(const char *path, mode_t mode, struct sb_err *err)
{
	struct stat st;

	if (mkdir(path, mode) == 0)
		return chmod(path, mode) == 0 ? 0 : sb_fail_errno(err, "setting the mode of %s", path);
	if (errno != EEXIST)
		return sb_fail_errno(err, "creating %s", path);
	if (lstat(path, &st) != 0)
		return sb_fail_errno(err, "inspecting %s", path);
	if (!S_ISDIR(st.st_mode))
		return sb_fail(err, ENOTDIR, "%s exists and is not a directory (a symbolic link is refused)", path);
	if (mode == 0700 && (st.st_mode & 077) != 0 && chmod(path, 0700) != 0)
		return sb_fail_errno(err, "making %s private (0700)", path);
	return 0;
}

/* rm -rf of a directory this module made, which a sandbox may have written (a worktree) or
 * planted links in: fstree's removal, by descriptor, never following a link nor crossing a mount.
 * The paths given are trusted: a base clone or partial clone in repositories/, a worktree in
 * workspaces/, neither of which (nor any ancestor) is writable by a sandbox. Returns 0 (also when
 * it is already gone), or -1 with err. */
static int tree_remove(const char *path, struct sb_err *err)
{
	return fstree_remove_path(path, err);
}

static bool path_exists(const char *path)
{
	struct stat st;

	return lstat(path, &st) == 0;
}

/* Is path equal to root or below it? Both are canonical. */
static bool path_within(const char *path, const char *root)
{
	size_t n = strlen(root);

	return strncmp(path, root, n) == 0 && (path[n] == '\0' || path[n] == '/');
}

/* Hard-link from to the new name to (which must not exist yet). */
static int link_file(const char *from, const char *to, struct sb_err *err)
{
	if (link(from, to) != 0)
		return sb_fail_errno(err, "linking %s to %s", from, to);
	return 0;
}

/* ---------------------------------------------------------------- names */

int workspace_name_check(const char *kind, const char *name, struct sb_err *err)
{
	size_t len = name ? strlen(name) : 0;
	char shown[WORKSPACE_NAME_MAX + 8];

	if (len == 0)
		return sb_fail(err, EINVAL, "%s name is empty; use 1 to %d characters from A-Z a-z 0-9 . _ -",
			       kind, WORKSPACE_NAME_MAX);
	printable(shown, sizeof shown, name);
	if (len > WORKSPACE_NAME_MAX)
		return sb_fail(err, EINVAL, "%s name %s... is longer than %d characters", kind, shown,
			       WORKSPACE_NAME_MAX);
	if (name[0] == '.' || name[0] == '-')
		return sb_fail(err, EINVAL, "%s name %s starts with '%c'; start it with a letter, a digit or '_'",
			       kind, shown, name[0]);
	for (size_t i = 0; i < len; i++) {
		char c = name[i];

		if (!((c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') ||
		      c == '.' || c == '_' || c == '-'))
			return sb_fail(err, EINVAL, "%s name %s has a character outside A-Z a-z 0-9 . _ - "
				       "at position %zu", kind, shown, i + 1);
	}
	return 0;
}

/* A branch name git accepts for a new branch. git check-ref-format --branch is the judge; the two
 * rules before it keep it a pure syntax check (no "@{-1}" expansion, no option-like names). */
static int branch_check(const char *branch, struct sb_err *err)
{
	const char *args[] = { "check-ref-format", "--branch", branch, NULL };
	/* A syntax check: no repository, so git may read nothing but the system's files. */
	struct gitrun_opts opts = { .write_roots = gitrun_read_only, .read_roots = gitrun_read_only };
	size_t len = strlen(branch);
	char shown[WORKSPACE_BRANCH_MAX + 8];
	struct gitrun_result res;
	bool ok;

	printable(shown, sizeof shown, branch);
	if (len == 0 || len > WORKSPACE_BRANCH_MAX)
		return sb_fail(err, EINVAL, "branch name must have 1 to %d characters", WORKSPACE_BRANCH_MAX);
	if (branch[0] == '-' || strstr(branch, "@{") != NULL)
		return sb_fail(err, EINVAL, "branch name %s is not a valid git branch name", shown);
	if (gitrun(args, &opts, &res, err) != 0) {
		gitrun_result_free(&res);
		return -1;
	}
	res.out[strcspn(res.out, "\n")] = '\0';
	ok = res.exit_code == 0 && strcmp(res.out, branch) == 0;
	gitrun_result_free(&res);
	if (!ok)
		return sb_fail(err, EINVAL, "branch name %s is not a valid git branch name "
			       "(git check-ref-format --branch refused it)", shown);
	return 0;
}

/* A name for repositories/<name> from the last part of a path or URL: ".git" and a "/.git"
 * directory are dropped, bytes outside [A-Za-z0-9._-] become '_', no leading '.' or '-'. The base
 * is kept short enough for a "-<16 hex>" suffix (see base_choose). */
static char *repo_name_from(const char *path)
{
	char buf[PATH_MAX];
	size_t len;
	char *slash, *start, *name;

	snprintf(buf, sizeof buf, "%s", path);
	len = strlen(buf);
	while (len > 1 && buf[len - 1] == '/')
		buf[--len] = '\0';
	if (len >= 5 && strcmp(buf + len - 5, "/.git") == 0)
		buf[len -= 5] = '\0';
	if (len >= 4 && strcmp(buf + len - 4, ".git") == 0)
		buf[len -= 4] = '\0';
	slash = strrchr(buf, '/');
	start = slash ? slash + 1 : buf;
	for (char *p = start; *p != '\0'; p++)
		if (!((*p >= 'A' && *p <= 'Z') || (*p >= 'a' && *p <= 'z') || (*p >= '0' && *p <= '9') ||
		      *p == '.' || *p == '_' || *p == '-'))
			*p = '_';
	while (*start == '.' || *start == '-')
		start++;
	start[strnlen(start, WORKSPACE_NAME_MAX - 17)] = '\0';
	name = strdup(*start ? start : "repo");
	return name;
}

/* ---------------------------------------------------------------- the source repository */

struct source {
	char *clone_arg;   /* canonical path or URL, passed to git clone and kept as remote.origin.url */
	char *common_dir;  /* local sources: the common git dir, checked before cloning; NULL for https */
	char *name;        /* proposed name under repositories/ */
};

static void source_free(struct source *src)
{
	free(src->clone_arg);
	free(src->common_dir);
	free(src->name);
}

/* An https URL the manager accepts: printable ASCII, a host, no credentials, no query. */
static int url_check(const char *url, struct sb_err *err)
{
	const char *host = url + strlen("https://");
	size_t host_len = strcspn(host, "/");
	char shown[256];

	printable(shown, sizeof shown, url);
	if (strlen(url) > 2048)
		return sb_fail(err, EINVAL, "repository URL is longer than 2048 characters");
	for (const char *p = url; *p != '\0'; p++)
		if (*p <= 0x20 || *p >= 0x7f || *p == '\\')
			return sb_fail(err, EINVAL, "repository URL %s has a space, a control character, a "
				       "backslash or a non-ASCII byte; percent-encode it", shown);
	if (host_len == 0)
		return sb_fail(err, EINVAL, "repository URL %s has no host", shown);
	if (memchr(host, '@', host_len) != NULL)
		return sb_fail(err, EINVAL, "repository URL %s carries credentials; remove them: they would "
			       "be stored in the repository's config, which every sandbox of the identity reads",
			       shown);
	if (strpbrk(url, "?#") != NULL)
		return sb_fail(err, EINVAL, "repository URL %s has a query or fragment; give the plain "
			       "repository URL", shown);
	return 0;
}

/* The git dir named by a ".git" file or a "commondir" file: "gitdir: X" or a bare path X,
 * relative to base when not absolute. */
static int pointer_resolve(const char *file, const char *prefix, const char *base, char **out,
			   struct sb_err *err)
{
	char text[PATH_MAX], joined[PATH_MAX * 2], real[PATH_MAX];
	const char *p = text;

	if (file_read_small(file, text, sizeof text, err) != 0)
		return -1;
	if (prefix != NULL) {
		if (strncmp(text, prefix, strlen(prefix)) != 0)
			return sb_fail(err, EINVAL, "%s does not start with \"%s\"", file, prefix);
		p += strlen(prefix);
	}
	snprintf(joined, sizeof joined, "%s%s%s", p[0] == '/' ? "" : base, p[0] == '/' ? "" : "/", p);
	if (realpath(joined, real) == NULL)
		return sb_fail_errno(err, "%s points to %s", file, joined);
	*out = strdup(real);
	return *out ? 0 : sb_fail(err, ENOMEM, "resolving %s", file);
}

/* The common git dir of a local repository: <path>/.git (a directory or a "gitdir:" file, the
 * latter for a linked worktree or submodule), or <path> itself when it is bare; then its
 * "commondir" pointer when it has one. Found by hand from these two pointer files only, so that
 * nothing in the source is run or parsed as configuration before the refusal check. */
static int source_common_dir(const char *path, char **common, struct sb_err *err)
{
	cleanup_free char *dotgit = NULL, *gitdir = NULL, *cdfile = NULL, *head = NULL, *objects = NULL;
	struct stat st, st_objects;

	if (path_alloc_fmt(&dotgit, err, "%s/.git", path) != 0 || path_alloc_fmt(&head, err, "%s/HEAD", path) != 0 ||
	    path_alloc_fmt(&objects, err, "%s/objects", path) != 0)
		return -1;
	if (lstat(dotgit, &st) == 0 && S_ISDIR(st.st_mode)) {
		gitdir = steal_pointer(&dotgit);
	} else if (lstat(dotgit, &st) == 0 && S_ISREG(st.st_mode)) {
		if (pointer_resolve(dotgit, "gitdir: ", path, &gitdir, err) != 0)
			return -1;
	} else if (lstat(head, &st) == 0 && S_ISREG(st.st_mode) && lstat(objects, &st_objects) == 0 &&
		   S_ISDIR(st_objects.st_mode)) {
		gitdir = strdup(path);
		if (gitdir == NULL)
			return sb_fail(err, ENOMEM, "resolving %s", path);
	} else {
		return sb_fail(err, ENOENT, "%s is not a git repository (no .git, and not a bare repository)",
			       path);
	}
	if (path_alloc_fmt(&cdfile, err, "%s/commondir", gitdir) != 0)
		return -1;
	if (!path_exists(cdfile)) {
		*common = steal_pointer(&gitdir);
		return 0;
	}
	return pointer_resolve(cdfile, NULL, gitdir, common, err);
}

static int source_local(const char *path, struct source *src, struct sb_err *err)
{
	char real[PATH_MAX], shown[256];
	struct stat st;

	printable(shown, sizeof shown, path);
	if (realpath(path, real) == NULL) {
		if (errno == ENOENT || errno == ENOTDIR)
			return sb_fail(err, ENOENT, "repository path %s does not exist", shown);
		return sb_fail_errno(err, "repository path %s cannot be resolved", shown);
	}
	if (stat(real, &st) != 0)
		return sb_fail_errno(err, "repository path %s", shown);
	if (!S_ISDIR(st.st_mode))
		return sb_fail(err, ENOTDIR, "repository path %s is not a directory", shown);
	if (source_common_dir(real, &src->common_dir, err) != 0)
		return -1;
	src->clone_arg = strdup(real);
	src->name = repo_name_from(real);
	if (src->clone_arg == NULL || src->name == NULL)
		return sb_fail(err, ENOMEM, "resolving %s", shown);
	return 0;
}

/* What the caller gave: an absolute path, file:///path or https://... Anything else is refused
 * with the reason (ssh, git://, ext:: and "host:path" would hand the transport to a program). */
static int source_resolve(const char *repo, struct source *src, struct sb_err *err)
{
	char shown[256];

	memset(src, 0, sizeof *src);
	if (repo == NULL || repo[0] == '\0')
		return sb_fail(err, EINVAL, "no repository given; give an absolute path, file:///path or an "
			       "https:// URL");
	printable(shown, sizeof shown, repo);
	if (strncmp(repo, "https://", 8) == 0) {
		if (url_check(repo, err) != 0)
			return -1;
		src->clone_arg = strdup(repo);
		src->name = repo_name_from(repo + 8 + strcspn(repo + 8, "/"));
		return src->clone_arg && src->name ? 0 : sb_fail(err, ENOMEM, "resolving %s", shown);
	}
	if (strncmp(repo, "file://", 7) == 0) {
		if (repo[7] != '/')
			return sb_fail(err, EINVAL, "repository URL %s must name an absolute path: file:///path",
				       shown);
		if (strchr(repo, '%') != NULL)
			return sb_fail(err, EINVAL, "repository URL %s is percent-encoded; give the plain path",
				       shown);
		return source_local(repo + 7, src, err);
	}
	if (repo[0] == '/')
		return source_local(repo, src, err);
	if (strstr(repo, "://") != NULL || strstr(repo, "::") != NULL || strchr(repo, ':') != NULL)
		return sb_fail(err, EINVAL, "repository %s uses an unsupported transport; only absolute "
			       "paths, file:///path and https:// URLs are accepted", shown);
	return sb_fail(err, EINVAL, "repository path %s is relative; give an absolute path", shown);
}

/* ---------------------------------------------------------------- the identity's directories */

struct layout {
	char *identity_dir, *repositories, *workspaces, *private_state, *provider_auth;
};

static void layout_free(struct layout *l)
{
	free(l->identity_dir);
	free(l->repositories);
	free(l->workspaces);
	free(l->private_state);
	free(l->provider_auth);
}

static int layout_paths(const char *volume, const char *identity, struct layout *l, struct sb_err *err)
{
	memset(l, 0, sizeof *l);
	if (path_alloc_fmt(&l->identity_dir, err, "%s/identities/%s", volume, identity) != 0 ||
	    path_alloc_fmt(&l->repositories, err, "%s/repositories", l->identity_dir) != 0 ||
	    path_alloc_fmt(&l->workspaces, err, "%s/workspaces", l->identity_dir) != 0 ||
	    path_alloc_fmt(&l->private_state, err, "%s/private-state", l->identity_dir) != 0 ||
	    path_alloc_fmt(&l->provider_auth, err, "%s/provider-auth", l->identity_dir) != 0) {
		layout_free(l);
		return -1;
	}
	return 0;
}

/* The identity's directories. The identity directory is 0711, search only: nothing in it can be
 * listed, but a sandbox's init running as an unprivileged uid (under a root manager) must walk
 * to the worktree to bind it. private-state/ and provider-auth/ stay 0700. */
static int layout_create(const char *volume, const struct layout *l, struct sb_err *err)
{
	cleanup_free char *identities = NULL;

	if (path_alloc_fmt(&identities, err, "%s/identities", volume) != 0)
		return -1;
	if (dir_ensure(identities, 0755, err) != 0 || dir_ensure(l->identity_dir, 0711, err) != 0 ||
	    dir_ensure(l->repositories, 0755, err) != 0 || dir_ensure(l->workspaces, 0755, err) != 0 ||
	    dir_ensure(l->private_state, 0700, err) != 0 || dir_ensure(l->provider_auth, 0700, err) != 0)
		return -1;
	return 0;
}

/* Exclusive lock for one identity's creates and deletes. Returns the descriptor, or -1. */
static int identity_lock(const struct layout *l, struct sb_err *err)
{
	cleanup_free char *path = NULL;
	int fd;

	if (path_alloc_fmt(&path, err, "%s/workspace.lock", l->private_state) != 0)
		return -1;
	fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
	if (fd < 0)
		return sb_fail_errno(err, "opening %s", path);
	while (flock(fd, LOCK_EX) != 0) {
		if (errno != EINTR) {
			sb_fail_errno(err, "locking %s", path);
			close(fd);
			return -1;
		}
	}
	return fd;
}

static int volume_resolve(const char *volume, char **out, struct sb_err *err)
{
	char real[PATH_MAX], shown[256];
	struct stat st;

	printable(shown, sizeof shown, volume ? volume : "");
	if (volume == NULL || volume[0] != '/')
		return sb_fail(err, EINVAL, "volume path %s is not absolute", shown);
	if (realpath(volume, real) == NULL)
		return sb_fail_errno(err, "volume %s", shown);
	if (stat(real, &st) != 0 || !S_ISDIR(st.st_mode))
		return sb_fail(err, ENOTDIR, "volume %s is not a directory", shown);
	*out = strdup(real);
	return *out ? 0 : sb_fail(err, ENOMEM, "resolving the volume");
}

/* ---------------------------------------------------------------- git on the base clone */

/* Run git on the base clone, named explicitly (no discovery). extra is NULL-terminated. git may
 * write only beneath roots (gitrun_read_only for none) and read only beneath them and the base
 * clone (plus the system's files, gitrun.h): sandboxes of the identity can plant symbolic links in
 * the base clone's writable parts, and root's git must neither write nor read through one to a
 * file outside. With res NULL, a non-zero exit fails. */
static int git_base(const struct workspace *ws, const char *const extra[], const char *const roots[],
		    struct gitrun_result *res, struct sb_err *err)
{
	const char *args[32];
	const char *const reads[] = { ws->repo_dir, NULL };
	struct gitrun_opts opts = { .write_roots = roots, .read_roots = reads };
	size_t n = 0;
	char *gitdir_opt = NULL;
	int rc;

	if (path_alloc_fmt(&gitdir_opt, err, "--git-dir=%s", ws->repo_dir) != 0)
		return -1;
	args[n++] = gitdir_opt;
	for (size_t i = 0; extra[i] != NULL && n + 1 < sizeof args / sizeof args[0]; i++)
		args[n++] = extra[i];
	args[n] = NULL;
	rc = res ? gitrun(args, &opts, res, err) : gitrun_check(args, &opts, NULL, err);
	free(gitdir_opt);
	return rc;
}

/* 1 when refs/heads/<branch> exists, 0 when not, -1 on error. */
static int branch_exists(const struct workspace *ws, struct sb_err *err)
{
	cleanup_free char *ref = NULL;
	struct gitrun_result res;
	int rc;

	if (path_alloc_fmt(&ref, err, "refs/heads/%s", ws->branch) != 0)
		return -1;
	rc = git_base(ws, (const char *[]){ "rev-parse", "--verify", "--quiet", ref, NULL }, gitrun_read_only,
		      &res, err);
	if (rc == 0)
		rc = res.exit_code == 0 ? 1 : 0;
	gitrun_result_free(&res);
	return rc;
}

static int head_has_commit(const struct workspace *ws, struct sb_err *err)
{
	struct gitrun_result res;
	int rc = git_base(ws, (const char *[]){ "rev-parse", "--verify", "--quiet", "HEAD^{commit}", NULL },
			  gitrun_read_only, &res, err);

	if (rc == 0 && res.exit_code != 0)
		rc = sb_fail(err, 0, "repository %s has no commit on its default branch; commit something "
			     "first or name an existing --branch", ws->source);
	gitrun_result_free(&res);
	return rc;
}

/* ---------------------------------------------------------------- the base clone */

/* Clone into a hidden partial directory and rename it into place only when complete, so a
 * crash never leaves a half clone that a later session would take for a base clone. git reads
 * only the source (a local one: its directory and common git dir; an https one: nothing but the
 * system's files): a local source may be a tree some sandbox writes, so a link planted in it must
 * not make root's git read a file outside. */
static int base_clone(struct workspace *ws, const struct layout *l, const struct source *src, struct sb_err *err)
{
	cleanup_free char *partial = NULL;
	const char *const local[] = { ws->source, src->common_dir, NULL };
	struct gitrun_opts opts = { .timeout_ms = GITRUN_CLONE_TIMEOUT_MS,
				    .read_roots = src->common_dir ? local : gitrun_read_only };
	struct sb_err rm_err;

	if (path_alloc_fmt(&partial, err, "%s/.%s.partial", l->repositories, ws->repo_name) != 0)
		return -1;
	if (tree_remove(partial, err) != 0) {
		sb_err_prefix(err, "removing the leftover partial clone");
		return -1;
	}
	/* git clones into the empty directory we made, and may write nowhere else. */
	if (mkdir(partial, 0755) != 0)
		return sb_fail_errno(err, "creating %s", partial);
	opts.write_roots = (const char *[]){ partial, NULL };
	if (gitrun_check((const char *[]){ "clone", "--bare", "--no-local", "--quiet", "--", ws->source,
					   partial, NULL }, &opts, NULL, err) != 0) {
		sb_err_prefix(err, "cloning %s", ws->source);
		if (tree_remove(partial, &rm_err) != 0)
			sb_warn("could not remove the partial clone: %s", rm_err.msg);
		return -1;
	}
	if (rename(partial, ws->repo_dir) != 0) {
		sb_fail_errno(err, "moving the clone of %s into place at %s", ws->source, ws->repo_dir);
		if (tree_remove(partial, &rm_err) != 0)
			sb_warn("could not remove the partial clone: %s", rm_err.msg);
		return -1;
	}
	ws->base_created = true;
	return 0;
}

/* 1 when dir is a base clone of source, 0 when it is a clone of something else, -1 on error. */
static int base_matches(const char *dir, const char *source, struct sb_err *err)
{
	cleanup_free char *config = NULL, *url = NULL;
	struct stat st;
	int rc;

	if (lstat(dir, &st) != 0 || !S_ISDIR(st.st_mode))
		return sb_fail(err, ENOTDIR, "%s exists and is not a directory", dir);
	if (path_alloc_fmt(&config, err, "%s/config", dir) != 0)
		return -1;
	rc = gitconfig_get(config, "remote.origin.url", &url, err);
	if (rc < 0)
		return -1;
	return rc == 0 && strcmp(url, source) == 0 ? 1 : 0;
}

/* FNV-1a: a stable, short tag that tells apart two sources with the same last path part. */
static uint64_t name_hash(const char *s)
{
	uint64_t h = 0xcbf29ce484222325ull;

	for (; *s != '\0'; s++)
		h = (h ^ (uint8_t)*s) * 0x100000001b3ull;
	return h;
}

/* Pick repositories/<name>: the plain name, or name-<hash> when the plain name is a clone of
 * another source. Sets ws->repo_name and ws->repo_dir; *exists tells whether to reuse. */
static int base_choose(struct workspace *ws, const struct layout *l, const char *name, bool *exists,
		       struct sb_err *err)
{
	char candidates[2][WORKSPACE_NAME_MAX + 1];

	snprintf(candidates[0], sizeof candidates[0], "%s", name);
	snprintf(candidates[1], sizeof candidates[1], "%s-%016llx", name,
		 (unsigned long long)name_hash(ws->source));
	for (int i = 0; i < 2; i++) {
		cleanup_free char *dir = NULL;
		int rc;

		if (path_alloc_fmt(&dir, err, "%s/%s", l->repositories, candidates[i]) != 0)
			return -1;
		*exists = path_exists(dir);
		rc = *exists ? base_matches(dir, ws->source, err) : 1;
		if (rc < 0)
			return -1;
		if (rc == 1) {
			ws->repo_name = strdup(candidates[i]);
			ws->repo_dir = steal_pointer(&dir);
			return ws->repo_name ? 0 : sb_fail(err, ENOMEM, "naming the repository");
		}
	}
	return sb_fail(err, EEXIST, "repository names %s and %s are both taken by clones of other sources",
		       candidates[0], candidates[1]);
}

#define PACKED_DIR "packed-refs.d"
#define PACKED_TARGET PACKED_DIR "/packed-refs"

/* Put packed-refs behind a symbolic link: <repo>/packed-refs -> packed-refs.d/packed-refs.
 * git rewrites packed-refs (and takes packed-refs.lock for EVERY ref deletion, even of a loose
 * ref) by a lock file and a rename in the directory of the file it resolves to; git follows this
 * link and keeps it (upstream test t3210 "pack symlinked packed-refs"). So the rewrite happens in
 * packed-refs.d/, which the mount plan makes writable, while the common dir stays read-only.
 * Idempotent; the swap is atomic (hard link, then a new symlink renamed over the file). */
static int packed_refs_prepare(const struct workspace *ws, struct sb_err *err)
{
	cleanup_free char *link = NULL, *dir = NULL, *file = NULL, *tmp = NULL;
	char target[PATH_MAX];
	struct stat st;
	ssize_t n;

	if (path_alloc_fmt(&link, err, "%s/packed-refs", ws->repo_dir) != 0 ||
	    path_alloc_fmt(&dir, err, "%s/" PACKED_DIR, ws->repo_dir) != 0 ||
	    path_alloc_fmt(&file, err, "%s/" PACKED_TARGET, ws->repo_dir) != 0 ||
	    path_alloc_fmt(&tmp, err, "%s/packed-refs.link-new", ws->repo_dir) != 0)
		return -1;
	if (dir_ensure(dir, 0755, err) != 0)
		return -1;
	if (lstat(link, &st) == 0 && S_ISLNK(st.st_mode)) {
		n = readlink(link, target, sizeof target - 1);
		if (n < 0)
			return sb_fail_errno(err, "reading the link %s", link);
		target[n] = '\0';
		if (strcmp(target, PACKED_TARGET) != 0)
			return sb_fail(err, EINVAL, "%s links to %s instead of " PACKED_TARGET, link, target);
		return 0;
	}
	if (lstat(link, &st) == 0 && !S_ISREG(st.st_mode))
		return sb_fail(err, EINVAL, "%s is neither a file nor the expected link", link);
	if (lstat(link, &st) == 0 && link_file(link, file, err) != 0)
		return -1;
	if (lstat(link, &st) != 0 && errno != ENOENT)
		return sb_fail_errno(err, "inspecting %s", link);
	if ((unlink(tmp) != 0 && errno != ENOENT) || symlink(PACKED_TARGET, tmp) != 0 || rename(tmp, link) != 0)
		return sb_fail_errno(err, "linking %s to " PACKED_TARGET, link);
	return 0;
}

/* Directories the mount plan binds must exist before any sandbox: git creates logs/ lazily (a
 * bare clone has none) and would fail under the read-only common dir. The empty alternates file
 * is a placeholder the plan can bind read-only, so a command cannot create one in writable objects/. */
static int base_prepare(const struct workspace *ws, struct sb_err *err)
{
	cleanup_free char *logs = NULL, *info = NULL, *alternates = NULL, *objinfo = NULL;
	cleanup_close int fd = -1;
	struct stat st;

	if (path_alloc_fmt(&logs, err, "%s/logs", ws->repo_dir) != 0 ||
	    path_alloc_fmt(&info, err, "%s/info", ws->repo_dir) != 0 ||
	    path_alloc_fmt(&objinfo, err, "%s/objects/info", ws->repo_dir) != 0 ||
	    path_alloc_fmt(&alternates, err, "%s/alternates", objinfo) != 0)
		return -1;
	if (dir_ensure(logs, 0755, err) != 0 || dir_ensure(info, 0755, err) != 0 ||
	    dir_ensure(objinfo, 0755, err) != 0 || packed_refs_prepare(ws, err) != 0)
		return -1;
	/* objects/ is writable by the identity's sandboxes: one could swap objects/info for a link
	 * between the check above and this create, which O_NOFOLLOW (last component only) would not
	 * stop. openat2 refuses a link anywhere on the path. */
	fd = (int)syscall(SYS_openat2, AT_FDCWD, alternates,
			  &(struct open_how){ .flags = O_WRONLY | O_CREAT | O_CLOEXEC | O_NOFOLLOW, .mode = 0644,
					      .resolve = RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS },
			  sizeof(struct open_how));
	if (fd < 0)
		return sb_fail_errno(err, "creating %s (a symbolic link on the way is refused)", alternates);
	if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode))
		return sb_fail(err, EINVAL, "%s is not a regular file", alternates);
	return 0;
}

/* Add the scratch pattern to the repository's info/exclude once (the file is shared by every
 * worktree of the repository, and read-only inside sandboxes). */
static int exclude_ensure(const struct workspace *ws, struct sb_err *err)
{
	static const char line[] = "# infra-sandbox: the per-session scratch folder (TMPDIR)\n"
				   WORKSPACE_SCRATCH_PATTERN "\n";
	cleanup_free char *path = NULL;
	cleanup_close int fd = -1;
	char text[64 * 1024];
	bool nonempty;
	size_t len;

	if (path_alloc_fmt(&path, err, "%s/info/exclude", ws->repo_dir) != 0)
		return -1;
	if (file_read_small(path, text, sizeof text, err) != 0) {
		if (err->errnum != ENOENT)
			return -1;
		text[0] = '\0';
	}
	nonempty = text[0] != '\0';
	for (char *cur = text, *next; cur != NULL; cur = next) {
		next = strchr(cur, '\n');
		if (next != NULL)
			*next++ = '\0';
		if (strcmp(cur, WORKSPACE_SCRATCH_PATTERN) == 0)
			return 0;
	}
	fd = open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0644);
	if (fd < 0)
		return sb_fail_errno(err, "opening %s", path);
	len = strlen(line);
	/* file_read_small dropped the trailing newline, so a non-empty file gets one first. */
	if ((nonempty && write(fd, "\n", 1) != 1) || write(fd, line, len) != (ssize_t)len)
		return sb_fail_errno(err, "writing %s", path);
	return 0;
}

/* ---------------------------------------------------------------- the worktree */

/* Find the worktree's metadata directory from its ".git" file, and check it is one of this
 * repository's: <repo_dir>/worktrees/<name>. */
static int worktree_locate(struct workspace *ws, struct sb_err *err)
{
	cleanup_free char *dotgit = NULL, *gitdir = NULL, *prefix = NULL;
	const char *name;

	if (path_alloc_fmt(&dotgit, err, "%s/.git", ws->worktree) != 0 ||
	    path_alloc_fmt(&prefix, err, "%s/worktrees/", ws->repo_dir) != 0)
		return -1;
	if (pointer_resolve(dotgit, "gitdir: ", ws->worktree, &gitdir, err) != 0)
		return -1;
	name = gitdir + strlen(prefix);
	if (strncmp(gitdir, prefix, strlen(prefix)) != 0 || *name == '\0' || strchr(name, '/') != NULL)
		return sb_fail(err, EINVAL, "%s points to %s, not into %s", dotgit, gitdir, prefix);
	ws->worktree_name = strdup(name);
	ws->worktree_git_dir = steal_pointer(&gitdir);
	return ws->worktree_name ? 0 : sb_fail(err, ENOMEM, "locating the worktree");
}

/* What root's git may write, per kind of run: never the whole common dir. git's lockfile code
 * follows a symbolic link at the file it locks, and packed-refs is one into packed-refs.d/, which
 * every sandbox of the identity writes: a link planted there (packed-refs.d/packed-refs ->
 * ../config) would carry the rewrite of packed-refs onto config, HEAD or another worktree's gitdir,
 * all read-only to sandboxes. So a run that writes refs may write refs/, logs/ and packed-refs.d/
 * only, and a run on worktrees worktrees/ (and the worktree's own directory) only: the lock of a
 * redirected write then falls outside and Landlock refuses it. */
struct git_roots {
	char refs[PATH_MAX], logs[PATH_MAX], packed[PATH_MAX], worktrees[PATH_MAX];
	const char *v[6];
};

static int roots_refs(const struct workspace *ws, struct git_roots *r, struct sb_err *err)
{
	if (path_fmt(r->refs, sizeof r->refs, err, "%s/refs", ws->repo_dir) < 0 ||
	    path_fmt(r->logs, sizeof r->logs, err, "%s/logs", ws->repo_dir) < 0 ||
	    path_fmt(r->packed, sizeof r->packed, err, "%s/packed-refs.d", ws->repo_dir) < 0)
		return -1;
	r->v[0] = r->refs;
	r->v[1] = r->logs;
	r->v[2] = r->packed;
	r->v[3] = NULL;
	return 0;
}

/* worktrees/ (made here: the common dir is the manager's, never a sandbox's), `also` (or NULL)
 * and, with_refs, the refs roots: checking a branch out updates the worktree's HEAD, which locks the
 * branch's ref. A ref update takes no packed-refs lock (only a deletion does), so a planted
 * packed-refs link is never followed by such a run. */
static int roots_worktrees(const struct workspace *ws, const char *also, bool with_refs, struct git_roots *r,
			   struct sb_err *err)
{
	size_t n = 0;

	if (with_refs && roots_refs(ws, r, err) != 0)
		return -1;
	n = with_refs ? 3 : 0;
	if (path_fmt(r->worktrees, sizeof r->worktrees, err, "%s/worktrees", ws->repo_dir) < 0)
		return -1;
	if (mkdir(r->worktrees, 0755) != 0 && errno != EEXIST)
		return sb_fail_errno(err, "creating %s", r->worktrees);
	r->v[n++] = r->worktrees;
	if (also != NULL)
		r->v[n++] = also;
	r->v[n] = NULL;
	return 0;
}

/* git worktree add: checks out an existing branch, or first creates the branch at the base's HEAD
 * (a run of its own: it writes refs, the checkout writes worktrees/). Hooks are off (gitrun), so
 * no post-checkout hook runs; filters cannot run because the refusal check passed on this base
 * clone just before. */
static int worktree_add(struct workspace *ws, bool *made_dir, bool *branch_created, struct sb_err *err)
{
	struct git_roots refs, trees;
	int exists = branch_exists(ws, err);

	if (exists < 0)
		return -1;
	if (!exists && head_has_commit(ws, err) != 0)
		return -1;
	if (roots_refs(ws, &refs, err) != 0 || roots_worktrees(ws, ws->worktree, true, &trees, err) != 0)
		return -1;
	if (!exists && git_base(ws, (const char *[]){ "branch", "--quiet", "--", ws->branch, "HEAD", NULL }, refs.v,
				NULL, err) != 0)
		return -1;
	*branch_created = !exists;
	/* git accepts an empty directory; making it here keeps git's writes inside it. */
	if (mkdir(ws->worktree, 0755) != 0)
		return sb_fail_errno(err, "creating %s", ws->worktree);
	*made_dir = true;
	return git_base(ws, (const char *[]){ "worktree", "add", "--quiet", "--", ws->worktree, ws->branch, NULL },
			trees.v, NULL, err);
}

/* Remove a worktree: git first (it also drops the metadata); when git cannot (a damaged
 * worktree), remove the directory ourselves and let prune drop the metadata. --force twice also
 * removes a worktree a command locked. */
static int worktree_remove(const struct workspace *ws, struct sb_err *err)
{
	cleanup_free char *parent = strdup(ws->worktree);
	struct git_roots remove, prune;
	struct sb_err git_err;

	if (parent == NULL)
		return sb_fail(err, ENOMEM, "removing %s", ws->worktree);
	/* Removing the worktree directory is a write to workspaces/, its parent. */
	*strrchr(parent, '/') = '\0';
	if (roots_worktrees(ws, parent, false, &remove, err) != 0 || roots_worktrees(ws, NULL, false, &prune, err) != 0)
		return -1;
	if (git_base(ws, (const char *[]){ "worktree", "remove", "--force", "--force", "--", ws->worktree,
					   NULL }, remove.v, NULL, &git_err) != 0) {
		sb_warn("git worktree remove %s failed (%s); removing the directory", ws->worktree, git_err.msg);
		if (tree_remove(ws->worktree, err) != 0)
			return -1;
	}
	if (git_base(ws, (const char *[]){ "worktree", "prune", NULL }, prune.v, NULL, err) != 0) {
		sb_err_prefix(err, "pruning worktree metadata");
		return -1;
	}
	if (path_exists(ws->worktree))
		return sb_fail(err, EEXIST, "%s still exists after removal", ws->worktree);
	if (ws->worktree_git_dir != NULL && path_exists(ws->worktree_git_dir))
		return sb_fail(err, EEXIST, "worktree metadata %s remains after pruning", ws->worktree_git_dir);
	return 0;
}

/* The branch's config section (if any) stays: config is not among a refs run's roots, and git
 * only warns about it. */
static int branch_delete(const struct workspace *ws, struct sb_err *err)
{
	struct git_roots refs;

	if (roots_refs(ws, &refs, err) != 0)
		return -1;
	if (git_base(ws, (const char *[]){ "branch", "--quiet", "-D", "--", ws->branch, NULL }, refs.v, NULL,
		     err) != 0) {
		sb_err_prefix(err, "deleting branch %s", ws->branch);
		return -1;
	}
	return 0;
}

static int scratch_ensure(const struct workspace *ws, struct sb_err *err)
{
	struct stat st;

	if (mkdir(ws->scratch, 0700) == 0)
		return 0;
	if (errno != EEXIST)
		return sb_fail_errno(err, "creating the scratch folder %s", ws->scratch);
	if (lstat(ws->scratch, &st) != 0)
		return sb_fail_errno(err, "inspecting %s", ws->scratch);
	if (!S_ISDIR(st.st_mode))
		return sb_fail(err, ENOTDIR, "scratch folder %s is not a directory; remove it so it can be "
			       "recreated", ws->scratch);
	return 0;
}

/* ---------------------------------------------------------------- create */

/* What this create made, so a failure can take exactly that back. */
struct made {
	bool worktree, branch;
};

static void create_undo(struct workspace *ws, const struct made *made)
{
	struct sb_err err;

	if (made->worktree && worktree_remove(ws, &err) != 0)
		sb_warn("undoing workspace %s: %s", ws->session, err.msg);
	/* A failed `worktree add -b` may or may not have made the branch: ask git. */
	if (made->branch && branch_exists(ws, &err) == 1 && branch_delete(ws, &err) != 0)
		sb_warn("undoing workspace %s: %s", ws->session, err.msg);
	if (ws->base_created && ws->repo_dir != NULL && tree_remove(ws->repo_dir, &err) != 0)
		sb_warn("undoing workspace %s: %s", ws->session, err.msg);
}

/* The checks of the base clone; alternates must stay inside the identity's repositories. */
static int base_check(const struct workspace *ws, const struct layout *l, struct sb_err *err)
{
	return gitconfig_check(ws->repo_dir, l->repositories, err);
}

/* The walk of tree_symlinks_refuse: where (the path of dirfd, for messages) grows by one name
 * per level; found gets the first link's path. Every directory is opened by one name beneath its
 * held parent with no link allowed (openat2), so a directory a command swaps for a link during
 * the walk is itself reported, never followed; a mount is not crossed. Returns 1 when a link was
 * found, 0 when none, -1 on error. */
static int symlinks_walk(int dirfd, char *where, size_t size, unsigned depth, struct sb_err *err)
{
	size_t base = strlen(where);
	cleanup_close int listfd = openat(dirfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	DIR *d = listfd >= 0 ? fdopendir(listfd) : NULL;
	struct dirent *de;
	int rc = 0;

	if (d == NULL)
		return sb_fail_errno(err, "listing %s", where);
	listfd = -1; /* closedir closes it */
	if (depth >= FSTREE_DEPTH_MAX) {
		closedir(d);
		return sb_fail(err, ELOOP, "%s is more than %d directories deep", where, FSTREE_DEPTH_MAX);
	}
	while (rc == 0 && (errno = 0, de = readdir(d)) != NULL) {
		/* No O_NOFOLLOW: RESOLVE_NO_SYMLINKS then answers a final link with ELOOP, told apart
		 * from a directory made a file (ENOTDIR). */
		struct open_how how = { .flags = O_RDONLY | O_DIRECTORY | O_CLOEXEC,
					.resolve = RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS |
						   RESOLVE_NO_XDEV };
		struct stat st;
		int sub;

		if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
			continue;
		if (base + 1 + strlen(de->d_name) >= size) {
			rc = sb_fail(err, ENAMETOOLONG, "checking %s for symbolic links: a name below it is too long",
				     where);
			break;
		}
		where[base] = '/';
		strcpy(where + base + 1, de->d_name);
		if (fstatat(dirfd, de->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0) {
			rc = errno == ENOENT ? 0 : sb_fail_errno(err, "inspecting %s", where);
		} else if (S_ISLNK(st.st_mode)) {
			rc = 1;
		} else if (S_ISDIR(st.st_mode)) {
			sub = (int)syscall(SYS_openat2, dirfd, de->d_name, &how, sizeof how);
			if (sub < 0)
				/* ELOOP: made a link since the fstatat; EXDEV: a mount point, not crossed;
				 * ENOENT, ENOTDIR: gone or made a file, nothing beneath to check. */
				rc = errno == ELOOP ? 1 : errno == ENOENT || errno == ENOTDIR || errno == EXDEV ? 0 :
				     sb_fail_errno(err, "opening %s", where);
			else {
				rc = symlinks_walk(sub, where, size, depth + 1, err);
				close(sub);
			}
		}
		if (rc == 0)
			where[base] = '\0';
	}
	if (rc == 0 && errno != 0)
		rc = sb_fail_errno(err, "listing %s", where);
	closedir(d);
	return rc;
}

/* git never makes a symbolic link in refs/, logs/, packed-refs.d/ or a worktree's metadata, but a
 * command can; trusted git would follow it (gitrun's Landlock confinement keeps its writes inside
 * the repository and its reads inside the repository and the system's files; this makes the
 * refusal early and explicit). objects/ is not walked: it can be large, and git neither writes
 * through an existing object nor trusts one it has not hashed. The walk is by descriptor from a
 * start opened with no link on its path (the start's parent, the common git dir, is read-only in
 * sandboxes); still advisory, since a link can be planted right after it. */
static int tree_symlinks_refuse(const char *path, struct sb_err *err)
{
	char where[PATH_MAX];
	int fd, rc;

	if (strlen(path) >= sizeof where)
		return sb_fail(err, ENAMETOOLONG, "checking %s for symbolic links: the path is too long", path);
	strcpy(where, path);
	fd = fstree_open_dir(AT_FDCWD, path, err);
	if (fd < 0 && err->errnum == ENOENT)
		return 0;
	if (fd < 0 && err->errnum != ELOOP)
		return -1;
	rc = fd < 0 ? 1 : symlinks_walk(fd, where, sizeof where, 0, err);
	if (fd >= 0)
		close(fd);
	if (rc == 1)
		return sb_fail(err, 0, "repository refused: %s is a symbolic link, or has one on its path, which git "
			       "never makes there and trusted git must not follow; remove it", where);
	if (rc < 0)
		sb_err_prefix(err, "checking %s for symbolic links", path);
	return rc;
}

static int symlinks_refuse(const struct workspace *ws, struct sb_err *err)
{
	static const char *const parts[] = { "refs", "logs", PACKED_DIR, NULL };

	for (size_t i = 0; parts[i] != NULL; i++) {
		cleanup_free char *path = NULL;

		if (path_alloc_fmt(&path, err, "%s/%s", ws->repo_dir, parts[i]) != 0 ||
		    tree_symlinks_refuse(path, err) != 0)
			return -1;
	}
	/* Not yet there while a workspace is being created. */
	if (ws->worktree_git_dir != NULL)
		return tree_symlinks_refuse(ws->worktree_git_dir, err);
	return 0;
}

/* Steps of workspace_create once the identity is locked. Each step says what it proves. */
static int create_locked(struct workspace *ws, const struct layout *l, const struct source *src,
			 struct made *made, struct sb_err *err)
{
	bool exists;

	/* 1. One workspace per session. */
	if (path_exists(ws->worktree))
		return sb_fail(err, EEXIST, "session %s already has a workspace at %s", ws->session, ws->worktree);
	/* 2. The base clone: reuse this identity's clone of the same source, or make it. */
	if (base_choose(ws, l, src->name, &exists, err) != 0)
		return -1;
	if (!exists && base_clone(ws, l, src, err) != 0)
		return -1;
	/* 3. The base clone passes the refusal check (a reused one may have changed since). */
	if (base_check(ws, l, err) != 0 || symlinks_refuse(ws, err) != 0 || base_prepare(ws, err) != 0 ||
	    exclude_ensure(ws, err) != 0)
		return -1;
	/* 4. The worktree on its branch; then the check again, now with its worktree config. */
	if (worktree_add(ws, &made->worktree, &made->branch, err) != 0) {
		sb_err_prefix(err, "adding the worktree %s on branch %s", ws->worktree, ws->branch);
		return -1;
	}
	if (worktree_locate(ws, err) != 0 || base_check(ws, l, err) != 0)
		return -1;
	/* 5. The scratch folder, ignored through info/exclude (step 3). */
	return scratch_ensure(ws, err);
}

static int create_names(struct workspace *ws, const char *identity, const char *session,
			const char *branch, struct sb_err *err)
{
	if (workspace_name_check("identity", identity, err) != 0 ||
	    workspace_name_check("session", session, err) != 0)
		return -1;
	ws->identity = strdup(identity);
	ws->session = strdup(session);
	if (branch != NULL)
		ws->branch = strdup(branch);
	else if (path_alloc_fmt(&ws->branch, err, WORKSPACE_BRANCH_PREFIX "%s", session) != 0)
		return -1;
	if (ws->identity == NULL || ws->session == NULL || ws->branch == NULL)
		return sb_fail(err, ENOMEM, "creating a workspace");
	return branch_check(ws->branch, err);
}

static int create_prepare(struct workspace *ws, const char *volume, const char *repo,
			  struct source *src, struct layout *l, struct sb_err *err)
{
	if (volume_resolve(volume, &ws->volume, err) != 0 || source_resolve(repo, src, err) != 0)
		return -1;
	ws->source = strdup(src->clone_arg);
	if (ws->source == NULL)
		return sb_fail(err, ENOMEM, "creating a workspace");
	/* Local sources are checked before anything is cloned or created. */
	if (src->common_dir != NULL && gitconfig_check(src->common_dir, NULL, err) != 0)
		return -1;
	if (layout_paths(ws->volume, ws->identity, l, err) != 0)
		return -1;
	if (path_alloc_fmt(&ws->worktree, err, "%s/%s", l->workspaces, ws->session) != 0 ||
	    path_alloc_fmt(&ws->scratch, err, "%s/" WORKSPACE_SCRATCH, ws->worktree) != 0)
		return -1;
	return layout_create(ws->volume, l, err);
}

int workspace_create(const char *volume, const char *identity, const char *session, const char *repo,
		     const char *branch, struct workspace *ws, struct sb_err *err)
{
	struct source src = { 0 };
	struct layout l = { 0 };
	struct made made = { 0 };
	int lock, rc;

	memset(ws, 0, sizeof *ws);
	rc = create_names(ws, identity, session, branch, err);
	if (rc == 0)
		rc = create_prepare(ws, volume, repo, &src, &l, err);
	if (rc == 0 && (lock = identity_lock(&l, err)) >= 0) {
		rc = create_locked(ws, &l, &src, &made, err);
		if (rc != 0)
			create_undo(ws, &made);
		close(lock);
	} else {
		rc = -1;
	}
	if (rc != 0) {
		sb_err_prefix(err, "creating the workspace of session %s", session ? session : "(none)");
		workspace_free(ws);
	}
	source_free(&src);
	layout_free(&l);
	return rc;
}

/* ---------------------------------------------------------------- recheck, open, delete */

/* A pointer file must hold exactly the expected text. */
static int pointer_expect(const char *file, const char *expected, const char *session, struct sb_err *err)
{
	char text[PATH_MAX + 16], shown[PATH_MAX + 16];

	if (file_read_small(file, text, sizeof text, err) != 0)
		return -1;
	if (strcmp(text, expected) == 0)
		return 0;
	printable(shown, sizeof shown, text);
	return sb_fail(err, 0, "workspace of session %s refused: %s says \"%s\" instead of \"%s\"; the "
		       "worktree's git metadata was changed outside normal git use; delete and recreate "
		       "the workspace", session, file, shown, expected);
}

/* The ownership pointers between worktree and metadata: trusted git follows them, so they must
 * still name this repository and this worktree (they are read-only inside sandboxes). */
static int pointers_check(const struct workspace *ws, struct sb_err *err)
{
	cleanup_free char *dotgit = NULL, *expect_dotgit = NULL, *gitdir_file = NULL, *cd_file = NULL,
			  *common = NULL;

	if (path_alloc_fmt(&dotgit, err, "%s/.git", ws->worktree) != 0 ||
	    path_alloc_fmt(&expect_dotgit, err, "gitdir: %s", ws->worktree_git_dir) != 0 ||
	    path_alloc_fmt(&gitdir_file, err, "%s/gitdir", ws->worktree_git_dir) != 0 ||
	    path_alloc_fmt(&cd_file, err, "%s/commondir", ws->worktree_git_dir) != 0)
		return -1;
	if (pointer_expect(dotgit, expect_dotgit, ws->session, err) != 0 ||
	    pointer_expect(gitdir_file, dotgit, ws->session, err) != 0)
		return -1;
	if (pointer_resolve(cd_file, NULL, ws->worktree_git_dir, &common, err) != 0)
		return -1;
	if (strcmp(common, ws->repo_dir) != 0)
		return sb_fail(err, 0, "workspace of session %s refused: %s points to %s, not to %s; "
			       "delete and recreate the workspace", ws->session, cd_file, common, ws->repo_dir);
	return 0;
}

int workspace_recheck(const struct workspace *ws, struct sb_err *err)
{
	struct layout l;
	int rc;

	if (layout_paths(ws->volume, ws->identity, &l, err) != 0)
		return -1;
	rc = base_check(ws, &l, err);
	if (rc == 0)
		rc = symlinks_refuse(ws, err);
	if (rc == 0)
		rc = pointers_check(ws, err);
	if (rc == 0)
		rc = base_prepare(ws, err);
	if (rc == 0)
		rc = scratch_ensure(ws, err);
	if (rc != 0)
		sb_err_prefix(err, "checking the workspace of session %s", ws->session);
	layout_free(&l);
	return rc;
}

/* The branch a worktree's HEAD names, or NULL when it is detached. */
static int head_branch(const struct workspace *ws, char **branch, struct sb_err *err)
{
	cleanup_free char *head = NULL;
	char text[1024];

	*branch = NULL;
	if (path_alloc_fmt(&head, err, "%s/HEAD", ws->worktree_git_dir) != 0 ||
	    file_read_small(head, text, sizeof text, err) != 0)
		return -1;
	if (strncmp(text, "ref: refs/heads/", 16) != 0)
		return 0;
	*branch = strdup(text + 16);
	return *branch ? 0 : sb_fail(err, ENOMEM, "reading %s", head);
}

/* From <repositories>/<repo>/worktrees/<name> (where the worktree's .git points) to the
 * repository's name and directory; refuses a pointer that leaves this identity's repositories. */
static int open_repo_from_gitdir(struct workspace *ws, const struct layout *l, struct sb_err *err)
{
	cleanup_free char *dotgit = NULL, *gitdir = NULL;
	size_t root = strlen(l->repositories);

	if (path_alloc_fmt(&dotgit, err, "%s/.git", ws->worktree) != 0 ||
	    pointer_resolve(dotgit, "gitdir: ", ws->worktree, &gitdir, err) != 0)
		return -1;
	if (strncmp(gitdir, l->repositories, root) != 0 || gitdir[root] != '/')
		return sb_fail(err, EINVAL, "%s points outside %s", dotgit, l->repositories);
	ws->repo_name = strndup(gitdir + root + 1, strcspn(gitdir + root + 1, "/"));
	if (ws->repo_name == NULL)
		return sb_fail(err, ENOMEM, "opening the workspace");
	return path_alloc_fmt(&ws->repo_dir, err, "%s/%s", l->repositories, ws->repo_name);
}

static int open_steps(struct workspace *ws, const char *volume, struct sb_err *err)
{
	cleanup_free char *config = NULL;
	struct layout l;
	int rc;

	if (volume_resolve(volume, &ws->volume, err) != 0 ||
	    layout_paths(ws->volume, ws->identity, &l, err) != 0)
		return -1;
	rc = path_alloc_fmt(&ws->worktree, err, "%s/%s", l.workspaces, ws->session);
	if (rc == 0)
		rc = path_alloc_fmt(&ws->scratch, err, "%s/" WORKSPACE_SCRATCH, ws->worktree);
	if (rc == 0)
		rc = open_repo_from_gitdir(ws, &l, err);
	if (rc == 0)
		rc = worktree_locate(ws, err);
	if (rc == 0)
		rc = head_branch(ws, &ws->branch, err);
	if (rc == 0)
		rc = path_alloc_fmt(&config, err, "%s/config", ws->repo_dir);
	if (rc == 0 && gitconfig_get(config, "remote.origin.url", &ws->source, err) < 0)
		rc = -1;
	layout_free(&l);
	return rc;
}

int workspace_open(const char *volume, const char *identity, const char *session, struct workspace *ws,
		   struct sb_err *err)
{
	int rc;

	memset(ws, 0, sizeof *ws);
	rc = workspace_name_check("identity", identity, err);
	if (rc == 0)
		rc = workspace_name_check("session", session, err);
	if (rc == 0) {
		ws->identity = strdup(identity);
		ws->session = strdup(session);
		if (ws->identity == NULL || ws->session == NULL)
			rc = sb_fail(err, ENOMEM, "opening a workspace");
	}
	if (rc == 0)
		rc = open_steps(ws, volume, err);
	if (rc == 0)
		rc = workspace_recheck(ws, err);
	if (rc != 0) {
		sb_err_prefix(err, "opening the workspace of session %s", session ? session : "(none)");
		workspace_free(ws);
	}
	return rc;
}

int workspace_delete(const struct workspace *ws, bool keep_branch, bool *branch_kept, struct sb_err *err)
{
	struct sb_err branch_err;
	struct layout l;
	int lock, rc;

	if (layout_paths(ws->volume, ws->identity, &l, err) != 0)
		return -1;
	/* Only ever remove a directory of this identity's workspaces/. The message is made before
	 * the layout it names is freed. */
	if (!path_within(ws->worktree, l.workspaces) || strcmp(ws->worktree, l.workspaces) == 0) {
		sb_fail(err, EINVAL, "deleting the workspace of session %s: %s is not under %s", ws->session,
			ws->worktree, l.workspaces);
		layout_free(&l);
		return -1;
	}
	lock = identity_lock(&l, err);
	rc = lock < 0 ? -1 : worktree_remove(ws, err);
	if (branch_kept != NULL)
		*branch_kept = true;
	/* Once the worktree is gone the delete is done: a branch that cannot go (a command of another
	 * session left refs/heads/<branch>.lock) is kept and said, never a half-deleted session that
	 * no retry can finish. */
	if (rc == 0 && !keep_branch && ws->branch != NULL) {
		if (branch_delete(ws, &branch_err) != 0)
			sb_warn("session %s: workspace deleted, branch %s kept: %s", ws->session, ws->branch,
				branch_err.msg);
		else if (branch_kept != NULL)
			*branch_kept = false;
	}
	if (lock >= 0)
		close(lock);
	if (rc != 0)
		sb_err_prefix(err, "deleting the workspace of session %s", ws->session);
	layout_free(&l);
	return rc;
}

void workspace_free(struct workspace *ws)
{
	free(ws->volume);
	free(ws->identity);
	free(ws->session);
	free(ws->repo_name);
	free(ws->repo_dir);
	free(ws->source);
	free(ws->worktree);
	free(ws->worktree_name);
	free(ws->worktree_git_dir);
	free(ws->branch);
	free(ws->scratch);
	memset(ws, 0, sizeof *ws);
}

/* ---------------------------------------------------------------- the mount plan */

/* What a sandbox sees of the workspace, parents before children. The common git dir is
 * read-only as a whole, and only what supported git operations write is bound writable on top:
 *
 * - packed-refs: git 2.39 takes packed-refs.lock next to packed-refs for EVERY ref deletion (a
 *   branch, the stash entry `git stash pop` drops, refs a rebase cleans up), and rewrites the file
 *   by rename, which neither a read-only common dir nor a single-file bind mount allows (tried:
 *   stash pop, rebase and branch -D then fail). So packed-refs is a symbolic link into
 *   packed-refs.d/ (see packed_refs_prepare), bound writable: every ref operation and
 *   `git pack-refs` work, and the link itself sits in the read-only common dir. What still fails,
 *   with git's "Read-only file system" error and no change: `git config`, `git gc` (gc.pid),
 *   `git worktree add`, and the config part of `git branch -D` (a warning; the branch goes).
 * - config, HEAD, hooks/, info/ (exclude), description, and every other worktree's metadata under
 *   worktrees/ stay read-only but visible. Visible on purpose: objects/ is shared and writable, and
 *   git counts other worktrees' HEAD, index and reflogs as reachable, so `git prune` in one sandbox
 *   cannot delete objects another session still needs; hiding them would not hide anything either,
 *   since their objects are in the shared objects/ anyway. One trust domain per identity.
 * - Ownership pointers (worktree/.git, worktrees/<name>/gitdir and commondir) and
 *   objects/info/alternates are bound read-only over their writable parents: trusted git follows
 *   them, so a command must not redirect them. */
struct plan_item {
	const char *base_field; /* "repo", "wtgit" or "worktree" */
	const char *suffix;     /* appended to that base; "" for the base itself */
	enum mount_mode mode;
	bool is_file;
	const char *why;
};

static const struct plan_item plan_items[] = {
	{ "repo", "", MOUNT_RO, false, "common git dir: config, HEAD, packed-refs, hooks/, info/ and other "
	  "sessions' worktree metadata stay read-only" },
	{ "repo", "/" PACKED_DIR, MOUNT_RW, false, "packed refs: packed-refs links here, and git rewrites "
	  "it by lock file and rename, also for every ref deletion" },
	{ "repo", "/objects", MOUNT_RW, false, "objects written by commit, stash and rebase" },
	{ "repo", "/objects/info/alternates", MOUNT_RO, true, "alternates decide where git reads objects from" },
	{ "repo", "/refs", MOUNT_RW, false, "branches, tags and the stash" },
	{ "repo", "/logs", MOUNT_RW, false, "reflogs of the shared refs" },
	{ "wtgit", "", MOUNT_RW, false, "this worktree's HEAD, index, reflog and rebase state" },
	{ "wtgit", "/commondir", MOUNT_RO, true, "ownership pointer from this worktree's metadata to its "
	  "repository" },
	{ "wtgit", "/gitdir", MOUNT_RO, true, "ownership pointer from this worktree's metadata to the "
	  "worktree" },
	{ "worktree", "", MOUNT_RW, false, "the session's files, at the same absolute path as on the host" },
	{ "worktree", "/.git", MOUNT_RO, true, "ownership pointer from the worktree to its metadata" },
};

const char *mount_mode_name(enum mount_mode mode)
{
	switch (mode) {
	case MOUNT_RW:
		return "rw";
	case MOUNT_RO:
		return "ro";
	case MOUNT_HIDDEN:
		return "hidden";
	case MOUNT_TMPFS:
		return "tmpfs";
	}
	return "unknown";
}

/* Each source must exist with the expected type, must not be a symbolic link (a bind mount would
 * follow it out of the workspace), and must lie inside this session's worktree or repository. */
static int plan_entry_check(const struct mount_entry *e, const struct workspace *ws, struct sb_err *err)
{
	struct stat st;

	if (!path_within(e->source, ws->repo_dir) && !path_within(e->source, ws->worktree))
		return sb_fail(err, EPERM, "%s is outside the session's worktree and repository", e->source);
	if (lstat(e->source, &st) != 0)
		return sb_fail_errno(err, "%s", e->source);
	if (S_ISLNK(st.st_mode))
		return sb_fail(err, ELOOP, "%s is a symbolic link", e->source);
	if (e->is_file ? !S_ISREG(st.st_mode) : !S_ISDIR(st.st_mode))
		return sb_fail(err, EINVAL, "%s is not a %s", e->source, e->is_file ? "regular file" : "directory");
	return 0;
}

static const char *plan_base(const struct workspace *ws, const char *field)
{
	if (strcmp(field, "repo") == 0)
		return ws->repo_dir;
	if (strcmp(field, "wtgit") == 0)
		return ws->worktree_git_dir;
	return ws->worktree;
}

int mount_plan_build(const struct workspace *ws, struct mount_plan *plan, struct sb_err *err)
{
	size_t count = sizeof plan_items / sizeof plan_items[0];

	memset(plan, 0, sizeof *plan);
	plan->entries = calloc(count, sizeof *plan->entries);
	plan->workdir = strdup(ws->worktree);
	plan->scratch = strdup(ws->scratch);
	if (plan->entries == NULL || plan->workdir == NULL || plan->scratch == NULL) {
		mount_plan_free(plan);
		return sb_fail(err, ENOMEM, "building the mount plan");
	}
	for (size_t i = 0; i < count; i++) {
		struct mount_entry *e = &plan->entries[i];
		const struct plan_item *it = &plan_items[i];

		plan->n++;
		e->mode = it->mode;
		e->is_file = it->is_file;
		e->why = it->why;
		if (path_alloc_fmt(&e->source, err, "%s%s", plan_base(ws, it->base_field), it->suffix) != 0 ||
		    (e->target = strdup(e->source)) == NULL || plan_entry_check(e, ws, err) != 0) {
			if (e->source != NULL && e->target == NULL)
				sb_fail(err, ENOMEM, "building the mount plan");
			sb_err_prefix(err, "building the mount plan of session %s", ws->session);
			mount_plan_free(plan);
			return -1;
		}
	}
	return 0;
}

void mount_plan_free(struct mount_plan *plan)
{
	for (size_t i = 0; plan->entries != NULL && i < plan->n; i++) {
		free(plan->entries[i].source);
		free(plan->entries[i].target);
	}
	free(plan->entries);
	free(plan->workdir);
	free(plan->scratch);
	memset(plan, 0, sizeof *plan);
}

json_t *mount_plan_to_json(const struct mount_plan *plan)
{
	json_t *mounts = json_array();
	json_t *root;

	if (mounts == NULL)
		return NULL;
	for (size_t i = 0; i < plan->n; i++) {
		const struct mount_entry *e = &plan->entries[i];
		json_t *m = json_pack("{s:s, s:s, s:s, s:s, s:s}", "source", e->source, "target", e->target,
				      "mode", mount_mode_name(e->mode), "type", e->is_file ? "file" : "dir",
				      "why", e->why);

		if (m == NULL || json_array_append_new(mounts, m) != 0) {
			json_decref(mounts);
			return NULL;
		}
	}
	root = json_pack("{s:s, s:{s:s, s:s, s:s}, s:o}", "workdir", plan->workdir, "env", "TMPDIR",
			 plan->scratch, "TMP", plan->scratch, "TEMP", plan->scratch, "mounts", mounts);
	return root;
}

int mount_plan_print(const struct mount_plan *plan, FILE *out, struct sb_err *err)
{
	json_t *j = mount_plan_to_json(plan);
	int rc;

	if (j == NULL)
		return sb_fail(err, ENOMEM, "printing the mount plan");
	rc = json_dumpf(j, out, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
	json_decref(j);
	if (rc != 0 || fputc('\n', out) == EOF)
		return sb_fail(err, EIO, "printing the mount plan");
	return 0;
}

/* ---------------------------------------------------------------- the volume probe */

#define PROBE_SIZE 65536

static int probe_write(const char *path, const unsigned char *data, size_t len, struct sb_err *err)
{
	cleanup_close int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0600);

	if (fd < 0)
		return sb_fail_errno(err, "creating %s", path);
	if (fd_write_all(fd, data, len) < 0)
		return sb_fail_errno(err, "writing %s", path);
	if (fsync(fd) != 0)
		return sb_fail_errno(err, "fsync of %s", path);
	return 0;
}

/* 1 when the file holds exactly data, 0 when it differs, -1 on error. */
static int probe_same(const char *path, const unsigned char *data, size_t len, struct sb_err *err)
{
	cleanup_close int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
	cleanup_free unsigned char *buf = malloc(len + 1);
	size_t off = 0;
	ssize_t n;

	if (fd < 0)
		return sb_fail_errno(err, "reopening %s", path);
	if (buf == NULL)
		return sb_fail(err, ENOMEM, "reading %s", path);
	while ((n = read(fd, buf + off, len + 1 - off)) != 0) {
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return sb_fail_errno(err, "reading back %s", path);
		off += (size_t)n;
		if (off > len)
			break;
	}
	return off == len && memcmp(buf, data, len) == 0 ? 1 : 0;
}

static int probe_exclusive(const char *dir, struct sb_err *err)
{
	cleanup_free char *path = NULL;
	int fd;

	if (path_alloc_fmt(&path, err, "%s/lock", dir) != 0)
		return -1;
	fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
	if (fd < 0)
		return sb_fail_errno(err, "exclusive create (O_EXCL) of a lock file failed");
	close(fd);
	fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
	if (fd >= 0) {
		close(fd);
		return sb_fail(err, 0, "exclusive create (O_EXCL) is not honoured: a second create of the same "
			       "lock file succeeded, so git's lock files would not protect the repository");
	}
	if (errno != EEXIST)
		return sb_fail_errno(err, "exclusive create (O_EXCL): a second create failed without EEXIST");
	return 0;
}

static void probe_fill(unsigned char *data, size_t len, unsigned salt)
{
	uint64_t x = ((uint64_t)getpid() << 32) ^ (uint64_t)time(NULL) ^ salt;

	for (size_t i = 0; i < len; i++) {
		x = x * 6364136223846793005ull + 1442695040888963407ull;
		data[i] = (unsigned char)(x >> 56);
	}
}

static int probe_data(const char *dir, unsigned char *a, unsigned char *b, struct sb_err *err)
{
	cleanup_free char *data = NULL, *next = NULL;
	int same;

	if (path_alloc_fmt(&data, err, "%s/data", dir) != 0 || path_alloc_fmt(&next, err, "%s/data.new", dir) != 0)
		return -1;
	/* An fsync'd write must read back through a fresh descriptor. */
	if (probe_write(data, a, PROBE_SIZE, err) != 0)
		return -1;
	same = probe_same(data, a, PROBE_SIZE, err);
	if (same <= 0)
		return same < 0 ? -1 : sb_fail(err, 0, "fsync'd write read back: the data read back differs "
					       "from the data written");
	/* rename() over an existing file must replace it in one step, as git's lock files assume. */
	if (probe_write(next, b, PROBE_SIZE, err) != 0)
		return -1;
	if (rename(next, data) != 0)
		return sb_fail_errno(err, "atomic rename over an existing file failed");
	if (path_exists(next))
		return sb_fail(err, 0, "atomic rename: the old name still exists after rename()");
	same = probe_same(data, b, PROBE_SIZE, err);
	if (same <= 0)
		return same < 0 ? -1 : sb_fail(err, 0, "atomic rename: the renamed file does not hold the new data");
	return 0;
}

static int probe_cleanup(const char *dir, struct sb_err *err)
{
	static const char *const names[] = { "lock", "data", "data.new", NULL };

	for (size_t i = 0; names[i] != NULL; i++) {
		cleanup_free char *path = NULL;

		if (path_alloc_fmt(&path, err, "%s/%s", dir, names[i]) != 0)
			return -1;
		if (unlink(path) != 0 && errno != ENOENT)
			return sb_fail_errno(err, "removing %s", path);
	}
	if (rmdir(dir) != 0)
		return sb_fail_errno(err, "removing %s", dir);
	return 0;
}

int volume_probe(const char *volume, struct sb_err *err)
{
	cleanup_free unsigned char *a = malloc(PROBE_SIZE), *b = malloc(PROBE_SIZE);
	cleanup_free char *dir = NULL;
	struct sb_err cleanup_err;
	int rc;

	if (a == NULL || b == NULL)
		return sb_fail(err, ENOMEM, "probing volume %s", volume);
	if (path_alloc_fmt(&dir, err, "%s/.volume-probe-XXXXXX", volume) != 0)
		return -1;
	if (mkdtemp(dir) == NULL)
		return sb_fail_errno(err, "volume %s refused: cannot create a directory in it", volume);
	probe_fill(a, PROBE_SIZE, 1);
	probe_fill(b, PROBE_SIZE, 2);
	rc = probe_exclusive(dir, err);
	if (rc == 0)
		rc = probe_data(dir, a, b, err);
	if (probe_cleanup(dir, &cleanup_err) != 0 && rc == 0) {
		*err = cleanup_err;
		rc = -1;
	}
	if (rc != 0)
		sb_err_prefix(err, "volume %s refused", volume);
	return rc;
}
