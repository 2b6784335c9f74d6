/* The process backend's /etc/passwd and /etc/group for one sandbox (process.h): the host's entries,
 * and an entry for the sandbox's own uid and gid where the host has none (common/users_db.h says
 * why and how).
 *
 * A root manager's sandboxes run as ids of its sandbox-ids range, which no host user has
 * (identity_ids.c checks that at every start); an unprivileged manager's sandboxes run as its own
 * user, whose entry the host has and whose name stays theirs. */
#include "process.h"

#include "cleanup.h"
#include "users_db.h"

#include <errno.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

int users_files_write(const char *dir, const char *host_etc, uid_t uid, gid_t gid, const char *home,
		      struct sb_err *err)
{
	cleanup_close int dirfd = -1;
	/* The shell the agent runs commands with (boundary_prepare.c): bash where the host has it. */
	const char *shell = access("/bin/bash", X_OK) == 0 ? "/bin/bash" : "/bin/sh";

	if (mkdir(dir, 0755) < 0 && errno != EEXIST)
		return sb_fail_errno(err, "creating %s", dir);
	dirfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW);
	if (dirfd < 0)
		return sb_fail_errno(err, "opening %s", dir);
	return users_db_write(dirfd, dir, host_etc, uid, gid, home, shell, NULL, err);
}
