/* agent, outside: creates a command's namespaces, writes the id maps, reads the output, keeps
 * the deadline and reaps init (see boundary.h). The command's side is in init.c. Everything
 * init and the command need is prepared here before clone(), because after it they allocate
 * nothing. */
#include "boundary.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/sched.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <grp.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "aliases.h"
#include "clock.h"
#include "failpoint.h"
#include "fstype.h"
#include "init.h"
#include "landlock.h"
#include "seccomp.h"
#include "steptime.h"
#include "mountfd.h"
#include "nsspawn.h"
#include "privdir.h"

#ifndef P_PIDFD
#define P_PIDFD 3
#endif

#define DEFAULT_TEARDOWN_MS 5000
#define READ_CHUNK 65536

static const char *const status_names[] = {
	[EXEC_EXITED] = "exited",       [EXEC_SIGNALED] = "signaled", [EXEC_TIMED_OUT] = "timed_out",
	[EXEC_CANCELLED] = "cancelled", [EXEC_UNCERTAIN] = "uncertain", [EXEC_REFUSED] = "refused",
};

const char *exec_status_name(enum exec_status s)
{
	return status_names[s];
}

/* ---- preparation, once per agent ---- */

void hidden_dir_from_privdir(struct hidden_dir *h, const struct privdir *d)
{
	memcpy(h->path, d->path, sizeof h->path);
	h->dev = d->dev;
	h->ino = d->ino;
}

int hidden_dir_from_path(struct hidden_dir *h, const char *path, struct sb_err *err)
{
	struct stat st;
	int fd;

	/* Resolved once, now: a symlink swapped in later cannot redirect the hiding mount, and
	 * init covers only the directory with this identity. */
	if (realpath(path, h->path) == NULL)
		return sb_fail_errno(err, "directory to hide %s", path);
	fd = mfd_open_nofollow(AT_FDCWD, h->path, O_PATH | O_DIRECTORY);
	if (fd < 0 || fstat(fd, &st) < 0) {
		sb_fail_errno(err, "directory to hide %s", h->path);
		if (fd >= 0)
			close(fd);
		return -1;
	}
	close(fd);
	h->dev = st.st_dev;
	h->ino = st.st_ino;
	return 0;
}

static bool path_within(const char *path, const char *dir)
{
	size_t n = strlen(dir);

	return strncmp(path, dir, n) == 0 && (path[n] == '/' || path[n] == '\0' || n == 1);
}

/* A copy of the host's /dev would bring back every terminal the fresh one leaves out. Told by path
 * because devtmpfs reports tmpfs's f_type (every other kernel tree is told by type:
 * writable_kernel_check()). The private /dev/shm may hold a writable root of its own. */
static int writable_dev_check(const char *root, struct sb_err *err)
{
	if ((path_within(root, "/dev") && !path_within(root, "/dev/shm")) || strcmp(root, "/dev/shm") == 0)
		return sb_fail(err, EACCES, "%s cannot be a writable root: /dev belongs to the kernel "
			       "(a directory under /dev/shm can)", root);
	return 0;
}

/* Rule N7: the kernel's filesystems are never a command's to write, wherever they are mounted: a host
 * procfs writes other processes' oom_score_adj and autogroup nice, sysfs and cgroupfs the machine's
 * settings. Decided by the f_type of what fd holds (common/fstype.c), never by the path: a bind mount
 * shows any of them under any name, a part of one (a bind of /proc/sys) included. */
static int writable_kernel_check(int fd, const char *root, struct sb_err *err)
{
	const char *type;
	int rc = fstype_kernel_fd(fd, root, &type, err);

	if (rc > 0)
		return sb_fail(err, EACCES, "the writable %s is on a %s filesystem, which belongs to the kernel: a "
			       "command could change the machine's or other processes' state through it; choose a "
			       "directory on a data filesystem", root, type);
	return rc;
}

/* The same for every mount inside a writable root of the read-only world, which init copies with the
 * root (mounts.c writable_clone()): mountinfo only names the candidates, each is opened without following
 * a link and decided by its descriptor's f_type. The root's own path is the kernel's name for the opened
 * root, so a working directory spelled with ".." finds the same mounts. A mount point that does not open
 * (covered by another mount, or gone) is not in the command's view. A mount made after this check is
 * read-only, nodev, nosuid and noexec in the copy (mounts.c writable_copy()), and init decides again on
 * the view it built (mounts.c kernel_mounts_refuse()). */
static int writable_mounts_check(const struct mountinfo *mi, int fd, const char *root, struct sb_err *err)
{
	char link[64], at[PATH_MAX];
	ssize_t n;

	snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
	n = readlink(link, at, sizeof at - 1);
	if (n <= 0 || (size_t)n >= sizeof at - 1 || at[0] != '/')
		return sb_fail(err, n < 0 ? errno : ENAMETOOLONG, "finding where the writable %s is mounted", root);
	at[n] = '\0';
	for (size_t i = 0; i < mi->n; i++) {
		const char *point = mi->lines[i].point, *type;
		int sub, rc;

		if (!path_within(point, at))
			continue;
		sub = mfd_open_nofollow(AT_FDCWD, point, O_PATH);
		if (sub < 0) {
			if (errno == ENOENT || errno == ENOTDIR || errno == EACCES || errno == ELOOP)
				continue;
			return sb_fail_errno(err, "opening %s, mounted inside the writable %s", point, root);
		}
		rc = fstype_kernel_fd(sub, point, &type, err);
		close(sub);
		if (rc > 0)
			return sb_fail(err, EACCES, "the writable %s holds a %s filesystem at %s, which belongs to the "
				       "kernel: a command could change the machine's or other processes' state through "
				       "it; unmount it or choose a writable root without it", root, type, point);
		if (rc < 0)
			return -1;
	}
	return 0;
}

static int writable_add(struct boundary *b, const char *path, struct sb_err *err)
{
	char *real;

	if (b->n_writable >= BOUNDARY_MAX_WRITABLE)
		return sb_fail(err, E2BIG, "more than %d writable roots", BOUNDARY_MAX_WRITABLE);
	real = realpath(path, NULL);
	if (real == NULL)
		return sb_fail_errno(err, "writable root %s", path);
	b->writable[b->n_writable++] = real;
	return 0; /* checked per command, with the rest: writable_check() */
}

static int landlock_prepare(struct boundary *b, const struct boundary_options *opts, struct sb_err *err)
{
	b->landlock_abi = landlock_abi();
	if (opts->n_block_ports == 0) {
		/* No big domain above the command: a per-call layer with scopes only is cheap. */
		b->landlock_per_call = b->landlock_abi >= 6;
		return 0;
	}
	if (opts->n_block_ports > BOUNDARY_MAX_PORTS)
		return sb_fail(err, E2BIG, "more than %d blocked ports", BOUNDARY_MAX_PORTS);
	memcpy(b->block_ports, opts->block_ports, opts->n_block_ports * sizeof(uint16_t));
	b->n_block_ports = opts->n_block_ports;
	/* The agent restricts itself, once: it makes no outbound TCP connections, and every
	 * command inherits the domain for free. A per-call layer under it would cost ~12 ms. */
	b->landlock_per_call = false;
	if (landlock_restrict_ports(b->landlock_abi, b->block_ports, b->n_block_ports, err) < 0) {
		sb_err_prefix(err, "blocking ports for commands");
		return -1;
	}
	return 0;
}

/* Does the agent's euid stand for host root? In the initial user namespace uid_map reads
 * "0 0 4294967295"; a namespace that maps its 0 to host 0 counts the same. */
static bool euid_is_host_root(void)
{
	unsigned long inside, outside, count;
	bool host_root = false;
	FILE *f;

	if (geteuid() != 0)
		return false;
	f = fopen("/proc/self/uid_map", "re");
	if (f == NULL)
		return true; /* cannot tell: assume the worst */
	while (fscanf(f, "%lu %lu %lu", &inside, &outside, &count) == 3)
		if (inside == 0 && outside == 0)
			host_root = true;
	fclose(f);
	return host_root;
}

/* Which ids run commands. Never host root: a process whose uid is host 0 needs no capability
 * to write /proc/sys, /proc/sysrq-trigger, sysfs or root-owned device nodes (the kernel checks
 * ownership there, not capabilities), so a host-root agent runs its commands as an unprivileged
 * uid, mapped 1:1 so that file ownership reads the same inside and out. And never uid 0 of the
 * command's own user namespace, which owns its PID namespace: that namespace's root may write
 * per-namespace sysctls such as pid_max (kernel/pid.c, Linux >= 6.14) and owns init's /proc
 * files once init is not dumpable. So an agent that is uid 0 of a namespace of its own (a
 * rootless container) maps the sandbox uid inside to its own 0 outside: the same kernel uid,
 * with no uid 0 in the command's namespace at all. */
static int command_ids_choose(struct boundary *b, const struct boundary_options *opts, struct sb_err *err)
{
	uid_t sandbox_uid = opts->sandbox_uid ? opts->sandbox_uid : BOUNDARY_SANDBOX_ID_DEFAULT;
	gid_t sandbox_gid = opts->sandbox_gid ? opts->sandbox_gid : BOUNDARY_SANDBOX_ID_DEFAULT;

	b->command_uid = b->command_outside_uid = geteuid();
	b->command_gid = b->command_outside_gid = getegid();
	if (geteuid() == 0) {
		b->command_uid = sandbox_uid;
		b->command_gid = sandbox_gid;
		if (euid_is_host_root()) {
			b->command_outside_uid = sandbox_uid;
			b->command_outside_gid = sandbox_gid;
			/* The command inherits the supplementary groups of its creator, and setgroups is
			 * denied in its namespace, so it could never drop them: a root agent started
			 * with root's groups (a login shell's initgroups) would hand group 0 to nobody.
			 * The agent needs none of them after its keys are loaded: drop them for good. */
			if (setgroups(0, NULL) < 0)
				return sb_fail_errno(err, "dropping the agent's supplementary groups");
		}
	} else if (getegid() == 0) {
		b->command_gid = sandbox_gid; /* gid 0 inside would own the namespace's files too */
	}
	if (b->command_uid == 0 || b->command_gid == 0)
		return sb_fail(err, EPERM, "commands never run as uid 0: choose another sandbox uid and gid");
	return 0;
}

int boundary_prepare(struct boundary *b, const struct boundary_options *opts, struct sb_err *err)
{
	ssize_t n;

	memset(b, 0, sizeof *b);
	b->max_processes = opts->max_processes ? opts->max_processes : BOUNDARY_MAX_PROCESSES_DEFAULT;
	b->teardown_ms = DEFAULT_TEARDOWN_MS;
	b->shell = access("/bin/bash", X_OK) == 0 ? "/bin/bash" : "/bin/sh";
	b->readonly_world = opts->readonly_world;
	b->tmp_bytes = opts->tmp_bytes ? opts->tmp_bytes : BOUNDARY_TMP_BYTES_DEFAULT;
	b->shm_bytes = opts->shm_bytes ? opts->shm_bytes : BOUNDARY_SHM_BYTES_DEFAULT;
	if (command_ids_choose(b, opts, err) < 0)
		return -1;
	if (opts->n_hidden > BOUNDARY_MAX_HIDDEN)
		return sb_fail(err, E2BIG, "more than %d private directories", BOUNDARY_MAX_HIDDEN);
	b->hidden = calloc(opts->n_hidden + 1, sizeof b->hidden[0]);
	if (b->hidden == NULL)
		return sb_fail(err, ENOMEM, "recording the private directories");
	memcpy(b->hidden, opts->hidden, opts->n_hidden * sizeof opts->hidden[0]);
	b->n_hidden = opts->n_hidden;
	/* The binary the next exec will run: a command must never be able to replace it. Unknown is
	 * unguarded: refuse rather than run without the check. */
	n = readlink("/proc/self/exe", b->agent_exe, sizeof b->agent_exe - 1);
	if (n <= 0 || (size_t)n >= sizeof b->agent_exe - 1)
		return sb_fail(err, n < 0 ? errno : ENAMETOOLONG, "reading the agent binary's path (/proc/self/exe)");
	b->agent_exe[n] = '\0';
	for (size_t i = 0; i < opts->n_writable; i++)
		if (writable_add(b, opts->writable[i], err) < 0)
			return -1;
	b->no_caps = cap_init();
	if (b->no_caps == NULL)
		return sb_fail_errno(err, "cap_init");
	b->seccomp = b->readonly_world ? &seccomp_program_readonly_world : &seccomp_program_host_world;
	return landlock_prepare(b, opts, err);
}

void boundary_free(struct boundary *b)
{
	for (size_t i = 0; i < b->n_writable; i++)
		free(b->writable[i]);
	b->n_writable = 0;
	free(b->hidden);
	b->hidden = NULL;
	b->n_hidden = 0;
	if (b->no_caps != NULL)
		cap_free(b->no_caps);
	b->no_caps = NULL;
}

/* ---- one command ---- */

static int request_check(const struct exec_request *req, struct sb_err *err)
{
	/* common/names.c: the exec id becomes a file name in the receipt and journal directories. */
	if (!exec_id_valid(req->exec_id))
		return sb_invalid(err, "exec id '%s' must be 1-%d characters of [A-Za-z0-9._-], not starting "
				  "with '.' or '-'", req->exec_id, EXEC_ID_MAX);
	if (req->cwd == NULL || req->cwd[0] != '/')
		return sb_invalid(err, "working directory must be an absolute path");
	if (req->timeout_seconds == 0)
		return sb_invalid(err, "timeout must be at least 1 second");
	if (req->n_env >= BOUNDARY_MAX_ENV)
		return sb_fail(err, E2BIG, "more than %d environment variables", BOUNDARY_MAX_ENV - 1);
	return 0;
}

/* ---- one command's view: where the protected paths show, and which writable root holds them ---- */

/* A protected object (a private directory, the agent binary) at one of the paths where it shows,
 * with the identities from there up to the root. */
struct guarded {
	char path[PATH_MAX];   /* where it shows */
	const char *own;       /* its own path (in the boundary), for messages */
	struct ident id;       /* its identity ({0, 0}: a binary no longer at its path) */
	bool binary;
	struct ident_chain up; /* from the directory; for the binary, from the directory holding it */
};

/* Built by the agent before each command: init hides `hidden` (the private directories, then every
 * other path where one shows), and each writable root is checked against every guarded path. */
struct run_view {
	struct hidden_dir *hidden;
	size_t n_hidden, cap_hidden;
	struct guarded *g;
	size_t n_g, cap_g;
	struct mountinfo mi;
	bool mi_borrowed;      /* mi is a prebuilt init's (boundary_init_check): not this view's to free */
	struct ident roots[BOUNDARY_MAX_WRITABLE + 1]; /* the working directory, then the writable roots, as checked */
	size_t n_roots;
	const char *own;       /* while collecting aliases: the object whose aliases these are */
	struct ident own_id;
	bool own_binary;
};

static void run_view_free(struct run_view *v)
{
	for (size_t i = 0; i < v->n_g; i++)
		ident_chain_free(&v->g[i].up);
	free(v->g);
	free(v->hidden);
	if (!v->mi_borrowed)
		mountinfo_free(&v->mi);
	memset(v, 0, sizeof *v);
}

/* Room for one more element of size `size` in *arr (n used of *cap). */
static int array_room(void *arr, size_t *cap, size_t n, size_t size, struct sb_err *err)
{
	void **p = arr, *grown;
	size_t want = *cap ? *cap * 2 : 8;

	if (n < *cap)
		return 0;
	grown = realloc(*p, want * size);
	if (grown == NULL)
		return sb_fail(err, ENOMEM, "building the command's view");
	*p = grown;
	*cap = want;
	return 0;
}

static int hidden_add(struct run_view *v, const char *path, struct ident id, struct sb_err *err)
{
	struct hidden_dir *h;

	if (v->n_hidden >= BOUNDARY_MAX_HIDDEN_VIEW)
		return sb_fail(err, E2BIG, "the agent's private directories show at more than %d places (bind mounts of "
			       "them or of their ancestors): refusing to run commands; unmount the extra mounts",
			       BOUNDARY_MAX_HIDDEN_VIEW);
	if (array_room(&v->hidden, &v->cap_hidden, v->n_hidden, sizeof v->hidden[0], err) < 0)
		return -1;
	h = &v->hidden[v->n_hidden++];
	snprintf(h->path, sizeof h->path, "%s", path); /* fits: path came from a PATH_MAX buffer */
	h->dev = id.dev;
	h->ino = id.ino;
	return 0;
}

/* The directory holding path, or the nearest ancestor still there (a binary replaced or removed
 * since it started: a command must not make its directory again either). Returns an O_PATH descriptor,
 * or -1 with err. */
static int dir_open_nearest(const char *path, struct sb_err *err)
{
	char dir[PATH_MAX];
	char *slash;
	int fd;

	snprintf(dir, sizeof dir, "%s", path);
	for (;;) {
		slash = strrchr(dir, '/');
		if (slash == NULL)
			return sb_invalid(err, "%s is not an absolute path", path);
		slash[slash == dir ? 1 : 0] = '\0';
		fd = mfd_open_nofollow(AT_FDCWD, dir, O_PATH | O_DIRECTORY);
		if (fd >= 0 || (errno != ENOENT && errno != ENOTDIR) || strcmp(dir, "/") == 0)
			break;
	}
	if (fd < 0)
		return sb_fail_errno(err, "opening %s", dir);
	return fd;
}

/* Guard the object at path. dirfd: the directory itself (not consumed), or -1 for the binary, walked
 * from the directory that holds it. */
static int guard_add(struct run_view *v, const char *path, const char *own, struct ident id, bool binary,
		     int dirfd, struct sb_err *err)
{
	struct guarded *g;
	int fd = dirfd, rc;

	if (array_room(&v->g, &v->cap_g, v->n_g, sizeof v->g[0], err) < 0)
		return -1;
	if (fd < 0 && (fd = dir_open_nearest(path, err)) < 0)
		return -1;
	g = &v->g[v->n_g];
	memset(g, 0, sizeof *g);
	snprintf(g->path, sizeof g->path, "%s", path);
	g->own = own;
	g->id = id;
	g->binary = binary;
	rc = ident_chain_walk(fd, &g->up, err);
	if (fd != dirfd)
		close(fd);
	if (rc < 0) {
		sb_err_prefix(err, "walking up from %s", path);
		return -1;
	}
	v->n_g++;
	return 0;
}

/* aliases_each: a candidate path where the current object may show. It counts only when it opens,
 * without following a link, to the very same object; a path that leads elsewhere or nowhere (a mount
 * covered by another, a component covered on the way) does not show it. Other failures fail closed. */
static int alias_found(const char *alias, void *arg, struct sb_err *err)
{
	struct run_view *v = arg;
	struct stat st;
	int fd = mfd_open_nofollow(AT_FDCWD, alias, O_PATH | (v->own_binary ? 0 : O_DIRECTORY));
	int rc;

	if (fd < 0) {
		if (errno == ENOENT || errno == ENOTDIR || errno == EACCES || errno == ELOOP)
			return 0;
		return sb_fail_errno(err, "opening %s, where %s may show", alias, v->own);
	}
	if (fstat(fd, &st) < 0) {
		rc = sb_fail_errno(err, "fstat %s", alias);
	} else if (st.st_dev != v->own_id.dev || st.st_ino != v->own_id.ino) {
		rc = 0;
	} else {
		rc = guard_add(v, alias, v->own, v->own_id, v->own_binary, v->own_binary ? -1 : fd, err);
		if (rc == 0 && !v->own_binary)
			rc = hidden_add(v, alias, v->own_id, err);
	}
	close(fd);
	return rc;
}

/* Guard a protected object at its own path and at every other path where it shows now. want: the
 * identity the agent holds for a private directory (NULL for the binary, taken from its path). */
static int object_guard(struct run_view *v, const char *path, bool binary, const struct hidden_dir *want,
			struct sb_err *err)
{
	struct stat st;
	int fd = mfd_open_nofollow(AT_FDCWD, path, O_PATH | (binary ? 0 : O_DIRECTORY));
	int mnt_id, rc = -1;

	if (fd < 0 && binary && errno == ENOENT)
		return guard_add(v, path, path, (struct ident){ 0, 0 }, true, -1, err);
	if (fd < 0)
		return sb_fail_errno(err, "the agent's private directory %s is not where the agent holds it (moved or "
				     "replaced?): refusing to run commands", path);
	if (fstat(fd, &st) < 0) {
		sb_fail_errno(err, "fstat %s", path);
		goto out;
	}
	if (want != NULL && (st.st_dev != want->dev || st.st_ino != want->ino)) {
		sb_fail(err, EXDEV, "the agent's private directory %s was moved or replaced since the agent opened "
			"it: refusing to run commands", path);
		goto out;
	}
	v->own = path;
	v->own_id = (struct ident){ st.st_dev, st.st_ino };
	v->own_binary = binary;
	if (guard_add(v, path, path, v->own_id, binary, binary ? -1 : fd, err) < 0 ||
	    aliases_mount_id(fd, &mnt_id, err) < 0 || aliases_each(&v->mi, mnt_id, path, alias_found, v, err) < 0) {
		sb_err_prefix(err, "finding where %s shows", path);
		goto out;
	}
	rc = 0;
out:
	close(fd);
	return rc;
}

/* An alias beneath another hidden path (or the same path twice) is covered by that one's mount in
 * the command's view: hiding it again would find nothing to open and refuse every command. Strings
 * are right here: this is about paths in the one mount namespace init copies, not about identity. */
static void hidden_compact(struct run_view *v, size_t n_own)
{
	size_t kept = n_own;

	for (size_t i = n_own; i < v->n_hidden; i++) {
		bool covered = false;

		for (size_t j = 0; j < v->n_hidden && !covered; j++) {
			if (j == i)
				continue;
			if (strcmp(v->hidden[i].path, v->hidden[j].path) == 0)
				covered = j < i;
			else
				covered = path_within(v->hidden[i].path, v->hidden[j].path);
		}
		if (!covered)
			v->hidden[kept++] = v->hidden[i];
	}
	v->n_hidden = kept;
}

static int writable_refuse(const struct guarded *g, const char *root, bool around, struct sb_err *err)
{
	char where[PATH_MAX + 64] = "";

	if (strcmp(g->path, g->own) != 0)
		snprintf(where, sizeof where, ", which shows at %s through another mount,", g->path);
	if (g->binary)
		return sb_fail(err, EACCES, "the agent binary %s%s lies inside the writable %s, where a command could "
			       "replace it: install it outside (e.g. /usr/local/bin)", g->own, where, root);
	return sb_fail(err, EACCES, "the agent's private directory %s%s lies %s the writable %s: choose a private "
		       "directory outside every writable root", g->own, where, around ? "around" : "inside", root);
}

/* A writable root and a protected object must not nest either way: inside a writable root the command
 * could rename the protected path's ancestors (and put its own directory in their place) or replace the
 * binary the next exec runs. Decided by identity: the root holds the object when walking ".." from the
 * object (at any path where it shows) reaches the root's identity, and lies inside a private directory
 * when walking from the root reaches that directory's. A bind mount's root has the identity of the
 * directory it shows, so another name for the same tree is caught however its path reads. copied: init
 * copies the root with the mounts inside it (the read-only world), which are then checked too. */
static int writable_check(struct run_view *v, const char *root, bool copied, struct sb_err *err)
{
	struct ident_chain up;
	int fd, rc = 0;

	if (writable_dev_check(root, err) < 0)
		return -1;
	fd = mfd_open_nofollow(AT_FDCWD, root, O_PATH | O_DIRECTORY);
	if (fd < 0)
		return sb_fail_errno(err, "the writable %s cannot be opened as a directory without following a link",
				     root);
	if (writable_kernel_check(fd, root, err) < 0 || (copied && writable_mounts_check(&v->mi, fd, root, err) < 0)) {
		close(fd);
		return -1;
	}
	rc = ident_chain_walk(fd, &up, err);
	close(fd);
	if (rc < 0) {
		sb_err_prefix(err, "walking up from the writable %s", root);
		return -1;
	}
	v->roots[v->n_roots++] = up.v[0];
	for (size_t i = 0; i < v->n_g && rc == 0; i++) {
		const struct guarded *g = &v->g[i];

		if (ident_chain_holds(&g->up, up.v[0]))
			rc = writable_refuse(g, root, false, err);
		else if (!g->binary && ident_chain_holds(&up, g->id))
			rc = writable_refuse(g, root, true, err);
	}
	ident_chain_free(&up);
	return rc;
}

/* Read before each command, from the mounts as they are now (an operator may mount between two
 * commands of `serve`): every path where a private directory or the binary shows, then the writable
 * roots (the working directory first) against all of them. mi: a mount table read earlier, which the
 * caller knows is still the agent's (a prebuilt init's, with no POLLPRI since: prebuilt.h), or NULL to
 * read it now. Every open, identity and walk runs now either way. */
static int run_view_build(const struct boundary *b, const char *cwd, const struct mountinfo *mi, struct run_view *v,
			  struct sb_err *err)
{
	memset(v, 0, sizeof *v);
	if (mi != NULL) {
		v->mi = *mi;
		v->mi_borrowed = true;
	} else if (mountinfo_read(&v->mi, err) < 0) {
		return -1;
	}
	for (size_t i = 0; i < b->n_hidden; i++)
		if (hidden_add(v, b->hidden[i].path, (struct ident){ b->hidden[i].dev, b->hidden[i].ino }, err) < 0)
			return -1;
	for (size_t i = 0; i < b->n_hidden; i++)
		if (object_guard(v, b->hidden[i].path, false, &b->hidden[i], err) < 0)
			return -1;
	if (object_guard(v, b->agent_exe, true, NULL, err) < 0)
		return -1;
	hidden_compact(v, b->n_hidden);
	/* The mounts inside a root matter where init copies them (the read-only world); in the host's
	 * world the command sees them where they are anyway. */
	if (writable_check(v, cwd, b->readonly_world, err) < 0)
		return -1;
	for (size_t i = 0; i < b->n_writable; i++)
		if (writable_check(v, b->writable[i], b->readonly_world, err) < 0)
			return -1;
	return 0;
}

/* The descriptors between agent and init; index 0 is the agent's end unless noted. */
struct run_fds {
	int out[2], errp[2];   /* output pipes: [0] agent reads, [1] command writes */
	int go[2];             /* [0] init reads, [1] agent writes */
	int report[2];         /* [0] agent reads, [1] init writes */
	int error[2];          /* [0] agent reads, [1] init and command write */
};

static void fd_close(int *fd)
{
	if (*fd >= 0)
		close(*fd);
	*fd = -1;
}

static void run_fds_close(struct run_fds *f)
{
	int *all = (int *)f;

	for (size_t i = 0; i < sizeof *f / sizeof(int); i++)
		fd_close(&all[i]);
}

static int run_fds_open(struct run_fds *f, struct sb_err *err)
{
	int *all = (int *)f;

	for (size_t i = 0; i < sizeof *f / sizeof(int); i++)
		all[i] = -1;
	if (pipe2(f->out, O_CLOEXEC) < 0 || pipe2(f->errp, O_CLOEXEC) < 0 || pipe2(f->go, O_CLOEXEC) < 0 ||
	    pipe2(f->report, O_CLOEXEC) < 0 || pipe2(f->error, O_CLOEXEC) < 0) {
		sb_fail_errno(err, "creating pipes");
		run_fds_close(f);
		return -1;
	}
	/* The agent never blocks on a read: poll says when, and the final drain stops at EAGAIN. */
	if (fcntl(f->out[0], F_SETFL, O_NONBLOCK) < 0 || fcntl(f->errp[0], F_SETFL, O_NONBLOCK) < 0 ||
	    fcntl(f->report[0], F_SETFL, O_NONBLOCK) < 0 || fcntl(f->error[0], F_SETFL, O_NONBLOCK) < 0) {
		sb_fail_errno(err, "making pipes non-blocking");
		run_fds_close(f);
		return -1;
	}
	return 0;
}

/* Into the new namespaces with a pidfd. User namespace first among equals: it owns the others,
 * so an unprivileged agent can create them. The command is never PID 1: init is. */
static pid_t init_spawn(const struct init_context *ctx, int *pidfd, struct sb_err *err)
{
	pid_t pid = spawn_clone(CLONE_NEWUSER | CLONE_NEWPID | CLONE_NEWNS | CLONE_NEWIPC | CLONE_NEWUTS, pidfd, err);

	if (pid == 0)
		init_main(ctx);
	if (pid < 0)
		sb_err_prefix(err, "creating the command's user, PID and mount namespaces");
	return pid;
}

/* The maps make the command's uid and gid the agent's own (an unprivileged writer may map only
 * its own ids, and files in the worktree keep their owner), 1:1; under host root the sandbox
 * ids, 1:1; under a root of a namespace of its own, the sandbox ids inside for the agent's own
 * outside (command_ids_choose). setgroups is denied first, as an unprivileged gid_map write
 * requires (user_namespaces(7)); it also keeps the command from ever calling setgroups. */
static int id_maps_write(pid_t pid, const struct boundary *b, struct sb_err *err)
{
	return spawn_id_maps_write(pid, b->command_uid, b->command_outside_uid, b->command_gid,
				   b->command_outside_gid, err);
}

static void pid_namespace_read(pid_t pid, char *out, size_t len)
{
	char path[64];
	ssize_t n;

	snprintf(path, sizeof path, "/proc/%d/ns/pid", (int)pid);
	n = readlink(path, out, len - 1);
	out[n > 0 ? n : 0] = '\0';
}

/* ---- the wait loop ---- */

struct run_state {
	pid_t pid;
	int pidfd;
	bool cmd_done, killed, reaped;
	bool reports_ended;       /* init closed its report pipe: nothing more to poll there */
	int poll_failed;          /* errno of a failed poll: the outcome is uncertain */
	int32_t pid_max_set;      /* what init set pid_max to (0: not bounded) */
	int wait_status;
	enum exec_status kill_reason;
	int64_t deadline, teardown_start, teardown_deadline;
};

static void pipe_read(int *fd, struct output_capture *c, bool drain)
{
	uint8_t buf[READ_CHUNK];

	while (*fd >= 0) {
		ssize_t n = read(*fd, buf, sizeof buf);

		if (n > 0) {
			output_feed(c, buf, (size_t)n);
			if (!drain)
				return;
			continue;
		}
		if (n < 0 && errno == EINTR)
			continue;
		if (n == 0 || errno != EAGAIN)
			fd_close(fd);
		return;
	}
}

static void reports_read(int fd, struct run_state *st, struct exec_outcome *out)
{
	struct init_report r;
	ssize_t n;

	while ((n = read(fd, &r, sizeof r)) == (ssize_t)sizeof r) {
		if (r.kind == INIT_REPORT_READY) {
			st->pid_max_set = r.value;
			out->pid_max_bounded = r.value != 0;
		}
		/* Measured again after the command: a bound it could have raised is no bound. */
		if (r.kind == INIT_REPORT_PID_MAX_AFTER && r.value != st->pid_max_set)
			out->pid_max_bounded = false;
		if (r.kind == INIT_REPORT_COMMAND && !st->cmd_done) {
			st->cmd_done = true;
			st->wait_status = r.value;
		}
	}
	/* End of file: init has closed its end, i.e. it is exiting. The pipe now polls as hung
	 * up on every call; polled further, the loop would spin on this core while init's exit,
	 * woken on the same core, waits behind it (about 1 ms a call, measured). */
	if (n == 0)
		st->reports_ended = true;
}

static void teardown_begin(const struct boundary *b, struct run_state *st, int64_t now)
{
	if (st->teardown_start == 0) {
		st->teardown_start = now;
		st->teardown_deadline = now + b->teardown_ms;
	}
}

static void init_kill(const struct boundary *b, struct run_state *st, enum exec_status reason, int64_t now)
{
	/* SIGKILL to init from the parent namespace always lands; its death empties the
	 * namespace (zap_pid_ns_processes). */
	if (!st->killed)
		st->kill_reason = reason;
	st->killed = true;
	syscall(SYS_pidfd_send_signal, st->pidfd, SIGKILL, NULL, 0);
	teardown_begin(b, st, now);
}

static int poll_timeout(const struct run_state *st, int64_t now)
{
	int64_t until = st->teardown_start ? st->teardown_deadline : st->deadline;

	return until <= now ? 0 : (int)(until - now > INT_MAX ? INT_MAX : until - now);
}

static void init_try_reap(struct run_state *st)
{
	siginfo_t info;

	memset(&info, 0, sizeof info);
	if (waitid((idtype_t)P_PIDFD, (id_t)st->pidfd, &info, WEXITED | WNOHANG) == 0 && info.si_pid != 0)
		st->reaped = true;
}

static void wait_loop(const struct boundary *b, struct run_fds *f, int cancel_fd, struct run_state *st,
		      struct exec_outcome *out)
{
	while (!st->reaped) {
		struct pollfd p[5] = {
			{ f->out[0], POLLIN, 0 },
			{ f->errp[0], POLLIN, 0 },
			{ st->reports_ended ? -1 : f->report[0], POLLIN, 0 },
			{ st->pidfd, POLLIN, 0 },
			{ st->killed ? -1 : cancel_fd, POLLIN, 0 },
		};
		int64_t now = clock_mono_ms();
		int n = poll(p, 5, poll_timeout(st, now));

		steptime_wakeup();
		now = clock_mono_ms();
		if (n < 0 && errno != EINTR && !st->poll_failed) {
			/* The agent can no longer watch the command: end it, and let the teardown bound
			 * decide the rest. Never return with init alive: the next exec would overlap. */
			st->poll_failed = errno;
			init_kill(b, st, EXEC_UNCERTAIN, now);
		}
		if (p[0].revents)
			pipe_read(&f->out[0], &out->out, false);
		if (p[1].revents)
			pipe_read(&f->errp[0], &out->err, false);
		if (p[2].revents) {
			reports_read(f->report[0], st, out);
			if (st->cmd_done)
				teardown_begin(b, st, now);
		}
		if (p[4].revents)
			init_kill(b, st, EXEC_CANCELLED, now);
		if (p[3].revents)
			init_try_reap(st);
		if (!st->reaped && !st->killed && !st->cmd_done && now >= st->deadline)
			init_kill(b, st, EXEC_TIMED_OUT, now);
		if (!st->reaped && st->teardown_start && now >= st->teardown_deadline)
			break; /* the namespace did not empty in time: uncertain */
	}
}

static void error_read(int fd, char *msg, size_t len)
{
	ssize_t n = read(fd, msg, len - 1);

	msg[n > 0 ? n : 0] = '\0';
}

/* What happened, from what the loop saw. Order matters: a refused setup explains itself
 * first, an unconfirmed boundary overrides everything else. */
static void outcome_decide(const struct run_state *st, struct exec_outcome *out)
{
	out->init_reaped = st->reaped;
	if (!st->reaped) {
		out->status = EXEC_UNCERTAIN;
		snprintf(out->detail, sizeof out->detail,
			 "the namespace did not empty within %lld ms of the command's end; a process may be stuck in "
			 "uninterruptible sleep: the boundary was NOT confirmed",
			 (long long)(clock_mono_ms() - st->teardown_start));
	} else if (st->poll_failed) {
		out->status = EXEC_UNCERTAIN;
		snprintf(out->detail, sizeof out->detail, "the agent lost sight of the command (poll: %s); it was killed "
			 "and its namespace emptied, but its outcome is unknown", strerror(st->poll_failed));
	} else if (out->detail[0] != '\0') {
		out->status = EXEC_REFUSED;
	} else if (st->killed && !st->cmd_done) {
		out->status = st->kill_reason;
	} else if (st->cmd_done && WIFEXITED(st->wait_status)) {
		out->status = EXEC_EXITED;
		out->exit_code = WEXITSTATUS(st->wait_status);
	} else if (st->cmd_done && WIFSIGNALED(st->wait_status)) {
		out->status = EXEC_SIGNALED;
		out->signal = WTERMSIG(st->wait_status);
	} else {
		out->status = EXEC_UNCERTAIN;
		snprintf(out->detail, sizeof out->detail, "init ended without reporting the command's status");
	}
}

static int outcome_init(const struct exec_request *req, struct exec_outcome *out, struct sb_err *err)
{
	memset(out, 0, sizeof *out);
	if (output_init(&out->out, req->output_limit, err) < 0)
		return -1;
	if (output_init(&out->err, req->output_limit, err) < 0) {
		output_free(&out->out);
		return -1;
	}
	return 0;
}

void exec_outcome_free(struct exec_outcome *out)
{
	output_free(&out->out);
	output_free(&out->err);
}

static void run_finish(struct run_fds *f, struct run_state *st, struct exec_outcome *out, int64_t t0)
{
	/* Every writer is gone once init is reaped: take what the pipes hold, without waiting
	 * for an end of file that a descriptor smuggled out of the namespace could withhold. */
	pipe_read(&f->out[0], &out->out, true);
	pipe_read(&f->errp[0], &out->err, true);
	reports_read(f->report[0], st, out);
	if (out->detail[0] == '\0')
		error_read(f->error[0], out->detail, sizeof out->detail);
	outcome_decide(st, out);
	out->ended_ms = clock_real_ms();
	out->duration_ms = clock_mono_ms() - t0;
	/* How long the namespace took to empty, or how long we waited before giving up. */
	if (st->teardown_start)
		out->teardown_ms = clock_mono_ms() - st->teardown_start;
	output_finish(&out->out);
	output_finish(&out->err);
}

/* Init released: the command's run to its end within its timeout, init reaped, everything read;
 * the descriptors and init's pidfd are closed. A fresh init's call and a prebuilt one's share it. */
static void run_to_end(const struct boundary *b, const struct exec_request *req, int cancel_fd, struct run_fds *f,
		       struct run_state *st, struct exec_outcome *out, int64_t t0)
{
	st->deadline = t0 + (int64_t)req->timeout_seconds * 1000;
	wait_loop(b, f, cancel_fd, st, out);
	steptime_mark(STEP_AGENT_REAPED);
	run_finish(f, st, out, t0);
	run_fds_close(f);
	close(st->pidfd);
}

int boundary_run(const struct boundary *b, const struct exec_request *req, int cancel_fd,
		 struct exec_outcome *out, struct sb_err *err)
{
	char *argv[] = { (char *)b->shell, "-c", (char *)req->command, NULL };
	char *envp[BOUNDARY_MAX_ENV + 1];
	struct run_state st = { .pidfd = -1 };
	struct run_fds f;
	struct run_view view;
	struct boundary run;
	struct init_context ctx;
	int64_t t0;

	if (request_check(req, err) < 0)
		return -1;
	if (run_view_build(b, req->cwd, NULL, &view, err) < 0 || outcome_init(req, out, err) < 0) {
		run_view_free(&view);
		return -1;
	}
	steptime_mark(STEP_VIEW);
	/* A test mounts here, after the agent's checks and before init's copy (kernel_fs_mounted_late). */
	FAILPOINT("agent.exec.view_checked");
	/* init hides what this view found: the boundary's own list plus the aliases of now. A shallow
	 * copy: everything else stays the boundary's, and init reads it from clone()'s copy of memory. */
	run = *b;
	run.hidden = view.hidden;
	run.n_hidden = view.n_hidden;
	memcpy(envp, req->env, req->n_env * sizeof(char *));
	envp[req->n_env] = NULL;
	if (run_fds_open(&f, err) < 0) {
		run_view_free(&view);
		exec_outcome_free(out);
		return -1;
	}
	ctx = (struct init_context){
		.b = &run, .cwd = req->cwd, .argv = argv, .envp = envp, .uid = b->command_uid, .gid = b->command_gid,
		.go_fd = f.go[0], .report_fd = f.report[1], .error_fd = f.error[1],
		.stdout_fd = f.out[1], .stderr_fd = f.errp[1],
	};
	out->started_ms = clock_real_ms();
	t0 = clock_mono_ms();
	st.pid = init_spawn(&ctx, &st.pidfd, err);
	steptime_mark(STEP_CLONED);
	/* agent: the child's ends are init's business now. */
	fd_close(&f.go[0]);
	fd_close(&f.report[1]);
	fd_close(&f.error[1]);
	fd_close(&f.out[1]);
	fd_close(&f.errp[1]);
	run_view_free(&view); /* init has its copy (or there is no init) */
	if (st.pid < 0) {
		run_fds_close(&f);
		exec_outcome_free(out);
		return -1;
	}
	pid_namespace_read(st.pid, out->pid_namespace, sizeof out->pid_namespace);
	if (id_maps_write(st.pid, b, err) < 0) {
		/* init is waiting on the go pipe: closing it ends init; reap it below. */
		snprintf(out->detail, sizeof out->detail, "%s", err->msg);
		sb_err_clear(err);
	} else if (write(f.go[1], "1", 1) != 1) {
		sb_fail_errno(err, "releasing init");
		snprintf(out->detail, sizeof out->detail, "%s", err->msg);
	}
	fd_close(&f.go[1]);
	steptime_mark(STEP_RELEASED);
	run_to_end(b, req, cancel_fd, &f, &st, out, t0);
	return 0;
}

/* ---- an init started ahead of its call (serve: prebuilt.h) ---- */

static void init_view_free(struct boundary_init *bi)
{
	free(bi->hidden);
	bi->hidden = NULL;
	if (bi->mi != NULL)
		mountinfo_free(bi->mi);
	free(bi->mi);
	bi->mi = NULL;
}

static void init_ends_close(struct boundary_init *bi)
{
	fd_close(&bi->out);
	fd_close(&bi->errp);
	fd_close(&bi->report);
	fd_close(&bi->error);
	fd_close(&bi->go);
}

/* The first record of a prebuilt init: what it bound. Bounded by the teardown bound; init's failure
 * (its message on the error pipe) fails the start. */
static int bound_wait(const struct boundary *b, struct boundary_init *bi, struct sb_err *err)
{
	int64_t until = clock_mono_ms() + b->teardown_ms;
	struct init_bound r;
	char msg[SB_ERR_MSG_MAX];

	for (;;) {
		struct pollfd p[2] = { { bi->report, POLLIN, 0 }, { bi->pidfd, POLLIN, 0 } };
		int64_t left = until - clock_mono_ms();
		int n;

		if (left <= 0)
			return sb_fail(err, ETIMEDOUT, "the prebuilt init did not report within %u ms", b->teardown_ms);
		n = poll(p, 2, (int)left);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return sb_fail_errno(err, "waiting for the prebuilt init");
		if (p[0].revents & POLLIN)
			break;
		if (p[0].revents || p[1].revents) {
			error_read(bi->error, msg, sizeof msg);
			return sb_fail(err, EPIPE, "the prebuilt init ended before its call: %s",
				       msg[0] ? msg : "no message");
		}
	}
	/* One write of at most PIPE_BUF bytes: it arrives whole. */
	if (read(bi->report, &r, sizeof r) != (ssize_t)sizeof r || r.kind != INIT_REPORT_BOUND ||
	    r.n > BOUNDARY_MAX_WRITABLE + 2)
		return sb_fail(err, EPROTO, "the prebuilt init's first report is not what it bound");
	bi->n_bound = r.n;
	for (size_t i = 0; i < r.n; i++)
	{
		bi->bound[i].dev = (dev_t)r.id[i].dev;
		bi->bound[i].ino = (ino_t)r.id[i].ino;
	}
	return 0;
}

int boundary_init_start(const struct boundary *b, const char *cwd, struct boundary_init *bi, struct sb_err *err)
{
	char *argv[] = { (char *)b->shell, "-c", NULL, NULL };
	struct run_view view;
	struct run_fds f;
	struct boundary run;
	struct init_context ctx;
	int64_t ms;

	memset(bi, 0, sizeof *bi);
	bi->pid = -1;
	bi->pidfd = bi->out = bi->errp = bi->report = bi->error = bi->go = -1;
	if ((size_t)snprintf(bi->cwd, sizeof bi->cwd, "%s", cwd) >= sizeof bi->cwd)
		return sb_fail(err, ENAMETOOLONG, "working directory too long");
	/* The same checks as a call's, for the view this init will hide; the call checks again. */
	if (run_view_build(b, cwd, NULL, &view, err) < 0) {
		run_view_free(&view);
		return -1;
	}
	bi->hidden = calloc(view.n_hidden + 1, sizeof bi->hidden[0]);
	bi->mi = malloc(sizeof *bi->mi);
	if (bi->hidden == NULL || bi->mi == NULL || run_fds_open(&f, err) < 0) {
		if (bi->hidden == NULL || bi->mi == NULL)
			sb_fail(err, ENOMEM, "recording the prebuilt view");
		free(bi->hidden);
		bi->hidden = NULL;
		free(bi->mi);
		bi->mi = NULL;
		run_view_free(&view);
		return -1;
	}
	/* The table this view was read from: the call's checks use it again while the agent's mount table
	 * has not changed (prebuilt.c take()). */
	*bi->mi = view.mi;
	view.mi_borrowed = true;
	memcpy(bi->hidden, view.hidden, view.n_hidden * sizeof view.hidden[0]);
	bi->n_hidden = view.n_hidden;
	run = *b;
	run.hidden = view.hidden;
	run.n_hidden = view.n_hidden;
	ctx = (struct init_context){
		.b = &run, .cwd = bi->cwd, .argv = argv, .envp = NULL, .uid = b->command_uid, .gid = b->command_gid,
		.go_fd = f.go[0], .report_fd = f.report[1], .error_fd = f.error[1],
		.stdout_fd = f.out[1], .stderr_fd = f.errp[1], .prebuilt = true,
	};
	bi->pid = init_spawn(&ctx, &bi->pidfd, err);
	fd_close(&f.go[0]);
	fd_close(&f.report[1]);
	fd_close(&f.error[1]);
	fd_close(&f.out[1]);
	fd_close(&f.errp[1]);
	run_view_free(&view);
	bi->out = f.out[0];
	bi->errp = f.errp[0];
	bi->report = f.report[0];
	bi->error = f.error[0];
	bi->go = f.go[1];
	if (bi->pid < 0) {
		init_ends_close(bi);
		init_view_free(bi);
		return -1;
	}
	pid_namespace_read(bi->pid, bi->pid_namespace, sizeof bi->pid_namespace);
	if (id_maps_write(bi->pid, b, err) == 0) {
		if (write(bi->go, "1", 1) != 1)
			sb_fail_errno(err, "releasing the prebuilt init");
		else if (bound_wait(b, bi, err) == 0)
			return 0;
	}
	/* Not reaped within the bound: it still holds no call, and its parent-death signal ends it with
	 * the agent; the caller never starts another before the next call's own init is reaped. */
	(void)boundary_init_end(b, bi, &ms, NULL);
	return -1;
}

bool boundary_init_alive(const struct boundary_init *bi)
{
	struct pollfd p[2] = { { bi->pidfd, POLLIN, 0 }, { bi->report, POLLIN, 0 } };

	/* Gone, or anything on its report pipe before the call (it writes nothing there while it waits,
	 * so a byte or an end of file means it is not waiting any more). */
	return poll(p, 2, 0) == 0;
}

static bool bound_is(const struct boundary_init *bi, size_t i, struct ident id)
{
	return bi->bound[i].dev == id.dev && bi->bound[i].ino == id.ino;
}

int boundary_init_check(const struct boundary *b, const struct boundary_init *bi, const struct exec_request *req,
			char *why, size_t len, struct sb_err *err)
{
	struct run_view view;
	int usable = 0;

	if (request_check(req, err) < 0)
		return -1;
	/* The call's own checks, in full, as boundary_run makes them (a refusal is the call's), on the mount
	 * table init copied, which the caller knows is still the agent's. */
	if (run_view_build(b, req->cwd, bi->mi, &view, err) < 0) {
		run_view_free(&view);
		return -1;
	}
	if (strcmp(req->cwd, bi->cwd) != 0) {
		snprintf(why, len, "built for the working directory %s, the call's is %s", bi->cwd, req->cwd);
	} else if (view.n_hidden != bi->n_hidden) {
		snprintf(why, len, "the private directories show at %zu places now, at %zu when it was built",
			 view.n_hidden, bi->n_hidden);
	} else if (bi->n_bound != (b->readonly_world ? 1 + view.n_roots : 1)) {
		snprintf(why, len, "it bound %zu directories, the call checks %zu", bi->n_bound, view.n_roots);
	} else {
		usable = 1;
		for (size_t i = 0; i < view.n_hidden && usable; i++)
			if (strcmp(view.hidden[i].path, bi->hidden[i].path) != 0 || view.hidden[i].dev != bi->hidden[i].dev ||
			    view.hidden[i].ino != bi->hidden[i].ino) {
				snprintf(why, len, "the private directory shown at %s is another one now", view.hidden[i].path);
				usable = 0;
			}
		/* What init entered and copied is, by identity, what the call's checks just passed. */
		if (usable && !bound_is(bi, 0, view.roots[0])) {
			snprintf(why, len, "the working directory %s is another directory now", req->cwd);
			usable = 0;
		}
		for (size_t i = 1; i < bi->n_bound && usable; i++)
			if (!bound_is(bi, i, view.roots[i - 1])) {
				snprintf(why, len, "the writable root %s is another directory now",
					 i == 1 ? req->cwd : b->writable[i - 2]);
				usable = 0;
			}
	}
	run_view_free(&view);
	return usable;
}

int boundary_init_end(const struct boundary *b, struct boundary_init *bi, int64_t *ms, struct sb_err *err)
{
	struct run_state st = { .pid = bi->pid, .pidfd = bi->pidfd };
	int64_t t0 = clock_mono_ms(), until = t0 + b->teardown_ms;

	init_ends_close(bi);
	if (bi->pidfd >= 0) {
		/* The same end as a call's: SIGKILL from outside, then the pidfd says init is gone, which
		 * is the kernel's word that its namespace is empty. */
		syscall(SYS_pidfd_send_signal, bi->pidfd, SIGKILL, NULL, 0);
		init_try_reap(&st);
		while (!st.reaped) {
			struct pollfd p = { bi->pidfd, POLLIN, 0 };
			int64_t left = until - clock_mono_ms();

			if (left <= 0)
				break;
			if (poll(&p, 1, (int)left) > 0)
				init_try_reap(&st);
		}
		if (!st.reaped) {
			if (err != NULL)
				sb_fail(err, ETIMEDOUT, "the prebuilt init %d (%s) did not end within %u ms of SIGKILL",
					(int)bi->pid, bi->pid_namespace, b->teardown_ms);
			return -1;
		}
		close(bi->pidfd);
		bi->pidfd = -1;
	}
	*ms = clock_mono_ms() - t0;
	init_view_free(bi);
	bi->pid = -1;
	return 0;
}

/* All of iov to the non-blocking go pipe by until: an init that stopped reading (stopped, or gone)
 * cannot hold the call. One writev for the whole call when the pipe has room (init then wakes once,
 * with all of it to read), resumed where a partial write stopped. */
static int go_writev(int fd, struct iovec *iov, int n, int64_t until)
{
	while (n > 0) {
		ssize_t done = writev(fd, iov, n);

		if (done < 0 && errno == EINTR)
			continue;
		if (done < 0 && errno == EAGAIN) {
			struct pollfd w = { fd, POLLOUT, 0 };
			int64_t left = until - clock_mono_ms();

			if (left <= 0 || poll(&w, 1, (int)left) < 0 || (w.revents & (POLLERR | POLLHUP)))
				return -1;
			continue;
		}
		if (done <= 0)
			return -1;
		for (; n > 0 && (size_t)done >= iov->iov_len; iov++, n--)
			done -= (ssize_t)iov->iov_len;
		if (n > 0) {
			iov->iov_base = (char *)iov->iov_base + done;
			iov->iov_len -= (size_t)done;
		}
	}
	return 0;
}

/* The command and environment, to the waiting init: one header, then the bytes (init.h). */
static int call_send(const struct boundary *b, int fd, const struct exec_request *req)
{
	size_t command_len = strlen(req->command), env_len = 0;
	struct init_call h = { .command_len = (uint32_t)command_len, .n_env = (uint32_t)req->n_env };
	struct iovec iov[2 + BOUNDARY_MAX_ENV];
	int64_t until = clock_mono_ms() + b->teardown_ms;

	if (req->n_env > BOUNDARY_MAX_ENV)
		return -1;
	for (size_t i = 0; i < req->n_env; i++) {
		iov[2 + i] = (struct iovec){ (char *)req->env[i], strlen(req->env[i]) + 1 };
		env_len += iov[2 + i].iov_len;
	}
	if (command_len > INIT_CALL_COMMAND_MAX || env_len > INIT_CALL_ENV_MAX)
		return -1;
	h.env_len = (uint32_t)env_len;
	iov[0] = (struct iovec){ &h, sizeof h };
	iov[1] = (struct iovec){ (char *)req->command, h.command_len };
	if (fcntl(fd, F_SETFL, O_NONBLOCK) < 0)
		return -1;
	return go_writev(fd, iov, (int)(2 + req->n_env), until);
}

/* The waiting init took the call: its READY, which it writes only once it holds the whole call and
 * before the command exists. An init killed at the hand-off ends without it: then nothing ran. */
static int call_taken(const struct boundary *b, struct boundary_init *bi, struct run_state *st,
		      struct exec_outcome *out)
{
	int64_t until = clock_mono_ms() + b->teardown_ms;
	struct init_report r;

	for (;;) {
		struct pollfd p = { bi->report, POLLIN, 0 };
		int64_t left = until - clock_mono_ms();
		int n;

		if (left <= 0)
			return -1;
		n = poll(&p, 1, (int)left);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return -1;
		break;
	}
	if (read(bi->report, &r, sizeof r) != (ssize_t)sizeof r || r.kind != INIT_REPORT_READY)
		return -1;
	st->pid_max_set = r.value;
	out->pid_max_bounded = r.value != 0;
	return 0;
}

int boundary_run_prebuilt(const struct boundary *b, struct boundary_init *bi, const struct exec_request *req,
			  int cancel_fd, struct exec_outcome *out, struct sb_err *err)
{
	struct run_state st = { .pid = bi->pid, .pidfd = bi->pidfd };
	struct run_fds f;
	int64_t t0;

	if (outcome_init(req, out, err) < 0)
		return -1;
	snprintf(out->pid_namespace, sizeof out->pid_namespace, "%s", bi->pid_namespace);
	out->started_ms = clock_real_ms();
	t0 = clock_mono_ms();
	if (call_send(b, bi->go, req) < 0 || call_taken(b, bi, &st, out) < 0) {
		/* Nothing ran: init is gone (or the call does not fit). The caller ends it and builds anew. */
		exec_outcome_free(out);
		return -2;
	}
	fd_close(&bi->go);
	steptime_mark(STEP_RELEASED);
	f = (struct run_fds){ .out = { bi->out, -1 }, .errp = { bi->errp, -1 }, .go = { -1, -1 },
			      .report = { bi->report, -1 }, .error = { bi->error, -1 } };
	bi->out = bi->errp = bi->report = bi->error = -1;
	run_to_end(b, req, cancel_fd, &f, &st, out, t0);
	bi->pidfd = -1;
	bi->pid = -1;
	init_view_free(bi);
	return 0;
}
