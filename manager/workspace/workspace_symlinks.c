/* The sweep of what git never makes in a base clone's refs/, logs/, packed-refs.d/ and the worktrees'
 * metadata: a symbolic link, FIFO, socket or device node is removed by descriptor and logged with the
 * session that planted it, never a refusal of the identity's other sessions. Must never list, open or
 * remove anything through a link, nor cross a mount. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/openat2.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "cleanup.h"
#include "fstree.h"
#include "log.h"
#include "workspace_internal.h"

static const char *entry_kind(mode_t mode)
{
	if (S_ISLNK(mode))
		return "a symbolic link";
	if (S_ISFIFO(mode))
		return "a FIFO";
	if (S_ISSOCK(mode))
		return "a socket";
	if (S_ISCHR(mode) || S_ISBLK(mode))
		return "a device node";
	return "an entry of unknown type";
}

/* Remove one planted entry, by its name beneath the held dirfd, and log it with who planted it.
 * A command may swap the name meanwhile: a directory put there is not removed (EISDIR, left to the
 * next sweep), a file is removed as the entry it replaced would have been, which the command could
 * have removed itself; nothing outside the directory is reached. Returns 0, or -1 with err. */
static int planted_remove(int dirfd, const char *name, const char *where, mode_t mode, const char *who,
			  struct sb_err *err)
{
	char target[256] = "", shown_target[256], shown[PATH_MAX];
	ssize_t n = S_ISLNK(mode) ? readlinkat(dirfd, name, target, sizeof target - 1) : -1;

	if (n > 0)
		target[n] = '\0';
	if (unlinkat(dirfd, name, 0) != 0) {
		if (errno == ENOENT || errno == EISDIR)
			return 0;
		return sb_fail_errno(err, "removing %s, %s git never makes there", where, entry_kind(mode));
	}
	printable(shown, sizeof shown, where);
	printable(shown_target, sizeof shown_target, target);
	sb_warn("workspace: removed %s at %s%s%s, planted by %s: git never makes one there, and it must not "
		"decide the identity's other sessions", entry_kind(mode), shown, n > 0 ? " -> " : "",
		n > 0 ? shown_target : "", who);
	return 0;
}

/* One entry of a directory being swept: descend into a directory, remove what git never makes, leave
 * regular files (git's). d_type spares a stat per ref on the call's path; an entry changed after
 * the listing is the next sweep's (gitrun's Landlock confinement holds meanwhile). */
static int sweep_walk(int fd, char *where, size_t size, unsigned depth, const char *who, struct sb_err *err);

static int sweep_entry(int dirfd, const struct dirent *de, char *where, size_t size, unsigned depth,
		       const char *who, struct sb_err *err)
{
	/* No O_NOFOLLOW: RESOLVE_NO_SYMLINKS then answers a final link with ELOOP, told apart from a
	 * directory made a file (ENOTDIR). */
	struct open_how how = { .flags = O_RDONLY | O_DIRECTORY | O_CLOEXEC,
				.resolve = RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS |
					   RESOLVE_NO_XDEV };
	struct stat st;
	int sub;

	if (de->d_type == DT_REG)
		return 0;
	if (de->d_type != DT_DIR) {
		if (fstatat(dirfd, de->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0)
			return errno == ENOENT ? 0 : sb_fail_errno(err, "inspecting %s", where);
		if (S_ISREG(st.st_mode))
			return 0;
		if (!S_ISDIR(st.st_mode))
			return planted_remove(dirfd, de->d_name, where, st.st_mode, who, err);
	}
	sub = (int)syscall(SYS_openat2, dirfd, de->d_name, &how, sizeof how);
	/* ELOOP: made a link since the listing; EXDEV: a mount point, not crossed; ENOENT, ENOTDIR:
	 * gone or made a file, nothing beneath to sweep. */
	if (sub < 0 && errno == ELOOP)
		return planted_remove(dirfd, de->d_name, where, S_IFLNK, who, err);
	if (sub < 0)
		return errno == ENOENT || errno == ENOTDIR || errno == EXDEV ? 0 : sb_fail_errno(err, "opening %s", where);
	return sweep_walk(sub, where, size, depth + 1, who, err);
}

/* The walk of the directory fd (taken: closed here): where (its path, for messages) grows by one
 * name per level. Every directory is opened by one name beneath its held parent with no link allowed
 * (openat2), so a directory a command swaps for a link during the walk is removed as a link, never
 * followed; a mount is not crossed. Returns 0, or -1 with err. */
static int sweep_walk(int fd, char *where, size_t size, unsigned depth, const char *who, struct sb_err *err)
{
	size_t base = strlen(where);
	DIR *d = fdopendir(fd);
	struct dirent *de;
	int rc = 0;

	if (d == NULL) {
		rc = sb_fail_errno(err, "listing %s", where);
		close(fd);
		return rc;
	}
	if (depth >= FSTREE_DEPTH_MAX) {
		closedir(d);
		return sb_fail(err, ELOOP, "%s is more than %d directories deep", where, FSTREE_DEPTH_MAX);
	}
	while (rc == 0 && (errno = 0, de = readdir(d)) != NULL) {
		if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
			continue;
		if (base + 1 + strlen(de->d_name) >= size) {
			rc = sb_fail(err, ENAMETOOLONG, "sweeping %s: a name below it is too long", where);
			break;
		}
		where[base] = '/';
		strcpy(where + base + 1, de->d_name);
		rc = sweep_entry(dirfd(d), de, where, size, depth, who, err);
		where[base] = '\0';
	}
	if (rc == 0 && errno != 0)
		rc = sb_fail_errno(err, "listing %s", where);
	closedir(d);
	return rc;
}

/* Sweep one tree. Its start is opened with no link on its path: the start's parent (the common git
 * dir, worktrees/) is read-only in sandboxes, so a start that is itself a link was made there by no
 * command; it is refused, not removed. A missing start is nothing to sweep. */
static int tree_sweep(const char *path, const char *who, struct sb_err *err)
{
	char where[PATH_MAX];
	int fd, rc;

	if (strlen(path) >= sizeof where)
		return sb_fail(err, ENAMETOOLONG, "sweeping %s: the path is too long", path);
	strcpy(where, path);
	fd = fstree_open_dir(AT_FDCWD, path, err);
	if (fd < 0 && err->errnum == ENOENT)
		return 0;
	if (fd < 0) {
		sb_err_prefix(err, "repository refused: %s cannot be opened as a directory with no symbolic link "
			      "on its path", path);
		return -1;
	}
	rc = sweep_walk(fd, where, sizeof where, 0, who, err);
	if (rc < 0)
		sb_err_prefix(err, "sweeping %s", path);
	return rc;
}

/* Each worktrees/<name>/ (or only the one named): its planter is the session whose worktree it is,
 * the only one whose sandbox can write it. */
static int worktrees_sweep(const char *repo_dir, const char *only, struct sb_err *err)
{
	cleanup_free char *dir = NULL;
	struct dirent *de;
	DIR *d;
	int rc = 0;

	if (path_alloc_fmt(&dir, err, "%s/worktrees", repo_dir) != 0)
		return -1;
	d = opendir(dir);
	if (d == NULL)
		return errno == ENOENT ? 0 : sb_fail_errno(err, "listing %s", dir);
	while (rc == 0 && (errno = 0, de = readdir(d)) != NULL) {
		cleanup_free char *path = NULL, *who = NULL;

		if (de->d_name[0] == '.' || (only != NULL && strcmp(de->d_name, only) != 0))
			continue;
		if (path_alloc_fmt(&path, err, "%s/%s", dir, de->d_name) != 0 ||
		    path_alloc_fmt(&who, err, "a command of session %s (its own worktree metadata)", de->d_name) != 0)
			rc = -1;
		else
			rc = tree_sweep(path, who, err);
	}
	if (rc == 0 && errno != 0)
		rc = sb_fail_errno(err, "listing %s", dir);
	closedir(d);
	return rc;
}

/* git never makes a symbolic link, FIFO, socket or device in refs/, logs/, packed-refs.d/ or a
 * worktree's metadata, but a command can, and every session of the identity shares the first three:
 * trusted git would follow a link (gitrun's Landlock keeps its reads and writes inside the
 * repository) or block on a FIFO until its timeout. So such an entry is removed, by descriptor, and
 * logged naming who; it never refuses a session. objects/ is not walked: it can be large, and git
 * neither writes through an existing object nor trusts one it has not hashed. */
int workspace_sweep(const char *repo_dir, const char *worktree_name, const char *who, struct sb_err *err)
{
	static const char *const parts[] = { "refs", "logs", PACKED_DIR, NULL };

	for (size_t i = 0; parts[i] != NULL; i++) {
		cleanup_free char *path = NULL;

		if (path_alloc_fmt(&path, err, "%s/%s", repo_dir, parts[i]) != 0 || tree_sweep(path, who, err) != 0)
			return -1;
	}
	return worktrees_sweep(repo_dir, worktree_name, err);
}
