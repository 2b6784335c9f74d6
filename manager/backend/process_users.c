/* The process backend's /etc/passwd and /etc/group for one sandbox (process.h): the host's entries,
 * and an entry for the sandbox's own uid and gid where the host has none.
 *
 * Why: the sandbox's /etc holds the host's user database (process_root.c), but a root manager's
 * sandboxes run as ids of its sandbox-ids range, which no host user has (identity_ids.c checks that at
 * every start). A command's every lookup of its own uid then failed: `whoami` and `id -un` said
 * "cannot find name for user ID N", Python's getpass.getuser() raised, git named the user "unknown",
 * and each miss went on through every NSS module of the host's nsswitch.conf (Debian's: a dlopen of
 * libnss_systemd.so in each such process). With the entry, the lookup ends in `files`, as on a host.
 *
 * The added entries are named "sandbox" and put first, so that inside both directions agree: the
 * uid's name is "sandbox", and "sandbox" names the uid, even on a host with a user of that name (its
 * line is still there, after ours). A host entry for the id wins: an unprivileged manager's
 * sandboxes run as its own user, whose name stays theirs. Nothing here is secret: the files hold the
 * host's world-readable lines, and are written afresh by every start. */
#include "process.h"

#include "fdio.h"
#include "pathfmt.h"

#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <pwd.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#define USERS_HOST_MAX (4u << 20) /* bytes of the host's passwd or group: more is refused, not cut */
#define USERS_NAME "sandbox"

/* The host's file whole, or "" when others may not read it (a root manager never hands on what the
 * host keeps from its users: process_root.c). Bounded before the buffer is allocated. */
static int host_read(const char *path, char **text, size_t *len, struct sb_err *err)
{
	cleanup_close int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK); /* never wait on a FIFO */
	struct stat st;

	*text = NULL;
	*len = 0;
	if (fd < 0 && (errno == ENOENT || errno == EACCES))
		return 0;
	if (fd < 0 || fstat(fd, &st) < 0)
		return sb_fail_errno(err, "reading %s", path);
	if (!S_ISREG(st.st_mode) || !(st.st_mode & S_IROTH))
		return 0;
	if ((uint64_t)st.st_size > USERS_HOST_MAX)
		return sb_fail(err, EFBIG, "%s is %lld bytes, more than the %u a sandbox's copy may take", path,
			       (long long)st.st_size, USERS_HOST_MAX);
	*text = malloc((size_t)st.st_size + 1);
	if (*text == NULL)
		return sb_fail(err, ENOMEM, "reading %s", path);
	/* Exactly the size just checked: a file that shrank meanwhile is an error, never a cut line. */
	errno = 0;
	if (fd_read_exact(fd, *text, (size_t)st.st_size) < 0) {
		int saved = errno ? errno : EIO;

		free(*text);
		*text = NULL;
		return sb_fail(err, saved, "reading %s", path);
	}
	*len = (size_t)st.st_size;
	(*text)[*len] = '\0';
	return 0;
}

/* Does the text (a passwd file when group is false, else a group file) have an entry for id?
 * glibc's own parser reads it, as NSS's `files` module would inside. */
static bool users_has_id(const char *text, size_t len, bool group, unsigned id)
{
	FILE *f = len > 0 ? fmemopen((void *)text, len, "r") : NULL;
	char buf[16384];
	bool found = false;

	if (f == NULL)
		return false;
	for (;;) {
		struct passwd pw, *pwp = NULL;
		struct group gr, *grp = NULL;

		if (!group && (fgetpwent_r(f, &pw, buf, sizeof buf, &pwp) != 0 || pwp == NULL))
			break;
		if (group && (fgetgrent_r(f, &gr, buf, sizeof buf, &grp) != 0 || grp == NULL))
			break;
		if ((!group && pw.pw_uid == id) || (group && gr.gr_gid == id)) {
			found = true;
			break;
		}
	}
	fclose(f);
	return found;
}

int users_text(const char *host, size_t len, const char *line, bool group, unsigned id, char **out, size_t *out_len,
	       struct sb_err *err)
{
	bool add = !users_has_id(host, len, group, id);
	size_t line_len = add ? strlen(line) : 0;
	bool nl = len > 0 && host[len - 1] != '\n';

	*out = malloc(line_len + len + 2);
	if (*out == NULL)
		return sb_fail(err, ENOMEM, "writing the sandbox's %s", group ? "group" : "passwd");
	memcpy(*out, line, line_len);
	if (len > 0)
		memcpy(*out + line_len, host, len);
	*out_len = line_len + len;
	if (nl)
		(*out)[(*out_len)++] = '\n';
	(*out)[*out_len] = '\0';
	return 0;
}

/* name in dirfd (dir: its path, for messages), 0644 whatever the umask (the sandbox's uid reads it),
 * replaced whole by a rename: a reader never sees half a file. No fsync: every start writes it
 * afresh. */
static int users_file_put(int dirfd, const char *dir, const char *name, const char *text, size_t len,
			  struct sb_err *err)
{
	char tmp[32];
	cleanup_close int fd = -1;
	int saved;

	snprintf(tmp, sizeof tmp, ".%s.new", name);
	/* A crash's leftover would make the exclusive create fail at every start. */
	if (unlinkat(dirfd, tmp, 0) < 0 && errno != ENOENT)
		return sb_fail_errno(err, "removing the stale %s/%s", dir, tmp);
	fd = fd_file_write_new(dirfd, dir, tmp, 0644, text, len, err);
	if (fd < 0)
		return -1;
	if (fchmod(fd, 0644) < 0 || renameat(dirfd, tmp, dirfd, name) < 0) {
		saved = errno;
		unlinkat(dirfd, tmp, 0);
		return sb_fail(err, saved, "writing %s/%s", dir, name);
	}
	return 0;
}

static int users_one(int dirfd, const char *dir, const char *host_etc, const char *name, const char *line,
		     bool group, unsigned id, struct sb_err *err)
{
	cleanup_free char *host = NULL, *text = NULL;
	char host_path[PATH_MAX];
	size_t host_len, len;

	if (path_fmt(host_path, sizeof host_path, err, "%s/%s", host_etc, name) < 0 ||
	    host_read(host_path, &host, &host_len, err) < 0 ||
	    users_text(host, host_len, line, group, id, &text, &len, err) < 0)
		return -1;
	return users_file_put(dirfd, dir, name, text, len, err);
}

int users_files_write(const char *dir, const char *host_etc, uid_t uid, gid_t gid, const char *home,
		      struct sb_err *err)
{
	cleanup_close int dirfd = -1;
	char pw_line[PATH_MAX + 96], gr_line[64];
	/* The shell the agent runs commands with (serve.c): bash where the host has it. */
	const char *shell = access("/bin/bash", X_OK) == 0 ? "/bin/bash" : "/bin/sh";

	/* A home with ':' or a newline would make another line of the file, not this one. */
	if (home == NULL || strpbrk(home, ":\n") != NULL)
		return sb_invalid(err, "the sandbox's home '%s' cannot go in a passwd line", home ? home : "(null)");
	if (path_fmt(pw_line, sizeof pw_line, err, USERS_NAME ":x:%u:%u:" USERS_NAME ":%s:%s\n", (unsigned)uid,
		     (unsigned)gid, home, shell) < 0)
		return -1;
	snprintf(gr_line, sizeof gr_line, USERS_NAME ":x:%u:\n", (unsigned)gid);
	if (mkdir(dir, 0755) < 0 && errno != EEXIST)
		return sb_fail_errno(err, "creating %s", dir);
	dirfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW);
	if (dirfd < 0)
		return sb_fail_errno(err, "opening %s", dir);
	if (users_one(dirfd, dir, host_etc, "passwd", pw_line, false, (unsigned)uid, err) < 0 ||
	    users_one(dirfd, dir, host_etc, "group", gr_line, true, (unsigned)gid, err) < 0) {
		sb_err_prefix(err, "the sandbox's user database");
		return -1;
	}
	return 0;
}
