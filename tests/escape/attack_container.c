/* Attack program for the container's own seccomp profile (images/seccomp.json): runs as the container's
 * process, outside any agent boundary, so only the runtime's filter stands between it and the kernel.
 * Each probe is a harmless call that the kernel alone would answer with something other than EPERM
 * (EBADF, EINVAL, ESRCH, ENOKEY, success...), so EPERM proves the profile answered; the controls are
 * what the agent needs and must succeed. Prints one line per probe; exits 0 when all matched.
 * Runs only behind guard_check(): the test gives the container a user namespace of its own. */
#include <errno.h>
#include <fcntl.h>
#include <linux/ioprio.h>
#include <linux/keyctl.h>
#include <linux/seccomp.h>
#include <sched.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ptrace.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <unistd.h>

#include "guard.h"
#include "probe.h"

#ifndef SB_LANDLOCK_CREATE_RULESET_VERSION
#define SB_LANDLOCK_CREATE_RULESET_VERSION (1U << 0)
#endif

/* The agent's first step: a user namespace (then PID and mount). In a child, so this process keeps
 * its own namespaces. */
static void probe_unshare_userns(void)
{
	int status = 0;
	pid_t pid = fork();

	if (pid == 0)
		_exit(unshare(CLONE_NEWUSER | CLONE_NEWPID | CLONE_NEWNS) == 0 ? 0 : errno);
	if (pid < 0 || waitpid(pid, &status, 0) != pid || !WIFEXITED(status)) {
		report("unshare_user_pid_mount", -1, EIO, 0);
		return;
	}
	report("unshare_user_pid_mount", WEXITSTATUS(status) ? -1 : 0, WEXITSTATUS(status), 0);
}

/* struct sched_attr, version 0 (<linux/sched/types.h> clashes with glibc's <sched.h>). */
struct sched_attr0 {
	uint32_t size, sched_policy;
	uint64_t sched_flags;
	int32_t sched_nice;
	uint32_t sched_priority;
	uint64_t sched_runtime, sched_deadline, sched_period;
};

#define HI (1UL << 32) /* pid_t is 32 bits to the kernel: HI | n is pid n, HI alone is pid 0 */

/* Scheduling, priority, affinity and I/O priority of a process named by its pid (seccomp.c
 * rules_add_other_pids() in the agent; the profile must not be weaker). The target is this process
 * itself, by number: the kernel allows every call (each sets what is already set, so nothing
 * changes even where a call goes through), so EPERM can only be the profile's. Then the same calls
 * with pid 0, the caller, which the profile allows. */
static void other_pid_probes(void)
{
	unsigned long self = (unsigned long)getpid();
	struct sched_param sp = { 0 };
	struct sched_attr0 attr = { .size = sizeof attr, .sched_policy = SCHED_OTHER };
	cpu_set_t cpus;
	long ioprio;
	int nice;

	if (sched_getaffinity(0, sizeof cpus, &cpus) < 0)
		CPU_ZERO(&cpus);
	errno = 0;
	nice = getpriority(PRIO_PROCESS, 0);
	if (errno != 0)
		nice = 0;
	attr.sched_nice = nice;
	ioprio = syscall(SYS_ioprio_get, IOPRIO_WHO_PROCESS, 0);
	if (ioprio < 0)
		ioprio = IOPRIO_PRIO_VALUE(IOPRIO_CLASS_BE, 4);
	PROBE("sched_setaffinity_pid", EPERM, syscall(SYS_sched_setaffinity, self, sizeof cpus, &cpus));
	PROBE("sched_setaffinity_highbits", EPERM, syscall(SYS_sched_setaffinity, HI, sizeof cpus, &cpus));
	PROBE("sched_setscheduler_pid", EPERM, syscall(SYS_sched_setscheduler, self, SCHED_OTHER, &sp));
	PROBE("sched_setparam_pid", EPERM, syscall(SYS_sched_setparam, self, &sp));
	PROBE("sched_setattr_pid", EPERM, syscall(SYS_sched_setattr, self, &attr, 0));
	PROBE("setpriority_pid", EPERM, syscall(SYS_setpriority, PRIO_PROCESS, self, nice));
	/* PRIO_USER reaches every process of the uid even with who 0 (the caller's uid). */
	PROBE("setpriority_user_0", EPERM, syscall(SYS_setpriority, PRIO_USER, 0, nice));
	PROBE("ioprio_set_pid", EPERM, syscall(SYS_ioprio_set, IOPRIO_WHO_PROCESS, self, ioprio));
	PROBE("ioprio_set_user_0", EPERM, syscall(SYS_ioprio_set, IOPRIO_WHO_USER, 0, ioprio));

	PROBE("sched_setaffinity_self", 0, syscall(SYS_sched_setaffinity, 0, sizeof cpus, &cpus));
	PROBE("sched_setscheduler_self", 0, syscall(SYS_sched_setscheduler, 0, SCHED_OTHER, &sp));
	PROBE("setpriority_self", 0, syscall(SYS_setpriority, PRIO_PROCESS, 0, nice));
	PROBE("ioprio_set_self", 0, syscall(SYS_ioprio_set, IOPRIO_WHO_PROCESS, 0, ioprio));
}

int main(int argc, char **argv)
{
	struct rlimit rl;
	struct iovec none = { NULL, 0 };
	long fd;

	guard_check(argc, argv);

	/* Kernel keyrings are not namespaced per container: keys are the classic cross-container leak. */
	PROBE("keyctl", EPERM, syscall(SYS_keyctl, KEYCTL_GET_KEYRING_ID, KEY_SPEC_SESSION_KEYRING, 0));
	PROBE("add_key", EPERM, syscall(SYS_add_key, "user", "infra-sandbox-probe", "x", 1, KEY_SPEC_PROCESS_KEYRING));
	PROBE("request_key", EPERM, syscall(SYS_request_key, "user", "infra-sandbox-probe-absent", NULL, 0));
	/* Kernel attack surface: an invalid command or NULL attribute would be EINVAL/EFAULT. */
	PROBE("bpf", EPERM, syscall(SYS_bpf, -1, NULL, 0));
	PROBE("perf_event_open", EPERM, syscall(SYS_perf_event_open, NULL, 0, -1, -1, 0));
	PROBE("io_uring_setup", EPERM, syscall(SYS_io_uring_setup, 0, NULL));
	PROBE("userfaultfd", EPERM, syscall(SYS_userfaultfd, ~0));
	PROBE("name_to_handle_at", EPERM, syscall(SYS_name_to_handle_at, AT_FDCWD, "/", NULL, NULL, 0));
	/* Other processes: pid 0 is ESRCH, an empty iovec list succeeds, fd -1 is EBADF. */
	PROBE("ptrace_peekuser", EPERM, ptrace(PTRACE_PEEKUSER, 0, NULL, NULL));
	PROBE("process_vm_readv_self", EPERM, syscall(SYS_process_vm_readv, getpid(), &none, 0, &none, 0, 0));
	PROBE("pidfd_getfd", EPERM, syscall(SYS_pidfd_getfd, -1, 0, 0));
	/* Reading our own limits through a non-zero pid: allowed by the kernel, refused by the profile,
	 * which lets prlimit64 through only for pid 0 (a command could otherwise set init's limits). */
	PROBE("prlimit64_pid", EPERM, syscall(SYS_prlimit64, getpid(), RLIMIT_NOFILE, NULL, &rl));
	/* Joining namespaces. */
	PROBE("setns", EPERM, syscall(SYS_setns, -1, 0));
	other_pid_probes();

	/* Controls: what the agent needs must still work under the profile. */
	PROBE("prlimit64_self", 0, syscall(SYS_prlimit64, 0, RLIMIT_NOFILE, NULL, &rl));
	/* The agent builds each command's view with the mount API (common/mountfd.c: fsopen, fsconfig,
	 * fsmount, open_tree, mount_setattr, move_mount), in a user namespace of its own: the kernel's
	 * answer, not the profile's EPERM. Outside such a namespace fsopen, fsmount and move_mount are
	 * EPERM from the kernel itself, so these two stand for them here; image_exec_nested runs them all. */
	PROBE("open_tree_reaches_kernel", ENOENT, syscall(SYS_open_tree, AT_FDCWD, "/nonexistent-infra-sandbox", 0));
	PROBE("mount_setattr_reaches_kernel", EINVAL, syscall(SYS_mount_setattr, -1, "", 0, NULL, 0));
	fd = syscall(SYS_pidfd_open, getpid(), 0);
	report("pidfd_open", fd, errno, 0);
	if (fd >= 0)
		close((int)fd);
	PROBE("landlock_abi", 0, syscall(SYS_landlock_create_ruleset, NULL, 0, SB_LANDLOCK_CREATE_RULESET_VERSION));
	PROBE("seccomp_action_avail", 0,
	      syscall(SYS_seccomp, SECCOMP_GET_ACTION_AVAIL, 0, &(unsigned int){ SECCOMP_RET_ERRNO }));
	probe_unshare_userns();

	fflush(stdout);
	return failures ? 1 : 0;
}
