/* The daemon's "status" and "metrics" answers: what an operator looks at, read from the records
 * (records_counts), the live list and the in-process metrics (metrics.h), with the health verdict.
 * Only reads; changes nothing.
 *
 * The health rule (docs/operations.md "Status and health"): "degraded" while any session is
 * `reserved` (its sandbox's end is not proven: calls and delete are refused until an operator ends
 * it) or any session not deleted holds an `uncertain` exec (its outcome is unknown: someone has to
 * reconcile its workspace by hand); each reason is named in "problems". Otherwise "healthy". */
#ifndef SB_MANAGER_STATUS_H
#define SB_MANAGER_STATUS_H

#include <jansson.h>
#include <stddef.h>

#include "error.h"

struct manager;

json_t *status_answer(struct manager *m);
/* {"ok": true, "content_type": METRICS_CONTENT_TYPE, "text": the exposition}. */
json_t *status_metrics_answer(struct manager *m);
/* The exposition (malloc'd, *len bytes), for the HTTP listener too; -1 with err. */
int status_metrics_text(struct manager *m, char **text, size_t *len, struct sb_err *err);

#endif
