/* Walks of trees a sandbox can write, by descriptor only (fstree.h): the manager's one recursive
 * chown and its one recursive removal. Must never hand a full path inside the tree to a system
 * call, follow a symbolic link, or leave the start's mount.
 *
 * Why descriptors: a command in another sandbox of the same identity writes the shared objects/,
 * refs/ and logs/ while a root manager hands them over. Any operation by path can meet a
 * directory that was renamed away and replaced by a link to /etc (issue 13, break 2). Here each
 * object is opened by ONE name relative to its parent's held descriptor, with every symbolic
 * link refused at resolution (a link is opened as itself, O_PATH | O_NOFOLLOW), then inspected
 * and changed through its own descriptor. A swap after the open changes nothing we touch: the
 * descriptors still name the objects that were opened, all inside the tree. */
#include "fstree.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/openat2.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

/* Beneath the held directory, no link of any kind on the way, and no mount crossed (EXDEV). */
#define FSTREE_RESOLVE (RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS | RESOLVE_NO_XDEV)

/* A directory read again after a pass that removed entries, at most this often (entries a
 * concurrent writer keeps adding make the final rmdir fail instead of looping forever). */
#define REMOVE_PASSES 4

struct level {
	DIR *dir;
	char name[NAME_MAX + 1]; /* the directory's name in the level above ("" for a chown start) */
	bool removed;            /* removal: this pass unlinked something, so read it once more */
	int passes;
};

struct walk {
	struct level lv[FSTREE_DEPTH_MAX + 1];
	size_t n;
	dev_t dev;              /* the start's filesystem: nothing elsewhere is touched */
	int base;               /* removal: the descriptor holding the start's name */
	char where[PATH_MAX];   /* for messages only, never passed to a system call */
};

/* openat2 of one name beneath a held directory; O_NOFOLLOW | O_CLOEXEC added. With O_PATH a final
 * symbolic link is opened as itself (openat2(2), RESOLVE_NO_SYMLINKS). -1 with errno. */
static int open_beneath(int dirfd, const char *name, uint64_t flags)
{
	struct open_how how = { .flags = flags | O_NOFOLLOW | O_CLOEXEC, .resolve = FSTREE_RESOLVE };

	return (int)syscall(SYS_openat2, dirfd, name, &how, sizeof how);
}

int fstree_open_dir(int at, const char *path, struct sb_err *err)
{
	struct open_how how = { .flags = O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC,
				.resolve = RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS |
					   (at == AT_FDCWD ? 0 : RESOLVE_BENEATH) };
	int fd;

	if (at == AT_FDCWD && path[0] != '/')
		return sb_invalid(err, "%s: a walk starts from an absolute path or a held directory", path);
	fd = (int)syscall(SYS_openat2, at, path, &how, sizeof how);
	if (fd < 0 && errno == ELOOP)
		return sb_fail_errno(err, "opening %s: a symbolic link on the way is refused", path);
	if (fd < 0)
		return sb_fail_errno(err, "opening %s", path);
	return fd;
}

/* "a/b/name" below the start, for messages. */
static const char *walk_where(struct walk *w, const char *name)
{
	size_t len = 0, room = sizeof w->where - 1;

	for (size_t i = 0; i <= w->n; i++) {
		const char *part = i < w->n ? w->lv[i].name : name;
		size_t n = strnlen(part, room - len);

		if (part[0] == '\0')
			continue;
		memcpy(w->where + len, part, n);
		len += n;
		if (i < w->n && len < room)
			w->where[len++] = '/';
	}
	w->where[len] = '\0';
	return w->where;
}

static struct walk *walk_new(dev_t dev, int base, struct sb_err *err)
{
	struct walk *w = calloc(1, sizeof *w);

	if (w == NULL) {
		sb_fail(err, ENOMEM, "walking a directory tree");
		return NULL;
	}
	w->dev = dev;
	w->base = base;
	return w;
}

static void walk_free(struct walk *w)
{
	while (w->n > 0)
		closedir(w->lv[--w->n].dir);
	free(w);
}

/* Descend: read the directory held by fd (O_PATH or not) through a fresh open of ".", so the
 * listing is of that very directory, whatever its name now leads to. */
static int walk_push(struct walk *w, int fd, const char *name, struct sb_err *err)
{
	struct level *l = &w->lv[w->n];
	int rfd;

	if (w->n > FSTREE_DEPTH_MAX)
		return sb_fail(err, ELOOP, "%s is more than %d directories deep: refused",
			       walk_where(w, name), FSTREE_DEPTH_MAX);
	if (strlen(name) >= sizeof l->name)
		return sb_fail(err, ENAMETOOLONG, "%s: name too long", walk_where(w, name));
	rfd = open_beneath(fd, ".", O_RDONLY | O_DIRECTORY);
	if (rfd < 0)
		return sb_fail_errno(err, "opening the directory %s", walk_where(w, name));
	l->dir = fdopendir(rfd);
	if (l->dir == NULL) {
		sb_fail_errno(err, "reading the directory %s", walk_where(w, name));
		close(rfd);
		return -1;
	}
	strcpy(l->name, name);
	l->removed = false;
	l->passes = 0;
	w->n++;
	return 0;
}

/* The next entry of the deepest directory, "." and ".." skipped; NULL at its end (*failed set
 * when reading failed). */
static struct dirent *walk_next(struct walk *w, bool *failed)
{
	struct dirent *e;

	do {
		errno = 0;
		e = readdir(w->lv[w->n - 1].dir);
	} while (e != NULL && (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0));
	*failed = e == NULL && errno != 0;
	return e;
}

#define ENTRY_GONE 0  /* removed meanwhile: nothing to do */
#define ENTRY_OPEN 1
#define ENTRY_MOUNT 2 /* a mount point or another filesystem, left alone (mount_ok only) */

/* Open one entry of the deepest directory as itself and fstat it: ENTRY_*, or -1 with err. */
static int entry_open(struct walk *w, const char *name, bool mount_ok, int *fd, struct stat *st, struct sb_err *err)
{
	*fd = open_beneath(dirfd(w->lv[w->n - 1].dir), name, O_PATH);
	if (*fd < 0 && errno == ENOENT)
		return ENTRY_GONE;
	if (*fd < 0 && errno == EXDEV && mount_ok)
		return ENTRY_MOUNT;
	if (*fd < 0 && errno == EXDEV)
		return sb_fail(err, EXDEV, "%s is a mount point: not crossed", walk_where(w, name));
	if (*fd < 0)
		return sb_fail_errno(err, "opening %s", walk_where(w, name));
	if (fstat(*fd, st) < 0) {
		sb_fail_errno(err, "inspecting %s", walk_where(w, name));
		close(*fd);
		return -1;
	}
	/* RESOLVE_NO_XDEV already refuses a crossing; a second filesystem on the same mount (a btrfs
	 * subvolume) is not walked either. */
	if (st->st_dev != w->dev) {
		close(*fd);
		return mount_ok ? ENTRY_MOUNT : sb_fail(err, EXDEV, "%s is on another filesystem: not crossed",
							 walk_where(w, name));
	}
	return ENTRY_OPEN;
}

/* ---------------------------------------------------------------- chown */

/* One object, through its own descriptor. A non-directory with a second name is left alone: that
 * name may lie outside the tree (a hard link a command made, where fs.protected_hardlinks lets
 * it), and handing the object over would hand over that file too. git makes no hard links in
 * what a sandbox writes (the base clone is --no-local). */
static int chown_one(int fd, const struct stat *st, uid_t uid, gid_t gid, struct fstree_report *rep)
{
	rep->entries++;
	if (rep->visit != NULL)
		rep->visit(rep->visit_arg, st);
	if (st->st_uid == uid && st->st_gid == gid)
		return 0;
	if (!S_ISDIR(st->st_mode) && st->st_nlink > 1) {
		rep->hardlinked++;
		return 0;
	}
	if (fchownat(fd, "", uid, gid, AT_EMPTY_PATH) < 0)
		return -1;
	rep->changed++;
	return 0;
}

static int chown_step(struct walk *w, uid_t uid, gid_t gid, struct fstree_report *rep, struct sb_err *err)
{
	bool failed;
	struct dirent *e = walk_next(w, &failed);
	struct stat st;
	int fd, rc;

	if (e == NULL && failed)
		return sb_fail_errno(err, "reading the directory %s", walk_where(w, ""));
	if (e == NULL) {
		closedir(w->lv[--w->n].dir);
		return 0;
	}
	rc = entry_open(w, e->d_name, true, &fd, &st, err);
	if (rc == ENTRY_MOUNT)
		rep->mounts++;
	if (rc != ENTRY_OPEN)
		return rc < 0 ? -1 : 0;
	if (chown_one(fd, &st, uid, gid, rep) < 0)
		rc = sb_fail_errno(err, "changing the owner of %s", walk_where(w, e->d_name));
	else if (S_ISDIR(st.st_mode))
		rc = walk_push(w, fd, e->d_name, err);
	else
		rc = 0;
	close(fd);
	return rc;
}

int fstree_chown_beneath(int dirfd, uid_t uid, gid_t gid, struct fstree_report *report, struct sb_err *err)
{
	struct fstree_report none = { 0 };
	struct fstree_report *rep = report ? report : &none;
	struct walk *w;
	struct stat st;
	int rc;

	if (fstat(dirfd, &st) < 0)
		return sb_fail_errno(err, "inspecting the start of a walk");
	if (!S_ISDIR(st.st_mode))
		return sb_fail(err, ENOTDIR, "a chown walk starts at a directory");
	w = walk_new(st.st_dev, -1, err);
	if (w == NULL)
		return -1;
	rc = chown_one(dirfd, &st, uid, gid, rep) < 0 ? sb_fail_errno(err, "changing the owner of the start directory")
						      : walk_push(w, dirfd, "", err);
	while (rc == 0 && w->n > 0)
		rc = chown_step(w, uid, gid, rep, err);
	walk_free(w);
	return rc;
}

/* ---------------------------------------------------------------- removal */

/* A directory of our own that we may not list or empty (the sealed credentials snapshot is 0500;
 * a command may chmod its own 000) is opened up first. Through /proc/self/fd: the magic link
 * names exactly the inode fd holds (fchmod refuses an O_PATH descriptor). Root needs none of it. */
static int dir_open_up(struct walk *w, int fd, const struct stat *st, const char *name, struct sb_err *err)
{
	char proc[64];

	if ((st->st_mode & 0700) == 0700 || st->st_uid != geteuid() || geteuid() == 0)
		return 0;
	snprintf(proc, sizeof proc, "/proc/self/fd/%d", fd);
	if (chmod(proc, (st->st_mode & 07777) | 0700) < 0)
		return sb_fail_errno(err, "making %s removable", walk_where(w, name));
	return 0;
}

/* The deepest directory is empty: remove it by its name in the held level above. A name that
 * meanwhile leads elsewhere fails (ENOTDIR, ENOTEMPTY): the tree changed under the removal. */
static int remove_pop(struct walk *w, struct sb_err *err)
{
	char name[NAME_MAX + 1];
	int parent;

	strcpy(name, w->lv[w->n - 1].name);
	closedir(w->lv[--w->n].dir);
	parent = w->n > 0 ? dirfd(w->lv[w->n - 1].dir) : w->base;
	if (unlinkat(parent, name, AT_REMOVEDIR) < 0 && errno != ENOENT)
		return sb_fail_errno(err, "removing the directory %s", walk_where(w, name));
	return 0;
}

static void removal_seen(struct fstree_report *rep, const struct stat *st)
{
	rep->entries++;
	if (rep->visit != NULL)
		rep->visit(rep->visit_arg, st);
}

static int remove_step(struct walk *w, struct fstree_report *rep, struct sb_err *err)
{
	struct level *top = &w->lv[w->n - 1];
	bool failed;
	struct dirent *e = walk_next(w, &failed);
	struct stat st;
	int fd, rc;

	if (e == NULL && failed)
		return sb_fail_errno(err, "reading the directory %s", walk_where(w, ""));
	if (e == NULL && top->removed && top->passes < REMOVE_PASSES) {
		rewinddir(top->dir);
		top->removed = false;
		top->passes++;
		return 0;
	}
	if (e == NULL)
		return remove_pop(w, err);
	rc = entry_open(w, e->d_name, false, &fd, &st, err);
	if (rc != ENTRY_OPEN)
		return rc < 0 ? -1 : 0;
	removal_seen(rep, &st);
	top->removed = true;
	if (S_ISDIR(st.st_mode)) {
		rc = dir_open_up(w, fd, &st, e->d_name, err);
		if (rc == 0)
			rc = walk_push(w, fd, e->d_name, err);
		close(fd);
		return rc;
	}
	close(fd);
	/* Not a directory when opened; if it is one now, unlinkat refuses (EISDIR). */
	if (unlinkat(dirfd(top->dir), e->d_name, 0) < 0 && errno != ENOENT)
		return sb_fail_errno(err, "removing %s", walk_where(w, e->d_name));
	return 0;
}

static bool name_is_component(const char *name)
{
	return name[0] != '\0' && strchr(name, '/') == NULL && strcmp(name, ".") != 0 && strcmp(name, "..") != 0;
}

int fstree_remove_beneath(int parent_fd, const char *name, struct fstree_report *report, struct sb_err *err)
{
	struct fstree_report none = { 0 };
	struct fstree_report *rep = report ? report : &none;
	struct walk *w;
	struct stat st;
	int fd, rc;

	if (!name_is_component(name))
		return sb_invalid(err, "removing '%s': not a single name", name);
	fd = open_beneath(parent_fd, name, O_PATH);
	if (fd < 0 && errno == ENOENT)
		return 0;
	if (fd < 0)
		return sb_fail_errno(err, "opening %s to remove it%s", name, errno == EXDEV ? " (a mount point)" : "");
	if (fstat(fd, &st) < 0) {
		sb_fail_errno(err, "inspecting %s", name);
		close(fd);
		return -1;
	}
	removal_seen(rep, &st);
	if (!S_ISDIR(st.st_mode)) {
		close(fd);
		/* Not a directory when opened; if it is one now, unlinkat refuses (EISDIR). */
		return unlinkat(parent_fd, name, 0) < 0 && errno != ENOENT ? sb_fail_errno(err, "removing %s", name) : 0;
	}
	w = walk_new(st.st_dev, parent_fd, err);
	rc = w == NULL ? -1 : dir_open_up(w, fd, &st, name, err);
	if (rc == 0)
		rc = walk_push(w, fd, name, err);
	close(fd);
	while (rc == 0 && w->n > 0)
		rc = remove_step(w, rep, err);
	if (w != NULL)
		walk_free(w);
	return rc;
}

int fstree_remove_path(const char *path, struct sb_err *err)
{
	char parent[PATH_MAX];
	const char *slash = strrchr(path, '/');
	size_t plen;
	int pfd, rc;

	if (path[0] != '/' || slash == NULL || !name_is_component(slash + 1))
		return sb_invalid(err, "removing %s: give an absolute path that ends in a name", path);
	plen = slash == path ? 1 : (size_t)(slash - path);
	if (plen >= sizeof parent)
		return sb_fail(err, ENAMETOOLONG, "removing %s: path too long", path);
	memcpy(parent, path, plen);
	parent[plen] = '\0';
	pfd = fstree_open_dir(AT_FDCWD, parent, err);
	if (pfd < 0)
		return -1;
	rc = fstree_remove_beneath(pfd, slash + 1, NULL, err);
	close(pfd);
	if (rc < 0)
		sb_err_prefix(err, "removing %s", path);
	return rc;
}
