/* A plain stream connection carried inside a verified TLS session (tls.h), both ways, half-closes
 * included: the one copy of the byte pump that the agent (serve_net.c) and the manager
 * (agent_relay.c) run at the two ends of a tunnel of policy `proxy` on the kubernetes backend. */
#ifndef SB_TLS_PIPE_H
#define SB_TLS_PIPE_H

#include "tls.h"

/* Copies the session's bytes to plain_fd and plain_fd's into the session (net_fd: the session's
 * socket, polled) until both ways ended: the peer's close_notify closes plain_fd's writing half,
 * plain_fd's end of stream sends close_notify. Every wait is bounded by idle_ms. 0 once both ended,
 * -1 with errno on an error, a TLS failure or idle_ms without a byte (ETIMEDOUT). Closes neither
 * descriptor and does not free the session. */
int tls_pipe(struct tls_session *s, int net_fd, int plain_fd, int idle_ms);

#endif
