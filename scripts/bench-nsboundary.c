/* The kernel's work of the agent's boundary, alone, for `make bench` (scripts/bench-agent.sh): what a
 * one-shot call's guarantees cost the kernel on this machine when nothing is checked, read or proven.
 * A measuring stick, never a sandbox. It is scripts/bench-nsfloor.c (user, PID and mount namespaces,
 * the id maps, a private tree, a fresh /proc, `bash -c COMMAND` as PID 2, the parent waiting on PID 1's
 * pidfd) plus, each made once and in the agent's order, the kernel operations docs/isolation.md names:
 * IPC and UTS namespaces; one directory hidden under an empty tmpfs; the read-only world (the working
 * directory copied, the five device nodes copied, every mount read-only, nodev and nosuid at once, a
 * fresh sealed /dev with its links and /dev/shm, a private /tmp, the working directory attached); the
 * bounding set, capabilities and securebits dropped, no_new_privs; the command in a session of its
 * own with its output in two pipes the parent drains, its Landlock layer (writes beneath four roots)
 * and the agent's own seccomp program (build/gen/seccomp_bpf.c); and a receipt-sized file written
 * and fsynced with its directory. Not done: every check of the agent (mount table reads, identity
 * comparisons, walks), the receipt's MAC and JSON, the result. Built static against glibc, as the
 * floor is, so the two differ by the boundary's kernel work only; and against musl, as the agent is
 * (common/linux_calls.h gives musl the mount API's calls), so the agent can be read against it.
 * With --required, it also does the work that two of the guarantees cannot be had without, each once,
 * where the agent does it, and nothing else: the mount table read whole before the clone (the
 * agent's check of rule N7 and its alias search, boundary_view.c, read it), the view's own mount
 * table read whole in init once the view is built (N7 again, on the view: mounts.c
 * kernel_mounts_refuse()), and the receipt's HMAC-SHA256 computed twice, to sign it and to verify
 * what was written (receipt.c, common/receipt_mac.c), with mbedtls as the agent's. No parsing, no
 * JSON, no comparison: a lower bound of those guarantees' cost, not an implementation of them.
 * Usage: bench-nsboundary [--required] HIDE_DIR RECEIPT_DIR COMMAND (run from the working directory;
 * prints nothing; exits with bash's status). */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <linux/capability.h>
#include <linux/landlock.h>
#include <linux/sched.h>
#include <linux/securebits.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <mbedtls/md.h>

#include "bench-ns.h"
#include "linux_calls.h"
#include "seccomp.h"

static int tmpfs_new(const char *mode, const char *size, unsigned attrs)
{
	int fs = fsopen("tmpfs", FSOPEN_CLOEXEC), mnt;

	if (fs < 0 || fsconfig(fs, FSCONFIG_SET_STRING, "mode", mode, 0) < 0 ||
	    fsconfig(fs, FSCONFIG_SET_STRING, "size", size, 0) < 0 || fsconfig(fs, FSCONFIG_CMD_CREATE, NULL, NULL, 0) < 0)
		die("tmpfs");
	mnt = fsmount(fs, FSMOUNT_CLOEXEC, attrs);
	if (mnt < 0)
		die("fsmount");
	close(fs);
	return mnt;
}

static int clone_of(const char *path, unsigned flags)
{
	int fd = open_tree(AT_FDCWD, path, OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC | flags);

	if (fd < 0)
		die(path);
	return fd;
}

static void attach(int mnt, const char *path)
{
	if (move_mount(mnt, "", AT_FDCWD, path, MOVE_MOUNT_F_EMPTY_PATH) < 0)
		die(path);
	close(mnt);
}

/* The working directory's mount point in the new view: under /tmp it lies in the fresh tmpfs. */
static void dirs_make(const char *path)
{
	char buf[4096];

	snprintf(buf, sizeof buf, "%s", path);
	for (char *c = buf + 1; *c != '\0'; c++) {
		if (*c != '/')
			continue;
		*c = '\0';
		if (mkdir(buf, 0755) < 0 && errno != EEXIST)
			die(buf);
		*c = '/';
	}
	if (mkdir(buf, 0755) < 0 && errno != EEXIST)
		die(buf);
}

static const char *const nodes[] = { "/dev/null", "/dev/zero", "/dev/full", "/dev/random", "/dev/urandom" };

/* init: the view as the agent's init builds it (sandbox-agent/mounts.c), minus its checks. */
static void view_build(const char *hide, const char *cwd)
{
	struct mount_attr ro = { .attr_set = MOUNT_ATTR_RDONLY | MOUNT_ATTR_NODEV | MOUNT_ATTR_NOSUID };
	struct mount_attr rw = { .attr_clr = MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOEXEC };
	struct mount_attr seal = { .attr_set = MOUNT_ATTR_RDONLY };
	int dev[5], work, mnt;

	if (mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) < 0)
		die("private");
	attach(tmpfs_new("000", "4096", MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOEXEC | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV), hide);
	work = clone_of(cwd, AT_RECURSIVE);
	if (mount_setattr(work, "", AT_EMPTY_PATH, &ro, sizeof ro) < 0 || mount_setattr(work, "", AT_EMPTY_PATH, &rw, sizeof rw) < 0)
		die("the working directory's copy");
	for (int i = 0; i < 5; i++)
		dev[i] = clone_of(nodes[i], 0);
	if (mount_setattr(AT_FDCWD, "/", AT_RECURSIVE, &ro, sizeof ro) < 0)
		die("read-only world");
	mnt = tmpfs_new("0755", "1048576", MOUNT_ATTR_NOSUID | MOUNT_ATTR_NOEXEC);
	attach(dup(mnt), "/dev");
	for (int i = 0; i < 5; i++) {
		if (mknod(nodes[i], S_IFREG | 0444, 0) < 0)
			die(nodes[i]);
		attach(dev[i], nodes[i]);
	}
	if (symlink("/proc/self/fd", "/dev/fd") < 0 || symlink("/proc/self/fd/0", "/dev/stdin") < 0 ||
	    symlink("/proc/self/fd/1", "/dev/stdout") < 0 || symlink("/proc/self/fd/2", "/dev/stderr") < 0 ||
	    mkdir("/dev/shm", 0755) < 0)
		die("/dev");
	attach(tmpfs_new("1777", "67108864", MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV | MOUNT_ATTR_NOEXEC), "/dev/shm");
	if (mount_setattr(mnt, "", AT_EMPTY_PATH, &seal, sizeof seal) < 0)
		die("sealing /dev");
	close(mnt);
	attach(tmpfs_new("1777", "67108864", MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV), "/tmp");
	dirs_make(cwd);
	attach(work, cwd);
	if (mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, NULL) < 0)
		die("mounting /proc");
	if (chdir(cwd) < 0)
		die("chdir");
}

static void privileges_drop(void)
{
	struct __user_cap_header_struct h = { .version = _LINUX_CAPABILITY_VERSION_3 };
	struct __user_cap_data_struct d[2] = { 0 };

	if (prctl(PR_SET_SECUREBITS, SECBIT_NOROOT | SECBIT_NOROOT_LOCKED | SECBIT_NO_SETUID_FIXUP |
			  SECBIT_NO_SETUID_FIXUP_LOCKED | SECBIT_KEEP_CAPS_LOCKED | SECBIT_NO_CAP_AMBIENT_RAISE |
			  SECBIT_NO_CAP_AMBIENT_RAISE_LOCKED) < 0)
		die("securebits");
	for (int cap = 0; prctl(PR_CAPBSET_READ, cap) >= 0; cap++)
		if (prctl(PR_CAPBSET_DROP, cap) < 0)
			die("bounding set");
	if (syscall(SYS_capset, &h, d) < 0 || prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0 ||
	    prctl(PR_SET_DUMPABLE, 0) < 0)
		die("capabilities");
}

static void landlock_layer(const char *cwd)
{
	struct landlock_ruleset_attr attr = { .handled_access_fs = LANDLOCK_ACCESS_FS_WRITE_FILE };
	const char *roots[] = { cwd, "/tmp", "/dev", "/proc" };
	int rs = (int)syscall(SYS_landlock_create_ruleset, &attr, sizeof attr, 0);

	if (rs < 0)
		die("landlock_create_ruleset");
	for (int i = 0; i < 4; i++) {
		struct landlock_path_beneath_attr rule = { .allowed_access = LANDLOCK_ACCESS_FS_WRITE_FILE };

		rule.parent_fd = open(roots[i], O_PATH | O_CLOEXEC);
		if (rule.parent_fd < 0 || syscall(SYS_landlock_add_rule, rs, LANDLOCK_RULE_PATH_BENEATH, &rule, 0) < 0)
			die("landlock_add_rule");
		close(rule.parent_fd);
	}
	if (syscall(SYS_landlock_restrict_self, rs, 0) < 0)
		die("landlock_restrict_self");
	close(rs);
}

struct init_args {
	int go, out, err;
	const char *hide, *cwd, *command;
	int required;
};

/* This process's mount table read whole, as the agent reads it (--required). */
static void mount_table_read(void)
{
	static char buf[65536];
	int fd = open("/proc/self/mountinfo", O_RDONLY | O_CLOEXEC);
	ssize_t n;

	if (fd < 0)
		die("/proc/self/mountinfo");
	while ((n = read(fd, buf, sizeof buf)) > 0)
		;
	if (n < 0)
		die("reading /proc/self/mountinfo");
	close(fd);
}

static int init_main(const struct init_args *a)
{
	char c;
	int status;
	pid_t cmd;

	if (read(a->go, &c, 1) != 0)
		die("waiting for the id maps");
	view_build(a->hide, a->cwd);
	if (a->required)
		mount_table_read();
	privileges_drop();
	cmd = fork();
	if (cmd < 0)
		die("fork");
	if (cmd == 0) {
		int null = open("/dev/null", O_RDWR | O_CLOEXEC);

		if (setsid() < 0 || null < 0 || dup2(null, 0) < 0 || dup2(a->out, 1) < 0 || dup2(a->err, 2) < 0)
			die("the command's stdio");
		umask(077);
		landlock_layer(a->cwd);
		if (syscall(SYS_seccomp, 1 /* SECCOMP_SET_MODE_FILTER */, 0, &seccomp_program_readonly_world) < 0)
			die("seccomp");
		bash_exec(a->command);
	}
	close(a->out);
	close(a->err);
	if (waitpid(cmd, &status, 0) < 0)
		die("waitpid");
	return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

/* The parent's side of the output: both pipes read to their end. */
static void output_drain(int out, int err)
{
	struct pollfd p[2] = { { .fd = out, .events = POLLIN }, { .fd = err, .events = POLLIN } };
	char buf[4096];

	while (p[0].fd >= 0 || p[1].fd >= 0) {
		if (poll(p, 2, -1) < 0)
			die("poll");
		for (int i = 0; i < 2; i++)
			if (p[i].revents != 0 && read(p[i].fd, buf, sizeof buf) <= 0) {
				close(p[i].fd);
				p[i].fd = -1;
			}
	}
}

/* A receipt-sized file, new, written whole and synced with its directory, as receipt.c does. Named at
 * random, as an exec id is: a pid alone comes round again within one run (pid_max 32768 here). */
static void receipt_put(const char *dir, int required)
{
	static char text[640];
	unsigned char id[8], key[32], mac[32];
	char name[32];
	int d, fd;

	memset(text, 'r', sizeof text);
	if (getrandom(id, sizeof id, 0) != (ssize_t)sizeof id ||
	    (required && getrandom(key, sizeof key, 0) != (ssize_t)sizeof key))
		die("getrandom");
	if (required && mbedtls_md_hmac(mbedtls_md_info_from_type(MBEDTLS_MD_SHA256), key, sizeof key,
					(const unsigned char *)text, sizeof text, mac) != 0)
		die("the receipt's MAC");
	for (size_t i = 0; i < sizeof id; i++)
		snprintf(name + 2 * i, 3, "%02x", id[i]);
	strcat(name, ".json");
	d = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (d < 0)
		die(dir);
	fd = openat(d, name, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
	if (fd < 0 || write(fd, text, sizeof text) != (ssize_t)sizeof text || fsync(fd) < 0 || fsync(d) < 0)
		die("the receipt");
	if (required && mbedtls_md_hmac(mbedtls_md_info_from_type(MBEDTLS_MD_SHA256), key, sizeof key,
					(const unsigned char *)text, sizeof text, mac) != 0)
		die("the receipt's MAC, verified");
	close(fd);
	close(d);
}

int main(int argc, char **argv)
{
	struct clone_args ca = { .flags = CLONE_NEWUSER | CLONE_NEWPID | CLONE_NEWNS | CLONE_NEWIPC | CLONE_NEWUTS |
					  CLONE_PIDFD,
				 .exit_signal = SIGCHLD };
	static char cwd[4096];
	struct init_args a;
	int go[2], out[2], err[2], pidfd = -1;
	siginfo_t info;
	pid_t pid;
	int required = argc > 1 && strcmp(argv[1], "--required") == 0;

	argc -= required;
	argv += required;
	if (argc != 4) {
		fprintf(stderr, "usage: bench-nsboundary [--required] HIDE_DIR RECEIPT_DIR COMMAND\n");
		return 2;
	}
	if (getcwd(cwd, sizeof cwd) == NULL || pipe2(go, O_CLOEXEC) < 0 || pipe2(out, O_CLOEXEC) < 0 ||
	    pipe2(err, O_CLOEXEC) < 0)
		die("start");
	a = (struct init_args){ .go = go[0], .out = out[1], .err = err[1], .hide = argv[1], .cwd = cwd, .command = argv[3],
			  .required = required };
	if (required)
		mount_table_read();
	ca.pidfd = (__u64)(uintptr_t)&pidfd;
	pid = (pid_t)syscall(SYS_clone3, &ca, sizeof ca);
	if (pid < 0)
		die("clone3");
	if (pid == 0) {
		close(go[1]);
		close(out[0]);
		close(err[0]);
		_exit(init_main(&a));
	}
	close(go[0]);
	close(out[1]);
	close(err[1]);
	id_maps_write(pid);
	close(go[1]);
	output_drain(out[0], err[0]);
	memset(&info, 0, sizeof info);
	if (waitid((idtype_t)P_PIDFD, (id_t)pidfd, &info, WEXITED) < 0)
		die("waitid");
	receipt_put(argv[2], required);
	return info.si_code == CLD_EXITED ? info.si_status : 128 + info.si_status;
}
