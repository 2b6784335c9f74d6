# shellcheck shell=bash
# `sandbox-manager mcp` driven by the official MCP TypeScript SDK client (tests/mcp/client.mjs) against
# a real manager and session: versions, the exact schema, output and exit codes, refusals, a timeout,
# cancellation, and the manager going away (an error, and nothing run locally).

MCP_TESTS=$(cd "$(dirname "${BASH_SOURCE[0]}")/../mcp" && pwd)

test_manager_mcp() {
	local node
	node=$(command -v node) || skip "node is not installed (Debian: nodejs npm; then cd tests/mcp && npm ci)"
	[ -d "$MCP_TESTS/node_modules/@modelcontextprotocol/sdk" ] ||
		skip "tests/mcp/node_modules is missing: run cd tests/mcp && npm ci"
	as_user test -r "$MCP_TESTS/node_modules/@modelcontextprotocol/sdk/package.json" ||
		skip "tests/mcp/node_modules is not readable by $RUN_USER"
	mgr_repo && mgr_start --max-timeout-seconds 30 --default-timeout-seconds 10 && mgr_session
	timeout -k 5 150 "${AS[@]}" "$node" "$MCP_TESTS/client.mjs" --manager "$MANAGER" --socket "$MSOCK" \
		--session "$SID" --manager-pid "$MGR_PID" --max-timeout 30 --default-timeout 10 >"$TD/mcp.out" 2>&1
	RC=$?
	sed 's/^/      /' "$TD/mcp.out"
	assert_eq "the MCP client's exit code" 0 "$RC"
	grep -q '^ok   a call: last line "exit code 3"' "$TD/mcp.out" || bad "the client did not reach the call checks"
}
t manager_mcp test_manager_mcp

# The tool's output shaped for models (tests/mcp/output.mjs): within the limit, head and tail with a
# marker naming the file that keeps the whole output, read back by the next call; the keep limit; and
# a command that replaces that folder with links and FIFOs: nothing written outside, the call answers.
# mcp_output_checks: against the manager and session already started (also manager_podman.sh).
mcp_output_checks() {
	local node outside
	node=$(command -v node) || skip "node is not installed (Debian: nodejs npm; then cd tests/mcp && npm ci)"
	[ -d "$MCP_TESTS/node_modules/@modelcontextprotocol/sdk" ] ||
		skip "tests/mcp/node_modules is missing: run cd tests/mcp && npm ci"
	as_user test -r "$MCP_TESTS/node_modules/@modelcontextprotocol/sdk/package.json" ||
		skip "tests/mcp/node_modules is not readable by $RUN_USER"
	# Outside the worktree, writable by every uid: a write that followed a link would land here.
	outside=$TD/outside
	mkdir -p "$outside" && echo "keep me" >"$outside/victim" && chmod 0777 "$outside" && chmod 0666 "$outside/victim"
	timeout -k 5 300 "${AS[@]}" "$node" "$MCP_TESTS/output.mjs" --manager "$MANAGER" --socket "$MSOCK" \
		--session "$SID" --worktree "$WT" --outside "$outside" >"$TD/mcp-output.out" 2>&1
	RC=$?
	sed 's/^/      /' "$TD/mcp-output.out"
	assert_eq "the MCP output client's exit code" 0 "$RC"
	grep -q '^ok   keep limit: after 25 big calls, 20 files remain' "$TD/mcp-output.out" ||
		bad "the client did not reach the keep-limit checks"
	assert_eq "the file outside the worktree" "keep me" "$(cat "$outside/victim")"
	assert_eq "the directory outside the worktree" "victim" "$(ls -A "$outside")"
}

test_manager_mcp_output() {
	mgr_repo && mgr_start && mgr_session && mcp_output_checks
}
t manager_mcp_output test_manager_mcp_output

# The v2 client (@modelcontextprotocol/client, tests/mcp/client2.mjs) statelessly at 2026-07-28 over
# stdio and Streamable HTTP (loopback TCP and a unix socket): discover, list, call; and the HTTP
# transport's token, Origin, bounds, deadline, cancellation by a closed connection, and refusals.
test_manager_mcp_v2() {
	local node
	node=$(command -v node) || skip "node is not installed (Debian: nodejs npm; then cd tests/mcp && npm ci)"
	as_user test -r "$MCP_TESTS/node_modules/@modelcontextprotocol/client/package.json" ||
		skip "tests/mcp/node_modules has no @modelcontextprotocol/client readable by $RUN_USER: run cd tests/mcp && npm ci"
	mgr_repo && mgr_start && mgr_session
	mkdir -p "$TD/mcp2" && chown "$RUN_USER:" "$TD/mcp2" && chmod 0700 "$TD/mcp2"
	timeout -k 5 180 "${AS[@]}" "$node" "$MCP_TESTS/client2.mjs" --manager "$MANAGER" --socket "$MSOCK" \
		--session "$SID" --dir "$TD/mcp2" >"$TD/mcp2.out" 2>&1
	RC=$?
	sed 's/^/      /' "$TD/mcp2.out"
	assert_eq "the MCP v2 client's exit code" 0 "$RC"
	grep -q '^ok   http: a raw call: 200 application/json' "$TD/mcp2.out" || bad "the client did not reach the HTTP checks"
}
t manager_mcp_v2 test_manager_mcp_v2
