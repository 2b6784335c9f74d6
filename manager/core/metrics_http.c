/* The metrics listener (see metrics_http.h). Everything that reaches it is untrusted: a request head
 * is read into a fixed buffer (SCRAPE_HEAD_MAX, no allocation before it is whole), only its request
 * line is looked at, and each connection has one deadline for the whole exchange. One thread
 * multiplexes up to SCRAPE_SLOTS connections with poll(), so a scraper that connects and sends
 * nothing (or never reads) holds only its own slot until its deadline, never the listener. */
#include "metrics_http.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "clock.h"
#include "control.h"
#include "log.h"
#include "manager.h"
#include "metrics.h"
#include "status.h"
#include "thread.h"

#define SCRAPE_SLOTS 8
#define SCRAPE_HEAD_MAX 8192
#define SCRAPE_DEADLINE_MS 5000

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

struct scrape {
	int fd;                    /* -1: the slot is free */
	int64_t deadline_ms;
	size_t in_len;
	char in[SCRAPE_HEAD_MAX + 1];
	char *out;                 /* the whole answer, once the head is read */
	size_t out_len, out_sent;
};

struct responder {
	struct manager *m;
	int fd;
	struct scrape slot[SCRAPE_SLOTS];
};

static void scrape_close(struct scrape *s)
{
	close(s->fd);
	free(s->out);
	memset(s, 0, sizeof *s);
	s->fd = -1;
}

/* The answer: status line, the few headers a scraper needs, the body; the connection closes after. */
static void scrape_respond(struct scrape *s, const char *status, const char *extra, const char *type,
			   const char *body, size_t body_len)
{
	char head[256];
	int n = snprintf(head, sizeof head, "HTTP/1.1 %s\r\nContent-Type: %s\r\nContent-Length: %zu\r\n%s"
			 "Connection: close\r\n\r\n", status, type, body_len, extra);

	s->out = n > 0 && (size_t)n < sizeof head ? malloc((size_t)n + body_len) : NULL;
	if (s->out == NULL)
		return; /* no answer can be made: the connection is closed without one */
	memcpy(s->out, head, (size_t)n);
	memcpy(s->out + n, body, body_len);
	s->out_len = (size_t)n + body_len;
}

static void scrape_plain(struct scrape *s, const char *status, const char *extra, const char *body)
{
	scrape_respond(s, status, extra, "text/plain; charset=utf-8", body, strlen(body));
}

/* Only the request line decides: GET /metrics (a query string is ignored), HTTP/1.x. */
static void scrape_answer(struct responder *r, struct scrape *s)
{
	char *method = s->in, *target, *version, *text;
	struct sb_err err;
	size_t len;

	s->in[strcspn(s->in, "\r\n")] = '\0';
	target = strchr(method, ' ');
	version = target ? strchr(target + 1, ' ') : NULL;
	if (version == NULL || strncmp(version + 1, "HTTP/1.", 7) != 0) {
		scrape_plain(s, "400 Bad Request", "", "a request line is METHOD TARGET HTTP/1.x\n");
		return;
	}
	*target++ = '\0';
	*version = '\0';
	target[strcspn(target, "?")] = '\0';
	sb_err_clear(&err);
	if (strcmp(method, "GET") != 0) {
		scrape_plain(s, "405 Method Not Allowed", "Allow: GET\r\n", "only GET /metrics is served\n");
	} else if (strcmp(target, "/metrics") != 0) {
		scrape_plain(s, "404 Not Found", "", "only /metrics is served\n");
	} else if (status_metrics_text(r->m, &text, &len, &err) < 0) {
		sb_warn("metrics: cannot answer a scrape: %s", err.msg);
		scrape_plain(s, "500 Internal Server Error", "", "the metrics cannot be read now; the manager logged why\n");
	} else {
		scrape_respond(s, "200 OK", "", METRICS_CONTENT_TYPE, text, len);
		free(text);
	}
}

/* Readable: more of the head. 0 to keep the connection, -1 to close it. */
static int scrape_read(struct responder *r, struct scrape *s)
{
	ssize_t n = recv(s->fd, s->in + s->in_len, SCRAPE_HEAD_MAX - s->in_len, MSG_DONTWAIT);

	if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR))
		return 0;
	if (n <= 0)
		return -1;
	s->in_len += (size_t)n;
	s->in[s->in_len] = '\0';
	if (memmem(s->in, s->in_len, "\r\n\r\n", 4) != NULL || memmem(s->in, s->in_len, "\n\n", 2) != NULL)
		scrape_answer(r, s);
	else if (s->in_len == SCRAPE_HEAD_MAX)
		scrape_plain(s, "431 Request Header Fields Too Large", "", "the request head is over 8 KiB\n");
	else
		return 0;
	return s->out != NULL ? 0 : -1;
}

/* Writable: more of the answer. 0 while some is left, -1 once it is sent (or cannot be). */
static int scrape_write(struct scrape *s)
{
	ssize_t n = send(s->fd, s->out + s->out_sent, s->out_len - s->out_sent, MSG_DONTWAIT | MSG_NOSIGNAL);

	if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR))
		return 0;
	if (n <= 0)
		return -1;
	s->out_sent += (size_t)n;
	return s->out_sent < s->out_len ? 0 : -1;
}

/* A new connection in a free slot; with none free, the one nearest its deadline gives way, so a
 * crowd of silent connections cannot keep a real scrape out for longer than one deadline. */
static void scrape_accept(struct responder *r)
{
	int fd = accept4(r->fd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
	struct scrape *s = &r->slot[0];

	if (fd < 0) {
		if (errno == EMFILE || errno == ENFILE) {
			sb_warn("metrics: accept: %s", strerror(errno));
			sleep(1);
		}
		return;
	}
	for (size_t i = 0; i < SCRAPE_SLOTS; i++) {
		if (r->slot[i].fd < 0) {
			s = &r->slot[i];
			break;
		}
		if (r->slot[i].deadline_ms < s->deadline_ms)
			s = &r->slot[i];
	}
	if (s->fd >= 0)
		scrape_close(s);
	s->fd = fd;
	s->deadline_ms = clock_deadline_after(SCRAPE_DEADLINE_MS);
}

static void *responder_thread(void *arg)
{
	struct responder *r = arg;

	for (;;) {
		struct pollfd p[SCRAPE_SLOTS + 1] = { { .fd = r->fd, .events = POLLIN } };
		struct scrape *of[SCRAPE_SLOTS + 1] = { NULL };
		int timeout = -1, n = 1;

		for (size_t i = 0; i < SCRAPE_SLOTS; i++) {
			struct scrape *s = &r->slot[i];
			int left;

			if (s->fd < 0)
				continue;
			left = clock_remaining_ms(s->deadline_ms);
			timeout = timeout < 0 || left < timeout ? left : timeout;
			p[n] = (struct pollfd){ .fd = s->fd, .events = s->out ? POLLOUT : POLLIN };
			of[n++] = s;
		}
		if (poll(p, (nfds_t)n, timeout) < 0) {
			if (errno != EINTR) {
				sb_warn("metrics: poll: %s", strerror(errno));
				sleep(1);
			}
			continue;
		}
		for (int i = 1; i < n; i++) {
			struct scrape *s = of[i];
			int keep = 0;

			if (p[i].revents & (POLLERR | POLLNVAL))
				keep = -1;
			else if (p[i].revents & POLLOUT)
				keep = scrape_write(s);
			else if (p[i].revents & (POLLIN | POLLHUP))
				keep = scrape_read(r, s);
			if (keep < 0 || clock_remaining_ms(s->deadline_ms) == 0)
				scrape_close(s);
		}
		if (p[0].revents & POLLIN)
			scrape_accept(r);
	}
	return NULL;
}

/* ---- start ---- */

static int tcp_listen(const struct listen_addr *a, const char *addr, struct sb_err *err)
{
	int fd = socket(a->family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0), on = 1;

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

int metrics_http_start(struct manager *m, struct sb_err *err)
{
	const char *addr = m->cfg.metrics_listen;
	struct responder *r;
	struct listen_addr a;
	int fd;

	if (addr_parse(addr, &a, err) < 0)
		return -1;
	if (a.family == AF_UNIX) {
		/* The control socket's listener: a stale socket replaced, never another kind of file. */
		fd = control_listen(a.path, 0660, err);
		if (fd >= 0 && fcntl(fd, F_SETFL, O_NONBLOCK) < 0) {
			sb_fail_errno(err, "metrics-listen %s", addr);
			close(fd);
			fd = -1;
		}
	} else {
		fd = tcp_listen(&a, addr, err);
	}
	if (fd < 0)
		return -1;
	r = calloc(1, sizeof *r);
	if (r == NULL) {
		close(fd);
		return sb_fail(err, ENOMEM, "metrics-listen %s: out of memory", addr);
	}
	r->m = m;
	r->fd = fd;
	for (size_t i = 0; i < SCRAPE_SLOTS; i++)
		r->slot[i].fd = -1;
	if (sb_thread_detached(responder_thread, r, err) < 0) {
		close(fd);
		free(r);
		return -1;
	}
	sb_info("metrics on %s (GET /metrics)", addr);
	return 0;
}
