/* Privilege removal for init and the command (see privileges.h). The caller is a fresh
 * namespace's process holding CAP_* only inside that user namespace; nothing here can
 * raise anything on the host. */
#include "privileges.h"

#include <errno.h>
#include <linux/securebits.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "nsspawn.h"

/* Root inside the namespace gets no capabilities from execve (NOROOT), a uid change never
 * adjusts capabilities behind our back (NO_SETUID_FIXUP), and nothing can turn these off or
 * raise ambient capabilities again: every bit is locked. */
#define SECUREBITS_LOCKED                                                                     \
	(SECBIT_NOROOT | SECBIT_NOROOT_LOCKED | SECBIT_NO_SETUID_FIXUP |                      \
	 SECBIT_NO_SETUID_FIXUP_LOCKED | SECBIT_KEEP_CAPS_LOCKED | SECBIT_NO_CAP_AMBIENT_RAISE | \
	 SECBIT_NO_CAP_AMBIENT_RAISE_LOCKED)

static int caps_drop_bounding(struct sb_err *err)
{
	/* CAP_LAST_CAP of the headers may lag the kernel: walk until the kernel says EINVAL, which
	 * PR_CAPBSET_DROP returns only for a capability it does not know (one call per capability, not
	 * a read and a drop). Any other failure (EPERM: no CAP_SETPCAP) fails closed. */
	for (int cap = 0; cap < 64; cap++) {
		if (prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) == 0)
			continue;
		if (errno == EINVAL && cap > 0)
			break;
		return sb_fail_errno(err, "dropping capability %d from the bounding set", cap);
	}
	return 0;
}

int privileges_drop(uid_t uid, gid_t gid, cap_t no_caps, struct sb_err *err)
{
	/* Securebits first: they need CAP_SETPCAP, which the steps below take away. */
	if (prctl(PR_SET_SECUREBITS, SECUREBITS_LOCKED, 0, 0, 0) < 0)
		return sb_fail_errno(err, "locking securebits");
	/* The ids are already the mapped ones; setting them names them explicitly and clears
	 * saved ids that could otherwise be switched back to. gid first, while uid may still
	 * have the right to change it. */
	/* Raw syscalls (spawn_ids_set): the libc wrappers (glibc's and musl's, the static agent's)
	 * broadcast the change to every thread of the process as the libc remembers it, and init is
	 * a clone of a multi-threaded agent whose thread list is stale here (as PID 1 of a
	 * namespace, the broadcast would signal init itself forever). */
	if (spawn_ids_set(uid, gid, err) < 0)
		return -1;
	/* Bounding set before the permitted set: dropping from it needs CAP_SETPCAP. */
	if (caps_drop_bounding(err) < 0)
		return -1;
	if (prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0) < 0)
		return sb_fail_errno(err, "clearing the ambient capability set");
	if (cap_set_proc(no_caps) < 0)
		return sb_fail_errno(err, "emptying permitted, effective and inheritable capabilities");
	return 0;
}

int privileges_limit_command(unsigned long max_processes, struct sb_err *err)
{
	struct rlimit nproc, core = { 0, 0 };

	/* no_new_privs: execve can never grant anything again (setuid binaries, file caps), and
	 * it is what allows an unprivileged process to install Landlock and seccomp. */
	if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0)
		return sb_fail_errno(err, "setting no_new_privs");
	/* A fork bomb must not outrun teardown. RLIMIT_NPROC counts per uid in the user
	 * namespace; the kernel ignores it for host root, which init's pid_max covers. A hard
	 * limit below ours (a container's ulimit) cannot be raised without privilege: keep it. */
	if (getrlimit(RLIMIT_NPROC, &nproc) < 0)
		return sb_fail_errno(err, "reading RLIMIT_NPROC");
	if (nproc.rlim_max > max_processes)
		nproc.rlim_max = max_processes;
	nproc.rlim_cur = nproc.rlim_max;
	if (setrlimit(RLIMIT_NPROC, &nproc) < 0)
		return sb_fail_errno(err, "setting RLIMIT_NPROC to %lu", max_processes);
	/* Core dumps could land in the worktree with memory a command should not publish. */
	if (setrlimit(RLIMIT_CORE, &core) < 0)
		return sb_fail_errno(err, "setting RLIMIT_CORE to 0");
	return 0;
}
