/* The repository refusal check: configuration that can run programs or pull in other
 * configuration, and alternates that reach outside the identity's repositories. Reads config
 * files only through git's own parser (`git config --file F --no-includes --list -z`); never
 * follows an include and never runs anything a repository names. */
#ifndef SB_GITCONFIG_H
#define SB_GITCONFIG_H

#include <stddef.h>

#include "error.h"

/* One refused item: a config key, or an alternates entry. */
struct gitconfig_finding {
	char *what;   /* "config key include.path", "objects/info/alternates entry /x" */
	char *file;   /* the file it was found in */
	const char *why; /* "can load other configuration; remove it or use a clone without it" */
};

struct gitconfig_findings {
	struct gitconfig_finding *v;
	size_t n;
};

/* Why a config key (as git lists it: section and name lower-case) with this value (NULL for a
 * key without "= value") is refused, or NULL when it is allowed. Pure; exposed for tests. */
const char *gitconfig_key_refused(const char *key, const char *value);

/* The worktree argument of gitconfig_scan(): no linked worktree's config.worktree is read (a base
 * clone before the session's worktree exists). */
#define GITCONFIG_NO_WORKTREE ""

/* Scan the repository whose common git dir is common_dir: its config and its config.worktree;
 * worktrees/<worktree>/config.worktree (worktree NULL: every linked worktree's, for a source
 * repository that no session owns; a session's check names its own worktree only, so one session's
 * metadata never decides another's); and, when alternates_root is not NULL, every entry of
 * objects/info/alternates, which must resolve to a directory inside alternates_root.
 * Returns 0 when the scan completed (found->n may be > 0), -1 when it could not be done. */
int gitconfig_scan(const char *common_dir, const char *alternates_root, const char *worktree,
		   struct gitconfig_findings *found, struct sb_err *err);

/* gitconfig_scan() as a verdict: -1 with "repository refused: config key K <why> (in FILE)",
 * plus the names of any further refused keys, when anything is refused or the scan fails. */
int gitconfig_check(const char *common_dir, const char *alternates_root, const char *worktree,
		    struct sb_err *err);

void gitconfig_findings_free(struct gitconfig_findings *found);

/* The value of key in one config file (no includes): 0 with *value malloc'd, 1 when the key is
 * not set (*value NULL), -1 on error. */
int gitconfig_get(const char *file, const char *key, char **value, struct sb_err *err);

#endif
