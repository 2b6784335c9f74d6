/* `sandbox-agent check`: probes, in throw-away child processes, each kernel feature the
 * boundary needs, and says for each missing one why it matters and how to fix it. Exits
 * non-zero when the boundary cannot be established. Changes nothing on the machine. */
#include "cli.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <linux/close_range.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <sched.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/utsname.h>
#include <sys/wait.h>
#include <unistd.h>

#include "boundary.h"
#include "landlock.h"
#include "secret.h"


/* What the namespace probe learned; errno values, 0 for success, -1 for "not reached". */
struct ns_probe {
	int userns, maps, pidns_mntns, private_mount, proc_mount, pid_max;
};

struct report {
	json_t *features, *problems, *warnings;
	bool ok;
};

static void feature(struct report *r, const char *name, int errnum, bool required, const char *why,
		    const char *fix)
{
	json_object_set_new(r->features, name,
			    json_pack("{s:b, s:s?}", "ok", errnum == 0, "error", errnum > 0 ? strerror(errnum) :
							     errnum < 0 ? "not reached" : NULL));
	if (errnum == 0)
		return;
	json_array_append_new(required ? r->problems : r->warnings,
			      json_pack("{s:s, s:s, s:s}", "feature", name, "reason", why, "fix", fix));
	if (required)
		r->ok = false;
}

static int write_self(const char *name, const char *text)
{
	int fd = open(name, O_WRONLY | O_CLOEXEC);
	ssize_t n;

	if (fd < 0)
		return errno;
	n = write(fd, text, strlen(text));
	close(fd);
	return n == (ssize_t)strlen(text) ? 0 : errno;
}

/* Grandchild, PID 1 of the probe namespace: can it get a view of its own? */
static void probe_inside(struct ns_probe *p)
{
	int fd;

	p->private_mount = mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) == 0 ? 0 : errno;
	if (p->private_mount != 0)
		return;
	p->proc_mount = mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, NULL) == 0 ? 0 : errno;
	if (p->proc_mount != 0)
		return;
	fd = open("/proc/sys/kernel/pid_max", O_WRONLY | O_CLOEXEC);
	p->pid_max = fd < 0 ? errno : (write(fd, "4096\n", 5) == 5 ? 0 : errno);
	if (fd >= 0)
		close(fd);
}

/* Child: a user namespace, its maps, then PID + mount namespaces and a PID 1 inside. */
static void probe_namespaces(int out_fd)
{
	struct ns_probe p = { -1, -1, -1, -1, -1, -1 };
	char map[64];
	uid_t uid = geteuid();
	gid_t gid = getegid();
	pid_t pid;

	p.userns = unshare(CLONE_NEWUSER) == 0 ? 0 : errno;
	if (p.userns == 0) {
		snprintf(map, sizeof map, "%u %u 1\n", (unsigned)uid, (unsigned)uid);
		p.maps = write_self("/proc/self/setgroups", "deny");
		if (p.maps == 0)
			p.maps = write_self("/proc/self/uid_map", map);
		snprintf(map, sizeof map, "%u %u 1\n", (unsigned)gid, (unsigned)gid);
		if (p.maps == 0)
			p.maps = write_self("/proc/self/gid_map", map);
	}
	if (p.maps == 0)
		p.pidns_mntns = unshare(CLONE_NEWPID | CLONE_NEWNS) == 0 ? 0 : errno;
	if (p.pidns_mntns == 0 && (pid = fork()) == 0) {
		probe_inside(&p);
		_exit(write(out_fd, &p, sizeof p) == sizeof p ? 0 : 1);
	} else if (p.pidns_mntns == 0 && pid > 0) {
		waitpid(pid, NULL, 0);
		_exit(0);
	}
	_exit(write(out_fd, &p, sizeof p) == sizeof p ? 0 : 1);
}

static int run_probe(void (*probe)(int), void *result, size_t len)
{
	int fds[2];
	pid_t pid;
	ssize_t n;

	if (pipe2(fds, O_CLOEXEC) < 0)
		return -1;
	pid = fork();
	if (pid == 0) {
		close(fds[0]);
		probe(fds[1]);
		_exit(0);
	}
	close(fds[1]);
	n = pid > 0 ? read(fds[0], result, len) : -1;
	close(fds[0]);
	if (pid > 0)
		waitpid(pid, NULL, 0);
	return n == (ssize_t)len ? 0 : -1;
}

static void probe_seccomp(int out_fd)
{
	/* The smallest filter: allow everything. Loading it proves the kernel takes filters. */
	struct sock_filter allow = BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW);
	struct sock_fprog prog = { 1, &allow };
	int e = 0;

	if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0 || syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, 0, &prog) < 0)
		e = errno;
	_exit(write(out_fd, &e, sizeof e) == sizeof e ? 0 : 1);
}

static int probe_clone3(void)
{
	/* A NULL argument: EFAULT or EINVAL when clone3 exists, ENOSYS when not. */
	return syscall(SYS_clone3, NULL, 0) < 0 && errno == ENOSYS ? ENOSYS : 0;
}

static int probe_pidfd(void)
{
	int fd = (int)syscall(SYS_pidfd_open, getpid(), 0);

	if (fd < 0)
		return errno;
	close(fd);
	return 0;
}

static int probe_wipeonfork(void)
{
	struct sb_err err;
	struct secrets *s = secrets_alloc(&err);

	secrets_free(s);
	return s ? 0 : err.errnum;
}

/* Fills OUT with the mount points below /proc (a container runtime's masks and read-only
 * binds), comma-separated and cut at LEN; returns how many there are, 0 when none or unreadable. */
static int proc_overmounts(char *out, size_t len)
{
	FILE *f = fopen("/proc/self/mountinfo", "re");
	char line[4096], point[1024];
	size_t used = 0;
	bool cut = false;
	int n = 0;

	out[0] = '\0';
	if (f == NULL)
		return 0;
	while (fgets(line, sizeof line, f)) {
		/* The fifth field is the mount point: "ID PARENT MAJ:MIN ROOT POINT ..." */
		if (sscanf(line, "%*s %*s %*s %*s %1023s", point) != 1 || strncmp(point, "/proc/", 6) != 0)
			continue;
		/* Room is kept for a final ", ..." when the list does not fit. */
		if (!cut && used + strlen(point) + 8 < len) {
			used += (size_t)snprintf(out + used, len - used, "%s%s", n ? ", " : "", point);
		} else if (!cut) {
			snprintf(out + used, len - used, ", ...");
			cut = true;
		}
		n++;
	}
	fclose(f);
	return n;
}

/* Returns whether the probe namespace took a pid_max of its own (Linux >= 6.14). */
static bool namespaces_report(struct report *r)
{
	struct ns_probe p = { -1, -1, -1, -1, -1, -1 };
	char masked[512], proc_why[768];
	const char *mask_fix = "run the container with /proc unmasked: Podman --security-opt unmask=ALL (or at "
			       "least unmask=/proc/*), Docker --security-opt systempaths=unconfined, Kubernetes "
			       "securityContext procMount: Unmasked with hostUsers: false (images/README.md)";

	if (run_probe(probe_namespaces, &p, sizeof p) < 0)
		p.userns = EIO;
	feature(r, "user_namespace", p.userns, true, "commands run in a user namespace of their own",
		"enable unprivileged user namespaces (sysctl kernel.unprivileged_userns_clone=1, "
		"user.max_user_namespaces > 0), or allow unshare/clone with CLONE_NEWUSER in the seccomp profile");
	feature(r, "id_maps", p.userns ? -1 : p.maps, true, "the agent maps its own uid and gid into the namespace",
		"allow writing /proc/PID/uid_map (no LSM policy may forbid it)");
	feature(r, "pid_mount_namespaces", p.maps ? -1 : p.pidns_mntns, true,
		"a PID namespace is how every descendant is found and killed",
		"allow CLONE_NEWPID and CLONE_NEWNS inside a user namespace (seccomp profile)");
	feature(r, "private_mounts", p.pidns_mntns ? -1 : p.private_mount, true,
		"the command's mount view must not propagate to the host", "allow mount(2) in the seccomp profile");
	/* Name the cause: the kernel mounts a new procfs in a nested user namespace only when the
	 * current /proc is fully visible (mount_too_revealing), and a container runtime's masked
	 * and read-only paths are exactly what makes it not. The EPERM alone says none of that. */
	if (p.proc_mount > 0 && proc_overmounts(masked, sizeof masked) > 0)
		snprintf(proc_why, sizeof proc_why,
			 "/proc cannot be mounted in the command's namespaces (%s): the kernel allows a fresh /proc "
			 "only when the existing one is fully visible, and here paths are masked or read-only over "
			 "it (%s); without a fresh /proc the command would see every process", strerror(p.proc_mount),
			 masked);
	else if (p.proc_mount > 0)
		snprintf(proc_why, sizeof proc_why,
			 "/proc cannot be mounted in the command's namespaces (%s); without a fresh /proc the "
			 "command would see every process", strerror(p.proc_mount));
	else
		snprintf(proc_why, sizeof proc_why, "a fresh /proc hides every process outside the command's namespace");
	feature(r, "proc_mount", p.private_mount ? -1 : p.proc_mount, true, proc_why, mask_fix);
	feature(r, "pid_max_per_namespace", p.proc_mount ? -1 : p.pid_max, geteuid() == 0,
		"bounds the number of processes in a namespace (Linux >= 6.14); RLIMIT_NPROC does not apply to host root",
		"run the agent as a non-root user, or on Linux 6.14 or later");
	return p.proc_mount == 0 && p.pid_max == 0;
}

/* What bounds every command unless its options say otherwise (boundary_prepare.c boundary_prepare()):
 * RLIMIT_NPROC (privileges_limit_command(); commands are never host root, so it applies), the
 * PID namespace's own pid_max where the kernel takes it (mounts.c pid_max_apply()), and the sizes
 * of the read-only world's private /tmp and /dev/shm. Memory and CPU are the runtime's (the
 * container's or the manager's cgroup), not the agent's. */
static json_t *limits_report(bool pid_max_per_namespace)
{
	return json_pack("{s:I, s:b, s:I, s:I}", "rlimit_nproc", (json_int_t)BOUNDARY_MAX_PROCESSES_DEFAULT,
			 "pid_max_per_namespace", pid_max_per_namespace, "tmp_bytes",
			 (json_int_t)BOUNDARY_TMP_BYTES_DEFAULT, "shm_bytes", (json_int_t)BOUNDARY_SHM_BYTES_DEFAULT);
}

static void landlock_report(struct report *r)
{
	int abi = landlock_abi();

	json_object_set_new(r->features, "landlock",
			    json_pack("{s:b, s:i, s:b, s:b}", "ok", abi >= 4, "abi", abi, "tcp_port_blocking", abi >= 4,
				      "scopes", abi >= 6));
	if (abi < 4)
		json_array_append_new(r->warnings, json_pack("{s:s, s:s, s:s}", "feature", "landlock", "reason",
				      "without Landlock ABI 4 (Linux 6.7) commands cannot be kept from TCP listeners "
				      "(--block-port is refused)", "fix",
				      "use Linux >= 6.7 with lsm=landlock, or a network rule in the runtime"));
	else if (abi < 6)
		json_array_append_new(r->warnings, json_pack("{s:s, s:s, s:s}", "feature", "landlock_scopes", "reason",
				      "without Landlock ABI 6 (Linux 6.12) abstract unix sockets outside the sandbox "
				      "stay reachable", "fix", "use Linux >= 6.12"));
}

json_t *check_report(bool *ok)
{
	struct report r = { json_object(), json_array(), json_array(), true };
	struct utsname u;
	int seccomp_err = EIO;
	bool pid_max_per_namespace = namespaces_report(&r);

	if (run_probe(probe_seccomp, &seccomp_err, sizeof seccomp_err) < 0)
		seccomp_err = EIO;
	feature(&r, "seccomp", seccomp_err, true, "the command's syscall filter is loaded last, before execve",
		"use a kernel with CONFIG_SECCOMP_FILTER");
	landlock_report(&r);
	feature(&r, "clone3", probe_clone3(), false, "clone3 returns the pidfd atomically; clone() is the fallback",
		"none needed");
	feature(&r, "pidfd", probe_pidfd(), true, "init is killed and reaped through a pidfd, immune to pid reuse",
		"use Linux >= 5.3");
	feature(&r, "wipe_on_fork", probe_wipeonfork(), true,
		"the nonce and receipt key are never copied into init or the command", "use Linux >= 4.14");
	feature(&r, "close_range", syscall(SYS_close_range, 3U, 2U, 0) < 0 && errno == ENOSYS ? ENOSYS : 0, true,
		"a command starts with descriptors 0-2 only", "use Linux >= 5.9");
	uname(&u);
	*ok = r.ok;
	return json_pack("{s:b, s:s, s:i, s:o, s:o, s:o, s:o}", "ok", r.ok, "kernel", u.release, "uid", (int)geteuid(),
			 "features", r.features, "problems", r.problems, "warnings", r.warnings, "limits",
			 limits_report(pid_max_per_namespace));
}

static void check_problems_print(json_t *obj)
{
	json_t *problems = json_object_get(obj, "problems"), *pr;
	size_t i;

	fprintf(stderr, "sandbox-agent check: the boundary cannot be established here\n");
	json_array_foreach(problems, i, pr)
		fprintf(stderr, "sandbox-agent check: %s: %s; fix: %s\n",
			json_string_value(json_object_get(pr, "feature")),
			json_string_value(json_object_get(pr, "reason")), json_string_value(json_object_get(pr, "fix")));
}

int cli_check(int argc, char **argv)
{
	bool ok = false;
	json_t *obj = check_report(&ok);
	char *text = obj ? json_dumps(obj, JSON_INDENT(2)) : NULL;

	(void)argc;
	(void)argv;
	printf("%s\n", text ? text : "{\"ok\": false}");
	/* The JSON is for programs; a container's log shows stderr, so say it there in words too. */
	if (!ok)
		check_problems_print(obj);
	free(text);
	json_decref(obj);
	return ok ? 0 : 1;
}
