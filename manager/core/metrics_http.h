/* The opt-in metrics listener (`serve --metrics-listen ADDR`): libmicrohttpd on one thread, answering
 * `GET /metrics` with the exposition (status.h) and nothing else. Plain HTTP without
 * authentication, so it listens on loopback or a unix socket only, never on an address other hosts
 * can reach; every connection is answered once and closed, and one that is slow or silent is
 * dropped when it idles, or when newer ones need its slot, without holding up any other. */
#ifndef SB_MANAGER_METRICS_HTTP_H
#define SB_MANAGER_METRICS_HTTP_H

#include "error.h"

struct manager;

/* ADDR is 127.x.y.z:PORT, [::1]:PORT or unix:/ABSOLUTE/PATH (the socket mode 0660: the manager's
 * uid and group). 0, or -1 with err saying what is wrong with it. */
int metrics_http_check(const char *addr, struct sb_err *err);

/* Bind m->cfg.metrics_listen and start the responder's thread; -1 with err when it cannot. */
int metrics_http_start(struct manager *m, struct sb_err *err);

#endif
