/* The MCP protocol of `sandbox-manager mcp` (see mcp_proto.h). Two eras on the same methods:
 * a request whose _meta names io.modelcontextprotocol/protocolVersion (or server/discover) is
 * served statelessly as that revision, from what the request itself says (2026-07-28,
 * basic/index "Statelessness"); any other request is served as the version the transport's
 * initialize handshake chose (stdio) or its MCP-Protocol-Version header names (HTTP). */
#include "mcp_proto.h"

#include <mbedtls/base64.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bash_tool.h"
#include "error.h"
#include "log.h"
#include "mcp_jobs.h"

const char *const mcp_versions[] = { "2026-07-28", "2025-11-25", "2025-06-18", "2025-03-26", "2024-11-05" };
const size_t mcp_versions_count = sizeof mcp_versions / sizeof mcp_versions[0];
#define STRUCTURED_UNTIL 2   /* outputSchema and structuredContent exist from 2025-06-18 on */
#define LEGACY_HTTP_DEFAULT 3 /* an HTTP request without the header: 2025-03-26 (transports) */
#define LIST_TTL_MS 300000   /* the tool list and discover: the config is read once per process */

#define META_VERSION "io.modelcontextprotocol/protocolVersion"
#define META_CAPS "io.modelcontextprotocol/clientCapabilities"
#define INSTRUCTIONS "Use the bash tool for every shell command: it runs in this session's sandbox."

static struct mcp_settings st;

static int version_index(const char *v)
{
	for (size_t i = 0; v != NULL && i < mcp_versions_count; i++)
		if (strcmp(mcp_versions[i], v) == 0)
			return (int)i;
	return -1;
}

static json_t *versions_json(void)
{
	json_t *a = json_array();

	for (size_t i = 0; a != NULL && i < mcp_versions_count; i++)
		json_array_append_new(a, json_string(mcp_versions[i]));
	return a;
}

json_t *mcp_error_msg(json_t *id, int code, json_t *data, const char *fmt, ...)
{
	char msg[SB_ERR_MSG_MAX];
	va_list ap;
	json_t *m;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof msg, fmt, ap);
	va_end(ap);
	m = json_pack("{s:s, s:O, s:{s:i, s:s}}", "jsonrpc", "2.0", "id", id ? id : json_null(), "error", "code", code,
		      "message", msg);
	if (m != NULL && data != NULL)
		json_object_set(json_object_get(m, "error"), "data", data);
	json_decref(data);
	return m;
}

json_t *mcp_result_msg(json_t *id, json_t *result, int modern)
{
	if (result == NULL)
		return mcp_error_msg(id, RPC_INTERNAL, NULL, "out of memory building the result");
	if (modern) {
		json_t *meta = json_object_get(result, "_meta");

		if (!json_is_object(meta)) {
			meta = json_object();
			json_object_set_new(result, "_meta", meta);
		}
		json_object_set_new(result, "resultType", json_string("complete"));
		json_object_set_new(meta, "io.modelcontextprotocol/serverInfo",
				    json_pack("{s:s, s:s}", "name", "sandbox-manager", "version", st.version));
	}
	return json_pack("{s:s, s:O, s:o}", "jsonrpc", "2.0", "id", id, "result", result);
}

/* Answer a request now: the answer (consumed), then done. */
static void answer(struct mcp_origin *o, json_t *msg)
{
	if (msg != NULL)
		o->sink->send(o->sink, msg);
	o->sink->done(o->sink);
}

/* ---- which era and version a request is ---- */

/* Mcp-Name carries a name as it is or as "=?base64?...?=" (transports, "Value Encoding"). */
static int header_name_matches(const char *hdr, const char *name)
{
	size_t n = strlen(hdr), out = 0;
	unsigned char buf[512];

	if (n < 11 || strncmp(hdr, "=?base64?", 9) != 0 || strcmp(hdr + n - 2, "?=") != 0)
		return strcmp(hdr, name) == 0;
	if (mbedtls_base64_decode(buf, sizeof buf, &out, (const unsigned char *)hdr + 9, n - 11) != 0)
		return 0;
	return out == strlen(name) && memcmp(buf, name, out) == 0;
}

/* A header that does not say what the body says (what_body: "method is"): answered; -1. */
static int header_mismatch(struct mcp_origin *o, json_t *id, const char *header, const char *hdr,
			   const char *what_body, const char *body)
{
	answer(o, mcp_error_msg(id, RPC_HEADER_MISMATCH, NULL, "Header mismatch: %s %.100s, the body's %s %.100s", header,
				hdr ?: "(missing)", what_body, body));
	return -1;
}

/* A modern request's envelope: 0 with its version index, else -1 with the error answered. */
static int modern_check(json_t *id, const char *method, json_t *params, struct mcp_origin *o)
{
	json_t *meta = json_object_get(params, "_meta");
	const char *asked = json_string_value(json_object_get(meta, META_VERSION));
	const char *name = json_string_value(json_object_get(params, "name"));
	int v = version_index(asked);

	if (asked == NULL || !json_is_object(json_object_get(meta, META_CAPS))) {
		answer(o, mcp_error_msg(id, RPC_INVALID_PARAMS, NULL, "Invalid params: _meta needs %s (a string) and %s "
					"(an object) on every request", META_VERSION, META_CAPS));
		return -1;
	}
	/* The header first: what an intermediary routed on must be what is served. */
	if (o->http && (o->hdr_version == NULL || strcmp(o->hdr_version, asked) != 0))
		return header_mismatch(o, id, "MCP-Protocol-Version", o->hdr_version, "_meta says", asked);
	if (v < 0 || v >= MCP_MODERN_VERSIONS) {
		answer(o, mcp_error_msg(id, RPC_UNSUPPORTED_VERSION, json_pack("{s:o, s:s}", "supported", versions_json(),
									    "requested", asked),
					"Unsupported protocol version: %.100s", asked));
		return -1;
	}
	if (o->http && (o->hdr_method == NULL || strcmp(o->hdr_method, method) != 0))
		return header_mismatch(o, id, "Mcp-Method", o->hdr_method, "method is", method);
	if (o->http && strcmp(method, "tools/call") == 0 && name != NULL &&
	    (o->hdr_name == NULL || !header_name_matches(o->hdr_name, name)))
		return header_mismatch(o, id, "Mcp-Name", o->hdr_name, "name is", name);
	return v;
}

/* ---- the methods ---- */

static json_t *capabilities(void)
{
	return json_pack("{s:{s:b}}", "tools", "listChanged", 0);
}

/* Legacy only: the handshake chooses the version for the stdio process (an HTTP client sends
 * it back in MCP-Protocol-Version). 2026-07-28 has no handshake: asked for here, the newest
 * version that has one is offered, and the client decides. */
static void rpc_initialize(json_t *id, json_t *params, struct mcp_origin *o)
{
	const char *asked = json_string_value(json_object_get(params, "protocolVersion"));
	int v = version_index(asked);

	if (asked == NULL) {
		answer(o, mcp_error_msg(id, RPC_INVALID_PARAMS, NULL, "initialize needs params.protocolVersion"));
		return;
	}
	v = v >= MCP_MODERN_VERSIONS ? v : MCP_MODERN_VERSIONS;
	o->negotiated = v;
	answer(o, mcp_result_msg(id, json_pack("{s:s, s:o, s:{s:s, s:s}, s:s}", "protocolVersion", mcp_versions[v],
					       "capabilities", capabilities(), "serverInfo", "name", "sandbox-manager",
					       "version", st.version, "instructions", INSTRUCTIONS), 0));
}

static void rpc_discover(json_t *id, struct mcp_origin *o)
{
	answer(o, mcp_result_msg(id, json_pack("{s:o, s:o, s:s, s:i, s:s}", "supportedVersions", versions_json(),
					       "capabilities", capabilities(), "instructions", INSTRUCTIONS, "ttlMs",
					       LIST_TTL_MS, "cacheScope", "private"), 1));
}

static void rpc_tools_list(json_t *id, int v, struct mcp_origin *o)
{
	struct bash_tool_view view;
	struct sb_err err;
	long long max, def;
	json_t *result;

	if (mcp_jobs_config(&max, &def, &err) < 0) {
		answer(o, mcp_error_msg(id, RPC_INTERNAL, NULL, "sandbox-manager unavailable: %s", err.msg));
		return;
	}
	result = json_pack("{s:[o]}", "tools", bash_tool_describe(mcp_jobs_view(v <= STRUCTURED_UNTIL, &view), max, def));
	if (result != NULL && v < MCP_MODERN_VERSIONS) {
		json_object_set_new(result, "ttlMs", json_integer(LIST_TTL_MS));
		json_object_set_new(result, "cacheScope", json_string("private"));
	}
	answer(o, mcp_result_msg(id, result, v < MCP_MODERN_VERSIONS));
}

static void rpc_tools_call(json_t *id, json_t *params, int v, struct mcp_origin *o)
{
	const char *name = json_string_value(json_object_get(params, "name"));

	if (name == NULL)
		answer(o, mcp_error_msg(id, RPC_INVALID_PARAMS, NULL, "tools/call needs params.name"));
	else if (strcmp(name, "bash") != 0)
		answer(o, mcp_error_msg(id, RPC_INVALID_PARAMS, NULL, "Unknown tool: %.200s (the only tool is bash)", name));
	else
		mcp_jobs_call(id, params, o->sink, v <= STRUCTURED_UNTIL, v < MCP_MODERN_VERSIONS);
}

static void rpc_request(json_t *id, const char *method, json_t *params, struct mcp_origin *o)
{
	json_t *meta = json_object_get(params, "_meta");
	int v;

	v = o->http && o->hdr_version ? version_index(o->hdr_version) : -1;
	/* Modern: it says so in its _meta, or in its header (then a missing _meta is its error). */
	o->modern = strcmp(method, "server/discover") == 0 || json_object_get(meta, META_VERSION) != NULL ||
		    (v >= 0 && v < MCP_MODERN_VERSIONS);
	if (o->modern) {
		if ((v = modern_check(id, method, params, o)) < 0)
			return;
	} else if (o->http) {
		if (o->hdr_version != NULL && v < 0) {
			o->modern = 1; /* answered as the newest revision says: 400 and -32022 */
			answer(o, mcp_error_msg(id, RPC_UNSUPPORTED_VERSION, json_pack("{s:o, s:s}", "supported",
											versions_json(), "requested", o->hdr_version),
						"Unsupported protocol version: %.100s", o->hdr_version));
			return;
		}
		v = o->hdr_version ? v : LEGACY_HTTP_DEFAULT;
	} else {
		v = o->legacy_proto >= 0 ? o->legacy_proto : MCP_MODERN_VERSIONS;
	}

	if (strcmp(method, "initialize") == 0 && !o->modern)
		rpc_initialize(id, params, o);
	else if (strcmp(method, "server/discover") == 0)
		rpc_discover(id, o);
	else if (strcmp(method, "ping") == 0 && !o->modern) /* 2026-07-28 removed ping */
		answer(o, mcp_result_msg(id, json_object(), 0));
	else if (strcmp(method, "tools/list") == 0)
		rpc_tools_list(id, v, o);
	else if (strcmp(method, "tools/call") == 0)
		rpc_tools_call(id, params, v, o);
	else
		answer(o, mcp_error_msg(id, RPC_NO_METHOD, NULL, "Method not found: %.200s", method));
}

static void rpc_notification(const char *method, json_t *params, struct mcp_origin *o)
{
	if (strcmp(method, "notifications/cancelled") == 0)
		mcp_jobs_cancel_id(o->sink, json_object_get(params, "requestId"));
	else if (strcmp(method, "notifications/initialized") != 0)
		sb_debug("mcp: ignored notification %.200s", method);
}

/* Answer an error that belongs to no request handed in (no done). */
static enum mcp_kind bad(struct mcp_origin *o, json_t *msg)
{
	if (msg != NULL)
		o->sink->send(o->sink, msg);
	return MCP_BAD;
}

enum mcp_kind mcp_proto_message(const char *text, size_t len, struct mcp_origin *o)
{
	json_error_t jerr;
	json_t *msg = json_loadb(text, len, JSON_REJECT_DUPLICATES, &jerr), *id, *params;
	const char *method;
	enum mcp_kind kind;

	o->modern = 0;
	o->negotiated = -1;
	if (msg == NULL)
		return bad(o, mcp_error_msg(NULL, RPC_PARSE, NULL, "Parse error: %s (column %d)", jerr.text, jerr.column));
	id = json_object_get(msg, "id");
	params = json_object_get(msg, "params");
	method = json_string_value(json_object_get(msg, "method"));
	if (!json_is_object(msg))
		kind = bad(o, mcp_error_msg(NULL, RPC_INVALID_REQUEST, NULL,
					    "Invalid Request: a message is one JSON object (batches are not supported)"));
	else if (id != NULL && !json_is_string(id) && !json_is_integer(id))
		kind = bad(o, mcp_error_msg(NULL, RPC_INVALID_REQUEST, NULL, "Invalid Request: id must be a string or an integer"));
	else if (strcmp(json_string_value(json_object_get(msg, "jsonrpc")) ?: "", "2.0") != 0)
		kind = bad(o, mcp_error_msg(id, RPC_INVALID_REQUEST, NULL, "Invalid Request: jsonrpc must be \"2.0\""));
	else if (method == NULL && (json_object_get(msg, "result") || json_object_get(msg, "error"))) {
		sb_debug("mcp: ignored a response: this server sends no requests");
		kind = MCP_RESPONSE;
	} else if (method == NULL)
		kind = bad(o, mcp_error_msg(id, RPC_INVALID_REQUEST, NULL, "Invalid Request: method must be a string"));
	else if (params != NULL && !json_is_object(params) && id != NULL)
		kind = bad(o, mcp_error_msg(id, RPC_INVALID_PARAMS, NULL, "params must be an object"));
	else if (id != NULL) {
		rpc_request(id, method, params, o);
		kind = MCP_REQUEST;
	} else {
		if (params == NULL || json_is_object(params))
			rpc_notification(method, params, o);
		kind = MCP_NOTIFICATION;
	}
	json_decref(msg);
	return kind;
}

int mcp_proto_start(const struct mcp_settings *settings)
{
	st = *settings;
	return mcp_jobs_start(settings);
}

void mcp_proto_cancel_sink(struct mcp_sink *s)
{
	mcp_jobs_cancel_sink(s);
}

int mcp_proto_drain(int seconds)
{
	return mcp_jobs_drain(seconds);
}
