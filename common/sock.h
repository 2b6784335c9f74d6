/* The sockets both programs open the same way: one parser of a numeric HOST:PORT (the agent's
 * --listen, the manager's agent address) and one unix-socket listener (the agent's unix:PATH, the
 * manager's control and metrics sockets). Never resolves a name: no NSS in the static agent, no
 * resolver between the manager and a sandbox. */
#ifndef SB_SOCK_H
#define SB_SOCK_H

#include <stdint.h>
#include <sys/socket.h>
#include <sys/types.h>

#include "error.h"

/* IPv4:PORT or [IPv6]:PORT, the host a numeric address (inet_pton), the port 1 to 65535 in
 * decimal digits only (no sign, no space, no empty port). Fills *ss (zeroed first), *len and, unless
 * NULL, *port; -1 with err (EINVAL) otherwise. */
int sock_hostport_parse(const char *hostport, struct sockaddr_storage *ss, socklen_t *len, uint16_t *port,
			struct sb_err *err);

/* A listening unix socket at path, born with no permission for group or others (bound under
 * umask 0177: there is no moment at which another user could connect), then given mode. A stale
 * socket at path is replaced; any other kind of file there is refused (EEXIST), never removed.
 * Returns the descriptor (close-on-exec), or -1 with err. */
int sock_listen_unix(const char *path, mode_t mode, int backlog, struct sb_err *err);

/* A TCP listener on 127.0.0.1:port of the caller's network namespace, close-on-exec (no command
 * inherits it), type_flags added to the socket's type (SOCK_NONBLOCK); -1 with errno. */
int sock_listen_loopback(int type_flags, uint16_t port);

/* Descriptors passed over a unix socket (SCM_RIGHTS), at most SOCK_FDS_MAX at once. Both allocate
 * nothing and use no stdio, so a clone of a multi-threaded process may call them. */
#define SOCK_FDS_MAX 8

/* One sendmsg of buf (MSG_NOSIGNAL, through EINTR) with fds[0..n) riding on its first byte: what
 * sendmsg returned (a stream may take less than len: the rest goes by send). */
ssize_t sock_send_fds(int sock, const void *buf, size_t len, const int *fds, size_t n);

/* One recvmsg into buf (through EINTR; flags besides MSG_CMSG_CLOEXEC, which is always given), the
 * descriptors that came with it into fds and their count into *n. -1 with errno EPROTO when the
 * control data was cut or was not SCM_RIGHTS (every descriptor that came is closed); else what recvmsg
 * returned. */
ssize_t sock_recv_fds(int sock, void *buf, size_t len, int flags, int fds[SOCK_FDS_MAX], size_t *n);

#endif
