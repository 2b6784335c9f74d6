/* The refusal of symbolic links in a base clone's refs/, logs/, packed-refs.d/ and a worktree's
 * metadata, by a walk from held directory descriptors. Must never list or open anything through a
 * link, nor cross a mount. */
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
#include "workspace_internal.h"

/* The walk of tree_symlinks_refuse: where (the path of dirfd, for messages) grows by one name
 * per level; found gets the first link's path. Every directory is opened by one name beneath its
 * held parent with no link allowed (openat2), so a directory a command swaps for a link during
 * the walk is itself reported, never followed; a mount is not crossed. Returns 1 when a link was
 * found, 0 when none, -1 on error. */
static int symlinks_walk(int dirfd, char *where, size_t size, unsigned depth, struct sb_err *err)
{
	size_t base = strlen(where);
	cleanup_close int listfd = openat(dirfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	DIR *d = listfd >= 0 ? fdopendir(listfd) : NULL;
	struct dirent *de;
	int rc = 0;

	if (d == NULL)
		return sb_fail_errno(err, "listing %s", where);
	listfd = -1; /* closedir closes it */
	if (depth >= FSTREE_DEPTH_MAX) {
		closedir(d);
		return sb_fail(err, ELOOP, "%s is more than %d directories deep", where, FSTREE_DEPTH_MAX);
	}
	while (rc == 0 && (errno = 0, de = readdir(d)) != NULL) {
		/* No O_NOFOLLOW: RESOLVE_NO_SYMLINKS then answers a final link with ELOOP, told apart
		 * from a directory made a file (ENOTDIR). */
		struct open_how how = { .flags = O_RDONLY | O_DIRECTORY | O_CLOEXEC,
					.resolve = RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS |
						   RESOLVE_NO_XDEV };
		struct stat st;
		int sub;

		if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
			continue;
		if (base + 1 + strlen(de->d_name) >= size) {
			rc = sb_fail(err, ENAMETOOLONG, "checking %s for symbolic links: a name below it is too long",
				     where);
			break;
		}
		where[base] = '/';
		strcpy(where + base + 1, de->d_name);
		if (fstatat(dirfd, de->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0) {
			rc = errno == ENOENT ? 0 : sb_fail_errno(err, "inspecting %s", where);
		} else if (S_ISLNK(st.st_mode)) {
			rc = 1;
		} else if (S_ISDIR(st.st_mode)) {
			sub = (int)syscall(SYS_openat2, dirfd, de->d_name, &how, sizeof how);
			if (sub < 0)
				/* ELOOP: made a link since the fstatat; EXDEV: a mount point, not crossed;
				 * ENOENT, ENOTDIR: gone or made a file, nothing beneath to check. */
				rc = errno == ELOOP ? 1 : errno == ENOENT || errno == ENOTDIR || errno == EXDEV ? 0 :
				     sb_fail_errno(err, "opening %s", where);
			else {
				rc = symlinks_walk(sub, where, size, depth + 1, err);
				close(sub);
			}
		}
		if (rc == 0)
			where[base] = '\0';
	}
	if (rc == 0 && errno != 0)
		rc = sb_fail_errno(err, "listing %s", where);
	closedir(d);
	return rc;
}

/* git never makes a symbolic link in refs/, logs/, packed-refs.d/ or a worktree's metadata, but a
 * command can; trusted git would follow it (gitrun's Landlock confinement keeps its writes inside
 * the repository and its reads inside the repository and the system's files; this makes the
 * refusal early and explicit). objects/ is not walked: it can be large, and git neither writes
 * through an existing object nor trusts one it has not hashed. The walk is by descriptor from a
 * start opened with no link on its path (the start's parent, the common git dir, is read-only in
 * sandboxes); still advisory, since a link can be planted right after it. */
static int tree_symlinks_refuse(const char *path, struct sb_err *err)
{
	char where[PATH_MAX];
	int fd, rc;

	if (strlen(path) >= sizeof where)
		return sb_fail(err, ENAMETOOLONG, "checking %s for symbolic links: the path is too long", path);
	strcpy(where, path);
	fd = fstree_open_dir(AT_FDCWD, path, err);
	if (fd < 0 && err->errnum == ENOENT)
		return 0;
	if (fd < 0 && err->errnum != ELOOP)
		return -1;
	rc = fd < 0 ? 1 : symlinks_walk(fd, where, sizeof where, 0, err);
	if (fd >= 0)
		close(fd);
	if (rc == 1)
		return sb_fail(err, 0, "repository refused: %s is a symbolic link, or has one on its path, which git "
			       "never makes there and trusted git must not follow; remove it", where);
	if (rc < 0)
		sb_err_prefix(err, "checking %s for symbolic links", path);
	return rc;
}

int symlinks_refuse(const struct workspace *ws, struct sb_err *err)
{
	static const char *const parts[] = { "refs", "logs", PACKED_DIR, NULL };

	for (size_t i = 0; parts[i] != NULL; i++) {
		cleanup_free char *path = NULL;

		if (path_alloc_fmt(&path, err, "%s/%s", ws->repo_dir, parts[i]) != 0 ||
		    tree_symlinks_refuse(path, err) != 0)
			return -1;
	}
	/* Not yet there while a workspace is being created. */
	if (ws->worktree_git_dir != NULL)
		return tree_symlinks_refuse(ws->worktree_git_dir, err);
	return 0;
}
