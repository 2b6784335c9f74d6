/* Workspaces on the persistent volume: the identity's base clones, each session's git worktree
 * and branch, its scratch folder, the mount plan every backend uses, and the volume probe.
 * Must never mount or expose private-state/ or provider-auth/, and never run git except through
 * gitrun (no shell, no repository-supplied program).
 *
 * Volume layout (DESIGN.md, "Persistent volume"), closed to other users (rule N3: the volume,
 * identities/ and <identity>/ 0711, search only):
 *   <volume>/identities/<identity>/repositories/<repo>/   base clone (bare) = the common git dir;
 *       its packed-refs is a link into packed-refs.d/ (see the mount plan in mount_plan.c);
 *       repositories/ is 0710, group the identity's sandboxes'
 *   <volume>/identities/<identity>/workspaces/<session>/  the session's linked worktree (0700);
 *       workspaces/ is 0710, group the identity's sandboxes'
 *   <volume>/identities/<identity>/private-state/         manager state (0700), never mounted
 *   <volume>/identities/<identity>/provider-auth/         provider credentials (0700), never mounted
 */
#ifndef SB_WORKSPACE_H
#define SB_WORKSPACE_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <sys/types.h>

#include "error.h"
#include "mount_plan.h"

/* The scratch folder inside every worktree: TMPDIR, TMP and TEMP of every call point at it, and
 * the repository's info/exclude ignores it (pattern WORKSPACE_SCRATCH_PATTERN), so files there
 * are shared by the shell and the file tools, survive sandbox replacement, and never get committed. */
#define WORKSPACE_SCRATCH ".sandbox-tmp"
#define WORKSPACE_SCRATCH_PATTERN "/" WORKSPACE_SCRATCH "/"
#define WORKSPACE_BRANCH_PREFIX "sandbox/"  /* default branch: sandbox/<session> */
#define WORKSPACE_NAME_MAX 64               /* identity, session and repository names */
#define WORKSPACE_BRANCH_MAX 200

struct workspace {
	char *volume;           /* canonical absolute path of the volume */
	char *identity;
	char *session;
	char *repo_name;        /* the name under repositories/ */
	char *repo_dir;         /* the base clone (bare), which is also the common git dir */
	char *source;           /* what the base clone was cloned from: a canonical path or a URL */
	char *worktree;         /* <volume>/identities/<identity>/workspaces/<session> */
	char *worktree_name;    /* the worktree's metadata is <repo_dir>/worktrees/<worktree_name> */
	char *worktree_git_dir; /* that metadata directory */
	char *branch;           /* the session's branch (without refs/heads/); NULL when detached */
	char *scratch;          /* <worktree>/.sandbox-tmp */
	bool base_created;      /* set by workspace_create() when it made the base clone */
};

/* Check an identity or session name: [A-Za-z0-9._-]{1,64}, not starting with '.' or '-'.
 * kind ("identity", "session") names it in the message. */
int workspace_name_check(const char *kind, const char *name, struct sb_err *err);

/* Who an identity's files below its directory are for: the uid and gid its sandboxes run as. One
 * value per identity (today every identity's sandboxes run as the manager's sandbox uid; the caller
 * decides, so a uid of each identity's own needs no change here). repositories/ and workspaces/ are
 * the manager's with this group, mode 0710: its sandboxes walk through, nobody else, and no one lists. */
struct workspace_owner {
	uid_t uid;
	gid_t gid;
};

/* workspace_create_owned() for the manager's own uid and gid (an unprivileged manager, whose
 * sandboxes run as itself). */
int workspace_create(const char *volume, const char *identity, const char *session, const char *repo,
		     const char *branch, struct workspace *ws, struct sb_err *err);

/* Create the session's workspace. repo is an absolute path, a file:///path URL or an https://
 * URL (no credentials in it). branch NULL means "sandbox/<session>"; an existing branch is
 * checked out, a new one starts at the base clone's HEAD. The base clone is made once per identity
 * and repository and reused by later sessions. The repository's configuration is checked before
 * cloning (local sources), on the base clone, and again after the worktree is added.
 * The identity's directories are made closed (volume_closed_check's modes), the worktree 0700.
 * On failure nothing this call made remains (the identity's four empty directories excepted). */
int workspace_create_owned(const char *volume, const char *identity, const char *session, const char *repo,
			   const char *branch, const struct workspace_owner *owner, struct workspace *ws,
			   struct sb_err *err);

/* Rebuild the struct of an existing workspace from the volume (a restarted manager), then
 * workspace_recheck() it. */
int workspace_open(const char *volume, const char *identity, const char *session, struct workspace *ws,
		   struct sb_err *err);

/* Called before each sandbox is prepared: the refusal check again (config, this worktree's config,
 * alternates), the sweep (workspace_sweep) of every worktree's metadata and the shared refs, the
 * ownership pointers between worktree and metadata, and the scratch folder (recreated when a
 * command removed it). What another session planted never refuses this one. */
int workspace_recheck(const struct workspace *ws, struct sb_err *err);

/* The sweep after each call (and inside create and recheck): a symbolic link, FIFO, socket or
 * device node in the base clone repo_dir's shared refs/, logs/, packed-refs.d/, or in the metadata
 * worktrees/<worktree_name>/ (NULL: every worktree's), is removed by descriptor and logged as
 * planted by who ("a command of session S (exec E)"); a worktree's metadata is logged with its own
 * session. git makes none of these there. Returns 0, or -1 with err (the sweep could not run). */
int workspace_sweep(const char *repo_dir, const char *worktree_name, const char *who, struct sb_err *err);

/* Remove the worktree (`git worktree remove --force --force`, then `git worktree prune`) and,
 * unless keep_branch, its branch. The base clone stays for the identity's other sessions.
 * The CALLER must hold evidence that the session's sandbox is gone, all its processes included
 * (DESIGN.md invariant 9): this function cannot tell, and a live writer would race the removal. */
int workspace_delete(const struct workspace *ws, bool keep_branch, bool *branch_kept, struct sb_err *err);

void workspace_free(struct workspace *ws);

/* ---- the mount plan of a session (mount_plan.h): built from its workspace ---- */

int mount_plan_build(const struct workspace *ws, struct mount_plan *plan, struct sb_err *err);

/* ---- the volume probe, run once when the manager starts ---- */

/* Check that the volume provides what git and the manager rely on: exclusive creation (O_EXCL,
 * git's lock files), atomic rename over an existing file, and an fsync'd write that reads back.
 * Refuses with a message naming the property that failed. */
int volume_probe(const char *volume, struct sb_err *err);

/* The owner of an identity's files (struct workspace_owner), by its name: 0, or -1 with err. */
typedef int (*workspace_owner_fn)(void *ctx, const char *identity, struct workspace_owner *out, struct sb_err *err);

/* The volume is closed (checked at start, beside the probe): the volume, identities/ and every
 * identity's directory give others search at most (no read or write bit for group or others: no one
 * else lists identities or sessions); each identity's repositories/ and workspaces/ belong to its
 * owner's group (owner_of) with no bit for others and none but search for the group; private-state/
 * and provider-auth/ 0700; every worktree under workspaces/ has no bit for group or others. Refuses
 * with the first path that is not, and the command that fixes it. */
int volume_closed_check(const char *volume, workspace_owner_fn owner_of, void *ctx, struct sb_err *err);

#endif
