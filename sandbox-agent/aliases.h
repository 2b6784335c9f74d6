/* Where else a directory shows, and what contains what, decided by identity: the other mounts of a
 * filesystem that show a path (an operator's bind mount, a second mount of the same device), read from
 * /proc/self/mountinfo; and nesting by walking ".." from held descriptors, never by comparing path strings
 * (rule R1 of docs/isolation.md). Agent side, before clone(): it allocates; init never calls it. */
#ifndef SB_ALIASES_H
#define SB_ALIASES_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

#include "error.h"

/* One line of mountinfo, its paths decoded (\040 and the other octal escapes). */
struct mountinfo_line {
	int id;
	unsigned major, minor;
	const char *root;  /* the path inside its filesystem that the mount shows */
	const char *point; /* where it is mounted, in this mount namespace */
};

struct mountinfo {
	struct mountinfo_line *lines;
	size_t n;
	char *text; /* the decoded text the lines point into */
	size_t text_len;
};

/* Parse len bytes of mountinfo text (proc_pid_mountinfo(5)). A line that does not have the five first
 * fields is an error (EINVAL): never a partial table that could leave a mount out. */
int mountinfo_parse(const char *text, size_t len, struct mountinfo *mi, struct sb_err *err);

/* This process's /proc/self/mountinfo, read whole now. */
int mountinfo_read(struct mountinfo *mi, struct sb_err *err);

void mountinfo_free(struct mountinfo *mi);

/* A copy of src that owns its own text and lines (src is left as it is). */
int mountinfo_copy(struct mountinfo *dst, const struct mountinfo *src, struct sb_err *err);

/* Called with each candidate path; a non-zero return stops the walk and is returned. */
typedef int (*alias_fn)(const char *alias, void *arg, struct sb_err *err);

/* Every other path at which the object at `path` (absolute, resolved without links, reached through the
 * mount with id mnt_id, statx STATX_MNT_ID) shows: for each other mount of the same device whose root is
 * that object's path inside the filesystem or one of its ancestors, its mount point plus the rest of the
 * path. Candidates only: a mount covered by another, or a covered component on the way, shows something
 * else there, so the caller opens each and compares identities. -1 with ENOENT when mnt_id is not in the
 * table (the caller cannot know where else the object shows: fail closed). */
int aliases_each(const struct mountinfo *mi, int mnt_id, const char *path, alias_fn fn, void *arg,
		 struct sb_err *err);

/* The mount id of what fd holds (the first field of its mountinfo line). */
int aliases_mount_id(int fd, int *mnt_id, struct sb_err *err);

/* A file or directory by identity. */
struct ident {
	dev_t dev;
	ino_t ino;
};

/* The identities from a directory up to the root: [0] is the directory itself, each next one what
 * ".." of the previous opens (at a mount's root that is the mount point's parent, so a bind mount's root
 * leads up through the tree it is mounted in, and is itself the identity of the directory it shows). */
struct ident_chain {
	struct ident *v;
	size_t n;
};

#define IDENT_CHAIN_MAX 4096 /* deeper than any real tree: beyond it the walk fails closed (ELOOP) */

/* Walk from the directory held by dirfd (not consumed). */
int ident_chain_walk(int dirfd, struct ident_chain *c, struct sb_err *err);

bool ident_chain_holds(const struct ident_chain *c, struct ident id);

void ident_chain_free(struct ident_chain *c);

#endif
