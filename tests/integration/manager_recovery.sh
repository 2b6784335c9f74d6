# shellcheck shell=bash
# The manager's uncertainty rules: a lost outcome is uncertain and never rerun; a killed manager
# loses no record; idle sandboxes are retired and come back with the same workspace; cancel and
# delete act only with evidence that the sandbox is gone.

# The sandbox's agent dies between two calls (a review found every later call refused for good): the
# next call notices that nothing answers before anything is sent, retires the sandbox with evidence and
# runs once on a new generation.
test_manager_agent_killed_between_calls() {
	local m
	m=$(unique_marker)
	mgr_repo && mgr_start && mgr_session
	mgr exec --session "$SID" -- true
	sandbox_agent_kill
	sleep 0.3
	mgr exec --session "$SID" -- "echo run >> \"\$TMPDIR/runs.$m\"; echo again"
	assert_eq "the next call runs (stderr: $(head -c 300 "$ERR"))" 0 "$RC"
	assert_eq "its output" again "$(cat "$OUT")"
	assert_eq "the command ran once" 1 "$(wc -l <"$WT/.sandbox-tmp/runs.$m")"
	mgr session show --session "$SID"
	assert_json .generation 2
	mgr records --session "$SID"
	assert_json '[.records[].state]' '["exited","exited"]'
}
t manager_agent_killed_between_calls test_manager_agent_killed_between_calls

# The sandbox's agent dies mid-command: the call is uncertain, recorded, and not run again.
test_manager_agent_killed() {
	local m i
	m=$(unique_marker)
	mgr_repo && mgr_start && mgr_session
	mgr exec --session "$SID" -- true
	mgr_bg_exec k "echo run >> \"\$TMPDIR/runs.$m\"; sleep 20.$m"
	# anchored: the client's own command line holds the same words
	for i in $(seq 1 50); do pgrep -f "^sleep 20.$m" >/dev/null && break; sleep 0.1; done
	sandbox_agent_kill
	wait_bg_execs_allow_fail
	assert_match "the call's output" "uncertain" "$(cat "$TD/bg-k.out")"
	assert_eq "the call's answer is one line" 1 "$(wc -l <"$TD/bg-k.out")"
	mgr records --session "$SID"
	assert_json '[.records[].state]' '["uncertain","exited"]' # newest first
	assert_eq "the command ran once" 1 "$(wc -l <"$WT/.sandbox-tmp/runs.$m")"
	no_process "sleep 20.$m"
	mgr exec --session "$SID" -- 'echo again'
	assert_eq "the next call gets a new sandbox" 0 "$RC"
	mgr session show --session "$SID"
	assert_json .generation 2
}
t manager_agent_killed test_manager_agent_killed


# kill -9 of the manager loses no record; the restart stops the old sandbox with evidence.
test_manager_restart() {
	local old
	mgr_repo && mgr_start && mgr_session
	mgr exec --session "$SID" -- 'echo one'
	old=$(pgrep -f -- "--state-dir $MSTATE/sandboxes/$SID")
	[ -n "$old" ] || bad "no sandbox before the restart"
	kill -KILL "$MGR_PID"
	wait "$MGR_PID" 2>/dev/null
	mgr_start
	mgr records --session "$SID"
	assert_json '[.records[].state]' '["exited"]'
	assert_json '.records[0].result.stdout' '"one\n"'
	# gone, or a zombie nobody reaps (the old manager was its parent): not running either way
	case $(sed -n 's/^.*) \([A-Za-z]\).*/\1/p' "/proc/$old/stat" 2>/dev/null) in
	"" | Z) ;;
	*) bad "the previous run's sandbox $old still runs after the restart" ;;
	esac
	mgr exec --session "$SID" -- 'echo two'
	assert_eq "a call after the restart" 0 "$RC"
	assert_eq "its output" "two" "$(cat "$OUT")"
}
t manager_restart test_manager_restart

# A manager killed while a call runs: the restart settles it from the agent's journal or marks it
# uncertain, and never runs it again.
test_manager_restart_midcall() {
	local m i
	m=$(unique_marker)
	mgr_repo && mgr_start && mgr_session
	mgr_bg_exec r "echo run >> \"\$TMPDIR/runs.$m\"; sleep 2; echo done.$m"
	for i in $(seq 1 50); do [ -s "$WT/.sandbox-tmp/runs.$m" ] && break; sleep 0.1; done
	kill -KILL "$MGR_PID"
	wait_bg_execs_allow_fail
	sleep 2.5
	mgr_start
	mgr records --session "$SID"
	assert_json '[.records[].state]' '["exited"]'
	assert_json '.records[0].result.stdout' "\"done.$m\\n\""
	assert_eq "the command ran once" 1 "$(wc -l <"$WT/.sandbox-tmp/runs.$m")"
}
t manager_restart_midcall test_manager_restart_midcall

# An idle sandbox is retired; the next call brings a new one up on the same workspace.
test_manager_idle_eviction() {
	local i
	mgr_repo && mgr_start --idle-seconds 1 && mgr_session
	mgr exec --session "$SID" -- 'echo kept > "$TMPDIR/state"; echo patch >> README.md'
	for i in $(seq 1 50); do
		mgr session show --session "$SID"
		[ "$(jv .sandbox)" = null ] && break
		sleep 0.2
	done
	assert_json .sandbox null
	mgr exec --session "$SID" -- 'cat "$TMPDIR/state"; git diff --stat | tail -n 1'
	assert_eq "exit code" 0 "$RC"
	assert_lines "$(cat "$OUT")" kept " 1 file changed, 1 insertion\(\+\)"
	mgr session show --session "$SID"
	assert_json .generation 2
}
t manager_idle_eviction test_manager_idle_eviction

# Cancel stops the running call's sandbox and answers once the call is recorded cancelled, which needs
# the sandbox's end proven.
test_manager_cancel() {
	local m i t0
	m=$(unique_marker)
	mgr_repo && mgr_start && mgr_session
	mgr_bg_exec c "sleep 30.$m"
	for i in $(seq 1 50); do pgrep -f "^sleep 30.$m" >/dev/null && break; sleep 0.1; done
	t0=$(now_ms)
	mgr cancel --session "$SID"
	assert_eq "cancel exit code (stderr: $(cat "$ERR"))" 0 "$RC"
	assert_json .state '"cancelled"'
	# cancel answers only after the evidence: the record is final and nothing runs, right now
	no_process "sleep 30.$m"
	mgr records --session "$SID"
	assert_json '[.records[].state]' '["cancelled"]'
	wait_bg_execs_allow_fail
	assert_lt "ms until the call ended" $(($(now_ms) - t0)) 5000
}
t manager_cancel test_manager_cancel

# Delete removes the worktree after the sandbox is gone, and keeps the branch (the patch survives).
test_manager_delete() {
	local base
	mgr_repo && mgr_start && mgr_session
	mgr exec --session "$SID" -- 'echo fix >> README.md && git add README.md && git -c user.name=a -c user.email=a@b commit -qm fix && git log --oneline | wc -l'
	assert_eq "commit in the sandbox" "2" "$(cat "$OUT")"
	mgr session delete --session "$SID"
	assert_eq "delete exit code" 0 "$RC"
	[ -e "$WT" ] && bad "the worktree is still there"
	base=$(dirname "$(dirname "$WT")")/repositories
	# the base clone is the identity's: its user reaches it in the manager's namespace (as_in_manager_ns)
	as_in_manager_ns git -c safe.directory='*' -C "$base"/* log --oneline "sandbox/$SID" >"$TD/log" 2>&1 ||
		bad "branch gone: $(cat "$TD/log")"
	assert_eq "the patch on the kept branch" 2 "$(wc -l <"$TD/log")"
	mgr exec --session "$SID" -- true
	assert_eq "a call on a deleted session" 125 "$RC"
}
t manager_delete test_manager_delete

# Delete is refused while a command runs: the workspace stays until the sandbox is proven gone.
test_manager_delete_while_running() {
	local m i
	m=$(unique_marker)
	mgr_repo && mgr_start && mgr_session
	mgr_bg_exec d "sleep 3.$m"
	for i in $(seq 1 50); do pgrep -f "^sleep 3.$m" >/dev/null && break; sleep 0.1; done
	mgr session delete --session "$SID"
	assert_eq "delete while running" 125 "$RC"
	assert_match "its message" "running" "$(cat "$ERR")"
	[ -d "$WT" ] || bad "the worktree went while a command ran"
	wait_bg_execs
	mgr session delete --session "$SID"
	assert_eq "delete once it is done" 0 "$RC"
	[ -e "$WT" ] && bad "the worktree is still there"
	return 0
}
t manager_delete_while_running test_manager_delete_while_running

# The records' volume refuses to grow (RLIMIT_FSIZE stands in for a full disk): the manager answers every
# call, `uncertain` when its final record cannot be written, and is still serving; before, SIGXFSZ killed
# it mid-answer. No disk reserve (rule N4's cases test that): a file size limit below it refuses the
# start (manager_disk_reserve_fsize).
test_manager_file_size_limit() {
	local i answered=0 uncertain=0
	mgr_repo
	ulimit -f 600
	mgr_start --disk-reserve 0 && mgr_session
	for i in $(seq 1 8); do
		mgr exec --session "$SID" -- 'head -c 300000 /dev/zero | tr "\0" a'
		case $RC in
		0) answered=$((answered + 1)) ;;
		125)
			assert_match "the answer" "could not be recorded|records" "$(cat "$ERR")"
			uncertain=$((uncertain + 1))
			;;
		*) bad "call $i: exit $RC: $(head -c 300 "$ERR")" ;;
		esac
		grep -q "closed the connection without answering" "$ERR" && bad "call $i: the manager died mid-answer"
	done
	kill -0 "$MGR_PID" 2>/dev/null || bad "the manager did not survive the file size limit"
	assert_ge "calls answered ok before the limit" "$answered" 1
	assert_ge "calls answered uncertain at the limit" "$uncertain" 1
}
t manager_file_size_limit test_manager_file_size_limit
