/* The git steps on a workspace's base clone and worktree (see workspace.c for the design): the
 * bare --no-local clone, the packed-refs link, the worktree on its branch, removal. Every run goes
 * through gitrun, confined by Landlock to what it must write and read. Must never let root's git
 * write the whole common dir, nor read or write through a link a sandbox planted. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/openat2.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "cleanup.h"
#include "gitconfig.h"
#include "gitrun.h"
#include "log.h"
#include "pathfmt.h"
#include "workspace_internal.h"

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
int branch_exists(const struct workspace *ws, struct sb_err *err)
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
int base_clone(struct workspace *ws, const struct layout *l, const struct source *src, struct sb_err *err)
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
int base_choose(struct workspace *ws, const struct layout *l, const char *name, bool *exists, struct sb_err *err)
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
			return sb_invalid(err, "%s links to %s instead of " PACKED_TARGET, link, target);
		return 0;
	}
	if (lstat(link, &st) == 0 && !S_ISREG(st.st_mode))
		return sb_invalid(err, "%s is neither a file nor the expected link", link);
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
int base_prepare(const struct workspace *ws, struct sb_err *err)
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
		return sb_invalid(err, "%s is not a regular file", alternates);
	return 0;
}

/* ---------------------------------------------------------------- the worktree */

/* Find the worktree's metadata directory from its ".git" file, and check it is one of this
 * repository's: <repo_dir>/worktrees/<name>. */
int worktree_locate(struct workspace *ws, struct sb_err *err)
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
		return sb_invalid(err, "%s points to %s, not into %s", dotgit, gitdir, prefix);
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
int worktree_add(struct workspace *ws, bool *made_dir, bool *branch_created, struct sb_err *err)
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
	/* git accepts an empty directory; making it here keeps git's writes inside it. 0700: closed to
	 * all but the manager and, once a sandbox is prepared, the sandbox's uid (agent_dir.c hand_over). */
	if (mkdir(ws->worktree, 0700) != 0)
		return sb_fail_errno(err, "creating %s", ws->worktree);
	*made_dir = true;
	return git_base(ws, (const char *[]){ "worktree", "add", "--quiet", "--", ws->worktree, ws->branch, NULL },
			trees.v, NULL, err);
}

/* Remove a worktree: git first (it also drops the metadata); when git cannot (a damaged
 * worktree), remove the directory ourselves and let prune drop the metadata. --force twice also
 * removes a worktree a command locked. */
int worktree_remove(const struct workspace *ws, struct sb_err *err)
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
int branch_delete(const struct workspace *ws, struct sb_err *err)
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
