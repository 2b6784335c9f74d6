/* The whole output of a call, kept for the next call to read (see output_keep.h).
 *
 * Why this is safe while the sandbox changes the scratch folder at any moment (its agent is still
 * running there between calls): the folder is reached from the worktree's parent, the identity's
 * workspaces/, which no sandbox can write or even see; from there every open is openat2 with
 * RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS | RESOLVE_NO_XDEV, so a link or a
 * mount put in place of .sandbox-tmp or .outputs is refused, never followed; both must be real
 * directories of the sandbox's uid; files are created O_EXCL | O_NOFOLLOW (a name planted first,
 * a FIFO or a link included, is refused) and old ones removed by name beneath the held directory.
 * And under a root manager, everything beneath the scratch folder is done with the sandbox's own
 * file rights (fsuid and fsgid of this thread only), so even a mistake here could not write where
 * the sandbox itself could not. */
#include "output_keep.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/openat2.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/fsuid.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "fdio.h"
#include "fstree.h"
#include "log.h"
#include "pathfmt.h"
#include "textesc.h"
#include "workspace.h"

#define KEEP_RESOLVE (RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS | RESOLVE_NO_XDEV)
#define KEEP_PREFIX "exec-"
#define KEEP_SCAN_MAX 65536 /* entries of .outputs read when removing old files: the sandbox can add many */
#define KEEP_NAMES_MAX 1024 /* of them, kept files considered at once */

static const char *const keep_streams[2] = { "stdout", "stderr" };

/* One directory beneath at, no link and no mount on the way; -1 with err. */
static int keep_open_dir(int at, const char *name, const char *shown, struct sb_err *err)
{
	struct open_how how = { .flags = O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC, .resolve = KEEP_RESOLVE };
	int fd = (int)syscall(SYS_openat2, at, name, &how, sizeof how);

	if (fd < 0)
		return sb_fail_errno(err, "opening %s%s", shown,
				     errno == ELOOP || errno == EXDEV ? ": a symbolic link or a mount is in its place" :
				     errno == ENOTDIR ? ": it is not a directory" : "");
	return fd;
}

/* A real directory of the sandbox's uid, as fstat sees the opened object. */
static int keep_dir_check(int fd, const char *shown, uid_t uid, struct sb_err *err)
{
	struct stat st;

	if (fstat(fd, &st) < 0)
		return sb_fail_errno(err, "inspecting %s", shown);
	if (!S_ISDIR(st.st_mode) || st.st_uid != uid)
		return sb_fail(err, EPERM, "%s belongs to uid %u, not to the sandbox's uid %u", shown,
			       (unsigned)st.st_uid, (unsigned)uid);
	return 0;
}

/* This thread's file rights become the sandbox's when the manager is root: 1 when switched, 0
 * when there was nothing to switch (an unprivileged manager's uid is the sandbox's), -1 with err.
 * setfsuid and setfsgid change the calling thread only, unlike setresuid in glibc. */
static int keep_creds_enter(uid_t uid, gid_t gid, struct sb_err *err)
{
	if (geteuid() != 0 || uid == 0)
		return 0;
	/* The gid first: once fsuid is not 0, the file capabilities are out of the effective set. */
	setfsgid(gid);
	if ((gid_t)setfsgid((gid_t)-1) != gid) {
		setfsgid(getegid());
		return sb_fail(err, EPERM, "taking the sandbox's gid %u for the files", (unsigned)gid);
	}
	setfsuid(uid);
	if ((uid_t)setfsuid((uid_t)-1) != uid) {
		setfsgid(getegid());
		return sb_fail(err, EPERM, "taking the sandbox's uid %u for the files", (unsigned)uid);
	}
	return 1;
}

/* Back to the manager's own rights. A thread that could not get them back must not go on serving
 * with the sandbox's: fail closed. */
static void keep_creds_leave(int switched)
{
	if (switched <= 0)
		return;
	setfsuid(geteuid());
	setfsgid(getegid());
	if ((uid_t)setfsuid((uid_t)-1) != geteuid() || (gid_t)setfsgid((gid_t)-1) != getegid()) {
		sb_error("output keep: this thread could not take back the manager's file rights; stopping");
		abort();
	}
}

/* exec-<hex>.stdout or exec-<hex>.stderr: a name this mechanism makes. */
static int keep_name(const char *name)
{
	const char *hex = name + (sizeof KEEP_PREFIX - 1);
	size_t n;

	if (strncmp(name, KEEP_PREFIX, sizeof KEEP_PREFIX - 1) != 0)
		return 0;
	n = strspn(hex, "0123456789abcdef");
	return n > 0 && n <= 64 && (strcmp(hex + n, ".stdout") == 0 || strcmp(hex + n, ".stderr") == 0);
}

struct keep_file {
	struct timespec mtime;
	char name[96];
};

static int keep_file_older(const void *a, const void *b)
{
	const struct keep_file *x = a, *y = b;

	if (x->mtime.tv_sec != y->mtime.tv_sec)
		return x->mtime.tv_sec < y->mtime.tv_sec ? -1 : 1;
	if (x->mtime.tv_nsec != y->mtime.tv_nsec)
		return x->mtime.tv_nsec < y->mtime.tv_nsec ? -1 : 1;
	return strcmp(x->name, y->name);
}

/* Remove the oldest kept files beyond OUTPUT_KEEP_FILES, this call's `made` (named after
 * exec_id) never among them. Only regular files with a kept name, by name beneath the held
 * directory: a name the sandbox planted or touched is the sandbox's own file, in its own folder. */
static void keep_prune(int ofd, const char *exec_id, size_t made)
{
	struct keep_file *v = calloc(KEEP_NAMES_MAX, sizeof *v);
	char own[80];
	size_t n = 0, scanned = 0, keep = OUTPUT_KEEP_FILES > made ? OUTPUT_KEEP_FILES - made : 0;
	struct dirent *de;
	int dfd = openat(ofd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	DIR *d = dfd >= 0 ? fdopendir(dfd) : NULL;

	snprintf(own, sizeof own, KEEP_PREFIX "%s.", exec_id);
	if (v == NULL || d == NULL) {
		sb_warn("output keep: old files not removed: %s", strerror(errno));
		if (d == NULL && dfd >= 0)
			close(dfd);
		if (d != NULL)
			closedir(d);
		free(v);
		return;
	}
	while (n < KEEP_NAMES_MAX && scanned++ < KEEP_SCAN_MAX && (de = readdir(d)) != NULL) {
		struct stat st;
		size_t len = strlen(de->d_name);

		if (!keep_name(de->d_name) || strncmp(de->d_name, own, strlen(own)) == 0 ||
		    len >= sizeof v[n].name ||
		    fstatat(ofd, de->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0 || !S_ISREG(st.st_mode))
			continue;
		v[n].mtime = st.st_mtim;
		memcpy(v[n].name, de->d_name, len + 1);
		n++;
	}
	qsort(v, n, sizeof *v, keep_file_older);
	for (size_t i = 0; n > keep && i < n - keep; i++)
		if (unlinkat(ofd, v[i].name, 0) < 0 && errno != ENOENT)
			sb_warn("output keep: removing %s: %s", v[i].name, strerror(errno));
	closedir(d);
	free(v);
}

/* One stream's bytes into a new file name beneath ofd. */
static int keep_stream(int ofd, const char *dir_shown, const char *name, json_t *text, int escaped,
		       struct sb_err *err)
{
	size_t len = json_string_length(text);
	uint8_t *raw = NULL;
	const void *data = json_string_value(text);
	int rc;

	if (escaped) {
		raw = malloc(len + 1);
		if (raw == NULL)
			return sb_fail(err, ENOMEM, "decoding %zu bytes of output", len);
		len = textesc_decode(json_string_value(text), len, raw);
		data = raw;
	}
	/* (uid_t)-1: the file is already the sandbox's, made with its rights (keep_creds_enter). */
	rc = fd_file_create(ofd, dir_shown, name, 0600, (uid_t)-1, (gid_t)-1, data, len, err);
	free(raw);
	return rc;
}

/* Beneath the held scratch folder, with the sandbox's rights: .outputs, the files, the pruning. */
static int keep_in_scratch(int sfd, const char *dir_shown, json_t *result, const char *exec_id, uid_t uid,
			   json_t *kept, struct sb_err *err)
{
	char name[2][96], path[PATH_MAX], key[32];
	size_t made = 0;
	int ofd, rc = 0;

	if (mkdirat(sfd, OUTPUT_KEEP_DIR, 0700) < 0 && errno != EEXIST)
		return sb_fail_errno(err, "creating %s", dir_shown);
	ofd = keep_open_dir(sfd, OUTPUT_KEEP_DIR, dir_shown, err);
	if (ofd < 0)
		return -1;
	if (keep_dir_check(ofd, dir_shown, uid, err) < 0) {
		close(ofd);
		return -1;
	}
	for (size_t i = 0; i < 2 && rc == 0; i++) {
		json_t *text = json_object_get(result, keep_streams[i]);

		if (json_string_length(text) == 0)
			continue;
		snprintf(key, sizeof key, "%s_escaped", keep_streams[i]);
		if (path_fmt(name[made], sizeof name[made], err, KEEP_PREFIX "%s.%s", exec_id, keep_streams[i]) < 0 ||
		    path_fmt(path, sizeof path, err, "%s/%s", dir_shown, name[made]) < 0 ||
		    keep_stream(ofd, dir_shown, name[made], text, json_is_true(json_object_get(result, key)), err) < 0)
			rc = -1;
		else if (json_object_set_new(kept, keep_streams[i], json_string(path)) < 0)
			rc = sb_fail(err, ENOMEM, "noting %s", path);
		made += rc == 0;
	}
	/* All or nothing: a note that names one stream's file and not the other's would mislead. */
	for (size_t i = 0; rc < 0 && i < made; i++)
		unlinkat(ofd, name[i], 0);
	if (rc == 0)
		keep_prune(ofd, exec_id, made);
	close(ofd);
	return rc;
}

static int keep_write(json_t *result, const char *worktree, const char *exec_id, uid_t uid, gid_t gid,
		      json_t *kept, struct sb_err *err)
{
	const char *slash = strrchr(worktree, '/');
	char parent[PATH_MAX], rel[PATH_MAX], scratch_shown[PATH_MAX], dir_shown[PATH_MAX];
	int pfd, sfd, switched, rc;

	if (worktree[0] != '/' || slash == NULL || slash[1] == '\0')
		return sb_invalid(err, "the session's worktree %s is not an absolute path", worktree);
	if (path_fmt(parent, sizeof parent, err, "%.*s", slash == worktree ? 1 : (int)(slash - worktree), worktree) < 0 ||
	    path_fmt(rel, sizeof rel, err, "%s/" WORKSPACE_SCRATCH, slash + 1) < 0 ||
	    path_fmt(scratch_shown, sizeof scratch_shown, err, "%s/" WORKSPACE_SCRATCH, worktree) < 0 ||
	    path_fmt(dir_shown, sizeof dir_shown, err, "%s/" OUTPUT_KEEP_DIR, scratch_shown) < 0)
		return -1;
	/* The start: the identity's workspaces/, never mounted into a sandbox, every ancestor the
	 * manager's (agent_dir.c hand_over says why); the worktree's own entry in it is the manager's. */
	pfd = fstree_open_dir(AT_FDCWD, parent, err);
	if (pfd < 0)
		return -1;
	sfd = keep_open_dir(pfd, rel, scratch_shown, err);
	close(pfd);
	if (sfd < 0)
		return -1;
	rc = keep_dir_check(sfd, scratch_shown, uid, err);
	if (rc == 0 && (switched = keep_creds_enter(uid, gid, err)) >= 0) {
		rc = keep_in_scratch(sfd, dir_shown, result, exec_id, uid, kept, err);
		keep_creds_leave(switched);
	} else {
		rc = -1;
	}
	close(sfd);
	return rc;
}

void output_keep(json_t *resp, const char *worktree, const char *exec_id, size_t over, uid_t owner_uid,
		 gid_t owner_gid)
{
	json_t *result = json_object_get(resp, "result"), *kept;
	struct sb_err err;
	size_t total;

	if (!json_is_true(json_object_get(resp, "ok")) || !json_is_object(result))
		return;
	total = json_string_length(json_object_get(result, "stdout")) +
		json_string_length(json_object_get(result, "stderr"));
	if (total <= over)
		return;
	kept = json_object();
	sb_err_clear(&err);
	if (kept == NULL) {
		sb_fail(&err, ENOMEM, "out of memory");
	} else if (keep_write(result, worktree, exec_id, owner_uid, owner_gid, kept, &err) < 0) {
		json_decref(kept);
	} else if (json_object_set_new(result, "output_kept", kept) < 0) { /* kept is gone either way */
		sb_fail(&err, ENOMEM, "out of memory noting the kept files");
	} else {
		return;
	}
	sb_warn("exec %s: its whole output was not kept: %s", exec_id, err.msg);
	json_object_set_new(result, "output_kept_error", json_string(err.msg));
}
