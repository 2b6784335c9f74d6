/* `sandbox-manager serve`: the daemon. Start-up order matters and each step says why; then one
 * thread per control connection. A connection's peer must be this manager's own uid (or root):
 * the socket's mode is the first fence, SO_PEERCRED the second. SIGTERM and SIGINT stop it with
 * evidence (daemon_stop): never leaving a sandbox running behind it unsaid. */
#include "manager.h"

#include <errno.h>
#include <fcntl.h>
#include <malloc.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "clock.h"
#include "control.h"
#include "fdio.h"
#include "log.h"
#include "metrics.h"
#include "metrics_http.h"
#include "pathfmt.h"
#include "status.h"
#include "thread.h"
#include "workspace.h"

/* The manager's private state: nothing in it is readable or writable by others. Under a root
 * manager it is 0711 (search only) because each sandbox's init, running as an unprivileged uid,
 * walks through it to its own directory (sandboxes/<id>/); the CA key, the records and the
 * manager's key sit in 0700 directories and 0600 files below. */
static int dir_private(const char *path, struct sb_err *err)
{
	mode_t mode = geteuid() == 0 ? 0711 : 0700;
	struct stat st;

	if (mkdir(path, mode) < 0 && errno != EEXIST)
		return sb_fail_errno(err, "creating %s", path);
	if (stat(path, &st) < 0)
		return sb_fail_errno(err, "checking %s", path);
	if (st.st_uid != geteuid() || (st.st_mode & 066) != 0)
		return sb_fail(err, EPERM, "%s holds the manager's records and keys: it must be owned by uid %u and "
			       "neither readable nor writable by others (mode 0700, or 0711 under root)", path,
			       (unsigned)geteuid());
	if ((st.st_mode & 0777) != mode && chmod(path, mode) < 0)
		return sb_fail_errno(err, "setting %s to mode %o", path, (unsigned)mode);
	return 0;
}

/* ---- one manager per state dir ----
 * Two managers on one state dir would each take the other's sandboxes for leftovers of a crash
 * and kill them, rebind the socket and write one records.db. The claim is a POSIX record lock
 * (fcntl F_SETLK) on <state-dir>/manager.lock, taken before anything reads or changes the state.
 * A record lock belongs to the process: a fork or clone never inherits it (no sandbox init, git
 * child or agent can keep it after the manager), and the kernel drops it when the process ends,
 * however it ends, so a crash leaves no stale claim. The descriptor is close-on-exec and never
 * closed (closing any descriptor of the file would drop the lock); nothing else opens the file.
 * The holder's pid is written into the file for operators; the message asks the kernel first. */
#define STATE_LOCK_NAME "manager.lock"
#define STATE_IN_USE 1

static int state_lock_fd = -1;

static long lock_holder(int fd)
{
	struct flock fl = { .l_type = F_WRLCK, .l_whence = SEEK_SET };
	char text[32];
	ssize_t n;

	if (fcntl(fd, F_GETLK, &fl) == 0 && fl.l_type != F_UNLCK && fl.l_pid > 0)
		return (long)fl.l_pid;
	/* Held from another pid namespace: the pid the holder wrote, as it sees itself. */
	n = pread(fd, text, sizeof text - 1, 0);
	if (n <= 0)
		return -1;
	text[n] = '\0';
	return strtol(text, NULL, 10);
}

/* 0: the state dir is this process's for its life; STATE_IN_USE: another live manager holds it
 * (err says which pid); -1: err. */
static int state_lock(const char *state_dir, struct sb_err *err)
{
	struct flock fl = { .l_type = F_WRLCK, .l_whence = SEEK_SET };
	char path[PATH_MAX + sizeof STATE_LOCK_NAME + 1], text[32];
	int fd, n;

	if (path_fmt(path, sizeof path, err, "%s/" STATE_LOCK_NAME, state_dir) < 0)
		return -1;
	fd = fd_private_open(path, err);
	if (fd < 0) {
		sb_err_prefix(err, "the state dir's lock");
		return -1;
	}
	if (fcntl(fd, F_SETLK, &fl) < 0) {
		int e = errno;
		long pid = e == EAGAIN || e == EACCES ? lock_holder(fd) : 0;

		close(fd);
		errno = e;
		if (e != EAGAIN && e != EACCES)
			return sb_fail_errno(err, "locking %s", path);
		if (pid > 0)
			sb_fail(err, EBUSY, "state dir %s is in use by pid %ld", state_dir, pid);
		else
			sb_fail(err, EBUSY, "state dir %s is in use by another manager (its pid is unknown)", state_dir);
		return STATE_IN_USE;
	}
	n = snprintf(text, sizeof text, "%ld\n", (long)getpid());
	if (ftruncate(fd, 0) < 0 || pwrite(fd, text, (size_t)n, 0) != n) {
		sb_fail_errno(err, "writing the pid into %s", path);
		close(fd);
		return -1;
	}
	state_lock_fd = fd;
	return 0;
}

/* The manager's own client certificate, issued fresh at every start (short-lived). */
static int manager_tls(struct manager *m, struct sb_err *err)
{
	struct ca_leaf leaf = { .dns_name = CA_MANAGER_NAME, .usage = CA_USAGE_CLIENT };
	char ca_dir[PATH_MAX + 8];

	/* A truncated path would name another directory: an error, never a shorter path. */
	if ((size_t)snprintf(ca_dir, sizeof ca_dir, "%s/ca", m->cfg.state_dir) >= sizeof ca_dir ||
	    (size_t)snprintf(m->tls_dir, sizeof m->tls_dir, "%s/tls", m->cfg.state_dir) >= sizeof m->tls_dir)
		return sb_fail(err, ENAMETOOLONG, "the state directory %s is too long for its tls/ and ca/ paths",
			       m->cfg.state_dir);
	if (ca_open(ca_dir, &m->ca, err) < 0 || dir_private(m->tls_dir, err) < 0)
		return -1;
	if (ca_issue_leaf(m->ca, &leaf, m->tls_dir, "manager", err) < 0)
		return -1;
	return ca_write_cert(m->ca, m->tls_dir, "ca.crt", err);
}

/* Under a root manager each sandbox's init runs as the sandbox uid and must walk from / to its
 * worktree and its private directory: say at start, not at the first call, when it cannot. */
static int walkable_check(const char *path, uid_t uid, struct sb_err *err)
{
	char prefix[PATH_MAX];
	struct stat st;

	snprintf(prefix, sizeof prefix, "%s", path);
	for (char *slash = prefix; slash != NULL; slash = strchr(slash + 1, '/')) {
		char keep = slash[1];

		slash[1] = '\0';
		if (stat(prefix, &st) == 0 && st.st_uid != uid && !(st.st_mode & S_IXOTH))
			return sb_fail(err, EACCES, "sandboxes run as uid %u and cannot search %s: make it searchable "
				       "(chmod o+x) or choose another state directory or volume", (unsigned)uid, prefix);
		slash[1] = keep;
	}
	return 0;
}

static int backend_make(struct manager *m, struct sb_err *err)
{
	struct podman_settings set = { 0 };

	if (strcmp(m->cfg.backend, "kubernetes") == 0) {
		struct kubernetes_settings ks = {
			.nano_cpus = m->cfg.sandbox_nano_cpus, .memory_bytes = m->cfg.sandbox_memory_mib * 1024 * 1024,
			.pids = m->cfg.sandbox_pids, .tmp_bytes = m->cfg.tmp_bytes, .shm_bytes = m->cfg.shm_bytes,
		};

		if (path_fmt(ks.kubeconfig, sizeof ks.kubeconfig, err, "%s", m->cfg.kubeconfig) < 0 ||
		    path_fmt(ks.namespace, sizeof ks.namespace, err, "%s", m->cfg.k8s_namespace) < 0 ||
		    path_fmt(ks.image, sizeof ks.image, err, "%s", m->cfg.image) < 0 ||
		    path_fmt(ks.volume_dir, sizeof ks.volume_dir, err, "%s", m->cfg.k8s_volume + strlen("hostpath:")) < 0 ||
		    path_fmt(ks.manager_volume, sizeof ks.manager_volume, err, "%s", m->cfg.volume) < 0)
			return -1;
		return backend_kubernetes_create(&m->backend, &ks, err);
	}
	if (strcmp(m->cfg.backend, "podman") != 0) {
		struct process_settings ps = {
			.tmp_bytes = m->cfg.tmp_bytes, .shm_bytes = m->cfg.shm_bytes,
			.memory_bytes = m->cfg.sandbox_memory_mib * 1024 * 1024, .pids = m->cfg.sandbox_pids,
			.nano_cpus = m->cfg.sandbox_nano_cpus,
		};

		if (path_fmt(ps.cgroup_parent, sizeof ps.cgroup_parent, err, "%s", m->cfg.cgroup_parent) < 0)
			return -1;
		return backend_process_create_with(&m->backend, &ps, err);
	}
	snprintf(set.socket, sizeof set.socket, "%s", m->cfg.podman_socket);
	snprintf(set.image, sizeof set.image, "%s", m->cfg.image);
	snprintf(set.seccomp, sizeof set.seccomp, "%s", m->cfg.podman_seccomp);
	snprintf(set.network, sizeof set.network, "%s", m->cfg.podman_network);
	set.nano_cpus = m->cfg.sandbox_nano_cpus;
	set.memory_bytes = m->cfg.sandbox_memory_mib * 1024 * 1024;
	set.pids = m->cfg.sandbox_pids;
	set.tmp_bytes = m->cfg.tmp_bytes;
	set.shm_bytes = m->cfg.shm_bytes;
	return backend_podman_create(&m->backend, &set, err);
}

static int manager_start(struct manager *m, struct sb_err *err)
{
	char db[PATH_MAX + 16];

	pthread_mutex_init(&m->lock, NULL);
	if (mkdir(m->cfg.volume, 0755) < 0 && errno != EEXIST)
		return sb_fail_errno(err, "creating the volume %s", m->cfg.volume);
	/* The volume must do what git and the records rely on, or nothing it holds is safe. */
	if (volume_probe(m->cfg.volume, err) < 0)
		return -1;
	if (geteuid() == 0 && (walkable_check(m->cfg.state_dir, m->cfg.sandbox_uid, err) < 0 ||
			       walkable_check(m->cfg.volume, m->cfg.sandbox_uid, err) < 0))
		return -1;
	if (path_fmt(db, sizeof db, err, "%s/records.db", m->cfg.state_dir) < 0 || records_open(db, &m->rec, err) < 0)
		return -1;
	records_set_output_limit(m->rec, m->cfg.record_output_limit);
	if (manager_tls(m, err) < 0)
		return -1;
	m->queue = queue_new();
	if (m->queue == NULL)
		return sb_fail(err, ENOMEM, "creating the queue");
	if (backend_make(m, err) < 0 || sandbox_volume_probe(m, err) < 0)
		return -1;
	/* Before the first call: what a previous run left in flight is settled, never rerun. */
	return recovery_run(m, err);
}

/* peer: the connection's uid (SO_PEERCRED), for the ops that record who asked. */
static json_t *dispatch(struct manager *m, json_t *req, uid_t peer)
{
	const char *op = json_string_value(json_object_get(req, "op"));
	const char *session = json_string_value(json_object_get(req, "session"));

	if (op == NULL)
		return control_error("invalid", "the request names no op");
	if (strcmp(op, "exec") == 0)
		return execpath_run(m, req);
	if (strcmp(op, "session.create") == 0)
		return sessions_create(m, req);
	if (strcmp(op, "session.show") == 0)
		return sessions_show(m, session);
	if (strcmp(op, "session.delete") == 0)
		return sessions_delete(m, session, json_is_true(json_object_get(req, "delete_branch")));
	if (strcmp(op, "session.list") == 0)
		return pages_sessions(m, req);
	if (strcmp(op, "cancel") == 0)
		return session == NULL ? control_error("invalid", "cancel needs a session") :
					 cancel_call(m, session, json_string_value(json_object_get(req, "tag")));
	if (strcmp(op, "grant") == 0)
		return sessions_grant(m, req);
	if (strcmp(op, "records") == 0)
		return pages_records(m, req);
	if (strcmp(op, "status") == 0)
		return status_answer(m);
	if (strcmp(op, "metrics") == 0)
		return status_metrics_answer(m);
	if (strcmp(op, "resolve") == 0)
		return resolve_answer(m, req, peer);
	if (strcmp(op, "config") == 0)
		return json_pack("{s:b, s:i, s:i, s:s}", "ok", 1, "default_timeout_seconds", m->cfg.default_timeout,
				 "max_timeout_seconds", m->cfg.max_timeout, "backend", m->cfg.backend);
	return control_error("invalid", "unknown op '%s'", op);
}

/* ---- control connections, bounded ----
 * One thread per connection (docs/architecture.md "Threading model"). What a client that stalls
 * can hold is bounded four ways, none of which a well-behaved client meets:
 *  - a connection must start its first request within CONN_FIRST_REQUEST_MS of being accepted
 *    (the CLI and `mcp` send theirs at once: they connect per call);
 *  - a request, once its first byte arrived, must arrive whole within CONN_FRAME_MS;
 *  - an answer's write that makes no progress for CONN_SEND_STALL_MS gives up (the exec's record
 *    is committed before its answer is sent, so a client that never reads loses nothing);
 *  - at most conn_max connections are open at once; one more is answered with a refusal
 *    ("unavailable": nothing ran) and closed, so descriptors and threads cannot run out.
 * Between two requests of one connection there is no bound but the cap: a client may keep a
 * connection for several calls, and a call waiting for a long command holds it as long as the
 * command runs. */
#define CONN_FIRST_REQUEST_MS 10000
#define CONN_FRAME_MS 10000
#define CONN_SEND_STALL_MS 30000
#define CONN_MAX_CEILING 512u
#define CONN_MAX_FLOOR 16u
#define CONN_REFUSAL_LOG_MS 10000

static pthread_mutex_t conn_lock = PTHREAD_MUTEX_INITIALIZER;
static unsigned conn_open, conn_max;
static unsigned long conn_refused;
static int64_t conn_refused_logged_ms = -CONN_REFUSAL_LOG_MS;

struct conn {
	struct manager *m;
	int fd;
	int64_t wait_deadline;  /* for the next request's first byte; -1: none */
	int64_t frame_deadline; /* for the rest of a request that has begun; -1: none begun */
};

/* Half the descriptors the manager may open, within [CONN_MAX_FLOOR, CONN_MAX_CEILING]: the
 * other half is for sandboxes (pidfds, agent connections), SQLite, git and podman requests. */
static unsigned conn_limit(void)
{
	struct rlimit rl;
	rlim_t half;

	if (getrlimit(RLIMIT_NOFILE, &rl) < 0 || rl.rlim_cur == RLIM_INFINITY)
		return CONN_MAX_CEILING;
	half = rl.rlim_cur / 2;
	return half > CONN_MAX_CEILING ? CONN_MAX_CEILING : half < CONN_MAX_FLOOR ? CONN_MAX_FLOOR : (unsigned)half;
}

/* The stream's read for control_recv_stream: waits only until the deadline that applies now. */
static ssize_t conn_read(void *ctx, void *buf, size_t len)
{
	struct conn *c = ctx;
	int64_t deadline = c->frame_deadline >= 0 ? c->frame_deadline : c->wait_deadline;
	struct pollfd p = { .fd = c->fd, .events = POLLIN };
	int n = poll(&p, 1, deadline < 0 ? -1 : clock_remaining_ms(deadline));
	ssize_t got;

	if (n < 0)
		return -1; /* EINTR is retried by the frame reader */
	if (n == 0) {
		errno = ETIMEDOUT;
		return -1;
	}
	got = read(c->fd, buf, len);
	if (got > 0 && c->frame_deadline < 0)
		c->frame_deadline = clock_deadline_after(CONN_FRAME_MS);
	return got;
}

/* The stream's write: what fits now, else a wait for room of at most CONN_SEND_STALL_MS (a
 * blocking write with SO_SNDTIMEO would wait that long once per partial write). */
static ssize_t conn_write(void *ctx, const void *buf, size_t len)
{
	struct conn *c = ctx;

	for (;;) {
		ssize_t n = send(c->fd, buf, len, MSG_DONTWAIT | MSG_NOSIGNAL);
		struct pollfd p = { .fd = c->fd, .events = POLLOUT };
		int ready;

		if (n >= 0 || (errno != EAGAIN && errno != EWOULDBLOCK))
			return n;
		ready = poll(&p, 1, CONN_SEND_STALL_MS);
		if (ready == 0) {
			errno = ETIMEDOUT;
			return -1;
		}
		if (ready < 0 && errno != EINTR)
			return -1;
	}
}

/* Send resp. An answer that cannot be sent whole (over the cap, or no memory to serialise it)
 * is replaced by an error that says so, and logged: a client never sees a silent close, and an
 * operator learns which op grew too large. -1 only when the connection itself failed. */
static int conn_answer(struct sb_stream *s, const char *op, json_t *resp, struct sb_err *err)
{
	json_t *instead;
	int rc;

	if (control_send_stream(s, resp, CONTROL_RESPONSE_CAP, err) == 0)
		return 0;
	if (err->errnum != EMSGSIZE && err->errnum != ENOMEM)
		return -1;
	sb_error("the answer to %s was not sent: %s", op, err->msg);
	instead = control_error("internal", "the answer to %s could not be sent (%s); the manager logged it. Ask for "
				"less (records: --limit, --before)", op, err->msg);
	if (instead == NULL)
		return sb_fail(err, ENOMEM, "answering %s with an error", op);
	rc = control_send_stream(s, instead, CONTROL_RESPONSE_CAP, err);
	json_decref(instead);
	return rc;
}

/* Counted for the stop, which waits for every answer being made (requests_wait). */
static void request_count(struct manager *m, bool begin)
{
	pthread_mutex_lock(&m->lock);
	if (begin)
		m->requests++;
	else
		m->requests--;
	pthread_mutex_unlock(&m->lock);
}

/* A request that did not come in time: why, for the client and the log. */
static void conn_timed_out(const struct conn *c, struct sb_err *err)
{
	if (c->frame_deadline >= 0)
		sb_fail(err, ETIMEDOUT, "the request did not arrive whole within %d s of its first byte; closing the "
			"connection", CONN_FRAME_MS / 1000);
	else
		sb_fail(err, ETIMEDOUT, "no request within %d s of connecting; closing the connection",
			CONN_FIRST_REQUEST_MS / 1000);
	sb_warn("control connection: %s", err->msg);
}

static void *conn_thread(void *arg)
{
	struct conn *c = arg;
	struct sb_stream s = { .ctx = c, .read = conn_read, .write = conn_write };
	struct sb_err err;
	uid_t peer;

	metrics_connection_opened();
	sb_err_clear(&err);
	if (control_peer_uid(c->fd, &peer, &err) < 0) {
		sb_warn("refused a control connection: %s", err.msg);
		goto out;
	}
	if (peer != geteuid() && peer != 0) {
		sb_warn("refused a control connection from uid %u", (unsigned)peer);
		goto out;
	}
	c->wait_deadline = clock_deadline_after(CONN_FIRST_REQUEST_MS);
	for (;;) {
		json_t *req = NULL, *resp;
		char op[64];
		int rc;
		bool lost;

		c->frame_deadline = -1;
		rc = control_recv_stream(&s, CONTROL_REQUEST_CAP, &req, &err);
		if (rc < 0 && err.errnum == ETIMEDOUT)
			conn_timed_out(c, &err);
		/* After an oversized, cut or late frame the stream is out of step: answer, then close. */
		lost = rc < 0 && (err.errnum == EMSGSIZE || err.errnum == EPROTO || err.errnum == ETIMEDOUT);
		if (rc == 0)
			break;
		c->wait_deadline = -1; /* it has spoken: between requests only the cap bounds it */
		snprintf(op, sizeof op, "%s", rc > 0 ? json_string_value(json_object_get(req, "op")) ?: "(no op)" : "a bad request");
		request_count(c->m, true);
		/* Bad input gets a clear answer when the stream still allows one. */
		resp = rc < 0 ? control_error_from("invalid", &err) : dispatch(c->m, req, peer);
		json_decref(req);
		if (resp == NULL)
			resp = control_error("internal", "out of memory");
		rc = conn_answer(&s, op, resp, &err);
		json_decref(resp);
		request_count(c->m, false);
		if (rc < 0 && err.errnum == ETIMEDOUT)
			sb_warn("the answer to %s was not read for %d s: closing the connection (an exec's outcome is "
				"on record before its answer is sent)", op, CONN_SEND_STALL_MS / 1000);
		if (rc < 0 || lost)
			break;
	}
out:
	close(c->fd);
	free(c);
	metrics_connection_closed();
	pthread_mutex_lock(&conn_lock);
	conn_open--;
	pthread_mutex_unlock(&conn_lock);
	return NULL;
}

/* A connection that gets no thread (over the cap, or none could start): told why and closed,
 * without blocking the accept loop (a fresh socket's buffer holds the short answer; if not, the
 * client sees the close). */
static void conn_refuse(int fd, const char *why)
{
	json_t *e = control_error("unavailable", "%s: nothing ran; try again when fewer clients are connected", why);
	struct sb_err ignored;

	if (e != NULL && fcntl(fd, F_SETFL, O_NONBLOCK) == 0)
		control_send(fd, e, CONTROL_RESPONSE_CAP, &ignored);
	json_decref(e);
	close(fd);
}

/* A flood of refusals at the cap is one log line per CONN_REFUSAL_LOG_MS, with the running count. */
static void conn_refuse_at_cap(int fd, unsigned open_now)
{
	char why[96];
	int64_t now = clock_mono_ms();
	unsigned long refused;
	bool log_now;

	snprintf(why, sizeof why, "the manager has %u control connections open, its limit", open_now);
	conn_refuse(fd, why);
	pthread_mutex_lock(&conn_lock);
	refused = ++conn_refused;
	log_now = now - conn_refused_logged_ms >= CONN_REFUSAL_LOG_MS;
	if (log_now)
		conn_refused_logged_ms = now;
	pthread_mutex_unlock(&conn_lock);
	if (log_now)
		sb_warn("refused a control connection: %u open, the limit (%lu refused since start)", open_now, refused);
}

static void conn_start(struct manager *m, int fd)
{
	struct conn *c;
	struct sb_err err;
	unsigned open_now;
	bool over;

	pthread_mutex_lock(&conn_lock);
	if (conn_max == 0)
		conn_max = conn_limit();
	open_now = conn_open;
	over = conn_open >= conn_max;
	if (!over)
		conn_open++;
	pthread_mutex_unlock(&conn_lock);
	if (over) {
		conn_refuse_at_cap(fd, open_now);
		return;
	}
	c = calloc(1, sizeof *c);
	if (c == NULL)
		sb_fail(&err, ENOMEM, "out of memory");
	if (c != NULL) {
		c->m = m;
		c->fd = fd;
		if (sb_thread_detached(conn_thread, c, &err) == 0)
			return;
		free(c);
	}
	sb_error("refused a control connection: %s", err.msg);
	pthread_mutex_lock(&conn_lock);
	conn_open--;
	pthread_mutex_unlock(&conn_lock);
	sb_err_prefix(&err, "the manager cannot serve another connection now");
	conn_refuse(fd, err.msg);
}

/* ---- the stop ----
 * SIGTERM or SIGINT (systemctl stop, ^C): no new connection and no new call; the running calls get
 * stop-grace-seconds to finish; then each one still running is cancelled as a client's cancel
 * would (recorded cancelled with its sandbox's evidence, or uncertain); then every live sandbox is
 * retired with evidence. A second signal ends the grace at once, never the evidence. Exit 0 when
 * every sandbox's end is proven and every request answered; 1 otherwise, with the log saying what
 * is not proven (those sessions stay reserved, and the next start asks the runtime again). The
 * state dir's lock goes with the process. */
#define STOP_SETTLE_MS 60000 /* after the cancel: each call's evidence (sandbox.c EVIDENCE_MS), record, answer */
#define STOP_NOT_PROVEN 1

/* Blocked before any thread exists, so every thread inherits the mask and only the accept loop
 * takes them, from a signalfd. Children empty their masks before execve (nsspawn.c
 * spawn_signals_default, gitrun.c child_exec). Returns the signalfd, or -1. */
static int stop_signals(struct sb_err *err)
{
	sigset_t set;
	int rc, fd;

	sigemptyset(&set);
	sigaddset(&set, SIGTERM);
	sigaddset(&set, SIGINT);
	rc = pthread_sigmask(SIG_BLOCK, &set, NULL);
	if (rc != 0)
		return sb_fail(err, rc, "blocking SIGTERM and SIGINT");
	fd = signalfd(-1, &set, SFD_CLOEXEC | SFD_NONBLOCK);
	if (fd < 0)
		return sb_fail_errno(err, "creating a signalfd for SIGTERM and SIGINT");
	return fd;
}

/* The signal waiting on the signalfd, or 0. */
static int stop_signal_take(int sigfd)
{
	struct signalfd_siginfo si;

	return read(sigfd, &si, sizeof si) == (ssize_t)sizeof si ? (int)si.ssi_signo : 0;
}

/* Until no request is being answered, the deadline passes, or (sigfd >= 0) another signal comes.
 * Returns how many are still being answered. Answers end on other threads: a short poll between
 * looks, which a signal cuts short. */
static unsigned requests_wait(struct manager *m, int64_t deadline, int sigfd)
{
	for (;;) {
		struct pollfd p = { .fd = sigfd, .events = POLLIN };
		unsigned n;
		int left;

		pthread_mutex_lock(&m->lock);
		n = m->requests;
		pthread_mutex_unlock(&m->lock);
		left = clock_remaining_ms(deadline);
		if (n == 0 || left == 0)
			return n;
		if (poll(&p, 1, left < 50 ? left : 50) > 0 && stop_signal_take(sigfd) > 0) {
			sb_info("stop: a second signal ends the grace (%u request(s) still being answered)", n);
			return n;
		}
	}
}

/* The control socket goes first: a client then hears at once that the manager is not reachable,
 * instead of waiting in the backlog of one that no longer accepts. Only the socket this manager
 * bound (the same file), never one that took its place. */
static void socket_remove(int fd, const char *path, const struct stat *bound)
{
	struct stat st;

	close(fd);
	if (lstat(path, &st) == 0 && st.st_dev == bound->st_dev && st.st_ino == bound->st_ino && unlink(path) < 0)
		sb_warn("stop: removing the control socket %s: %s", path, strerror(errno));
}

static int daemon_stop(struct manager *m, int signo, int sigfd, int fd, const struct stat *bound)
{
	const char *name = signo == SIGINT ? "SIGINT" : "SIGTERM";
	unsigned cancelled, unanswered, not_retired, unproven;
	char why[128];

	pthread_mutex_lock(&m->lock);
	m->stop_phase = STOP_REFUSING;
	unproven = m->unproven;
	pthread_mutex_unlock(&m->lock);
	socket_remove(fd, m->cfg.socket, bound);
	sb_info("stop (%s): no new calls; the running ones have %u s to finish", name, m->cfg.stop_grace_seconds);
	requests_wait(m, clock_deadline_after((int64_t)m->cfg.stop_grace_seconds * 1000), sigfd);

	snprintf(why, sizeof why, "the manager stopped (%s) before the call finished", name);
	cancelled = cancel_stop_calls(m, why);
	if (cancelled > 0)
		sb_info("stop: %u call(s) still running are cancelled; waiting for their sandboxes' evidence", cancelled);
	unanswered = requests_wait(m, clock_deadline_after(STOP_SETTLE_MS), -1);
	if (unanswered > 0)
		sb_error("stop: %u request(s) still unanswered %d s after the cancel: the manager exits without their "
			 "answers", unanswered, STOP_SETTLE_MS / 1000);

	snprintf(why, sizeof why, "the manager stopped (%s)", name);
	not_retired = sandbox_retire_all(m, why);
	pthread_mutex_lock(&m->lock);
	unproven = m->unproven - unproven;
	pthread_mutex_unlock(&m->lock);
	if (unanswered == 0 && not_retired == 0 && unproven == 0) {
		sb_info("stopped: every call settled, every sandbox's end proven");
		return 0;
	}
	sb_error("stopped with something not proven: %u request(s) unanswered, %u sandbox(es) not retired, %u "
		 "sandbox end(s) not proven (their sessions stay reserved: session show; the next start asks the runtime "
		 "again)", unanswered, not_retired, unproven);
	return STOP_NOT_PROVEN;
}

int daemon_serve(int argc, char **argv)
{
	static struct manager m;
	struct sb_err err;
	struct stat bound;
	pthread_t evictor;
	int fd, sigfd, lock = -1, rc;

	sb_err_clear(&err);
	signal(SIGPIPE, SIG_IGN);
	/* First, before any thread: a signal that comes during the start is taken once it is done. */
	sigfd = stop_signals(&err);
	/* glibc gives each busy thread its own malloc arena and keeps what a call's 1 MiB output buffers
	 * took in each: under `make load` (16 sessions, 2 loops each) the manager ended at 108 MiB with
	 * the default, 44 MiB with two arenas, at the same throughput within noise. Connection threads
	 * come and go; two arenas are enough for them (docs/reliability.md, Load). */
	if (mallopt(M_ARENA_MAX, 2) != 1)
		sb_warn("mallopt(M_ARENA_MAX): not set; the manager's memory may grow with its threads");
	metrics_start();
	rc = sigfd < 0 ? -1 : config_load(&m.cfg, argc, argv, &err);
	if (rc == CONFIG_HELP) {
		config_usage(stdout);
		return 0;
	}
	if (rc == CONFIG_BAD_FLAG) {
		fprintf(stderr, "sandbox-manager serve: %s\n", err.msg);
		config_usage(stderr);
		return 2;
	}
	/* Private state first (everything else lives in it), then the claim on it, before anything
	 * in it is read or changed: a second manager leaves a live one's state as it found it. */
	if (rc < 0 || dir_private(m.cfg.state_dir, &err) < 0 ||
	    (lock = state_lock(m.cfg.state_dir, &err)) != 0 || manager_start(&m, &err) < 0) {
		fprintf(stderr, "sandbox-manager serve: %s\n", err.msg);
		sb_error("cannot serve: %s", err.msg);
		return lock == STATE_IN_USE ? 2 : 125;
	}
	/* Before the control socket: a manager whose metrics cannot be served does not start. */
	if (m.cfg.metrics_listen[0] != '\0' && metrics_http_start(&m, &err) < 0) {
		fprintf(stderr, "sandbox-manager serve: %s\n", err.msg);
		return 125;
	}
	fd = control_listen(m.cfg.socket, 0600, &err);
	/* Non-blocking: poll() said a connection waits, but it may be gone by the accept. */
	if (fd >= 0 && (fcntl(fd, F_SETFL, O_NONBLOCK) < 0 || lstat(m.cfg.socket, &bound) < 0)) {
		sb_fail_errno(&err, "setting up the control socket %s", m.cfg.socket);
		fd = -1;
	}
	if (fd < 0 || pthread_create(&evictor, NULL, sandbox_evictor, &m) != 0) {
		fprintf(stderr, "sandbox-manager serve: %s\n", fd < 0 ? err.msg : "cannot start the idle evictor");
		return 125;
	}
	sb_info("serving on %s (state %s, volume %s, backend %s)", m.cfg.socket, m.cfg.state_dir, m.cfg.volume,
		m.cfg.backend);
	for (;;) {
		struct pollfd p[2] = { { .fd = fd, .events = POLLIN }, { .fd = sigfd, .events = POLLIN } };
		int conn, signo;

		if (poll(p, 2, -1) < 0) {
			if (errno != EINTR)
				sb_warn("poll: %s", strerror(errno));
			continue;
		}
		if ((p[1].revents & POLLIN) && (signo = stop_signal_take(sigfd)) > 0)
			return daemon_stop(&m, signo, sigfd, fd, &bound);
		if (!(p[0].revents & POLLIN))
			continue;
		conn = accept4(fd, NULL, NULL, SOCK_CLOEXEC);
		if (conn >= 0) {
			conn_start(&m, conn);
			continue;
		}
		if (errno != EINTR && errno != ECONNABORTED && errno != EAGAIN)
			sb_warn("accept: %s", strerror(errno));
		if (errno == EMFILE || errno == ENFILE)
			sleep(1);
	}
}
