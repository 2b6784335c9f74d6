/* The process backend (backend.h): a session's sandbox is `sandbox-agent serve` running as PID 1 of
 * its own user, PID, mount, IPC and UTS namespaces on this host, in a root built from the mount plan,
 * reached over <private_dir>/sock/agent.sock. Two roles, labelled where their code begins:
 *   manager, outside     - prepare(), stop(), evidence(), adopt(): plans the root, clones, writes the
 *                          id maps, waits for the socket; proves the end through a pidfd.
 *   sandbox init, inside - the clone between clone() and execve() of the agent: builds the root from
 *                          the steps the manager prepared, pivots into it, executes the agent. Its
 *                          code is sandbox-agent/sandbox_init.c, read beside the agent's own init.
 * Must never: allocate or call glibc fork/malloc after clone (the manager is multi-threaded); follow a
 * symbolic link while building the root (workspace content is written by commands); say a sandbox is
 * gone without seeing its PID-namespace init exit through a pidfd.
 *
 * The sandbox's view (every path the agent and its commands can reach):
 *   /                      a tmpfs, read-only once built
 *   /usr /bin /sbin /lib*  the host's, read-only recursive binds (a symbolic link such as /bin -> usr/bin
 *                          is recreated as a link, not bound)
 *   /etc                   a tmpfs, read-only, holding only the entries of etc_entries[] (no shadow,
 *                          no ssl/private, no ssh host keys: what root could read on the host stays out)
 *   /dev                   a tmpfs, read-only: null zero full random urandom tty (binds of the host's
 *                          nodes), fd stdin stdout stderr (links into /proc/self/fd), shm (tmpfs 1777,
 *                          shm_bytes);
 *                          no pts: commands never get a terminal
 *   /proc                  a fresh procfs of the sandbox's PID namespace, unmasked (the agent mounts a
 *                          fresh one per command, which the kernel allows only over a fully visible one)
 *   /tmp                   a tmpfs 1777 of the sandbox's own (tmp_bytes, and inodes to match), gone with it
 *   /.sandbox/bin/sandbox-agent   the agent binary, a read-only bind (/usr is the host's and read-only,
 *                          so /usr/local/bin cannot take a new file; the agent never re-executes itself)
 *   /.sandbox/empty        an empty file: the source of hidden files
 *   the mount plan         every entry in order, at its own path
 *   credentials_dir        read-only at its own path, when given
 *   <private_dir>/tls      read-only; state/ and sock/ read-write: the agent hides all three from commands
 * Every directory on the way to a mount target that lies in a mount the sandbox can write is anchored
 * (steps_anchor()): otherwise a command could rename it and move the agent's state away.
 * Who runs: the sandbox's uid N, mapped 1:1 (N inside is N on the host); nothing maps uid 0, so no
 * process inside is root of any user namespace. Sandbox init builds the root with the capabilities
 * a new namespace's first process holds, and loses them all at the agent's execve.
 * Limits: sized /tmp and /dev/shm always; memory, pids and CPU in a cgroup of its own when the host
 * delegates a cgroup v2 directory (process_settings.cgroup_parent); limits() reads back which hold.
 */
#include "agent_dir.h"
#include "mountfd.h"
#include "backend.h"
#include "clock.h"
#include "log.h"
#include "nsspawn.h"
#include "pathfmt.h"
#include "sandbox_init.h"

#include <dirent.h>
#include <errno.h>
#include <pthread.h>
#include <ftw.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/close_range.h>
#include <linux/openat2.h>
#include <linux/sched.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#ifndef P_PIDFD
#define P_PIDFD 3
#endif

#define SETUP_MS 10000        /* sandbox init: from release to execve of the agent */
#define READY_MS 10000        /* the agent: from execve to a socket that accepts (ASan builds are slow) */
#define ABORT_MS 5000         /* a failed prepare: from SIGKILL to the reaped init */
#define LOG_TAIL_BYTES 600    /* of agent.log, in the message of a failed prepare */
#define CGROUP_RMDIR_TRIES 50       /* 10 ms apart: a cgroup empties a moment after its last process is reaped */
#ifndef CGROUP2_SUPER_MAGIC
#define CGROUP2_SUPER_MAGIC 0x63677270
#endif



static void cleanup_freep(void *p)
{
	free(*(void **)p);
}

static void cleanup_closep(const int *fd)
{
	if (*fd >= 0)
		close(*fd);
}

#define cleanup_free __attribute__((cleanup(cleanup_freep)))
#define cleanup_close __attribute__((cleanup(cleanup_closep)))

/* The backend: its settings and, when the host delegates one, the cgroup v2 directory every
 * sandbox's own cgroup is made in. */
struct process {
	struct backend be;
	struct process_settings set;
	int cgroup_fd;                  /* the delegated parent (O_DIRECTORY), -1 when none */
};

static struct process *process_of(struct backend *be)
{
	return (struct process *)be;
}


static void steps_free(struct steps *s)
{
	for (size_t i = 0; i < s->n; i++) {
		free(s->v[i].path);
		free(s->v[i].source);
	}
	free(s->v);
	memset(s, 0, sizeof *s);
}

/* A sandbox path we mount at must be plain: '..' or '.' could climb out of what the plan meant. */
static bool path_plain(const char *p)
{
	if (p == NULL || p[0] != '/' || strlen(p) >= PATH_MAX)
		return false;
	for (const char *c = p + 1; *c != '\0';) {
		size_t n = strcspn(c, "/");

		if (n == 0 || (n == 1 && c[0] == '.') || (n == 2 && c[0] == '.' && c[1] == '.'))
			return false;
		c += n;
		if (*c == '/')
			c++;
		if (*c == '\0' && c[-1] == '/')
			return false;
	}
	return p[1] != '\0';
}

static int steps_add(struct steps *s, const struct step *tmpl, const char *path, const char *source,
		     struct sb_err *err)
{
	struct step *st;

	if (!path_plain(path))
		return sb_fail(err, EINVAL, "mount target '%s' is not a plain absolute path", path ? path : "(null)");
	if (s->n == s->cap) {
		size_t cap = s->cap ? s->cap * 2 : 64;
		struct step *v = realloc(s->v, cap * sizeof *v);

		if (v == NULL)
			return sb_fail(err, ENOMEM, "planning the sandbox's root");
		s->v = v;
		s->cap = cap;
	}
	st = &s->v[s->n];
	*st = *tmpl;
	st->mnt_fd = -1;
	st->path = strdup(path);
	st->source = source ? strdup(source) : NULL;
	if (st->path == NULL || (source != NULL && st->source == NULL)) {
		free(st->path);
		free(st->source);
		return sb_fail(err, ENOMEM, "planning the sandbox's root");
	}
	s->n++;
	return 0;
}

/* A tmpfs the sandbox can write (seal false) must be given a size: unbounded, its pages would pin
 * host memory up to half of RAM, and stay pinned while the sandbox lives. */
static int step_tmpfs(struct steps *s, const char *path, const char *mode, uint64_t attrs, bool seal,
		      uint64_t size, struct sb_err *err)
{
	struct step t = { .kind = STEP_TMPFS, .mode = mode, .attrs = attrs, .seal = seal, .size = size };

	if (!seal && !(attrs & MOUNT_ATTR_RDONLY) && size == 0)
		return sb_fail(err, EINVAL, "the writable tmpfs %s needs a size", path);
	return steps_add(s, &t, path, NULL, err);
}

static int step_bind(struct steps *s, const char *path, const char *source, uint64_t attrs, struct sb_err *err)
{
	struct step t = { .kind = STEP_BIND, .attrs = attrs };

	return steps_add(s, &t, path, source, err);
}

static int step_bind_inside(struct steps *s, const char *path, const char *source, uint64_t attrs,
			    struct sb_err *err)
{
	struct step t = { .kind = STEP_BIND, .attrs = attrs, .source_inside = true };

	return steps_add(s, &t, path, source, err);
}

static int step_symlink(struct steps *s, const char *path, const char *text, struct sb_err *err)
{
	struct step t = { .kind = STEP_SYMLINK };

	return steps_add(s, &t, path, text, err);
}

static int step_simple(struct steps *s, enum step_kind kind, const char *path, uint64_t attrs, struct sb_err *err)
{
	struct step t = { .kind = kind, .attrs = attrs };

	return steps_add(s, &t, path, NULL, err);
}

/* ---- manager, outside: what goes into the root ---- */

/* The host's system directories, read-only. Merged-/usr systems have /bin -> usr/bin: the link is
 * recreated, so the sandbox resolves it exactly as the host does. */
static int steps_system(struct steps *s, struct sb_err *err)
{
	static const char *const dirs[] = { "/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32" };

	for (size_t i = 0; i < sizeof dirs / sizeof dirs[0]; i++) {
		struct stat st;
		char link[PATH_MAX];
		ssize_t n;

		if (lstat(dirs[i], &st) < 0) {
			if (errno == ENOENT)
				continue;
			return sb_fail_errno(err, "inspecting %s", dirs[i]);
		}
		if (S_ISLNK(st.st_mode)) {
			n = readlink(dirs[i], link, sizeof link - 1);
			if (n < 0)
				return sb_fail_errno(err, "reading the link %s", dirs[i]);
			link[n] = '\0';
			if (step_symlink(s, dirs[i], link, err) < 0)
				return -1;
		} else if (S_ISDIR(st.st_mode)) {
			if (step_bind(s, dirs[i], dirs[i], MOUNT_ATTR_RDONLY | MOUNT_ATTR_NODEV, err) < 0)
				return -1;
		}
	}
	return 0;
}

/* What /etc holds, and nothing else: name resolution, users and groups for `id` and git, time zone,
 * CA certificates (ssl/certs, never ssl/private), the dynamic linker's cache, shell profiles and git's
 * system configuration. Anything the host does not have is skipped; an entry that others may not read
 * on the host is left out too (a root manager would otherwise hand root's private files to the sandbox). */
static const char *const etc_entries[] = {
	"passwd", "group", "hosts", "hostname", "resolv.conf", "nsswitch.conf", "host.conf", "gai.conf",
	"services", "protocols", "networks", "localtime", "timezone", "ssl/certs", "ssl/openssl.cnf",
	"ca-certificates", "ca-certificates.conf", "pki/ca-trust", "pki/tls/certs", "alternatives",
	"gitconfig", "ld.so.cache", "ld.so.conf", "ld.so.conf.d", "bash.bashrc", "profile", "profile.d",
	"inputrc", "mime.types", "os-release", "debian_version", "mtab", "terminfo",
};

/* The absolute, lexically normalised target of the link /etc/<entry> with text `text`. */
static void link_target_normalise(const char *entry, const char *text, char *out, size_t len)
{
	char buf[PATH_MAX * 2];
	size_t o = 0;

	if (text[0] == '/')
		snprintf(buf, sizeof buf, "%s", text);
	else
		snprintf(buf, sizeof buf, "/etc/%s/../%s", entry, text);
	out[0] = '\0';
	for (char *save = NULL, *c = strtok_r(buf, "/", &save); c != NULL; c = strtok_r(NULL, "/", &save)) {
		if (strcmp(c, ".") == 0)
			continue;
		if (strcmp(c, "..") == 0) {
			while (o > 0 && out[o - 1] != '/')
				o--;
			if (o > 0)
				o--;
			out[o] = '\0';
			continue;
		}
		o += (size_t)snprintf(out + o, o < len ? len - o : 0, "/%s", c);
		if (o >= len) {
			out[0] = '\0';
			return;
		}
	}
}

static bool others_may_read(const struct stat *st)
{
	return (st->st_mode & S_IROTH) && (!S_ISDIR(st->st_mode) || (st->st_mode & S_IXOTH));
}

static int steps_etc_entry(struct steps *s, const char *entry, struct sb_err *err)
{
	char host[PATH_MAX], inside[PATH_MAX], text[PATH_MAX], target[PATH_MAX];
	cleanup_free char *real = NULL;
	struct stat st;
	ssize_t n;

	snprintf(host, sizeof host, "/etc/%s", entry);
	snprintf(inside, sizeof inside, "/etc/%s", entry);
	if (lstat(host, &st) < 0)
		return errno == ENOENT || errno == ENOTDIR ? 0 : sb_fail_errno(err, "inspecting %s", host);
	if (S_ISLNK(st.st_mode)) {
		n = readlink(host, text, sizeof text - 1);
		if (n < 0)
			return sb_fail_errno(err, "reading the link %s", host);
		text[n] = '\0';
		/* A link into /usr or /proc resolves the same inside (localtime, os-release, mtab): keep
		 * the link, so tools that read it (the time zone's name) still can. */
		link_target_normalise(entry, text, target, sizeof target);
		if (strncmp(target, "/usr/", 5) == 0 || strncmp(target, "/proc/", 6) == 0)
			return step_symlink(s, inside, text, err);
		/* Anything else (resolv.conf -> /run/...) is bound from where it really is. */
		real = realpath(host, NULL);
		if (real == NULL || stat(real, &st) < 0)
			return 0; /* a dangling link: nothing to show */
	}
	if (!others_may_read(&st) || !(S_ISREG(st.st_mode) || S_ISDIR(st.st_mode)))
		return 0;
	return step_bind(s, inside, real ? real : host, MOUNT_ATTR_RDONLY | MFD_ATTR_SAFE | MOUNT_ATTR_NOEXEC, err);
}

static int steps_etc(struct steps *s, struct sb_err *err)
{
	if (step_tmpfs(s, "/etc", "0755", MFD_ATTR_SAFE | MOUNT_ATTR_NOEXEC, true, 0, err) < 0)
		return -1;
	for (size_t i = 0; i < sizeof etc_entries / sizeof etc_entries[0]; i++)
		if (steps_etc_entry(s, etc_entries[i], err) < 0)
			return -1;
	return 0;
}

/* A minimal /dev: the host's harmless character devices (bound: a tmpfs made in a user namespace
 * cannot hold working device nodes), the usual links, and a /dev/shm of the sandbox's own. */
static int steps_dev(struct steps *s, uint64_t shm_bytes, struct sb_err *err)
{
	static const char *const nodes[] = { "null", "zero", "full", "random", "urandom", "tty" };
	static const char *const links[][2] = {
		{ "/dev/fd", "/proc/self/fd" }, { "/dev/stdin", "/proc/self/fd/0" },
		{ "/dev/stdout", "/proc/self/fd/1" }, { "/dev/stderr", "/proc/self/fd/2" },
	};
	char path[64];

	if (step_tmpfs(s, "/dev", "0755", MOUNT_ATTR_NOSUID | MOUNT_ATTR_NOEXEC, true, 0, err) < 0)
		return -1;
	for (size_t i = 0; i < sizeof nodes / sizeof nodes[0]; i++) {
		snprintf(path, sizeof path, "/dev/%s", nodes[i]);
		if (access(path, F_OK) == 0 && step_bind(s, path, path, MOUNT_ATTR_NOSUID | MOUNT_ATTR_NOEXEC, err) < 0)
			return -1;
	}
	for (size_t i = 0; i < sizeof links / sizeof links[0]; i++)
		if (step_symlink(s, links[i][0], links[i][1], err) < 0)
			return -1;
	return step_tmpfs(s, "/dev/shm", "1777", MFD_ATTR_SAFE, false, shm_bytes, err);
}

/* The step whose mount holds `path` in the finished root: the deepest mount point on the way to
 * it, the later of two at the same place. NULL: the root tmpfs itself. */
static const struct step *steps_holder(const struct steps *s, const char *path)
{
	const struct step *best = NULL;
	size_t best_len = 0;

	for (size_t i = 0; i < s->n; i++) {
		const struct step *st = &s->v[i];
		size_t n = strlen(st->path);

		if (st->kind == STEP_SYMLINK || st->kind == STEP_FILE)
			continue;
		if (strncmp(path, st->path, n) != 0 || (path[n] != '\0' && path[n] != '/'))
			continue;
		if (n >= best_len) {
			best = st;
			best_len = n;
		}
	}
	return best;
}

static bool step_writable(const struct step *st)
{
	if (st == NULL || (st->attrs & MOUNT_ATTR_RDONLY))
		return false;
	return (st->kind == STEP_TMPFS && !st->seal) || st->kind == STEP_BIND;
}

/* Every directory on the way to a mount target must be one the sandbox cannot rename: renaming an
 * ancestor moves the mount along, and what the agent reaches by path afterwards (its keys, state
 * and socket; the worktree) is whatever a command put at the old name. So each ancestor that lies
 * in a mount the sandbox can write gets an anchor, before the target is planned:
 *  - in a writable tmpfs (/tmp, /dev/shm, a plan tmpfs: fresh and empty), a tmpfs of its own at the
 *    first such ancestor, sealed read-only once built: the rest of the way lies inside it;
 *  - in a writable bind (a directory of the host), the directory bound onto itself, which keeps
 *    its content and makes it a mount point: the kernel refuses to rename or remove a mount point
 *    (EBUSY) in every mount namespace that holds the mount, the commands' copies included.
 * Whatever filesystem the state dir, the volume or the credentials are on, the rule is the same. */
static int steps_anchor(struct steps *s, const char *target, struct sb_err *err)
{
	char anc[PATH_MAX];
	size_t len = strlen(target);

	if (len >= sizeof anc)
		return sb_fail(err, ENAMETOOLONG, "mount target %s", target);
	for (size_t n = 1; n < len; n++) {
		const struct step *holder;

		if (target[n] != '/')
			continue;
		memcpy(anc, target, n);
		anc[n] = '\0';
		holder = steps_holder(s, anc);
		if (holder == NULL || strcmp(holder->path, anc) == 0 || !step_writable(holder))
			continue; /* in the sealed root, a mount point already, or read-only */
		if (holder->kind == STEP_TMPFS) {
			if (step_tmpfs(s, anc, "0755", MFD_ATTR_SAFE, true, 0, err) < 0)
				return -1;
		} else {
			struct step t = { .kind = STEP_BIND, .attrs = holder->attrs, .source_inside = true,
					  .anchor = true };

			if (steps_add(s, &t, anc, anc, err) < 0)
				return -1;
		}
	}
	return 0;
}

/* ------------------------------------------------------------------ one launch */

struct launch {
	const struct process_settings *set;
	struct agent_dir d;             /* private directory, the agent's argv and envp (agent_dir.h) */
	char root[PATH_MAX];            /* <private_dir>/root: the new root's mount point on the host */
	char agent[PATH_MAX];
	const char *workdir;
	struct steps steps;
	off_t log_start;                /* agent.log's size before this launch: its tail is ours */
	int go[2], error[2];            /* [0] read, [1] write; go: manager -> init, error: init -> manager */
	int log_fd, null_fd;
	int cgroup_fd;                  /* the sandbox's own cgroup, -1 when none */
	char cgroup_name[128];          /* its name under the delegated parent, "" when none */
	bool groups_drop;               /* a root manager: init drops the supplementary groups it inherited */
};

static void fd_close(int *fd)
{
	if (*fd >= 0)
		close(*fd);
	*fd = -1;
}

static void launch_free(struct launch **lp)
{
	struct launch *l = *lp;

	if (l == NULL)
		return;
	steps_free(&l->steps);
	fd_close(&l->go[0]);
	fd_close(&l->go[1]);
	fd_close(&l->error[0]);
	fd_close(&l->error[1]);
	fd_close(&l->log_fd);
	fd_close(&l->null_fd);
	fd_close(&l->cgroup_fd);
	free(l);
}

static int launch_paths(struct launch *l, const struct sandbox_spec *spec, struct sb_err *err)
{
	struct stat st;

	/* Canonical from here on: the root is built without following any symbolic link. */
	if (realpath(spec->agent_path, l->agent) == NULL)
		return sb_fail_errno(err, "agent binary %s", spec->agent_path);
	if (stat(l->agent, &st) < 0 || !S_ISREG(st.st_mode) || access(l->agent, X_OK) < 0)
		return sb_fail(err, ENOEXEC, "agent binary %s is not an executable file", l->agent);
	if (agent_dir_prepare(&l->d, spec, err) < 0 ||
	    path_fmt(l->root, sizeof l->root, err, "%s/root", l->d.private_dir) < 0)
		return -1;
	if (mkdir(l->root, 0700) < 0 && errno != EEXIST)
		return sb_fail_errno(err, "creating %s", l->root);
	return 0;
}

static int steps_plan(struct launch *l, const struct sandbox_spec *spec, struct sb_err *err)
{
	const struct mount_plan *plan = spec->plan;
	struct steps *s = &l->steps;
	const char *privates[3][2] = { { l->d.tls, "ro" }, { l->d.state, "rw" }, { l->d.sock_dir, "rw" } };

	for (size_t i = 0; i < plan->n; i++) {
		const struct mount_entry *e = &plan->entries[i];
		int rc = e->target != NULL ? steps_anchor(s, e->target, err) : 0;

		if (rc < 0) {
			sb_err_prefix(err, "mount plan entry %s", e->target);
			return -1;
		}
		switch (e->mode) {
		case MOUNT_RW:
			rc = step_bind(s, e->target, e->source, MFD_ATTR_SAFE, err);
			break;
		case MOUNT_RO:
			rc = step_bind(s, e->target, e->source, MOUNT_ATTR_RDONLY | MFD_ATTR_SAFE, err);
			break;
		case MOUNT_HIDDEN:
			rc = e->is_file ? step_bind_inside(s, e->target, EMPTY_INSIDE,
							   MOUNT_ATTR_RDONLY | MFD_ATTR_SAFE | MOUNT_ATTR_NOEXEC, err)
					: step_tmpfs(s, e->target, "0000",
						     MOUNT_ATTR_RDONLY | MFD_ATTR_SAFE | MOUNT_ATTR_NOEXEC, false, 0, err);
			break;
		case MOUNT_TMPFS:
			rc = step_tmpfs(s, e->target, "0755", MFD_ATTR_SAFE, false, l->set->tmp_bytes, err);
			break;
		}
		if (rc < 0) {
			sb_err_prefix(err, "mount plan entry %s", e->target ? e->target : "(null)");
			return -1;
		}
	}
	if (spec->credentials_dir != NULL &&
	    (steps_anchor(s, l->d.credentials, err) < 0 ||
	     step_bind(s, l->d.credentials, l->d.credentials, MOUNT_ATTR_RDONLY | MFD_ATTR_SAFE | MOUNT_ATTR_NOEXEC, err) < 0))
		return -1;
	for (size_t i = 0; i < 3; i++) {
		uint64_t attrs = MFD_ATTR_SAFE | MOUNT_ATTR_NOEXEC | (privates[i][1][1] == 'o' ? MOUNT_ATTR_RDONLY : 0);

		if (steps_anchor(s, privates[i][0], err) < 0 || step_bind(s, privates[i][0], privates[i][0], attrs, err) < 0)
			return -1;
	}
	return 0;
}

/* The whole root, in mount order: a parent always before what is mounted inside it. */
static int launch_steps(struct launch *l, const struct sandbox_spec *spec, struct sb_err *err)
{
	struct steps *s = &l->steps;

	if (steps_system(s, err) < 0 || step_simple(s, STEP_FILE, EMPTY_INSIDE, 0, err) < 0 ||
	    step_bind(s, AGENT_INSIDE, l->agent, MOUNT_ATTR_RDONLY | MFD_ATTR_SAFE, err) < 0 || steps_etc(s, err) < 0 ||
	    steps_dev(s, l->set->shm_bytes, err) < 0 ||
	    step_simple(s, STEP_PROC, "/proc", MFD_ATTR_SAFE | MOUNT_ATTR_NOEXEC, err) < 0 ||
	    step_tmpfs(s, "/tmp", "1777", MFD_ATTR_SAFE, false, l->set->tmp_bytes, err) < 0 || steps_plan(l, spec, err) < 0) {
		sb_err_prefix(err, "planning the sandbox's root");
		return -1;
	}
	return 0;
}

static int launch_command(struct launch *l, const struct sandbox_spec *spec)
{
	l->workdir = spec->plan->workdir;
	return 0;
}

/* Descriptors 0-2 are sandbox init's stdio-to-be: none of ours may sit there, or a dup2 onto
 * them would clobber it. */
static int fd_above_stdio(int *fd, struct sb_err *err)
{
	int high;

	if (*fd > 2)
		return 0;
	high = fcntl(*fd, F_DUPFD_CLOEXEC, 3);
	if (high < 0)
		return sb_fail_errno(err, "moving a descriptor above 2");
	close(*fd);
	*fd = high;
	return 0;
}

static int launch_fds(struct launch *l, struct sb_err *err)
{
	struct stat st;

	/* Every descriptor close-on-exec: other threads of the manager may fork at any time. */
	if (pipe2(l->go, O_CLOEXEC) < 0 || pipe2(l->error, O_CLOEXEC) < 0)
		return sb_fail_errno(err, "creating pipes");
	l->log_fd = open(l->d.log, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC | O_NOFOLLOW, 0600);
	if (l->log_fd < 0)
		return sb_fail_errno(err, "opening the agent's log %s", l->d.log);
	if (fstat(l->log_fd, &st) < 0)
		return sb_fail_errno(err, "inspecting %s", l->d.log);
	l->log_start = st.st_size;
	l->null_fd = open("/dev/null", O_RDWR | O_CLOEXEC);
	if (l->null_fd < 0)
		return sb_fail_errno(err, "opening /dev/null");
	if (fd_above_stdio(&l->go[0], err) < 0 || fd_above_stdio(&l->go[1], err) < 0 ||
	    fd_above_stdio(&l->error[0], err) < 0 || fd_above_stdio(&l->error[1], err) < 0 ||
	    fd_above_stdio(&l->log_fd, err) < 0 || fd_above_stdio(&l->null_fd, err) < 0)
		return -1;
	/* Release a non-blocking error pipe: the manager polls it with a deadline. */
	if (fcntl(l->error[0], F_SETFL, O_NONBLOCK) < 0)
		return sb_fail_errno(err, "making the error pipe non-blocking");
	return 0;
}

/* ================================================================== manager, outside */

/* clone3 into the sandbox's namespaces with a pidfd; clone() where clone3 is missing. The user
 * namespace owns the others, so an unprivileged manager can create them too. The child runs
 * sandbox_init_main and never returns. */
static pid_t sandbox_clone(struct launch *l, int *pidfd, struct sb_err *err)
{
	struct sandbox_init init = {
		.root = l->root, .steps = &l->steps, .workdir = l->workdir, .agent = l->agent, .log = l->d.log,
		.argv = l->d.argv, .envp = l->d.envp, .uid = l->d.host_uid, .gid = l->d.host_gid,
		.groups_drop = l->groups_drop, .go_fd = l->go[0], .error_fd = l->error[1], .log_fd = l->log_fd,
		.null_fd = l->null_fd,
	};
	pid_t pid = spawn_clone_into(CLONE_NEWUSER | CLONE_NEWPID | CLONE_NEWNS | CLONE_NEWIPC | CLONE_NEWUTS,
				     l->cgroup_fd, pidfd, err);

	if (pid == 0)
		sandbox_init_main(&init);
	if (pid < 0)
		sb_err_prefix(err, "creating the sandbox's user, PID, mount, IPC and UTS namespaces");
	return pid;
}


/* Field 22 of /proc/<pid>/stat, the start time in clock ticks since boot: with the pid it names
 * one process for good, since a pid is reused only after its process was reaped. 0, or -1 with
 * errno (ENOENT/ESRCH: no such process). */
static int starttime_read(pid_t pid, unsigned long long *out)
{
	char path[64], buf[1024];
	cleanup_close int fd = -1;
	const char *p;
	ssize_t n;

	snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -1;
	n = read(fd, buf, sizeof buf - 1);
	if (n <= 0)
		return n == 0 ? (errno = ESRCH, -1) : -1;
	buf[n] = '\0';
	/* The command name (field 2) may hold spaces and parentheses: count from the last ')'. */
	p = strrchr(buf, ')');
	if (p == NULL) {
		errno = EPROTO;
		return -1;
	}
	/* p: the space before field 3; each step moves to the space before the next field. */
	p++;
	for (int field = 3; field < 22 && p != NULL; field++)
		p = strchr(p + 1, ' ');
	if (p == NULL || sscanf(p, " %llu", out) != 1) {
		errno = EPROTO;
		return -1;
	}
	return 0;
}

/* "process:<pid>:<starttime>" */
static int runtime_id_parse(const char *id, pid_t *pid, unsigned long long *start, struct sb_err *err)
{
	unsigned long p = 0;
	char *end = NULL;
	bool ok = id != NULL && strncmp(id, "process:", 8) == 0 && id[8] >= '1' && id[8] <= '9';

	if (ok) {
		errno = 0;
		p = strtoul(id + 8, &end, 10);
		ok = errno == 0 && *end == ':' && p > 1 && p <= INT_MAX && end[1] >= '0' && end[1] <= '9';
	}
	if (ok) {
		*start = strtoull(end + 1, &end, 10);
		ok = errno == 0 && *end == '\0';
	}
	if (!ok)
		return sb_fail(err, EINVAL, "runtime id '%s' is not one of the process backend "
			       "(process:<pid>:<start time>)", id ? id : "(null)");
	*pid = (pid_t)p;
	return 0;
}

/* A pidfd for the recorded init, or proof that it is gone. 1: gone (the pid is free or names a
 * younger process); 0: *fd holds a pidfd of the very process; -1: err. The pidfd is opened BEFORE
 * the start time is compared: a process reused the pid only after ours was reaped, so a match
 * read after the open names the process the pidfd holds. */
static int init_pidfd_open(const struct sandbox_handle *h, int *fd, struct sb_err *err)
{
	unsigned long long recorded, now = 0;
	pid_t pid;

	if (runtime_id_parse(h->runtime_id, &pid, &recorded, err) < 0)
		return -1;
	*fd = (int)syscall(SYS_pidfd_open, pid, 0);
	if (*fd < 0)
		return errno == ESRCH ? 1 : sb_fail_errno(err, "pidfd_open(%d)", (int)pid);
	if (starttime_read(pid, &now) == 0 && now == recorded)
		return 0;
	if (errno != 0 && errno != ENOENT && errno != ESRCH && errno != EPROTO) {
		sb_fail_errno(err, "reading the start time of pid %d", (int)pid);
		close(*fd);
		*fd = -1;
		return -1;
	}
	close(*fd);
	*fd = -1;
	return 1;
}

/* Our own child is reaped here; an adopted one is someone else's to reap (ECHILD), and its pidfd
 * turning readable already proves it exited. */
static void init_reap(int pidfd)
{
	siginfo_t info;

	memset(&info, 0, sizeof info);
	while (waitid((idtype_t)P_PIDFD, (id_t)pidfd, &info, WEXITED | WNOHANG) < 0 && errno == EINTR) {
	}
}

/* Wait up to timeout_ms for the init behind pidfd to exit. 1: exited; 0: still running. A PID
 * namespace's init exits only after the kernel has killed and reaped every other process of the
 * namespace (zap_pid_ns_processes), nested namespaces included: its exit is the sandbox's end. */
static int init_wait_exit(int pidfd, int timeout_ms)
{
	int64_t deadline = clock_mono_ms() + timeout_ms;

	for (;;) {
		struct pollfd p = { .fd = pidfd, .events = POLLIN };
		int n = poll(&p, 1, clock_remaining_ms(deadline));

		if (n > 0) {
			init_reap(pidfd);
			return 1;
		}
		if (n == 0 || (n < 0 && errno != EINTR) || clock_remaining_ms(deadline) == 0)
			return 0;
	}
}

static void handle_clear(struct sandbox_handle *h)
{
	memset(h, 0, sizeof *h);
	h->pidfd = -1;
}

/* The last LOG_TAIL_BYTES of what the agent wrote in this launch, on one line. */
static void log_tail(const struct launch *l, char *out, size_t len)
{
	cleanup_close int fd = open(l->d.log, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
	char buf[LOG_TAIL_BYTES + 1];
	struct stat st;
	off_t from;
	ssize_t n;

	out[0] = '\0';
	if (fd < 0 || fstat(fd, &st) < 0 || st.st_size <= l->log_start)
		return;
	from = st.st_size - l->log_start > LOG_TAIL_BYTES ? st.st_size - LOG_TAIL_BYTES : l->log_start;
	n = pread(fd, buf, sizeof buf - 1, from);
	if (n <= 0)
		return;
	while (n > 0 && (buf[n - 1] == '\n' || buf[n - 1] == ' '))
		n--;
	buf[n] = '\0';
	for (ssize_t i = 0; i < n; i++)
		if (buf[i] == '\n')
			buf[i] = ' ';
	snprintf(out, len, "; agent.log: %s", buf);
}

/* A failed prepare leaves nothing running: SIGKILL to the sandbox's init, then its end, bounded.
 * err already says what failed; this adds whether the end was proven. */
static void sandbox_abort(struct sandbox_handle *h, struct sb_err *err)
{
	if (h->pidfd < 0)
		return;
	syscall(SYS_pidfd_send_signal, h->pidfd, SIGKILL, NULL, 0);
	if (!init_wait_exit(h->pidfd, ABORT_MS)) {
		size_t len = strlen(err->msg);

		snprintf(err->msg + len, sizeof err->msg - len,
			 " (and the sandbox's init, pid %d, did not exit within %d ms of SIGKILL: its end is NOT "
			 "proven; the handle keeps its pidfd for evidence())", (int)h->pid, ABORT_MS);
		return;
	}
	close(h->pidfd);
	handle_clear(h);
}

/* Until sandbox init reports a failed step or its execve closes the error pipe. */
static int setup_wait(struct launch *l, struct sb_err *err)
{
	int64_t deadline = clock_mono_ms() + SETUP_MS;
	char msg[SB_ERR_MSG_MAX];
	size_t have = 0;

	for (;;) {
		struct pollfd p = { .fd = l->error[0], .events = POLLIN };
		int n = poll(&p, 1, clock_remaining_ms(deadline));
		ssize_t r;

		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return sb_fail(err, n == 0 ? ETIMEDOUT : errno, "sandbox init did not finish building the root "
				       "within %d ms", SETUP_MS);
		r = read(l->error[0], msg + have, sizeof msg - 1 - have);
		if (r < 0 && (errno == EINTR || errno == EAGAIN))
			continue;
		if (r > 0 && have + (size_t)r < sizeof msg - 1) {
			have += (size_t)r;
			continue;
		}
		if (r > 0)
			have += (size_t)r;
		msg[have] = '\0';
		if (have > 0)
			return sb_fail(err, EPERM, "%s", msg);
		return 0; /* end of file: the agent is executing (or init died; the next wait sees it) */
	}
}

/* Until the agent serves on its socket, or dies (its log says why). */
static int ready_wait(struct launch *l, struct sandbox_handle *h, struct sb_err *err)
{
	int64_t deadline = clock_mono_ms() + READY_MS;
	char tail[LOG_TAIL_BYTES + 32];

	for (;;) {
		struct pollfd p = { .fd = h->pidfd, .events = POLLIN };
		siginfo_t info;

		if (agent_serving(l->d.sock, deadline) == 1)
			return 0;
		if (poll(&p, 1, 20) > 0) {
			memset(&info, 0, sizeof info);
			if (waitid((idtype_t)P_PIDFD, (id_t)h->pidfd, &info, WEXITED) == 0) {
				close(h->pidfd);
				handle_clear(h);
			}
			log_tail(l, tail, sizeof tail);
			if (info.si_code == CLD_EXITED)
				return sb_fail(err, ECHILD, "the agent exited with status %d before serving%s",
					       info.si_status, tail);
			return sb_fail(err, ECHILD, "the agent was killed by signal %d before serving%s",
				       info.si_status, tail);
		}
		if (clock_remaining_ms(deadline) == 0) {
			log_tail(l, tail, sizeof tail);
			return sb_fail(err, ETIMEDOUT, "the agent did not serve on %s within %d ms%s", l->d.sock,
				       READY_MS, tail);
		}
	}
}

/* manager, outside: clone, maps, release, then wait for the setup and the socket. */
static int sandbox_start(struct launch *l, struct sandbox_handle *h, struct sb_err *err)
{
	unsigned long long start;
	pid_t pid = sandbox_clone(l, &h->pidfd, err);

	/* Init's ends of the pipes and its stdio are its own now. */
	fd_close(&l->go[0]);
	fd_close(&l->error[1]);
	fd_close(&l->log_fd);
	fd_close(&l->null_fd);
	if (pid < 0) {
		h->pidfd = -1;
		return -1;
	}
	h->pid = pid;
	/* Read while init waits for us: the start time pins this pid to this process. */
	if (starttime_read(pid, &start) < 0) {
		sb_fail_errno(err, "reading the start time of the sandbox's init (pid %d)", (int)pid);
		sandbox_abort(h, err);
		return -1;
	}
	/* A cut address would name another socket: refused like any path (common/pathfmt.c). */
	if (path_fmt(h->runtime_id, sizeof h->runtime_id, err, "process:%d:%llu", (int)pid, start) < 0 ||
	    path_fmt(h->address, sizeof h->address, err, "%s", l->d.listen) < 0) {
		sandbox_abort(h, err);
		return -1;
	}
	/* 1:1, the sandbox's uid and gid only: host_uid N is N inside, and nothing maps to the
	 * namespace's uid 0. So no process of the sandbox is ever uid 0 of any user namespace: not of
	 * this one, and not of the agent's per-command ones, which map N to N again. That is what
	 * keeps the namespace's root-only files out of a command's reach: pid_max of a PID namespace
	 * is writable by euid make_kuid(its user namespace, 0) (kernel/pid.c,
	 * pid_table_root_permissions), and a non-dumpable process's /proc files belong to
	 * make_kuid(mm->user_ns, 0) (task_dump_owner): unmapped, both fall to the global root. An
	 * unprivileged manager may map only its own ids anyway; a root manager maps the configured
	 * sandbox ids, never 0 (agent_dir_prepare refuses it), and leaves setgroups open for init to
	 * drop the supplementary groups the clone inherited from it (root's group 0 among them). */
	if ((l->groups_drop ? spawn_id_maps_write_groups_open : spawn_id_maps_write)(pid, l->d.host_uid, l->d.host_uid,
										     l->d.host_gid, l->d.host_gid, err) < 0) {
		sb_err_prefix(err, "writing the sandbox's id maps");
		sandbox_abort(h, err);
		return -1;
	}
	if (write(l->go[1], "1", 1) != 1) {
		sb_fail_errno(err, "releasing sandbox init");
		sandbox_abort(h, err);
		return -1;
	}
	fd_close(&l->go[1]);
	if (setup_wait(l, err) < 0 || ready_wait(l, h, err) < 0) {
		sandbox_abort(h, err);
		return -1;
	}
	return 0;
}

static int spec_check(const struct sandbox_spec *spec, struct sb_err *err)
{
	if (spec == NULL || spec->session == NULL || spec->plan == NULL || spec->private_dir == NULL ||
	    spec->agent_path == NULL || spec->manager_name == NULL)
		return sb_fail(err, EINVAL, "the sandbox spec needs a session, a mount plan, a private directory, "
			       "the agent's path and the manager's name");
	if (spec->plan->workdir == NULL || !path_plain(spec->plan->workdir))
		return sb_fail(err, EINVAL, "the mount plan has no plain absolute working directory");
	if (spec->manager_name[0] == '\0' || spec->manager_name[0] == '-')
		return sb_fail(err, EINVAL, "bad manager name '%s'", spec->manager_name);
	return 0;
}

/* ---- the sandbox's cgroup (cgroup v2, under a parent the host delegated to the manager) ---- */

static int open_nofollow_dir(const char *path)
{
	return mfd_open_nofollow(AT_FDCWD, path, O_RDONLY | O_DIRECTORY);
}

/* Write `text` to <dirfd>/<name> in one write. */
static int cgroup_write(int dirfd, const char *name, const char *text, struct sb_err *err)
{
	cleanup_close int fd = openat(dirfd, name, O_WRONLY | O_CLOEXEC | O_NOFOLLOW);
	size_t len = strlen(text);
	ssize_t n;

	if (fd < 0)
		return sb_fail_errno(err, "opening the cgroup's %s", name);
	n = write(fd, text, len);
	if (n < 0)
		return sb_fail_errno(err, "writing '%s' to the cgroup's %s", text, name);
	if ((size_t)n != len)
		return sb_fail(err, EIO, "writing '%s' to the cgroup's %s: short write", text, name);
	return 0;
}

/* Does <dirfd>/cgroup.procs list pid? Every process of the cgroup is a line of its own, in no order. */
static bool cgroup_holds(int dirfd, pid_t pid)
{
	char line[32], want[32];
	bool found = false;
	int fd = openat(dirfd, "cgroup.procs", O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
	FILE *f = fd < 0 ? NULL : fdopen(fd, "re");

	if (f == NULL) {
		if (fd >= 0)
			close(fd);
		return false;
	}
	snprintf(want, sizeof want, "%d\n", (int)pid);
	while (!found && fgets(line, sizeof line, f) != NULL)
		found = strcmp(line, want) == 0;
	fclose(f);
	return found;
}

/* The first line of <dirfd>/<name>, without its newline; -1 with errno. */
static int cgroup_read(int dirfd, const char *name, char *out, size_t len)
{
	cleanup_close int fd = openat(dirfd, name, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
	ssize_t n;

	if (fd < 0)
		return -1;
	n = read(fd, out, len - 1);
	if (n < 0)
		return -1;
	out[n] = '\0';
	out[strcspn(out, "\n")] = '\0';
	return 0;
}

static bool word_in(const char *list, const char *word)
{
	size_t n = strlen(word);

	for (const char *c = list; (c = strstr(c, word)) != NULL; c += n)
		if ((c == list || c[-1] == ' ') && (c[n] == '\0' || c[n] == ' '))
			return true;
	return false;
}

/* "sandbox-<session>-<generation>": one per sandbox generation, a plain name (session ids are hex
 * or volprobe-<hex>; anything else is refused rather than put in a path). */
static int cgroup_name(const struct sandbox_spec *spec, char *out, size_t len, struct sb_err *err)
{
	int n;

	if (spec->session[0] == '\0' || strspn(spec->session, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
					       "0123456789-") != strlen(spec->session))
		return sb_fail(err, EINVAL, "session '%s' cannot name a cgroup", spec->session);
	n = snprintf(out, len, "sandbox-%s-%llu", spec->session, (unsigned long long)spec->generation);
	if (n < 0 || (size_t)n >= len)
		return sb_fail(err, ENAMETOOLONG, "the cgroup name of session %s", spec->session);
	return 0;
}

/* Removes an empty cgroup of ours; a cgroup empties a moment after its last process was reaped. */
static int cgroup_remove(const struct process *p, const char *name, struct sb_err *err)
{
	for (int i = 0; i < CGROUP_RMDIR_TRIES; i++) {
		if (unlinkat(p->cgroup_fd, name, AT_REMOVEDIR) == 0 || errno == ENOENT)
			return 0;
		if (errno != EBUSY)
			break;
		usleep(10 * 1000);
	}
	return sb_fail_errno(err, "removing the sandbox's cgroup %s/%s", p->set.cgroup_parent, name);
}

/* The sandbox's own cgroup with its limits, before anything runs in it; its descriptor goes to
 * clone3 (CLONE_INTO_CGROUP), so init is born there and every descendant stays there. */
static int cgroup_make(const struct process *p, const struct sandbox_spec *spec, struct launch *l,
		       struct sandbox_handle *h, struct sb_err *err)
{
	char name[sizeof h->cgroup], num[64];

	if (p->cgroup_fd < 0)
		return 0;
	if (cgroup_name(spec, name, sizeof name, err) < 0)
		return -1;
	/* A leftover of this very generation (a manager killed mid-prepare) is empty once its
	 * sandbox ended; a non-empty one is refused by rmdir (EBUSY), and so is this prepare. */
	if (mkdirat(p->cgroup_fd, name, 0755) < 0) {
		if (errno != EEXIST)
			return sb_fail_errno(err, "creating the cgroup %s/%s", p->set.cgroup_parent, name);
		if (cgroup_remove(p, name, err) < 0)
			return -1;
		if (mkdirat(p->cgroup_fd, name, 0755) < 0)
			return sb_fail_errno(err, "creating the cgroup %s/%s", p->set.cgroup_parent, name);
	}
	snprintf(h->cgroup, sizeof h->cgroup, "%s", name);
	snprintf(l->cgroup_name, sizeof l->cgroup_name, "%s", name);
	l->cgroup_fd = openat(p->cgroup_fd, name, O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW);
	if (l->cgroup_fd < 0)
		return sb_fail_errno(err, "opening the cgroup %s/%s", p->set.cgroup_parent, name);
	if (p->set.memory_bytes > 0) {
		snprintf(num, sizeof num, "%lld", (long long)p->set.memory_bytes);
		if (cgroup_write(l->cgroup_fd, "memory.max", num, err) < 0 ||
		    cgroup_write(l->cgroup_fd, "memory.swap.max", "0", err) < 0)
			return -1;
	}
	if (p->set.pids > 0) {
		snprintf(num, sizeof num, "%lld", (long long)p->set.pids);
		if (cgroup_write(l->cgroup_fd, "pids.max", num, err) < 0)
			return -1;
	}
	if (p->set.nano_cpus > 0) {
		/* quota per 100 ms period: 1e9 nano-CPUs are one CPU, 100000 us of every 100000 */
		snprintf(num, sizeof num, "%lld 100000", (long long)(p->set.nano_cpus / 10000));
		if (cgroup_write(l->cgroup_fd, "cpu.max", num, err) < 0)
			return -1;
	}
	return 0;
}

/* The delegated parent: a cgroup v2 directory the manager may write, with the controllers its
 * limits need enabled for its children. Checked once, at start. */
static int cgroup_parent_open(struct process *p, struct sb_err *err)
{
	const char *want[3] = { p->set.memory_bytes > 0 ? "memory" : NULL, p->set.pids > 0 ? "pids" : NULL,
				p->set.nano_cpus > 0 ? "cpu" : NULL };
	char have[512], enable[64] = "";
	struct statfs sf;

	p->cgroup_fd = open_nofollow_dir(p->set.cgroup_parent);
	if (p->cgroup_fd < 0)
		return sb_fail_errno(err, "config: cgroup-parent %s", p->set.cgroup_parent);
	if (fstatfs(p->cgroup_fd, &sf) < 0 || sf.f_type != CGROUP2_SUPER_MAGIC)
		return sb_fail(err, EINVAL, "config: cgroup-parent %s is not a cgroup v2 directory", p->set.cgroup_parent);
	if (cgroup_read(p->cgroup_fd, "cgroup.controllers", have, sizeof have) < 0)
		return sb_fail_errno(err, "config: reading %s/cgroup.controllers", p->set.cgroup_parent);
	for (size_t i = 0; i < 3; i++) {
		if (want[i] == NULL)
			continue;
		if (!word_in(have, want[i]))
			return sb_fail(err, EOPNOTSUPP, "config: cgroup-parent %s does not offer the %s controller "
				       "(it has: %s); delegate it, or set its limit to 0", p->set.cgroup_parent, want[i],
				       have[0] ? have : "none");
		snprintf(enable + strlen(enable), sizeof enable - strlen(enable), "%s+%s", enable[0] ? " " : "", want[i]);
	}
	/* The kernel refuses (EBUSY) while processes sit in the parent itself: cgroup v2 keeps
	 * processes in leaves only. */
	if (enable[0] != '\0' && cgroup_write(p->cgroup_fd, "cgroup.subtree_control", enable, err) < 0) {
		sb_err_prefix(err, "config: cgroup-parent %s: enabling %s for its children (it must hold no "
			      "process itself)", p->set.cgroup_parent, enable);
		return -1;
	}
	return 0;
}

/* Sandboxes' cgroups a killed manager left behind: the empty ones go (rmdir refuses a cgroup
 * that still holds a process). */
static void cgroup_sweep(const struct process *p)
{
	int fd = dup(p->cgroup_fd);
	DIR *d = fd < 0 ? NULL : fdopendir(fd);
	struct dirent *e;

	if (d == NULL) {
		if (fd >= 0)
			close(fd);
		return;
	}
	while ((e = readdir(d)) != NULL)
		if (e->d_type == DT_DIR && strncmp(e->d_name, "sandbox-", 8) == 0 &&
		    unlinkat(p->cgroup_fd, e->d_name, AT_REMOVEDIR) == 0)
			sb_info("removed the empty cgroup %s/%s of an earlier sandbox", p->set.cgroup_parent, e->d_name);
	closedir(d);
}

/* What the host offers, for the start-up line when no cgroup-parent is configured. */
static void cgroup_describe_host(char *out, size_t len)
{
	char line[PATH_MAX], have[256] = "";
	FILE *f = fopen("/proc/self/cgroup", "re");
	bool v2 = false;
	int fd;

	while (f != NULL && fgets(line, sizeof line, f) != NULL)
		if (strncmp(line, "0::", 3) == 0)
			v2 = true;
	if (f != NULL)
		fclose(f);
	fd = open_nofollow_dir("/sys/fs/cgroup/unified");
	if (fd < 0)
		fd = open_nofollow_dir("/sys/fs/cgroup");
	if (fd >= 0 && cgroup_read(fd, "cgroup.controllers", have, sizeof have) < 0)
		have[0] = '\0';
	if (fd >= 0)
		close(fd);
	snprintf(out, len, "%s; cgroup v2 controllers at its root: %s", v2 ? "this manager is in a cgroup v2 hierarchy" :
		 "this manager is in no cgroup v2 hierarchy", have[0] ? have : "none");
}

static int launch_run(struct process *p, const struct sandbox_spec *spec, struct sandbox_handle *h,
		      struct sb_err *err)
{
	__attribute__((cleanup(launch_free))) struct launch *l = calloc(1, sizeof *l);
	struct sb_err ignored;
	int rc;

	if (l == NULL)
		return sb_fail(err, ENOMEM, "preparing a launch");
	l->set = &p->set;
	l->groups_drop = geteuid() == 0;
	l->go[0] = l->go[1] = l->error[0] = l->error[1] = l->log_fd = l->null_fd = l->cgroup_fd = -1;
	rc = launch_paths(l, spec, err) < 0 || launch_steps(l, spec, err) < 0 || launch_command(l, spec) < 0 ||
	     launch_fds(l, err) < 0 || cgroup_make(p, spec, l, h, err) < 0 ? -1 : sandbox_start(l, h, err);
	/* Failed, and the init is proven gone (or never was): its cgroup goes too. Otherwise the
	 * handle keeps the name, and evidence() removes it. */
	if (rc < 0 && h->pidfd < 0 && l->cgroup_name[0] != '\0') {
		if (cgroup_remove(p, l->cgroup_name, &ignored) < 0)
			sb_warn("%s", ignored.msg);
		h->cgroup[0] = '\0';
	}
	return rc;
}

static int process_prepare(struct backend *be, const struct sandbox_spec *spec, struct sandbox_handle *h,
			   struct sb_err *err)
{
	handle_clear(h);
	if (spec_check(spec, err) < 0 || launch_run(process_of(be), spec, h, err) < 0) {
		sb_err_prefix(err, "preparing the sandbox of session %s (generation %llu)",
			      spec && spec->session ? spec->session : "?",
			      spec ? (unsigned long long)spec->generation : 0ULL);
		return -1;
	}
	return 0;
}

/* SIGKILL to the sandbox's PID 1: the kernel then kills everything in its PID namespace, nested
 * command namespaces included. A request, not evidence. */
static int process_stop(struct backend *be, struct sandbox_handle *h, struct sb_err *err)
{
	(void)be;
	if (h->pidfd < 0) {
		int rc = init_pidfd_open(h, &h->pidfd, err);

		if (rc != 0)
			return rc < 0 ? -1 : 0; /* gone already */
	}
	if (syscall(SYS_pidfd_send_signal, h->pidfd, SIGKILL, NULL, 0) < 0 && errno != ESRCH)
		return sb_fail_errno(err, "sending SIGKILL to the sandbox's init (pid %d)", (int)h->pid);
	return 0;
}

/* After the evidence: the sandbox's cgroup is empty now, and goes. A cgroup that will not go is
 * logged (the next start sweeps it); it holds no process, so the evidence stands. */
static void evidence_cgroup_remove(struct process *p, struct sandbox_handle *h)
{
	struct sb_err err;

	if (h->cgroup[0] == '\0' || p->cgroup_fd < 0)
		return;
	if (cgroup_remove(p, h->cgroup, &err) < 0)
		sb_warn("%s", err.msg);
	h->cgroup[0] = '\0';
}

static int process_evidence(struct backend *be, struct sandbox_handle *h, int timeout_ms, struct sb_err *err)
{
	if (h->pidfd < 0) {
		int rc = init_pidfd_open(h, &h->pidfd, err);

		if (rc < 0)
			return -1;
		if (rc == 1) {
			evidence_cgroup_remove(process_of(be), h);
			return 0; /* the pid is free or another process's: ours exited */
		}
	}
	if (!init_wait_exit(h->pidfd, timeout_ms < 0 ? 0 : timeout_ms))
		return sb_fail(err, ETIMEDOUT, "the sandbox's init (pid %d) did not exit within %d ms: not proven gone",
			       (int)h->pid, timeout_ms);
	close(h->pidfd);
	h->pidfd = -1;
	evidence_cgroup_remove(process_of(be), h);
	return 0;
}

static int process_adopt(struct backend *be, const char *runtime_id, const char *address, struct sandbox_handle *h,
			 struct sb_err *err)
{
	unsigned long long start;
	pid_t pid;

	(void)be;
	handle_clear(h);
	if (runtime_id_parse(runtime_id, &pid, &start, err) < 0)
		return -1;
	if (strlen(runtime_id) >= sizeof h->runtime_id || (address && strlen(address) >= sizeof h->address))
		return sb_fail(err, ENAMETOOLONG, "runtime id or address too long");
	snprintf(h->runtime_id, sizeof h->runtime_id, "%s", runtime_id);
	snprintf(h->address, sizeof h->address, "%s", address ? address : "");
	h->pid = pid;
	return 0; /* the pidfd is opened, start time checked, when stop() or evidence() needs it */
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

static int64_t limit_parse(const char *text)
{
	return strcmp(text, "max") == 0 || text[0] < '0' || text[0] > '9' ? -1 : strtoll(text, NULL, 10);
}

/* What holds, read back from the kernel: the tmpfs sizes through the init's root, the cgroup's
 * files for the limits, and the init's own membership in it (cgroup.procs). */
static int process_limits(struct backend *be, const struct sandbox_handle *h, struct sandbox_limits *out,
			  struct sb_err *err)
{
	struct process *p = process_of(be);
	char text[256];
	cleanup_close int cg = -1;

	*out = (struct sandbox_limits){ -1, -1, -1, -1, -1, -1, "" };
	out->tmp_bytes = tmpfs_size(h->pid, "/tmp");
	out->shm_bytes = tmpfs_size(h->pid, "/dev/shm");
	if (out->tmp_bytes < 0 && out->shm_bytes < 0)
		return sb_fail_errno(err, "reading the limits of the sandbox's init (pid %d)", (int)h->pid);
	if (p->cgroup_fd < 0 || h->cgroup[0] == '\0')
		return 0;
	cg = openat(p->cgroup_fd, h->cgroup, O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW);
	if (cg < 0 || !cgroup_holds(cg, h->pid))
		return 0; /* init is not (or no longer) in it: no cgroup limit is shown as holding */
	if (path_fmt(out->cgroup, sizeof out->cgroup, err, "%s/%s", p->set.cgroup_parent, h->cgroup) < 0)
		return -1;
	if (cgroup_read(cg, "memory.max", text, sizeof text) == 0)
		out->memory_max = limit_parse(text);
	if (cgroup_read(cg, "pids.max", text, sizeof text) == 0)
		out->pids_max = limit_parse(text);
	if (cgroup_read(cg, "cpu.max", text, sizeof text) == 0 && limit_parse(text) >= 0) {
		out->cpu_quota_us = limit_parse(text);
		out->cpu_period_us = strchr(text, ' ') ? strtoll(strchr(text, ' ') + 1, NULL, 10) : -1;
	}
	return 0;
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
	if (p->set.tmp_bytes <= 0)
		p->set.tmp_bytes = SANDBOX_TMP_BYTES_DEFAULT;
	if (p->set.shm_bytes <= 0)
		p->set.shm_bytes = SANDBOX_SHM_BYTES_DEFAULT;
	if (p->set.cgroup_parent[0] == '\0') {
		cgroup_describe_host(host, sizeof host);
		sb_info("process backend: no cgroup-parent configured, so sandboxes get no memory, pids or CPU limit "
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
