/* `sandbox-manager serve`: the daemon. Start-up order matters and each step says why; then the
 * accept loop hands each control connection to its thread (connections.c). SIGTERM and SIGINT stop
 * it with evidence (stop.c daemon_stop): never leaving a sandbox running behind it unsaid. */
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

#include "broker.h"
#include "clock.h"
#include "control.h"
#include "control_tls.h"
#include "fdio.h"
#include "identity_ids.h"
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

/* The manager's own client certificates, issued fresh at every start (short-lived): manager.crt,
 * signed by the CA, for agents of an earlier run (recovery); manager-self.crt, signed by its own key
 * and written into the trust list of every agent this run starts (private_dir.c), which accepts it
 * as the exact certificate it lists without checking a signature: one ECDSA verify less in each of
 * their handshakes (docs/performance.md). */
static int manager_tls(struct manager *m, struct sb_err *err)
{
	struct ca_leaf leaf = { .dns_name = CA_MANAGER_NAME, .usage = CA_USAGE_CLIENT };
	struct ca_leaf self = { .dns_name = CA_MANAGER_NAME, .usage = CA_USAGE_CLIENT, .self_signed = true,
				.copy = &m->self_cert };
	char ca_dir[PATH_MAX + 8];

	/* A truncated path would name another directory: an error, never a shorter path. */
	if ((size_t)snprintf(ca_dir, sizeof ca_dir, "%s/ca", m->cfg.state_dir) >= sizeof ca_dir ||
	    (size_t)snprintf(m->tls_dir, sizeof m->tls_dir, "%s/tls", m->cfg.state_dir) >= sizeof m->tls_dir)
		return sb_fail(err, ENAMETOOLONG, "the state directory %s is too long for its tls/ and ca/ paths",
			       m->cfg.state_dir);
	if (ca_open(ca_dir, &m->ca, err) < 0 || dir_private(m->tls_dir, err) < 0)
		return -1;
	if (ca_issue_leaf(m->ca, &leaf, m->tls_dir, "manager", err) < 0 ||
	    ca_issue_leaf(m->ca, &self, m->tls_dir, "manager-self", err) < 0)
		return -1;
	if (m->self_cert.len == 0)
		return sb_fail(err, 0, "the manager's self-signed certificate was not kept");
	return ca_write_cert(m->ca, m->tls_dir, "ca.crt", err);
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
		    (strncmp(m->cfg.k8s_volume, "pvc:", 4) == 0 ?
		     path_fmt(ks.claim, sizeof ks.claim, err, "%s", m->cfg.k8s_volume + strlen("pvc:")) :
		     path_fmt(ks.volume_dir, sizeof ks.volume_dir, err, "%s", m->cfg.k8s_volume + strlen("hostpath:"))) < 0 ||
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

/* Every http: resource's config, and the files of its tokens, checked now: a typo in a template or
 * an unreadable token is the operator's to fix at start, not a grant's to find later. The header
 * broker serves http: resources, and they need it; two of them may not share a variable (the
 * second's address would hide the first's). */
static int resources_check(const struct manager *m, struct sb_err *err)
{
	json_t *v, *vars = json_object();
	const char *name;
	char var[160];
	int rc = 0;

	json_object_foreach(m->cfg.resources, name, v) {
		const char *broker = json_string_value(v) ?: "";
		bool header = strncmp(broker, "header:", 7) == 0, http = strncmp(name, "http:", 5) == 0;

		if (header != http)
			rc = sb_invalid(err, "config: resource %s: %s", name,
					http ? "an http: resource needs the header: broker (http:NAME=header:/abs/config.json)" :
					       "the header: broker serves http:NAME resources only");
		else if (http && broker_http_check(name, broker + 7, err) < 0)
			rc = -1;
		if (rc < 0)
			break;
		if (!http)
			continue;
		broker_http_env_name(name, var, sizeof var);
		if (json_object_get(vars, var) != NULL)
			rc = sb_invalid(err, "config: resources %s and %s would both be %s in a sandbox: rename one",
					json_string_value(json_object_get(vars, var)), name, var);
		else
			json_object_set_new(vars, var, json_string(name));
		if (rc < 0)
			break;
	}
	json_decref(vars);
	return rc;
}

/* Descriptors are shared by every identity: each sandbox holds some (its agent connection, pidfd,
 * egress and edge connections, followers), within its identity's bounds (sandboxes-per-identity,
 * the per-sandbox connection bounds). Under the usual soft limit (1024, systemd's and a login's) a
 * few identities' sandboxes at their bounds would take them all, and every other identity's calls
 * would fail to open anything. The hard limit is the operator's word; the manager takes it, up to
 * NOFILE_WANTED (it polls, never select()s). What its children inherit is no more than they could
 * take themselves: a soft limit is raised by anyone up to the hard one. */
#define NOFILE_WANTED 65536u

static void nofile_raise(void)
{
	struct rlimit rl;
	rlim_t want;

	if (getrlimit(RLIMIT_NOFILE, &rl) < 0)
		return;
	want = rl.rlim_max == RLIM_INFINITY || rl.rlim_max > NOFILE_WANTED ? NOFILE_WANTED : rl.rlim_max;
	if (rl.rlim_cur != RLIM_INFINITY && rl.rlim_cur < want) {
		rl.rlim_cur = want;
		if (setrlimit(RLIMIT_NOFILE, &rl) < 0)
			sb_warn("could not raise the descriptor limit to %llu: %s", (unsigned long long)want,
				strerror(errno));
	}
	if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < 4096)
		sb_warn("the descriptor limit is %llu (hard): every identity's sandboxes share it, so a few at their "
			"bounds could take them all; raise it (systemd: LimitNOFILE=65536, the unit's default)",
			(unsigned long long)rl.rlim_cur);
}

static int manager_start(struct manager *m, struct sb_err *err)
{
	char db[PATH_MAX + 16];

	pthread_mutex_init(&m->lock, NULL);
	pthread_mutex_init(&m->claim_lock, NULL);
	nofile_raise();
	if (resources_check(m, err) < 0)
		return -1;
	/* 0711: sandboxes walk through it to their worktree; nobody lists it (rule N3). */
	if (mkdir(m->cfg.volume, 0711) < 0 && errno != EEXIST)
		return sb_fail_errno(err, "creating the volume %s", m->cfg.volume);
	/* The volume must do what git and the records rely on, or nothing it holds is safe. */
	if (volume_probe(m->cfg.volume, err) < 0)
		return -1;
	/* The range each identity's ids come from is no one else's (rule N2); every range id walks
	 * the same (no account, no group): the probe's stands for all. */
	if (identity_ids_check(&m->cfg, err) < 0)
		return -1;
	if (geteuid() == 0 &&
	    (identity_ids_walkable(m->cfg.state_dir, err) < 0 || identity_ids_walkable(m->cfg.volume, err) < 0))
		return -1;
	/* Before the records are opened: a reserve, when the volume shares their filesystem, is taken
	 * while there is room (rule N4). */
	if (disk_bound_start(&m->disk, m->cfg.state_dir, m->cfg.volume, m->cfg.disk_reserve, err) < 0)
		return -1;
	if (!m->rec && (path_fmt(db, sizeof db, err, "%s/records.db", m->cfg.state_dir) < 0 ||
			records_open(db, &m->rec, err) < 0))
		return -1;
	/* Under root no other user may list the identities and sessions or read what commands wrote
	 * (rule N3); after the records, since each identity's group is its ids' (identity_ids_of). An
	 * unprivileged manager's volume is made with the same modes, but its sandboxes are itself: the
	 * group its volume has (a claim's fsGroup, group-writable) holds no one else. */
	if (geteuid() == 0 && volume_closed_check(m->cfg.volume, identity_ids_of, m, err) < 0)
		return -1;
	records_set_output_limit(m->rec, m->cfg.record_output_limit);
	records_set_full_hook(m->rec, disk_bound_release, &m->disk);
	/* Before anything is read for recovery: this manager's name in the store, and the fence on
	 * its writes (a second live manager with the same id is refused here). */
	if (ownership_start(m, err) < 0)
		return -1;
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

int daemon_serve(int argc, char **argv)
{
	static struct manager m;
	struct sb_err err;
	struct stat bound;
	pthread_t evictor;
	int tls_fds[CONTROL_TLS_LISTEN_MAX];
	size_t n_tls = 0;
	int fd, sigfd, lock = -1, rc;

	sb_err_clear(&err);
	signal(SIGPIPE, SIG_IGN);
	/* The modes of the state and the volume are the layout's own, never the umask of the shell or
	 * unit that started the daemon. What must stay private is made with its mode and checked
	 * (0700 and 0711 directories, 0600 keys and records, the identity's 0710 directories); what a
	 * sandbox's uid must read is made by git and the manager with the default modes, behind those
	 * directories: the base clone's objects and refs, packed-refs.d, the worktree's files. Under an
	 * inherited umask 077 a root manager's sandbox could not walk into its own base clone (its start
	 * refused: "making the mount point .../packed-refs.d: Permission denied"). Inherited by every
	 * child (git, the agent, the sandbox's init; the agent sets the command's own, 077). */
	umask(022);
	/* First, before any thread: a signal that comes during the start is taken once it is done. */
	sigfd = stop_signals(&err);
	/* glibc gives each busy thread its own malloc arena and keeps what a call's 1 MiB output buffers
	 * took in each: under `make load` (16 sessions, 2 loops each) the manager ended at 108 MiB with
	 * the default, 44 MiB with two arenas, at the same throughput within noise. Connection threads
	 * come and go; two arenas are enough for them (docs/reliability.md, Load).
	 * A sanitizer's allocator has its own arenas and refuses the setting: nothing to say then (a line
	 * on stderr here would precede even `serve --help`). */
	(void)mallopt(M_ARENA_MAX, 2);
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
	/* Before anything is made or opened: `sandbox-ids subuid` moves the daemon into a user
	 * namespace of its user's subordinate ids, where it starts again (rule N2). */
	if (rc == 0 && identity_userns_enter(&m.cfg, argc, argv, &err) < 0)
		rc = -1;
	identity_userns_made();
	/* A store that was named first, so a bad or unreachable one leaves nothing made (the default
	 * store is a file in the state directory, opened in manager_start). Then private state
	 * (everything else lives in it), then the claim on it, before anything in it is read or
	 * changed: a second manager leaves a live one's state as it found it. */
	if (rc < 0 || (m.cfg.store[0] && records_open_store(m.cfg.store, &m.rec, &err) < 0) ||
	    dir_private(m.cfg.state_dir, &err) < 0 ||
	    (lock = state_lock(m.cfg.state_dir, &err)) != 0 || identity_userns_keep(&m.cfg, &err) < 0 ||
	    manager_start(&m, &err) < 0) {
		fprintf(stderr, "sandbox-manager serve: %s\n", err.msg);
		sb_error("cannot serve: %s", err.msg);
		identity_userns_abandon(&m.cfg);
		return lock == STATE_IN_USE ? 2 : 125;
	}
	/* Before the control socket: a manager whose metrics cannot be served does not start. */
	if (m.cfg.metrics_listen[0] != '\0' && metrics_http_start(&m, &err) < 0) {
		fprintf(stderr, "sandbox-manager serve: %s\n", err.msg);
		identity_userns_abandon(&m.cfg);
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
		identity_userns_abandon(&m.cfg);
		return 125;
	}
	if (control_tls_start(&m, tls_fds, &n_tls, &err) < 0) {
		fprintf(stderr, "sandbox-manager serve: %s\n", err.msg);
		return 125;
	}
	sb_info("serving on %s (state %s, volume %s, backend %s, store %s)", m.cfg.socket, m.cfg.state_dir, m.cfg.volume,
		m.cfg.backend, records_store_kind(m.rec));
	for (;;) {
		struct pollfd p[2 + CONTROL_TLS_LISTEN_MAX] = { { .fd = fd, .events = POLLIN }, { .fd = sigfd, .events = POLLIN } };
		int conn, signo;

		for (size_t i = 0; i < n_tls; i++)
			p[2 + i] = (struct pollfd){ .fd = tls_fds[i], .events = POLLIN };
		if (poll(p, 2 + n_tls, -1) < 0) {
			if (errno != EINTR)
				sb_warn("poll: %s", strerror(errno));
			continue;
		}
		if ((p[1].revents & POLLIN) && (signo = stop_signal_take(sigfd)) > 0)
			return daemon_stop(&m, signo, sigfd, fd, &bound);
		for (size_t i = 0; i < n_tls; i++)
			if (p[2 + i].revents & POLLIN)
				control_tls_accept(&m, tls_fds[i]);
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
