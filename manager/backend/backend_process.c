/* The process backend (backend.h): a session's sandbox is `sandbox-agent serve` running as PID 1 of
 * its own user, PID, mount, IPC and UTS namespaces on this host, in a root built from the mount plan,
 * reached over <private_dir>/sock/agent.sock. Two roles, labelled where their code begins:
 *   manager, outside     - prepare(), stop(), evidence(), adopt(): plans the root (process_root.c,
 *                          which also lists the sandbox's view), clones, writes the id maps, waits
 *                          for the socket (process_launch.c), limits in a cgroup (process_cgroup.c);
 *                          proves the end through a pidfd (process_evidence.c).
 *   sandbox init, inside - the clone between clone() and execve() of the agent: builds the root from
 *                          the steps the manager prepared, pivots into it, executes the agent. Its
 *                          code is sandbox-agent/sandbox_init.c, read beside the agent's own init.
 * Must never: allocate or call glibc fork/malloc after clone (the manager is multi-threaded); follow a
 * symbolic link while building the root (workspace content is written by commands); say a sandbox is
 * gone without seeing its PID-namespace init exit through a pidfd.
 *
 * Who runs: the sandbox's uid N, mapped 1:1 (N inside is N on the host); nothing maps uid 0, so no
 * process inside is root of any user namespace. Sandbox init builds the root with the capabilities
 * a new namespace's first process holds, and loses them all at the agent's execve.
 * Limits: sized /tmp and /dev/shm always; memory, pids and CPU in a cgroup of its own when the host
 * delegates a cgroup v2 directory (process_settings.cgroup_parent); limits() reads back which hold.
 */
#include "backend_internal.h"
#include "process.h"

#include "log.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/statfs.h>

static int process_prepare(struct backend *be, const struct sandbox_spec *spec, struct sandbox_handle *h,
			   struct sb_err *err)
{
	handle_clear(h);
	if (process_launch(process_of(be), spec, h, err) < 0) {
		sb_err_prefix(err, "preparing the sandbox of session %s (generation %llu)",
			      spec && spec->session ? spec->session : "?",
			      spec ? (unsigned long long)spec->generation : 0ULL);
		return -1;
	}
	return 0;
}

/* Size of the tmpfs at <init's root>/<path>, measured: -1 when none can be read. */
static int64_t tmpfs_size(pid_t pid, const char *path)
{
	char at[96];
	struct statfs sf;

	snprintf(at, sizeof at, "/proc/%d/root%s", (int)pid, path);
	if (statfs(at, &sf) < 0 || sf.f_type != 0x01021994 /* TMPFS_MAGIC */)
		return -1;
	return (int64_t)sf.f_blocks * (int64_t)sf.f_bsize;
}

/* What holds, read back from the kernel: the tmpfs sizes through the init's root, the cgroup's
 * files for the limits, and the init's own membership in it (cgroup.procs). */
static int process_limits(struct backend *be, const struct sandbox_handle *h, struct sandbox_limits *out,
			  struct sb_err *err)
{
	struct process *p = process_of(be);
	const struct process_handle *ph = process_handle_get(h);

	*out = (struct sandbox_limits){ -1, -1, -1, -1, -1, -1, "" };
	if (ph->magic != PROCESS_HANDLE_MAGIC)
		return sb_invalid(err, "the handle of sandbox '%s' holds no sandbox of the process backend",
				  h->runtime_id);
	out->tmp_bytes = tmpfs_size(ph->pid, "/tmp");
	out->shm_bytes = tmpfs_size(ph->pid, "/dev/shm");
	if (out->tmp_bytes < 0 && out->shm_bytes < 0)
		return sb_fail_errno(err, "reading the limits of the sandbox's init (pid %d)", (int)ph->pid);
	return cgroup_limits_read(p, ph->cgroup, ph->pid, out, err);
}

static void process_destroy(struct backend *be)
{
	struct process *p = process_of(be);

	if (p->cgroup_fd >= 0)
		close(p->cgroup_fd);
	free(p);
}

static const struct backend_ops process_ops = {
	.name = "process",
	.prepare = process_prepare,
	.stop = process_stop,
	.evidence = process_evidence,
	.adopt = process_adopt,
	.limits = process_limits,
	.net_listen = process_net_listen,
	.destroy = process_destroy,
};

int backend_process_create_with(struct backend **out, const struct process_settings *set, struct sb_err *err)
{
	struct process *p = calloc(1, sizeof *p);
	char host[512];

	if (p == NULL)
		return sb_fail(err, ENOMEM, "creating the process backend");
	p->be.ops = &process_ops;
	p->set = *set;
	p->cgroup_fd = -1;
	backend_sizes_default(&p->set.tmp_bytes, &p->set.shm_bytes);
	if (p->set.cgroup_parent[0] == '\0') {
		cgroup_describe_host(host, sizeof host);
		/* A warning: every sandbox of this manager runs without those limits. */
		sb_warn("process backend: no cgroup-parent configured, so sandboxes get no memory, pids or CPU limit "
			"of a cgroup (only /tmp %lld bytes, /dev/shm %lld bytes and the agent's RLIMIT_NPROC); %s",
			(long long)p->set.tmp_bytes, (long long)p->set.shm_bytes, host);
	} else if (cgroup_parent_open(p, err) < 0) {
		process_destroy(&p->be);
		return -1;
	} else {
		cgroup_sweep(p);
	}
	*out = &p->be;
	return 0;
}

int backend_process_create(struct backend **out, struct sb_err *err)
{
	struct process_settings set = { 0 };

	return backend_process_create_with(out, &set, err);
}
