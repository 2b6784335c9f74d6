# shellcheck shell=bash
# Live output (issue 30): `exec` prints a command's lines as they come, a follower in another process
# sees the same lines and resumes from a byte offset without losing what the record keeps, and a
# reader that stops reading neither slows the command nor grows the agent's or the manager's memory.

# shellcheck disable=SC2016 # expanded by the sandbox's shell
LIVE_CMD='for i in 1 2 3 4 5 6; do echo "line $i"; sleep 1; done; echo done >&2'

# stamp FILE: each line of stdin as "SECONDS.NANOS LINE" into FILE, stamped when it arrives.
stamp() {
	local l
	while IFS= read -r l; do printf '%s %s\n' "$(date +%s.%N)" "$l"; done >"$1"
}

# spread_ok WHAT FILE N: FILE holds N stamped lines whose arrivals spread over at least N-2 seconds,
# no two of the first N-1 closer than 0.5 s: they came as written, not all at the end.
spread_ok() {
	local what=$1 file=$2 n=$3
	assert_eq "$what: lines" "$n" "$(wc -l <"$file")"
	awk -v n="$n" -v what="$what" '
		{ t[NR] = $1 }
		END {
			if (t[n] - t[1] < n - 2) { printf "%s: arrivals spread over %.2f s\n", what, t[n] - t[1]; exit 1 }
			for (i = 2; i <= n; i++) if (t[i] - t[i-1] < 0.5) { printf "%s: lines %d and %d %.2f s apart\n", what, i-1, i, t[i] - t[i-1]; exit 1 }
		}' "$file" || bad "$what: the lines did not arrive as they were written: $(cat "$file")"
}

# running_exec: the exec id of the session's newest record once it is dispatched, in EXEC.
running_exec() {
	local _
	for _ in $(seq 1 100); do
		mgr records --session "$SID" --limit 1
		[ "$(jr '.records[0].state')" = dispatched ] && { EXEC=$(jr '.records[0].exec_id'); return 0; }
		sleep 0.1
	done
	bad "no dispatched exec: $(cat "$OUT")"
	return 1
}

test_manager_live_exec() {
	mgr_repo && mgr_start && mgr_session
	mgr exec --session "$SID" -- true # the sandbox up first: the lines' timing is the command's
	local fpid
	timeout 60 "${AS[@]}" env "SANDBOX_MANAGER_SOCKET=$MSOCK" "$MANAGER" exec --session "$SID" -- "$LIVE_CMD" \
		2>"$TD/exec.err" | stamp "$TD/exec.stamps" &
	local epid=$!
	running_exec || return
	# a follower in another process, from the start of the exec's output
	timeout 60 "${AS[@]}" env "SANDBOX_MANAGER_SOCKET=$MSOCK" "$MANAGER" follow --exec "$EXEC" \
		2>"$TD/follow.err" | stamp "$TD/follow.stamps" &
	fpid=$!
	wait "$epid" || bad "the exec's pipeline failed: $(cat "$TD/exec.err")"
	wait "$fpid" || bad "the follower failed: $(cat "$TD/follow.err")"
	spread_ok "exec" "$TD/exec.stamps" 6
	assert_eq "exec: the lines, once each" "line 1,line 2,line 3,line 4,line 5,line 6" \
		"$(cut -d' ' -f2- "$TD/exec.stamps" | paste -sd,)"
	assert_eq "exec: stderr" "done" "$(cat "$TD/exec.err")"
	assert_eq "follower: the same lines" "line 1,line 2,line 3,line 4,line 5,line 6" \
		"$(cut -d' ' -f2- "$TD/follow.stamps" | paste -sd,)"
	# the follower joined while the exec ran: its lines kept coming a second apart too
	tail -n 4 "$TD/follow.stamps" >"$TD/follow.last"
	spread_ok "follower" "$TD/follow.last" 4
	assert_eq "follower: stderr" "done" "$(cat "$TD/follow.err")"
	# --json keeps stdout one JSON object, the output inside it
	mgr exec --session "$SID" --json -- 'echo a; echo b >&2'
	assert_json '[.stdout, .stderr]' '["a\n","b\n"]'
	assert_eq "--json: one line on stdout" 1 "$(wc -l <"$OUT")"
	# the record is as without live output
	mgr records --exec "$EXEC"
	assert_json '.records[0].result.stdout' "$(json_str "$(printf 'line %s\n' 1 2 3 4 5 6)
")"
	assert_json '[.records[0].state, .records[0].receipt.exec_id == .records[0].exec_id]' '["exited",true]'
}
t manager_live_exec test_manager_live_exec

test_manager_live_resume() {
	mgr_repo && mgr_start && mgr_session
	mgr exec --session "$SID" -- true
	mgr_bg_exec live "$LIVE_CMD"
	running_exec || return
	# a follower that leaves after about two lines, and one that resumes where it stopped
	timeout -s INT 2.5 "${AS[@]}" env "SANDBOX_MANAGER_SOCKET=$MSOCK" "$MANAGER" follow --exec "$EXEC" \
		>"$TD/first.out" 2>/dev/null
	local got
	got=$(stat -c %s "$TD/first.out")
	if [ "$got" -eq 0 ] || [ "$got" -ge 42 ]; then bad "the first follower got $got bytes: $(cat "$TD/first.out")"; fi
	mgr follow --exec "$EXEC" --offset "$got"
	assert_eq "resumed follower exit code (stderr: $(cat "$ERR"))" 0 "$RC"
	assert_eq "first + resumed: everything, once" "$(printf 'line %s\n' 1 2 3 4 5 6)" "$(cat "$TD/first.out" "$OUT")"
	wait_bg_execs
	# after the exec: what the record keeps, from the offset on
	mgr follow --exec "$EXEC" --offset 14
	assert_eq "after the end: from the record" "$(printf 'line %s\n' 3 4 5 6)" "$(cat "$OUT")"
	assert_eq "after the end: stderr from the record" "done" "$(cat "$ERR")"
}
t manager_live_resume test_manager_live_resume

# vmrss_kb PID: the process's resident set in KiB (0 when gone).
vmrss_kb() { awk '/^VmRSS:/ { print $2 }' "/proc/$1/status" 2>/dev/null || echo 0; }

test_manager_live_flood() {
	mgr_repo && mgr_start && mgr_session
	# the same flood with nobody reading live (--json): the command's own pace, for reference
	mgr exec --session "$SID" --json -- 'yes | head -c 1073741824'
	local ref
	ref=$(jr .duration_ms)
	local agent peak_a=0 peak_m=0 a m
	agent=$(pgrep -f -- "--state-dir $MSTATE/sandboxes/$SID" | head -n 1)
	[ -n "$agent" ] || { bad "no agent"; return; }
	# a reader that never reads: the client's stdout is a pipe nobody drains
	mkfifo "$TD/stuck"
	# shellcheck disable=SC2217 # it holds the FIFO's reading end open and never reads
	sleep 300 <"$TD/stuck" &
	local sleeper=$!
	timeout 120 "${AS[@]}" env "SANDBOX_MANAGER_SOCKET=$MSOCK" "$MANAGER" exec --session "$SID" -- \
		'yes | head -c 1073741824' >"$TD/stuck" 2>/dev/null &
	local cpid=$!
	running_exec || return
	for _ in $(seq 1 1200); do
		a=$(vmrss_kb "$agent"); m=$(vmrss_kb "$MGR_PID")
		[ "$a" -gt "$peak_a" ] && peak_a=$a
		[ "$m" -gt "$peak_m" ] && peak_m=$m
		mgr records --exec "$EXEC"
		[ "$(jr '.records[0].state')" = exited ] && break
		sleep 0.1
	done
	assert_json '.records[0].state' '"exited"'
	assert_json '.records[0].result.stdout_bytes' 1073741824
	local ms
	ms=$(jr '.records[0].result.duration_ms')
	# unread, the 1 GiB still went through at the agent's own pace
	[ "$ms" -lt $((2 * ref + 5000)) ] || bad "the flood took $ms ms with a reader that does not read, $ref ms without"
	[ "$peak_a" -lt 65536 ] || bad "the agent's resident set reached $peak_a KiB"
	[ "$peak_m" -lt 131072 ] || bad "the manager's resident set reached $peak_m KiB"
	echo "    measured: flood ${ms} ms (${ref} ms with nobody reading live), agent peak ${peak_a} KiB, manager peak ${peak_m} KiB"
	# the stalled reader's lost bytes are counted, and so is what it took before it stalled
	mgr metrics
	local streamed skipped
	streamed=$(awk '/^sandbox_manager_live_output_bytes_total\{kind="streamed"\}/ { print $2 }' "$OUT")
	skipped=$(awk '/^sandbox_manager_live_output_bytes_total\{kind="skipped"\}/ { print $2 }' "$OUT")
	if [ "${streamed:-0}" -eq 0 ] || [ "${skipped:-0}" -eq 0 ]; then
		bad "metrics: streamed ${streamed:-none}, skipped ${skipped:-none}"
	fi
	kill "$cpid" "$sleeper" 2>/dev/null
	wait "$cpid" "$sleeper" 2>/dev/null
	return 0
}
t manager_live_flood test_manager_live_flood

# MCP: the progress notifications of a call that prints a line a second carry those lines, as they
# come, at most one a second, with increasing progress; the tool's result is the whole output as before.
# shellcheck disable=SC2016 # jq programs
test_manager_mcp_progress() {
	mgr_repo && mgr_start && mgr_session
	mgr exec --session "$SID" -- true
	timeout 60 "${AS[@]}" python3 "$(dirname "${BASH_SOURCE[0]}")/mcp_progress.py" "$MANAGER" "$MSOCK" "$SID" \
		"$LIVE_CMD"'; sleep 1.2; printf "\033[31mred\033[0m\n"; sleep 1.5' >"$OUT"
	assert_eq "the client's exit code" 0 "$?"
	local lines
	lines=$(jq -r '[.progress[].message | select(test("^[0-9]+s: line [0-9]$")) | sub("^[0-9]+s: "; "")] | unique | length' "$OUT")
	[ "$lines" -ge 4 ] || bad "progress carried $lines of the 6 lines: $(jq -c .progress "$OUT")"
	assert_json '[.progress[].message | select(endswith("s: red"))] | length' 1
	assert_json '[.progress[].token] | unique' '["tok"]'
	# increasing, and never two within a second
	assert_json '[.progress | range(1; length) as $i | .[$i].progress > .[$i-1].progress] | all' true
	assert_json '[.progress | range(1; length) as $i | .[$i].t - .[$i-1].t >= 0.9] | all' true
	# the lines came while the command ran: the first of them within 3 s of the call
	assert_json '[.progress[] | select(.message | test("line 1$")) | .t < 3] | any' true
	assert_match "the result keeps the whole output" 'line 1.*line 6' "$(jq -r '.result.content[0].text' "$OUT" | paste -sd' ')"
}
t manager_mcp_progress test_manager_mcp_progress
