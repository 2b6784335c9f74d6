/* The mount plan of a session's sandbox (mount_plan.h, workspace.h mount_plan_build): which parts
 * of the worktree and its repository a sandbox sees, and how. Must never put private-state/ or
 * provider-auth/, or anything outside this session's worktree and its repository, into a plan. */
#include <errno.h>
#include <jansson.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "mount_plan.h"
#include "pathfmt.h"
#include "workspace_internal.h"

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
		return sb_invalid(err, "%s is not a %s", e->source, e->is_file ? "regular file" : "directory");
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

/* ---------------------------------------------------------------- anchors, for every backend */

/* The writable plan entry whose mount holds path in the sandbox (the deepest one above it), or
 * NULL. */
static const struct mount_entry *rw_holder(const struct mount_plan *plan, const char *path)
{
	const struct mount_entry *best = NULL;

	for (size_t i = 0; i < plan->n; i++) {
		const struct mount_entry *e = &plan->entries[i];
		size_t n = strlen(e->target);

		if (strncmp(path, e->target, n) != 0 || path[n] != '/')
			continue;
		if (best == NULL || n >= strlen(best->target))
			best = e;
	}
	return best != NULL && best->mode == MOUNT_RW ? best : NULL;
}

/* A plan entry inside a writable one (objects/info/alternates inside objects/): each directory on
 * the way, below the writable entry, is mounted onto itself. A mount point cannot be renamed
 * (EBUSY), so a command cannot move the entry away and put a file of its own at its path. */
int mount_plan_anchors(const struct mount_plan *plan, const char *target, json_t *seen, mount_anchor_fn add,
		       void *ctx, struct sb_err *err)
{
	char anc[PATH_MAX], src[PATH_MAX];
	size_t len = strlen(target);

	if (len >= sizeof anc)
		return sb_fail(err, ENAMETOOLONG, "mount target %s", target);
	for (size_t n = 1; n < len; n++) {
		const struct mount_entry *e;

		if (target[n] != '/')
			continue;
		memcpy(anc, target, n);
		anc[n] = '\0';
		e = rw_holder(plan, anc);
		if (e == NULL || json_object_get(seen, anc) != NULL)
			continue;
		if (path_fmt(src, sizeof src, err, "%s%s", e->source, anc + strlen(e->target)) < 0 ||
		    add(ctx, src, anc, err) < 0)
			return -1;
		if (json_object_set_new(seen, anc, json_true()) < 0)
			return sb_fail(err, ENOMEM, "mount plan anchors");
	}
	return 0;
}
