/* The agent-protocol client's two files' shared parts: agent_reply.c judges replies, agent_client.c
 * does the I/O and reports an agent's error or a stray reply the same way. Only agentlink/ includes it. */
#ifndef SB_AGENT_CLIENT_INTERNAL_H
#define SB_AGENT_CLIENT_INTERNAL_H

#include <stdint.h>

#include "error.h"
#include "sandbox.pb-c.h"

int agent_error_fail(const Sandbox__Error *e, const char *what, uint32_t *code, struct sb_err *err);
int unexpected(const Sandbox__Envelope *m, const char *waiting_for, struct sb_err *err);

#endif
