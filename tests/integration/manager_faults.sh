# shellcheck shell=bash
# The reliability suite, part 1 (issue 14; the table in docs/reliability.md): the manager killed by
# SIGKILL at each step of one call (the failpoint build, `make failpoints`), the sandbox's agent killed
# right after its command returned, and the connection to the agent cut in the middle of a result.
# After each: the client had one clear line, not a hang; the restarted manager settled the record as
# docs/operations.md "After a crash" says; the command ran at most once (it appends a line to a file in
# the worktree); no record is lost or doubled; and the session serves the next call.

fp_need() { [ -n "${FP_MANAGER:-}" ] || skip_setup "no failpoint manager: \`make failpoints\` builds build/fp/sandbox-manager"; }

# fp_start SPEC [SERVE ARGS...]: the failpoint manager on this test's state dir, armed with SPEC
# (SB_FAILPOINT=NAME[:N][:stop]). Points in agent_client.c count every Exec exchange, and each start
# runs one (the volume probe) before the first call: their first call's hit is 2.
fp_start() {
	local spec=$1
	shift
	SB_FAILPOINT=$spec MANAGER=$FP_MANAGER mgr_start "$@"
}

# runs_of M: how many times the fault's command ran (the lines it appended).
runs_of() { if [ -e "$WT/.sandbox-tmp/runs.$1" ]; then wc -l <"$WT/.sandbox-tmp/runs.$1"; else echo 0; fi; }

# fault_command M: appends a line (the proof of a run), prints, exits 3 (a real code to carry).
fault_command() { echo "echo run >> \"\$TMPDIR/runs.$1\"; echo out.$1; exit 3"; }

# fault_next_call STATES: the session serves a new call on a fresh sandbox, and then holds exactly
# STATES (newest first), each exec once.
fault_next_call() {
	mgr exec --session "$SID" -- 'echo again'
	assert_eq "the next call: exit code (stderr: $(head -c 300 "$ERR"))" 0 "$RC"
	assert_eq "the next call: output" again "$(cat "$OUT")"
	mgr records --session "$SID"
	assert_json '[.records[].state]' "$1"
	assert_json '[.records[].exec_id] | (unique | length) == length' true
}

# fault_manager_killed POINT HIT STATE RUNS: the manager dies (SIGKILL) at POINT's HIT-th hit, on
# the second call; the restart settles that call as STATE, its command having run RUNS times.
fault_manager_killed() {
	local point=$1 hit=$2 state=$3 runs=$4 m rc t0
	fp_need
	m=$(unique_marker)
	mgr_repo && fp_start "$point:$hit" && mgr_session || return
	mgr exec --session "$SID" -- 'echo first'
	assert_eq "the call before the fault (stderr: $(head -c 300 "$ERR"))" 0 "$RC"

	t0=$(now_ms)
	mgr exec --session "$SID" -- "$(fault_command "$m")"
	assert_eq "the client's exit code when the manager dies (stdout: $(head -c 200 "$OUT"))" 125 "$RC"
	assert_lines "$(cat "$ERR")" "sandbox-manager: the manager closed the connection without answering"
	assert_lt "ms until the client answered" $(($(now_ms) - t0)) 20000
	wait "$MGR_PID"
	rc=$?
	assert_eq "the manager's exit status (killed at $point)" 137 "$rc"
	grep -q "failpoint $point reached" "$TD/manager.log" || bad "the manager did not log the failpoint $point"

	# The normal manager (no failpoints) on the same state.
	mgr_start || return
	mgr records --session "$SID"
	assert_json '[.records[].state]' "[\"$state\",\"exited\"]"
	assert_json '[.records[].command | select(test("out\\.'"$m"'"))] | length' 1
	case $state in
	refused) assert_match "the reason" "never ran" "$(jr '.records[0].reason')" ;;
	uncertain) assert_match "the reason" "restarted while it ran" "$(jr '.records[0].reason')" ;;
	exited)
		assert_json '.records[0].result.exit_code' 3
		assert_json '.records[0].result.stdout' "\"out.$m\\n\""
		assert_json '.records[0].result.receipt.verified' true
		;;
	esac
	assert_eq "the command ran" "$runs" "$(runs_of "$m")"
	# the restart stopped the previous run's sandbox: the next call is on a new generation
	fault_next_call "[\"exited\",\"$state\",\"exited\"]"
	mgr session show --session "$SID"
	assert_json .generation 2
	assert_eq "the command ran, after the next call" "$runs" "$(runs_of "$m")"
}

# Recorded accepted, no sandbox touched: it never ran, and the restart says so.
test_manager_fault_accepted() { fault_manager_killed manager.exec.accepted 2 refused 0; }
t manager_fault_accepted test_manager_fault_accepted

# Recorded dispatched, not a byte sent: the agent has no record of it, which the restart does not take
# for proof that it never ran (a lost request and a lost journal look alike): uncertain, never rerun.
test_manager_fault_dispatched() { fault_manager_killed manager.exec.dispatched 2 uncertain 0; }
t manager_fault_dispatched test_manager_fault_dispatched

# The Exec written to the agent, no answer read: the command runs to its end meanwhile, and the restart
# completes the record from the agent's journal, with the command's own exit code.
test_manager_fault_sent() { fault_manager_killed manager.agent.sent 3 exited 1; }
t manager_fault_sent test_manager_fault_sent

# The Result read, its Receipt not yet: the same, from the journal.
test_manager_fault_result_read() { fault_manager_killed manager.agent.result_read 3 exited 1; }
t manager_fault_result_read test_manager_fault_result_read

# Result and Receipt in memory, neither verified nor recorded: the same, from the journal.
test_manager_fault_receipt_received() { fault_manager_killed manager.exec.receipt_received 2 exited 1; }
t manager_fault_receipt_received test_manager_fault_receipt_received

# The end committed, the answer not sent: the client hears nothing useful, the record is already final.
test_manager_fault_recorded() { fault_manager_killed manager.exec.recorded 2 exited 1; }
t manager_fault_recorded test_manager_fault_recorded

# A crash of the machine during a call, simulated (issue 32: the agent's journal begin and end are not
# synced, and its journal names the boot they are from). The manager dies with the Exec sent
# (manager.agent.sent), the command runs to its end, then the machine "crashes": the agent is killed
# and every record the page cache held is taken away (the begin's slot, the end, the finished entry,
# the receipt); the agent is started again on the same directories under another boot id (the
# failpoint agent's SB_FAILPOINT_BOOT_ID), and the normal manager's recovery asks it. The journal is
# in doubt: the exec is recorded `uncertain` in the agent's own words (the machine restarted), never
# `exited` nor `refused`, and never run again. Root only: the agent is started again by hand, as root
# with its directories given to root; under an unprivileged manager they belong to subordinate ids
# the test user cannot take.
test_manager_fault_host_crash() {
	local m sb pids hand boot=00000000-0000-4000-8000-000000000032 rc
	fp_need
	[ -n "${FP_AGENT:-}" ] || skip_setup "no failpoint agent: \`make failpoints\` builds build/fp/sandbox-agent"
	[ "$RUN_UID" -eq 0 ] || { skip "root only: the agent is restarted by hand on directories of subordinate ids"; return; }
	m=$(unique_marker)
	mgr_repo && fp_start manager.agent.sent:2 && mgr_session || return
	mgr exec --session "$SID" -- "$(fault_command "$m")"
	assert_eq "the client's exit code when the manager dies" 125 "$RC"
	wait "$MGR_PID"
	rc=$?
	assert_eq "the manager's exit status (killed at manager.agent.sent)" 137 "$rc"
	sb=$MSTATE/sandboxes/$SID.g1
	# The command's end: its finished entry in the journal.
	for _ in $(seq 1 100); do compgen -G "$sb/state/journal/*.json" >/dev/null && break; sleep 0.1; done
	compgen -G "$sb/state/journal/*.json" >/dev/null || { bad "the agent never finished the exec"; return; }
	assert_eq "the command ran" 1 "$(runs_of "$m")"
	# The machine's crash: the agent gone, and what was not synced with it.
	pids=$(pgrep -f -- "--state-dir $sb/state")
	# shellcheck disable=SC2086 # this test's own agent, by PID
	kill -KILL $pids
	for _ in $(seq 1 50); do pgrep -f -- "--state-dir $sb/state" >/dev/null || break; sleep 0.1; done
	truncate -s 0 "$sb/state/journal/.running" "$sb/state/journal/.ends"
	truncate -s 1024 "$sb/state/journal/.running"
	truncate -s 131072 "$sb/state/journal/.ends"
	rm -f "$sb/state/journal/"*.json "$sb/state/receipts/"*.json
	# The agent again, on the same directories and address, under another boot.
	chown -R 0:0 "$sb/state" "$sb/sock" "$sb/tls"
	env -i PATH=/usr/bin:/bin LANG=C.UTF-8 SB_FAILPOINT_BOOT_ID=$boot "$FP_AGENT" serve \
		--listen "unix:$sb/sock/agent.sock" --tls-cert "$sb/tls/agent.crt" --tls-key "$sb/tls/agent.key" \
		--tls-ca "$sb/tls/ca.crt" --manager-name manager.infra-sandbox --state-dir "$sb/state" \
		--generation 1 >>"$TD/agent-again.log" 2>&1 &
	hand=$!
	for _ in $(seq 1 100); do grep -q "serving on" "$TD/agent-again.log" && break; sleep 0.1; done
	grep -q "no exec is accepted on it" "$TD/agent-again.log" ||
		bad "the agent started again did not find its journal in doubt: $(tail -c 300 "$TD/agent-again.log")"
	mgr_start || return
	mgr records --session "$SID"
	assert_json '[.records[].state]' '["uncertain"]'
	assert_match "the reason: the agent's, the machine restarted" \
		"the machine restarted since this sandbox's journal was written" "$(jr '.records[0].reason')"
	kill -KILL "$hand" 2>/dev/null
	wait "$hand" 2>/dev/null
	assert_eq "the command ran, after recovery" 1 "$(runs_of "$m")"
	fault_next_call '["exited","uncertain"]'
	assert_eq "the command ran, after the next call" 1 "$(runs_of "$m")"
}
t manager_fault_host_crash test_manager_fault_host_crash

# proc_state PID: the one-letter state of a process (R, S, T, Z...), empty when it is gone.
proc_state() { sed -n 's/^.*) \([A-Za-z]\).*/\1/p' "/proc/$1/stat" 2>/dev/null; }

# The agent dies right after its command returned, while it sends the result: the manager is stopped
# (SIGSTOP at manager.agent.sent) so the ~1 MiB result cannot drain, the command ends, the agent is
# killed mid-send, the manager resumes. Half a result is never an outcome: the call is uncertain, the
# sandbox retired with evidence, the command not run again, and the next call gets a new generation.
# (The agent killed while the command runs: manager_recovery.sh manager_agent_killed; between two
# calls: manager_agent_killed_between_calls.)
test_manager_fault_agent_killed_after_command() {
	local m
	fp_need
	m=$(unique_marker)
	mgr_repo && fp_start manager.agent.sent:2:stop && mgr_session || return
	mgr_bg_exec a "echo run >> \"\$TMPDIR/runs.$m\"; head -c 3000000 /dev/zero | tr '\\0' x; echo >> \"\$TMPDIR/ended.$m\"; exit 3"
	for _ in $(seq 1 100); do [ "$(proc_state "$MGR_PID")" = T ] && break; sleep 0.1; done
	assert_eq "the manager stopped at the failpoint" T "$(proc_state "$MGR_PID")"
	for _ in $(seq 1 100); do [ -s "$WT/.sandbox-tmp/ended.$m" ] && break; sleep 0.1; done
	[ -s "$WT/.sandbox-tmp/ended.$m" ] || bad "the command did not end while the manager was stopped"
	sleep 1 # the agent writes its journal and blocks sending the result to the stopped manager
	sandbox_agent_kill
	kill -CONT "$MGR_PID"
	wait_bg_execs_allow_fail
	# the x's that came live before the agent died (live output; what the stopped manager could not
	# take is said skipped), then the outcome, nothing else
	assert_lines "$(sed 's/^x*//' "$TD/bg-a.out" | grep -v '^sandbox-manager: [0-9]* bytes of stdout skipped here')" \
		"sandbox-manager: the command.s outcome is uncertain: .*"
	mgr records --session "$SID"
	assert_json '[.records[].state]' '["uncertain"]'
	assert_eq "the command ran" 1 "$(runs_of "$m")"
	kill -0 "$MGR_PID" 2>/dev/null || bad "the manager did not survive its agent"
	fault_next_call '["exited","uncertain"]'
	mgr session show --session "$SID"
	assert_json .generation 2
	assert_eq "the command ran, after the next call" 1 "$(runs_of "$m")"
}
t manager_fault_agent_killed_after_command test_manager_fault_agent_killed_after_command

# The connection to the agent is cut after 6 bytes of the Result frame (failpoint
# manager.agent.cut_result, a stand-in for a proxy that drops the link): the manager never takes half a
# result for an outcome; it asks the agent again on a new connection and records the whole, verified
# result. The sandbox stays (its agent answered), and nothing runs twice.
test_manager_fault_cut_result() {
	local m
	fp_need
	m=$(unique_marker)
	mgr_repo && fp_start manager.agent.cut_result:3 && mgr_session || return
	mgr exec --session "$SID" -- 'echo first'
	assert_eq "the call before the cut" 0 "$RC"
	mgr exec --session "$SID" -- "$(fault_command "$m")"
	grep -q "failpoint manager.agent.cut_result reached" "$TD/manager.log" || bad "the connection was not cut"
	assert_eq "the call's exit code, from the agent's journal (stderr: $(head -c 300 "$ERR"))" 3 "$RC"
	assert_eq "its output" "out.$m" "$(cat "$OUT")"
	mgr records --session "$SID"
	assert_json '[.records[].state]' '["exited","exited"]'
	assert_json '.records[0].result.stdout' "\"out.$m\\n\""
	assert_json '.records[0].result.receipt.verified' true
	assert_eq "the command ran" 1 "$(runs_of "$m")"
	fault_next_call '["exited","exited","exited"]'
	mgr session show --session "$SID"
	assert_json .generation 1
}
t manager_fault_cut_result test_manager_fault_cut_result

# A dropped connection does not end a long call (issue 27): the connection is cut 2 s into a 20 s
# call (failpoint manager.agent.cut_waiting), while its command runs. The agent keeps answering
# "running", and the manager keeps asking until the call's own deadline: the call ends exited 3 with
# its output, the command ran once, and the sandbox stays (the same generation serves the next call).
test_manager_fault_cut_long_call() {
	local m t0
	fp_need
	m=$(unique_marker)
	mgr_repo && fp_start manager.agent.cut_waiting:2 && mgr_session || return
	t0=$(now_ms)
	mgr exec --session "$SID" --timeout-seconds 60 -- "echo run >> \"\$TMPDIR/runs.$m\"; echo start.$m; sleep 18; echo done.$m; exit 3"
	grep -q "failpoint manager.agent.cut_waiting reached" "$TD/manager.log" || bad "the connection was not cut"
	assert_eq "the call's exit code (stderr: $(head -c 300 "$ERR"))" 3 "$RC"
	assert_eq "its output" "start.$m
done.$m" "$(cat "$OUT")"
	assert_ge "ms the call took (the command's own 18 s)" $(($(now_ms) - t0)) 18000
	mgr records --session "$SID"
	assert_json '[.records[].state]' '["exited"]'
	assert_json '.records[0].result.receipt.verified' true
	assert_eq "the command ran" 1 "$(runs_of "$m")"
	fault_next_call '["exited","exited"]'
	mgr session show --session "$SID"
	assert_json .generation 1
}
t manager_fault_cut_long_call test_manager_fault_cut_long_call

# A compromised agent's word (failpoints manager.agent.result_running and result_exit_code forge the
# Result as it arrives, the receipt untouched): the manager records only what the receipt proves. The
# call is uncertain with the reason, its sandbox retired; the session's next call runs on a new one;
# a restart finds nothing left in flight and starts (issue 27: a non-final status used to stay
# `dispatched`, and the next start refused to run).
fault_agent_lies() {
	local point=$1 why=$2 m
	fp_need
	m=$(unique_marker)
	mgr_repo && fp_start "$point:3" && mgr_session || return
	mgr exec --session "$SID" -- 'echo first'
	assert_eq "the call before the forged result" 0 "$RC"
	mgr exec --session "$SID" -- "$(fault_command "$m")"
	assert_eq "the call's exit code (stderr: $(head -c 300 "$ERR"))" 125 "$RC"
	assert_eq "the client's line" "sandbox-manager: the command's outcome is uncertain: $why" "$(cat "$ERR")"
	mgr records --session "$SID"
	assert_json '[.records[].state]' '["uncertain","exited"]'
	assert_match "the recorded reason" "$why" "$(jr '.records[0].reason')"
	assert_eq "the command ran" 1 "$(runs_of "$m")"
	fault_next_call '["exited","uncertain","exited"]'
	mgr session show --session "$SID"
	assert_json .generation 2
	# The normal manager, after a crash, on the same records starts: nothing was left dispatched.
	kill -KILL "$MGR_PID"
	wait "$MGR_PID" 2>/dev/null
	MANAGER=$IT_ROOT/bin/sandbox-manager mgr_start || return
	mgr records --session "$SID"
	assert_json '[.records[].state]' '["exited","uncertain","exited"]'
}
test_manager_fault_result_running() { fault_agent_lies manager.agent.result_running "the agent's result says status \"running\", which no finished exec has"; }
test_manager_fault_result_exit_code() { fault_agent_lies manager.agent.result_exit_code "the agent's result says exit_code 4, its receipt 3"; }
t manager_fault_result_running test_manager_fault_result_running
t manager_fault_result_exit_code test_manager_fault_result_exit_code

# One session that recovery cannot settle stays in that session (issue 27): two sessions each have a
# call in flight when the manager is killed; the restart cannot record the end of the first exec it
# settles (failpoint manager.recovery.settle_fails). The manager starts, that session is reserved
# (status degraded naming it and why, session show, the metrics), the other session's exec is settled
# from its journal and the session serves; `resolve` settles the exec left in flight, recorded
# uncertain with the reason, and that session serves again.
test_manager_fault_recovery_one_session() {
	local m1 m2 a b wa wb bad_sid good_sid left
	fp_need
	m1=$(unique_marker)
	m2=$(unique_marker)
	mgr_repo && mgr_start && mgr_session || return
	a=$SID wa=$WT
	mgr_session || return
	b=$SID wb=$WT
	mgr_bg_exec a "echo run >> \"\$TMPDIR/runs.$m1\"; sleep 2.$m1; echo out.$m1; exit 3" "$a"
	mgr_bg_exec b "echo run >> \"\$TMPDIR/runs.$m2\"; sleep 2.$m2; echo out.$m2; exit 3" "$b"
	# anchored: the client's own command line holds the same words
	for _ in $(seq 1 100); do
		pgrep -f "^sleep 2.$m1" >/dev/null && pgrep -f "^sleep 2.$m2" >/dev/null && break
		sleep 0.1
	done
	kill -KILL "$MGR_PID"
	wait "$MGR_PID" 2>/dev/null
	wait_bg_execs_allow_fail
	sleep 2.5 # both commands end meanwhile; their agents keep the end in their journals

	fp_start manager.recovery.settle_fails:1 || return
	grep -q "failpoint manager.recovery.settle_fails reached" "$TD/manager.log" || bad "the failpoint was not reached"
	mgr status --json
	assert_eq "status: exit code, degraded (stderr: $(head -c 300 "$ERR"))" 1 "$RC"
	assert_json .health '"degraded"'
	assert_json '.unsettled_sessions | length' 1
	bad_sid=$(jr '.unsettled_sessions[0].session')
	left=$(jr '.unsettled_sessions[0].exec')
	if [ "$bad_sid" = "$a" ]; then good_sid=$b; else good_sid=$a; fi
	assert_match "status: the reason" "manager.recovery.settle_fails" "$(jr '.unsettled_sessions[0].reason')"
	assert_match "status: the problem names the session" "recovery could not settle.* session $bad_sid \\(exec $left" \
		"$(jr '.problems | join(" ")')"
	mgr session show --session "$bad_sid"
	assert_json .state '"reserved"'
	assert_json .unsettled.exec "\"$left\""
	assert_match "session show: the reason" "could not be recorded" "$(jr .unsettled.reason)"
	mgr metrics
	grep -qx "sandbox_manager_unsettled_sessions 1" "$OUT" || bad "metrics: not one unsettled session"
	grep -qx "sandbox_manager_reserved_sessions 1" "$OUT" || bad "metrics: not one reserved session"

	# The other session was settled from its agent's journal, and serves.
	mgr records --session "$good_sid"
	assert_json '[.records[].state]' '["exited"]'
	assert_json '.records[0].result.exit_code' 3
	mgr exec --session "$good_sid" -- 'echo again'
	assert_eq "the other session's next call (stderr: $(head -c 300 "$ERR"))" 0 "$RC"
	# The reserved one refuses calls and delete, its exec still in flight on record.
	mgr exec --session "$bad_sid" -- 'echo refused'
	assert_eq "a call on the reserved session" 125 "$RC"
	assert_match "the refusal" "is reserved" "$(cat "$ERR")"
	mgr session delete --session "$bad_sid"
	assert_match "delete refused, saying why" "recovery could not settle exec $left" "$(cat "$ERR")"
	mgr records --session "$bad_sid"
	assert_json '[.records[].state]' '["refused","dispatched"]'
	assert_json '.records[1].exec_id' "\"$left\""

	mgr resolve --exec "$left" --outcome ran --note "checked the worktree: it ran"
	assert_eq "resolve: exit code (stderr: $(head -c 300 "$ERR"))" 0 "$RC"
	assert_json .state '"uncertain"'
	assert_json .session_serves true
	mgr records --session "$bad_sid"
	assert_json '[.records[].state]' '["refused","uncertain"]'
	assert_match "the recorded reason" "recovery could not settle it" "$(jr '.records[1].reason')"
	assert_json '.records[1].resolution.outcome' '"ran"'
	mgr status --json
	assert_eq "status: exit code, healthy again (stdout: $(head -c 600 "$OUT"))" 0 "$RC"
	assert_json .health '"healthy"'
	assert_json '.unsettled_sessions | length' 0
	mgr exec --session "$bad_sid" -- 'echo served'
	assert_eq "the settled session's next call (stderr: $(head -c 300 "$ERR"))" 0 "$RC"
	assert_eq "its output" served "$(cat "$OUT")"
	assert_eq "the first command ran" 1 "$(WT=$wa runs_of "$m1")"
	assert_eq "the second command ran" 1 "$(WT=$wb runs_of "$m2")"
}
t manager_fault_recovery_one_session test_manager_fault_recovery_one_session

# A sandbox whose end a restart could not prove stays in its session only until the next call
# (failpoint manager.recovery.evidence_fails: the runtime gave no evidence once, as an API server
# that did not answer in time). The restart reserves the session; the next call asks again, proves
# the earlier sandbox gone, releases the session and runs, once.
test_manager_fault_evidence_retried() {
	local m
	fp_need
	m=$(unique_marker)
	mgr_repo && mgr_start && mgr_session || return
	mgr exec --session "$SID" -- "echo first.$m"
	assert_eq "the first call (stderr: $(head -c 300 "$ERR"))" 0 "$RC"
	kill -KILL "$MGR_PID"
	wait "$MGR_PID" 2>/dev/null
	fp_start manager.recovery.evidence_fails:1 || return
	grep -q "failpoint manager.recovery.evidence_fails reached" "$TD/manager.log" || bad "the failpoint was not reached"
	mgr session show --session "$SID"
	assert_json .state '"reserved"'
	mgr exec --session "$SID" -- "echo again.$m"
	assert_eq "the next call (stderr: $(head -c 300 "$ERR"))" 0 "$RC"
	assert_eq "its output" "again.$m" "$(cat "$OUT")"
	grep -q "session $SID: its earlier sandbox is proven gone now" "$TD/manager.log" ||
		bad "the manager's log does not say the earlier sandbox was proven gone at the call"
	mgr session show --session "$SID"
	assert_json .state '"active"'
	mgr records --session "$SID"
	assert_json '[.records[].state]' '["exited","exited"]'
}
t manager_fault_evidence_retried test_manager_fault_evidence_retried

# The same, answered by a delete: the session reserved at the restart is deleted once the delete
# asks again and proves the earlier sandbox gone (its workspace goes only then, invariant 9).
test_manager_fault_evidence_retried_delete() {
	fp_need
	mgr_repo && mgr_start && mgr_session || return
	mgr exec --session "$SID" -- true
	assert_eq "the first call (stderr: $(head -c 300 "$ERR"))" 0 "$RC"
	kill -KILL "$MGR_PID"
	wait "$MGR_PID" 2>/dev/null
	fp_start manager.recovery.evidence_fails:1 || return
	mgr session show --session "$SID"
	assert_json .state '"reserved"'
	mgr session delete --session "$SID"
	assert_eq "the delete (stderr: $(head -c 300 "$ERR"))" 0 "$RC"
	mgr session show --session "$SID"
	assert_match "the session after the delete" "no session" "$(cat "$ERR")"
	[ -e "$WT" ] && bad "the worktree $WT is still there after the delete"
}
t manager_fault_evidence_retried_delete test_manager_fault_evidence_retried_delete

# The normal build holds no failpoint (the names are the proof), the failpoint build every one.
test_manager_fault_build() {
	local names
	fp_need
	names=$(cat "$MANAGER" "$MANAGER-daemon" | grep -a -o 'manager\.\(exec\|agent\|recovery\)\.[a-z_]*' | sort -u | tr '\n' ' ')
	assert_eq "failpoint names in the normal manager" "" "$names"
	names=$(cat "$FP_MANAGER" "$FP_MANAGER-daemon" | grep -a -o 'manager\.\(exec\|agent\|recovery\)\.[a-z_]*' | sort -u | tr '\n' ' ')
	assert_eq "failpoint names in the failpoint manager" "manager.agent.cut_result manager.agent.cut_waiting manager.agent.result_exit_code manager.agent.result_read manager.agent.result_running manager.agent.sent manager.exec.accepted manager.exec.dispatched manager.exec.receipt_received manager.exec.recorded manager.recovery.evidence_fails manager.recovery.settle_fails " "$names"
}
t manager_fault_build test_manager_fault_build
