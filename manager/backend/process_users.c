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
	/* The file may change under us: take what one bounded read gives, never more than was sized. */
	for (ssize_t n; *len < (size_t)st.st_size; *len += (size_t)n) {
		n = read(fd, *text + *len, (size_t)st.st_size - *len);
		if (n < 0 && errno == EINTR) {
			n = 0;
			continue;
		}
		if (n < 0) {
			free(*text);
			*text = NULL;
			return sb_fail_errno(err, "reading %s", path);
		}
		if (n == 0)
			break;
	}
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

/* name in dirfd, 0644, replaced whole: a reader never sees half a file. */
static int users_file_put(int dirfd, const char *name, const char *text, size_t len, struct sb_err *err)
{
	char tmp[32];
	cleanup_close int fd = -1;
	size_t done = 0;

	snprintf(tmp, sizeof tmp, ".%s.new", name);
	fd = openat(dirfd, tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0644);
	if (fd < 0 || fchmod(fd, 0644) < 0)
		return sb_fail_errno(err, "writing the sandbox's %s", name);
	while (done < len) {
		ssize_t n = write(fd, text + done, len - done);

		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return sb_fail_errno(err, "writing the sandbox's %s", name);
		done += (size_t)n;
	}
	if (renameat(dirfd, tmp, dirfd, name) < 0)
		return sb_fail_errno(err, "writing the sandbox's %s", name);
	return 0;
}

static int users_one(int dirfd, const char *host_etc, const char *name, const char *line, bool group, unsigned id,
		     struct sb_err *err)
{
	cleanup_free char *host = NULL, *text = NULL;
	char host_path[PATH_MAX];
	size_t host_len, len;

	if (path_fmt(host_path, sizeof host_path, err, "%s/%s", host_etc, name) < 0 ||
	    host_read(host_path, &host, &host_len, err) < 0 ||
	    users_text(host, host_len, line, group, id, &text, &len, err) < 0)
		return -1;
	return users_file_put(dirfd, name, text, len, err);
}

int users_files_write(const char *dir, const char *host_etc, uid_t uid, gid_t gid, const char *home,
		      struct sb_err *err)
{
	cleanup_close int dirfd = -1;
	char pw_line[PATH_MAX + 96], gr_line[64];
	/* The shell the agent runs commands with (serve.c): bash where the host has it. */
	const char *shell = access("/bin/bash", X_OK) == 0 ? "/bin/bash" : "/bin/sh";

	/* A home or shell with ':' or a newline would make another line of the file, not this one. */
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
	if (users_one(dirfd, host_etc, "passwd", pw_line, false, (unsigned)uid, err) < 0 ||
	    users_one(dirfd, host_etc, "group", gr_line, true, (unsigned)gid, err) < 0) {
		sb_err_prefix(err, "in %s", dir);
		return -1;
	}
	return 0;
}
