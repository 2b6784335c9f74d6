# shellcheck shell=bash
# `sandbox-manager mcp` keeps its control connection between calls (front/daemon_call.c, issue 18):
# sequential calls share one connection (the daemon's count stays at one for it, never grows), and a
# kept connection the daemon has closed (its restart) is never used: the next call goes through on a
# new one, as if nothing was kept. Driven over stdio by a coprocess, JSON lines.

# mcp_conn_send JSON: one line to the MCP server; mcp_conn_read: its next line into $MCP_LINE.
mcp_conn_send() { printf '%s\n' "$1" >&"${MCPC[1]}"; }
mcp_conn_read() { IFS= read -r -t 60 MCP_LINE <&"${MCPC[0]}" || MCP_LINE="(no answer within 60 s)"; }

# mcp_conn_call ID TEXT: tools/call bash {"command": "echo TEXT"}; the answer in $MCP_LINE.
mcp_conn_call() {
	mcp_conn_send "{\"jsonrpc\":\"2.0\",\"id\":$1,\"method\":\"tools/call\",\"params\":{\"name\":\"bash\",\"arguments\":{\"command\":\"echo $2\"}}}"
	mcp_conn_read
}

# The daemon's open control connections, read by a client of its own (itself one of them).
mcp_conn_count() {
	mgr metrics
	sed -n 's/^sandbox_manager_control_connections \([0-9]*\)$/\1/p' "$OUT"
}

test_manager_mcp_conn() {
	local text
	mgr_repo && mgr_start && mgr_session || return
	coproc MCPC { "${AS[@]}" env "SANDBOX_MANAGER_SOCKET=$MSOCK" "$MANAGER" mcp --session "$SID" 2>>"$TD/mcp.err"; }
	mcp_conn_send '{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"it","version":"0"}}}'
	mcp_conn_read
	assert_eq "initialize: protocol version" 2025-06-18 "$(jq -r .result.protocolVersion <<<"$MCP_LINE")"
	mcp_conn_send '{"jsonrpc":"2.0","method":"notifications/initialized"}'

	mcp_conn_call 2 first-call
	text=$(jq -r '.result.content[0].text' <<<"$MCP_LINE")
	assert_match "first call: its output" "first-call" "$text"
	assert_eq "first call: isError" false "$(jq -r '.result.isError // false' <<<"$MCP_LINE")"
	# the MCP server's kept connection and this client's own
	assert_eq "control connections after one call" 2 "$(mcp_conn_count)"
	mcp_conn_call 3 second-call
	assert_match "second call: its output" "second-call" "$(jq -r '.result.content[0].text' <<<"$MCP_LINE")"
	assert_eq "control connections after two calls (the same one kept)" 2 "$(mcp_conn_count)"

	# The daemon stops (closing the kept connection) and starts again on the same state.
	kill -TERM "$MGR_PID"
	wait "$MGR_PID" 2>/dev/null
	mgr_start || return
	mcp_conn_call 4 after-restart
	assert_eq "after the restart: isError (answer: $(head -c 300 <<<"$MCP_LINE"))" false \
		"$(jq -r '.result.isError // false' <<<"$MCP_LINE")"
	assert_match "after the restart: the call ran" "after-restart" "$(jq -r '.result.content[0].text' <<<"$MCP_LINE")"
	mgr records --session "$SID"
	assert_eq "records of the session (three calls, each once)" "3" \
		"$(jq '[.records[] | select(.command | startswith("echo "))] | length' "$OUT")"

	exec {MCPC[1]}>&-
	wait "$MCPC_PID" 2>/dev/null
	return 0
}
t manager_mcp_conn test_manager_mcp_conn
