/* What the agent says against what its receipt proves: the manager records an exec's result only
 * as far as the verified receipt backs it (issue 27). The result travels unsigned; a compromised
 * agent could say anything in it. Pure: no I/O; the receipt must already be verified. */
#ifndef SB_RESULT_PROOF_H
#define SB_RESULT_PROOF_H

#include <jansson.h>

#include "error.h"

/* 0 when receipt confirms the command's namespace empty (boundary.confirmed), and result (the
 * agent's Result JSON) states a final status the agent may report (exited,
 * signaled, timed_out, cancelled) and the same status, exit code, signal and byte counts as receipt,
 * and its output, when whole (not truncated), has the receipt's digests. -1 with err naming the first
 * field that differs, both values said. */
int result_proof_check(const json_t *result, const json_t *receipt, struct sb_err *err);

#endif
