/* Landlock rulesets (see landlock.h). Never handles filesystem access: the mount view does that.
 * Requires no_new_privs in the caller, as the kernel does. */
#include "landlock.h"

#include <errno.h>
#include <stdbool.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

/* From include/uapi/linux/landlock.h (6.12); declared here because bookworm's headers lack
 * the network rules (6.7) and scopes (6.12). */
#ifndef __NR_landlock_create_ruleset
#define __NR_landlock_create_ruleset 444
#define __NR_landlock_add_rule 445
#define __NR_landlock_restrict_self 446
#endif

struct sb_landlock_ruleset_attr {
	uint64_t handled_access_fs;
	uint64_t handled_access_net;
	uint64_t scoped;
};

struct sb_landlock_net_port_attr {
	uint64_t allowed_access;
	uint64_t port;
};

#define SB_LANDLOCK_CREATE_RULESET_VERSION (1U << 0)
#define SB_LANDLOCK_RULE_NET_PORT 2
#define SB_LANDLOCK_ACCESS_NET_CONNECT_TCP (1ULL << 1)
#define SB_LANDLOCK_SCOPE_ABSTRACT_UNIX_SOCKET (1ULL << 0)
#define SB_LANDLOCK_SCOPE_SIGNAL (1ULL << 1)

int landlock_abi(void)
{
	long abi = syscall(__NR_landlock_create_ruleset, NULL, 0, SB_LANDLOCK_CREATE_RULESET_VERSION);

	return abi < 0 ? 0 : (int)abi;
}

static uint64_t scopes_for(int abi)
{
	return abi >= 6 ? SB_LANDLOCK_SCOPE_ABSTRACT_UNIX_SOCKET | SB_LANDLOCK_SCOPE_SIGNAL : 0;
}

static bool port_blocked(uint16_t port, const uint16_t *ports, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (ports[i] == port)
			return true;
	return false;
}

static int ruleset_enforce(int fd, struct sb_err *err)
{
	int rc = (int)syscall(__NR_landlock_restrict_self, fd, 0);

	close(fd);
	if (rc < 0)
		return sb_fail_errno(err, "landlock_restrict_self");
	return 0;
}

int landlock_restrict_ports(int abi, const uint16_t *ports, size_t n, struct sb_err *err)
{
	struct sb_landlock_ruleset_attr attr = {
		.handled_access_net = SB_LANDLOCK_ACCESS_NET_CONNECT_TCP,
		.scoped = scopes_for(abi),
	};
	struct sb_landlock_net_port_attr rule = { .allowed_access = SB_LANDLOCK_ACCESS_NET_CONNECT_TCP };
	int fd;

	if (abi < 4)
		return sb_fail(err, EOPNOTSUPP,
			       "blocking TCP ports needs Landlock ABI 4 (Linux 6.7), this kernel has %d", abi);
	fd = (int)syscall(__NR_landlock_create_ruleset, &attr, sizeof attr, 0);
	if (fd < 0)
		return sb_fail_errno(err, "landlock_create_ruleset");
	/* An allow-list: every port but the blocked ones. Port 0 is included so that an
	 * unbound "connect to port 0" keeps its normal error. */
	for (uint32_t port = 0; port <= 65535; port++) {
		if (port_blocked((uint16_t)port, ports, n))
			continue;
		rule.port = port;
		if (syscall(__NR_landlock_add_rule, fd, SB_LANDLOCK_RULE_NET_PORT, &rule, 0) < 0) {
			sb_fail_errno(err, "landlock_add_rule for port %u", port);
			close(fd);
			return -1;
		}
	}
	if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0) {
		close(fd);
		return sb_fail_errno(err, "PR_SET_NO_NEW_PRIVS before Landlock");
	}
	return ruleset_enforce(fd, err);
}

int landlock_restrict_scopes(int abi, struct sb_err *err)
{
	struct sb_landlock_ruleset_attr attr = { .scoped = scopes_for(abi) };
	int fd;

	if (attr.scoped == 0)
		return 0;
	fd = (int)syscall(__NR_landlock_create_ruleset, &attr, sizeof attr, 0);
	if (fd < 0)
		return sb_fail_errno(err, "landlock_create_ruleset (scopes)");
	return ruleset_enforce(fd, err);
}
