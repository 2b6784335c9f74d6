# shellcheck shell=bash
# Claude Code (the CLI) and the Claude Agent SDK with `sandbox-manager mcp` as their only shell, each
# run through tests/frameworks/offline.sh against the scripted fake model (fake_anthropic.py): from
# the model's request log, exactly what the model was offered and exactly what it read back for a
# success, a non-zero exit, a timeout, truncated output, a refusal, an uncertain outcome and a
# manager that is down; from the manager's records, what ran in the sandbox; and that the SDK's
# interrupt stops its own call only. The setups are docs/integrations.md's.

FW=$(cd "$(dirname "${BASH_SOURCE[0]}")/../frameworks" && pwd)
CLAUDE_BIN=$FW/claude/node_modules/@anthropic-ai/claude-code/bin/claude.exe
CLAUDE_SDK=$FW/claude/node_modules/@anthropic-ai/claude-agent-sdk/sdk.mjs

# claude_ready: the packages are installed and readable, or skip_setup (in CI: fail).
claude_ready() {
	local why=
	command -v node >/dev/null || why="node is not installed"
	[ -z "$why" ] && { [ -x "$CLAUDE_BIN" ] && [ -r "$CLAUDE_SDK" ]; } ||
		why=${why:-"tests/frameworks/claude/node_modules is missing: run cd tests/frameworks/claude && npm ci"}
	[ -z "$why" ] && ! as_user test -r "$CLAUDE_SDK" && why="tests/frameworks/claude/node_modules is not readable by $RUN_USER"
	[ -z "$why" ] && return 0
	skip_setup "$why"
}

# claude_run LOG SCRIPT CMD...: CMD as the test user in offline.sh's namespace with the fake model
# answering SCRIPT; requests in LOG; CMD's stdout in $TD/fw.out, stderr in $TD/fw.err. Sets RC.
claude_run() {
	local log=$1 script=$2
	shift 2
	mkdir_user "$TD/home"
	timeout -k 5 120 "${AS[@]}" env "HOME=$TD/home" bash "$FW/offline.sh" bash "$FW/with_fake_anthropic.sh" \
		"$script" "$log" "$@" >"$TD/fw.out" 2>"$TD/fw.err"
	RC=$?
}

# The tool results the model read, in order, from the last agent turn's conversation: {content,
# is_error} of each one.
model_saw() {
	jq -c 'select(.body.tools != null)' "$1" | tail -n 1 |
		jq -c '.body.messages[].content[]? | select(.type == "tool_result") | {content, is_error: (.is_error // false)}'
}

# tool_result_is N WANT: the Nth result (from 1) the model read is exactly WANT ({content, is_error});
# a success's content is JSON: compared as JSON, its duration_ms only checked to be a number.
tool_result_is() {
	local got want=$2
	got=$(sed -n "${1}p" "$TD/saw.jsonl")
	if jq -e '.is_error == false' <<<"$got" >/dev/null 2>&1; then
		got=$(jq -c '.content | fromjson | if (.duration_ms | type) == "number" then .duration_ms = "N" else . end' <<<"$got")
	fi
	assert_eq "what the model read of call $1" "$want" "$got"
}

# truncated_is N SESSION: the Nth result is `seq 1 3000` (13893 bytes) cut to --max-output-chars 1000:
# head, the marker naming the kept file inside SESSION's worktree, tail, the exit code, within 1000
# bytes; the same fields as any success.
truncated_is() {
	local cut kept
	cut=$(sed -n "${1}p" "$TD/saw.jsonl" | jq -c '.content | fromjson')
	kept=$(jq -r '.output_files.stdout' <<<"$cut")
	assert_match "call $1: the kept file is in the worktree's scratch folder" \
		"^/.*/workspaces/$2/\.sandbox-tmp/\.outputs/exec-[0-9a-f]+\.stdout\$" "$kept"
	assert_eq "call $1: the fields" '{"status":"exited","exit_code":0,"signal":null,"timed_out":false,"stdout_bytes":13893,"stderr_bytes":0,"truncated":true}' \
		"$(jq -c 'del(.duration_ms, .output, .output_files)' <<<"$cut")"
	jq -e --arg kept "$kept" '.output | startswith("1\n2\n") and endswith("\n3000\nexit code 0") and
		(utf8bytelength <= 1000) and
		contains(" bytes omitted: whole output (stdout, 13893 bytes) in \($kept) ...]\n")' <<<"$cut" >/dev/null ||
		bad "call $1: not the head, the marker naming the file, the tail and the exit code: $(jq -c .output <<<"$cut")"
}

# claude_offered LOG: every agent turn offered exactly our tool, never the framework's own Bash.
claude_offered() {
	local tools
	tools=$(jq -c 'select(.body.tools != null) | [.body.tools[].name]' "$1" | sort -u)
	assert_eq "the tools the model was offered" '["mcp__sandbox__bash"]' "$tools"
}

test_manager_claude_cli() {
	claude_ready
	mgr_repo && mgr_start --max-timeout-seconds 30 --default-timeout-seconds 10 && mgr_session
	local marker=$TD/down-marker log=$TD/requests.jsonl tok
	# what passes both ways between Claude Code and the server, copied on its way (rpc/in.jsonl,
	# rpc/out.jsonl): the progress tokens Claude Code sends, the notifications it is sent
	mkdir_user "$TD/rpc" || return 1
	jq -n --arg mgr "$MANAGER" --arg sid "$SID" --arg sock "$MSOCK" --arg rpc "$TD/rpc" '{mcpServers: {sandbox: {type: "stdio",
		command: "bash", args: ["-c", "r=$0; tee -a \"$r/in.jsonl\" | \"$@\" | tee -a \"$r/out.jsonl\"", $rpc,
		$mgr, "mcp", "--session", $sid, "--socket", $sock, "--max-output-chars", "1000"]}}}' >"$TD/mcp.json"
	jq -n --arg gate "$TD/gate" --arg marker "$marker" '[
		{tool: "mcp__sandbox__bash", input: {command: "echo hello"}},
		{tool: "mcp__sandbox__bash", input: {command: "echo out; echo err >&2; exit 3"}},
		{tool: "mcp__sandbox__bash", input: {command: "echo started; sleep 5", timeout_seconds: 1}},
		{tool: "mcp__sandbox__bash", input: {command: "seq 1 3000"}},
		{tool: "mcp__sandbox__bash", input: {command: "true", timeout_seconds: 100000}},
		{tool: "mcp__sandbox__bash", input: {command: "sleep 20.7"}},
		{tool: "mcp__sandbox__bash", input: {command: ("touch " + $marker)}, gate: $gate},
		{text: "done"}]' >"$TD/script.json"
	chmod a+r "$TD/mcp.json" "$TD/script.json"
	(cd "$TD" && claude_run "$log" "$TD/script.json" "$CLAUDE_BIN" -p "Run the commands." \
		--mcp-config "$TD/mcp.json" --strict-mcp-config --tools "" --disallowedTools Bash \
		--allowedTools mcp__sandbox__bash --permission-mode dontAsk --no-session-persistence \
		--output-format stream-json --verbose; echo "$RC" >"$TD/fw.rc") &
	local fw=$!
	# The sixth call: its agent dies mid-command, so its outcome is uncertain.
	for _ in $(seq 1 300); do pgrep -f "^sleep 20.7" >/dev/null && break; sleep 0.1; done
	sandbox_agent_kill
	# The seventh: the manager goes away before it (the fake model waits at the gate).
	for _ in $(seq 1 300); do [ -e "$TD/gate.waiting" ] && break; sleep 0.1; done
	[ -e "$TD/gate.waiting" ] || bad "the model never reached the manager-down step"
	mgr records --session "$SID" --limit 20
	cp "$OUT" "$TD/records.json"
	kill -KILL "$MGR_PID"
	wait "$MGR_PID" 2>/dev/null
	touch "$TD/gate"
	wait "$fw"
	assert_eq "claude's exit code (stderr: $(tail -c 300 "$TD/fw.err"))" 0 "$(cat "$TD/fw.rc")"

	claude_offered "$log"
	model_saw "$log" >"$TD/saw.jsonl"
	assert_eq "tool results the model read" 7 "$(wc -l <"$TD/saw.jsonl")"
	tool_result_is 1 '{"status":"exited","exit_code":0,"signal":null,"timed_out":false,"duration_ms":"N","output":"hello\nexit code 0","stdout_bytes":6,"stderr_bytes":0,"truncated":false,"output_files":{}}'
	tool_result_is 2 '{"status":"exited","exit_code":3,"signal":null,"timed_out":false,"duration_ms":"N","output":"out\n[stderr]\nerr\nexit code 3","stdout_bytes":4,"stderr_bytes":4,"truncated":false,"output_files":{}}'
	tool_result_is 3 '{"content":"started\ntimed out after 1 s","is_error":true}'
	truncated_is 4 "$SID"
	tool_result_is 5 '{"content":"refused: invalid arguments: timeout_seconds must be a whole number of seconds from 1 to 30 (the configured maximum)","is_error":true}'
	assert_match "call 6: uncertain, as an error" '^\{"content":"outcome uncertain: [^"]+","is_error":true\}$' "$(sed -n 6p "$TD/saw.jsonl")"
	tool_result_is 7 "{\"content\":\"refused: sandbox-manager unavailable: the manager is not reachable at $MSOCK (is \`sandbox-manager serve\` running?): Connection refused\",\"is_error\":true}"
	[ -e "$marker" ] && bad "the manager was down and the command ran anyway (the marker exists)"
	# Measured (issue 30): Claude Code gives every tools/call a progress token, so the server
	# streams: the first call's notification carried its output line. (Claude Code's stream-json
	# output shows none of them.)
	assert_eq "every tools/call carries a progress token" "[7,7]" \
		"$(jq -s -c '[.[] | select(.method == "tools/call")] | [length, ([.[] | select(.params._meta.progressToken != null)] | length)]' "$TD/rpc/in.jsonl")"
	tok=$(jq -s -r '[.[] | select(.method == "tools/call")][0].params._meta.progressToken' "$TD/rpc/in.jsonl")
	assert_match "the first call's progress: its output line" '^[0-9]+s: hello$' \
		"$(jq -s -r --argjson t "$tok" '[.[] | select(.method == "notifications/progress" and .params.progressToken == $t)][0].params.message' "$TD/rpc/out.jsonl")"
	# What ran, from the manager's records (before it went down): newest first.
	assert_eq "the records: each call that reached the manager, in the sandbox" \
		'[["sleep 20.7","uncertain"],["seq 1 3000","exited"],["echo started; sleep 5","timed_out"],["echo out; echo err >&2; exit 3","exited"],["echo hello","exited"]]' \
		"$(jq -c '[.records[] | [.command, .state]]' "$TD/records.json")"
}
t manager_claude_cli test_manager_claude_cli

# The Agent SDK (tests/frameworks/claude/sdk.mjs): a call, then one interrupted mid-run; another
# session's call running meanwhile goes on to its end.
test_manager_claude_sdk() {
	claude_ready
	mgr_repo && mgr_start --max-timeout-seconds 30 --default-timeout-seconds 20 && mgr_session
	local sid_a=$SID log=$TD/requests.jsonl sid_b
	mgr_session
	sid_b=$SID
	SID=$sid_a
	jq -n '[{tool: "mcp__sandbox__bash", input: {command: "echo sdk; exit 4"}},
		{tool: "mcp__sandbox__bash", input: {command: "echo started; sleep 5", timeout_seconds: 1}},
		{tool: "mcp__sandbox__bash", input: {command: "true", timeout_seconds: 100000}},
		{tool: "mcp__sandbox__bash", input: {command: "seq 1 3000"}},
		{tool: "mcp__sandbox__bash", input: {command: "echo begun; sleep 15; echo finished"}},
		{text: "done"}]' >"$TD/script.json"
	chmod a+r "$TD/script.json"
	mgr_bg_exec other "sleep 12; echo other-done" "$sid_b" # spans the interrupt (5 s after the 5th call)
	mkdir_user "$TD/rpc" || return 1
	(cd "$TD" && claude_run "$log" "$TD/script.json" node "$FW/claude/sdk.mjs" --manager "$MANAGER" \
		--session "$sid_a" --socket "$MSOCK" --max-output-chars 1000 --interrupt-after-ms 5000 --interrupt-at 5 \
		--rpc-dir "$TD/rpc")
	assert_eq "the SDK driver's exit code (stderr: $(tail -c 300 "$TD/fw.err"))" 0 "$RC"
	# Measured (issue 30): the Agent SDK's calls carry progress tokens too (its MCP client is Claude
	# Code's), and the first call's notification carries its output line.
	assert_eq "every tools/call carries a progress token" "[5,5]" \
		"$(jq -s -c '[.[] | select(.method == "tools/call")] | [length, ([.[] | select(.params._meta.progressToken != null)] | length)]' "$TD/rpc/in.jsonl")"
	assert_match "the first call's progress: its output line" '^[0-9]+s: sdk$' \
		"$(jq -s -r '[.[] | select(.method == "notifications/progress")][0].params.message' "$TD/rpc/out.jsonl")"
	grep -q '"event":"interrupt"' "$TD/fw.out" || bad "the driver never interrupted"
	claude_offered "$log"
	model_saw "$log" >"$TD/saw.jsonl"
	tool_result_is 1 '{"status":"exited","exit_code":4,"signal":null,"timed_out":false,"duration_ms":"N","output":"sdk\nexit code 4","stdout_bytes":4,"stderr_bytes":0,"truncated":false,"output_files":{}}'
	tool_result_is 2 '{"content":"started\ntimed out after 1 s","is_error":true}'
	tool_result_is 3 '{"content":"refused: invalid arguments: timeout_seconds must be a whole number of seconds from 1 to 30 (the configured maximum)","is_error":true}'
	truncated_is 4 "$sid_a"
	wait_bg_execs
	assert_eq "the other session's call ran to its end" other-done "$(cat "$TD/bg-other.out")"
	local state
	for _ in $(seq 1 50); do
		mgr records --session "$sid_a" --limit 1
		state=$(jr '.records[0].state')
		[ "$state" = cancelled ] && break
		sleep 0.2
	done
	assert_eq "the interrupted call's record" '"echo begun; sleep 15; echo finished" "cancelled"' \
		"$(jr '.records[0] | "\(.command | tojson) \(.state | tojson)"')"
	mgr records --session "$sid_a" --limit 4
	assert_eq "the SDK's calls, in the sandbox" '[["echo begun; sleep 15; echo finished","cancelled"],["seq 1 3000","exited"],["echo started; sleep 5","timed_out"],["echo sdk; exit 4","exited"]]' \
		"$(jq -c '[.records[] | [.command, .state]]' "$OUT")"
}
t manager_claude_sdk test_manager_claude_sdk

# The Agent SDK with a manager that goes away after the tools were listed: the model reads a
# refusal, and nothing runs (the command would leave a marker).
test_manager_claude_sdk_down() {
	claude_ready
	mgr_repo && mgr_start && mgr_session
	local marker=$TD/down-marker log=$TD/requests.jsonl
	jq -n --arg gate "$TD/gate" --arg marker "$marker" '[
		{tool: "mcp__sandbox__bash", input: {command: ("touch " + $marker)}, gate: $gate}, {text: "done"}]' \
		>"$TD/script.json"
	chmod a+r "$TD/script.json"
	(cd "$TD" && claude_run "$log" "$TD/script.json" node "$FW/claude/sdk.mjs" --manager "$MANAGER" \
		--session "$SID" --socket "$MSOCK"; echo "$RC" >"$TD/fw.rc") &
	local fw=$!
	for _ in $(seq 1 300); do [ -e "$TD/gate.waiting" ] && break; sleep 0.1; done
	[ -e "$TD/gate.waiting" ] || bad "the model never reached the call"
	kill -KILL "$MGR_PID"
	wait "$MGR_PID" 2>/dev/null
	touch "$TD/gate"
	wait "$fw"
	assert_eq "the SDK driver's exit code (stderr: $(tail -c 300 "$TD/fw.err"))" 0 "$(cat "$TD/fw.rc")"
	claude_offered "$log"
	model_saw "$log" >"$TD/saw.jsonl"
	assert_eq "what the model read" \
		"{\"content\":\"refused: sandbox-manager unavailable: the manager is not reachable at $MSOCK (is \`sandbox-manager serve\` running?): Connection refused\",\"is_error\":true}" \
		"$(cat "$TD/saw.jsonl")"
	[ -e "$marker" ] && bad "the manager was down and the command ran anyway (the marker exists)"
	return 0
}
t manager_claude_sdk_down test_manager_claude_sdk_down
