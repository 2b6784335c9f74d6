# shellcheck shell=bash
# A tagged cancel that reaches the manager before its call runs (issue 18): the MCP front sends its
# cancel once more each second while the call is not running yet, but Claude Code exits about 250 ms
# after it interrupts a call, and the cancel went with it: the call, queued behind another one of the
# same session, ran afterwards. Now the manager keeps the cancel for the tag, and the call takes it
# when its turn comes: recorded cancelled, never run (cancel.c, "cancels that come before their call").

CANCEL_HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)

# tagged MODE SESSION TAG [COMMAND]: control_tagged.py as the test user.
tagged() {
	timeout 60 "${AS[@]}" python3 "$CANCEL_HERE/control_tagged.py" "$MSOCK" "$@"
}

test_manager_cancel_queued() {
	local m
	m=$(unique_marker)
	mgr_repo && mgr_start && mgr_session || return
	mgr exec --session "$SID" -- true # the sandbox is up: the long call starts at once
	mgr_bg_exec long "sleep 3.$m; echo long > long.$m"
	for _ in $(seq 1 100); do pgrep -f "^sleep 3.$m" >/dev/null && break; sleep 0.1; done
	pgrep -f "^sleep 3.$m" >/dev/null || bad "the long call did not start"
	tagged exec "$SID" "mcp-$m-1" "echo ran > queued.$m" >"$TD/queued.json" 2>"$TD/queued.err" &
	BG_PIDS+=("$!")
	sleep 0.5 # the queued call is in the manager, waiting for the session's turn
	tagged cancel "$SID" "mcp-$m-1" || bad "the cancel could not be sent"
	wait_bg_execs_allow_fail
	assert_eq "the long call ran to its end" long "$(cat "$WT/long.$m" 2>/dev/null)"
	[ -e "$WT/queued.$m" ] && bad "the cancelled call ran: $WT/queued.$m exists"
	assert_json '[.ok, .result.status, .result.error]' '[true,"cancelled","cancelled by request before it ran"]' \
		"$TD/queued.json"
	mgr records --session "$SID"
	assert_json '[.records[].state]' '["cancelled","exited","exited"]'
	assert_json '.records[0] | [.reason, .generation]' '["cancelled by request before it ran",null]'
	# never dispatched (no generation); the cancel's client asks again: it hears which exec it cancelled
	tagged cancel-answer "$SID" "mcp-$m-1" >"$TD/again.json"
	assert_json '[.ok, .cancelled, .state]' "[true,$(jq -c .result.exec_id "$TD/queued.json"),\"cancelled\"]" \
		"$TD/again.json"
	# the session goes on: an untagged call and another tag run as before
	tagged exec "$SID" "mcp-$m-2" "echo next" >"$TD/next.json"
	assert_json '[.result.status, .result.stdout]' '["exited","next\n"]' "$TD/next.json"
}
t manager_cancel_queued test_manager_cancel_queued

# The cancel comes before its call reaches the manager at all: kept, and taken when the call gets
# its turn; a cancel of a tag no call carries expires unused and cancels nothing else.
test_manager_cancel_first() {
	local m
	m=$(unique_marker)
	mgr_repo && mgr_start && mgr_session || return
	tagged cancel-answer "$SID" "mcp-$m-1" >"$TD/pending.json"
	assert_json '[.ok, .cancelled, .pending]' '[true,null,true]' "$TD/pending.json"
	tagged exec "$SID" "mcp-$m-1" "echo ran > first.$m" >"$TD/first.json"
	[ -e "$WT/first.$m" ] && bad "the cancelled call ran: $WT/first.$m exists"
	assert_json '.result.status' '"cancelled"' "$TD/first.json"
	mgr exec --session "$SID" -- "echo untagged"
	assert_eq "an untagged call after it (stderr: $(head -c 300 "$ERR"))" 0 "$RC"
	assert_eq "its output" untagged "$(cat "$OUT")"
	mgr records --session "$SID"
	assert_json '[.records[].state]' '["exited","cancelled"]'
	# a bad tag is refused, as an exec's is
	tagged cancel-answer "$SID" "$(printf 'x%.0s' $(seq 1 65))" >"$TD/badtag.json"
	assert_json '[.ok, .error.kind]' '[false,"invalid"]' "$TD/badtag.json"
}
t manager_cancel_first test_manager_cancel_first

# Issue 27: a tagged cancel that crosses its call's answer (the call ended, the client had not heard
# yet) was kept for a call that never comes, for max-timeout-seconds + 120 s; 64 of them, one
# session's, and every session's cancel that came before its call was refused. Now the call's end
# is noted under its tag: the late cancel hears which exec it was, ended, and nothing is kept.
test_manager_cancel_late() {
	local m sid_a
	m=$(unique_marker)
	mgr_repo && mgr_start && mgr_session || return
	sid_a=$SID
	tagged late "$sid_a" "mcp-$m" 70 "true" >"$TD/late.jsonl"
	assert_eq "70 late cancels answered" 70 "$(wc -l <"$TD/late.jsonl")"
	assert_eq "each: its exec ended before the cancel" 70 \
		"$(jq -c 'select(.ok == false and .error.kind == "finished")' "$TD/late.jsonl" | wc -l)"
	mgr_session || return
	tagged cancel-answer "$SID" "mcp-$m-b" >"$TD/other.json"
	assert_json '[.ok, .cancelled, .pending]' '[true,null,true]' "$TD/other.json"
	tagged exec "$SID" "mcp-$m-b" "echo ran > other.$m" >"$TD/other-exec.json"
	assert_json '.result.status' '"cancelled"' "$TD/other-exec.json"
	[ -e "$WT/other.$m" ] && bad "the cancelled call of the other session ran"
	return 0
}
t manager_cancel_late test_manager_cancel_late
