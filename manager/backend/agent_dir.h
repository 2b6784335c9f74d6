/* What every backend does the same way for a sandbox's agent: the manager-owned private directory
 * (tls/ read-only, state/ and sock/ read-write for the sandbox's uid), the agent's `serve` command
 * line and environment, and the readiness probe on its unix socket. A backend only decides how the
 * agent gets to see those paths (a root built from the plan, a container's bind mounts); the paths
 * inside are always the same as on the host, so the agent's arguments never differ. */
#ifndef SB_AGENT_DIR_H
#define SB_AGENT_DIR_H

#include <limits.h>
#include <stdint.h>
#include <sys/types.h>

#include "backend.h"
#include "error.h"

#define AGENT_SANDBOX_PATH "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

struct agent_dir {
	char private_dir[PATH_MAX];     /* canonical */
	char tls[PATH_MAX + 8], state[PATH_MAX + 8], sock_dir[PATH_MAX + 8];
	char sock[PATH_MAX + 32], listen[PATH_MAX + 40];
	char cert[PATH_MAX + 32], key[PATH_MAX + 32], ca[PATH_MAX + 32];
	char log[PATH_MAX + 16];        /* agent.log: the process backend's agent writes there */
	char credentials[PATH_MAX];     /* canonical credentials_dir, "" when the spec has none */
	char generation[24];
	uid_t host_uid;                 /* the sandbox's uid and gid on the host, never 0 */
	gid_t host_gid;
	char env_log_level[64];
	char *argv[20];                 /* "sandbox-agent", "serve", ...: argv[0] is a name only */
	char *envp[5];
};

/* Canonical paths, the sandbox's ownership of what it writes (a root manager hands tls/, state/,
 * sock/ and the plan's writable entries to the sandbox's uid), the checks the agent would make
 * anyway, and no stale socket of an earlier generation. Then the agent's argv and envp. */
int agent_dir_prepare(struct agent_dir *d, const struct sandbox_spec *spec, struct sb_err *err);

/* Is the agent serving on its socket? 1: yes; 0: not yet (no listener, or dropped unaccepted). */
int agent_serving(const char *sock_path, int64_t deadline_ms);
/* The same probe over TCP, for an agent listening on a pod's IP (numeric IPv4 only). */
int agent_serving_inet(const char *ipv4, uint16_t port, int64_t deadline_ms);

#endif
