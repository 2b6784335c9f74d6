/* Landlock rulesets (see landlock.h). Filesystem access is the mount view's, but for one right:
 * in `exec`'s read-only world, opening for write outside the writable roots (a read-only mount
 * lets a FIFO be opened for writing). Requires no_new_privs in the caller, as the kernel does. */
#include "landlock.h"

#include <errno.h>
#include <fcntl.h>
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

struct sb_landlock_path_beneath_attr {
	uint64_t allowed_access;
	int32_t parent_fd;
} __attribute__((packed));

#define SB_LANDLOCK_CREATE_RULESET_VERSION (1U << 0)
#define SB_LANDLOCK_RULE_PATH_BENEATH 1
#define SB_LANDLOCK_ACCESS_FS_WRITE_FILE (1ULL << 1)
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

/* One layer: scopes (when asked and available) and, for the read-only world, opening for write
 * allowed only beneath roots. A FIFO or device outside them then stays closed to writing, whatever
 * its mode (EACCES). The roots are opened here, in the command's final view. */
int landlock_restrict_command(int abi, bool scopes, const char *const *write_roots, size_t n, struct sb_err *err)
{
	struct sb_landlock_ruleset_attr attr = {
		.handled_access_fs = n > 0 && abi >= 1 ? SB_LANDLOCK_ACCESS_FS_WRITE_FILE : 0,
		.scoped = scopes ? scopes_for(abi) : 0,
	};
	struct sb_landlock_path_beneath_attr rule = { .allowed_access = SB_LANDLOCK_ACCESS_FS_WRITE_FILE };
	int fd;

	if (attr.handled_access_fs == 0 && attr.scoped == 0)
		return 0;
	fd = (int)syscall(__NR_landlock_create_ruleset, &attr, sizeof attr, 0);
	if (fd < 0)
		return sb_fail_errno(err, "landlock_create_ruleset (command)");
	for (size_t i = 0; i < n && attr.handled_access_fs != 0; i++) {
		rule.parent_fd = open(write_roots[i], O_PATH | O_DIRECTORY | O_CLOEXEC);
		if (rule.parent_fd < 0 ||
		    syscall(__NR_landlock_add_rule, fd, SB_LANDLOCK_RULE_PATH_BENEATH, &rule, 0) < 0) {
			sb_fail_errno(err, "allowing writes beneath %s", write_roots[i]);
			if (rule.parent_fd >= 0)
				close(rule.parent_fd);
			close(fd);
			return -1;
		}
		close(rule.parent_fd);
	}
	return ruleset_enforce(fd, err);
}
