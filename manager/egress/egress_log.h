/* The record of one exec's egress: every request that left (or tried to leave) the sandbox while
 * the exec ran, appended by the proxy's thread, read by the records. Bounded: the counts are always
 * exact, the details are kept up to a cap and counted as dropped after it. Never holds a string from
 * a request raw: each is kept terminal-safe (common/textesc.h). No I/O. */
#ifndef SB_EGRESS_LOG_H
#define SB_EGRESS_LOG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "k8s_request.h"

#define EGRESS_LOG_DETAILS_MAX 512   /* the default cap on details per exec */
#define EGRESS_LOG_STRING_MAX 4096   /* bytes of one string of a detail; a longer one is cut, and says so */

/* One request as the proxy saw it end. */
struct egress_request {
	const char *method;              /* "GET", "PATCH", "CONNECT" */
	const char *host;                /* the destination, as the sandbox named it */
	const char *path;                /* the request target's path and query, as sent; NULL for CONNECT */
	const struct k8s_request *k8s;   /* the attributes, for a request to a Kubernetes grant; else NULL */
	bool refused;                    /* refused by the proxy (its 403: a grant or the allow-list) */
	int status;                      /* status the sandbox got; 0: none (upstream failed, cut short) */
	uint64_t bytes_up, bytes_down;   /* body bytes (a tunnel: both ways) */
	uint64_t duration_ms;
	bool begun;                      /* egress_log_begin was called for it when it started */
};

/* The counts, exact whatever the cap. */
struct egress_counts {
	uint64_t requests;
	uint64_t refused;              /* by the proxy */
	/* Mutating requests (k8s_request_mutating; with no Kubernetes attributes, any method but GET and
	 * HEAD, a CONNECT included: what a tunnel carried is unread) that were not refused by the proxy
	 * and got a 2xx, or 101 (an upgrade: exec, attach, port-forward started). A dry run counts too:
	 * its detail says dry_run, and an admission webhook with side effects acts on it all the same. */
	uint64_t mutating_accepted;
	/* Mutating requests forwarded that got no status: they may have been applied. */
	uint64_t mutating_unanswered;
	uint64_t bytes_up, bytes_down;
	uint64_t details_dropped;      /* requests past the cap (or out of memory) kept in counts only */
};

struct egress_log;

/* An empty log keeping up to details_max details (0: none, counts only). NULL when out of memory. */
struct egress_log *egress_log_new(size_t details_max);
void egress_log_free(struct egress_log *log);

/* Record one request. Safe from any thread. Never fails: a detail that cannot be kept (the cap,
 * out of memory) is counted in details_dropped, and every count is still updated. */
void egress_log_append(struct egress_log *log, const struct egress_request *req);

void egress_log_counts(struct egress_log *log, struct egress_counts *out);

/* The uncertain exec's evidence: true when a mutating request may have been applied by the other
 * side: mutating_accepted or mutating_unanswered is not 0. false is the statement "no mutating
 * request left the sandbox and was accepted". */
bool egress_log_mutating_accepted(struct egress_log *log);

/* The log as JSON, for `records --exec ID` and the store (print it with textesc_json_dumps):
 *   {"requests": N, "refused": N, "mutating_accepted": N, "mutating_unanswered": N,
 *    "bytes_up": N, "bytes_down": N, "details_dropped": N,
 *    "details": [
 *      {"method": "PATCH", "host": "kubernetes.default", "path": "/apis/...?dryRun=All",
 *       "status": 200, "refused": false, "mutating": true,
 *       "bytes_up": N, "bytes_down": N, "duration_ms": N,
 *       "kubernetes": {"verb": "patch", "group": "apps", "resource": "deployments",
 *                      "subresource": "scale", "namespace": "default", "name": "payments",
 *                      "dry_run": true, "upgrade": false},
 *       "escaped": ["path"], "cut": ["path"]}, ...]}
 * In order of append. "path" is absent for a CONNECT, "kubernetes" for a request with no attributes
 * (its strings "" when the request has none: group for the core group), "escaped" and "cut" when
 * empty. "escaped" names the strings that held bytes a terminal acts on or not UTF-8: they are in
 * textesc_encode's escaped form (textesc_decode gives the bytes back); the others are as sent.
 * "cut" names the strings kept to their first EGRESS_LOG_STRING_MAX bytes. NULL when out of memory. */
json_t *egress_log_json(struct egress_log *log);

/* A request started (a head read): it is in flight until its egress_log_append (with .begun). */
void egress_log_begin(struct egress_log *log);

/* What the log holds as egress_log_json gives it, and the log emptied, in one step (an exec's end:
 * its requests go with its record, and the next exec starts from none), after waiting up to wait_ms
 * for the requests in flight to end; those still open are counted as "unfinished" and recorded with
 * whichever exec runs when they end. NULL when nothing was recorded (no request), or out of memory
 * (the log then stays as it was). */
json_t *egress_log_drain(struct egress_log *log, int wait_ms);

/* The details as text, one line each, for a terminal: "PATCH kubernetes.default /apis/... 200 12ms
 * up 10 down 20 patch apps/deployments default/payments dry-run"; then a line with the counts.
 * Every string from a request is terminal-safe. malloc'd; NULL when out of memory. */
char *egress_log_text(struct egress_log *log);

#endif
