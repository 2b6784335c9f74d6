/* The command's syscall filter (see seccomp.h). A deny list on top of the other layers: each
 * rule says what it closes. The filter never applies to the agent, nor to a fresh init; a prebuilt
 * init (serve's warm path) loads it into itself once it holds no privilege, before its call exists, so
 * that its command inherits it (init.c init_main(), docs/isolation.md). */
#include "seccomp.h"

#include <errno.h>
#include <stdbool.h>
#include <linux/ioprio.h>
#include <linux/sched.h>
#include <linux/seccomp.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <seccomp.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#ifndef IPPROTO_MPTCP
#define IPPROTO_MPTCP 262
#endif
#ifndef TCP_FASTOPEN_CONNECT
#define TCP_FASTOPEN_CONNECT 30
#endif

/* Denied outright with EPERM. */
static const char *const denied[] = {
	/* The mount view is the boundary's; a command must not change it (or undo a hiding). */
	"mount", "umount2", "pivot_root", "chroot", "move_mount", "open_tree", "fsopen", "fsconfig",
	"fsmount", "fspick", "mount_setattr",
	/* Joining other namespaces. */
	"setns",
	/* Reaching into other processes, init above all. process_madvise and process_mrelease
	 * name their target by pidfd, which BPF cannot tell from one of the caller's own: a
	 * pidfd_open(1) would let them advise (page out) or reap init's memory. */
	"ptrace", "process_vm_readv", "process_vm_writev", "pidfd_getfd", "kcmp", "process_madvise",
	"process_mrelease",
	/* Large kernel attack surface that no shell command needs. */
	"bpf", "perf_event_open", "keyctl", "add_key", "request_key", "io_uring_setup",
	"io_uring_enter", "io_uring_register", "userfaultfd", "open_by_handle_at",
	"name_to_handle_at", "lookup_dcookie", "fanotify_init",
	/* The machine itself. */
	"reboot", "kexec_load", "kexec_file_load", "init_module", "finit_module", "delete_module",
	"acct", "swapon", "swapoff", "syslog",
};

static int rule_add(scmp_filter_ctx ctx, int errnum, const char *name, unsigned n,
		    const struct scmp_arg_cmp *args, struct sb_err *err)
{
	int nr = seccomp_syscall_resolve_name(name);
	int rc;

	/* A syscall this architecture lacks cannot be called: nothing to deny. */
	if (nr == __NR_SCMP_ERROR)
		return 0;
	rc = seccomp_rule_add_array(ctx, SCMP_ACT_ERRNO((uint32_t)errnum), nr, n, args);
	if (rc < 0)
		return sb_fail(err, -rc, "seccomp: adding the rule for %s", name);
	return 0;
}

/* Calls that change another process's scheduling, priority, CPU affinity, I/O priority, resource
 * limits or memory placement. The kernel lets them reach any process of the caller's uid, init
 * included (issue 13, break #8: init made SCHED_IDLE, reniced, pinned to one CPU, given idle I/O,
 * and with prlimit64 an RLIMIT_CPU that has the kernel kill it). Seccomp cannot know the caller's
 * pid, so only 0, "myself", stays allowed; a process naming itself or one of its threads by number
 * is refused too (renice -p, taskset -p, pthread_setaffinity_np and pthread_setschedparam on a
 * thread fail with EPERM). Readers (sched_getattr, getpriority, ioprio_get, sched_getaffinity)
 * stay allowed: they change nothing. set_mempolicy, mbind and set_mempolicy_home_node act only on
 * the caller and take no pid.
 * pid_t is an int and the kernel reads the low 32 bits only. These rules refuse any set bit of all
 * 64, which is safe in both directions: (1 << 32) | 1, pid 1 to the kernel, is refused, and
 * (1 << 32), pid 0 to the kernel, is refused as well (fail closed; no libc passes it). */
static int rules_add_other_pids(scmp_filter_ctx ctx, struct sb_err *err)
{
	static const char *const pid_first[] = {
		"prlimit64", "sched_setscheduler", "sched_setparam", "sched_setattr", "sched_setaffinity",
		"migrate_pages", "move_pages",
	};
	struct scmp_arg_cmp other_pid = SCMP_A0(SCMP_CMP_NE, 0);
	/* setpriority and ioprio_set name their target by (which, who). who 0 is the caller, or the
	 * caller's own process group, which never holds init: the command starts with setsid()
	 * (init.c command_main()) and cannot join a group of another session. PRIO_USER and
	 * IOPRIO_WHO_USER reach every process of a uid, init included, even with who 0 (the
	 * caller's uid): refused by the `which` bound. ioprio_set's which 0 is EINVAL already. */
	struct scmp_arg_cmp other_who = SCMP_A1(SCMP_CMP_NE, 0);
	struct scmp_arg_cmp prio_user = SCMP_A0(SCMP_CMP_GT, PRIO_PGRP);
	struct scmp_arg_cmp ioprio_user = SCMP_A0(SCMP_CMP_GT, IOPRIO_WHO_PGRP);

	for (size_t i = 0; i < sizeof pid_first / sizeof pid_first[0]; i++)
		if (rule_add(ctx, EPERM, pid_first[i], 1, &other_pid, err) < 0)
			return -1;
	if (rule_add(ctx, EPERM, "setpriority", 1, &other_who, err) < 0 ||
	    rule_add(ctx, EPERM, "setpriority", 1, &prio_user, err) < 0 ||
	    rule_add(ctx, EPERM, "ioprio_set", 1, &other_who, err) < 0 ||
	    rule_add(ctx, EPERM, "ioprio_set", 1, &ioprio_user, err) < 0)
		return -1;
	return 0;
}

static int rules_add_conditional(scmp_filter_ctx ctx, struct sb_err *err)
{
	/* A nested user namespace would hand the command a full capability set over a fresh
	 * namespace tree; nsjail and bubblewrap (--disable-userns) close this the same way. */
	struct scmp_arg_cmp newuser0 = SCMP_A0(SCMP_CMP_MASKED_EQ, CLONE_NEWUSER, CLONE_NEWUSER);
	/* ioctl's command is 32 bits in the kernel: compare the low 32 bits only, or a command
	 * with high bits set would slip past the rule. */
	struct scmp_arg_cmp tiocsti = SCMP_A1(SCMP_CMP_MASKED_EQ, 0xFFFFFFFFu, TIOCSTI);
	struct scmp_arg_cmp tioclinux = SCMP_A1(SCMP_CMP_MASKED_EQ, 0xFFFFFFFFu, TIOCLINUX);
	/* Landlock's TCP connect rule does not see MPTCP subflows nor TCP Fast Open, which
	 * connects from sendto/sendmsg without calling connect(). int arguments are compared on
	 * their low 32 bits, as the kernel reads them: a full 64-bit compare would let
	 * (1 << 32) | 262 through as "not MPTCP" while the kernel creates an MPTCP socket. */
	struct scmp_arg_cmp mptcp = SCMP_A2(SCMP_CMP_MASKED_EQ, 0xFFFFFFFFu, IPPROTO_MPTCP);
	struct scmp_arg_cmp fastopen3 = SCMP_A3(SCMP_CMP_MASKED_EQ, MSG_FASTOPEN, MSG_FASTOPEN);
	struct scmp_arg_cmp fastopen2 = SCMP_A2(SCMP_CMP_MASKED_EQ, MSG_FASTOPEN, MSG_FASTOPEN);
	struct scmp_arg_cmp tfo_connect[2] = { SCMP_A1(SCMP_CMP_MASKED_EQ, 0xFFFFFFFFu, IPPROTO_TCP),
					       SCMP_A2(SCMP_CMP_MASKED_EQ, 0xFFFFFFFFu, TCP_FASTOPEN_CONNECT) };

	if (rule_add(ctx, EPERM, "clone", 1, &newuser0, err) < 0 ||
	    rule_add(ctx, EPERM, "unshare", 1, &newuser0, err) < 0 ||
	    rule_add(ctx, EPERM, "ioctl", 1, &tiocsti, err) < 0 ||
	    rule_add(ctx, EPERM, "ioctl", 1, &tioclinux, err) < 0 ||
	    rule_add(ctx, EPERM, "socket", 1, &mptcp, err) < 0 ||
	    rule_add(ctx, EPERM, "sendto", 1, &fastopen3, err) < 0 ||
	    rule_add(ctx, EPERM, "sendmmsg", 1, &fastopen3, err) < 0 ||
	    rule_add(ctx, EPERM, "sendmsg", 1, &fastopen2, err) < 0 ||
	    rule_add(ctx, EPERM, "setsockopt", 2, tfo_connect, err) < 0)
		return -1;
	/* clone3 passes its flags in memory that BPF cannot read; ENOSYS makes glibc and others
	 * fall back to clone(), whose flags the rule above inspects. */
	return rule_add(ctx, ENOSYS, "clone3", 0, NULL, err);
}

static int filter_build(scmp_filter_ctx ctx, struct sb_err *err)
{
	int rc;

	/* Only the native ABI: a 32-bit syscall (int 0x80) or x32 would dodge every rule that
	 * names syscall numbers, so it kills the process. */
	rc = seccomp_attr_set(ctx, SCMP_FLTATR_ACT_BADARCH, SCMP_ACT_KILL_PROCESS);
	if (rc < 0)
		return sb_fail(err, -rc, "seccomp: setting the bad-architecture action");
	/* The syscall number dispatched through a binary tree, not a chain of comparisons: the same
	 * rules, decided in at most 14 instructions instead of 65. The kernel walks the program for
	 * every syscall number each time a command loads it (its action cache), so the load costs
	 * about half as much (docs/performance.md; test_seccomp's test_dispatch_is_a_tree). */
	rc = seccomp_attr_set(ctx, SCMP_FLTATR_CTL_OPTIMIZE, 2);
	if (rc < 0)
		return sb_fail(err, -rc, "seccomp: asking for a binary-tree dispatch");
	for (size_t i = 0; i < sizeof denied / sizeof denied[0]; i++)
		if (rule_add(ctx, EPERM, denied[i], 0, NULL, err) < 0)
			return -1;
	if (rules_add_other_pids(ctx, err) < 0)
		return -1;
	return rules_add_conditional(ctx, err);
}

/* `exec`'s read-only world is a copy of the host's view, and a read-only mount does nothing for
 * a socket: connect() to a pathname unix socket needs only write permission on it, which the
 * command's uid has for every socket the agent's user serves (a user's systemd, D-Bus, a rootless
 * podman, another manager's control socket) and, through its groups, for sockets such as
 * docker.sock: a way out of the boundary. So there a command cannot create a unix socket at all
 * (abstract names included); socketpair() stays, for stream pairs only, which reach nothing: any
 * other pair (datagram, seqpacket, raw) could be disconnected and sendto() a pathname address. int arguments compared on their low 32
 * bits, as the kernel reads them; SOCK_CLOEXEC and SOCK_NONBLOCK are above the type's 4 bits. */
static int rules_add_unix_sockets(scmp_filter_ctx ctx, struct sb_err *err)
{
	struct scmp_arg_cmp unix_domain = SCMP_A0(SCMP_CMP_MASKED_EQ, 0xFFFFFFFFu, AF_UNIX);

	if (rule_add(ctx, EPERM, "socket", 1, &unix_domain, err) < 0)
		return -1;
	/* An allow-list in effect: every type value but SOCK_STREAM is refused, not only the names
	 * of the datagram kinds (the kernel turns an AF_UNIX SOCK_RAW into a datagram socket).
	 * libseccomp has no "masked not equal", hence one rule per other value of the 4 type bits. */
	for (unsigned type = 0; type <= 0xF; type++) {
		struct scmp_arg_cmp pair[2] = { SCMP_A0(SCMP_CMP_MASKED_EQ, 0xFFFFFFFFu, AF_UNIX),
						SCMP_A1(SCMP_CMP_MASKED_EQ, 0xFu, type) };

		if (type != SOCK_STREAM && rule_add(ctx, EPERM, "socketpair", 2, pair, err) < 0)
			return -1;
	}
	return 0;
}

/* libseccomp 2.5 exports BPF only to a descriptor: use a memfd and read it back. */
static int filter_export(scmp_filter_ctx ctx, struct sock_fprog *prog, struct sb_err *err)
{
	struct stat st;
	ssize_t n;
	int fd, rc;

	fd = memfd_create("seccomp-bpf", MFD_CLOEXEC);
	if (fd < 0)
		return sb_fail_errno(err, "seccomp: memfd_create");
	rc = seccomp_export_bpf(ctx, fd);
	if (rc < 0 || fstat(fd, &st) < 0 || st.st_size <= 0 || st.st_size % sizeof(struct sock_filter) != 0 ||
	    st.st_size > 65536) {
		close(fd);
		return sb_fail(err, rc < 0 ? -rc : EINVAL, "seccomp: exporting the filter");
	}
	prog->filter = malloc((size_t)st.st_size);
	prog->len = (unsigned short)(st.st_size / sizeof(struct sock_filter));
	n = prog->filter ? pread(fd, prog->filter, (size_t)st.st_size, 0) : -1;
	close(fd);
	if (n != st.st_size) {
		free(prog->filter);
		prog->filter = NULL;
		return sb_fail(err, EIO, "seccomp: reading back the exported filter");
	}
	return 0;
}

int seccomp_compile(struct sock_fprog *prog, bool no_unix_sockets, struct sb_err *err)
{
	scmp_filter_ctx ctx = seccomp_init(SCMP_ACT_ALLOW);
	int rc;

	memset(prog, 0, sizeof *prog);
	if (ctx == NULL)
		return sb_fail(err, ENOMEM, "seccomp: seccomp_init");
	rc = filter_build(ctx, err);
	if (rc == 0 && no_unix_sockets)
		rc = rules_add_unix_sockets(ctx, err);
	if (rc == 0)
		rc = filter_export(ctx, prog, err);
	seccomp_release(ctx);
	return rc;
}

int seccomp_load_prog(const struct sock_fprog *prog, struct sb_err *err)
{
	/* no_new_privs is already set (privileges.c), so an unprivileged load is allowed. */
	if (syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, 0, prog) < 0)
		return sb_fail_errno(err, "loading the seccomp filter");
	return 0;
}
