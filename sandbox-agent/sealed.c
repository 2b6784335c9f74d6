/* The rule for what the agent reads from a read-only mount (see sealed.h).
 *
 * The own-uid rule (secret.c, privdir.c: owned by this uid, mode 0600 or 0700) protects three
 * things: nobody but root or this uid can have written the object, nobody but this uid can read
 * it, and commands never see it (the agent hides its directory: mounts.c hide_dir). A Secret
 * volume gives root-owned files of mode 0440 with the group of the pod's fsGroup (the agent's
 * gid), in a tmpfs the kubelet mounts read-only into the container. This rule keeps the same
 * three properties for such a file:
 *   - written by root or this uid only: the owner is root or this uid, no group or other write
 *     bit, and the mount is read-only (ST_RDONLY of the object's own mount), so that neither
 *     this uid (which commands share) nor anyone else changes it through the agent's view;
 *   - read by this uid and gid only: no bit for others, and group bits only when the group is
 *     this gid (the pod's fsGroup: no other uid of the pod has it as a group);
 *   - never seen by commands: unchanged, the agent hides the directory that holds it.
 * A directory is checked for the first property only (its names are not secret; the files are
 * checked one by one). The Secret's volume root is mode 3777 on the tmpfs, but the agent checks
 * the directory the key really lies in (the kubelet's ..<timestamp> directory, 2755 root), and
 * the root's links cannot be replaced by another uid (sticky). Anything on a writable mount
 * keeps the own-uid rule: this one does not apply there. */
#include "sealed.h"

#include <errno.h>
#include <sys/statvfs.h>
#include <unistd.h>

int sealed_check(int fd, const struct stat *st, const char *what, struct sb_err *err)
{
	struct statvfs vfs;
	uid_t uid = geteuid();
	gid_t gid = getegid();

	if (fstatvfs(fd, &vfs) < 0)
		return sb_fail_errno(err, "checking the mount of %s", what);
	if ((vfs.f_flag & ST_RDONLY) == 0)
		return sb_fail(err, EPERM, "%s is not this uid's (%u) and not on a read-only mount", what, (unsigned)uid);
	if (st->st_uid != 0 && st->st_uid != uid)
		return sb_fail(err, EPERM, "%s on a read-only mount belongs to uid %u, neither root nor this uid (%u)",
			       what, (unsigned)st->st_uid, (unsigned)uid);
	if ((st->st_mode & 022) != 0)
		return sb_fail(err, EPERM, "%s on a read-only mount is writable by group or others (mode %04o)", what,
			       (unsigned)(st->st_mode & 07777));
	if (S_ISDIR(st->st_mode))
		return 0;
	if (!S_ISREG(st->st_mode))
		return sb_fail(err, EPERM, "%s is not a regular file", what);
	if ((st->st_mode & 007) != 0 || ((st->st_mode & 070) != 0 && st->st_gid != gid))
		return sb_fail(err, EPERM, "%s on a read-only mount is readable by others than uid %u and gid %u "
			       "(mode %04o, group %u)", what, (unsigned)uid, (unsigned)gid, (unsigned)(st->st_mode & 07777),
			       (unsigned)st->st_gid);
	return 0;
}
