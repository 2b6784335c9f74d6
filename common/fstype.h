/* Which filesystems are the kernel's own (rule N7 of docs/isolation.md): told by the statfs f_type of
 * an opened descriptor, from one table, never by the path it was reached through. Pure lookups and
 * fstatfs only: safe between clone() and execve() (no allocation, no stdio). */
#ifndef SB_FSTYPE_H
#define SB_FSTYPE_H

#include "error.h"

/* The name of the kernel filesystem whose statfs f_type is f_type ("proc", "sysfs", "cgroup2", ...),
 * or NULL when it is not one of the kernel's. */
const char *fstype_kernel_name(unsigned long f_type);

/* The filesystem holding fd: 1 with *name set when it is a kernel filesystem, 0 when it is not, -1 with
 * err when fstatfs fails (what: the path, for the message). */
int fstype_kernel_fd(int fd, const char *what, const char **name, struct sb_err *err);

#endif
