/* A client's connection to a manager over its unix socket or mutual TLS (see control_client.h).
 * Never sends a request to a TLS peer it has not verified; resends nothing (the caller's follow
 * rule decides that). */
#include "control_client.h"

#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "clock.h"
#include "control.h"
#include "tls.h"

bool control_address_is_tls(const char *address)
{
	return strncmp(address, CONTROL_TLS_PREFIX, strlen(CONTROL_TLS_PREFIX)) == 0;
}

/* The host of HOST:PORT as the name the manager's certificate must carry. */
static int server_name(const char *hostport, char *out, size_t len, struct sb_err *err)
{
	const char *env = getenv("SANDBOX_MANAGER_TLS_NAME"), *colon = strrchr(hostport, ':');

	if (env != NULL && env[0] != '\0')
		return snprintf(out, len, "%s", env) < (int)len ? tls_check_name(out, "SANDBOX_MANAGER_TLS_NAME", err) :
		       sb_invalid(err, "SANDBOX_MANAGER_TLS_NAME is too long");
	if (colon == NULL || (size_t)(colon - hostport) >= len)
		return sb_invalid(err, "tls://%s: want tls://HOST:PORT", hostport);
	snprintf(out, len, "%.*s", (int)(colon - hostport), hostport);
	return tls_check_name(out, "the manager's host (set SANDBOX_MANAGER_TLS_NAME for an IPv6 address)", err);
}

/* One connect to ai within the deadline: the descriptor (blocking again), or -1 with errno. */
static int connect_one(const struct addrinfo *ai, int64_t deadline)
{
	struct pollfd p;
	int fd, soerr = 0, saved;
	socklen_t sl = sizeof soerr;

	fd = socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	if (fd < 0)
		return -1;
	if (connect(fd, ai->ai_addr, ai->ai_addrlen) < 0 && errno != EINPROGRESS)
		goto fail;
	p = (struct pollfd){ .fd = fd, .events = POLLOUT };
	errno = 0;
	if (poll(&p, 1, clock_remaining_ms(deadline)) <= 0) {
		errno = errno ? errno : ETIMEDOUT;
		goto fail;
	}
	if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &soerr, &sl) < 0 || soerr != 0) {
		errno = soerr ? soerr : errno;
		goto fail;
	}
	/* Small requests waited for at once: no Nagle delay. */
	(void)setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &(int){ 1 }, sizeof(int));
	/* Blocking again: tls.c waits with poll and sends with MSG_DONTWAIT itself. */
	if (fcntl(fd, F_SETFL, 0) < 0)
		goto fail;
	return fd;
fail:
	saved = errno;
	close(fd);
	errno = saved;
	return -1;
}

/* HOST:PORT ([IPv6]:PORT) split into host and port, both NUL-terminated. */
static int hostport_split(const char *hostport, char *host, size_t hlen, char *port, size_t plen, struct sb_err *err)
{
	const char *colon = strrchr(hostport, ':');
	size_t n = colon != NULL ? (size_t)(colon - hostport) : 0;

	if (colon == NULL || n == 0 || n >= hlen || strlen(colon + 1) == 0 || strlen(colon + 1) >= plen ||
	    strspn(colon + 1, "0123456789") != strlen(colon + 1))
		return sb_invalid(err, "tls://%s: want tls://HOST:PORT", hostport);
	if (hostport[0] == '[' && hostport[n - 1] == ']' && n > 2)
		snprintf(host, hlen, "%.*s", (int)(n - 2), hostport + 1);
	else
		snprintf(host, hlen, "%.*s", (int)n, hostport);
	snprintf(port, plen, "%s", colon + 1);
	return 0;
}

/* A manager by address or by name: every address the name resolves to (getaddrinfo: /etc/hosts,
 * then DNS, as the system is configured) is tried in order within one connect bound. The name the
 * manager's certificate must carry is checked apart (server_name), so what the resolver answers
 * decides only where the handshake goes, never whom it trusts. The client is static against musl
 * (Makefile CLIENT_LIBC): a name is looked up in /etc/hosts, then by musl's own DNS resolver with
 * /etc/resolv.conf's servers; no NSS module is ever loaded. The sanitizer build links glibc, whose
 * getaddrinfo follows nsswitch.conf. */
static int tcp_connect(const char *hostport, struct sb_err *err)
{
	struct addrinfo hints = { .ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM, .ai_flags = AI_NUMERICSERV };
	struct addrinfo *res = NULL;
	char host[TLS_NAME_MAX + 1], port[8];
	int64_t deadline = clock_deadline_after(CONTROL_CLIENT_CONNECT_MS);
	int fd = -1, rc;

	if (hostport_split(hostport, host, sizeof host, port, sizeof port, err) < 0)
		return -1;
	rc = getaddrinfo(host, port, &hints, &res);
	if (rc != 0)
		return sb_fail(err, rc == EAI_SYSTEM ? errno : EHOSTUNREACH, "the manager at tls://%s: %s", hostport,
			       rc == EAI_SYSTEM ? strerror(errno) : gai_strerror(rc));
	errno = EHOSTUNREACH;
	for (const struct addrinfo *ai = res; ai != NULL && fd < 0 && clock_remaining_ms(deadline) > 0; ai = ai->ai_next)
		fd = connect_one(ai, deadline);
	if (fd < 0)
		sb_fail_errno(err, "the manager is not reachable at tls://%s", hostport);
	freeaddrinfo(res);
	return fd;
}

static int tls_open(struct control_conn *c, const char *hostport, struct sb_err *err)
{
	const char *cert = getenv("SANDBOX_MANAGER_TLS_CERT"), *key = getenv("SANDBOX_MANAGER_TLS_KEY");
	const char *ca = getenv("SANDBOX_MANAGER_TLS_CA");
	char name[TLS_NAME_MAX + 1];

	if (cert == NULL || key == NULL || ca == NULL || !cert[0] || !key[0] || !ca[0])
		return sb_invalid(err, "tls://%s needs this client's certificate: --tls-cert, --tls-key and --tls-ca (or "
				  "SANDBOX_MANAGER_TLS_CERT, _KEY and _CA)", hostport);
	if (server_name(hostport, name, sizeof name, err) < 0 ||
	    tls_config_client(&c->config, cert, key, ca, name, err) < 0)
		return -1;
	tls_config_set_peer_label(c->config, "manager");
	c->fd = tcp_connect(hostport, err);
	if (c->fd < 0)
		return -1;
	return tls_session_open(c->config, c->fd, tls_deadline_after(CONTROL_CLIENT_CONNECT_MS), &c->tls, err);
}

int control_conn_open(struct control_conn *c, const char *address, struct sb_err *err)
{
	int rc;

	memset(c, 0, sizeof *c);
	c->fd = -1;
	if (!control_address_is_tls(address)) {
		c->fd = control_connect(address, err);
		return c->fd < 0 ? -1 : 0;
	}
	rc = tls_open(c, address + strlen(CONTROL_TLS_PREFIX), err);
	if (rc < 0)
		control_conn_close(c);
	return rc;
}

int control_conn_send(struct control_conn *c, json_t *msg, struct sb_err *err)
{
	struct sb_stream s;

	if (c->tls == NULL)
		return control_send(c->fd, msg, CONTROL_REQUEST_CAP, err);
	tls_session_stream(c->tls, &s);
	return control_send_stream(&s, msg, CONTROL_REQUEST_CAP, err);
}

int control_conn_recv(struct control_conn *c, json_t **msg, struct sb_err *err)
{
	struct sb_stream s;

	if (c->tls == NULL)
		return control_recv(c->fd, CONTROL_RESPONSE_CAP, msg, err);
	tls_session_stream(c->tls, &s);
	return control_recv_stream(&s, CONTROL_RESPONSE_CAP, msg, err);
}

void control_conn_close(struct control_conn *c)
{
	struct sb_err ignored;

	if (c->tls != NULL)
		tls_session_close(c->tls, &ignored);
	c->tls = NULL;
	if (c->fd >= 0)
		close(c->fd);
	c->fd = -1;
	tls_config_free(c->config);
	c->config = NULL;
}

int control_conn_set_timeout(struct control_conn *c, int ms, struct sb_err *err)
{
	struct timeval tv = { ms / 1000, (ms % 1000) * 1000 };

	if (c->tls != NULL) {
		tls_session_set_deadline(c->tls, ms > 0 ? tls_deadline_after(ms) : TLS_NO_DEADLINE);
		return 0;
	}
	if (setsockopt(c->fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv) < 0 ||
	    setsockopt(c->fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv) < 0)
		return sb_fail_errno(err, "setting a timeout on the manager connection");
	return 0;
}

int control_conn_wait(struct control_conn *c, int ms)
{
	struct pollfd p = { .fd = c->fd, .events = POLLIN };

	if (c->tls != NULL && tls_session_pending(c->tls) > 0)
		return 1;
	return poll(&p, 1, ms);
}
