# shellcheck shell=bash
# The podman backend when its container is ended from outside (issue 14, part 2): killed or removed
# while the session is idle, and killed while a call runs. What the user sees, and that no call is
# lost, recorded twice or run twice. Uses manager_podman.sh's helpers (pod_mgr_start, pod_sandbox_id):
# this file's name sorts after it in every locale, so run.sh has sourced it first.

# pod_wait_gone ID: until podman says the container exited or no longer exists (at most 10 s).
pod_wait_gone() {
	for _ in $(seq 1 100); do
		case $(podman_cli inspect -f '{{.State.Status}}' "$1" 2>&1) in
		exited | *"no such"*) return 0 ;;
		esac
		sleep 0.1
	done
	bad "container $1 did not stop: $(podman_cli inspect -f '{{.State.Status}}' "$1" 2>&1)"
}

# pod_fault_idle HOW: the session's container is ended from outside between two calls (HOW: kill, or
# rm -f). The next call notices before sending anything, proves the old container gone from podman's
# word, and runs once in a new container on the same workspace, generation 2; no call is uncertain.
pod_fault_idle() {
	local m id
	m=$(unique_marker)
	mgr_repo && pod_mgr_start && mgr_session
	mgr exec --session "$SID" -- 'echo kept > kept.txt'
	assert_eq "the first call (stderr: $(head -c 300 "$ERR"))" 0 "$RC"
	id=$(pod_sandbox_id)
	if [ "$1" = kill ]; then
		podman_cli kill "$id" >/dev/null || bad "podman kill $id failed"
	else
		podman_cli rm -f -t 0 "$id" >/dev/null || bad "podman rm -f $id failed"
	fi
	pod_wait_gone "$id"
	mgr exec --session "$SID" -- "echo run >> runs.$m; cat kept.txt"
	assert_eq "the next call after podman $1 (stderr: $(head -c 300 "$ERR"))" 0 "$RC"
	assert_eq "its output" kept "$(cat "$OUT")"
	assert_eq "it ran once" 1 "$(wc -l <"$WT/runs.$m")"
	mgr session show --session "$SID"
	assert_json '[.state, .generation, .sandbox.state]' '["active",2,"running"]'
	assert_ne "a new container" "podman:$id" "$(jr .sandbox.runtime_id)"
	mgr records --session "$SID"
	assert_json '[.records[].state]' '["exited","exited"]'
	assert_json '[.records[].generation]' '[2,1]'
	grep -q "does not answer.*replacing it" "$TD/manager.log" || bad "the manager did not log the replacement"
}
test_podman_killed_idle() { need_podman && pod_fault_idle kill; }
t podman_killed_idle test_podman_killed_idle
test_podman_removed_idle() { need_podman && pod_fault_idle rm; }
t podman_removed_idle test_podman_removed_idle

# podman kill while a call runs: the call answers uncertain (exit 125) once podman says the container
# exited, and says so: the container ended during the call, in podman's words (it said "the agent
# could not say how the exec ended: Connection timed out"); nothing says the end is unproven; the
# session stays active (not reserved), the command is not run again, and the next call gets
# generation 2.
test_podman_killed_midcall() {
	need_podman
	local m id t0 reason
	m=$(unique_marker)
	mgr_repo && pod_mgr_start && mgr_session
	mgr exec --session "$SID" -- true
	id=$(pod_sandbox_id)
	mgr_bg_exec k "echo run >> runs.$m; sleep 30.$m"
	for _ in $(seq 1 100); do pgrep -f "^sleep 30.$m" >/dev/null && break; sleep 0.1; done
	t0=$(now_ms)
	podman_cli kill "$id" >/dev/null || bad "podman kill $id failed"
	wait_bg_execs_allow_fail
	assert_lt "ms from the kill to the answer" $(($(now_ms) - t0)) 15000
	assert_match "the call's answer" "uncertain: the sandbox ended during the call: container exited for Id $id \(podman inspect: State.Status exited" "$(cat "$TD/bg-k.out")"
	grep -q "timed out" "$TD/bg-k.out" && bad "the answer says timed out: $(cat "$TD/bg-k.out")"
	case $(podman_cli inspect -f '{{.State.Status}}' "$id" 2>&1) in
	exited | *"no such"*) ;;
	*) bad "the killed container $id is neither exited nor deleted when the call answered" ;;
	esac
	mgr records --session "$SID"
	assert_json '[.records[].state]' '["uncertain","exited"]'
	assert_json '.records[0] | [.generation, (.reason | test("not proven"))]' '[1,false]'
	reason=$(jr '.records[0].reason')
	assert_match "the record's reason" "^the sandbox ended during the call: container exited for Id $id " "$reason"
	mgr session show --session "$SID"
	assert_json '[.state, .sandbox]' '["active",null]'
	mgr exec --session "$SID" -- "cat runs.$m"
	assert_eq "the next call (stderr: $(head -c 300 "$ERR"))" 0 "$RC"
	assert_eq "the killed call ran once, and not again" run "$(cat "$OUT")"
	mgr session show --session "$SID"
	assert_json .generation 2
	no_process "sleep 30.$m"
	echo "    (the killed call's record: $reason)"
}
t podman_killed_midcall test_podman_killed_midcall
