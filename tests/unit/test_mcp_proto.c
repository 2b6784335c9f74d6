/* Unit tests for manager/front/mcp_proto.c: the two eras on one set of methods (server/discover and
 * _meta for 2026-07-28, initialize for the others), the stateless errors (-32602, -32022, -32020 and
 * the order they are judged in), Mcp-Name in its base64 form, and done() once per request. No daemon
 * runs: a call that passes the protocol is refused as "sandbox-manager unavailable". */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <jansson.h>

#include "mcp_proto.h"

struct cap {
	struct mcp_sink sink;
	json_t *msgs;
	int done;
};

static void cap_send(struct mcp_sink *s, json_t *msg)
{
	json_array_append_new(((struct cap *)s)->msgs, msg);
}

static void cap_done(struct mcp_sink *s)
{
	((struct cap *)s)->done++;
}

/* One message in; the one answer out (the test owns it), after checking done was called once. */
static json_t *ask(const char *text, struct mcp_origin *o, enum mcp_kind want)
{
	struct cap c = { { cap_send, cap_done }, json_array(), 0 };
	json_t *m;

	o->sink = &c.sink;
	assert_int_equal(mcp_proto_message(text, strlen(text), o), want);
	assert_int_equal(c.done, want == MCP_REQUEST);
	assert_int_equal(json_array_size(c.msgs), want == MCP_NOTIFICATION ? 0 : 1);
	m = json_incref(json_array_get(c.msgs, 0));
	json_decref(c.msgs);
	return m;
}

static int err_code(json_t *m)
{
	return (int)json_integer_value(json_object_get(json_object_get(m, "error"), "code"));
}

#define META "\"_meta\":{\"io.modelcontextprotocol/protocolVersion\":\"2026-07-28\"," \
	     "\"io.modelcontextprotocol/clientCapabilities\":{}}"

static int setup(void **state)
{
	static const struct follow_list managers = { .n = 1, .path = { "/nonexistent/manager.sock" }, .owned_wait_ms = 0 };
	static const struct mcp_settings st = { .session = "s1", .managers = &managers,
						.version = "9.9.9", .max_output_chars = 30000 };

	(void)state;
	return mcp_proto_start(&st);
}

static void test_discover(void **state)
{
	struct mcp_origin o = { .legacy_proto = -1 };
	json_t *m = ask("{\"jsonrpc\":\"2.0\",\"id\":\"d\",\"method\":\"server/discover\",\"params\":{" META "}}", &o,
			MCP_REQUEST), *r = json_object_get(m, "result");

	(void)state;
	assert_true(o.modern);
	assert_string_equal(json_string_value(json_array_get(json_object_get(r, "supportedVersions"), 0)), "2026-07-28");
	assert_int_equal(json_array_size(json_object_get(r, "supportedVersions")), 5);
	assert_string_equal(json_string_value(json_object_get(r, "resultType")), "complete");
	assert_string_equal(json_string_value(json_object_get(r, "cacheScope")), "private");
	assert_true(json_is_object(json_object_get(json_object_get(r, "capabilities"), "tools")));
	assert_string_equal(json_string_value(json_object_get(json_object_get(json_object_get(r, "_meta"),
					"io.modelcontextprotocol/serverInfo"), "version")), "9.9.9");
	json_decref(m);
}

static void test_stateless_errors(void **state)
{
	struct mcp_origin o = { .legacy_proto = -1 };
	json_t *m;

	(void)state;
	m = ask("{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"server/discover\"}", &o, MCP_REQUEST);
	assert_int_equal(err_code(m), -32602);
	json_decref(m);
	m = ask("{\"jsonrpc\":\"2.0\",\"id\":2,\"method\":\"tools/list\",\"params\":{\"_meta\":{"
		"\"io.modelcontextprotocol/protocolVersion\":\"2026-07-28\"}}}", &o, MCP_REQUEST);
	assert_int_equal(err_code(m), -32602); /* clientCapabilities is required too */
	json_decref(m);
	m = ask("{\"jsonrpc\":\"2.0\",\"id\":3,\"method\":\"tools/list\",\"params\":{\"_meta\":{"
		"\"io.modelcontextprotocol/protocolVersion\":\"2031-01-01\",\"io.modelcontextprotocol/clientCapabilities\":{}}}}",
		&o, MCP_REQUEST);
	assert_int_equal(err_code(m), -32022);
	assert_string_equal(json_string_value(json_object_get(json_object_get(json_object_get(m, "error"), "data"),
							      "requested")), "2031-01-01");
	json_decref(m);
	m = ask("{\"jsonrpc\":\"2.0\",\"id\":4,\"method\":\"ping\",\"params\":{" META "}}", &o, MCP_REQUEST);
	assert_int_equal(err_code(m), -32601); /* 2026-07-28 removed ping */
	json_decref(m);
}

static void test_http_headers(void **state)
{
	struct mcp_origin o = { .http = 1, .hdr_version = "2026-07-28", .hdr_method = "tools/call", .legacy_proto = -1 };
	json_t *m;
	const char *call = "{\"jsonrpc\":\"2.0\",\"id\":5,\"method\":\"tools/call\",\"params\":{\"name\":\"bash\","
			   "\"arguments\":{\"command\":\"true\"}," META "}}";

	(void)state;
	o.hdr_name = "=?base64?c2g=?="; /* "sh" */
	m = ask(call, &o, MCP_REQUEST);
	assert_int_equal(err_code(m), -32020);
	json_decref(m);
	o.hdr_name = NULL;
	m = ask(call, &o, MCP_REQUEST);
	assert_int_equal(err_code(m), -32020);
	json_decref(m);
	/* "bash" in base64 matches: the call passes the protocol and meets no daemon. */
	o.hdr_name = "=?base64?YmFzaA==?=";
	m = ask(call, &o, MCP_REQUEST);
	assert_true(json_is_true(json_object_get(json_object_get(m, "result"), "isError")));
	assert_string_equal(json_string_value(json_object_get(json_object_get(m, "result"), "resultType")), "complete");
	json_decref(m);
	/* The header is judged before the version: what was routed on must be what is served. */
	o.hdr_method = "tools/list";
	m = ask("{\"jsonrpc\":\"2.0\",\"id\":6,\"method\":\"tools/list\",\"params\":{\"_meta\":{"
		"\"io.modelcontextprotocol/protocolVersion\":\"2031-01-01\",\"io.modelcontextprotocol/clientCapabilities\":{}}}}",
		&o, MCP_REQUEST);
	assert_int_equal(err_code(m), -32020);
	json_decref(m);
	o.hdr_version = "1999-01-01";
	m = ask("{\"jsonrpc\":\"2.0\",\"id\":7,\"method\":\"tools/list\"}", &o, MCP_REQUEST);
	assert_int_equal(err_code(m), -32022);
	json_decref(m);
}

static void test_legacy(void **state)
{
	struct mcp_origin o = { .legacy_proto = -1 };
	json_t *m;

	(void)state;
	m = ask("{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"initialize\",\"params\":{\"protocolVersion\":\"2026-07-28\"}}",
		&o, MCP_REQUEST);
	/* 2026-07-28 has no handshake: the newest version with one is offered. */
	assert_string_equal(json_string_value(json_object_get(json_object_get(m, "result"), "protocolVersion")),
			    "2025-11-25");
	assert_int_equal(o.negotiated, 1);
	assert_false(o.modern);
	assert_null(json_object_get(json_object_get(m, "result"), "resultType"));
	json_decref(m);
	m = ask("{\"jsonrpc\":\"2.0\",\"id\":2,\"method\":\"initialize\",\"params\":{\"protocolVersion\":\"2024-11-05\"}}",
		&o, MCP_REQUEST);
	assert_int_equal(o.negotiated, 4);
	json_decref(m);
	o.legacy_proto = 4;
	m = ask("{\"jsonrpc\":\"2.0\",\"id\":3,\"method\":\"ping\"}", &o, MCP_REQUEST);
	assert_true(json_is_object(json_object_get(m, "result")));
	assert_int_equal(json_object_size(json_object_get(m, "result")), 0);
	json_decref(m);
	assert_null(ask("{\"jsonrpc\":\"2.0\",\"method\":\"notifications/initialized\"}", &o, MCP_NOTIFICATION));
	m = ask("{\"jsonrpc\":\"2.0\",\"id\":", &o, MCP_BAD);
	assert_int_equal(err_code(m), -32700);
	json_decref(m);
	m = ask("[{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ping\"}]", &o, MCP_BAD);
	assert_int_equal(err_code(m), -32600);
	json_decref(m);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_discover),
		cmocka_unit_test(test_stateless_errors),
		cmocka_unit_test(test_http_headers),
		cmocka_unit_test(test_legacy),
	};

	return cmocka_run_group_tests(tests, setup, NULL);
}
