/* Attack program: tries to kill, stop, trace, read or rlimit the protected PID 1 from inside the boundary.
 * Prints one line per probe and exits 0 only when every attempt was refused and PID 1 kept running.
 * Runs only behind guard_check(); it must never be run against the host's PID 1. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/ptrace.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "guard.h"

static int failures;

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

/* Prints NAME errno=E and counts a failure unless the call failed with the expected errno. */
static void report(const char *name, int r, int e, int want)
{
	printf("%s errno=%s\n", name, guard_errname(r < 0 ? e : 0));
	if (r >= 0 || e != want)
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
	char path[64] = "/proc/1/fd/0";
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

int main(int argc, char **argv)
{
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

	usleep(100 * 1000);
	printf("init_alive_end init_alive=%d\n", init_alive());
	if (!init_alive())
		failures++;
	printf("attack_init failures=%d\n", failures);
	return failures ? 1 : 0;
}
