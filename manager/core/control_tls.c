/* The control API over mutual TLS (see control_tls.h): listeners, the handshake budget, principals
 * and their bounds, and the authorisation of each request. Must never read a request from a peer
 * whose certificate did not verify, nor answer a principal about a session of an identity it may
 * not drive (such a session is "not found", as one that does not exist). */
#include "control_tls.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "ca.h"
#include "cleanup.h"
#include "clock.h"
#include "control.h"
#include "handshake_slots.h"
#include "log.h"
#include "manager.h"
#include "sock.h"
#include "thread.h"

static struct {
	pthread_mutex_t lock;
	struct tls_config *config;
	struct principals ps;
	unsigned *open;              /* open connections of each principal, by index in ps.p */
	struct deny_list *deny;
} T = { .lock = PTHREAD_MUTEX_INITIALIZER };

/* The handshakes in flight, the only slots a peer holds before its certificate verified (N1). */
static struct handshake_slots pending = HANDSHAKE_SLOTS_INIT(CONTROL_TLS_HANDSHAKES_MAX);

struct handshake {
	struct manager *m;
	int fd;
	struct handshake_ticket ticket;
};

/* The server certificate: the operator's, or one the manager's CA issues for the advertised names
 * at every start (short-lived, as the agent link's). */
static int server_config(struct manager *m, struct sb_err *err)
{
	const struct config *c = &m->cfg;
	const char *names[CA_MORE_NAMES_MAX];
	struct ca_leaf leaf = { .usage = CA_USAGE_SERVER, .more_names = names };
	char cert[PATH_MAX + 32], key[PATH_MAX + 32], ca[PATH_MAX + 32];
	size_t i, n = json_array_size(c->tls_names);

	if (c->tls_cert[0] != '\0' || c->tls_key[0] != '\0' || c->tls_client_ca[0] != '\0') {
		if (c->tls_cert[0] == '\0' || c->tls_key[0] == '\0' || c->tls_client_ca[0] == '\0')
			return sb_invalid(err, "config: tls-cert, tls-key and tls-client-ca go together (the operator's "
					  "own CA); give all three, or none and tls-name for the manager's CA");
		return tls_config_server_principals(&T.config, c->tls_cert, c->tls_key, c->tls_client_ca,
						    CONTROL_TLS_SUFFIX, err);
	}
	if (n == 0 || n > CA_MORE_NAMES_MAX + 1)
		return sb_invalid(err, "config: listen needs 1 to %d tls-name (the names clients reach this manager "
				  "by: its host name or address), or tls-cert/tls-key/tls-client-ca", CA_MORE_NAMES_MAX + 1);
	leaf.dns_name = json_string_value(json_array_get(c->tls_names, 0));
	for (i = 1; i < n; i++)
		names[i - 1] = json_string_value(json_array_get(c->tls_names, i));
	leaf.n_more = n - 1;
	/* Reissued only at a start: it must outlive the longest run, not a sandbox's day. */
	leaf.not_after = time(NULL) + CONTROL_TLS_SERVER_DAYS * 86400;
	snprintf(cert, sizeof cert, "%s/control.crt", m->tls_dir);
	snprintf(key, sizeof key, "%s/control.key", m->tls_dir);
	snprintf(ca, sizeof ca, "%s/ca.crt", m->tls_dir);
	if (ca_issue_leaf(m->ca, &leaf, m->tls_dir, "control", err) < 0)
		return -1;
	return tls_config_server_principals(&T.config, cert, key, ca, CONTROL_TLS_SUFFIX, err);
}

static int listen_one(const char *hostport, struct sb_err *err)
{
	struct sockaddr_storage ss;
	socklen_t len;
	int fd, on = 1;

	if (sock_hostport_parse(hostport, &ss, &len, NULL, err) < 0)
		return -1;
	fd = socket(ss.ss_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	if (fd < 0)
		return sb_fail_errno(err, "listen tls:%s: socket", hostport);
	if (setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &on, sizeof on) < 0 || bind(fd, (struct sockaddr *)&ss, len) < 0 ||
	    listen(fd, 64) < 0) {
		sb_fail_errno(err, "listen tls:%s", hostport);
		close(fd);
		return -1;
	}
	return fd;
}

int control_tls_start(struct manager *m, int *fds, size_t *n, struct sb_err *err)
{
	const struct config *c = &m->cfg;
	size_t i, want = json_array_size(c->tls_listen);

	*n = 0;
	if (want == 0)
		return 0;
	if (want > CONTROL_TLS_LISTEN_MAX)
		return sb_invalid(err, "config: at most %d listen addresses", CONTROL_TLS_LISTEN_MAX);
	if (c->tls_principals[0] == '\0')
		return sb_invalid(err, "config: listen needs tls-principals, the file that says what each client "
				  "certificate's principal may do (docs/operations.md)");
	if (principals_load(c->tls_principals, &T.ps, err) < 0 || deny_list_open(c->tls_deny, &T.deny, err) < 0 ||
	    server_config(m, err) < 0)
		return -1;
	tls_config_set_peer_label(T.config, "control client");
	T.open = calloc(T.ps.n + 1, sizeof *T.open);
	if (T.open == NULL)
		return sb_fail(err, ENOMEM, "starting the TLS listeners");
	for (i = 0; i < want; i++) {
		const char *hp = json_string_value(json_array_get(c->tls_listen, i));

		fds[i] = listen_one(hp, err);
		if (fds[i] < 0)
			return -1;
		*n = i + 1;
		sb_info("serving the control API over mutual TLS on %s (%zu principals%s%s)", hp, T.ps.n,
			c->tls_deny[0] ? ", deny list " : "", c->tls_deny);
	}
	return 0;
}

/* Close after the client had its chance to send its request: a close with unread bytes in the
 * socket is a reset, which would destroy the refusal before the client reads it. The bytes are
 * discarded unread (never decrypted, never parsed), for at most REFUSE_DRAIN_MS. */
#define REFUSE_DRAIN_MS 1000
static void drain_close(int fd)
{
	int64_t deadline = clock_deadline_after(REFUSE_DRAIN_MS);
	char sink[4096];

	shutdown(fd, SHUT_WR);
	for (;;) {
		struct pollfd p = { .fd = fd, .events = POLLIN };
		int left = clock_remaining_ms(deadline);

		if (left == 0 || poll(&p, 1, left) <= 0 || recv(fd, sink, sizeof sink, MSG_DONTWAIT) <= 0)
			break;
	}
	close(fd);
}

/* A verified connection that will not be served: told why (it has proven who it is), closed. */
static void refuse_verified(int fd, struct tls_session *s, const char *kind, const char *why)
{
	struct sb_stream st;
	struct sb_err ignored;
	json_t *e = control_error(kind, "%s", why);

	tls_session_set_deadline(s, tls_deadline_after(1000));
	tls_session_stream(s, &st);
	if (e != NULL)
		control_send_stream(&st, e, CONTROL_RESPONSE_CAP, &ignored);
	json_decref(e);
	tls_session_close(s, &ignored);
	drain_close(fd);
}

/* The principal's slot: 0 taken, -1 at its bound. */
static int principal_take(const struct principal *p)
{
	size_t i = (size_t)(p - T.ps.p);
	int rc = -1;

	pthread_mutex_lock(&T.lock);
	if (T.open[i] < p->max_conns) {
		T.open[i]++;
		rc = 0;
	}
	pthread_mutex_unlock(&T.lock);
	return rc;
}

static void principal_give(const struct principal *p)
{
	pthread_mutex_lock(&T.lock);
	T.open[p - T.ps.p]--;
	pthread_mutex_unlock(&T.lock);
}

/* After the handshake: the principal, the deny list, its bound; then the connection is served. */
static void handshake_done(struct manager *m, int fd, struct tls_session *s)
{
	const char *name = tls_session_principal(s), *serial = tls_session_serial(s);
	const struct principal *p = principals_find(&T.ps, name);
	char why[160];

	if (deny_list_denies(T.deny, name, serial)) {
		sb_warn("refused a TLS control connection: principal %s, serial %s is on the deny list", name, serial);
		refuse_verified(fd, s, "refused", "this certificate is revoked (the manager's deny list)");
		return;
	}
	if (p == NULL) {
		sb_warn("refused a TLS control connection: principal %s is not in the principals file", name);
		snprintf(why, sizeof why, "principal %s may do nothing here (not in the manager's principals file)", name);
		refuse_verified(fd, s, "refused", why);
		return;
	}
	if (principal_take(p) < 0) {
		snprintf(why, sizeof why, "principal %s has %u connections open, its limit: nothing ran", name, p->max_conns);
		refuse_verified(fd, s, "unavailable", why);
		return;
	}
	if (conn_serve_tls(m, fd, s, p, T.deny) < 0)
		refuse_verified(fd, s, "unavailable", "the manager has as many control connections open as it may: "
				"nothing ran; try again when fewer clients are connected");
	principal_give(p);
}

static void *handshake_thread(void *arg)
{
	struct handshake *h = arg;
	struct tls_session *s = NULL;
	struct sb_err err;
	int rc;

	sb_err_clear(&err);
	rc = tls_session_open(T.config, h->fd, tls_deadline_after(CONTROL_TLS_HANDSHAKE_MS), &s, &err);
	if (!handshake_slots_give(&pending, &h->ticket)) {
		sb_warn("closed a TLS control connection still in its handshake: the oldest of %u in flight, "
			"for a newer one", CONTROL_TLS_HANDSHAKES_MAX);
		tls_session_free(s);
		close(h->fd);
	} else if (rc < 0) {
		/* Closed before any request is read: an unverified peer is never answered. */
		sb_warn("refused a TLS control connection: %s", err.msg);
		close(h->fd);
	} else {
		handshake_done(h->m, h->fd, s);
	}
	free(h);
	return NULL;
}

void control_tls_accept(struct manager *m, int lfd)
{
	int fd = accept4(lfd, NULL, NULL, SOCK_CLOEXEC);
	struct handshake *h;
	struct sb_err err;

	if (fd < 0)
		return;
	/* Requests and answers are small writes waited for at once: Nagle's delay (with the peer's
	 * delayed ACK) would add tens of ms to every call. */
	(void)setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &(int){ 1 }, sizeof(int));
	h = calloc(1, sizeof *h);
	if (h == NULL) {
		close(fd);
		return;
	}
	h->m = m;
	h->fd = fd;
	handshake_slots_take(&pending, fd, &h->ticket);
	if (sb_thread_detached(handshake_thread, h, &err) == 0)
		return;
	(void)handshake_slots_give(&pending, &h->ticket);
	close(fd);
	free(h);
}
