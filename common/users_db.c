/* A sandbox's /etc/passwd and /etc/group (see users_db.h). */
#include "users_db.h"

#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <limits.h>
#include <pwd.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cleanup.h"
#include "fdio.h"
#include "pathfmt.h"

/* The source file whole, or "" when others may not read it (a root manager never hands on what the
 * host keeps from its users: process_root.c). Bounded before the buffer is allocated. */
static int source_read(const char *path, char **text, size_t *len, struct sb_err *err)
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
	if ((uint64_t)st.st_size > USERS_DB_HOST_MAX)
		return sb_fail(err, EFBIG, "%s is %lld bytes, more than the %u a sandbox's copy may take", path,
			       (long long)st.st_size, USERS_DB_HOST_MAX);
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

/* The id of the next entry of f, a passwd file (group false) or a group file; false at its end.
 * The C library's own parser reads it, as NSS's `files` module would inside. glibc's reentrant
 * one serves the manager, whose sandbox starts run on several threads; musl (the static agent's)
 * has only the one with a static buffer, which the agent calls once, at its start, on its main
 * thread, while the threads beside it (serve.c) read no user database. */
static bool entry_next(FILE *f, bool group, unsigned *id)
{
#ifdef __GLIBC__
	char buf[16384];
	struct passwd pw, *pwp = NULL;
	struct group gr, *grp = NULL;

	if (!group && (fgetpwent_r(f, &pw, buf, sizeof buf, &pwp) != 0 || pwp == NULL))
		return false;
	if (group && (fgetgrent_r(f, &gr, buf, sizeof buf, &grp) != 0 || grp == NULL))
		return false;
	*id = group ? (unsigned)gr.gr_gid : (unsigned)pw.pw_uid;
#else
	struct passwd *pwp = group ? NULL : fgetpwent(f);
	struct group *grp = group ? fgetgrent(f) : NULL;

	if (pwp == NULL && grp == NULL)
		return false;
	*id = group ? (unsigned)grp->gr_gid : (unsigned)pwp->pw_uid;
#endif
	return true;
}

static bool has_id(const char *text, size_t len, bool group, unsigned id)
{
	FILE *f = len > 0 ? fmemopen((void *)text, len, "r") : NULL;
	unsigned got;
	bool found = false;

	if (f == NULL)
		return false;
	while (!found && entry_next(f, group, &got))
		found = got == id;
	fclose(f);
	return found;
}

int users_db_text(const char *src, size_t len, const char *line, bool group, unsigned id, char **out,
		  size_t *out_len, bool *added, struct sb_err *err)
{
	bool add = !has_id(src, len, group, id);
	size_t line_len = add ? strlen(line) : 0;
	bool nl = len > 0 && src[len - 1] != '\n';

	*out = malloc(line_len + len + 2);
	if (*out == NULL)
		return sb_fail(err, ENOMEM, "writing the sandbox's %s", group ? "group" : "passwd");
	memcpy(*out, line, line_len);
	if (len > 0)
		memcpy(*out + line_len, src, len);
	*out_len = line_len + len;
	if (nl)
		(*out)[(*out_len)++] = '\n';
	(*out)[*out_len] = '\0';
	if (added != NULL)
		*added = add;
	return 0;
}

/* name in dirfd, 0644 whatever the umask (the sandbox's uid reads it), replaced whole by a rename:
 * a reader never sees half a file. No fsync: every start writes it afresh. */
static int file_put(int dirfd, const char *dir, const char *name, const char *text, size_t len, struct sb_err *err)
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

static int file_one(int dirfd, const char *dir, const char *etc, const char *name, const char *line, bool group,
		    unsigned id, bool *added, struct sb_err *err)
{
	cleanup_free char *src = NULL, *text = NULL;
	char src_path[PATH_MAX];
	size_t src_len, len;

	if (path_fmt(src_path, sizeof src_path, err, "%s/%s", etc, name) < 0 ||
	    source_read(src_path, &src, &src_len, err) < 0 ||
	    users_db_text(src, src_len, line, group, id, &text, &len, added, err) < 0)
		return -1;
	return file_put(dirfd, dir, name, text, len, err);
}

int users_db_write(int dirfd, const char *dir, const char *etc, uid_t uid, gid_t gid, const char *home,
		   const char *shell, unsigned *added, struct sb_err *err)
{
	char pw_line[PATH_MAX + 96], gr_line[64];
	bool pw_added = false, gr_added = false;

	/* A home with ':' or a newline would make another line of the file, not this one. */
	if (home == NULL || strpbrk(home, ":\n") != NULL)
		return sb_invalid(err, "the sandbox's home '%s' cannot go in a passwd line", home ? home : "(null)");
	if (path_fmt(pw_line, sizeof pw_line, err, USERS_DB_NAME ":x:%u:%u:" USERS_DB_NAME ":%s:%s\n", (unsigned)uid,
		     (unsigned)gid, home, shell) < 0)
		return -1;
	snprintf(gr_line, sizeof gr_line, USERS_DB_NAME ":x:%u:\n", (unsigned)gid);
	if (file_one(dirfd, dir, etc, "passwd", pw_line, false, (unsigned)uid, &pw_added, err) < 0 ||
	    file_one(dirfd, dir, etc, "group", gr_line, true, (unsigned)gid, &gr_added, err) < 0) {
		sb_err_prefix(err, "the sandbox's user database");
		return -1;
	}
	if (added != NULL)
		*added = (pw_added ? USERS_DB_PASSWD : 0) | (gr_added ? USERS_DB_GROUP : 0);
	return 0;
}
