/* The listener of `sandbox-manager mcp --http` (see mcp_http.h): the address (a unix socket, or
 * 127.0.0.1 or [::1]: refused otherwise, so nothing off this machine can reach the tool), the
 * bearer token's file, and the server (mcp_http.c's libmicrohttpd) until SIGTERM or SIGINT. */
#include "mcp_http.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "log.h"
#include "mcp.h"
#include "mcp_proto.h"

#define DRAIN_SECONDS 10

static volatile sig_atomic_t stopping;

static void on_stop(int sig)
{
	(void)sig;
	stopping = 1;
}

/* The token: a regular file of this user's, mode 0600 or stricter (no group or other bits), one
 * line of MCP_TOKEN_MIN to MCP_TOKEN_CAP visible ASCII characters. */
static int token_load(struct mcp_http *h, const char *path, struct sb_err *err)
{
	int fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK);
	struct stat sb;
	ssize_t n;

	if (fd < 0)
		return sb_fail_errno(err, "--token-file %s", path);
	if (fstat(fd, &sb) < 0) {
		close(fd);
		return sb_fail_errno(err, "--token-file %s", path);
	}
	if (!S_ISREG(sb.st_mode) || (sb.st_mode & 077) != 0 || sb.st_uid != geteuid()) {
		close(fd);
		return sb_fail(err, EPERM, "--token-file %s must be a regular file owned by uid %d with mode 0600 (it is "
			       "%04o, uid %d)", path, (int)geteuid(), (unsigned)(sb.st_mode & 07777), (int)sb.st_uid);
	}
	n = read(fd, h->token, sizeof h->token);
	close(fd);
	if (n < 0)
		return sb_fail_errno(err, "reading --token-file %s", path);
	while (n > 0 && (h->token[n - 1] == '\n' || h->token[n - 1] == '\r'))
		n--;
	h->token_len = (size_t)n;
	for (ssize_t i = 0; i < n; i++)
		if (h->token[i] < 0x21 || h->token[i] > 0x7e)
			return sb_invalid(err, "--token-file %s: the token is one line of visible ASCII", path);
	if (n < MCP_TOKEN_MIN || n > MCP_TOKEN_CAP)
		return sb_invalid(err, "--token-file %s: the token has %d to %d characters", path, MCP_TOKEN_MIN,
				  MCP_TOKEN_CAP);
	h->token[n] = '\0';
	return 0;
}

static int listen_unix(struct mcp_http *h, const char *path, struct sb_err *err)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	mode_t old;
	int rc;

	if (path[0] != '/' || strlen(path) >= sizeof sa.sun_path)
		return sb_invalid(err, "unix:PATH takes an absolute path under %zu bytes", sizeof sa.sun_path);
	memcpy(sa.sun_path, path, strlen(path) + 1);
	if ((h->fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0)) < 0)
		return sb_fail_errno(err, "socket");
	old = umask(0177); /* born 0600: no moment at which another user could connect */
	rc = bind(h->fd, (struct sockaddr *)&sa, sizeof sa);
	umask(old);
	if (rc < 0)
		return sb_fail_errno(err, "binding %s%s", path, errno == EADDRINUSE ? " (it exists: remove it if no "
				     "server listens there)" : "");
	memcpy(h->unix_path, path, strlen(path) + 1);
	return 0;
}

/* 127.0.0.1:PORT or [::1]:PORT; anything else is refused. */
static int listen_tcp(struct mcp_http *h, const char *addr, struct sb_err *err)
{
	struct sockaddr_storage ss = { 0 };
	struct sockaddr_in *in4 = (struct sockaddr_in *)&ss;
	struct sockaddr_in6 *in6 = (struct sockaddr_in6 *)&ss;
	const char *port_s;
	char *end;
	unsigned long port;
	socklen_t len;
	int one = 1;

	if (strncmp(addr, "127.0.0.1:", 10) == 0) {
		port_s = addr + 10;
		in4->sin_family = AF_INET;
		in4->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
		len = sizeof *in4;
	} else if (strncmp(addr, "[::1]:", 6) == 0) {
		port_s = addr + 6;
		in6->sin6_family = AF_INET6;
		in6->sin6_addr = in6addr_loopback;
		len = sizeof *in6;
	} else {
		return sb_invalid(err, "the address is unix:PATH, 127.0.0.1:PORT or [::1]:PORT (loopback only)");
	}
	errno = 0;
	port = strtoul(port_s, &end, 10);
	if (port_s[0] < '0' || port_s[0] > '9' || *end != '\0' || errno != 0 || port > 65535)
		return sb_invalid(err, "the port is a number from 0 to 65535");
	in4->sin_port = htons((uint16_t)port); /* sin_port and sin6_port share their place */
	if (ss.ss_family == AF_INET6)
		in6->sin6_port = htons((uint16_t)port);
	if ((h->fd = socket(ss.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0)) < 0)
		return sb_fail_errno(err, "socket");
	if (setsockopt(h->fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) < 0 ||
	    bind(h->fd, (struct sockaddr *)&ss, len) < 0)
		return sb_fail_errno(err, "binding %s", addr);
	return 0;
}

/* One listener per process, in static storage: connection threads read its token until the process
 * ends (they are detached, and a stop drains calls, not threads), so it is never freed. */
struct mcp_http *mcp_http_open(const char *addr, const char *token_file, struct sb_err *err)
{
	static struct mcp_http the_listener;
	struct mcp_http *h = &the_listener;
	int rc;

	memset(h, 0, sizeof *h);
	h->fd = -1;
	rc = token_load(h, token_file, err);
	if (rc == 0)
		rc = strncmp(addr, "unix:", 5) == 0 ? listen_unix(h, addr + 5, err) : listen_tcp(h, addr, err);
	if (rc == 0 && listen(h->fd, 64) < 0)
		rc = sb_fail_errno(err, "listen");
	if (rc < 0) {
		if (h->fd >= 0)
			close(h->fd);
		if (h->unix_path[0] != '\0')
			unlink(h->unix_path);
		explicit_bzero(h->token, sizeof h->token);
		return NULL;
	}
	return h;
}

/* Where clients reach it, for the log (port 0 gets a port only now). */
static void log_address(const struct mcp_http *h)
{
	struct sockaddr_storage ss;
	socklen_t len = sizeof ss;
	char ip[INET6_ADDRSTRLEN] = "?";
	int port = 0;

	if (h->unix_path[0] != '\0') {
		sb_info("mcp: listening on unix:%s (POST /mcp)", h->unix_path);
		return;
	}
	if (getsockname(h->fd, (struct sockaddr *)&ss, &len) == 0) {
		if (ss.ss_family == AF_INET) {
			inet_ntop(AF_INET, &((struct sockaddr_in *)&ss)->sin_addr, ip, sizeof ip);
			port = ntohs(((struct sockaddr_in *)&ss)->sin_port);
		} else {
			inet_ntop(AF_INET6, &((struct sockaddr_in6 *)&ss)->sin6_addr, ip, sizeof ip);
			port = ntohs(((struct sockaddr_in6 *)&ss)->sin6_port);
		}
	}
	sb_info("mcp: listening on http://%s%s%s:%d/mcp", ss.ss_family == AF_INET6 ? "[" : "", ip,
		ss.ss_family == AF_INET6 ? "]" : "", port);
}

int mcp_http_serve(struct mcp_http *h)
{
	struct sigaction sa = { .sa_handler = on_stop };
	struct sb_err err;
	int rc;

	sigemptyset(&sa.sa_mask);
	sigaction(SIGTERM, &sa, NULL);
	sigaction(SIGINT, &sa, NULL);
	if (mcp_http_start(h, &err) < 0) {
		sb_error("%s", err.msg);
		close(h->fd);
		if (h->unix_path[0] != '\0')
			unlink(h->unix_path);
		return 1;
	}
	log_address(h);
	while (!stopping)
		poll(NULL, 0, 250);
	mcp_http_quiesce(h);
	if (h->unix_path[0] != '\0')
		unlink(h->unix_path);
	sb_info("mcp: http: stopping: answering the calls received for up to %d s", DRAIN_SECONDS);
	/* MHD is not stopped: its connections' threads may be answering the calls just drained, and
	 * the process ends with them. */
	rc = mcp_proto_drain(DRAIN_SECONDS);
	return rc < 0 ? 1 : 0;
}

const struct mcp_http_ops mcp_http_ops = { mcp_http_open, mcp_http_serve };
