/* The control API over mutual TLS (serve --listen tls:HOST:PORT; docs/operations.md): its listeners,
 * the handshake each connection must pass before anything else, and what a principal may ask.
 * Nothing unauthenticated holds a control connection's slot (N1): handshakes have their own deadline
 * and budget; each principal has its own bound of open connections. */
#ifndef SB_CONTROL_TLS_H
#define SB_CONTROL_TLS_H

#include <jansson.h>
#include <stddef.h>

#include "error.h"
#include "principals.h"
#include "tls.h"

struct manager;

#define CONTROL_TLS_LISTEN_MAX 8
#define CONTROL_TLS_HANDSHAKE_MS 10000   /* a client that has not proven who it is by then is closed */
#define CONTROL_TLS_HANDSHAKES_MAX 64u   /* handshakes in flight at once; a newer one shuts the oldest down */
#define CONTROL_TLS_SERVER_DAYS 397     /* the manager's own server certificate, issued at each start */
#define CONTROL_TLS_SUFFIX ".principal.infra-sandbox"

/* The listeners of m->cfg.tls_listen (none: 0 and *n = 0), their certificates (issued by the
 * manager's CA for cfg.tls_names, or the operator's), the principals and the deny list. */
int control_tls_start(struct manager *m, int *fds, size_t *n, struct sb_err *err);

/* A connection waits on listener fd: accepted and handed to a handshake thread, or closed. */
void control_tls_accept(struct manager *m, int fd);

/* connections.c: serve a verified connection on this thread until it closes (0; s freed, fd closed),
 * or -1 when the control connections' cap is reached (nothing done: the caller refuses it). */
int conn_serve_tls(struct manager *m, int fd, struct tls_session *s, const struct principal *p,
		   struct deny_list *deny);

#endif
