/* The network policy `proxy` on a backend whose sandbox network the manager cannot listen in (the
 * kubernetes backend: a pod's): the listener on the sandbox's 127.0.0.1:port is the agent's, and
 * each connection to it comes to the manager inside an mTLS connection the manager opened to the
 * agent (agent_net_accept), as every exec does. The relay hands the manager's egress proxy or edge
 * a listener of its own (a unix socket in the sandbox's manager-only private directory) and
 * carries each such connection to it, so that the proxy and the edge serve it exactly as the
 * listener the other backends hand over (one copy of their judging, allow-list and records).
 * Never reads a byte's meaning; never connects anywhere but that agent and that socket. */
#ifndef SB_AGENT_RELAY_H
#define SB_AGENT_RELAY_H

#include <stdint.h>

#include "error.h"
#include "tls.h"

#define AGENT_RELAY_TUNNELS_MAX 64      /* connections carried at once per port */
#define AGENT_RELAY_IDLE_MS (300 * 1000 + 5000) /* past the proxy's own idle bound (egress_proxy.h) */

struct agent_relay;

/* The relay of the sandbox's 127.0.0.1:port through the agent at address (config: the sandbox
 * generation's, outliving the relay): sock_path's listener made (0600; its directory the manager's
 * alone), the agent's listener proven (its first NetAccept answered: a start that returns 0 has
 * the port held before any command runs), and a thread that keeps one NetAccept waiting and carries
 * each connection. *listen_fd: the listener, close-on-exec, the caller's (the proxy's or edge's). */
int agent_relay_start(struct tls_config *config, const char *address, uint16_t port, const char *sock_path,
		      int *listen_fd, struct agent_relay **out, struct sb_err *err);

/* Ends the thread and every connection it carries, removes sock_path; *r becomes NULL. NULL: nothing. */
void agent_relay_stop(struct agent_relay **r);

#endif
