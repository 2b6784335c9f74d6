/* The scratch folder of every worktree (workspace.h WORKSPACE_SCRATCH): made, made again when a
 * command removed it, and ignored through the repository's info/exclude. Must never follow a link
 * a command left in its place. */
#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cleanup.h"
#include "workspace_internal.h"

/* Add the scratch pattern to the repository's info/exclude once (the file is shared by every
 * worktree of the repository, and read-only inside sandboxes). */
int exclude_ensure(const struct workspace *ws, struct sb_err *err)
{
	static const char line[] = "# infra-sandbox: the per-session scratch folder (TMPDIR)\n"
				   WORKSPACE_SCRATCH_PATTERN "\n";
	cleanup_free char *path = NULL;
	cleanup_close int fd = -1;
	char text[64 * 1024];
	bool nonempty;
	size_t len;

	if (path_alloc_fmt(&path, err, "%s/info/exclude", ws->repo_dir) != 0)
		return -1;
	if (file_read_small(path, text, sizeof text, err) != 0) {
		if (err->errnum != ENOENT)
			return -1;
		text[0] = '\0';
	}
	nonempty = text[0] != '\0';
	for (char *cur = text, *next; cur != NULL; cur = next) {
		next = strchr(cur, '\n');
		if (next != NULL)
			*next++ = '\0';
		if (strcmp(cur, WORKSPACE_SCRATCH_PATTERN) == 0)
			return 0;
	}
	fd = open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0644);
	if (fd < 0)
		return sb_fail_errno(err, "opening %s", path);
	len = strlen(line);
	/* file_read_small dropped the trailing newline, so a non-empty file gets one first. */
	if ((nonempty && write(fd, "\n", 1) != 1) || write(fd, line, len) != (ssize_t)len)
		return sb_fail_errno(err, "writing %s", path);
	return 0;
}

int scratch_ensure(const struct workspace *ws, struct sb_err *err)
{
	struct stat st;

	if (mkdir(ws->scratch, 0700) == 0)
		return 0;
	if (errno != EEXIST)
		return sb_fail_errno(err, "creating the scratch folder %s", ws->scratch);
	if (lstat(ws->scratch, &st) != 0)
		return sb_fail_errno(err, "inspecting %s", ws->scratch);
	if (!S_ISDIR(st.st_mode))
		return sb_fail(err, ENOTDIR, "scratch folder %s is not a directory; remove it so it can be "
			       "recreated", ws->scratch);
	return 0;
}
