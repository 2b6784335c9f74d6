/* Attack program for the container's own seccomp profile (images/seccomp.json): runs as the container's
 * process, outside any agent boundary, so only the runtime's filter stands between it and the kernel.
 * Each probe is a harmless call that the kernel alone would answer with something other than EPERM
 * (EBADF, EINVAL, ESRCH, ENOKEY, success...), so EPERM proves the profile answered; the controls are
 * what the agent needs and must succeed. Prints one line per probe; exits 0 when all matched.
 * Runs only behind guard_check(): the test gives the container a user namespace of its own. */
#include <errno.h>
#include <fcntl.h>
#include <linux/keyctl.h>
#include <linux/seccomp.h>
#include <sched.h>
#include <signal.h>
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
	/* Joining namespaces and the mount calls the agent does not make (it uses mount(2) only). */
	PROBE("setns", EPERM, syscall(SYS_setns, -1, 0));
	PROBE("open_tree", EPERM, syscall(SYS_open_tree, AT_FDCWD, "/nonexistent-infra-sandbox", 0));
	PROBE("mount_setattr", EPERM, syscall(SYS_mount_setattr, -1, "", 0, NULL, 0));

	/* Controls: what the agent needs must still work under the profile. */
	PROBE("prlimit64_self", 0, syscall(SYS_prlimit64, 0, RLIMIT_NOFILE, NULL, &rl));
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
