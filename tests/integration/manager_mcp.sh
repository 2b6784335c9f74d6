# shellcheck shell=bash
# `sandbox-manager mcp` driven by the official MCP TypeScript SDK client (tests/mcp/client.mjs) against
# a real manager and session: versions, the exact schema, output and exit codes, refusals, a timeout,
# cancellation, and the manager going away (an error, and nothing run locally).

MCP_TESTS=$(cd "$(dirname "${BASH_SOURCE[0]}")/../mcp" && pwd)

test_manager_mcp() {
	local node
	node=$(command -v node) || skip_setup "node is not installed (Debian: nodejs npm; then cd tests/mcp && npm ci)"
	[ -d "$MCP_TESTS/node_modules/@modelcontextprotocol/sdk" ] ||
		skip_setup "tests/mcp/node_modules is missing: run cd tests/mcp && npm ci"
	as_user test -r "$MCP_TESTS/node_modules/@modelcontextprotocol/sdk/package.json" ||
		skip_setup "tests/mcp/node_modules is not readable by $RUN_USER"
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
	node=$(command -v node) || skip_setup "node is not installed (Debian: nodejs npm; then cd tests/mcp && npm ci)"
	[ -d "$MCP_TESTS/node_modules/@modelcontextprotocol/sdk" ] ||
		skip_setup "tests/mcp/node_modules is missing: run cd tests/mcp && npm ci"
	as_user test -r "$MCP_TESTS/node_modules/@modelcontextprotocol/sdk/package.json" ||
		skip_setup "tests/mcp/node_modules is not readable by $RUN_USER"
	# Outside the worktree, writable by every uid: a write that followed a link would land here.
	outside=$TD/outside
	mkdir -p "$outside" && echo "keep me" >"$outside/victim" && chmod 0777 "$outside" && chmod 0666 "$outside/victim"
	# in the manager's namespace: the kept outputs belong to the identity's subordinate ids (as_in_manager_ns)
	as_in_manager_ns timeout -k 5 300 "$node" "$MCP_TESTS/output.mjs" --manager "$MANAGER" --socket "$MSOCK" \
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
	node=$(command -v node) || skip_setup "node is not installed (Debian: nodejs npm; then cd tests/mcp && npm ci)"
	as_user test -r "$MCP_TESTS/node_modules/@modelcontextprotocol/client/package.json" ||
		skip_setup "tests/mcp/node_modules has no @modelcontextprotocol/client readable by $RUN_USER: run cd tests/mcp && npm ci"
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

# The official conformance suite (@modelcontextprotocol/conformance, tests/mcp/conformance.mjs) over
# Streamable HTTP on loopback, at its latest spec version (2026-07-28) and at 2025-11-25: every
# scenario passes, or fails for a reason listed there (a one-tool server's design); nothing else.
test_manager_mcp_conformance() {
	local node
	node=$(command -v node) || skip_setup "node is not installed (Debian: nodejs npm; then cd tests/mcp && npm ci)"
	as_user test -r "$MCP_TESTS/node_modules/@modelcontextprotocol/conformance/package.json" ||
		skip_setup "tests/mcp/node_modules has no @modelcontextprotocol/conformance readable by $RUN_USER: run cd tests/mcp && npm ci"
	mgr_repo && mgr_start && mgr_session
	mkdir -p "$TD/conf" && chown "$RUN_USER:" "$TD/conf" && chmod 0700 "$TD/conf"
	# HOME: the suite may write a cache there; the test user's own, inside this test.
	timeout -k 5 600 "${AS[@]}" env HOME="$TD/conf" "$node" "$MCP_TESTS/conformance.mjs" --manager "$MANAGER" \
		--socket "$MSOCK" --session "$SID" --dir "$TD/conf" >"$TD/conf.out" 2>&1
	RC=$?
	grep -v '^ok   conformance.*: no unexpected failure$' "$TD/conf.out" | sed 's/^/      /'
	assert_eq "the conformance run's exit code" 0 "$RC"
	grep -q '^ok   conformance latest: server-stateless: no unexpected failure' "$TD/conf.out" ||
		bad "the 2026-07-28 stateless scenario did not run"
}
t manager_mcp_conformance test_manager_mcp_conformance

# The MCP Inspector's CLI (@modelcontextprotocol/inspector 0.14.3, --cli) lists and calls the tool
# over stdio (its CLI has no Streamable HTTP client).
test_manager_mcp_inspector() {
	local node inspector=$MCP_TESTS/node_modules/@modelcontextprotocol/inspector/cli/build/cli.js
	node=$(command -v node) || skip_setup "node is not installed (Debian: nodejs npm; then cd tests/mcp && npm ci)"
	as_user test -r "$inspector" || skip_setup "tests/mcp/node_modules has no inspector readable by $RUN_USER: run cd tests/mcp && npm ci"
	mgr_repo && mgr_start && mgr_session
	timeout -k 5 60 "${AS[@]}" env HOME="$TD" "$node" "$inspector" --cli "$MANAGER" mcp --session "$SID" --socket "$MSOCK" \
		--method tools/list >"$TD/insp-list.json" 2>"$TD/insp.err"
	RC=$?
	assert_eq "inspector tools/list exit code (stderr: $(head -c 300 "$TD/insp.err"))" 0 "$RC"
	assert_eq "inspector: the tools" "bash" "$(jq -r '[.tools[].name] | join(",")' "$TD/insp-list.json")"
	assert_eq "inspector: the command is required" '["command"]' "$(jq -c '.tools[0].inputSchema.required' "$TD/insp-list.json")"
	timeout -k 5 60 "${AS[@]}" env HOME="$TD" "$node" "$inspector" --cli "$MANAGER" mcp --session "$SID" --socket "$MSOCK" \
		--method tools/call --tool-name bash --tool-arg 'command=echo inspected; exit 2' >"$TD/insp-call.json" 2>"$TD/insp.err"
	RC=$?
	assert_eq "inspector tools/call exit code (stderr: $(head -c 300 "$TD/insp.err"))" 0 "$RC"
	assert_eq "inspector: the call's text" "inspected
exit code 2" "$(jq -r '.content[0].text' "$TD/insp-call.json")"
	assert_eq "inspector: the exit code in structuredContent" 2 "$(jq -r '.structuredContent.exit_code' "$TD/insp-call.json")"
	assert_eq "inspector: isError" false "$(jq -r '.isError' "$TD/insp-call.json")"
}
t manager_mcp_inspector test_manager_mcp_inspector

# Stopped as Claude Code stops a stdio server (mcp_stop.py): notifications/cancelled for the running
# call, then SIGINT at once (then SIGTERM, SIGKILL). Taken by its default action, the signal ended the
# server before it read the cancellation, and the command ran on to its end (seen as an interrupted
# Agent SDK call recorded `exited`). Now the lines already written are read first: the call is
# recorded cancelled, each of three rounds, and the server exits by itself. Without a cancellation
# the running call is left to the manager and recorded when it ends.
MCP_IT_HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# mcp_stop_settled: the session's newest record's state once it is final (up to 10 s), on stdout.
mcp_stop_settled() {
	local state
	for _ in $(seq 1 100); do
		mgr records --session "$SID" --limit 1
		state=$(jr '.records[0].state')
		[ "$state" = dispatched ] || [ "$state" = accepted ] || break
		sleep 0.1
	done
	echo "$state"
}
test_manager_mcp_stop() {
	local m i state
	mgr_repo && mgr_start && mgr_session || return
	mgr exec --session "$SID" -- true # the sandbox is up
	for i in 1 2 3; do
		m=$(unique_marker)
		as_in_manager_ns timeout 60 python3 "$MCP_IT_HERE/mcp_stop.py" "$MANAGER" "$MSOCK" "$SID" "$WT/started.$m" cancel \
			"touch $WT/started.$m; sleep 20; echo finished > $WT/finished.$m" >"$TD/stop.json" 2>"$TD/stop.err"
		assert_eq "round $i: the driver's exit code (stderr: $(tail -c 300 "$TD/stop.err"))" 0 "$?"
		assert_json '.status' 0 "$TD/stop.json"
		grep -q 'Interrupt: the messages already sent were read; stopping' "$TD/stop.err" ||
			bad "round $i: the server did not say it read the messages before stopping"
		state=$(mcp_stop_settled)
		assert_eq "round $i: the cancelled call's record" cancelled "$state"
		assert_eq "round $i: its reason" '"cancelled by request"' "$(jr '.records[0].reason | tojson')"
		[ -e "$WT/finished.$m" ] && bad "round $i: the cancelled command ran to its end"
	done
	m=$(unique_marker)
	as_in_manager_ns timeout 60 python3 "$MCP_IT_HERE/mcp_stop.py" "$MANAGER" "$MSOCK" "$SID" "$WT/started.$m" no-cancel \
		"touch $WT/started.$m; sleep 1; echo done > $WT/done.$m" >"$TD/stop.json" 2>"$TD/stop.err"
	assert_eq "no cancellation: the driver's exit code (stderr: $(tail -c 300 "$TD/stop.err"))" 0 "$?"
	assert_json '.status' 0 "$TD/stop.json"
	state=$(mcp_stop_settled)
	assert_eq "no cancellation: the call ran to its end in the manager" exited "$state"
	assert_eq "no cancellation: its output" "done" "$(cat "$WT/done.$m" 2>/dev/null)"
}
t manager_mcp_stop test_manager_mcp_stop

# The server's queue of calls is bounded (issue 27): a client that writes calls faster than its
# session runs them (one at a time) had each kept, without limit. 64 wait at most; one more is
# answered at once with an error saying nothing ran, and the 64 run, in order, as before.
test_manager_mcp_queue_bound() {
	local m
	m=$(unique_marker)
	mgr_repo && mgr_start && mgr_session || return
	mgr exec --session "$SID" -- true # the sandbox is up
	as_in_manager_ns timeout 120 python3 "$MCP_IT_HERE/mcp_flood.py" "$MANAGER" "$MSOCK" "$SID" "$WT/started.$m" 70 \
		"touch $WT/started.$m; sleep 2.$m" \
		"echo x >> flood.$m" >"$TD/flood.json" 2>"$TD/flood.err"
	assert_eq "the driver's exit code (stderr: $(tail -c 300 "$TD/flood.err"))" 0 "$?"
	assert_json '[(.ok | length), (.refused | length)]' '[65,6]' "$TD/flood.json"
	assert_json '.tool_errors' '{}' "$TD/flood.json"
	assert_json '.refused' '[67,68,69,70,71,72]' "$TD/flood.json"
	assert_json '.errors' '["64 calls already wait for this session'"'"'s turn: this one did not run; send it again once some have finished"]' \
		"$TD/flood.json"
	assert_eq "the calls that waited ran, once each" 64 "$(wc -l <"$WT/flood.$m")"
}
t manager_mcp_queue_bound test_manager_mcp_queue_bound
