/* What the files of manager/workspace/ that build workspaces share and nothing else may include
 * (tests/layering_check.py): the identity's layout, the resolved source, the path and pointer
 * helpers, and the steps each file provides to workspace_create, _open, _recheck and _delete. */
#ifndef SB_WORKSPACE_INTERNAL_H
#define SB_WORKSPACE_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "error.h"
#include "fstree.h"
#include "gitrun.h"
#include "workspace.h"

/* packed-refs is a link into packed-refs.d/ (workspace_git.c packed_refs_prepare). */
#define PACKED_DIR "packed-refs.d"
#define PACKED_TARGET PACKED_DIR "/packed-refs"

/* The identity's directories under <volume>/identities/<identity>/. */
struct layout {
	char *identity_dir, *repositories, *workspaces, *private_state, *provider_auth;
};

/* What the caller named as the repository, resolved (workspace_source.c). */
struct source {
	char *clone_arg;   /* canonical path or URL, passed to git clone and kept as remote.origin.url */
	char *common_dir;  /* local sources: the common git dir, checked before cloning; NULL for https */
	char *name;        /* proposed name under repositories/ */
};

/* ---------------------------------------------------------------- small helpers (workspace.c) */

/* *out = formatted string. Returns 0, or -1 (ENOMEM) with err filled. */
int path_alloc_fmt(char **out, struct sb_err *err, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* A copy of untrusted text that is safe to put in a message: non-printable bytes become '?'. */
static inline void printable(char *out, size_t size, const char *in)
{
	size_t i;

	for (i = 0; i + 1 < size && in[i] != '\0'; i++)
		out[i] = in[i] >= 0x20 && in[i] < 0x7f ? in[i] : '?';
	out[i] = '\0';
}

/* Read a small file without following a final symlink; trailing newlines removed.
 * Returns 0, or -1 with errno in err (ENOENT when it does not exist, EFBIG when it is too big). */
int file_read_small(const char *path, char *buf, size_t size, struct sb_err *err);

/* Create a directory, or accept an existing real directory (never a symlink to one).
 * mode is enforced on directories this call creates; private ones (0700) are also corrected. */
int dir_ensure(const char *path, mode_t mode, struct sb_err *err);

/* rm -rf of a directory this module made, which a sandbox may have written (a worktree) or
 * planted links in: fstree's removal, by descriptor, never following a link nor crossing a mount.
 * The paths given are trusted: a base clone or partial clone in repositories/, a worktree in
 * workspaces/, neither of which (nor any ancestor) is writable by a sandbox. Returns 0 (also when
 * it is already gone), or -1 with err. */
static inline int tree_remove(const char *path, struct sb_err *err)
{
	return fstree_remove_path(path, err);
}

static inline bool path_exists(const char *path)
{
	struct stat st;

	return lstat(path, &st) == 0;
}

/* Is path equal to root or below it? Both are canonical. */
static inline bool path_within(const char *path, const char *root)
{
	size_t n = strlen(root);

	return strncmp(path, root, n) == 0 && (path[n] == '\0' || path[n] == '/');
}

/* Hard-link from to the new name to (which must not exist yet). */
static inline int link_file(const char *from, const char *to, struct sb_err *err)
{
	if (link(from, to) != 0)
		return sb_fail_errno(err, "linking %s to %s", from, to);
	return 0;
}

/* The git dir named by a ".git" file or a "commondir" file: "gitdir: X" or a bare path X,
 * relative to base when not absolute. */
int pointer_resolve(const char *file, const char *prefix, const char *base, char **out, struct sb_err *err);

/* ---------------------------------------------------------------- the source (workspace_source.c) */

/* An absolute path, file:///path or https://...; anything else is refused with the reason. */
int source_resolve(const char *repo, struct source *src, struct sb_err *err);
void source_free(struct source *src);

/* ---------------------------------------------------------------- git steps (workspace_git.c) */

/* 1 when refs/heads/<branch> exists, 0 when not, -1 on error. */
int branch_exists(const struct workspace *ws, struct sb_err *err);

/* Clone into a hidden partial directory and rename it into place only when complete. */
int base_clone(struct workspace *ws, const struct layout *l, const struct source *src, struct sb_err *err);

/* Pick repositories/<name>: the plain name, or name-<hash> when the plain name is a clone of
 * another source. Sets ws->repo_name and ws->repo_dir; *exists tells whether to reuse. */
int base_choose(struct workspace *ws, const struct layout *l, const char *name, bool *exists, struct sb_err *err);

/* The directories and placeholders the mount plan binds, made before any sandbox. */
int base_prepare(const struct workspace *ws, struct sb_err *err);

/* The worktree's metadata directory from its ".git" file, checked to be this repository's. */
int worktree_locate(struct workspace *ws, struct sb_err *err);

/* git worktree add, making the branch at the base's HEAD first when it does not exist. */
int worktree_add(struct workspace *ws, bool *made_dir, bool *branch_created, struct sb_err *err);

/* git worktree remove (or, for a damaged worktree, the directory by descriptor) and prune. */
int worktree_remove(const struct workspace *ws, struct sb_err *err);

/* git branch -D, confined to refs/, logs/ and packed-refs.d/. */
int branch_delete(const struct workspace *ws, struct sb_err *err);

/* ---------------------------------------------------------------- scratch (workspace_scratch.c) */

/* The scratch pattern in the repository's info/exclude, once. */
int exclude_ensure(const struct workspace *ws, struct sb_err *err);

/* The scratch folder, made again when a command removed it. */
int scratch_ensure(const struct workspace *ws, struct sb_err *err);

#endif
