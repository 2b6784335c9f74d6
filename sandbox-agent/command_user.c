/* The command's user has a name (`serve --user-home`, which the Kubernetes backend gives its pods).
 *
 * Why: a pod runs as the identity's uid over an image whose /etc/passwd names its own users only.
 * The command then had no name: `whoami` failed, Python's getpass.getuser() raised, git named the
 * user "unknown", and every lookup went through each NSS module of the image before it failed. The
 * process backend's manager writes these files itself (process_users.c), from the host's; here only
 * the agent sees the image's files, so the agent writes the copies, once, at its start.
 *
 * Why this gives the command nothing more: the copies hold the view's own world-readable lines and
 * one line for ids the command already runs as (common/users_db.h), in the agent's state
 * directory, which every command's view hides; init binds each over the view's file read-only, from
 * the very file the agent wrote (identity compared, as hide_dir() does), so a command can neither
 * change nor swap them. */
#include "command_user.h"

#include <errno.h>
#include <fcntl.h>
#include <sys/stat.h>

#include "log.h"
#include "pathfmt.h"
#include "users_db.h"

/* One copy that gained an entry, bound over target: only where the view has target as a plain
 * file. Init makes no mount point in a read-only root, and follows no link to one: the command
 * keeps the view's file (or none) as it is, and the agent's log says why. */
static int user_file_add(struct boundary *b, const struct privdir *dir, const char *name, const char *target,
			 struct sb_err *err)
{
	struct user_file *u = &b->users[b->n_users];
	struct stat st;

	if (fstatat(AT_FDCWD, target, &st, AT_SYMLINK_NOFOLLOW) < 0 || !S_ISREG(st.st_mode)) {
		sb_warn("--user-home: %s is not a plain file in this view: commands see it as it is", target);
		return 0;
	}
	if (fstatat(dir->fd, name, &st, AT_SYMLINK_NOFOLLOW) < 0)
		return sb_fail_errno(err, "reading back %s/%s", dir->path, name);
	if (path_fmt(u->source, sizeof u->source, err, "%s/%s", dir->path, name) < 0)
		return -1;
	u->target = target;
	u->dev = st.st_dev;
	u->ino = st.st_ino;
	b->n_users++;
	return 0;
}

int command_user_prepare(struct boundary *b, const struct privdir *state, const char *home, struct sb_err *err)
{
	struct privdir dir;
	unsigned added = 0;
	int rc = -1;

	b->n_users = 0;
	if (privdir_open_at(&dir, state, "users", true, 077, err) < 0)
		return -1;
	if (users_db_write(dir.fd, dir.path, "/etc", b->command_uid, b->command_gid, home, b->shell, &added, err) < 0)
		goto out;
	if ((added & USERS_DB_PASSWD) && user_file_add(b, &dir, "passwd", "/etc/passwd", err) < 0)
		goto out;
	if ((added & USERS_DB_GROUP) && user_file_add(b, &dir, "group", "/etc/group", err) < 0)
		goto out;
	rc = 0;
out:
	privdir_close(&dir);
	if (rc < 0)
		sb_err_prefix(err, "--user-home");
	return rc;
}
