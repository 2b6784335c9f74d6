# shellcheck shell=bash
# Codex (tests/frameworks/codex, pinned) against a real manager and session, by both routes of
# docs/integrations.md (its Codex section): `codex exec` with `sandbox-manager mcp`, and `codex app-server` behind
# `sandbox-manager codex-bridge` driven by a small supervisor (tests/frameworks/codex/supervisor.py).
# Codex runs only through tests/frameworks/offline.sh, with a scripted fake Responses model
# (tests/frameworks/fake_responses.py) in the same loopback-only namespace, whose request log shows
# what the model was offered and what it read back. Skipped only when the package is not installed
# locally; under CI=true that is a failure.

CODEX_FW=$(cd "$(dirname "${BASH_SOURCE[0]}")/../frameworks" && pwd)
CODEX_BIN=$CODEX_FW/codex/node_modules/@openai/codex-linux-x64/vendor/x86_64-unknown-linux-musl/bin/codex

# codex_ready: Codex is installed and runnable by the test user, or the test is skipped (failed in CI).
codex_ready() {
	local why=
	if ! command -v python3 >/dev/null; then
		why="python3 is not installed"
	elif [ ! -x "$CODEX_BIN" ]; then
		why="Codex is not installed: run cd tests/frameworks/codex && npm ci"
	elif ! as_user test -x "$CODEX_BIN"; then
		why="the Codex binary is not executable by $RUN_USER"
	fi
	[ -z "$why" ] && return 0
	skip_setup "$why"
}

# codex_dir NAME SCRIPT_JSON: $CX, a directory for one Codex run (its CODEX_HOME below it), with
# the fake model's script and the config both routes share; the MCP route appends its server.
codex_dir() {
	CX=$TD/$1
	mkdir_user "$CX" || { bad "cannot create $CX"; return 1; }
	printf '%s\n' "$2" >"$CX/script.json"
	# The exact setup of docs/integrations.md (its Codex section): the fake provider, nothing that calls out, and
	# Codex's own shell off.
	cat >"$CX/config.toml.in" <<-'EOF'
		model = "fake-model"
		model_provider = "fake"
		web_search = "disabled"

		[analytics]
		enabled = false

		[features]
		shell_tool = false
		unified_exec = false
		apps = false
		plugins = false

		[model_providers.fake]
		name = "fake"
		base_url = "http://127.0.0.1:__PORT__/v1"
		wire_api = "responses"
		env_key = "FAKE_MODEL_KEY"
	EOF
	chown -R "$RUN_USER:" "$CX"
}

# codex_run DIR CMD...: CMD inside offline.sh and the fake model's namespace, as the test user.
# Sets RC; stdout in DIR/out, stderr in DIR/err.
codex_run() {
	local dir=$1
	shift
	(cd "$dir" && timeout -k 5 150 "${AS[@]}" bash "$CODEX_FW/offline.sh" bash "$CODEX_FW/codex/inside.sh" "$dir" \
		"$@" >"$dir/out" 2>"$dir/err" </dev/null)
	RC=$?
}

# codex_requests DIR JQ: jq over the fake model's request bodies, slurped into one array.
codex_requests() { jq -s "[.[].body] | $2" "$1/requests.jsonl"; }

# The model's view of call N (call_N): the function_call_output text it read back.
codex_output() { codex_requests "$1" "[.[].input[] | select(.type == \"function_call_output\" and .call_id == \"$2\")][0].output"; }

# Names the model must never be offered: Codex's own ways to run a command.
CODEX_SHELL_TOOLS='["shell", "shell_command", "exec_command", "write_stdin", "local_shell", "container.exec", "apply_patch"]'

# codex_no_shell DIR: no request offered Codex's own shell.
codex_no_shell() {
	local found
	found=$(codex_requests "$1" "[.[].tools[]? | (.name, (.tools[]?.name), .type)] | map(select(. as \$n | $CODEX_SHELL_TOOLS | index(\$n))) | unique")
	assert_eq "Codex's own shell tools offered to the model" "[]" "$(jq -c . <<<"$found")"
}

# mgr_record COMMAND_SUBSTRING: the newest record of $SID whose command contains it, in $OUT.
mgr_record() {
	mgr records --session "$SID" --limit 50
	jq --arg c "$1" '[.records[] | select(.command | contains($c))][0]' "$OUT" >"$TD/record.json"
	cp "$TD/record.json" "$OUT"
}

# ---- the MCP route: codex exec + sandbox-manager mcp ----

# The server's traffic is copied both ways on its way ($CX/rpc/in.jsonl, out.jsonl): what Codex
# sends (progress tokens) and is sent.
codex_mcp_config() {
	mkdir_user "$CX/rpc" || return 1
	cat >>"$CX/config.toml.in" <<-EOF

		[mcp_servers.sandbox]
		command = "bash"
		args = ["-c", "r=\$0; tee -a \"\$r/in.jsonl\" | \"\$@\" | tee -a \"\$r/out.jsonl\"", "$CX/rpc",
			"$MANAGER", "mcp", "--session", "$SID", "--socket", "$MSOCK"]
		default_tools_approval_mode = "approve"
		required = true
	EOF
}

test_manager_codex_mcp() {
	codex_ready
	mgr_repo && mgr_start --max-timeout-seconds 30 --default-timeout-seconds 10 && mgr_session
	codex_dir mcp '{"scen-mcp": [
		{"call": {"namespace": "mcp__sandbox", "name": "bash", "arguments": {"command": "echo hello-mcp; echo err >&2; exit 3"}}},
		{"call": {"namespace": "mcp__sandbox", "name": "bash", "arguments": {"command": "sleep 5", "timeout_seconds": 1}}}]}'
	codex_mcp_config
	codex_run "$CX" "$CODEX_BIN" exec --skip-git-repo-check -C "$CX" "scen-mcp: run the commands"
	assert_eq "codex exec's exit code (stderr: $(tail -n 3 "$CX/err"))" 0 "$RC"
	# Offered: our bash, as MCP server sandbox's tool; not Codex's shell.
	assert_eq "the MCP bash tool offered" '"bash"' \
		"$(codex_requests "$CX" '[.[0].tools[] | select(.type == "namespace" and .name == "mcp__sandbox") | .tools[].name][0]')"
	codex_no_shell "$CX"
	# Read back: output, stderr and exit code; the timeout. Codex gives the model the structured
	# result when there is one, else the text: either carries the same facts.
	local o1 o2
	o1=$(codex_output "$CX" call_1)
	o2=$(codex_output "$CX" call_2)
	[[ "$o1" == *hello-mcp* && "$o1" == *err* ]] || bad "call 1's output did not reach the model: $o1"
	[[ "$o1" == *'exit code 3'* || "$o1" == *'\"exit_code\":3'* ]] || bad "call 1's exit code did not reach the model: $o1"
	[[ "$o2" == *'timed out after 1 s'* || "$o2" == *'\"status\":\"timed_out\"'* ]] || bad "call 2's timeout did not reach the model: $o2"
	# Measured (issue 30): Codex gives each tools/call a progress token, so the server streams, and
	# the first call's notification carries its output's newest line.
	assert_eq "every tools/call carries a progress token" "[2,2]" \
		"$(jq -s -c '[.[] | select(.method == "tools/call")] | [length, ([.[] | select(.params._meta.progressToken != null)] | length)]' "$CX/rpc/in.jsonl")"
	assert_match "the first call's progress: an output line" '^[0-9]+s: (hello-mcp|err)$' \
		"$(jq -s -r '[.[] | select(.method == "notifications/progress")][0].params.message' "$CX/rpc/out.jsonl")"
	# And the manager ran both in the sandbox.
	mgr_record "echo hello-mcp"
	assert_json '.state' '"exited"'
	assert_json '.result.exit_code' '3'
	assert_json '.receipt.boundary.confirmed' 'true'
	mgr_record "sleep 5"
	assert_json '.result.status' '"timed_out"'
}
t manager_codex_mcp test_manager_codex_mcp

# The manager is down when Codex starts: the required MCP server cannot list its tool, Codex stops,
# and nothing runs anywhere (the marker a local run would leave stays absent).
test_manager_codex_mcp_down() {
	codex_ready
	mgr_repo && mgr_start && mgr_session
	codex_dir mcpdown "{\"scen-down\": [{\"call\": {\"namespace\": \"mcp__sandbox\", \"name\": \"bash\", \"arguments\": {\"command\": \"touch $TD/marker\"}}}]}"
	codex_mcp_config
	kill -KILL "$MGR_PID" && wait "$MGR_PID" 2>/dev/null
	codex_run "$CX" "$CODEX_BIN" exec --skip-git-repo-check -C "$CX" "scen-down: run it"
	[ "$RC" -ne 0 ] || bad "codex exec succeeded without a manager"
	grep -q sandbox "$CX/err" || bad "Codex did not say the sandbox server failed: $(tail -n 3 "$CX/err")"
	[ ! -e "$TD/marker" ] || bad "the command ran outside the sandbox"
	if [ -s "$CX/requests.jsonl" ]; then
		assert_eq "tool results the model read" 0 \
			"$(codex_requests "$CX" '[.[].input[]? | select(.type == "function_call_output")] | length')"
	fi
}
t manager_codex_mcp_down test_manager_codex_mcp_down

# ---- the bridge route: codex app-server behind sandbox-manager codex-bridge ----

# codex_bridge DIR SCENARIO [ARG] [BRIDGE FLAGS...]: the supervisor and the bridge, as the test user.
codex_bridge() {
	local dir=$1 scenario=$2 arg=$3
	shift 3
	codex_run "$dir" python3 "$CODEX_FW/codex/supervisor.py" "$scenario" "$dir/supervisor.log" "$arg" -- \
		"$MANAGER" codex-bridge --session "$SID" --socket "$MSOCK" "$@" -- "$CODEX_BIN" app-server
	jq . "$dir/out" >/dev/null 2>&1 || bad "the supervisor printed no result: $(tail -n 3 "$dir/out" "$dir/err")"
}

test_manager_codex_bridge() {
	codex_ready
	mgr_repo && mgr_start --max-timeout-seconds 30 --default-timeout-seconds 10 && mgr_session
	codex_dir bridge '{"scen-bridge": [
		{"call": {"name": "bash", "arguments": {"command": "echo hello-bridge; echo err >&2; exit 3"}}},
		{"call": {"name": "bash", "arguments": {"command": "sleep 5", "timeout_seconds": 1}}},
		{"call": {"name": "bash", "arguments": {"command": "head -c 20000 /dev/zero | tr \"\\\\0\" a"}}},
		{"call": {"name": "bash", "arguments": {"command": "echo x", "extra": 1}}}]}'
	codex_bridge "$CX" turn scen-bridge --max-output-chars 2000
	assert_eq "the supervisor's exit code (stderr: $(tail -n 3 "$CX/err"))" 0 "$RC"
	assert_eq "the turn's status" '"completed"' "$(jq .turn.status "$CX/out")"
	# Offered: our bash as a dynamic tool with bash_tool.h's schema; not Codex's shell.
	assert_eq "the bash tool's schema offered" '["command","timeout_seconds"]' \
		"$(codex_requests "$CX" '[.[0].tools[] | select(.type == "function" and .name == "bash")][0].parameters.properties | keys' | jq -c .)"
	# Codex drops a schema's minimum and maximum: the description states them (and the call is checked).
	[[ "$(codex_requests "$CX" '[.[0].tools[] | select(.name == "bash")][0].description')" == *"default 10, at most 30"* ]] ||
		bad "the bash tool's description does not state the manager's timeouts"
	codex_no_shell "$CX"
	# Read back, exactly as the model sees it (bash_tool.h's text).
	assert_eq "call 1 as the model read it" '"hello-bridge\n[stderr]\nerr\nexit code 3"' "$(codex_output "$CX" call_1)"
	assert_eq "call 2 as the model read it" '"timed out after 1 s"' "$(codex_output "$CX" call_2)"
	local big
	big=$(codex_output "$CX" call_3 | jq -r .)
	[ "${#big}" -le 2100 ] || bad "call 3's text is ${#big} bytes, over --max-output-chars 2000"
	[[ "$big" == *".sandbox-tmp/.outputs/"* && "$big" == *"exit code 0" ]] ||
		bad "call 3's cut output does not name the file that keeps it: $(head -c 600 <<<"$big")"
	[[ "$(codex_output "$CX" call_4)" == *"invalid arguments: unknown argument 'extra'"* ]] ||
		bad "call 4's bad argument was not refused to the model: $(codex_output "$CX" call_4)"
	# success false exactly where the text is an error.
	assert_eq "success per call" '[true,false,true,false]' "$(jq -c '[.tool_items[].success]' "$CX/out")"
	# And the manager ran them in the sandbox (the refused one never reached it).
	mgr_record "echo hello-bridge"
	assert_json '.result.exit_code' '3'
	assert_json '.receipt.boundary.confirmed' 'true'
	mgr_record "head -c 20000"
	assert_json '.result.stdout_bytes' '20000'
	mgr records --session "$SID" --limit 50
	assert_json '[.records[] | select(.command == "echo x")] | length' '0'
}
t manager_codex_bridge test_manager_codex_bridge

test_manager_codex_bridge_refuse() {
	codex_ready
	mgr_repo && mgr_start && mgr_session
	codex_dir refuse '{}'
	codex_bridge "$CX" refuse ""
	assert_eq "the supervisor's exit code (stderr: $(tail -n 3 "$CX/err"))" 0 "$RC"
	local k
	for k in own_bash own_bash_in_namespace shell_dotted shell_nested unified_exec profile resume_shell \
		shell_command command_exec; do
		assert_eq "$k: refused" -32600 "$(jq ".$k.error.code" "$CX/out")"
	done
	[[ "$(jq -r .own_bash.error.message "$CX/out")" == *"declares a tool named bash"* ]] || bad "own bash: $(jq -c .own_bash "$CX/out")"
	[[ "$(jq -r .shell_dotted.error.message "$CX/out")" == *"features.shell_tool must stay false"* ]] ||
		bad "shell: $(jq -c .shell_dotted "$CX/out")"
	assert_eq "a plain thread/start" true "$(jq '.plain.result.thread.id | type == "string"' "$CX/out")"
	# A refused request never reached Codex.
	assert_eq "thread/starts Codex answered" 1 "$(grep -c '^<- {"id":[0-9]*,"result":{"thread"' "$CX/supervisor.log")"
	[ ! -e /tmp/never ] || bad "a refused command/exec ran"
}
t manager_codex_bridge_refuse test_manager_codex_bridge_refuse

# The worst case: config.toml and Codex's command line both turn the shell on. Through the bridge
# no request offers it, not even a sub-agent's; straight to Codex (the control: the check sees a
# shell when there is one), one does.
test_manager_codex_bridge_shell_off() {
	codex_ready
	mgr_repo && mgr_start && mgr_session
	codex_dir shell '{"scen-spawn": [{"call": {"namespace": "multi_agent_v1", "name": "spawn_agent", "arguments": {"message": "scen-child: say something"}}},
		{"call": {"namespace": "multi_agent_v1", "name": "wait_agent", "arguments": {}}}],
		"scen-child": [{"say": "child here"}], "scen-talk": [{"say": "hello"}]}'
	sed -i 's/^\(shell_tool\|unified_exec\) = false$/\1 = true/' "$CX/config.toml.in"
	grep -q '^shell_tool = true' "$CX/config.toml.in" || bad "the worst-case config does not turn the shell on"
	codex_run "$CX" python3 "$CODEX_FW/codex/supervisor.py" turn "$CX/supervisor.log" scen-spawn -- \
		"$MANAGER" codex-bridge --session "$SID" --socket "$MSOCK" -- \
		"$CODEX_BIN" -c features.shell_tool=true -c features.unified_exec=true app-server
	assert_eq "the supervisor's exit code (stderr: $(tail -n 3 "$CX/err"))" 0 "$RC"
	assert_eq "the sub-agent asked the model" 1 \
		"$(codex_requests "$CX" '[.[] | select([.input[]? | select(.role == "user") | .content[]?.text] | any(contains("scen-child")))] | length')"
	assert_eq "the thread's requests not offering bash" 0 \
		"$(codex_requests "$CX" '[.[] | select([.input[]? | select(.role == "user") | .content[]?.text] | any(contains("scen-spawn"))) | select(all(.tools[]; .name != "bash"))] | length')"
	codex_no_shell "$CX"
	# The control, without the bridge.
	mv "$CX/requests.jsonl" "$CX/requests-bridge.jsonl"
	codex_run "$CX" python3 "$CODEX_FW/codex/supervisor.py" turn "$CX/supervisor.log" scen-talk -- \
		"$CODEX_BIN" -c features.shell_tool=true -c features.unified_exec=true app-server
	assert_eq "the control's exit code (stderr: $(tail -n 3 "$CX/err"))" 0 "$RC"
	[ "$(codex_requests "$CX" "[.[0].tools[] | .name | select(. as \$n | $CODEX_SHELL_TOOLS | index(\$n))] | length")" -gt 0 ] ||
		bad "the control offered no shell: the check would not see one"
}
t manager_codex_bridge_shell_off test_manager_codex_bridge_shell_off

# Two threads on one session: the first's call is interrupted (its exec is cancelled in the
# sandbox), the second's call, waiting behind it, runs.
test_manager_codex_bridge_interrupt() {
	codex_ready
	mgr_repo && mgr_start --max-timeout-seconds 60 --default-timeout-seconds 10 && mgr_session
	# shellcheck disable=SC2016 # $TMPDIR is the sandbox's, expanded there
	codex_dir interrupt '{"scen-long": [{"call": {"name": "bash", "arguments": {"command": "echo started > \"$TMPDIR/long-started\"; sleep 30; echo finished > \"$TMPDIR/long-finished\"", "timeout_seconds": 50}}}],
		"scen-second": [{"call": {"name": "bash", "arguments": {"command": "echo second-ran"}}}]}'
	codex_bridge "$CX" interrupt ""
	assert_eq "the supervisor's exit code (stderr: $(tail -n 3 "$CX/err"))" 0 "$RC"
	assert_eq "the interrupted turn" '"interrupted"' "$(jq .turn_a.status "$CX/out")"
	assert_eq "the other turn" '"completed"' "$(jq .turn_b.status "$CX/out")"
	assert_eq "the other call as the model read it" '"second-ran\nexit code 0"' "$(jq '.tool_items_b[0].contentItems[0].text' "$CX/out")"
	mgr_record "sleep 30"
	assert_json '.state' '"cancelled"'
	mgr_record "echo second-ran"
	assert_json '.state' '"exited"'
	[ -e "$WT/.sandbox-tmp/long-started" ] || bad "the long call never started in the sandbox"
	sleep 1
	[ ! -e "$WT/.sandbox-tmp/long-finished" ] || bad "the interrupted call ran to its end"
}
t manager_codex_bridge_interrupt test_manager_codex_bridge_interrupt

# The supervisor answers Codex's bash call itself: the bridge drops that, and the model reads the
# manager's result.
test_manager_codex_bridge_forge() {
	codex_ready
	mgr_repo && mgr_start && mgr_session
	codex_dir forge '{"scen-forge": [{"call": {"name": "bash", "arguments": {"command": "sleep 2; echo real"}}}]}'
	codex_bridge "$CX" forge scen-forge
	assert_eq "the supervisor's exit code (stderr: $(tail -n 3 "$CX/err"))" 0 "$RC"
	grep -q "dropped an answer of the supervisor's to no request it was given" "$CX/err" || bad "no forged answer reached the bridge"
	assert_eq "the call as the model read it" '"real\nexit code 0"' "$(codex_output "$CX" call_1)"
}
t manager_codex_bridge_forge test_manager_codex_bridge_forge

# The manager dies after the thread started: the model reads an error, and nothing runs locally.
test_manager_codex_bridge_down() {
	codex_ready
	mgr_repo && mgr_start && mgr_session
	codex_dir down "{\"scen-down\": [{\"call\": {\"name\": \"bash\", \"arguments\": {\"command\": \"touch $TD/marker\"}}}]}"
	echo "$MGR_PID" >"$CX/manager.pid" && chown "$RUN_USER:" "$CX/manager.pid"
	codex_bridge "$CX" down "$CX/manager.pid"
	assert_eq "the supervisor's exit code (stderr: $(tail -n 3 "$CX/err"))" 0 "$RC"
	local text
	text=$(codex_output "$CX" call_1 | jq -r .)
	[[ "$text" == "refused: sandbox-manager unavailable: "* ]] || bad "the model did not read the manager's absence: $text"
	assert_eq "success" false "$(jq '.tool_items[0].success' "$CX/out")"
	[ ! -e "$TD/marker" ] || bad "the command ran outside the sandbox"
}
t manager_codex_bridge_down test_manager_codex_bridge_down

# The sandbox dies mid-call: the model reads that the outcome is uncertain, never a guess.
test_manager_codex_bridge_uncertain() {
	codex_ready
	mgr_repo && mgr_start && mgr_session
	codex_dir uncertain '{"scen-uncertain": [{"call": {"name": "bash", "arguments": {"command": "sleep 20.7"}}}]}'
	codex_bridge "$CX" turn scen-uncertain &
	local bg=$!
	# anchored: the supervisor's own command line holds the same words
	for _ in $(seq 1 100); do pgrep -f "^sleep 20.7" >/dev/null && break; sleep 0.1; done
	sandbox_agent_kill
	wait "$bg"
	local text
	text=$(codex_output "$CX" call_1 | jq -r .)
	[[ "$text" == *"outcome uncertain"* ]] || bad "the model did not read an uncertain outcome: $text"
	assert_eq "success" false "$(jq '.tool_items[0].success' "$CX/out")"
	mgr_record "sleep 20.7"
	assert_json '.state' '"uncertain"'
}
t manager_codex_bridge_uncertain test_manager_codex_bridge_uncertain

# codex-bridge's own flags: its help, usage errors (exit 2, one line, then the usage), and a Codex
# that cannot be started (exit 125, saying why). Needs no Codex.
test_manager_codex_bridge_cli() {
	local MSOCK=$TD/no-manager.sock
	mgr codex-bridge --help
	assert_eq "--help: exit code" 0 "$RC"
	assert_match "--help: the synopsis" "^usage: sandbox-manager codex-bridge --session S" "$(head -n 1 "$OUT")"
	grep -q -- "--max-output-chars N" "$OUT" || bad "--help does not list --max-output-chars"
	mgr codex-bridge
	assert_eq "no --session: exit code" 2 "$RC"
	assert_eq "no --session: the message" "sandbox-manager codex-bridge: --session is required" "$(head -n 1 "$ERR")"
	assert_match "no --session: the usage after it" "^usage: sandbox-manager codex-bridge" "$(sed -n 2p "$ERR")"
	mgr codex-bridge --session s --bogus
	assert_eq "unknown flag: exit code" 2 "$RC"
	assert_eq "unknown flag: the message" "sandbox-manager codex-bridge: unknown option '--bogus'" "$(head -n 1 "$ERR")"
	mgr codex-bridge --session
	assert_eq "a flag without its value" "sandbox-manager codex-bridge: option '--session' needs a value" "$(head -n 1 "$ERR")"
	mgr codex-bridge -x
	assert_eq "an unknown short flag" "sandbox-manager codex-bridge: unknown option '-x'" "$(head -n 1 "$ERR")"
	mgr codex-bridge --session s --max-output-chars 10
	assert_eq "a bad --max-output-chars: exit code" 2 "$RC"
	mgr codex-bridge --session s codex
	assert_eq "Codex's command without --: exit code" 2 "$RC"
	mgr codex-bridge --session s -- "$TD/no-such-codex" app-server
	assert_eq "a Codex that cannot start: exit code" 125 "$RC"
	assert_match "a Codex that cannot start: the message" "cannot run '$TD/no-such-codex': No such file or directory" "$(cat "$ERR")"
	mgr --help
	grep -q '^  codex-bridge ' "$OUT" || bad "sandbox-manager --help does not list codex-bridge"
}
t manager_codex_bridge_cli test_manager_codex_bridge_cli
