/* The metrics listener (see metrics_http.h), served by libmicrohttpd. Everything that reaches it is
 * untrusted: MHD reads and parses the head within a fixed memory pool, only the method and path are
 * looked at, and one internal thread polls every connection, so a scraper that connects and sends
 * nothing (or never reads) holds only its own slot, and only until a newer one comes or it idles. */
#include "metrics_http.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <microhttpd.h>

#include "control.h"
#include "http_budget.h"
#include "log.h"
#include "manager.h"
#include "metrics.h"
#include "status.h"

#define SCRAPE_SLOTS 8
#define SCRAPE_IDLE_SECONDS 5
/* MHD's pool per connection: the head (8 KiB, as before) and the answer's header lines; a head over
 * it is refused 431 (measured on 0.9.75: a pool of N bytes takes a head of about N - 150). */
#define SCRAPE_MEMORY (8192 + 512)

struct listen_addr {
	int family;
	struct sockaddr_storage sa;
	socklen_t len;
	char path[sizeof ((struct sockaddr_un *)0)->sun_path];
};

static int addr_refuse(const char *addr, struct sb_err *err)
{
	return sb_invalid(err, "config: metrics-listen must be 127.0.0.1:PORT (any 127.x.y.z), [::1]:PORT or "
			  "unix:/PATH, not '%s': the metrics are plain HTTP without authentication, so they are served "
			  "on loopback or a unix socket only (scrape from elsewhere through an authenticating proxy)",
			  addr);
}

static int addr_parse(const char *addr, struct listen_addr *out, struct sb_err *err)
{
	const char *colon = strrchr(addr, ':'), *port_text = colon ? colon + 1 : "";
	char host[64];
	unsigned long port;
	char *end;

	memset(out, 0, sizeof *out);
	if (strncmp(addr, "unix:", 5) == 0) {
		if (addr[5] != '/')
			return addr_refuse(addr, err);
		if (strlen(addr + 5) >= sizeof out->path)
			return sb_fail(err, ENAMETOOLONG, "config: metrics-listen %s: a unix socket path holds at most %zu "
				       "bytes", addr, sizeof out->path - 1);
		out->family = AF_UNIX;
		memcpy(out->path, addr + 5, strlen(addr + 5) + 1);
		return 0;
	}
	errno = 0;
	port = strtoul(port_text, &end, 10);
	if (colon == NULL || (size_t)(colon - addr) >= sizeof host || port_text[0] < '0' || port_text[0] > '9' ||
	    *end != '\0' || errno != 0 || port < 1 || port > 65535)
		return addr_refuse(addr, err);
	memcpy(host, addr, (size_t)(colon - addr));
	host[colon - addr] = '\0';
	if (host[0] == '[' && host[strlen(host) - 1] == ']') {
		struct sockaddr_in6 *sa = (struct sockaddr_in6 *)&out->sa;

		host[strlen(host) - 1] = '\0';
		if (inet_pton(AF_INET6, host + 1, &sa->sin6_addr) != 1 || !IN6_IS_ADDR_LOOPBACK(&sa->sin6_addr))
			return addr_refuse(addr, err);
		sa->sin6_family = AF_INET6;
		sa->sin6_port = htons((uint16_t)port);
		out->len = sizeof *sa;
	} else {
		struct sockaddr_in *sa = (struct sockaddr_in *)&out->sa;

		if (inet_pton(AF_INET, host, &sa->sin_addr) != 1 || (ntohl(sa->sin_addr.s_addr) >> 24) != 127)
			return addr_refuse(addr, err);
		sa->sin_family = AF_INET;
		sa->sin_port = htons((uint16_t)port);
		out->len = sizeof *sa;
	}
	out->family = out->sa.ss_family;
	return 0;
}

int metrics_http_check(const char *addr, struct sb_err *err)
{
	struct listen_addr a;

	return addr_parse(addr, &a, err);
}

/* ---- one connection ---- */

/* Every connection is unauthenticated here: all of them share the budget, the oldest shed first. */
static struct http_budget scrapers = HTTP_BUDGET_INIT("metrics", SCRAPE_SLOTS);

static void scrape_notify(void *cls, struct MHD_Connection *conn, void **socket_context,
			  enum MHD_ConnectionNotificationCode toe)
{
	const union MHD_ConnectionInfo *fd = MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CONNECTION_FD);

	(void)cls;
	(void)socket_context;
	if (toe == MHD_CONNECTION_NOTIFY_STARTED && fd != NULL)
		http_budget_enter(&scrapers, conn, fd->connect_fd);
	else if (toe == MHD_CONNECTION_NOTIFY_CLOSED)
		http_budget_leave(&scrapers, conn);
}

/* One answer, and the connection closed after it (a scraper holds no slot between scrapes). */
static enum MHD_Result scrape_respond(struct MHD_Connection *conn, unsigned status, const char *allow,
				      const char *type, char *body, size_t len, enum MHD_ResponseMemoryMode mode)
{
	struct MHD_Response *r = MHD_create_response_from_buffer(len, body, mode);
	enum MHD_Result rc;

	if (r == NULL)
		return MHD_NO; /* no answer can be made: the connection is closed without one */
	MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, type);
	MHD_add_response_header(r, MHD_HTTP_HEADER_CONNECTION, "close");
	if (allow != NULL)
		MHD_add_response_header(r, MHD_HTTP_HEADER_ALLOW, allow);
	rc = MHD_queue_response(conn, status, r);
	MHD_destroy_response(r);
	return rc;
}

static enum MHD_Result scrape_plain(struct MHD_Connection *conn, unsigned status, const char *allow,
				    const char *body)
{
	return scrape_respond(conn, status, allow, "text/plain; charset=utf-8", (char *)body, strlen(body),
			      MHD_RESPMEM_PERSISTENT);
}

/* Only the method and the path decide: GET /metrics (MHD gives the path without its query string).
 * Answered on the first call, with the head: a body sent with it is never read (MHD closes after). */
static enum MHD_Result scrape_answer(void *cls, struct MHD_Connection *conn, const char *url, const char *method,
				     const char *version, const char *upload, size_t *upload_len, void **req_cls)
{
	struct manager *m = cls;
	struct sb_err err;
	char *text;
	size_t len;

	(void)version;
	(void)upload;
	(void)upload_len;
	(void)req_cls;
	sb_err_clear(&err);
	if (strcmp(method, "GET") != 0)
		return scrape_plain(conn, MHD_HTTP_METHOD_NOT_ALLOWED, "GET", "only GET /metrics is served\n");
	if (strcmp(url, "/metrics") != 0)
		return scrape_plain(conn, MHD_HTTP_NOT_FOUND, NULL, "only /metrics is served\n");
	if (status_metrics_text(m, &text, &len, &err) < 0) {
		sb_warn("metrics: cannot answer a scrape: %s", err.msg);
		return scrape_plain(conn, MHD_HTTP_INTERNAL_SERVER_ERROR, NULL,
				    "the metrics cannot be read now; the manager logged why\n");
	}
	return scrape_respond(conn, MHD_HTTP_OK, NULL, METRICS_CONTENT_TYPE, text, len, MHD_RESPMEM_MUST_FREE);
}

/* ---- start ---- */

static int tcp_listen(const struct listen_addr *a, const char *addr, struct sb_err *err)
{
	int fd = socket(a->family, SOCK_STREAM | SOCK_CLOEXEC, 0), on = 1;

	if (fd < 0)
		return sb_fail_errno(err, "metrics-listen %s: creating the socket", addr);
	/* A restart must not wait for the previous run's connections in TIME_WAIT. */
	if (setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &on, sizeof on) < 0 ||
	    bind(fd, (const struct sockaddr *)&a->sa, a->len) < 0 || listen(fd, 16) < 0) {
		sb_fail_errno(err, "metrics-listen %s: listening", addr);
		close(fd);
		return -1;
	}
	return fd;
}

/* The listener's daemon: one internal thread polls every connection (a scrape is a copy of counters
 * and one read of the records, short enough to answer in line). The bounds, all MHD's:
 * - SCRAPE_SLOTS connections through the budget above, a ninth shedding the oldest; MHD's own
 *   limit (twice that) refuses only a burst that comes faster than the shed ones are closed;
 * - SCRAPE_IDLE_SECONDS without progress closes a connection, silent or not reading (MHD closes
 *   it without an answer, as the hand-written responder did at its deadline);
 * - SCRAPE_MEMORY per connection: a head over 8 KiB is answered 431 by MHD itself (the client may
 *   see a reset instead, as the rest it sent is never read), a malformed one 400; bytes that are
 *   no request line at all MHD 0.9.75 waits on, so they are closed at the idle timeout, unanswered
 *   (the hand-written responder said 400). */
static int scrape_serve(struct manager *m, int fd, const char *addr, struct sb_err *err)
{
	struct MHD_Daemon *d = MHD_start_daemon(
		MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_POLL | MHD_USE_ERROR_LOG, 0, NULL, NULL, scrape_answer, m,
		MHD_OPTION_LISTEN_SOCKET, fd, MHD_OPTION_CONNECTION_LIMIT, (unsigned)(2 * SCRAPE_SLOTS),
		MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)SCRAPE_IDLE_SECONDS,
		MHD_OPTION_CONNECTION_MEMORY_LIMIT, (size_t)SCRAPE_MEMORY,
		MHD_OPTION_NOTIFY_CONNECTION, scrape_notify, NULL, MHD_OPTION_EXTERNAL_LOGGER, http_mhd_log, "metrics",
		MHD_OPTION_END);

	if (d == NULL)
		return sb_fail(err, EIO, "metrics-listen %s: the HTTP server (libmicrohttpd) did not start", addr);
	return 0; /* it serves until the process ends: the daemon is never stopped */
}

int metrics_http_start(struct manager *m, struct sb_err *err)
{
	const char *addr = m->cfg.metrics_listen;
	struct listen_addr a;
	int fd;

	if (addr_parse(addr, &a, err) < 0)
		return -1;
	if (a.family == AF_UNIX)
		/* The control socket's listener: a stale socket replaced, never another kind of file. */
		fd = control_listen(a.path, 0660, err);
	else
		fd = tcp_listen(&a, addr, err);
	if (fd < 0)
		return -1;
	if (scrape_serve(m, fd, addr, err) < 0) {
		close(fd);
		return -1;
	}
	sb_info("metrics on %s (GET /metrics)", addr);
	return 0;
}
