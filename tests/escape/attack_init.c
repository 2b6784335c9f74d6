/* Attack program: tries to kill, stop, trace, read, rlimit, reschedule, renice, repin or write the /proc
 * files of the protected PID 1 from inside the boundary. Prints one line per probe and exits 0 only when
 * every attempt was refused, PID 1 kept running and its scheduling is what it was.
 * Runs only behind guard_check(); it must never be run against the host's PID 1. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/ioprio.h>
#include <sched.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/ptrace.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <unistd.h>

#include "guard.h"
#include "probe.h"

/* The state letter of PID 1 from /proc/1/stat, or '?' when it cannot be read. */
static char init_state(void)
{
	char buf[512];
	ssize_t n;
	char *paren;
	int fd = open("/proc/1/stat", O_RDONLY | O_CLOEXEC);

	if (fd < 0)
		return '?';
	n = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	if (n <= 0)
		return '?';
	buf[n] = '\0';
	paren = strrchr(buf, ')');
	if (!paren || paren[1] != ' ' || !paren[2])
		return '?';
	return paren[2];
}

/* 1 when PID 1 exists (kill(1, 0) finds it) and is neither stopped nor dead. */
static int init_alive(void)
{
	char st;

	if (kill(1, 0) != 0 && errno != EPERM)
		return 0;
	st = init_state();
	return st != '?' && !strchr("ZXxTt", st);
}

static void probe_kill(const char *name, int sig)
{
	int r, e, alive;

	errno = 0;
	r = kill(1, sig);
	e = r == 0 ? 0 : errno;
	usleep(100 * 1000); /* give a delivered signal time to act */
	alive = init_alive();
	printf("%s errno=%s init_alive=%d\n", name, guard_errname(e), alive);
	if ((e != 0 && e != EPERM) || !alive)
		failures++;
}

static void probe_ptrace(const char *name, enum __ptrace_request req)
{
	long r;
	int e;

	errno = 0;
	r = ptrace(req, 1, NULL, NULL);
	e = errno;
	if (r == 0) /* attached: let go at once so PID 1 is not left stopped */
		ptrace(PTRACE_DETACH, 1, NULL, NULL);
	report(name, r == 0 ? 0 : -1, e, EPERM);
}

static void probe_open(const char *name, const char *path, int flags)
{
	int fd = open(path, flags | O_CLOEXEC);
	int e = errno;

	if (fd >= 0)
		close(fd);
	report(name, fd, e, EACCES);
}

static void probe_readlink(const char *name, const char *path)
{
	char buf[256];
	ssize_t r = readlink(path, buf, sizeof(buf));

	report(name, r < 0 ? -1 : 0, errno, EACCES);
}

/* pid is a pid_t: the kernel drops the upper 32 bits of the register, so 1 | 1 << 32 means PID 1 too. */
static void probe_prlimit(const char *name, unsigned long pid, int set)
{
	struct rlimit lim = { 1, 1 }, old;
	long r = syscall(SYS_prlimit64, pid, RLIMIT_CPU, set ? &lim : NULL, &old);

	report(name, r < 0 ? -1 : 0, errno, EPERM);
}

/* Follow one of init's descriptors: one that exists when the directory can be listed, else 0. */
static void fd_follow_probes(void)
{
	char path[sizeof "/proc/1/fd/" + 256] = "/proc/1/fd/0";
	struct dirent *d;
	DIR *dir = opendir("/proc/1/fd");

	while (dir != NULL && (d = readdir(dir)) != NULL) {
		if (d->d_name[0] != '.') {
			snprintf(path, sizeof path, "/proc/1/fd/%s", d->d_name);
			break;
		}
	}
	if (dir != NULL)
		closedir(dir);
	probe_readlink("readlink_proc1_fd", path);
	probe_open("open_proc1_fd_entry", path, O_RDONLY);
}

/* Field N (1-based, as in proc(5)) of /proc/1/stat as a number; LLONG_MIN when it cannot be read. */
static long long init_stat_field(int n)
{
	char buf[1024], *p;
	ssize_t len;
	int fd = open("/proc/1/stat", O_RDONLY | O_CLOEXEC);

	if (fd < 0)
		return LLONG_MIN;
	len = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	if (len <= 0)
		return LLONG_MIN;
	buf[len] = '\0';
	/* Fields 1 and 2 are "pid (comm)"; comm may hold spaces, so count from its last ')'. */
	p = strrchr(buf, ')');
	for (int field = 2; p && field < n; field++)
		p = strchr(p + 1, ' ');
	return p ? strtoll(p + 1, NULL, 10) : LLONG_MIN;
}

/* What the scheduling probes could change on init, read before and compared after. */
struct init_sched {
	long long nice, policy;
	cpu_set_t cpus;
	long ioprio;
	int cpus_ok;
};

static void init_sched_read(struct init_sched *s)
{
	s->nice = init_stat_field(19);
	s->policy = init_stat_field(41);
	s->cpus_ok = sched_getaffinity(1, sizeof s->cpus, &s->cpus) == 0;
	s->ioprio = syscall(SYS_ioprio_get, IOPRIO_WHO_PROCESS, 1);
}

/* Prints one line per property; a property that cannot be read counts as changed (fail closed). */
static void init_sched_compare(const struct init_sched *before)
{
	struct init_sched now;
	int nice, policy, cpus, ioprio;

	init_sched_read(&now);
	nice = before->nice != LLONG_MIN && now.nice == before->nice;
	policy = before->policy != LLONG_MIN && now.policy == before->policy;
	cpus = before->cpus_ok && now.cpus_ok && CPU_EQUAL(&now.cpus, &before->cpus);
	ioprio = before->ioprio >= 0 && now.ioprio == before->ioprio;
	printf("init_nice_unchanged=%d init_policy_unchanged=%d init_affinity_unchanged=%d init_ioprio_unchanged=%d\n",
	       nice, policy, cpus, ioprio);
	if (!nice || !policy || !cpus || !ioprio)
		failures++;
}

#define HI (1UL << 32)

static long setscheduler(unsigned long pid, int policy)
{
	struct sched_param sp = { 0 };

	return syscall(SYS_sched_setscheduler, pid, policy, &sp);
}

/* struct sched_attr, version 0 (<linux/sched/types.h> clashes with glibc's <sched.h>). */
struct sched_attr0 {
	uint32_t size, sched_policy;
	uint64_t sched_flags;
	int32_t sched_nice;
	uint32_t sched_priority;
	uint64_t sched_runtime, sched_deadline, sched_period;
};

static long setattr_idle(unsigned long pid)
{
	struct sched_attr0 a = { .size = sizeof a, .sched_policy = SCHED_IDLE };

	return syscall(SYS_sched_setattr, pid, &a, 0);
}

/* Init's affinity cut down to its first CPU. */
static long setaffinity_one(unsigned long pid)
{
	cpu_set_t set, one;
	int cpu = 0;

	if (sched_getaffinity(1, sizeof set, &set) < 0)
		CPU_ZERO(&set);
	while (cpu < CPU_SETSIZE - 1 && !CPU_ISSET(cpu, &set))
		cpu++;
	CPU_ZERO(&one);
	CPU_SET(cpu, &one);
	return syscall(SYS_sched_setaffinity, pid, sizeof one, &one);
}

#define IOPRIO_IDLE IOPRIO_PRIO_VALUE(IOPRIO_CLASS_IDLE, 0)

static long migrate_pages_to_node0(unsigned long pid)
{
	unsigned long node0 = 1;

	return syscall(SYS_migrate_pages, pid, 8 * sizeof node0, &node0, &node0);
}

/* process_madvise and process_mrelease on a pidfd of init: refused whatever the descriptor. */
static void pidfd_probes(void)
{
	char page[1];
	struct iovec v = { page, sizeof page };
	long fd = syscall(SYS_pidfd_open, 1, 0);

	PROBE("process_madvise_1", EPERM, syscall(SYS_process_madvise, fd, &v, 1, MADV_PAGEOUT, 0));
	PROBE("process_mrelease_1", EPERM, syscall(SYS_process_mrelease, fd, 0));
	if (fd >= 0)
		close(fd);
}

/* Scheduling, priority, affinity, I/O priority and memory placement of PID 1, each refused by the
 * command's seccomp filter (seccomp.c rules_add_other_pids()); the high-bits forms are pid 1 to the
 * kernel. The caller's own settings (pid 0) stay changeable. */
static void sched_probes(void)
{
	struct sched_param sp = { 0 };

	PROBE("sched_setscheduler_1_idle", EPERM, setscheduler(1, SCHED_IDLE));
	PROBE("sched_setscheduler_1_highbits", EPERM, setscheduler(HI | 1, SCHED_IDLE));
	PROBE("sched_setparam_1", EPERM, syscall(SYS_sched_setparam, 1, &sp));
	PROBE("sched_setattr_1_idle", EPERM, setattr_idle(1));
	PROBE("sched_setaffinity_1", EPERM, setaffinity_one(1));
	PROBE("sched_setaffinity_1_highbits", EPERM, setaffinity_one(HI | 1));
	PROBE("setpriority_process_1", EPERM, setpriority(PRIO_PROCESS, 1, 19));
	PROBE("setpriority_process_1_highbits", EPERM, syscall(SYS_setpriority, PRIO_PROCESS, HI | 1, 19));
	PROBE("setpriority_pgrp_1", EPERM, setpriority(PRIO_PGRP, 1, 19));
	/* PRIO_USER reaches every process of the uid, init included, even with who 0. */
	PROBE("setpriority_user_0", EPERM, setpriority(PRIO_USER, 0, 19));
	PROBE("setpriority_user_own_uid", EPERM, setpriority(PRIO_USER, getuid(), 19));
	PROBE("ioprio_set_process_1", EPERM, syscall(SYS_ioprio_set, IOPRIO_WHO_PROCESS, 1, IOPRIO_IDLE));
	PROBE("ioprio_set_pgrp_1", EPERM, syscall(SYS_ioprio_set, IOPRIO_WHO_PGRP, 1, IOPRIO_IDLE));
	PROBE("ioprio_set_user_0", EPERM, syscall(SYS_ioprio_set, IOPRIO_WHO_USER, 0, IOPRIO_IDLE));
	PROBE("migrate_pages_1", EPERM, migrate_pages_to_node0(1));
	PROBE("move_pages_1", EPERM, syscall(SYS_move_pages, 1, 0, NULL, NULL, NULL, 0));
	pidfd_probes();
	/* The command's own: allowed (the lowest priority, which needs no privilege however the run was
	 * niced; one CPU; idle I/O for itself only). */
	PROBE("setpriority_self", 0, setpriority(PRIO_PROCESS, 0, 19));
	PROBE("setpriority_own_pgrp", 0, setpriority(PRIO_PGRP, 0, 19));
	PROBE("sched_setscheduler_self", 0, setscheduler(0, SCHED_BATCH));
	PROBE("sched_setaffinity_self", 0, setaffinity_one(0));
	PROBE("ioprio_set_self", 0, syscall(SYS_ioprio_set, IOPRIO_WHO_PROCESS, 0, IOPRIO_IDLE));
}

/* Writes PATH's current content back into it ("0" when it cannot be read): proves write access
 * without changing init. Returns 0 when the write went through, else the errno of the refusal. */
static int proc_rewrite(const char *path)
{
	char buf[256] = "0\n";
	ssize_t n, w;
	int e, fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);

	if (fd >= 0) {
		n = read(fd, buf, sizeof(buf) - 1);
		close(fd);
		if (n > 0)
			buf[n] = '\0';
		else
			strcpy(buf, "0\n");
	}
	fd = open(path, O_WRONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
	if (fd < 0)
		return errno;
	w = write(fd, buf, strlen(buf));
	e = w < 0 ? errno : 0;
	close(fd);
	return e;
}

/* Either refusal is a refusal: EACCES at open (the file's mode) or from the write handler (attr files
 * of another task), EPERM from the write handler (a capability, as for timerslack_ns). */
static int refused(int e) { return e == EACCES || e == EPERM; }

static void probe_proc_rewrite(const char *name, const char *path)
{
	int e = proc_rewrite(path);

	printf("%s errno=%s\n", name, guard_errname(e));
	if (!refused(e))
		failures++;
}

/* Every regular file of DIR that a write-back was not refused on, appended to LIST as PATH:ERRNO
 * (none is expected). Files that do not exist count as refused. */
static void proc_sweep(const char *dir, char *list, size_t size)
{
	char path[256], item[sizeof path + 32];
	struct dirent *d;
	DIR *dp = opendir(dir);

	while (dp != NULL && (d = readdir(dp)) != NULL) {
		int e;

		if (d->d_type != DT_REG)
			continue;
		/* A name cut short would probe another file: both buffers fit any d_name, and an
		 * overflow of the list still leaves it non-empty (a failure). */
		if (snprintf(path, sizeof path, "%s/%s", dir, d->d_name) >= (int)sizeof path)
			e = ENAMETOOLONG;
		else
			e = proc_rewrite(path);
		if (refused(e) || e == ENOENT)
			continue;
		if (snprintf(item, sizeof item, "%s%s:%s", *list ? "," : "", path, guard_errname(e)) < (int)sizeof item &&
		    strlen(list) + strlen(item) < size)
			strcat(list, item);
		else if (*list == '\0')
			snprintf(list, size, "(too many to list)");
	}
	if (dp != NULL)
		closedir(dp);
}

/* init's /proc files: none may be written by the command (issue 13, break #8). */
static void proc_write_probes(void)
{
	char list[2048] = "";

	probe_proc_rewrite("write_proc1_oom_score_adj", "/proc/1/oom_score_adj");
	probe_proc_rewrite("write_proc1_oom_adj", "/proc/1/oom_adj");
	probe_proc_rewrite("write_proc1_coredump_filter", "/proc/1/coredump_filter");
	probe_proc_rewrite("write_proc1_autogroup", "/proc/1/autogroup");
	probe_proc_rewrite("write_proc1_timerslack_ns", "/proc/1/timerslack_ns");
	proc_sweep("/proc/1", list, sizeof list);
	proc_sweep("/proc/1/task/1", list, sizeof list);
	proc_sweep("/proc/1/attr", list, sizeof list);
	printf("proc1_writable_files %s\n", *list ? list : "none");
	if (*list)
		failures++;
}

int main(int argc, char **argv)
{
	struct init_sched before;

	guard_check(argc, argv);
	setvbuf(stdout, NULL, _IOLBF, 0);

	printf("init_alive_start init_alive=%d\n", init_alive());
	probe_kill("kill_sigkill_1", SIGKILL);
	probe_kill("kill_sigterm_1", SIGTERM);
	probe_kill("kill_sigstop_1", SIGSTOP);
	probe_kill("kill_sigint_1", SIGINT);
	probe_kill("kill_sighup_1", SIGHUP);

	probe_ptrace("ptrace_attach_1", PTRACE_ATTACH);
	probe_ptrace("ptrace_seize_1", PTRACE_SEIZE);

	probe_open("open_proc1_environ", "/proc/1/environ", O_RDONLY);
	probe_open("open_proc1_mem", "/proc/1/mem", O_RDONLY);
	probe_open("open_proc1_exe_write", "/proc/1/exe", O_WRONLY);
	/* Listing /proc/1/fd needs only ownership of the directory, which a non-dumpable init
	 * gives to root: under a host-root agent the command (uid 0 inside) may list the numbers
	 * (documented in docs/isolation.md). Following a descriptor needs ptrace access: refused. */
	if (getuid() != 0)
		probe_open("open_proc1_fd", "/proc/1/fd", O_RDONLY | O_DIRECTORY);
	fd_follow_probes();
	probe_readlink("readlink_proc1_exe", "/proc/1/exe");
	probe_readlink("readlink_proc1_root", "/proc/1/root");
	probe_readlink("readlink_proc1_cwd", "/proc/1/cwd");

	probe_prlimit("prlimit_1_cpu", 1, 1);
	probe_prlimit("prlimit_1_get", 1, 0);
	probe_prlimit("prlimit_1_highbits_cpu", (1UL << 32) | 1, 1);

	init_sched_read(&before);
	sched_probes();
	init_sched_compare(&before);
	proc_write_probes();

	usleep(100 * 1000);
	printf("init_alive_end init_alive=%d\n", init_alive());
	if (!init_alive())
		failures++;
	printf("attack_init failures=%d\n", failures);
	return failures ? 1 : 0;
}
