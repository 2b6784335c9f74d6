/* What the Codex bridge (codex_bridge.c) changes or refuses in the supervisor's requests, so that
 * no command of a thread runs outside the sandbox: Codex's own shell forced off in thread/start,
 * thread/resume and thread/fork, the managed bash tool added to thread/start, and the requests
 * that run a command on the host refused. Only the requests are read and edited here. */
#ifndef SB_CODEX_POLICY_H
#define SB_CODEX_POLICY_H

#include <jansson.h>
#include <stddef.h>

#include "bash_tool.h"
#include "daemon_call.h"

/* thread/start (is_start), thread/resume or thread/fork, its params edited in place: the shell off
 * and, for a start, the bash tool as v presents it with the timeouts of d's daemon. 0, or -1 with
 * why in msg (the request is then refused, never passed on). */
int codex_policy_thread(json_t *request, int is_start, const struct bash_tool_view *v, const struct daemon_peer *d,
			char *msg, size_t cap);

/* Does this method have Codex run a command on this host (thread/shellCommand, command/exec,
 * process/spawn)? */
int codex_policy_host_exec(const char *method);

#endif
