/* The Linux calls the agent makes that glibc 2.36 wraps and musl 1.2.3 does not: the new mount API
 * (open_tree, move_mount, mount_setattr, fsopen, fsconfig, fsmount), renameat2 and statx.
 *
 * Why the agent is built against musl at all (issue 32, docs/performance.md): glibc's start asks the
 * CPU for its caches with dozens of `cpuid`s, each an exit to the hypervisor in a virtual machine,
 * and `sandbox-agent exec` is one process per command.
 *
 * Against glibc this header adds nothing: glibc's own wrappers and constants (<sys/mount.h>,
 * <sys/stat.h>, <stdio.h>) are used. Against musl, each wrapper below is the bare system call with
 * the kernel's own types and constants (the uapi headers), so the agent's code is the same text for
 * both; a wrapper does nothing but pass its arguments and return the kernel's answer (-1 and errno,
 * as syscall() does). Include it after the system headers. */
#ifndef SB_LINUX_CALLS_H
#define SB_LINUX_CALLS_H

#ifndef __GLIBC__

#include <fcntl.h>
#include <stddef.h>
#include <sys/syscall.h>
#include <unistd.h>

/* The mount API's types and flags (struct mount_attr, MOUNT_ATTR_*, OPEN_TREE_*, MOVE_MOUNT_*,
 * FSOPEN_*, FSMOUNT_*, FSCONFIG_*). <linux/mount.h> repeats musl's MS_* macros with the same values. */
#include <linux/mount.h>
/* RENAME_NOREPLACE. */
#include <linux/fs.h>
/* struct statx and STATX_*. */
#include <linux/stat.h>

static inline int open_tree(int dfd, const char *path, unsigned int flags)
{
	return (int)syscall(SYS_open_tree, dfd, path, flags);
}

static inline int move_mount(int from_dfd, const char *from_path, int to_dfd, const char *to_path,
			     unsigned int flags)
{
	return (int)syscall(SYS_move_mount, from_dfd, from_path, to_dfd, to_path, flags);
}

static inline int mount_setattr(int dfd, const char *path, unsigned int flags, struct mount_attr *attr,
				size_t size)
{
	return (int)syscall(SYS_mount_setattr, dfd, path, flags, attr, size);
}

static inline int fsopen(const char *fsname, unsigned int flags)
{
	return (int)syscall(SYS_fsopen, fsname, flags);
}

static inline int fsconfig(int fd, unsigned int cmd, const char *key, const void *value, int aux)
{
	return (int)syscall(SYS_fsconfig, fd, cmd, key, value, aux);
}

static inline int fsmount(int fd, unsigned int flags, unsigned int attr_flags)
{
	return (int)syscall(SYS_fsmount, fd, flags, attr_flags);
}

static inline int renameat2(int olddfd, const char *oldpath, int newdfd, const char *newpath,
			    unsigned int flags)
{
	return (int)syscall(SYS_renameat2, olddfd, oldpath, newdfd, newpath, flags);
}

static inline int statx(int dfd, const char *path, int flags, unsigned int mask, struct statx *buf)
{
	return (int)syscall(SYS_statx, dfd, path, flags, mask, buf);
}

#endif /* !__GLIBC__ */
#endif
