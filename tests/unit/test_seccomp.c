/* Unit tests for sandbox-agent/seccomp.c: the compiled filter, loaded in a child process,
 * refuses each denied call with its exact errno and leaves ordinary calls alone. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <errno.h>
#include <linux/audit.h>
#include <linux/ioprio.h>
#include <linux/seccomp.h>
#include <linux/sched.h>
#include <netinet/in.h>
#include <sched.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <unistd.h>

#include "seccomp.h"

/* A process of the caller's uid, alone in its process group, for the probes that aim at "another
 * process": the host's PID 1 must never be the target of a unit test, since a missing rule would
 * then renice or repin it. Killed with its parent (the probe child). */
static pid_t victim;

static pid_t victim_start(void)
{
	pid_t pid = fork();

	if (pid == 0) {
		if (prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0) < 0 || setpgid(0, 0) < 0)
			_exit(92);
		for (;;)
			pause();
	}
	/* Set from both sides, so the group exists whichever runs first. */
	if (pid > 0)
		setpgid(pid, pid);
	return pid;
}

/* Runs `probe` in a child under prog; returns the errno it saw (0 = success). */
static int errno_under(const struct sock_fprog *prog, long (*probe)(void))
{
	struct sb_err err;
	int fds[2], seen = -1, status;
	pid_t pid;

	assert_int_equal(pipe(fds), 0);
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		int e;

		victim = victim_start();
		if (victim < 0 || prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0 ||
		    seccomp_load_prog(prog, &err) < 0)
			_exit(90);
		errno = 0;
		e = probe() < 0 ? errno : 0;
		kill(victim, SIGKILL);
		waitpid(victim, NULL, 0);
		_exit(write(fds[1], &e, sizeof e) == sizeof e ? 0 : 91);
	}
	close(fds[1]);
	assert_int_equal(read(fds[0], &seen, sizeof seen), sizeof seen);
	close(fds[0]);
	assert_int_equal(waitpid(pid, &status, 0), pid);
	assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
	return seen;
}

/* The program the agent loads in the host world: the one compiled at build time (test_build_time_programs). */
static int errno_under_filter(long (*probe)(void))
{
	return errno_under(&seccomp_program_host_world, probe);
}

static long do_mount(void) { return mount("none", "/tmp", "tmpfs", 0, NULL); }
static long do_unshare_user(void) { return unshare(CLONE_NEWUSER); }
static long do_clone3(void)
{
	struct clone_args a = { .flags = CLONE_NEWUSER, .exit_signal = SIGCHLD };

	return syscall(SYS_clone3, &a, sizeof a);
}
static long do_clone_newuser(void) { return syscall(SYS_clone, CLONE_NEWUSER | SIGCHLD, 0, 0, 0, 0); }
/* Another process's RLIMIT_CPU: the victim's, never the host's PID 1 (a missing rule would have
 * the kernel kill it). */
static long do_prlimit_other(void)
{
	struct rlimit r = { 1, 1 };

	return prlimit(victim, RLIMIT_CPU, &r, NULL);
}
static long do_prlimit_hi_other(void)
{
	struct rlimit r;

	return syscall(SYS_prlimit64, (1UL << 32) | (unsigned long)victim, RLIMIT_CPU, NULL, &r);
}
static long do_prlimit_self(void)
{
	struct rlimit r;

	return prlimit(0, RLIMIT_CPU, NULL, &r);
}
static long do_ptrace(void) { return syscall(SYS_ptrace, 16 /* PTRACE_ATTACH */, victim, 0, 0); }
static long do_tiocsti(void)
{
	char c = 'x';

	/* The high bits set: the rule compares 32 bits, like the kernel. */
	return syscall(SYS_ioctl, 0, 0x100000000UL | TIOCSTI, &c);
}
static long do_mptcp(void) { return socket(AF_INET, SOCK_STREAM, 262); }
static long do_fastopen(void)
{
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons(9), .sin_addr.s_addr = htonl(0x7f000001) };
	int fd = socket(AF_INET, SOCK_STREAM, 0);

	return sendto(fd, "x", 1, MSG_FASTOPEN, (struct sockaddr *)&a, sizeof a);
}
/* The kernel reads int arguments as 32 bits: high bits must not dodge a rule. */
static long do_mptcp_highbits(void) { return syscall(SYS_socket, AF_INET, SOCK_STREAM, (1UL << 32) | 262); }
static long do_tfo_connect_highbits(void)
{
	int one = 1, fd = socket(AF_INET, SOCK_STREAM, 0);

	return syscall(SYS_setsockopt, fd, (1UL << 32) | IPPROTO_TCP, (1UL << 32) | 30, &one, sizeof one);
}

/* Calls aimed at another process (seccomp.c rules_add_other_pids()): the victim's pid, alone or with
 * high bits, is refused before the kernel looks; pid 0, "myself", still works. Each call would
 * succeed on the victim without its rule (same uid), and none changes it when it does: the values
 * set are the victim's own. */
#define HI (1UL << 32)
static const struct sched_param sp0;
static long setscheduler_on(unsigned long pid) { return syscall(SYS_sched_setscheduler, pid, SCHED_OTHER, &sp0); }
static long do_setscheduler_other(void) { return setscheduler_on((unsigned long)victim); }
static long do_setscheduler_hi_other(void) { return setscheduler_on(HI | (unsigned long)victim); }
/* pid 0 to the kernel, refused all the same: the rules compare 64 bits and fail closed. */
static long do_setscheduler_hi_zero(void) { return setscheduler_on(HI); }
static long do_setscheduler_self(void) { return setscheduler_on(0); }
static long do_setparam_other(void) { return syscall(SYS_sched_setparam, victim, &sp0); }
static long do_setparam_self(void) { return syscall(SYS_sched_setparam, 0, &sp0); }
/* struct sched_attr, version 0 (<linux/sched/types.h> clashes with glibc's <sched.h>). */
struct sched_attr0 {
	uint32_t size, sched_policy;
	uint64_t sched_flags;
	int32_t sched_nice;
	uint32_t sched_priority;
	uint64_t sched_runtime, sched_deadline, sched_period;
};
static long setattr_on(unsigned long pid)
{
	struct sched_attr0 a = { .size = sizeof a, .sched_policy = SCHED_OTHER };

	return syscall(SYS_sched_setattr, pid, &a, 0);
}
static long do_setattr_other(void) { return setattr_on((unsigned long)victim); }
static long do_setattr_hi_other(void) { return setattr_on(HI | (unsigned long)victim); }
static long do_setattr_self(void) { return setattr_on(0); }
static long setaffinity_on(unsigned long pid)
{
	cpu_set_t set;

	if (sched_getaffinity(0, sizeof set, &set) < 0)
		return -1;
	return syscall(SYS_sched_setaffinity, pid, sizeof set, &set);
}
static long do_setaffinity_other(void) { return setaffinity_on((unsigned long)victim); }
static long do_setaffinity_hi_other(void) { return setaffinity_on(HI | (unsigned long)victim); }
static long do_setaffinity_self(void) { return setaffinity_on(0); }
/* Raising one's nice value needs no privilege: 19 works on any process of the uid. */
static long setpriority_on(unsigned long which, unsigned long who) { return syscall(SYS_setpriority, which, who, 19); }
static long do_setpriority_other(void) { return setpriority_on(PRIO_PROCESS, (unsigned long)victim); }
static long do_setpriority_hi_other(void) { return setpriority_on(PRIO_PROCESS, HI | (unsigned long)victim); }
static long do_setpriority_other_pgrp(void) { return setpriority_on(PRIO_PGRP, (unsigned long)victim); }
/* which 3 is EINVAL to the kernel: proves the `which` bound without touching any process. */
static long do_setpriority_which_3(void) { return setpriority_on(PRIO_USER + 1, 0); }
static long do_setpriority_self(void) { return setpriority_on(PRIO_PROCESS, 0); }
static long do_setpriority_own_pgrp(void) { return setpgid(0, 0) < 0 ? -1 : setpriority_on(PRIO_PGRP, 0); }
/* PRIO_USER with who 0 reaches every process of the caller's uid: run only as a uid no other
 * process has (root switches to it first), so a missing rule renices nothing but the probe. */
#define UNUSED_UID 2147483600u
static long as_unused_uid(long (*call)(void))
{
	/* The victim is not needed, and once the probe changes uid it could neither kill it
	 * nor have the parent-death signal delivered. */
	kill(victim, SIGKILL);
	waitpid(victim, NULL, 0);
	if (setresgid(UNUSED_UID, UNUSED_UID, UNUSED_UID) < 0 || setresuid(UNUSED_UID, UNUSED_UID, UNUSED_UID) < 0)
		return -1;
	return call();
}
static long setpriority_user(void) { return setpriority_on(PRIO_USER, 0); }
static long setpriority_user_hi(void) { return setpriority_on(HI | PRIO_USER, 0); }
static long do_setpriority_user(void) { return as_unused_uid(setpriority_user); }
static long do_setpriority_user_hi(void) { return as_unused_uid(setpriority_user_hi); }
#define IOPRIO_BE7 IOPRIO_PRIO_VALUE(IOPRIO_CLASS_BE, 7)
static long ioprio_on(unsigned long which, unsigned long who) { return syscall(SYS_ioprio_set, which, who, IOPRIO_BE7); }
static long do_ioprio_other(void) { return ioprio_on(IOPRIO_WHO_PROCESS, (unsigned long)victim); }
static long do_ioprio_hi_other(void) { return ioprio_on(IOPRIO_WHO_PROCESS, HI | (unsigned long)victim); }
static long do_ioprio_other_pgrp(void) { return ioprio_on(IOPRIO_WHO_PGRP, (unsigned long)victim); }
static long do_ioprio_which_4(void) { return ioprio_on(IOPRIO_WHO_USER + 1, 0); }
static long do_ioprio_self(void) { return ioprio_on(IOPRIO_WHO_PROCESS, 0); }
static long do_ioprio_own_pgrp(void) { return setpgid(0, 0) < 0 ? -1 : ioprio_on(IOPRIO_WHO_PGRP, 0); }
static long ioprio_user(void) { return ioprio_on(IOPRIO_WHO_USER, 0); }
static long ioprio_user_hi(void) { return ioprio_on(HI | IOPRIO_WHO_USER, 0); }
static long do_ioprio_user(void) { return as_unused_uid(ioprio_user); }
static long do_ioprio_user_hi(void) { return as_unused_uid(ioprio_user_hi); }
/* From node 0 to node 0: a move that changes nothing where it is allowed. */
static const unsigned long node0 = 1;
static long migrate_on(unsigned long pid) { return syscall(SYS_migrate_pages, pid, 8 * sizeof node0, &node0, &node0); }
static long do_migrate_other(void) { return migrate_on((unsigned long)victim); }
static long do_migrate_hi_other(void) { return migrate_on(HI | (unsigned long)victim); }
static long do_migrate_self(void) { return migrate_on(0); }
static long do_move_pages_other(void) { return syscall(SYS_move_pages, victim, 0, NULL, NULL, NULL, 0); }
static long do_move_pages_self(void) { return syscall(SYS_move_pages, 0, 0, NULL, NULL, NULL, 0); }
/* Refused whatever the pidfd names, even the caller itself (which the kernel would allow). */
static long do_process_madvise_self(void)
{
	void *page = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	struct iovec v = { page, 4096 };
	long fd = syscall(SYS_pidfd_open, getpid(), 0);

	if (page == MAP_FAILED || fd < 0)
		return -1;
	return syscall(SYS_process_madvise, fd, &v, 1, MADV_COLD, 0);
}
static long do_process_mrelease(void)
{
	long fd = syscall(SYS_pidfd_open, victim, 0);

	return fd < 0 ? -1 : syscall(SYS_process_mrelease, fd, 0);
}
/* Reading another process's settings changes nothing. */
static long do_getpriority_other(void) { return syscall(SYS_getpriority, PRIO_PROCESS, victim) < 0 ? -1 : 0; }
static long do_getaffinity_other(void)
{
	cpu_set_t set;

	return sched_getaffinity(victim, sizeof set, &set);
}
static long do_getattr_other(void)
{
	struct sched_attr0 a;

	return syscall(SYS_sched_getattr, victim, &a, sizeof a, 0);
}
static long do_ioprio_get_other(void) { return syscall(SYS_ioprio_get, IOPRIO_WHO_PROCESS, victim); }

static long do_tcp_socket(void) { return socket(AF_INET, SOCK_STREAM, 0) < 0 ? -1 : 0; }
static long do_bpf(void) { return syscall(SYS_bpf, 0, NULL, 0); }
static long do_keyctl(void) { return syscall(SYS_keyctl, 0, 0, 0, 0, 0); }
static long do_io_uring(void) { return syscall(SYS_io_uring_setup, 1, NULL); }

static long do_unix_socket(void)
{
	long fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);

	if (fd >= 0)
		close((int)fd);
	return fd;
}

/* The read-only world's commands open no unix socket (a same-uid service outside would answer
 * them); the host world's may (mutation M3, which only an integration case caught). */
static void test_readonly_world_unix_sockets(void **state)
{
	(void)state;
	assert_int_equal(errno_under(&seccomp_program_readonly_world, do_unix_socket), EPERM);
	assert_int_equal(errno_under(&seccomp_program_host_world, do_unix_socket), 0);
}

static void test_denied_calls(void **state)
{
	(void)state;
	assert_int_equal(errno_under_filter(do_mount), EPERM);
	assert_int_equal(errno_under_filter(do_unshare_user), EPERM);
	assert_int_equal(errno_under_filter(do_clone_newuser), EPERM);
	assert_int_equal(errno_under_filter(do_clone3), ENOSYS);
	assert_int_equal(errno_under_filter(do_prlimit_other), EPERM);
	assert_int_equal(errno_under_filter(do_prlimit_hi_other), EPERM);
	assert_int_equal(errno_under_filter(do_ptrace), EPERM);
	assert_int_equal(errno_under_filter(do_tiocsti), EPERM);
	assert_int_equal(errno_under_filter(do_mptcp), EPERM);
	assert_int_equal(errno_under_filter(do_mptcp_highbits), EPERM);
	assert_int_equal(errno_under_filter(do_tfo_connect_highbits), EPERM);
	assert_int_equal(errno_under_filter(do_fastopen), EPERM);
	assert_int_equal(errno_under_filter(do_bpf), EPERM);
	assert_int_equal(errno_under_filter(do_keyctl), EPERM);
	assert_int_equal(errno_under_filter(do_io_uring), EPERM);
}

static void expect_all(long (*const *probes)(void), size_t n, int want)
{
	for (size_t i = 0; i < n; i++) {
		int got = errno_under_filter(probes[i]);

		if (got != want)
			fail_msg("probe %zu of the list: errno %d, expected %d", i, got, want);
	}
}

static void test_other_pids_refused(void **state)
{
	static long (*const refused[])(void) = {
		do_setscheduler_other, do_setscheduler_hi_other, do_setscheduler_hi_zero, do_setparam_other,
		do_setattr_other, do_setattr_hi_other, do_setaffinity_other, do_setaffinity_hi_other,
		do_setpriority_other, do_setpriority_hi_other, do_setpriority_other_pgrp, do_setpriority_which_3,
		do_ioprio_other, do_ioprio_hi_other, do_ioprio_other_pgrp, do_ioprio_which_4,
		do_migrate_other, do_migrate_hi_other, do_move_pages_other, do_process_madvise_self,
		do_process_mrelease,
	};
	static long (*const refused_as_unused_uid[])(void) = {
		do_setpriority_user, do_setpriority_user_hi, do_ioprio_user, do_ioprio_user_hi,
	};

	(void)state;
	expect_all(refused, sizeof refused / sizeof refused[0], EPERM);
	/* Only root can switch to a uid of its own; elsewhere attack_init covers PRIO_USER. */
	if (geteuid() == 0)
		expect_all(refused_as_unused_uid, sizeof refused_as_unused_uid / sizeof refused_as_unused_uid[0],
			   EPERM);
}

/* pid 0 and who 0 are the caller itself, or its own process group. */
static void test_own_process_allowed(void **state)
{
	static long (*const allowed[])(void) = {
		do_setscheduler_self, do_setparam_self, do_setattr_self, do_setaffinity_self,
		do_setpriority_self, do_setpriority_own_pgrp, do_ioprio_self, do_ioprio_own_pgrp,
		do_move_pages_self, do_getpriority_other, do_getaffinity_other, do_getattr_other,
		do_ioprio_get_other,
	};

	(void)state;
	expect_all(allowed, sizeof allowed / sizeof allowed[0], 0);
	/* migrate_pages(0) passes the filter; the kernel may still refuse a node this machine
	 * lacks (EINVAL), but never with EPERM. */
	assert_int_not_equal(errno_under_filter(do_migrate_self), EPERM);
}

static void test_ordinary_calls_allowed(void **state)
{
	(void)state;
	assert_int_equal(errno_under_filter(do_prlimit_self), 0);
	assert_int_equal(errno_under_filter(do_tcp_socket), 0);
}

/* What the agent loads is what the rules make now: the build-time programs equal a compile of
 * seccomp.c's rules, instruction for instruction, for both worlds (a stale build/gen file, or a
 * rule that changed without the generator running again, fails here). */
static void program_equals_compile(const struct sock_fprog *built, bool no_unix_sockets)
{
	struct sock_fprog now;
	struct sb_err err;

	assert_int_equal(seccomp_compile(&now, no_unix_sockets, &err), 0);
	assert_true(now.len > 20);
	assert_int_equal(built->len, now.len);
	assert_memory_equal(built->filter, now.filter, now.len * sizeof now.filter[0]);
	free(now.filter);
}

static void test_build_time_programs(void **state)
{
	(void)state;
	program_equals_compile(&seccomp_program_host_world, false);
	program_equals_compile(&seccomp_program_readonly_world, true);
	/* The read-only world's program is the longer one: it also refuses unix sockets. */
	assert_true(seccomp_program_readonly_world.len > seccomp_program_host_world.len);
}

/* How many instructions decide a syscall that no argument decides: the walk the kernel makes for
 * every syscall number when a filter is loaded (its action cache, seccomp_cache_prepare) and a
 * command makes for each call the cache does not answer. Stops at a RET, or at a load of anything
 * but the number and the architecture (the arguments: decided at run time). */
static unsigned dispatch_steps(const struct sock_fprog *prog, uint32_t nr)
{
	uint32_t a = 0;
	unsigned pc = 0, steps = 0;

	while (pc < prog->len) {
		const struct sock_filter *f = &prog->filter[pc++];

		steps++;
		switch (f->code) {
		case BPF_LD | BPF_W | BPF_ABS:
			if (f->k != offsetof(struct seccomp_data, nr) && f->k != offsetof(struct seccomp_data, arch))
				return steps;
			a = f->k == offsetof(struct seccomp_data, nr) ? nr : AUDIT_ARCH_X86_64;
			break;
		case BPF_JMP | BPF_JA:
			pc += f->k;
			break;
		case BPF_JMP | BPF_JEQ | BPF_K:
			pc += a == f->k ? f->jt : f->jf;
			break;
		case BPF_JMP | BPF_JGT | BPF_K:
			pc += a > f->k ? f->jt : f->jf;
			break;
		case BPF_JMP | BPF_JGE | BPF_K:
			pc += a >= f->k ? f->jt : f->jf;
			break;
		case BPF_JMP | BPF_JSET | BPF_K:
			pc += (a & f->k) ? f->jt : f->jf;
			break;
		case BPF_RET | BPF_K:
			return steps;
		default:
			fail_msg("instruction %u: code 0x%x before any argument was read", pc - 1, f->code);
		}
	}
	fail_msg("syscall %u runs off the end of the program", nr);
	return steps;
}

/* The filter dispatches on the syscall number through a binary tree (libseccomp's
 * SCMP_FLTATR_CTL_OPTIMIZE 2), not one comparison after another: the kernel walks it for every
 * syscall number at each load, once per command. Measured: the load (the `seccomp` step) fell from
 * ~147 to ~79 us. The chain these rules made took up to 65 instructions; the tree takes 14. */
static void test_dispatch_is_a_tree(void **state)
{
	const struct sock_fprog *progs[] = { &seccomp_program_host_world, &seccomp_program_readonly_world };

	(void)state;
	for (size_t i = 0; i < 2; i++) {
		unsigned most = 0;

		for (uint32_t nr = 0; nr < 512; nr++) {
			unsigned n = dispatch_steps(progs[i], nr);

			most = n > most ? n : most;
		}
		if (most > 40)
			fail_msg("program %zu: a syscall number takes %u instructions to dispatch", i, most);
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_build_time_programs),
		cmocka_unit_test(test_dispatch_is_a_tree),
		cmocka_unit_test(test_denied_calls),
		cmocka_unit_test(test_readonly_world_unix_sockets),
		cmocka_unit_test(test_other_pids_refused),
		cmocka_unit_test(test_own_process_allowed),
		cmocka_unit_test(test_ordinary_calls_allowed),
	};
	return cmocka_run_group_tests_name("seccomp", tests, NULL, NULL);
}
