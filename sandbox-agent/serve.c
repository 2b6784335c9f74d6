/* `sandbox-agent serve`: the long-running agent. Accepts mutual-TLS connections from the one
 * manager its CA and --manager-name allow, and runs Exec requests through the same boundary as
 * `exec`, one at a time. Every request that reaches a handler passed mTLS and is STILL treated
 * as untrusted: each field is checked before use, because a compromised manager must not turn
 * the agent against its own boundary. One thread per connection; all TLS I/O of a connection
 * stays on its thread. Cancel and Query arrive on their own connections while an Exec runs. */
#include "cli.h"
#include "serve_internal.h"

#include <errno.h>
#include <libgen.h>
#include <limits.h>
#include <malloc.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "boundary.h"
#include "command_user.h"
#include "prebuilt.h"
#include "privdir.h"
#include "journal.h"
#include "log.h"
#include "names.h"
#include "opts.h"
#include "proto.h"
#include "receipt.h"
#include "result.h"
#include "secret.h"
#include "sock.h"
#include "thread.h"
#include "steptime.h"
#include "tls.h"

struct serve_config {
	const char *listen, *cert, *key, *ca, *manager_name, *state_dir;
	const char *receipt_key;   /* --receipt-key, or NULL: state_dir/receipt.key */
	const char *net_socket;    /* --net-socket unix:PATH, or NULL (serve_netsock.c) */
	const char *user_home;     /* --user-home DIR, or NULL (command_user.c) */
	uint16_t ports[BOUNDARY_MAX_PORTS];
	size_t n_ports;
	uint64_t generation;
};

/* ---- the listener ---- */

static int listen_tcp(const char *hostport, uint16_t *port, struct sb_err *err)
{
	struct sockaddr_storage ss;
	socklen_t len = 0;
	int fd, one = 1;

	if (sock_hostport_parse(hostport, &ss, &len, port, err) < 0) {
		sb_err_prefix(err, "--listen");
		return -1;
	}
	fd = socket(ss.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0 || setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) < 0 ||
	    bind(fd, (struct sockaddr *)&ss, len) < 0 || listen(fd, 16) < 0) {
		sb_fail_errno(err, "listening on %s", hostport);
		if (fd >= 0)
			close(fd);
		return -1;
	}
	return fd;
}

/* A directory to hide from commands: it must be private to us, or hiding it is theatre. The
 * directory of a key is the one its file really lies in (follow): a Secret volume's names are
 * links into the kubelet's ..<timestamp> directory, which is what must be hidden (sealed.c). */
static int hidden_add_dirname(const char *path, bool follow, struct boundary_options *bo, struct sb_err *err)
{
	char copy[PATH_MAX], real[PATH_MAX];
	struct privdir d;

	if ((size_t)snprintf(copy, sizeof copy, "%s", path) >= sizeof copy)
		return sb_fail(err, ENAMETOOLONG, "path too long: %s", path);
	if (follow) {
		if (realpath(path, real) == NULL)
			return sb_fail_errno(err, "resolving %s", path);
		snprintf(copy, sizeof copy, "%s", dirname(real));
		snprintf(real, sizeof real, "%s", copy);
	} else if (realpath(dirname(copy), real) == NULL) {
		return sb_fail_errno(err, "resolving the directory of %s", path);
	}
	for (size_t i = 0; i < bo->n_hidden; i++)
		if (strcmp(bo->hidden[i].path, real) == 0)
			return 0;
	if (bo->n_hidden >= BOUNDARY_MAX_HIDDEN)
		return sb_fail(err, E2BIG, "too many private directories");
	/* The directory of the keys or socket: a directory of its own, ours, not writable by others
	 * (hiding / or a shared directory would break every command). */
	if (strcmp(real, "/") == 0)
		return sb_fail(err, EPERM, "%s holds the agent's keys or socket: it must be a directory of its own", path);
	if (privdir_open_readable(&d, real, err) < 0)
		return -1;
	hidden_dir_from_privdir(&bo->hidden[bo->n_hidden++], &d);
	privdir_close(&d);
	return 0;
}

static int agent_paths(struct agent *a, const struct serve_config *cfg, struct sb_err *err)
{
	char real[PATH_MAX];

	if (mkdir(cfg->state_dir, 0700) < 0 && errno != EEXIST)
		return sb_fail_errno(err, "creating state directory %s", cfg->state_dir);
	if (realpath(cfg->state_dir, real) == NULL)
		return sb_fail_errno(err, "state directory %s", cfg->state_dir);
	if (strcmp(real, "/") == 0)
		return sb_fail(err, EPERM, "the state directory must be a directory of its own, not /");
	if (privdir_open(&a->state, real, false, 022, err) < 0 ||
	    privdir_open_at(&a->receipts, &a->state, "receipts", true, 077, err) < 0 ||
	    privdir_open_at(&a->journal_dir, &a->state, "journal", true, 077, err) < 0)
		return -1;
	if (journal_open(&a->journal, &a->journal_dir, &a->receipts, err) < 0)
		return -1;
	/* The first exec's room and entry made ahead too; without them (a full disk) it makes its own. */
	spare_file_init(&a->spare, RECEIPT_SPARE_NAME);
	serve_spare_make(a);
	return 0;
}

/* The agent's state (journal, receipts), the directories to hide, its receipt key. */
static int agent_keys(struct agent *a, struct serve_config *cfg, struct boundary_options *bo, uint16_t *port,
		      struct sb_err *err)
{
	a->generation = cfg->generation;
	bo->block_ports = cfg->ports;
	if (agent_paths(a, cfg, err) < 0)
		return -1;
	hidden_dir_from_privdir(&bo->hidden[bo->n_hidden++], &a->state);
	if (hidden_add_dirname(cfg->key, true, bo, err) < 0 ||
	    (cfg->receipt_key != NULL && hidden_add_dirname(cfg->receipt_key, true, bo, err) < 0) ||
	    /* The net socket makes listeners on request: out of every command's reach. */
	    (cfg->net_socket != NULL && strncmp(cfg->net_socket, "unix:", 5) == 0 &&
	     hidden_add_dirname(cfg->net_socket + 5, false, bo, err) < 0))
		return -1;
	if (strncmp(cfg->listen, "unix:", 5) == 0) {
		if (hidden_add_dirname(cfg->listen + 5, false, bo, err) < 0)
			return -1;
	} else {
		struct sockaddr_storage ss;
		socklen_t len;

		if (sock_hostport_parse(cfg->listen, &ss, &len, port, err) < 0) {
			sb_err_prefix(err, "--listen");
			return -1;
		}
		/* The agent's own port is always out of the commands' reach. */
		if (cfg->n_ports < BOUNDARY_MAX_PORTS)
			cfg->ports[cfg->n_ports++] = *port;
	}
	bo->n_block_ports = cfg->n_ports;
	a->sec = secrets_alloc(err);
	/* --receipt-key: the manager's copy (a Secret on Kubernetes); else state/receipt.key. */
	if (a->sec == NULL || (cfg->receipt_key != NULL ? secrets_key_load_file(a->sec, cfg->receipt_key, err) :
			       secrets_key_load(a->sec, &a->state, err)) < 0)
		return -1;
	return 0;
}

/* The agent's TLS configuration: its key, certificate and CA parsed and the key checked against the
 * certificate (a P-256 multiplication, ~1.8 ms), made on a thread of its own while the main one
 * creates the state directories and opens the journal, whose boot mark waits on the disk
 * (docs/performance.md). It reads only the paths and the manager's name of cfg, which nothing
 * changes, and is joined before anything uses it and before the agent listens. */
struct tls_run {
	struct sb_beside beside;
	const char *cert, *key, *ca, *manager_name;
	struct tls_config *tls;
	struct sb_err err;
	int rc;
};

static void *tls_thread(void *arg)
{
	struct tls_run *t = arg;

	sb_err_clear(&t->err);
	t->rc = tls_config_server(&t->tls, t->cert, t->key, t->ca, t->manager_name, &t->err);
	return NULL;
}

/* The configuration into a, once made: 0, or -1 with t->err. */
static int tls_end(struct tls_run *t, struct agent *a)
{
	sb_beside_join(&t->beside);
	a->tls = t->tls;
	if (t->rc == 0)
		tls_config_set_peer_label(a->tls, "manager");
	return t->rc;
}

/* `sandbox-agent check`'s probes (forks into new namespaces, a seccomp load, Landlock's ABI): a few
 * ms of waiting on the kernel, run on a thread of their own while the main one opens the journal
 * and loads the keys (docs/performance.md). The thread touches nothing of the agent's; it is joined
 * before the boundary restricts the agent (Landlock binds the calling thread and those it makes
 * after) and before the agent listens, so the order a caller sees is unchanged. */
struct check_run {
	struct sb_beside beside;
	bool ok;
	json_t *features;
};

static void *check_thread(void *arg)
{
	struct check_run *c = arg;

	c->features = check_report(&c->ok);
	return NULL;
}

static int agent_prepare(struct agent *a, struct serve_config *cfg, int *listen_fd, struct sb_err *err)
{
	static struct boundary_options bo;
	struct check_run check;
	struct tls_run tls;
	bool ok;
	json_t *features;
	uint16_t port = 0;
	int rc;

	check = (struct check_run){ .ok = false };
	sb_beside_start(&check.beside, check_thread, &check);
	tls = (struct tls_run){ .cert = cfg->cert, .key = cfg->key, .ca = cfg->ca, .manager_name = cfg->manager_name,
				.rc = -1 };
	sb_beside_start(&tls.beside, tls_thread, &tls);
	rc = agent_keys(a, cfg, &bo, &port, err);
	/* The first failure in the old order: the state and keys, then TLS, then the check. */
	if (tls_end(&tls, a) < 0 && rc == 0) {
		*err = tls.err;
		rc = -1;
	}
	sb_beside_join(&check.beside);
	ok = check.ok;
	features = check.features;
	a->features_json = features ? json_dumps(features, JSON_COMPACT) : NULL;
	json_decref(features);
	if (rc < 0)
		return -1;
	if (!ok)
		return sb_fail(err, EOPNOTSUPP, "the boundary cannot be established here: run `sandbox-agent check`");
	a->cancel_efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	if (a->cancel_efd < 0)
		return sb_fail_errno(err, "eventfd");
	pthread_mutex_init(&a->lock, NULL);
	serve_conn_init(a);
	for (size_t i = 0; i < SERVE_NET_PORTS; i++)
		a->net_listeners[i] = -1;
	/* With blocked ports, this restricts the agent itself (Landlock, connect only) for good. */
	if (boundary_prepare(&a->b, &bo, err) < 0 ||
	    (cfg->user_home != NULL && command_user_prepare(&a->b, &a->state, cfg->user_home, err) < 0) ||
	    prebuilt_start(&a->pre, &a->b, err) < 0)
		return -1;
	/* The net socket before the agent's listener: an agent that answers can hand listeners. */
	if (cfg->net_socket != NULL && serve_netsock_start(cfg->net_socket, err) < 0) {
		sb_err_prefix(err, "--net-socket");
		return -1;
	}
	/* Listen last: a connection that succeeds means an agent that is ready to serve, never one
	 * that is still loading its keys (or about to fail doing so). */
	*listen_fd = strncmp(cfg->listen, "unix:", 5) == 0 ? sock_listen_unix(cfg->listen + 5, 0600, 16, err) :
							     listen_tcp(cfg->listen, &port, err);
	return *listen_fd < 0 ? -1 : 0;
}

static int serve_usage(const char *msg)
{
	fprintf(stderr, "sandbox-agent serve: %s\n"
			"usage: sandbox-agent serve --listen HOST:PORT|unix:PATH --tls-cert F --tls-key F --tls-ca F\n"
			"         --manager-name NAME --state-dir DIR [--receipt-key F] [--generation N] [--block-port PORT]...\n"
			"         [--net-socket unix:PATH] [--user-home DIR]\n", msg);
	return CLI_USAGE;
}

static int serve_parse(struct serve_config *cfg, int argc, char **argv)
{
	static const struct option longopts[] = {
		{ "listen", required_argument, NULL, 'l' },   { "tls-cert", required_argument, NULL, 'c' },
		{ "tls-key", required_argument, NULL, 'k' },  { "tls-ca", required_argument, NULL, 'a' },
		{ "manager-name", required_argument, NULL, 'm' }, { "state-dir", required_argument, NULL, 's' },
		{ "block-port", required_argument, NULL, 'p' }, { "generation", required_argument, NULL, 'g' },
		{ "receipt-key", required_argument, NULL, 'r' }, { "net-socket", required_argument, NULL, 'n' },
		{ "user-home", required_argument, NULL, 'u' },
		{ NULL, 0, NULL, 0 },
	};
	unsigned long v;
	char *end;
	struct sb_err err;
	int opt;

	opts_reset();
	while ((opt = opts_next(argc, argv, "", longopts, NULL, &err)) != OPTS_END) {
		switch (opt) {
		case 'l': cfg->listen = optarg; break;
		case 'c': cfg->cert = optarg; break;
		case 'k': cfg->key = optarg; break;
		case 'a': cfg->ca = optarg; break;
		case 'm': cfg->manager_name = optarg; break;
		case 's': cfg->state_dir = optarg; break;
		case 'r': cfg->receipt_key = optarg; break;
		case 'n': cfg->net_socket = optarg; break;
		case 'u': cfg->user_home = optarg; break;
		case 'p':
			v = strtoul(optarg, &end, 10);
			if (*end != '\0' || v == 0 || v > 65535 || cfg->n_ports >= BOUNDARY_MAX_PORTS - 1)
				return serve_usage("--block-port: expected a port from 1 to 65535 (at most 63)");
			cfg->ports[cfg->n_ports++] = (uint16_t)v;
			break;
		case 'g':
			cfg->generation = strtoull(optarg, &end, 10);
			if (*end != '\0' || optarg[0] < '0' || optarg[0] > '9')
				return serve_usage("--generation: expected a number");
			break;
		default:
			return serve_usage(err.msg);
		}
	}
	if (!cfg->listen || !cfg->cert || !cfg->key || !cfg->ca || !cfg->manager_name || !cfg->state_dir)
		return serve_usage("--listen, --tls-cert, --tls-key, --tls-ca, --manager-name and --state-dir are required");
	if (optind != argc)
		return serve_usage("unexpected arguments");
	if (cfg->user_home != NULL && cfg->user_home[0] != '/')
		return serve_usage("--user-home: expected an absolute path");
	return 0;
}

/* An exec's result passes through a few buffers of up to 2 MiB each (capture, render, JSON, frame),
 * allocated and freed once per exec, on the connection's thread. glibc would serve them from a
 * per-thread arena and, after the first free of a mapped chunk, raise its mmap threshold so that
 * later ones stay in that arena's heap: the agent then keeps its peak for good (8-9 MB after one
 * flood). A fixed threshold keeps every large buffer a mapping of its own, returned whole on
 * free; one arena because execs run one at a time. Refusals change nothing but memory use.
 * musl's allocator (the static agent's, issue 32) has neither arenas nor a moving threshold: it maps
 * every chunk above 128 KiB on its own and unmaps it on free, so there is nothing to set. */
static void memory_bound(void)
{
#ifdef __GLIBC__
	(void)mallopt(M_MMAP_THRESHOLD, 64 * 1024);
	(void)mallopt(M_ARENA_MAX, 1);
#endif
}

int cli_serve(int argc, char **argv)
{
	static struct agent a;
	struct serve_config cfg = { 0 };
	struct sb_err err;
	int fd = -1, rc;

	if ((rc = serve_parse(&cfg, argc, argv)) != 0)
		return rc;
	/* Writes to a connection the manager closed must fail with EPIPE, not kill the agent.
	 * init puts every disposition back to the default before a command exists. */
	signal(SIGPIPE, SIG_IGN);
	memory_bound();
	sb_err_clear(&err);
	if (agent_prepare(&a, &cfg, &fd, &err) < 0) {
		sb_error("cannot serve: %s", err.msg);
		fprintf(stderr, "sandbox-agent serve: %s\n", err.msg);
		return CLI_FAILED;
	}
	sb_info("serving on %s for %s, generation %llu", cfg.listen, cfg.manager_name,
		(unsigned long long)cfg.generation);
	for (;;) {
		int conn = accept4(fd, NULL, NULL, SOCK_CLOEXEC);

		if (conn < 0) {
			if (errno != EINTR && errno != ECONNABORTED)
				sb_warn("accept: %s", strerror(errno));
			if (errno == EMFILE || errno == ENFILE)
				sleep(1);
			continue;
		}
		/* Frames go out as two TLS records (header, body): without TCP_NODELAY, Nagle
		 * would hold the second for up to 40 ms. Not a socket option on unix sockets. */
		if (strncmp(cfg.listen, "unix:", 5) != 0 &&
		    setsockopt(conn, IPPROTO_TCP, TCP_NODELAY, &(int){ 1 }, sizeof(int)) < 0)
			sb_warn("TCP_NODELAY: %s", strerror(errno));
		serve_conn_start(&a, conn);
	}
}
