/* Mounts made from descriptors: the one copy of the steps that build a sandbox's view, shared by the
 * agent's per-command init (sandbox-agent/mounts.c) and the process backend's sandbox init
 * (sandbox-agent/sandbox_init.c). A path is resolved once, without following any symbolic link, into a
 * descriptor; the mount is then attached to that descriptor, so nothing renamed or swapped afterwards
 * can redirect it (rule R1/R3 of docs/isolation.md). Safe between clone() and execve(): no
 * allocation, no stdio, every syscall checked. */
#ifndef SB_MOUNTFD_H
#define SB_MOUNTFD_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "error.h"

/* Mount attributes (MOUNT_ATTR_* of <sys/mount.h>) every bind and tmpfs of a view gets unless it
 * must hold device nodes or executables. */
#define MFD_ATTR_SAFE (MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV)

/* openat2 that follows no symbolic link (nor /proc magic link) anywhere in path and, from a
 * directory descriptor (not AT_FDCWD), nothing that would resolve outside it. O_CLOEXEC is added.
 * Returns the descriptor or -1 with errno. */
int mfd_open_nofollow(int dirfd, const char *path, uint64_t flags);

/* Open as much of path (absolute, no '.', '..' or empty component) as the caller may search, the way
 * mfd_open_nofollow does: an O_PATH descriptor of the deepest object reached, *rest set to the part
 * left below it ("" when all of path was opened). A search refused (EACCES) stops the walk; any
 * other failure, a link among them, returns -1 with errno. The rest is for another credential to
 * open beneath the descriptor (sandbox init, sandbox_init.c sources_open()). */
int mfd_open_reachable(const char *path, const char **rest);

/* Open the directory `rel` (relative, may be empty) beneath root, creating each missing component
 * (0755) and reopening each step without following links: a link planted on the way is refused
 * (ELOOP), never used to create something elsewhere. Returns an O_PATH descriptor or -1 with errno. */
int mfd_dir_make_beneath(int root, const char *rel);

/* Make (or find) the mount point `path` (absolute, plain) beneath root: a directory, or an empty
 * file for a file bind; opened without following links. Returns the descriptor or -1 with err. */
int mfd_mountpoint_make(int root, const char *path, bool dir, struct sb_err *err);

/* Attach the detached mount mnt at path beneath root (made as mfd_mountpoint_make does). */
int mfd_attach(int mnt, int root, const char *path, bool dir, struct sb_err *err);

/* A new filesystem instance (tmpfs, proc), detached until attached. mode may be NULL; size_bytes 0
 * means the filesystem's default. A sized tmpfs also gets an inode bound (one per 4 KiB of size,
 * at least 1024): inodes cost kernel memory that size= alone does not count. Returns the mount's
 * descriptor or -1 with err; `what` names it in messages. */
int mfd_fs_new(const char *type, const char *mode, uint64_t size_bytes, uint64_t attrs, const char *what,
	       struct sb_err *err);

/* A detached recursive copy of the mount tree at the directory or file held by src (a descriptor
 * from mfd_open_nofollow), with attrs (MOUNT_ATTR_*) set on the whole copy before anyone can see it. */
int mfd_clone_tree(int src, uint64_t attrs, const char *what, struct sb_err *err);

/* Read-only, on this mount only (what is mounted inside keeps its own mode). */
int mfd_seal(int mnt, const char *what, struct sb_err *err);

/* The first step of a new mount namespace: every mount private, recursively, so that nothing
 * mounted from here on propagates to the host's peer groups. */
int mfd_tree_private(struct sb_err *err);

/* The last step: enter cwd (absolute) once the view is final, so that it resolves in the
 * sandbox's world, and refuse one that resolves elsewhere (EXDEV). */
int mfd_cwd_enter(const char *cwd, struct sb_err *err);

#endif
