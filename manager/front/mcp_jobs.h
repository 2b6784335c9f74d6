/* The tools/call requests of `sandbox-manager mcp` (mcp_proto.c): validated, queued, and run one
 * at a time by one worker against the daemon's control socket, with progress and cancellation.
 * Every transport's calls share the one queue (the session runs one command at a time anyway). */
#ifndef SB_MCP_JOBS_H
#define SB_MCP_JOBS_H

#include <jansson.h>

#include "error.h"
#include "mcp_proto.h"

int mcp_jobs_start(const struct mcp_settings *st);
/* The daemon's timeout settings (asked once, then kept); -1 with err when it cannot be reached. */
int mcp_jobs_config(long long *max_timeout, long long *default_timeout, struct sb_err *err);
/* One tools/call for the bash tool: answered at once when refused, else queued; done() on the
 * sink either way. structured: the client takes structuredContent; modern: 2026-07-28 results. */
void mcp_jobs_call(json_t *id, json_t *params, struct mcp_sink *sink, int structured, int modern);
/* notifications/cancelled from this sink for id; and every call of a sink whose client left. */
void mcp_jobs_cancel_id(struct mcp_sink *sink, json_t *id);
void mcp_jobs_cancel_sink(struct mcp_sink *sink);
int mcp_jobs_drain(int seconds);
/* The bash tool's view for a client (structured or not). */
const struct bash_tool_view *mcp_jobs_view(int structured, struct bash_tool_view *v);

#endif
