/* The MCP protocol of `sandbox-manager mcp`, shared by its transports (stdio in mcp.c, Streamable
 * HTTP in mcp_http.c): JSON-RPC messages, the protocol versions (the stateless 2026-07-28 beside
 * the initialize-based ones), the methods, and the one queue of tools/call requests (mcp_jobs.c).
 * A transport hands each message in with an origin saying where its answers go; nothing here
 * reads or writes a descriptor of a client. */
#ifndef SB_MCP_PROTO_H
#define SB_MCP_PROTO_H

#include <jansson.h>
#include <stddef.h>

#include "follow.h"

/* JSON-RPC and MCP error codes (the last three: 2026-07-28's, basic/index "Error Codes"). */
enum { RPC_PARSE = -32700, RPC_INVALID_REQUEST = -32600, RPC_NO_METHOD = -32601, RPC_INVALID_PARAMS = -32602,
       RPC_INTERNAL = -32603, RPC_HEADER_MISMATCH = -32020, RPC_MISSING_CAPABILITY = -32021,
       RPC_UNSUPPORTED_VERSION = -32022 };

/* Where the messages about one request go. send consumes msg (a response or a notification about
 * the request); done is called exactly once for every request handed in, after its last send, and
 * possibly from the worker thread (a cancelled call ends with done and no response). */
struct mcp_sink {
	void (*send)(struct mcp_sink *s, json_t *msg);
	void (*done)(struct mcp_sink *s);
};

/* One message as its transport received it. */
struct mcp_origin {
	struct mcp_sink *sink;
	int http;                 /* Streamable HTTP: the headers below were sent */
	const char *hdr_version;  /* MCP-Protocol-Version, or NULL */
	const char *hdr_method;   /* Mcp-Method, or NULL */
	const char *hdr_name;     /* Mcp-Name, or NULL */
	int legacy_proto;         /* stdio: the version the initialize handshake chose (index), or -1 */
	/* Set by mcp_proto_message: */
	int modern;               /* the message was served as 2026-07-28 */
	int negotiated;           /* initialize answered with this version (index), else -1 */
};

/* What one message was. */
enum mcp_kind { MCP_REQUEST, MCP_NOTIFICATION, MCP_RESPONSE, MCP_BAD };

/* The settings every transport shares; set once before mcp_proto_start. */
struct mcp_settings {
	const char *session, *version;
	const struct follow_list *managers; /* the daemons the calls go to (follow.h) */
	size_t max_output_chars;
};

/* The versions, newest first; index 0 is the stateless one. */
extern const char *const mcp_versions[];
extern const size_t mcp_versions_count;
#define MCP_MODERN_VERSIONS 1 /* mcp_versions[0 .. this) are served without a handshake */

/* Start the worker that runs the calls; -1 when it could not start. */
int mcp_proto_start(const struct mcp_settings *st);
/* Handle one message (len bytes of JSON). A request always gets done() on o->sink, at once or
 * when its call ends; anything else never does. MCP_BAD: an error answer was sent (no done). */
enum mcp_kind mcp_proto_message(const char *text, size_t len, struct mcp_origin *o);
/* The client of this sink went away: its queued calls are dropped (done at once), its running one
 * is cancelled in the manager (done when it ends). */
void mcp_proto_cancel_sink(struct mcp_sink *s);
/* The transport stops: wait up to `seconds` for the calls received, then drop the rest. 0: all
 * done; 1: a call is still running (left to the manager, which records its end): the caller exits
 * now, without waiting for it; -1: the worker could not be joined. */
int mcp_proto_drain(int seconds);

/* A result message for id (result consumed); a modern one carries resultType and serverInfo. */
json_t *mcp_result_msg(json_t *id, json_t *result, int modern);
/* An error message for id (NULL: id null), with optional data (consumed). */
json_t *mcp_error_msg(json_t *id, int code, json_t *data, const char *fmt, ...) __attribute__((format(printf, 4, 5)));

#endif
