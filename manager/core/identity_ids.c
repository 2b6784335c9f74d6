/* Each identity's own uid and gid (issue 26, rule N2; identity_ids.h). Under one shared uid, any
 * host process running as it (nobody, the old default) read every identity's keys and wrote every
 * worktree, and one identity's escaped command was every identity's. So a root manager is given a
 * range of ids no one else uses, checks at every start that it still is no one else's, and gives
 * each identity one slot of it, recorded in the store (records_identity_slot) so that every
 * manager sharing the store gives the same ids, and never given back: the identity's files keep
 * them. Slot k is uid START+1+k and gid START+1+k; START itself is the manager's volume probe's. */
#include "identity_ids.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <inttypes.h>
#include <pwd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cleanup.h"
#include "clock.h"
#include "log.h"
#include "manager.h"
#include "pathfmt.h"
#include "textesc.h"

/* Above every range the Linux conventions hand out (system, regular and systemd's dynamic users
 * below 65536; useradd's subordinate ranges from 100000 up; systemd-nspawn's container ranges up
 * to 0x6FFFFFFF) and below 2^31, where some tools read ids as signed. */
#define IDENTITY_IDS_DEFAULT_START 1879048192UL /* 0x70000000 */
#define IDENTITY_IDS_DEFAULT_COUNT 65536UL
#define ID_MAX_VALID 4294967294UL /* (uid_t)-1 means "no id" to chown and setresuid */

static bool in_range(const struct config *c, unsigned long id, bool gid)
{
	unsigned long start = gid ? c->ids_gid : c->ids_uid;

	return id >= start && id - start < c->ids_count;
}

/* A range START:COUNT for uids (gid false) or gids: never an id below 1000 (the system's), nobody
 * (65534) or 65535 (the 16-bit "no id"), nor past ID_MAX_VALID. */
int identity_ids_range_valid(unsigned long start, unsigned long count, const char *from, struct sb_err *err)
{
	if (count < 2 || count > ID_MAX_VALID || start > ID_MAX_VALID - count + 1)
		return sb_invalid(err, "config: sandbox-ids %s: COUNT must be at least 2 (the manager's probe and "
				  "one identity) and START+COUNT-1 at most %lu", from, ID_MAX_VALID);
	if (start < 1000 || (start <= 65535 && start + count > 65534))
		return sb_invalid(err, "config: sandbox-ids %s: the range must hold no id below 1000 (the system's), "
				  "nor 65534 (nobody) or 65535: each identity gets ids no one else has", from);
	return 0;
}

static int number(const char *s, char **end, unsigned long *out)
{
	errno = 0;
	*out = strtoul(s, end, 10);
	return s[0] < '0' || s[0] > '9' || errno != 0 ? -1 : 0;
}

int identity_ids_parse(struct config *c, const char *value, struct sb_err *err)
{
	unsigned long start, count;
	char *end;

	if (number(value, &end, &start) < 0 || *end != ':' || number(end + 1, &end, &count) < 0 || *end != '\0')
		return sb_invalid(err, "config: sandbox-ids must be START:COUNT (whole numbers), not '%.100s'", value);
	if (identity_ids_range_valid(start, count, value, err) < 0)
		return -1;
	c->ids_uid = (uid_t)start;
	c->ids_gid = (gid_t)start;
	c->ids_count = count;
	snprintf(c->ids_from, sizeof c->ids_from, "sandbox-ids %lu:%lu", start, count);
	return 0;
}

/* root's entry ("root" or "0") of a subordinate id file: 1 found, 0 none, -1 err. */
static int subid_root(const char *file, unsigned long *start, unsigned long *count, struct sb_err *err)
{
	cleanup_fclose FILE *f = fopen(file, "re");
	char line[512], *end;

	if (f == NULL)
		return errno == ENOENT ? 0 : sb_fail_errno(err, "reading %s", file);
	while (fgets(line, sizeof line, f) != NULL) {
		char *colon = strchr(line, ':');

		if (colon == NULL || (strncmp(line, "root:", 5) != 0 && strncmp(line, "0:", 2) != 0))
			continue;
		if (number(colon + 1, &end, start) == 0 && *end == ':' && number(end + 1, &end, count) == 0)
			return 1;
	}
	return 0;
}

int identity_ids_default(struct config *c, struct sb_err *err)
{
	unsigned long us, uc, gs, gc;
	int has_u, has_g;

	if (geteuid() != 0 || c->ids_count != 0)
		return 0;
	has_u = subid_root("/etc/subuid", &us, &uc, err);
	has_g = has_u == 1 ? subid_root("/etc/subgid", &gs, &gc, err) : 0;
	if (has_u < 0 || has_g < 0)
		return -1;
	if (c->ids_subuid && (has_u != 1 || has_g != 1))
		return sb_invalid(err, "config: sandbox-ids subuid: root has no entry in /etc/subuid and /etc/subgid "
				  "(give a range START:COUNT, or leave sandbox-ids out for the default)");
	if (has_u == 1 && has_g == 1) {
		unsigned long count = uc < gc ? uc : gc;

		snprintf(c->ids_from, sizeof c->ids_from, "root's /etc/subuid and /etc/subgid entries");
		if (identity_ids_range_valid(us, count, "(root's /etc/subuid entry)", err) < 0 ||
		    identity_ids_range_valid(gs, count, "(root's /etc/subgid entry)", err) < 0)
			return -1;
		c->ids_uid = (uid_t)us;
		c->ids_gid = (gid_t)gs;
		c->ids_count = count;
		return 0;
	}
	c->ids_uid = (uid_t)IDENTITY_IDS_DEFAULT_START;
	c->ids_gid = (gid_t)IDENTITY_IDS_DEFAULT_START;
	c->ids_count = IDENTITY_IDS_DEFAULT_COUNT;
	snprintf(c->ids_from, sizeof c->ids_from, "the default sandbox-ids %lu:%lu", IDENTITY_IDS_DEFAULT_START,
		 IDENTITY_IDS_DEFAULT_COUNT);
	return 0;
}

/* ---------------------------------------------------------------- the start-up check */

static int refuse(const struct config *c, struct sb_err *err, const char *what)
{
	return sb_refuse(err, EEXIST, "sandbox ids refused: %s; the range (%s: uids %lu.., gids %lu.., %lu each) "
		       "must be no one else's: choose another with sandbox-ids START:COUNT", what, c->ids_from,
		       (unsigned long)c->ids_uid, (unsigned long)c->ids_gid, c->ids_count);
}

/* Local accounts only: a directory service (NSS) may be large or away, and is the operator's to
 * keep apart (docs/operations.md). */
static int accounts_check(const struct config *c, struct sb_err *err)
{
	cleanup_fclose FILE *pw = fopen("/etc/passwd", "re");
	cleanup_fclose FILE *gr = fopen("/etc/group", "re");
	char what[300];
	struct passwd *p;
	struct group *g;

	/* Fail closed: an account list that cannot be read cannot say the range is nobody's. */
	if (pw == NULL || gr == NULL)
		return sb_fail_errno(err, "sandbox-ids: reading %s to check the range is no account's",
				     pw == NULL ? "/etc/passwd" : "/etc/group");
	while ((p = fgetpwent(pw)) != NULL)
		if (in_range(c, p->pw_uid, false) || in_range(c, p->pw_gid, true)) {
			snprintf(what, sizeof what, "user %.64s (/etc/passwd) has uid %u, gid %u", p->pw_name,
				 (unsigned)p->pw_uid, (unsigned)p->pw_gid);
			return refuse(c, err, what);
		}
	while ((g = fgetgrent(gr)) != NULL)
		if (in_range(c, g->gr_gid, true)) {
			snprintf(what, sizeof what, "group %.64s (/etc/group) has gid %u", g->gr_name, (unsigned)g->gr_gid);
			return refuse(c, err, what);
		}
	return 0;
}

/* Another user's subordinate range that overlaps ours: its containers would share our ids. root's
 * own entry is where a range may come from (identity_ids_default). */
static int subid_check(const struct config *c, const char *file, bool gid, struct sb_err *err)
{
	cleanup_fclose FILE *f = fopen(file, "re");
	unsigned long ours = gid ? c->ids_gid : c->ids_uid, start, count;
	char line[512], what[700], *end;

	if (f == NULL)
		return errno == ENOENT ? 0 : sb_fail_errno(err, "reading %s", file);
	while (fgets(line, sizeof line, f) != NULL) {
		char *colon = strchr(line, ':');

		if (colon == NULL || strncmp(line, "root:", 5) == 0 || strncmp(line, "0:", 2) == 0 ||
		    number(colon + 1, &end, &start) < 0 || *end != ':' || number(end + 1, &end, &count) < 0)
			continue;
		if (start < ours + c->ids_count && ours < start + count) {
			line[strcspn(line, "\n")] = '\0';
			snprintf(what, sizeof what, "%s gives another user the overlapping range '%.200s'", file, line);
			return refuse(c, err, what);
		}
	}
	return 0;
}

/* "Uid:" or "Gid:" of /proc/PID/status, its four ids (real, effective, saved, filesystem). */
static bool status_ids_in_range(const struct config *c, const char *status, const char *key, bool gid,
				unsigned long *hit)
{
	const char *p = strstr(status, key);
	char *end;

	if (p == NULL)
		return false;
	p += strlen(key);
	for (int i = 0; i < 4; i++, p = end) {
		unsigned long id = strtoul(p, &end, 10);

		if (end == p)
			return false;
		if (in_range(c, id, gid)) {
			*hit = id;
			return true;
		}
	}
	return false;
}

/* Whether the status (of /proc/PID/status, world-readable) is of a process in a PID namespace below
 * the reader's: "NSpid:" then its pid in each namespace from the reader's down, so more than one.
 * Asked of the status, not of /proc/PID/ns/ (which needs ptrace rights a manager in its user
 * namespace has not over another one's sandboxes). */
static bool nested_pid_ns(const char *status)
{
	const char *p = strstr(status, "\nNSpid:");
	int n = 0;

	if (p == NULL)
		return false;
	for (p += 7; *p != '\0' && *p != '\n'; p++)
		if ((p[0] == ' ' || p[0] == '\t') && p[1] >= '0' && p[1] <= '9')
			n++;
	return n > 1;
}

/* A process of the host (the manager's PID namespace) running with an id of the range. The
 * manager's own sandboxes, kept across its restart, are in PID namespaces of their own (the process
 * backend's, podman's containers, a node's pods), and are not refused. */
static int process_check(const struct config *c, struct sb_err *err)
{
	cleanup_closedir DIR *proc = opendir("/proc");
	struct dirent *de;
	char path[64], status[4096], what[256];
	unsigned long id;

	if (proc == NULL)
		return sb_fail_errno(err, "listing the host's processes (/proc)");
	while ((de = readdir(proc)) != NULL) {
		cleanup_fclose FILE *f = NULL;
		cleanup_free char *name = NULL;
		size_t n;

		if (de->d_name[0] < '1' || de->d_name[0] > '9')
			continue;
		snprintf(path, sizeof path, "/proc/%.20s/status", de->d_name);
		if ((f = fopen(path, "re")) == NULL)
			continue; /* gone meanwhile */
		n = fread(status, 1, sizeof status - 1, f);
		status[n] = '\0';
		if (n == 0)
			continue;
		if (!status_ids_in_range(c, status, "\nUid:", false, &id) &&
		    !status_ids_in_range(c, status, "\nGid:", true, &id))
			continue;
		if (nested_pid_ns(status))
			continue;
		/* "Name:\tcomm\n" leads the status: the process's own name, so never printed raw. */
		status[strncmp(status, "Name:\t", 6) == 0 ? 6 + strcspn(status + 6, "\n") : 0] = '\0';
		name = textesc_str(status[0] ? status + 6 : "?");
		snprintf(what, sizeof what, "process %.20s (%.64s) of the host runs with id %lu", de->d_name,
			 name ? name : "?", id);
		return refuse(c, err, what);
	}
	return 0;
}

/* Where other users leave files: the entries directly in these. A full scan of the host is not
 * possible at every start; the volume and the state dir are the manager's own. */
static const char *const ids_places[] = { "/", "/tmp", "/var/tmp", "/dev/shm", "/run", "/home", "/var/lib", NULL };

static int files_check(const struct config *c, struct sb_err *err)
{
	for (size_t i = 0; ids_places[i] != NULL; i++) {
		cleanup_closedir DIR *d = opendir(ids_places[i]);
		struct dirent *de;
		struct stat st;
		char what[600];

		while (d != NULL && (de = readdir(d)) != NULL) {
			if (fstatat(dirfd(d), de->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0 ||
			    (!in_range(c, st.st_uid, false) && !in_range(c, st.st_gid, true)))
				continue;
			snprintf(what, sizeof what, "%s%s%.255s belongs to uid %u, gid %u", ids_places[i],
				 i == 0 ? "" : "/", de->d_name, (unsigned)st.st_uid, (unsigned)st.st_gid);
			return refuse(c, err, what);
		}
	}
	return 0;
}

int identity_ids_walkable(const char *path, struct sb_err *err)
{
	char prefix[PATH_MAX];
	struct stat st;

	if (path_fmt(prefix, sizeof prefix, err, "%s", path) < 0)
		return -1;
	for (char *slash = prefix; slash != NULL; slash = strchr(slash + 1, '/')) {
		char keep = slash[1];

		slash[1] = '\0';
		if (stat(prefix, &st) == 0 && !(st.st_mode & (st.st_uid == 0 ? S_IXUSR : 0)) &&
		    !(st.st_mode & (st.st_gid == 0 ? S_IXGRP : 0)) && !(st.st_mode & S_IXOTH))
			return sb_fail(err, EACCES, "a sandbox's init walks to its worktree as uid 0 without "
				       "capabilities and cannot search %s: make it searchable (chmod o+x) or choose "
				       "another state directory or volume", prefix);
		slash[1] = keep;
	}
	return 0;
}

int identity_ids_check(const struct config *c, struct sb_err *err)
{
	if (geteuid() != 0) {
		sb_warn("every identity's sandboxes run as this manager's own uid %u (an unprivileged manager maps only "
			"its own ids): between identities stand the mount view and Landlock, not a uid; `sandbox-ids "
			"subuid` gives each identity ids of its own from this user's /etc/subuid and /etc/subgid entries%s%s",
			(unsigned)geteuid(), c->ids_from[0] ? "; not the default here: " : "", c->ids_from);
		return 0;
	}
	/* The user's own subordinate ids, through newuidmap: the system gave them to this user alone,
	 * and accounts or other users' entries name host ids, not this namespace's. */
	if (!c->ids_userns && (accounts_check(c, err) < 0 || subid_check(c, "/etc/subuid", false, err) < 0 ||
				     subid_check(c, "/etc/subgid", true, err) < 0))
		return -1;
	if (process_check(c, err) < 0 || files_check(c, err) < 0)
		return -1;
	return 0;
}

/* ---------------------------------------------------------------- an identity's ids */

int identity_ids_of(void *manager, const char *identity, struct workspace_owner *out, struct sb_err *err)
{
	struct manager *m = manager;
	int64_t slot = 0;
	int rc;

	if (workspace_name_check("identity", identity, err) < 0)
		return -1;
	if (geteuid() != 0) {
		*out = (struct workspace_owner){ m->cfg.sandbox_uid, m->cfg.sandbox_gid };
		return 0;
	}
	rc = records_identity_slot(m->rec, identity, (int64_t)m->cfg.ids_count - 1, clock_real_ms(), &slot, err);
	if (rc != RECORDS_FOUND)
		return -1; /* err says why: the store, or the range used up */
	if (slot < 0 || (uint64_t)slot >= m->cfg.ids_count - 1)
		return sb_fail(err, ERANGE, "identity %s has slot %" PRId64 " of the records, outside this manager's "
			       "range (%s): every manager of one store needs the same sandbox-ids", identity, slot,
			       m->cfg.ids_from);
	out->uid = m->cfg.ids_uid + 1 + (uid_t)slot;
	out->gid = m->cfg.ids_gid + 1 + (gid_t)slot;
	return 0;
}

struct workspace_owner identity_ids_probe(const struct config *c)
{
	if (geteuid() != 0)
		return (struct workspace_owner){ c->sandbox_uid, c->sandbox_gid };
	return (struct workspace_owner){ c->ids_uid, c->ids_gid };
}
