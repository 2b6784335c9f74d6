/* Workspaces (see workspace.h): names, the identity's directories and lock, and the steps of
 * create, open, recheck and delete. The steps live by concern: workspace_source.c (what the caller
 * named), workspace_git.c (the base clone and the worktree, every git command through gitrun),
 * workspace_scratch.c, workspace_symlinks.c; the mount plan is mount_plan.c, the volume probe
 * volume_probe.c; workspace_internal.h is what they share.
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

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cleanup.h"
#include "fdio.h"
#include "gitconfig.h"
#include "gitrun.h"
#include "log.h"
#include "workspace_internal.h"

/* ---------------------------------------------------------------- small helpers */

/* *out = formatted string. Returns 0, or -1 (ENOMEM) with err filled. */
int path_alloc_fmt(char **out, struct sb_err *err, const char *fmt, ...)
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

/* Read a small file without following a final symlink; trailing newlines removed.
 * Returns 0, or -1 with errno in err (ENOENT when it does not exist, EFBIG when it is too big). */
int file_read_small(const char *path, char *buf, size_t size, struct sb_err *err)
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
int dir_ensure(const char *path, mode_t mode, struct sb_err *err)
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

/* The git dir named by a ".git" file or a "commondir" file: "gitdir: X" or a bare path X,
 * relative to base when not absolute. */
int pointer_resolve(const char *file, const char *prefix, const char *base, char **out, struct sb_err *err)
{
	char text[PATH_MAX], joined[PATH_MAX * 2], real[PATH_MAX];
	const char *p = text;

	if (file_read_small(file, text, sizeof text, err) != 0)
		return -1;
	if (prefix != NULL) {
		if (strncmp(text, prefix, strlen(prefix)) != 0)
			return sb_invalid(err, "%s does not start with \"%s\"", file, prefix);
		p += strlen(prefix);
	}
	snprintf(joined, sizeof joined, "%s%s%s", p[0] == '/' ? "" : base, p[0] == '/' ? "" : "/", p);
	if (realpath(joined, real) == NULL)
		return sb_fail_errno(err, "%s points to %s", file, joined);
	*out = strdup(real);
	return *out ? 0 : sb_fail(err, ENOMEM, "resolving %s", file);
}

/* ---------------------------------------------------------------- names */

int workspace_name_check(const char *kind, const char *name, struct sb_err *err)
{
	size_t len = name ? strlen(name) : 0;
	char shown[WORKSPACE_NAME_MAX + 8];

	if (len == 0)
		return sb_invalid(err, "%s name is empty; use 1 to %d characters from A-Z a-z 0-9 . _ -",
				  kind, WORKSPACE_NAME_MAX);
	printable(shown, sizeof shown, name);
	if (len > WORKSPACE_NAME_MAX)
		return sb_invalid(err, "%s name %s... is longer than %d characters", kind, shown,
				  WORKSPACE_NAME_MAX);
	if (name[0] == '.' || name[0] == '-')
		return sb_invalid(err, "%s name %s starts with '%c'; start it with a letter, a digit or '_'",
				  kind, shown, name[0]);
	for (size_t i = 0; i < len; i++) {
		char c = name[i];

		if (!((c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') ||
		      c == '.' || c == '_' || c == '-'))
			return sb_invalid(err, "%s name %s has a character outside A-Z a-z 0-9 . _ - "
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
		return sb_invalid(err, "branch name must have 1 to %d characters", WORKSPACE_BRANCH_MAX);
	if (branch[0] == '-' || strstr(branch, "@{") != NULL)
		return sb_invalid(err, "branch name %s is not a valid git branch name", shown);
	if (gitrun(args, &opts, &res, err) != 0) {
		gitrun_result_free(&res);
		return -1;
	}
	res.out[strcspn(res.out, "\n")] = '\0';
	ok = res.exit_code == 0 && strcmp(res.out, branch) == 0;
	gitrun_result_free(&res);
	if (!ok)
		return sb_invalid(err, "branch name %s is not a valid git branch name "
				  "(git check-ref-format --branch refused it)", shown);
	return 0;
}

/* ---------------------------------------------------------------- the identity's directories */

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

/* A directory of the identity's that its sandboxes walk through and nobody else may enter: the
 * manager's, group gid, mode 0710 (search for the group, no listing). Made here, or accepted when it
 * is already a real directory (volume_closed_check judges its mode at every start). The identity
 * directory above is never mounted in a sandbox, so no command races these calls. */
static int dir_ensure_group(const char *path, gid_t gid, struct sb_err *err)
{
	if (mkdir(path, 0700) == 0) {
		if (chown(path, (uid_t)-1, gid) != 0)
			return sb_fail_errno(err, "giving %s to group %u", path, (unsigned)gid);
		return chmod(path, 0710) == 0 ? 0 : sb_fail_errno(err, "setting the mode of %s", path);
	}
	return dir_ensure(path, 0710, err);
}

/* The identity's directories: a closed volume (rule N3). identities/ and the identity directory are
 * 0711, search only: nothing in them can be listed, but a sandbox's init running as an unprivileged
 * uid (under a root manager) must walk to the worktree to bind it. repositories/ and workspaces/
 * below are 0710 for the identity's group (dir_ensure_group), so only its sandboxes pass; and each
 * worktree is 0700 (worktree_add). private-state/ and provider-auth/ stay 0700. */
static int layout_create(const char *volume, const struct layout *l, const struct workspace_owner *owner,
			 struct sb_err *err)
{
	cleanup_free char *identities = NULL;

	if (path_alloc_fmt(&identities, err, "%s/identities", volume) != 0)
		return -1;
	if (dir_ensure(identities, 0711, err) != 0 || dir_ensure(l->identity_dir, 0711, err) != 0 ||
	    dir_ensure_group(l->repositories, owner->gid, err) != 0 ||
	    dir_ensure_group(l->workspaces, owner->gid, err) != 0 ||
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
	fd = fd_private_open(path, err);
	if (fd < 0)
		return -1;
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
		return sb_invalid(err, "volume path %s is not absolute", shown);
	if (realpath(volume, real) == NULL)
		return sb_fail_errno(err, "volume %s", shown);
	if (stat(real, &st) != 0 || !S_ISDIR(st.st_mode))
		return sb_fail(err, ENOTDIR, "volume %s is not a directory", shown);
	*out = strdup(real);
	return *out ? 0 : sb_fail(err, ENOMEM, "resolving the volume");
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

/* The checks of the base clone; alternates must stay inside the identity's repositories. Of the
 * linked worktrees' config.worktree only this session's own is judged (none before it exists):
 * another session's metadata decides that session alone. */
static int base_check(const struct workspace *ws, const struct layout *l, struct sb_err *err)
{
	return gitconfig_check(ws->repo_dir, l->repositories,
			       ws->worktree_name ? ws->worktree_name : GITCONFIG_NO_WORKTREE, err);
}

/* What the end-of-call sweep did not see (a call still running then, or a manager that stopped
 * before its sweep) is swept here, before git runs on the base clone: git's worktree add and
 * branch -D read every worktree's HEAD, and a FIFO there would hold them until their timeout. */
static int recheck_sweep(const struct workspace *ws, struct sb_err *err)
{
	cleanup_free char *who = NULL;

	if (path_alloc_fmt(&who, err, "a command of a session of identity %s whose call no end-of-call sweep "
			   "followed (found while preparing session %s)", ws->identity, ws->session) != 0)
		return -1;
	return workspace_sweep(ws->repo_dir, NULL, who, err);
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
	if (base_check(ws, l, err) != 0 || recheck_sweep(ws, err) != 0 || base_prepare(ws, err) != 0 ||
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
			  const struct workspace_owner *owner, struct source *src, struct layout *l, struct sb_err *err)
{
	if (volume_resolve(volume, &ws->volume, err) != 0 || source_resolve(repo, src, err) != 0)
		return -1;
	ws->source = strdup(src->clone_arg);
	if (ws->source == NULL)
		return sb_fail(err, ENOMEM, "creating a workspace");
	/* Local sources are checked before anything is cloned or created. */
	if (src->common_dir != NULL && gitconfig_check(src->common_dir, NULL, NULL, err) != 0)
		return -1;
	if (layout_paths(ws->volume, ws->identity, l, err) != 0)
		return -1;
	if (path_alloc_fmt(&ws->worktree, err, "%s/%s", l->workspaces, ws->session) != 0 ||
	    path_alloc_fmt(&ws->scratch, err, "%s/" WORKSPACE_SCRATCH, ws->worktree) != 0)
		return -1;
	return layout_create(ws->volume, l, owner, err);
}

int workspace_create(const char *volume, const char *identity, const char *session, const char *repo,
		     const char *branch, struct workspace *ws, struct sb_err *err)
{
	struct workspace_owner self = { geteuid(), getegid() };

	return workspace_create_owned(volume, identity, session, repo, branch, &self, ws, err);
}

int workspace_create_owned(const char *volume, const char *identity, const char *session, const char *repo,
			   const char *branch, const struct workspace_owner *owner, struct workspace *ws,
			   struct sb_err *err)
{
	struct source src = { 0 };
	struct layout l = { 0 };
	struct made made = { 0 };
	int lock, rc;

	memset(ws, 0, sizeof *ws);
	rc = create_names(ws, identity, session, branch, err);
	if (rc == 0)
		rc = create_prepare(ws, volume, repo, owner, &src, &l, err);
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
		rc = recheck_sweep(ws, err);
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
		return sb_invalid(err, "%s points outside %s", dotgit, l->repositories);
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
		sb_invalid(err, "deleting the workspace of session %s: %s is not under %s", ws->session,
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
