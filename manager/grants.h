/* Authority snapshots: the credentials of a session's grants, materialised for one sandbox
 * generation in its private directory and mounted read-only outside the worktree. The snapshot
 * never changes inside a live sandbox; a change of grants retires the sandbox (sessions.c).
 * Never copies the manager's own credentials, provider-auth/ or another session's grants. */
#ifndef SB_GRANTS_H
#define SB_GRANTS_H

#include <jansson.h>
#include <limits.h>
#include <sys/types.h>

#include "error.h"

struct snapshot {
	char dir[PATH_MAX];           /* <private_dir>/credentials */
	char kubeconfig[8192];        /* KUBECONFIG for every call: the kubernetes grants, ':'-joined */
};

/* Materialise grants ({"resource": "access"}) declared in resources ({"NAME": "BROKER:ARG"})
 * under private_dir; files are 0400, owned by uid/gid (the sandbox's ids). */
int snapshot_make(const char *private_dir, json_t *grants, json_t *resources, uid_t uid, gid_t gid,
		  struct snapshot *out, struct sb_err *err);

#endif
