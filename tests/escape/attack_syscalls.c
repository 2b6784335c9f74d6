/* Attack program: calls each system call the boundary's seccomp filter must refuse, with the exact errno
 * expected, plus a few allowed ones as controls (a filter that refuses everything is not a boundary).
 * Where the kernel alone would give another errno (EBADF, ENOTTY, EFAULT, success), the probe is chosen
 * so that EPERM proves the filter answered. Prints one line per probe; exits 0 when all matched.
 * Runs only behind guard_check(). */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/ptrace.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <arpa/inet.h>
#include <sched.h>
#include <termios.h>
#include <unistd.h>

#include "guard.h"
#include "probe.h"

#ifndef TCP_FASTOPEN_CONNECT
#define TCP_FASTOPEN_CONNECT 30
#endif
#ifndef MSG_FASTOPEN
#define MSG_FASTOPEN 0x20000000
#endif
#define IPPROTO_MPTCP_NUM 262
#define HIGH_BITS (1UL << 32)

/* A raw syscall that may create a child (clone, clone3): the child exits at once. */
static long fork_like(long r)
{
	if (r == 0)
		_exit(0);
	if (r > 0)
		waitpid((pid_t)r, NULL, __WALL);
	return r;
}

struct clone_args_v0 {
	uint64_t flags, pidfd, child_tid, parent_tid, exit_signal, stack, stack_size, tls;
};

static void probe_clone3(void)
{
	struct clone_args_v0 args;
	long r;
	int e;

	memset(&args, 0, sizeof(args));
	args.exit_signal = SIGCHLD;
	errno = 0;
	r = syscall(SYS_clone3, &args, sizeof(args));
	e = errno;
	report("clone3", fork_like(r), e, ENOSYS);
}

static void probe_clone_newuser(void)
{
	long r;
	int e;

	errno = 0;
	r = syscall(SYS_clone, (unsigned long)(CLONE_NEWUSER | SIGCHLD), NULL, NULL, NULL, 0);
	e = errno;
	report("clone_newuser", fork_like(r), e, EPERM);
}

/* ptrace of our own child: the kernel would allow it (same uid, dumpable), so EPERM is the filter. */
static void probe_ptrace_child(void)
{
	pid_t child = fork();
	long r;
	int e;

	if (child < 0) {
		report("ptrace_attach_child", -1, errno, EPERM);
		return;
	}
	if (child == 0) {
		pause();
		_exit(0);
	}
	errno = 0;
	r = ptrace(PTRACE_ATTACH, child, NULL, NULL);
	e = errno;
	kill(child, SIGKILL);
	waitpid(child, NULL, __WALL);
	report("ptrace_attach_child", r, e, EPERM);
}

/* process_vm_readv/writev on ourselves: the kernel would allow both. */
static void probe_process_vm(void)
{
	char src[8] = "payload", dst[8];
	struct iovec local = { dst, sizeof(dst) }, remote = { src, sizeof(src) };

	PROBE("process_vm_readv_self", EPERM, syscall(SYS_process_vm_readv, getpid(), &local, 1, &remote, 1, 0));
	local.iov_base = src;
	remote.iov_base = dst;
	PROBE("process_vm_writev_self", EPERM, syscall(SYS_process_vm_writev, getpid(), &local, 1, &remote, 1, 0));
}

/* A 32-bit system call through int 0x80 (getpid, number 20): the filter must kill the process
 * (a 32-bit call would be checked against the wrong syscall table). */
static void probe_int80(void)
{
	pid_t child = fork();
	int status = 0;

	if (child == 0) {
		long ret = 20;
		__asm__ volatile("int $0x80" : "+a"(ret) : : "memory");
		_exit(0);
	}
	if (child < 0 || waitpid(child, &status, 0) != child) {
		printf("int80_getpid signal=error\n");
		failures++;
		return;
	}
	if (WIFSIGNALED(status)) {
		printf("int80_getpid signal=SIG%s\n", sigabbrev_np(WTERMSIG(status)));
		/* SIGSYS: the filter killed it; SIGSEGV: this kernel or hypervisor has no int 0x80 at all */
		if (WTERMSIG(status) != SIGSYS && WTERMSIG(status) != SIGSEGV)
			failures++;
	} else {
		printf("int80_getpid signal=none\n");
		failures++;
	}
}

static void probe_tcp(void)
{
	struct sockaddr_in sin;
	struct msghdr msg;
	struct iovec iov;
	int one = 1;
	int s = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);

	report("socket_tcp", s, errno, 0);
	if (s < 0)
		return;
	memset(&sin, 0, sizeof(sin));
	sin.sin_family = AF_INET;
	sin.sin_port = htons(1);
	sin.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	PROBE("setsockopt_nodelay", 0, setsockopt(s, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one)));
	PROBE("setsockopt_fastopen_connect", EPERM,
	      setsockopt(s, IPPROTO_TCP, TCP_FASTOPEN_CONNECT, &one, sizeof(one)));
	/* optname is an int: the kernel ignores the upper 32 bits, so the filter must too */
	PROBE("setsockopt_fastopen_connect_highbits", EPERM,
	      syscall(SYS_setsockopt, s, IPPROTO_TCP, HIGH_BITS | TCP_FASTOPEN_CONNECT, &one, sizeof(one)));
	PROBE("setsockopt_fastopen_connect_level_highbits", EPERM,
	      syscall(SYS_setsockopt, s, HIGH_BITS | IPPROTO_TCP, TCP_FASTOPEN_CONNECT, &one, sizeof(one)));
	PROBE("sendto_fastopen", EPERM,
	      sendto(s, "x", 1, MSG_FASTOPEN, (struct sockaddr *)&sin, sizeof(sin)));
	iov.iov_base = "x";
	iov.iov_len = 1;
	memset(&msg, 0, sizeof(msg));
	msg.msg_name = &sin;
	msg.msg_namelen = sizeof(sin);
	msg.msg_iov = &iov;
	msg.msg_iovlen = 1;
	PROBE("sendmsg_fastopen", EPERM, sendmsg(s, &msg, MSG_FASTOPEN));
	close(s);

	PROBE("socket_mptcp_v4", EPERM, socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, IPPROTO_MPTCP_NUM));
	PROBE("socket_mptcp_v6", EPERM, socket(AF_INET6, SOCK_STREAM | SOCK_CLOEXEC, IPPROTO_MPTCP_NUM));
	/* protocol is an int: upper bits are dropped by the kernel */
	PROBE("socket_mptcp_highbits", EPERM,
	      syscall(SYS_socket, AF_INET, SOCK_STREAM | SOCK_CLOEXEC, HIGH_BITS | IPPROTO_MPTCP_NUM));
}

/* Lists /proc/self/fd without counting the directory's own descriptor. */
static void probe_open_fds(void)
{
	DIR *d = opendir("/proc/self/fd");
	struct dirent *de;
	char list[256] = "";
	int fds[64], n = 0, i, j, own;

	if (!d) {
		printf("open_fds error=%s\n", guard_errname(errno));
		failures++;
		return;
	}
	own = dirfd(d);
	while ((de = readdir(d)) && n < 64) {
		if (de->d_name[0] == '.')
			continue;
		if (atoi(de->d_name) != own)
			fds[n++] = atoi(de->d_name);
	}
	closedir(d);
	for (i = 1; i < n; i++) /* insertion sort: readdir order is not numeric */
		for (j = i; j > 0 && fds[j - 1] > fds[j]; j--) {
			int t = fds[j];
			fds[j] = fds[j - 1];
			fds[j - 1] = t;
		}
	for (i = 0; i < n; i++)
		snprintf(list + strlen(list), sizeof(list) - strlen(list), "%s%d", i ? "," : "", fds[i]);
	printf("open_fds %s\n", list);
	if (strcmp(list, "0,1,2") != 0)
		failures++;
}

int main(int argc, char **argv)
{
	struct rlimit old;
	char c = 'x';

	guard_check(argc, argv);
	setvbuf(stdout, NULL, _IOLBF, 0);

	probe_open_fds();
	PROBE("mount_tmpfs", EPERM, mount("none", ".", "tmpfs", 0, NULL));
	PROBE("umount2_proc", EPERM, umount2("/proc", MNT_DETACH));
	PROBE("unshare_newuser", EPERM, unshare(CLONE_NEWUSER));
	PROBE("unshare_newuser_newns", EPERM, unshare(CLONE_NEWUSER | CLONE_NEWNS));
	probe_clone_newuser();
	probe_clone3();
	/* setns(-1): the kernel alone says EBADF */
	PROBE("setns", EPERM, setns(-1, 0));
	probe_ptrace_child();
	probe_process_vm();
	/* pidfd_getfd(-1): the kernel alone says EBADF */
	PROBE("pidfd_getfd", EPERM, syscall(SYS_pidfd_getfd, -1, 0, 0));
	PROBE("bpf", EPERM, syscall(SYS_bpf, 0, NULL, 0));
	/* a NULL attr: the kernel alone says EFAULT */
	PROBE("perf_event_open", EPERM, syscall(SYS_perf_event_open, NULL, 0, -1, -1, 0));
	/* KEYCTL_GET_KEYRING_ID of the session keyring: the kernel alone succeeds */
	PROBE("keyctl", EPERM, syscall(SYS_keyctl, 0, -3, 0));
	PROBE("add_key", EPERM, syscall(SYS_add_key, "user", "sandbox-test", "x", 1, -2));
	/* a NULL params: the kernel alone says EFAULT */
	PROBE("io_uring_setup", EPERM, syscall(SYS_io_uring_setup, 1, NULL));
	/* a wrong magic number, never a real reboot request */
	PROBE("reboot", EPERM, syscall(SYS_reboot, 0, 0, 0, NULL));
	PROBE("kexec_load", EPERM, syscall(SYS_kexec_load, 0, 0, NULL, 0));
	PROBE("kexec_file_load", EPERM, syscall(SYS_kexec_file_load, -1, -1, 0, NULL, 0));
	PROBE("init_module", EPERM, syscall(SYS_init_module, NULL, 0, ""));
	PROBE("finit_module", EPERM, syscall(SYS_finit_module, -1, "", 0));
	/* stdin is /dev/null: the driver alone says ENOTTY */
	PROBE("ioctl_tiocsti", EPERM, ioctl(0, TIOCSTI, &c));
	/* cmd is an unsigned int: the kernel drops the upper bits, so the filter must too */
	PROBE("ioctl_tiocsti_highbits", EPERM, syscall(SYS_ioctl, 0, HIGH_BITS | TIOCSTI, &c));
	PROBE("prlimit_self_pid", EPERM, syscall(SYS_prlimit64, getpid(), RLIMIT_NOFILE, NULL, &old));
	PROBE("prlimit_pid0", 0, syscall(SYS_prlimit64, 0, RLIMIT_NOFILE, NULL, &old));
	PROBE("getrlimit", 0, getrlimit(RLIMIT_NOFILE, &old));
	probe_tcp();
	probe_int80();

	printf("attack_syscalls failures=%d\n", failures);
	return failures ? 1 : 0;
}
