/* Privileged walks of trees a sandbox can write (issue 13, rule R3): handing a tree to the
 * sandbox's uid and removing a tree, by descriptor only. Every object is opened relative to its
 * held parent with openat2 RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS |
 * RESOLVE_NO_XDEV, inspected with fstat on that descriptor and changed through it (fchownat
 * AT_EMPTY_PATH) or unlinked by name relative to the held parent. Must never resolve a full path
 * inside the tree, follow a symbolic link, or cross a mount. */
#ifndef SB_FSTREE_H
#define SB_FSTREE_H

#include <stddef.h>
#include <sys/stat.h>
#include <sys/types.h>

#include "error.h"

/* Directories below the start a walk descends into; one descriptor is held per level. Deeper
 * trees are refused (ELOOP), never walked in part. */
#define FSTREE_DEPTH_MAX 128

/* What a walk did; zero it before the call. visit, when set, sees every object the walk opened
 * (the start included), after its fstat: the tests use it to prove what was reached. */
struct fstree_report {
	size_t entries;     /* objects opened and inspected (removal: and then removed) */
	size_t changed;     /* chown: of them, given the new owner */
	size_t hardlinked;  /* chown: non-directories with more than one link, left alone (fstree.c) */
	size_t mounts;      /* chown: mount points found and not crossed (removal refuses them) */
	void (*visit)(void *arg, const struct stat *st);
	void *visit_arg;
};

/* Open the directory path for a walk: O_DIRECTORY, no symbolic link in any component, no magic
 * link. at is AT_FDCWD with an absolute path the CALLER trusts (no ancestor writable by a
 * sandbox: say why where it is called), or a held directory, then path must stay beneath it.
 * Returns the descriptor (close-on-exec) or -1 with err. */
int fstree_open_dir(int at, const char *path, struct sb_err *err);

/* Give dirfd's directory and everything beneath it to uid:gid, never leaving its filesystem.
 * Symbolic links are chowned themselves (through their own O_PATH descriptor), never their
 * target. report may be NULL. Returns 0, or -1 with err (the tree then is partly handed over). */
int fstree_chown_beneath(int dirfd, uid_t uid, gid_t gid, struct fstree_report *report, struct sb_err *err);

/* Remove parent_fd/name and, when it is a directory, everything beneath it, without following a
 * symbolic link (a link is removed, not its target) or crossing a mount (refused: EXDEV).
 * name is one component. Directories of the caller's own that lack u+rwx are opened up first.
 * report may be NULL. Returns 0 (also when name does not exist), or -1 with err. */
int fstree_remove_beneath(int parent_fd, const char *name, struct fstree_report *report, struct sb_err *err);

/* fstree_remove_beneath for an absolute path: its parent is opened with fstree_open_dir, so the
 * same trust rule applies to the parent's path. */
int fstree_remove_path(const char *path, struct sb_err *err);

#endif
