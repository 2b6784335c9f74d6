/* An unprivileged manager's ids of its own for each identity (issue 26, rule N2): `sandbox-ids
 * subuid`. Alone, an unprivileged process may map only its own uid into a user namespace, so all its
 * sandboxes were itself. The manager user's subordinate ids (/etc/subuid, /etc/subgid) are its to
 * use through the setuid helpers newuidmap and newgidmap, which check the entries. So the daemon,
 * before it does anything else, moves into a user namespace of its own: its id 0 is the manager's
 * own uid and gid, and the subordinate ids are mapped to themselves (id N there is host id N, so
 * records, `session show` and the files on the host name the same ids), and re-executes itself
 * there. A restarted manager must reach the sandboxes its predecessor left (to ask, stop and prove
 * them gone), and a process has no capability over a sibling namespace's: so the namespace is
 * kept by a holder process (`sbm-userns`, its pid in <state-dir>/userns-holder, as rootless podman
 * keeps its pause process), and the next start joins it instead of making another. As uid 0 of that namespace it is a root manager over those ids only
 * (its capabilities reach no file or process of any other host user): each identity gets one of
 * them as a root manager gives one of its range (identity_ids.c), the worktrees are chowned to it,
 * and the sandboxes' namespaces map it 1:1 as they do under root. */
#include "identity_ids.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/close_range.h>
#include <pwd.h>
#include <stdbool.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cleanup.h"
#include "log.h"

/* The first entry of file for this user (name or uid): 0 with *start, *count; -1 with err. */
static int subid_entry(const char *file, const char *name, uid_t uid, unsigned long *start, unsigned long *count,
		       struct sb_err *err)
{
	cleanup_fclose FILE *f = fopen(file, "re");
	char line[512], id[24], *end;
	size_t nlen = strlen(name);

	snprintf(id, sizeof id, "%u", (unsigned)uid);
	if (f == NULL)
		return sb_fail_errno(err, "sandbox-ids subuid: reading %s", file);
	while (fgets(line, sizeof line, f) != NULL) {
		const char *rest = NULL;

		if (strncmp(line, name, nlen) == 0 && line[nlen] == ':')
			rest = line + nlen + 1;
		else if (strncmp(line, id, strlen(id)) == 0 && line[strlen(id)] == ':')
			rest = line + strlen(id) + 1;
		if (rest == NULL)
			continue;
		errno = 0;
		*start = strtoul(rest, &end, 10);
		if (end != rest && *end == ':' && errno == 0) {
			rest = end + 1;
			*count = strtoul(rest, &end, 10);
			if (end != rest && errno == 0)
				return 0;
		}
	}
	return sb_refuse(err, ENOENT, "sandbox-ids subuid: %s has no entry for %s (uid %u): ask the administrator for "
			 "one (usermod --add-subuids FIRST-LAST --add-subgids FIRST-LAST %s)", file, name,
			 (unsigned)uid, name);
}

/* Runs helper ("newuidmap"/"newgidmap") on pid: "0 OWN 1 START START COUNT". 0, or -1 with err. */
static int map_with(const char *helper, pid_t pid, unsigned long own, unsigned long start, unsigned long count,
		    struct sb_err *err)
{
	char a[5][24], path[32];
	pid_t h;
	int status;

	snprintf(path, sizeof path, "/usr/bin/%s", helper);
	snprintf(a[0], sizeof a[0], "%d", (int)pid);
	snprintf(a[1], sizeof a[1], "%lu", own);
	snprintf(a[2], sizeof a[2], "%lu", start);
	snprintf(a[3], sizeof a[3], "%lu", count);
	h = fork();
	if (h < 0)
		return sb_fail_errno(err, "sandbox-ids subuid: starting %s", helper);
	if (h == 0) {
		execl(path, helper, a[0], "0", a[1], "1", a[2], a[2], a[3], (char *)NULL);
		_exit(127);
	}
	while (waitpid(h, &status, 0) < 0)
		if (errno != EINTR)
			return sb_fail_errno(err, "sandbox-ids subuid: waiting for %s", helper);
	if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
		return sb_refuse(err, EPERM, "sandbox-ids subuid: %s %s 0 %lu 1 %lu %lu %lu failed (%s %d; is the uidmap "
				 "package installed, and the entry this user's?)", path, a[0], own, start, start, count,
				 WIFEXITED(status) ? "exit" : "signal",
				 WIFEXITED(status) ? WEXITSTATUS(status) : WTERMSIG(status));
	return 0;
}

/* The helper process: waits until the daemon is in its new namespace (a byte on go), maps it, and
 * says how that went on done (0, or the errno and message). Never returns. */
static void mapper(int go, int done, pid_t daemon, uid_t uid, gid_t gid, const unsigned long ids[3])
{
	struct sb_err err;
	char byte;
	int rc;

	sb_err_clear(&err);
	rc = read(go, &byte, 1) == 1 && map_with("newuidmap", daemon, uid, ids[0], ids[2], &err) == 0 &&
	     map_with("newgidmap", daemon, gid, ids[1], ids[2], &err) == 0 ? 0 : -1;
	if (rc < 0 && err.msg[0] == '\0')
		sb_fail(&err, EPIPE, "sandbox-ids subuid: the daemon did not reach its user namespace");
	if (write(done, err.msg, strlen(err.msg) + 1) < 0)
		_exit(1);
	_exit(rc == 0 ? 0 : 1);
}

/* "A B C" lines of a /proc/PID/{uid,gid}_map: the namespace this code makes has exactly "0 OWN 1"
 * and "START START COUNT". 1 and *own, *start, *count when it is; 0 when not (the host's, or
 * another's). */
static int map_read(const char *file, unsigned long *own, unsigned long *start, unsigned long *count)
{
	cleanup_fclose FILE *f = fopen(file, "re");
	unsigned long in[3], out[3], len[3];
	int n = 0;

	while (f != NULL && n < 3 && fscanf(f, "%lu %lu %lu", &in[n], &out[n], &len[n]) == 3)
		n++;
	if (n != 2 || in[0] != 0 || len[0] != 1 || in[1] != out[1])
		return 0;
	*own = out[0];
	*start = out[1];
	*count = len[1];
	return 1;
}

/* The holder named in file, when its maps are exactly this user's (a reused pid is another
 * process, with other maps): its namespace joined. 1 joined, 0 none. */
static int holder_join_file(const char *file, const unsigned long ids[3], struct sb_err *err)
{
	char path[64];
	unsigned long own, start, count, gown, gstart, gcount;
	cleanup_fclose FILE *f = fopen(file, "re");
	cleanup_close int fd = -1;
	int pid = 0;

	if (f == NULL || fscanf(f, "%d", &pid) != 1 || pid <= 1)
		return 0;
	snprintf(path, sizeof path, "/proc/%d/uid_map", pid);
	if (map_read(path, &own, &start, &count) != 1 || own != getuid() || start != ids[0] || count != ids[2])
		return 0;
	snprintf(path, sizeof path, "/proc/%d/gid_map", pid);
	if (map_read(path, &gown, &gstart, &gcount) != 1 || gown != getgid() || gstart != ids[1] || gcount != ids[2])
		return 0;
	snprintf(path, sizeof path, "/proc/%d/ns/user", pid);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0 || setns(fd, CLONE_NEWUSER) < 0)
		return sb_fail_errno(err, "sandbox-ids subuid: joining the user namespace of holder %d", pid);
	if (setresgid(0, 0, 0) < 0 || setresuid(0, 0, 0) < 0)
		return sb_fail_errno(err, "sandbox-ids subuid: becoming id 0 of the namespace");
	return 1;
}

/* The namespace a previous start of this state directory made, while its holder lives. 1 joined,
 * 0 none, -1 with err. */
static int holder_join(const struct config *c, const unsigned long ids[3], struct sb_err *err)
{
	char path[PATH_MAX + 32];

	if (snprintf(path, sizeof path, "%s/userns-holder", c->state_dir) >= (int)sizeof path)
		return 0;
	return holder_join_file(path, ids, err);
}

/* The holder: a process that only keeps the namespace, signals unblocked (the daemon blocks them)
 * and no descriptor of the daemon's. Made in the namespace, by a child that goes at once, so the
 * holder belongs to no daemon. Its pid crosses the re-execution in the environment and reaches
 * <state-dir>/userns-holder only once the start holds the state directory (identity_userns_keep):
 * a start refused before that (a bad store, a state directory in use) makes nothing there.
 * *holder, or -1 with err. */
static int holder_start(pid_t *holder, struct sb_err *err)
{
	int pipefd[2], status;
	sigset_t none;
	pid_t mid, h;
	ssize_t n;

	if (pipe2(pipefd, O_CLOEXEC) < 0)
		return sb_fail_errno(err, "sandbox-ids subuid: a pipe for the holder's pid");
	mid = fork();
	if (mid < 0) {
		close(pipefd[0]);
		close(pipefd[1]);
		return sb_fail_errno(err, "sandbox-ids subuid: starting the namespace's holder");
	}
	if (mid == 0) {
		setsid();
		h = fork();
		if (h == 0) {
			sigemptyset(&none);
			sigprocmask(SIG_SETMASK, &none, NULL);
			prctl(PR_SET_NAME, "sbm-userns");
			close_range(0, ~0U, 0);
			for (;;)
				pause();
		}
		_exit(h > 0 && write(pipefd[1], &h, sizeof h) == (ssize_t)sizeof h ? 0 : 1);
	}
	close(pipefd[1]);
	n = read(pipefd[0], holder, sizeof *holder);
	close(pipefd[0]);
	while (waitpid(mid, &status, 0) < 0)
		if (errno != EINTR)
			return sb_fail_errno(err, "sandbox-ids subuid: waiting for the holder's start");
	if (n != (ssize_t)sizeof *holder || !WIFEXITED(status) || WEXITSTATUS(status) != 0 || *holder <= 1)
		return sb_fail(err, EIO, "sandbox-ids subuid: the namespace's holder did not start");
	return 0;
}

/* unshare, mapped by the helper, uid and gid 0 of the namespace. */
static int namespace_enter(const unsigned long ids[3], struct sb_err *err)
{
	int go[2], done[2];
	uid_t uid = getuid();
	gid_t gid = getgid();
	pid_t self = getpid(), h;
	char msg[sizeof err->msg];
	ssize_t n;
	int status, rc = -1;

	if (pipe2(go, O_CLOEXEC) < 0 || pipe2(done, O_CLOEXEC) < 0)
		return sb_fail_errno(err, "sandbox-ids subuid: pipes");
	h = fork();
	if (h < 0)
		return sb_fail_errno(err, "sandbox-ids subuid: starting the mapper");
	if (h == 0)
		mapper(go[0], done[1], self, uid, gid, ids);
	close(go[0]);
	close(done[1]);
	if (unshare(CLONE_NEWUSER) < 0) {
		sb_fail_errno(err, "sandbox-ids subuid: a user namespace (unshare)");
	} else if (write(go[1], "g", 1) != 1) {
		sb_fail_errno(err, "sandbox-ids subuid: telling the mapper");
	} else if ((n = read(done[0], msg, sizeof msg - 1)) <= 0) {
		sb_fail(err, EPIPE, "sandbox-ids subuid: the mapper ended without a word");
	} else {
		msg[n] = '\0';
		if (msg[0] != '\0')
			sb_refuse(err, EPERM, "%s", msg);
		else if (setresgid(0, 0, 0) < 0 || setresuid(0, 0, 0) < 0)
			sb_fail_errno(err, "sandbox-ids subuid: becoming id 0 of the namespace");
		else
			rc = 0;
	}
	close(go[1]);
	close(done[0]);
	while (waitpid(h, &status, 0) < 0 && errno == EINTR)
		;
	return rc;
}

static int map_read(const char *file, unsigned long *own, unsigned long *start, unsigned long *count);

/* Whether this process is uid 0 of a namespace this file made ("0 OWN 1", "START START COUNT"). */
static bool in_own_namespace(void)
{
	unsigned long own, start, count;

	return map_read("/proc/self/uid_map", &own, &start, &count) == 1 &&
	       map_read("/proc/self/gid_map", &own, &start, &count) == 1;
}

#define NEW_HOLDER_ENV "SANDBOX_MANAGER_NEW_USERNS"

/* The holder this start made (0: it joined one, or made none): read once, and the mark taken out of
 * the environment so that nothing the daemon starts inherits it. */
static pid_t new_holder(void)
{
	static long pid = -1;
	const char *v;

	if (pid < 0) {
		v = getenv(NEW_HOLDER_ENV);
		pid = v != NULL ? strtol(v, NULL, 10) : 0;
		if (pid <= 1)
			pid = 0;
		unsetenv(NEW_HOLDER_ENV);
	}
	return (pid_t)pid;
}

void identity_userns_made(void)
{
	char self[PATH_MAX];
	ssize_t n;

	(void)new_holder();
	/* Re-executed through /proc/self/exe, the process would be named "exe" in ps and /proc: its
	 * own program's name again, as before the move (identity_userns_enter). */
	if (geteuid() == 0 && in_own_namespace() && (n = readlink("/proc/self/exe", self, sizeof self - 1)) > 0) {
		self[n] = '\0';
		prctl(PR_SET_NAME, strrchr(self, '/') ? strrchr(self, '/') + 1 : self);
	}
}

int identity_userns_keep(const struct config *c, struct sb_err *err)
{
	char path[PATH_MAX + 32];
	cleanup_close int fd = -1;

	if (new_holder() == 0)
		return 0;
	if (snprintf(path, sizeof path, "%s/userns-holder", c->state_dir) >= (int)sizeof path)
		return sb_fail(err, ENAMETOOLONG, "sandbox-ids subuid: the state directory's path is too long");
	fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0600);
	if (fd < 0 || dprintf(fd, "%d\n", (int)new_holder()) < 0)
		return sb_fail_errno(err, "sandbox-ids subuid: writing the holder's pid to %s", path);
	return 0;
}

void identity_userns_abandon(const struct config *c)
{
	char path[PATH_MAX + 32];
	cleanup_fclose FILE *f = NULL;
	int pid = 0;

	/* No sandbox can be in a namespace made by a start that failed: its holder keeps nothing. */
	if (new_holder() == 0)
		return;
	kill(new_holder(), SIGKILL);
	if (snprintf(path, sizeof path, "%s/userns-holder", c->state_dir) < (int)sizeof path &&
	    (f = fopen(path, "re")) != NULL && fscanf(f, "%d", &pid) == 1 && pid == new_holder())
		unlink(path);
}

uid_t identity_userns_host_uid(const struct config *c, uid_t uid)
{
	unsigned long own, start, count;

	/* In the namespace the manager's own user is 0 ("0 OWN 1"); subordinate ids are themselves. */
	if (c->ids_userns && uid == 0 && map_read("/proc/self/uid_map", &own, &start, &count) == 1)
		return (uid_t)own;
	return uid;
}

/* The host's own user namespace: "0 0 4294967295". Elsewhere (a container, `unshare -U`) the setuid
 * helpers cannot map subordinate ids, which that namespace's parent does not know as this user's. */
static bool in_initial_namespace(void)
{
	cleanup_fclose FILE *f = fopen("/proc/self/uid_map", "re");
	unsigned long in, out, len;

	return f != NULL && fscanf(f, "%lu %lu %lu", &in, &out, &len) == 3 && in == 0 && out == 0 &&
	       len == 4294967295UL && fscanf(f, "%lu", &in) != 1;
}

/* Whether an identity on volume was made with the manager's own ids: its repositories/ are the
 * manager's group (under subordinate ids they are the identity's, identity_ids.c). */
static bool volume_made_own(const char *volume)
{
	char path[PATH_MAX];
	cleanup_closedir DIR *d = NULL;
	struct dirent *e;
	struct stat st;

	if (snprintf(path, sizeof path, "%s/identities", volume) >= (int)sizeof path || (d = opendir(path)) == NULL)
		return false;
	while ((e = readdir(d)) != NULL) {
		if (e->d_name[0] == '.' ||
		    snprintf(path, sizeof path, "%s/identities/%s/repositories", volume, e->d_name) >= (int)sizeof path)
			continue;
		if (stat(path, &st) == 0 && st.st_gid == getgid())
			return true;
	}
	return false;
}

int identity_userns_default(struct config *c, struct sb_err *err)
{
	struct passwd *pw = getpwuid(getuid());
	unsigned long s, n;
	struct sb_err ignored;

	if (c->ids_subuid || c->ids_own || c->ids_count != 0)
		return 0;
	/* Re-executed in the namespace this default made: its ids (nothing was given). */
	if (geteuid() == 0)
		return in_own_namespace() ? identity_ids_subuid_range(c, err) : 0;
	/* The process backend's only: a podman or Kubernetes sandbox's ids are its runtime's to map
	 * (a rootless podman numbers the subordinate ids from 1), and those backends take them as given. */
	if (strcmp(c->backend, "process") != 0 || pw == NULL || !in_initial_namespace() ||
	    access("/usr/bin/newuidmap", X_OK) != 0 || access("/usr/bin/newgidmap", X_OK) != 0 ||
	    subid_entry("/etc/subuid", pw->pw_name, getuid(), &s, &n, &ignored) < 0 ||
	    subid_entry("/etc/subgid", pw->pw_name, getuid(), &s, &n, &ignored) < 0)
		return 0;
	/* A home is 0700 on Debian 12, and no range id may search it: none has to. The sandbox's init
	 * opens the host paths as this user before it becomes its identity's uid (sandbox_init.c
	 * sources_open()), and everything else a range id touches lies below them. */
	/* Several managers sharing a store take sessions over from one another: on one host each would
	 * be in a namespace of its own, with no capability over the sandboxes another left. */
	if (strncmp(c->store, "postgres:", 9) == 0) {
		snprintf(c->ids_from, sizeof c->ids_from, "several managers share the store: a namespace of subordinate "
			 "ids is one manager's (give sandbox-ids subuid to each only if they run on hosts of their own)");
		return 0;
	}
	/* A volume whose identities were made with the manager's own ids (before this default) keeps
	 * them: its files are the user's, which no subordinate id may write. Moving is the operator's
	 * step (`sandbox-ids subuid`, docs/operations.md). */
	if (volume_made_own(c->volume)) {
		snprintf(c->ids_from, sizeof c->ids_from, "the volume's identities were made with the manager's own ids "
			 "(give sandbox-ids subuid to move them: docs/operations.md)");
		return 0;
	}
	c->ids_subuid = true;
	return 0;
}

int identity_userns_enter(const struct config *c, int argc, char **argv, struct sb_err *err)
{
	struct passwd *pw = getpwuid(getuid());
	unsigned long us, uc, gs, gc, ids[3];
	cleanup_free char **args = NULL;
	char pid_text[24];
	pid_t holder = 0;
	int rc;

	if (!c->ids_subuid || geteuid() == 0)
		return 0;
	if (pw == NULL)
		return sb_refuse(err, ENOENT, "sandbox-ids subuid: uid %u has no name (/etc/passwd) to look up in "
				 "/etc/subuid", (unsigned)getuid());
	if (subid_entry("/etc/subuid", pw->pw_name, getuid(), &us, &uc, err) < 0 ||
	    subid_entry("/etc/subgid", pw->pw_name, getuid(), &gs, &gc, err) < 0)
		return -1;
	ids[0] = us;
	ids[1] = gs;
	ids[2] = uc < gc ? uc : gc;
	/* The rules of any range (never nobody, nothing below 1000) before anything is mapped. */
	if (identity_ids_range_valid(us, ids[2], "(the user's /etc/subuid entry)", err) < 0 ||
	    identity_ids_range_valid(gs, ids[2], "(the user's /etc/subgid entry)", err) < 0)
		return -1;
	/* The paths this start resolved go with it: their defaults follow the effective uid, and in
	 * the namespace that is 0, whose defaults are the host root's (/var/lib/infra-sandbox). */
	args = calloc((size_t)argc + 8, sizeof *args);
	if (args == NULL)
		return sb_fail(err, ENOMEM, "sandbox-ids subuid");
	args[0] = "sandbox-manager-daemon";
	memcpy(args + 1, argv, (size_t)argc * sizeof *args);
	memcpy(args + 1 + argc, (char *const[]){ "--state-dir", (char *)c->state_dir, "--socket", (char *)c->socket,
						 "--volume", (char *)c->volume },
	       6 * sizeof *args);
	rc = holder_join(c, ids, err);
	if (rc == 0 && (namespace_enter(ids, err) < 0 || holder_start(&holder, err) < 0))
		return -1;
	/* A holder made now keeps nothing if this start fails: identity_userns_abandon() ends it. */
	snprintf(pid_text, sizeof pid_text, "%d", (int)holder);
	if (rc == 0 && setenv(NEW_HOLDER_ENV, pid_text, 1) < 0)
		return sb_fail_errno(err, "sandbox-ids subuid: marking the new holder");
	if (rc < 0)
		return -1;
	/* Anew, as uid 0 of the namespace: every decision taken on the way here (the ids, the checks)
	 * is taken again by a root manager of these ids (identity_ids_subuid_range). */
	/* Nothing of this process's crosses but its standard streams: the daemon opens all it needs anew. */
	if (close_range(3, ~0U, CLOSE_RANGE_CLOEXEC) < 0)
		return sb_fail_errno(err, "sandbox-ids subuid: closing descriptors before the re-execution");
	execv("/proc/self/exe", args);
	return sb_fail_errno(err, "sandbox-ids subuid: re-executing the daemon in its user namespace");
}


int identity_ids_subuid_range(struct config *c, struct sb_err *err)
{
	unsigned long own, us, uc, gs, gc;

	c->ids_subuid = true;
	if (geteuid() != 0)
		return 0; /* identity_userns_enter, then this again */
	if (map_read("/proc/self/uid_map", &own, &us, &uc) != 1 || map_read("/proc/self/gid_map", &own, &gs, &gc) != 1)
		return 0; /* the host's root: root's own entries (identity_ids_default) */
	c->ids_uid = (uid_t)us;
	c->ids_gid = (gid_t)gs;
	c->ids_count = uc < gc ? uc : gc;
	c->ids_userns = true;
	snprintf(c->ids_from, sizeof c->ids_from, "the manager user's /etc/subuid and /etc/subgid entries (uids %lu.., "
		 "gids %lu.., %lu each; the same ids on the host)", us, gs, c->ids_count);
	return identity_ids_range_valid(us, c->ids_count, "(the namespace's uids)", err) < 0 ||
	       identity_ids_range_valid(gs, c->ids_count, "(the namespace's gids)", err) < 0 ? -1 : 0;
}
