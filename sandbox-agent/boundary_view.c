/* agent, before each command: the call's own checks. The request, then the view: every path where
 * a private directory or the agent binary shows now, and each writable root (the working directory
 * first) against all of them, by identity. Refuses; never starts a process and never mounts. */
#include "boundary_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "aliases.h"
#include "fstype.h"
#include "mountfd.h"

/* ---- one command ---- */

int request_check(const struct exec_request *req, struct sb_err *err)
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


/* A view's two arrays start at VIEW_FIRST_CAP entries, each holding a PATH_MAX path: 33 KB each. musl's
 * allocator maps a group of pages for an allocation that size and unmaps it at its free. That happened
 * twice in each build of the next init and twice in each call's checks. In the multi-threaded agent
 * each unmap, and each first write to the fresh pages, interrupts the other CPU to flush its TLB
 * (docs/performance.md, "Cut: a view's arrays kept for the next view"). So the agent keeps one array
 * of each kind, at that first capacity, for the next view of any thread (the builder's, then the
 * call's: they take turns, prebuilt.c). Nothing of an earlier view is read from a kept array: a view
 * counts its own entries from 0 and writes each whole as it adds it. What a kept array holds are
 * paths the agent itself checked. An array that grew past the first capacity is freed, and a second
 * one at that capacity replaces the kept one, which is freed: at most one of each is held. */
#define VIEW_FIRST_CAP 8

static struct hidden_dir *kept_hidden;
static struct guarded *kept_g;

static void *kept_take(void *slot)
{
	return __atomic_exchange_n((void **)slot, NULL, __ATOMIC_ACQ_REL);
}

/* Keeps arr when it has the first capacity, freeing the one it replaces; frees it otherwise. */
static void kept_put(void *slot, void *arr, size_t cap)
{
	if (cap == VIEW_FIRST_CAP)
		arr = __atomic_exchange_n((void **)slot, arr, __ATOMIC_ACQ_REL);
	free(arr);
}

size_t run_view_kept_bytes(void)
{
	size_t n = 0;

	if (__atomic_load_n(&kept_hidden, __ATOMIC_ACQUIRE) != NULL)
		n += VIEW_FIRST_CAP * sizeof(struct hidden_dir);
	if (__atomic_load_n(&kept_g, __ATOMIC_ACQUIRE) != NULL)
		n += VIEW_FIRST_CAP * sizeof(struct guarded);
	return n;
}

void run_view_free(struct run_view *v)
{
	for (size_t i = 0; i < v->n_g; i++)
		ident_chain_free(&v->g[i].up);
	kept_put(&kept_g, v->g, v->cap_g);
	kept_put(&kept_hidden, v->hidden, v->cap_hidden);
	if (!v->mi_borrowed)
		mountinfo_free(&v->mi);
	memset(v, 0, sizeof *v);
}

/* Room for one more element of size `size` in *arr (n used of *cap). */
static int array_room(void *arr, size_t *cap, size_t n, size_t size, struct sb_err *err)
{
	void **p = arr, *grown;
	size_t want = *cap ? *cap * 2 : VIEW_FIRST_CAP;

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
int run_view_build(const struct boundary *b, const char *cwd, const struct mountinfo *mi, struct run_view *v,
			  struct sb_err *err)
{
	memset(v, 0, sizeof *v);
	if ((v->hidden = kept_take(&kept_hidden)) != NULL)
		v->cap_hidden = VIEW_FIRST_CAP;
	if ((v->g = kept_take(&kept_g)) != NULL)
		v->cap_g = VIEW_FIRST_CAP;
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

