/* What the agent reads but did not write, when it lies under a read-only mount: a Kubernetes
 * Secret volume (the agent's certificate, key and receipt key) belongs to root, with the group
 * of the pod's fsGroup and the Secret's mode, and cannot belong to the agent's uid. The rule
 * here accepts exactly those files, and protects what the own-uid rule protects (sealed.c). */
#ifndef SB_SEALED_H
#define SB_SEALED_H

#include <stdbool.h>
#include <sys/stat.h>

#include "error.h"

/* fd (opened, with st its fstat) is acceptable although not this uid's own: on a read-only
 * mount, owned by root or this uid, not writable by group or others, and, for a file, readable
 * by no one but this uid and this gid. 0, or -1 with err saying which part failed (what names
 * the object in the message). */
int sealed_check(int fd, const struct stat *st, const char *what, struct sb_err *err);

#endif
