/* The agent's private directory and command line, shared by every backend (agent_dir.h). */
#include "agent_dir.h"

#include <errno.h>
#include <fcntl.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/un.h>
#include <unistd.h>

#include "clock.h"
#include "fstree.h"
#include "log.h"
#include "pathfmt.h"

/* The agent refuses a key, state or socket directory that is not its own (serve.c): say so here,
 * before anything starts. owner: the host uid the directory must belong to (the manager's for
 * the private directory itself, the sandbox's for what is mounted into it). */
static int private_subdir(const char *dir, bool create, uid_t owner, struct sb_err *err)
{
	struct stat st;

	if (create && mkdir(dir, 0700) < 0 && errno != EEXIST)
		return sb_fail_errno(err, "creating %s", dir);
	if (lstat(dir, &st) < 0)
		return sb_fail_errno(err, "%s", dir);
	if (!S_ISDIR(st.st_mode) || st.st_uid != owner || (st.st_mode & 022) != 0)
		return sb_fail(err, EPERM, "%s must be a directory owned by uid %u and not writable by group or "
			       "others: the agent keeps its keys, receipts and socket there", dir, (unsigned)owner);
	return 0;
}

/* Hand one tree to the sandbox's uid, by descriptor (fstree.c, rule R3): a command of another
 * sandbox of the same identity writes the shared objects/, refs/ and logs/ while this runs, and
 * may swap any directory in them for a link; the walk never follows one, never crosses a mount.
 * at/path is the start, opened with no symbolic link anywhere on the way. */
static int hand_tree(const struct agent_dir *d, int at, const char *path, const char *shown, struct sb_err *err)
{
	struct fstree_report rep = { 0 };
	int fd = fstree_open_dir(at, path, err);
	int rc;

	if (fd < 0)
		rc = -1;
	else
		rc = fstree_chown_beneath(fd, d->host_uid, d->host_gid, &rep, err);
	if (fd >= 0)
		close(fd);
	if (rc < 0) {
		sb_err_prefix(err, "handing %s to the sandbox's uid %u", shown, (unsigned)d->host_uid);
		return -1;
	}
	if (rep.hardlinked > 0)
		sb_warn("%s: %zu file(s) with a second name left to their owner (a hard link may lead outside)",
			shown, rep.hardlinked);
	if (rep.mounts > 0)
		sb_warn("%s: %zu mount point(s) inside not handed over", shown, rep.mounts);
	return 0;
}

/* When the sandbox runs as another uid than the manager (a root manager: backend.h), hand it
 * what it must write: the plan's writable entries and its own tls/, state/ and sock/. The private
 * directory itself stays the manager's, searchable (0711) so the sandbox can walk to those three.
 *
 * Why the starts are trusted paths: each plan source is canonical (mount_plan.c builds it from the
 * realpath'd volume) and lies in the identity's repositories/ or workspaces/, whose every
 * ancestor no sandbox can write: the common git dir above objects/, refs/, logs/,
 * packed-refs.d/ and worktrees/<name> is bound read-only, workspaces/ is never mounted, and the
 * volume probe's directory sits in the volume itself. The private directory is the manager's
 * (0711, in its state directory). So no command can rename a component on the way, and
 * fstree_open_dir refuses a symbolic link anywhere on it regardless. */
static int hand_over(const struct agent_dir *d, const struct sandbox_spec *spec, struct sb_err *err)
{
	static const char *const own[3] = { "tls", "state", "sock" };
	int priv, rc = 0;

	if (d->host_uid == geteuid())
		return 0;
	for (size_t i = 0; i < spec->plan->n && rc == 0; i++)
		if (spec->plan->entries[i].mode == MOUNT_RW)
			rc = hand_tree(d, AT_FDCWD, spec->plan->entries[i].source, spec->plan->entries[i].source, err);
	if (rc < 0)
		return -1;
	priv = fstree_open_dir(AT_FDCWD, d->private_dir, err);
	if (priv < 0)
		return -1;
	if (fchmod(priv, 0711) < 0)
		rc = sb_fail_errno(err, "making %s searchable for the sandbox", d->private_dir);
	for (int i = 0; i < 3 && rc == 0; i++) {
		if (mkdirat(priv, own[i], 0700) < 0 && errno != EEXIST)
			rc = sb_fail_errno(err, "creating %s/%s", d->private_dir, own[i]);
		else
			rc = hand_tree(d, priv, own[i], i == 0 ? d->tls : i == 1 ? d->state : d->sock_dir, err);
	}
	close(priv);
	return rc;
}

static int dir_paths(struct agent_dir *d, const struct sandbox_spec *spec, struct sb_err *err)
{
	if (realpath(spec->private_dir, d->private_dir) == NULL)
		return sb_fail_errno(err, "private directory %s", spec->private_dir);
	if (spec->credentials_dir != NULL && realpath(spec->credentials_dir, d->credentials) == NULL)
		return sb_fail_errno(err, "credentials directory %s", spec->credentials_dir);
	if (path_fmt(d->tls, sizeof d->tls, err, "%s/tls", d->private_dir) < 0 ||
	    path_fmt(d->state, sizeof d->state, err, "%s/state", d->private_dir) < 0 ||
	    path_fmt(d->sock_dir, sizeof d->sock_dir, err, "%s/sock", d->private_dir) < 0 ||
	    path_fmt(d->sock, sizeof d->sock, err, "%s/agent.sock", d->sock_dir) < 0 ||
	    path_fmt(d->listen, sizeof d->listen, err, "unix:%s", d->sock) < 0 ||
	    path_fmt(d->cert, sizeof d->cert, err, "%s/agent.crt", d->tls) < 0 ||
	    path_fmt(d->key, sizeof d->key, err, "%s/agent.key", d->tls) < 0 ||
	    path_fmt(d->ca, sizeof d->ca, err, "%s/ca.crt", d->tls) < 0 ||
	    path_fmt(d->log, sizeof d->log, err, "%s/agent.log", d->private_dir) < 0)
		return -1;
	if (strlen(d->sock) >= sizeof(((struct sockaddr_un *)0)->sun_path))
		return sb_fail(err, ENAMETOOLONG, "the agent's socket path %s is longer than a unix socket allows "
			       "(%zu bytes): use a shorter private directory", d->sock,
			       sizeof(((struct sockaddr_un *)0)->sun_path) - 1);
	return 0;
}

static void dir_command(struct agent_dir *d, const struct sandbox_spec *spec)
{
	const char *level = getenv("SANDBOX_LOG_LEVEL");
	const char *timing = getenv("SANDBOX_AGENT_TIMING");
	size_t i = 0, e = 0;

	snprintf(d->generation, sizeof d->generation, "%llu", (unsigned long long)spec->generation);
	d->argv[i++] = "sandbox-agent";
	d->argv[i++] = "serve";
	d->argv[i++] = "--listen";
	d->argv[i++] = d->listen;
	d->argv[i++] = "--tls-cert";
	d->argv[i++] = d->cert;
	d->argv[i++] = "--tls-key";
	d->argv[i++] = d->key;
	d->argv[i++] = "--tls-ca";
	d->argv[i++] = d->ca;
	d->argv[i++] = "--manager-name";
	d->argv[i++] = (char *)spec->manager_name;
	d->argv[i++] = "--state-dir";
	d->argv[i++] = d->state;
	d->argv[i++] = "--generation";
	d->argv[i++] = d->generation;
	d->argv[i] = NULL;
	/* A minimal, explicit environment: nothing of the manager's leaks in (commands get theirs
	 * from each Exec anyway). */
	d->envp[e++] = "PATH=" AGENT_SANDBOX_PATH;
	d->envp[e++] = "LANG=C.UTF-8";
	if (level != NULL && strlen(level) < 32) {
		snprintf(d->env_log_level, sizeof d->env_log_level, "SANDBOX_LOG_LEVEL=%s", level);
		d->envp[e++] = d->env_log_level;
	}
	/* The agent's step clock (a diagnostic: timestamps only, one line per exec in its log) follows
	 * the manager's own switch, so `make bench` can say where a served call's time goes. */
	if (timing != NULL && strcmp(timing, "1") == 0)
		d->envp[e++] = "SANDBOX_AGENT_TIMING=1";
	d->envp[e] = NULL;
}

int agent_dir_prepare(struct agent_dir *d, const struct sandbox_spec *spec, struct sb_err *err)
{
	struct stat st;

	d->host_uid = spec->host_uid;
	d->host_gid = spec->host_gid;
	if (d->host_uid == 0 || d->host_gid == 0)
		return sb_fail(err, EPERM, "a sandbox never runs as host root: give it an unprivileged uid and gid");
	if (dir_paths(d, spec, err) < 0 || hand_over(d, spec, err) < 0)
		return -1;
	if (private_subdir(d->private_dir, false, geteuid(), err) < 0 ||
	    private_subdir(d->tls, false, d->host_uid, err) < 0 || private_subdir(d->state, true, d->host_uid, err) < 0 ||
	    private_subdir(d->sock_dir, true, d->host_uid, err) < 0)
		return -1;
	/* A socket left by an earlier generation must not answer for this one. */
	if (lstat(d->sock, &st) == 0 && S_ISSOCK(st.st_mode) && unlink(d->sock) < 0)
		return sb_fail_errno(err, "removing the stale socket %s", d->sock);
	dir_command(d, spec);
	return 0;
}

/* A bare connect is not enough: the agent listens only once it has loaded its keys and checked the
 * kernel (serve.c), but it may still exit after a connect succeeded. So the probe connects and
 * half-closes without a byte (no TLS: the core speaks TLS), and waits for the agent's own end of
 * file: its TLS layer reads ours and closes, which only a serving agent's connection thread does.
 * A listener that closes with the connection still queued resets it (ECONNRESET) instead. */
static int serving_probe(int fd, const struct sockaddr *sa, socklen_t len, int64_t deadline)
{
	struct pollfd p = { .fd = fd, .events = POLLIN };
	char byte;
	int serving;

	if (connect(fd, sa, len) < 0 || shutdown(fd, SHUT_WR) < 0) {
		close(fd);
		return 0;
	}
	while (poll(&p, 1, clock_remaining_ms(deadline)) < 0 && errno == EINTR) {
	}
	serving = p.revents != 0 && read(fd, &byte, 1) == 0;
	close(fd);
	return serving ? 1 : 0;
}

int agent_serving(const char *path, int64_t deadline)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	struct sb_err cut;

	if (fd < 0)
		return 0;
	/* A cut path would probe another socket: refused (agent_dir_prepare already checks it). */
	if (path_fmt(sa.sun_path, sizeof sa.sun_path, &cut, "%s", path) < 0) {
		close(fd);
		return 0;
	}
	return serving_probe(fd, (struct sockaddr *)&sa, sizeof sa, deadline);
}

int agent_serving_inet(const char *ipv4, uint16_t port, int64_t deadline)
{
	struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = htons(port) };
	struct timeval tv = { .tv_sec = 1 };
	int fd;

	if (inet_pton(AF_INET, ipv4, &sa.sin_addr) != 1)
		return 0;
	fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return 0;
	/* connect() is bounded by the send timeout on Linux: an unreachable address costs a second. */
	if (setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv) < 0) {
		close(fd);
		return 0;
	}
	return serving_probe(fd, (struct sockaddr *)&sa, sizeof sa, deadline);
}
