/* The HOST:PORT parser and the unix-socket listener of both programs (see sock.h). Owns no
 * descriptor after it returns one; never resolves a name. */
#include "sock.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

/* The port: decimal digits only. strtoul alone would take a sign or leading spaces ("+80", " 80"). */
static int port_parse(const char *s, uint16_t *port)
{
	unsigned long p;
	char *end;

	if (s[0] < '0' || s[0] > '9')
		return -1;
	errno = 0;
	p = strtoul(s, &end, 10);
	if (*end != '\0' || errno != 0 || p == 0 || p > 65535)
		return -1;
	*port = (uint16_t)p;
	return 0;
}

int sock_hostport_parse(const char *hostport, struct sockaddr_storage *ss, socklen_t *len, uint16_t *port_out,
			struct sb_err *err)
{
	struct sockaddr_in *v4 = (struct sockaddr_in *)ss;
	struct sockaddr_in6 *v6 = (struct sockaddr_in6 *)ss;
	const char *colon = strrchr(hostport, ':');
	char host[INET6_ADDRSTRLEN + 2];
	size_t hlen = colon != NULL ? (size_t)(colon - hostport) : 0;
	uint16_t port;
	bool numeric;

	memset(ss, 0, sizeof *ss);
	if (colon == NULL || hlen == 0 || hlen >= sizeof host)
		return sb_invalid(err, "%s: expected IPv4:PORT or [IPv6]:PORT", hostport);
	if (port_parse(colon + 1, &port) < 0)
		return sb_invalid(err, "%s: the port must be 1 to 65535", hostport);
	memcpy(host, hostport, hlen);
	host[hlen] = '\0';
	if (host[0] == '[' && hlen > 2 && host[hlen - 1] == ']') {
		host[hlen - 1] = '\0';
		v6->sin6_family = AF_INET6;
		v6->sin6_port = htons(port);
		*len = sizeof *v6;
		numeric = inet_pton(AF_INET6, host + 1, &v6->sin6_addr) == 1;
	} else {
		v4->sin_family = AF_INET;
		v4->sin_port = htons(port);
		*len = sizeof *v4;
		numeric = inet_pton(AF_INET, host, &v4->sin_addr) == 1;
	}
	if (!numeric) {
		memset(ss, 0, sizeof *ss);
		return sb_invalid(err, "%s: the host must be a numeric IP address", hostport);
	}
	if (port_out != NULL)
		*port_out = port;
	return 0;
}

int sock_listen_unix(const char *path, mode_t mode, int backlog, struct sb_err *err)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	struct stat st;
	mode_t old;
	int fd, rc;

	if (path[0] == '\0' || strlen(path) >= sizeof sa.sun_path)
		return sb_fail(err, ENAMETOOLONG, "socket path %s is empty or too long (max %zu bytes)", path,
			       sizeof sa.sun_path - 1);
	memcpy(sa.sun_path, path, strlen(path) + 1);
	/* Replace a stale socket of an earlier run, never any other kind of file. */
	if (lstat(path, &st) == 0) {
		if (!S_ISSOCK(st.st_mode))
			return sb_fail(err, EEXIST, "%s exists and is not a socket; refusing to replace it", path);
		if (unlink(path) < 0)
			return sb_fail_errno(err, "removing the stale socket %s", path);
	}
	fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return sb_fail_errno(err, "creating a unix socket");
	/* Bind under a restrictive umask: there is no window in which the socket is open to all. It is
	 * born 0600; chmod only ever widens that, to the mode asked for (0660: a metrics group). */
	old = umask(0177);
	rc = bind(fd, (struct sockaddr *)&sa, sizeof sa);
	umask(old);
	if (rc < 0 || (mode != 0600 && chmod(path, mode) < 0) || listen(fd, backlog) < 0) {
		sb_fail_errno(err, "listening on %s", path);
		close(fd);
		return -1;
	}
	return fd;
}

int sock_listen_loopback(int type_flags, uint16_t port)
{
	struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = htons(port),
				  .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	int one = 1, fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | type_flags, 0);

	if (fd < 0)
		return -1;
	if (setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) < 0 ||
	    bind(fd, (struct sockaddr *)&sa, sizeof sa) < 0 || listen(fd, 64) < 0) {
		int e = errno;

		close(fd);
		errno = e;
		return -1;
	}
	return fd;
}

ssize_t sock_send_fds(int sock, const void *buf, size_t len, const int *fds, size_t n)
{
	union {
		char buf[CMSG_SPACE(sizeof(int) * SOCK_FDS_MAX)];
		struct cmsghdr align;
	} c;
	struct iovec iov = { (void *)buf, len };
	struct msghdr m = { .msg_iov = &iov, .msg_iovlen = 1 };
	ssize_t sent;

	if (n > SOCK_FDS_MAX) {
		errno = EINVAL;
		return -1;
	}
	if (n > 0) {
		struct cmsghdr *cm;

		memset(c.buf, 0, sizeof c.buf);
		m.msg_control = c.buf;
		m.msg_controllen = CMSG_SPACE(sizeof(int) * n);
		cm = CMSG_FIRSTHDR(&m);
		cm->cmsg_level = SOL_SOCKET;
		cm->cmsg_type = SCM_RIGHTS;
		cm->cmsg_len = CMSG_LEN(sizeof(int) * n);
		memcpy(CMSG_DATA(cm), fds, sizeof(int) * n);
	}
	do
		sent = sendmsg(sock, &m, MSG_NOSIGNAL);
	while (sent < 0 && errno == EINTR);
	return sent;
}

ssize_t sock_recv_fds(int sock, void *buf, size_t len, int flags, int fds[SOCK_FDS_MAX], size_t *n)
{
	union {
		char buf[CMSG_SPACE(sizeof(int) * SOCK_FDS_MAX)];
		struct cmsghdr align;
	} c;
	struct iovec iov = { buf, len };
	struct msghdr m = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = c.buf, .msg_controllen = sizeof c.buf };
	struct cmsghdr *cm;
	ssize_t got;

	*n = 0;
	do
		got = recvmsg(sock, &m, flags | MSG_CMSG_CLOEXEC);
	while (got < 0 && errno == EINTR);
	if (got < 0)
		return -1;
	cm = CMSG_FIRSTHDR(&m);
	if (cm != NULL && cm->cmsg_level == SOL_SOCKET && cm->cmsg_type == SCM_RIGHTS) {
		*n = (cm->cmsg_len - CMSG_LEN(0)) / sizeof(int);
		memcpy(fds, CMSG_DATA(cm), *n * sizeof(int));
	}
	if ((m.msg_flags & MSG_CTRUNC) || (cm != NULL && *n == 0)) {
		for (size_t i = 0; i < *n; i++)
			close(fds[i]);
		*n = 0;
		errno = EPROTO;
		return -1;
	}
	return got;
}
