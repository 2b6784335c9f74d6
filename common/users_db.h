/* A sandbox's /etc/passwd and /etc/group: the files of the view it runs in, with an entry for the
 * command's own uid and gid where they have none. Both programs make them: the manager for the
 * process backend's sandboxes (process_users.c), the agent for a view it does not build, a
 * Kubernetes pod's (`serve --user-home`, sandbox-agent/command_user.c).
 *
 * Why: a command whose uid has no entry fails every lookup of its own user (`whoami`, `id -un`,
 * Python's getpass.getuser(), git's author) and pays for each miss in every NSS module. The added
 * entries are named "sandbox" and put first, so that inside both directions agree even where a user
 * of that name exists (its line is still there, after ours); an existing entry for the id wins and
 * nothing is added. Nothing here is secret: only lines others may already read. */
#ifndef SB_USERS_DB_H
#define SB_USERS_DB_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

#include "error.h"

#define USERS_DB_HOST_MAX (4u << 20) /* bytes of a source passwd or group: more is refused, not cut */
#define USERS_DB_NAME "sandbox"

/* Which files gained an entry (users_db_write's *added). */
#define USERS_DB_PASSWD 1u
#define USERS_DB_GROUP 2u

/* Into the directory dirfd (dir: its path, for messages): `passwd` and `group`, those of etc (a
 * directory path, "/etc"; read only when others may read them, at most USERS_DB_HOST_MAX bytes
 * each), with an entry "sandbox" for uid (home, shell) and one for gid put first where etc's file
 * has none. Each is 0644 and replaced whole by a rename. *added (may be NULL): the USERS_DB_* bits
 * of the files that gained an entry. 0, or -1 with err. */
int users_db_write(int dirfd, const char *dir, const char *etc, uid_t uid, gid_t gid, const char *home,
		   const char *shell, unsigned *added, struct sb_err *err);

/* One file's text: line first, unless the source text (len bytes; a group file when group is true)
 * has an entry for id, which *added then says (may be NULL); then the source text, ending in a
 * newline. *out is the caller's to free. */
int users_db_text(const char *src, size_t len, const char *line, bool group, unsigned id, char **out,
		  size_t *out_len, bool *added, struct sb_err *err);

#endif
