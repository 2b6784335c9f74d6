# shellcheck shell=bash
# A clean stop (issue 14). The break this guards: SIGTERM killed `serve` (exit 143) and left every
# sandbox running, its agent deaf to SIGTERM, until the next start. Now SIGTERM or SIGINT removes the
# socket, refuses new and queued calls (recorded refused: they never ran), gives the running calls
# stop-grace-seconds, cancels what still runs with evidence (the path of `sandbox-manager cancel`),
# retires every sandbox with evidence and exits 0 (1 when an end is not proven); a second signal
# ends the grace. Each test signals only the manager it started ($MGR_PID) and reaps it.

# mgr_alive: $MGR_PID runs (a zombie, not reaped yet, does not count).
mgr_alive() {
	local st
	st=$(sed 's/^.*) //' "/proc/$MGR_PID/stat" 2>/dev/null | cut -d' ' -f1)
	[ -n "$st" ] && [ "$st" != Z ]
}

# mgr_signal SIG: sends SIG to the manager and notes when (STOP_T0).
mgr_signal() {
	STOP_T0=$(now_ms)
	kill "-$1" "$MGR_PID" || bad "cannot signal the manager $MGR_PID"
}

# mgr_wait_exit LIMIT_S: waits up to LIMIT_S seconds for the manager to exit and reaps it. Sets
# STOP_RC (its exit code, or "running") and STOP_MS (since the last mgr_signal).
mgr_wait_exit() {
	for _ in $(seq 1 $(($1 * 10))); do
		mgr_alive || break
		sleep 0.1
	done
	STOP_MS=$(($(now_ms) - STOP_T0))
	if mgr_alive; then
		STOP_RC=running
		bad "the manager still runs $1 s after the signal: $(tail -n 5 "$TD/manager.log")"
		return
	fi
	wait "$MGR_PID"
	STOP_RC=$?
	MGR_PID= # reaped: mgr_cleanup must not signal a pid that may be another process's now
}

# sandbox_pids: the pids of this test's sandboxes (their agents' command lines name the state dir).
sandbox_pids() { pgrep -f -- "--state-dir $MSTATE/sandboxes/" | tr '\n' ' ' | sed 's/ $//'; }

# wait_running PATTERN: until a process matching PATTERN runs (5 s at most).
wait_running() {
	for _ in $(seq 1 50); do
		pgrep -f -- "$1" >/dev/null && return 0
		sleep 0.1
	done
	bad "no process matching '$1' started"
}

# An idle manager with a live sandbox: exit 0 at once, the sandbox's processes gone (the init whose
# pid the runtime id names, and every agent process), the socket gone, the records intact; a
# restart finds nothing to settle and serves the session again.
test_manager_stop_idle() {
	local rid init pids p
	mgr_repo && mgr_start && mgr_session || return
	mgr exec --session "$SID" -- 'echo before'
	assert_eq "a call before the stop (stderr: $(head -c 300 "$ERR"))" before "$(cat "$OUT")"
	mgr session show --session "$SID"
	rid=$(jr .sandbox.runtime_id)
	init=${rid#process:}
	init=${init%%:*}
	[ -d "/proc/$init" ] || bad "the sandbox's init (runtime id $rid) does not run before the stop"
	pids=$(sandbox_pids)
	[ -n "$pids" ] || bad "no sandbox process runs before the stop"

	mgr_signal TERM
	mgr_wait_exit 10
	assert_eq "exit code of the stopped manager" 0 "$STOP_RC"
	assert_lt "ms from SIGTERM to the exit" "$STOP_MS" 5000
	for p in $init $pids; do
		[ -e "/proc/$p" ] && bad "sandbox process $p still runs after the stop: $(tr '\0' ' ' <"/proc/$p/cmdline")"
	done
	assert_eq "sandbox processes of this state dir" "" "$(sandbox_pids)"
	[ -e "$MSOCK" ] && bad "the control socket $MSOCK is still there"
	grep -q "retiring sandbox $rid (the manager stopped (SIGTERM))" "$TD/manager.log" ||
		bad "the log does not say the sandbox was retired: $(tail -n 5 "$TD/manager.log")"
	grep -q "stopped: every call settled, every sandbox's end proven" "$TD/manager.log" ||
		bad "the log does not say the stop proved everything: $(tail -n 3 "$TD/manager.log")"
	mgr exec --session "$SID" -- true
	assert_eq "a call while no manager runs" 125 "$RC"
	assert_match "its message" "not reachable" "$(cat "$ERR")"

	mgr_start || return
	grep -q "the previous run's sandbox" "$TD/manager.log" &&
		bad "the restart found a sandbox left running: $(grep "previous run's sandbox" "$TD/manager.log")"
	mgr records --session "$SID"
	assert_json '[.records[] | [.state, .result.stdout]]' '[["exited","before\n"]]'
	mgr session show --session "$SID"
	assert_json '[.state, .sandbox]' '["active",null]'
	mgr exec --session "$SID" -- 'echo after'
	assert_eq "a call after the restart: exit code (stderr: $(head -c 300 "$ERR"))" 0 "$RC"
	assert_eq "a call after the restart: output" after "$(cat "$OUT")"
	mgr session show --session "$SID"
	assert_json .generation 2
}
t manager_stop_idle test_manager_stop_idle

# A call that ends within the grace ends as it would have: exit 0, its output, recorded exited; the
# manager exits 0 after it, not before.
test_manager_stop_grace() {
	local m rc
	m=$(unique_marker)
	mgr_repo && mgr_start --stop-grace-seconds 10 && mgr_session || return
	mgr exec --session "$SID" -- true
	mgr_bg_exec g "sleep 2.$m; echo done"
	wait_running "^sleep 2.$m"
	mgr_signal TERM
	mgr_wait_exit 15
	assert_eq "exit code of the stopped manager" 0 "$STOP_RC"
	assert_ge "ms from SIGTERM to the exit (it waited for the call)" "$STOP_MS" 1000
	assert_lt "ms from SIGTERM to the exit" "$STOP_MS" 8000
	wait "${BG_PIDS[0]}"
	rc=$?
	BG_PIDS=()
	assert_eq "the call's exit code" 0 "$rc"
	assert_eq "the call's output" "done" "$(cat "$TD/bg-g.out")"
	assert_eq "sandbox processes after the stop" "" "$(sandbox_pids)"
	mgr_start || return
	mgr records --session "$SID"
	assert_json '[.records[] | [.state, .result.exit_code]]' '[["exited",0],["exited",0]]'
}
t manager_stop_grace test_manager_stop_grace

# A call still running when the grace is over is cancelled as `sandbox-manager cancel` would: the
# client hears the manager stopped (exit 125), the record says cancelled (its sandbox's end proven,
# so the session stays active), nothing of it runs, and the manager exits 0 within seconds.
test_manager_stop_cancel() {
	local m out
	m=$(unique_marker)
	mgr_repo && mgr_start --stop-grace-seconds 1 && mgr_session || return
	mgr_bg_exec c "sleep 60.$m"
	wait_running "^sleep 60.$m"
	mgr_signal TERM
	mgr_wait_exit 15
	assert_eq "exit code of the stopped manager" 0 "$STOP_RC"
	assert_lt "ms from SIGTERM to the exit" "$STOP_MS" 6000
	wait "${BG_PIDS[0]}"
	assert_eq "the cancelled call's exit code" 125 "$?"
	BG_PIDS=()
	out=$(cat "$TD/bg-c.out")
	assert_match "the cancelled call's message" "outcome is cancelled: the manager stopped \(SIGTERM\) before the call finished" "$out"
	no_process "sleep 60.$m"
	assert_eq "sandbox processes after the stop" "" "$(sandbox_pids)"
	mgr_start || return
	mgr records --session "$SID"
	assert_json '[.records[] | [.state, .reason]]' '[["cancelled","the manager stopped (SIGTERM) before the call finished"]]'
	mgr session show --session "$SID"
	assert_json '[.state, .sandbox]' '["active",null]'
	mgr exec --session "$SID" -- 'echo again'
	assert_eq "the next call: output (stderr: $(head -c 300 "$ERR"))" again "$(cat "$OUT")"
}
t manager_stop_cancel test_manager_stop_cancel

# A second signal ends the grace at once: with 30 s of grace and a call that would run a minute,
# SIGTERM then SIGINT stops the manager within seconds, the call cancelled with evidence.
test_manager_stop_twice() {
	local m
	m=$(unique_marker)
	mgr_repo && mgr_start --stop-grace-seconds 30 && mgr_session || return
	mgr_bg_exec c "sleep 60.$m"
	wait_running "^sleep 60.$m"
	mgr_signal TERM
	sleep 1
	mgr_alive || bad "the manager did not wait for the running call (grace 30 s)"
	kill -INT "$MGR_PID"
	mgr_wait_exit 15
	assert_eq "exit code of the stopped manager" 0 "$STOP_RC"
	assert_lt "ms from the first signal to the exit" "$STOP_MS" 8000
	wait_bg_execs_allow_fail
	assert_match "the cancelled call's message" "cancelled: the manager stopped \(SIGTERM\)" "$(cat "$TD/bg-c.out")"
	grep -q "a second signal ends the grace" "$TD/manager.log" || bad "the log does not say the grace was cut short"
	no_process "sleep 60.$m"
	mgr_start || return
	mgr records --session "$SID"
	assert_json '[.records[].state]' '["cancelled"]'
}
t manager_stop_twice test_manager_stop_twice

# A call waiting for its turn behind a running one when the stop comes never runs: it is answered
# unavailable and recorded refused, its file is never written; the running call finishes in the
# grace. A client that comes after the signal finds no socket: not reachable, nothing recorded.
test_manager_stop_queued() {
	local m rc_a rc_b
	m=$(unique_marker)
	mgr_repo && mgr_start --stop-grace-seconds 10 && mgr_session || return
	mgr exec --session "$SID" -- true
	mgr_bg_exec a "sleep 3.$m; echo a > a-ran; echo A"
	wait_running "^sleep 3.$m"
	mgr_bg_exec b "echo b > b-ran; echo B"
	for _ in $(seq 1 50); do
		mgr session show --session "$SID"
		[ "$(jr .queued)" = 2 ] && break
		sleep 0.1
	done
	assert_eq "calls running or queued before the stop" 2 "$(jr .queued)"
	mgr_signal TERM
	sleep 0.3
	mgr exec --session "$SID" -- 'echo c > c-ran'
	assert_eq "a call after the signal: exit code" 125 "$RC"
	assert_match "a call after the signal: message" "not reachable" "$(cat "$ERR")"
	mgr_wait_exit 15
	assert_eq "exit code of the stopped manager" 0 "$STOP_RC"
	wait "${BG_PIDS[0]}"
	rc_a=$?
	wait "${BG_PIDS[1]}"
	rc_b=$?
	BG_PIDS=()
	assert_eq "the running call: exit code" 0 "$rc_a"
	assert_eq "the running call: output" A "$(cat "$TD/bg-a.out")"
	assert_eq "the queued call: exit code" 125 "$rc_b"
	assert_match "the queued call: message" "unavailable: the manager is stopping: exec [0-9a-f]+ was refused and never ran" \
		"$(cat "$TD/bg-b.out")"
	[ -e "$WT/a-ran" ] || bad "the running call's file is missing: the test cannot tell that the queued one did not run"
	[ -e "$WT/b-ran" ] && bad "the queued call ran: $WT/b-ran exists"
	[ -e "$WT/c-ran" ] && bad "the call after the signal ran: $WT/c-ran exists"
	mgr_start || return
	mgr records --session "$SID"
	# newest first; the one after the signal never reached the manager
	assert_json '[.records[] | [.state, .reason]]' \
		'[["refused","the manager is stopping: the call never ran"],["exited",null],["exited",null]]'
	assert_eq "the refused record's command" "echo b > b-ran; echo B" "$(jr '.records[0].command')"
	assert_json '.records[0].dispatched_ms' null
}
t manager_stop_queued test_manager_stop_queued

# Grace 0 and a file of settings: stop-grace-seconds from the config file, overridden by the flag;
# a bad value is refused at start, naming the key.
test_manager_stop_config() {
	local m
	m=$(unique_marker)
	mgr_repo || return
	echo '{"stop-grace-seconds": 30}' >"$TD/config.json"
	chown "$RUN_USER:" "$TD/config.json"
	mgr_start --config "$TD/config.json" --stop-grace-seconds 0 && mgr_session || return
	mgr_bg_exec c "sleep 60.$m"
	wait_running "^sleep 60.$m"
	mgr_signal TERM
	mgr_wait_exit 15
	assert_eq "exit code of the stopped manager" 0 "$STOP_RC"
	assert_lt "ms from SIGTERM to the exit (grace 0)" "$STOP_MS" 5000
	grep -q "the running ones have 0 s to finish" "$TD/manager.log" || bad "the flag did not override the file"
	wait_bg_execs_allow_fail
	no_process "sleep 60.$m"
	timeout 10 "${AS[@]}" "$MANAGER" serve --state-dir "$MSTATE" --stop-grace-seconds -1 >"$OUT" 2>"$ERR"
	assert_eq "serve with a bad --stop-grace-seconds: exit code (a usage error)" 2 "$?"
	assert_match "its message" "stop-grace-seconds must be a whole number from 0 to 86400, not '-1'" "$(cat "$ERR")"
}
t manager_stop_config test_manager_stop_config

# podman: the same stop retires the containers with podman's evidence; and a runtime that accepts the
# kill and does not kill (tests/podman/kill_swallow.py) leaves the container unproven: the manager
# exits 1 and says so, and the session stays reserved until a restart proves the end.
test_manager_stop_podman() {
	need_podman
	local id
	mgr_repo && pod_mgr_start && mgr_session || return
	mgr exec --session "$SID" -- 'echo up'
	assert_eq "a call before the stop (stderr: $(head -c 300 "$ERR"))" up "$(cat "$OUT")"
	id=$(pod_sandbox_id)
	mgr_signal TERM
	mgr_wait_exit 20
	assert_eq "exit code of the stopped manager" 0 "$STOP_RC"
	case $(podman_cli inspect -f '{{.State.Status}}' "$id" 2>&1) in
	exited | *"no such"*) ;;
	*) bad "container $id is not exited nor deleted after the stop" ;;
	esac
	[ -e "$MSOCK" ] && bad "the control socket is still there"
	pod_mgr_start || return
	mgr session show --session "$SID"
	assert_json '[.state, .sandbox]' '["active",null]'
}
t manager_stop_podman test_manager_stop_podman

test_manager_stop_podman_unproven() {
	need_podman
	local id
	POD_SOCK=$TD/proxy.sock
	python3 "$POD_REPO_ROOT/tests/podman/kill_swallow.py" "$POD_SOCK" "$PODMAN_SOCK" "$TD/swallow" \
		>"$TD/proxy.log" 2>&1 &
	# shellcheck disable=SC2034 # pod_cleanup (manager_podman.sh) ends it
	PROXY_PID=$!
	for _ in $(seq 1 50); do [ -S "$POD_SOCK" ] && break; sleep 0.1; done
	mgr_repo && pod_mgr_start && mgr_session || return
	mgr exec --session "$SID" -- true
	id=$(pod_sandbox_id)
	touch "$TD/swallow"
	mgr_signal TERM
	mgr_wait_exit 40
	assert_eq "exit code of a stop that could not prove a sandbox gone" 1 "$STOP_RC"
	grep -q "stopped with something not proven: 0 request(s) unanswered, 1 sandbox(es) not retired, 1 sandbox end(s) not proven" \
		"$TD/manager.log" || bad "the log does not say what is not proven: $(tail -n 3 "$TD/manager.log")"
	assert_eq "the container really still runs" running "$(podman_cli inspect -f '{{.State.Status}}' "$id" 2>&1)"
	podman_cli rm -f "$id" >/dev/null
	rm -f "$TD/swallow"
	pod_mgr_start || return
	mgr session show --session "$SID"
	assert_json '[.state, .sandbox]' '["active",null]'
}
t manager_stop_podman_unproven test_manager_stop_podman_unproven

# With `--sandbox-start create`, a SIGTERM the moment a create answered: the stop waits for the start
# under way (early_start.c counts it as a request), then retires its sandbox with evidence; exit 0,
# no process of it left.
test_manager_stop_early_start() {
	mgr_repo && mgr_start --sandbox-start create && mgr_session || return
	mgr_signal TERM
	mgr_wait_exit 20
	assert_eq "exit code of the stopped manager" 0 "$STOP_RC"
	assert_eq "sandbox processes of this state dir" "" "$(sandbox_pids)"
	grep -q "stopped: every call settled, every sandbox's end proven" "$TD/manager.log" ||
		bad "the log does not say the stop proved everything: $(tail -n 3 "$TD/manager.log")"
}
t manager_stop_early_start test_manager_stop_early_start
