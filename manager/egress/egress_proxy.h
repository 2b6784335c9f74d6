/* The egress proxy of one sandbox under the network policy `proxy` (issue 28): a thread of the
 * manager serving the listener the manager holds inside that sandbox's network namespace
 * (127.0.0.1:EGRESS_PROXY_PORT there), CONNECT tunnels to the allow-list's destinations, bounded.
 * Never reads a tunnel's bytes; never connects anywhere the allow-list does not name. */
#ifndef SB_EGRESS_PROXY_H
#define SB_EGRESS_PROXY_H

#include "egress_allow.h"
#include "egress_log.h"
#include "error.h"

/* The port inside every such sandbox: fixed, since the namespace and its loopback are the
 * sandbox's own (no other listener of the host or the manager is there to collide with). */
#define EGRESS_PROXY_PORT 3128
#define EGRESS_PROXY_PORT_TEXT "3128"    /* the same, for the calls' HTTPS_PROXY (execpath.c) */

#define EGRESS_CONN_MAX 16             /* open connections per sandbox; one more gets 503 */
#define EGRESS_HEAD_MS 10000           /* from accept to a complete request head */
#define EGRESS_CONNECT_MS 10000        /* the connection to the destination */
#define EGRESS_IDLE_MS 300000          /* a tunnel with no byte either way */
#define EGRESS_TOTAL_MS 3600000        /* a tunnel's whole life */
#define EGRESS_BUF_BYTES 16384         /* per direction of a tunnel */

struct egress_proxy;

/* Takes listen_fd (bound and listening, close-on-exec) whatever the outcome; starts the thread that
 * serves it for session with the allow-list a (copied), every request read recorded in log as it
 * ends (CONNECT host:port, the status the sandbox got, the bytes each way; NULL: none). */
int egress_proxy_start(int listen_fd, const char *session, const struct egress_allow *a, struct egress_log *log,
		       struct egress_proxy **out, struct sb_err *err);

/* Ends the thread, every connection and the listener; *p becomes NULL. NULL: nothing. */
void egress_proxy_stop(struct egress_proxy **p);

#endif
