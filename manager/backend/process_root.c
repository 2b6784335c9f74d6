/* The process backend's root, planned (process.h): what the sandbox will see, as steps in mount
 * order for sandbox init (sandbox-agent/sandbox_init.c), which runs them. Plans only: mounts
 * nothing, and never plans a path with '.', '..' or an empty component.
 *
 * The sandbox's view (every path the agent and its commands can reach):
 *   /                      a tmpfs, read-only once built
 *   /usr /bin /sbin /lib*  the host's, read-only recursive binds (a symbolic link such as /bin -> usr/bin
 *                          is recreated as a link, not bound)
 *   /etc                   a tmpfs, read-only, holding only the entries of etc_entries[] (no shadow,
 *                          no ssl/private, no ssh host keys: what root could read on the host stays out),
 *                          and passwd and group: the host's with the sandbox's own ids (process_users.c)
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
 */
#include "process.h"

#include "mountfd.h"
#include "pathfmt.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

void steps_free(struct steps *s)
{
	for (size_t i = 0; i < s->n; i++) {
		free(s->v[i].path);
		free(s->v[i].source);
	}
	free(s->v);
	memset(s, 0, sizeof *s);
}

bool path_plain(const char *p)
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
		return sb_invalid(err, "mount target '%s' is not a plain absolute path", path ? path : "(null)");
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
	st->src_fd = -1;
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
		return sb_invalid(err, "the writable tmpfs %s needs a size", path);
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

/* What /etc holds, and nothing else: name resolution, time zone, CA certificates (ssl/certs, never
 * ssl/private), the dynamic linker's cache, shell profiles and git's system configuration; users and
 * groups (for `id`, `whoami` and git) are the sandbox's own copies (steps_etc()). Anything the host
 * does not have is skipped; an entry that others may not read on the host is left out too (a root
 * manager would otherwise hand root's private files to the sandbox). */
static const char *const etc_entries[] = {
	"hosts", "hostname", "resolv.conf", "nsswitch.conf", "host.conf", "gai.conf",
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

/* users_dir: process_users.c's passwd and group, which carry the sandbox's own uid and gid. */
static int steps_etc(struct steps *s, const char *users_dir, struct sb_err *err)
{
	char src[PATH_MAX];

	if (step_tmpfs(s, "/etc", "0755", MFD_ATTR_SAFE | MOUNT_ATTR_NOEXEC, true, 0, err) < 0)
		return -1;
	for (size_t i = 0; i < sizeof etc_entries / sizeof etc_entries[0]; i++)
		if (steps_etc_entry(s, etc_entries[i], err) < 0)
			return -1;
	for (int i = 0; i < 2; i++) {
		const char *name = i == 0 ? "passwd" : "group";

		if (path_fmt(src, sizeof src, err, "%s/%s", users_dir, name) < 0 ||
		    step_bind(s, i == 0 ? "/etc/passwd" : "/etc/group", src,
			      MOUNT_ATTR_RDONLY | MFD_ATTR_SAFE | MOUNT_ATTR_NOEXEC, err) < 0)
			return -1;
	}
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

static int steps_plan(struct steps *s, const struct sandbox_spec *spec, const struct agent_dir *d,
		      const struct process_settings *set, struct sb_err *err)
{
	const struct mount_plan *plan = spec->plan;
	const char *privates[3][2] = { { d->tls, "ro" }, { d->state, "rw" }, { d->sock_dir, "rw" } };

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
			rc = step_tmpfs(s, e->target, "0755", MFD_ATTR_SAFE, false, set->tmp_bytes, err);
			break;
		}
		if (rc < 0) {
			sb_err_prefix(err, "mount plan entry %s", e->target ? e->target : "(null)");
			return -1;
		}
	}
	if (spec->credentials_dir != NULL &&
	    (steps_anchor(s, d->credentials, err) < 0 ||
	     step_bind(s, d->credentials, d->credentials, MOUNT_ATTR_RDONLY | MFD_ATTR_SAFE | MOUNT_ATTR_NOEXEC, err) < 0))
		return -1;
	for (size_t i = 0; i < 3; i++) {
		uint64_t attrs = MFD_ATTR_SAFE | MOUNT_ATTR_NOEXEC | (privates[i][1][1] == 'o' ? MOUNT_ATTR_RDONLY : 0);

		if (steps_anchor(s, privates[i][0], err) < 0 || step_bind(s, privates[i][0], privates[i][0], attrs, err) < 0)
			return -1;
	}
	return 0;
}

int root_plan(struct steps *s, const struct sandbox_spec *spec, const struct agent_dir *d, const char *agent,
	      const char *users_dir, const struct process_settings *set, struct sb_err *err)
{
	if (steps_system(s, err) < 0 || step_simple(s, STEP_FILE, EMPTY_INSIDE, 0, err) < 0 ||
	    step_bind(s, AGENT_INSIDE, agent, MOUNT_ATTR_RDONLY | MFD_ATTR_SAFE, err) < 0 || steps_etc(s, users_dir, err) < 0 ||
	    steps_dev(s, set->shm_bytes, err) < 0 ||
	    step_simple(s, STEP_PROC, "/proc", MFD_ATTR_SAFE | MOUNT_ATTR_NOEXEC, err) < 0 ||
	    step_tmpfs(s, "/tmp", "1777", MFD_ATTR_SAFE, false, set->tmp_bytes, err) < 0 ||
	    steps_plan(s, spec, d, set, err) < 0) {
		sb_err_prefix(err, "planning the sandbox's root");
		return -1;
	}
	return 0;
}
