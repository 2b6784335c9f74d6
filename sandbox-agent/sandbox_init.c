/* Sandbox init of the process backend, inside (see sandbox_init.h): the clone between clone() and
 * execve() of the agent. Runs in a copy of the manager's memory, one thread. Reads the plan and its
 * steps, writes only to its stack and the descriptors it keeps in them, allocates nothing, reports a
 * failed step over the error pipe and dies. */
#include "sandbox_init.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <net/if.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "cleanup.h"
#include "error.h"
#include "mountfd.h"
#include "nsspawn.h"

#define PUT_OLD ".oldroot"

/* Tell the manager what failed and die at once: prepare() fails with this message, never with
 * "child exited 125". */
__attribute__((noreturn)) static void die_report(int error_fd, const struct sb_err *err)
{
	spawn_die(error_fd, "sandbox init", err, SPAWN_EXIT_SETUP_FAILED);
}

/* The clone holds a copy of every descriptor of the manager (its database, clients' sockets, other
 * sandboxes' pipes). Keep only our four, so none of them stays open while the root is built. */
static int fds_keep_only(const struct sandbox_init *si, struct sb_err *err)
{
	unsigned keep[4] = { (unsigned)si->go_fd, (unsigned)si->error_fd, (unsigned)si->log_fd, (unsigned)si->null_fd };

	return spawn_fds_keep(keep, 4, err);
}

/* The host paths the view is made of, opened before the ids change, as far as the manager's own uid
 * may search: an unprivileged manager's state directory can lie under a 0700 home that no sandbox
 * uid may enter (Debian 12 makes homes so). What that uid may not search (the sandbox's own 0700
 * worktree: this process holds no capability over the host's files, only over its namespace) is
 * left for the sandbox's uid to open after the change (source_finish()). No link is followed on
 * either side; the paths are the manager's plan, canonical (process_root.c). */
static int sources_open(struct sandbox_init *si, struct sb_err *err)
{
	si->root_fd = mfd_open_reachable(si->root, &si->root_rest);
	if (si->root_fd < 0)
		return sb_fail_errno(err, "opening the new root's mount point %s", si->root);
	for (size_t i = 0; i < si->steps->n; i++) {
		struct step *st = &si->steps->v[i];

		if (st->kind != STEP_BIND || st->source_inside)
			continue;
		st->src_fd = mfd_open_reachable(st->source, &st->src_rest);
		if (st->src_fd < 0)
			return sb_fail_errno(err, "opening %s to mount it at %s", st->source, st->path);
	}
	return 0;
}

/* The rest of a path sources_open() began, opened as the sandbox's uid beneath what it reached; the
 * first descriptor is closed either way. Returns an O_PATH descriptor or -1 with errno. */
static int source_finish(int *fd, const char *rest, uint64_t flags)
{
	int out = rest[0] == '\0' ? fcntl(*fd, F_DUPFD_CLOEXEC, 3) : mfd_open_nofollow(*fd, rest, O_PATH | flags);
	int saved = errno;

	close(*fd);
	*fd = -1;
	errno = saved;
	return out;
}

static int run_tmpfs(struct step *st, int root, struct sb_err *err)
{
	int mnt = mfd_fs_new("tmpfs", st->mode, st->size, st->attrs, st->path, err);

	if (mnt < 0)
		return -1;
	if (mfd_attach(mnt, root, st->path, true, err) < 0) {
		close(mnt);
		return -1;
	}
	if (st->seal)
		st->mnt_fd = mnt; /* read-only once everything inside is mounted */
	else
		close(mnt);
	return 0;
}

static int run_proc(const struct step *st, int root, struct sb_err *err)
{
	/* Mounted from inside the new PID namespace, it shows only the sandbox's processes. The
	 * kernel allows it because the host's /proc is fully visible in our (copied) mount tree. */
	cleanup_close int mnt = mfd_fs_new("proc", NULL, 0, st->attrs, st->path, err);

	if (mnt < 0)
		return -1;
	return mfd_attach(mnt, root, st->path, true, err);
}

static int run_bind(struct step *st, int root, struct sb_err *err)
{
	cleanup_close int src = -1, mnt = -1;
	struct stat sb;

	/* An anchor's directory may not exist yet in the host directory it lies in: made (and
	 * opened) the way every mount point is, refusing links. */
	if (st->anchor) {
		src = mfd_mountpoint_make(root, st->path, true, err);
		if (src < 0)
			return -1;
		close(src);
	}
	/* The source is opened without following any link: a plan path is canonical, so a link on
	 * the way can only be one a command planted in a writable workspace directory. */
	src = st->source_inside ? mfd_open_nofollow(root, st->source + 1, O_PATH) : source_finish(&st->src_fd, st->src_rest, 0);
	if (src < 0 || fstat(src, &sb) < 0)
		return sb_fail_errno(err, "opening %s to mount it at %s", st->source, st->path);
	/* A recursive copy, its attributes set before it is attached: never visible writable. */
	mnt = mfd_clone_tree(src, st->attrs, st->source, err);
	if (mnt < 0)
		return -1;
	return mfd_attach(mnt, root, st->path, S_ISDIR(sb.st_mode), err);
}

static int run_symlink(const struct step *st, int root, struct sb_err *err)
{
	char parent[PATH_MAX];
	const char *name = strrchr(st->path, '/') + 1;
	size_t plen = (size_t)(name - st->path);
	cleanup_close int pfd = -1;

	memcpy(parent, st->path + 1, plen > 1 ? plen - 2 : 0);
	parent[plen > 1 ? plen - 2 : 0] = '\0';
	pfd = mfd_dir_make_beneath(root, parent);
	if (pfd < 0)
		return sb_fail_errno(err, "making the directories that lead to %s", st->path);
	if (symlinkat(st->source, pfd, name) < 0)
		return sb_fail_errno(err, "making the link %s -> %s", st->path, st->source);
	return 0;
}

static int run_file(const struct step *st, int root, struct sb_err *err)
{
	cleanup_close int fd = mfd_mountpoint_make(root, st->path, false, err);

	return fd < 0 ? -1 : 0;
}

static int root_steps(struct sandbox_init *si, int root, struct sb_err *err)
{
	for (size_t i = 0; i < si->steps->n; i++) {
		struct step *st = &si->steps->v[i];
		int rc = -1;

		switch (st->kind) {
		case STEP_TMPFS: rc = run_tmpfs(st, root, err); break;
		case STEP_BIND: rc = run_bind(st, root, err); break;
		case STEP_SYMLINK: rc = run_symlink(st, root, err); break;
		case STEP_FILE: rc = run_file(st, root, err); break;
		case STEP_PROC: rc = run_proc(st, root, err); break;
		}
		if (rc < 0)
			return -1;
	}
	return 0;
}

/* The new root: a tmpfs on <private_dir>/root, seen only in this mount namespace. Returns its
 * mount descriptor (also the directory everything else is resolved beneath) or -1. */
static int root_mount(struct sandbox_init *si, struct sb_err *err)
{
	cleanup_close int target = -1;
	int mnt;

	/* Private first: otherwise every mount below would propagate to the host's peer groups. */
	if (mfd_tree_private(err) < 0)
		return -1;
	target = source_finish(&si->root_fd, si->root_rest, O_DIRECTORY);
	if (target < 0)
		return sb_fail_errno(err, "opening the new root's mount point %s", si->root);
	mnt = mfd_fs_new("tmpfs", "0755", 0, MFD_ATTR_SAFE, "/", err);
	if (mnt < 0)
		return -1;
	if (move_mount(mnt, "", target, "", MOVE_MOUNT_F_EMPTY_PATH | MOVE_MOUNT_T_EMPTY_PATH) < 0) {
		sb_fail_errno(err, "mounting the new root at %s", si->root);
		close(mnt);
		return -1;
	}
	return mnt;
}

/* pivot_root into the new root and detach the host's tree for good: from here on nothing of the host
 * is reachable but what the steps bound. Then the tmpfs directories turn read-only. */
static int root_enter(struct sandbox_init *si, int root, struct sb_err *err)
{
	if (mkdirat(root, PUT_OLD, 0700) < 0)
		return sb_fail_errno(err, "making /%s", PUT_OLD);
	if (fchdir(root) < 0)
		return sb_fail_errno(err, "entering the new root");
	if (syscall(SYS_pivot_root, ".", PUT_OLD) < 0)
		return sb_fail_errno(err, "pivot_root into %s", si->root);
	if (umount2(PUT_OLD, MNT_DETACH) < 0)
		return sb_fail_errno(err, "detaching the host's root");
	if (unlinkat(root, PUT_OLD, AT_REMOVEDIR) < 0)
		return sb_fail_errno(err, "removing /%s", PUT_OLD);
	if (chdir("/") < 0)
		return sb_fail_errno(err, "entering /");
	if (mfd_seal(root, "/", err) < 0)
		return -1;
	for (size_t i = 0; i < si->steps->n; i++)
		if (si->steps->v[i].mnt_fd >= 0 && mfd_seal(si->steps->v[i].mnt_fd, si->steps->v[i].path, err) < 0)
			return -1;
	return si->workdir == NULL ? 0 : mfd_cwd_enter(si->workdir, err);
}

/* The sandbox's network namespace starts with its loopback down: up, so that a command's own
 * servers on 127.0.0.1 work (the network policy `none` is this and nothing more; `open` adds a
 * device of slirp4netns, process_net.c). Needs the namespace's CAP_NET_ADMIN, held until execve. */
static int loopback_up(struct sb_err *err)
{
	struct ifreq ifr;
	cleanup_close int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);

	memset(&ifr, 0, sizeof ifr);
	memcpy(ifr.ifr_name, "lo", 3);
	if (fd < 0 || ioctl(fd, SIOCGIFFLAGS, &ifr) < 0)
		return sb_fail_errno(err, "reading the flags of the sandbox's loopback");
	ifr.ifr_flags |= IFF_UP;
	if (ioctl(fd, SIOCSIFFLAGS, &ifr) < 0)
		return sb_fail_errno(err, "bringing the sandbox's loopback up");
	return 0;
}

static int stdio_attach(const struct sandbox_init *si, struct sb_err *err)
{
	/* All our descriptors are above 2 (the manager moved them there: process_launch.c
	 * fd_above_stdio()), so nothing is clobbered here; dup2 leaves 0-2 without close-on-exec, as
	 * execve needs. */
	if (dup2(si->null_fd, 0) < 0 || dup2(si->log_fd, 1) < 0 || dup2(si->log_fd, 2) < 0)
		return sb_fail_errno(err, "attaching stdin to /dev/null and stdout, stderr to %s", si->log);
	return 0;
}

void sandbox_init_main(struct sandbox_init *si)
{
	struct sb_err err;
	int root;
	char go;

	/* sandbox init, inside: PID 1 of the new PID namespace, in the new user namespace. */
	if (spawn_signals_default(&err) < 0 || fds_keep_only(si, &err) < 0)
		die_report(si->error_fd, &err);
	/* A session of its own: a signal aimed at the manager's process group or terminal is not
	 * aimed at the sandbox. */
	if (setsid() < 0) {
		sb_fail_errno(&err, "setsid");
		die_report(si->error_fd, &err);
	}
	/* Wait for the id maps: until they are written we hold no capability in our namespace. End
	 * of file means the manager gave up (or died): leave quietly. */
	if (read(si->go_fd, &go, 1) != 1)
		_exit(SPAWN_EXIT_SETUP_FAILED);
	close(si->go_fd);
	/* Become the sandbox's own ids, N inside as outside (the maps are 1:1). An unprivileged
	 * manager's clone is N already; a root manager's is host 0, which has no mapping here, and
	 * files made with an unmapped owner fail (EOVERFLOW). The change keeps every capability of
	 * the namespace: the kernel clears them on a setuid only when it leaves the namespace's
	 * uid 0 (cap_emulate_setxuid), and host 0 is not that uid here, nothing is. Raw syscalls:
	 * glibc's wrappers would signal the manager's threads, which do not exist here. */
	/* A root manager's supplementary groups are host groups (root's 0 among them): gone before
	 * anything runs here. Its maps left setgroups open for this one call, which needs the
	 * namespace's CAP_SETGID: after the agent's execve nothing here holds it again. */
	if (si->groups_drop && syscall(SYS_setgroups, 0, NULL) < 0) {
		sb_fail_errno(&err, "dropping the supplementary groups");
		die_report(si->error_fd, &err);
	}
	/* The last step as the manager's uid (without its groups): the host paths, as far as it may search. */
	if (sources_open(si, &err) < 0)
		die_report(si->error_fd, &err);
	if (spawn_ids_set(si->uid, si->gid, &err) < 0) {
		sb_err_prefix(&err, "becoming the sandbox's uid %u and gid %u", (unsigned)si->uid, (unsigned)si->gid);
		die_report(si->error_fd, &err);
	}
	if (loopback_up(&err) < 0)
		die_report(si->error_fd, &err);
	/* The root, while we hold the namespace's CAP_SYS_ADMIN (every capability: the first
	 * process of a new user namespace holds the full set in it, whatever its uid). */
	root = root_mount(si, &err);
	if (root < 0 || root_steps(si, root, &err) < 0 || root_enter(si, root, &err) < 0)
		die_report(si->error_fd, &err);
	if (stdio_attach(si, &err) < 0)
		die_report(si->error_fd, &err);
	/* No execve may ever grant more (setuid files, file capabilities) to the agent or below. */
	if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0) {
		sb_fail_errno(&err, "setting no_new_privs");
		die_report(si->error_fd, &err);
	}
	/* Everything above 2 closes at execve (the error pipe stays usable until then): the agent
	 * starts with stdin, stdout and stderr only. */
	if (spawn_fds_cloexec_above_stdio(&err) < 0)
		die_report(si->error_fd, &err);
	/* The execve drops every capability, as bubblewrap's does for its unprivileged user: the
	 * kernel gives the full set at execve only to the namespace's uid 0 (cap_bprm_creds_from_file),
	 * which nothing maps, and otherwise only what the file's capabilities grant (the agent's
	 * binary has none; the sandbox's tests check CapEff). So the agent starts as uid N with
	 * CapEff, CapPrm and CapAmb empty, and builds its per-command namespaces unprivileged. */
	execve(AGENT_INSIDE, si->argv, si->envp);
	sb_fail_errno(&err, "executing the agent (%s inside the sandbox, %s on the host)", AGENT_INSIDE, si->agent);
	die_report(si->error_fd, &err);
}
