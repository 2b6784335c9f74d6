/* The mount plan: what a session's sandbox sees, ONE plan for every backend. The workspace builds
 * it (workspace.h mount_plan_build); a backend reads it and includes nothing else of the workspace
 * (docs/architecture.md, the layering rules). */
#ifndef SB_MOUNT_PLAN_H
#define SB_MOUNT_PLAN_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

#include "error.h"

enum mount_mode {
	MOUNT_RW,     /* bind mount, writable */
	MOUNT_RO,     /* bind mount, read-only */
	MOUNT_HIDDEN, /* an empty read-only directory (or empty file) mounted over the path */
	MOUNT_TMPFS,  /* an empty writable tmpfs */
};

struct mount_entry {
	char *source;          /* host path */
	char *target;          /* path inside the sandbox (always equal to source for workspaces) */
	enum mount_mode mode;
	bool is_file;          /* a single file bound over a file, not a directory */
	const char *why;
};

struct mount_plan {
	struct mount_entry *entries; /* in mount order: a parent always comes before its children */
	size_t n;
	char *workdir;               /* where every command starts: the worktree */
	char *scratch;               /* TMPDIR, TMP and TEMP */
};

void mount_plan_free(struct mount_plan *plan);
const char *mount_mode_name(enum mount_mode mode);
/* {"workdir": ..., "env": {"TMPDIR": ...}, "mounts": [{"source", "target", "mode", "type", "why"}]};
 * NULL when memory runs out. */
json_t *mount_plan_to_json(const struct mount_plan *plan);
int mount_plan_print(const struct mount_plan *plan, FILE *out, struct sb_err *err);

/* One anchor of an entry (mount_plan_anchors): source is the host path of the directory anchor,
 * which the backend mounts writable onto itself; 0, or -1 with err. */
typedef int (*mount_anchor_fn)(void *ctx, const char *source, const char *anchor, struct sb_err *err);
/* For the entry at target: each directory between it and the writable entry that holds it, not
 * yet in seen (an object keyed by anchor, which this fills), to add() in order from the root, so a
 * backend mounts every anchor before the entry inside it. 0, or -1 with err. */
int mount_plan_anchors(const struct mount_plan *plan, const char *target, json_t *seen, mount_anchor_fn add,
		       void *ctx, struct sb_err *err);

#endif
