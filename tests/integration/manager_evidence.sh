# shellcheck shell=bash
# The evidence a retired sandbox is recorded gone with is its runtime's own word (backend.h
# evidence()), never a fixed text: for the process backend the reaped init of the sandbox's PID
# namespace, with its pid; after a manager restart, the init whose pidfd turned readable (the old
# manager's child, reaped elsewhere). The podman case is podman_evidence (manager_podman.sh).

# the evidence column of the session's sandbox row, and its state, as "STATE|EVIDENCE"
sandbox_row() {
	as_user sqlite3 -readonly "$MSTATE/records.db" "SELECT state || '|' || coalesce(evidence, '') FROM sandboxes WHERE session = '$SID'"
}

# until the session's sandbox row is gone (at most 15 s): the idle evictor retires it
sandbox_gone_wait() {
	local i
	for i in $(seq 1 150); do
		case $(sandbox_row) in gone\|*) return 0 ;; esac
		sleep 0.1
	done
	bad "the sandbox of session $SID was not retired: $(sandbox_row)"
	return 1
}

test_manager_evidence() {
	local rid pid
	mgr_repo && mgr_start --idle-seconds 1 && mgr_session || return
	mgr exec --session "$SID" -- true
	assert_eq "first call: exit code (stderr: $(head -c 300 "$ERR"))" 0 "$RC"
	mgr session show --session "$SID"
	rid=$(jr .sandbox.runtime_id)
	pid=$(printf '%s' "$rid" | sed -n 's/^process:\([0-9]*\):[0-9]*$/\1/p')
	[ -n "$pid" ] || { bad "no process runtime id: '$rid'"; return; }
	# idle: retired with the evidence of this very init
	sandbox_gone_wait || return
	assert_eq "the record of the retired sandbox" "gone|reaped init of the sandbox's PID namespace (pid $pid)" \
		"$(sandbox_row)"
	grep -qF "sandbox $rid is gone: reaped init of the sandbox's PID namespace (pid $pid)" "$TD/manager.log" ||
		bad "the log does not say the evidence: $(grep -F "$rid" "$TD/manager.log" | tail -n 3)"
	mgr session show --session "$SID"
	assert_json .sandbox null

	# a manager killed with its sandbox running: the restart stops it, and the evidence says how
	mgr exec --session "$SID" -- true
	assert_eq "second call: exit code (stderr: $(head -c 300 "$ERR"))" 0 "$RC"
	mgr session show --session "$SID"
	rid=$(jr .sandbox.runtime_id)
	pid=$(printf '%s' "$rid" | sed -n 's/^process:\([0-9]*\):[0-9]*$/\1/p')
	[ -n "$pid" ] || { bad "no process runtime id: '$rid'"; return; }
	kill -KILL "$MGR_PID"
	wait "$MGR_PID" 2>/dev/null
	kill -0 "$pid" 2>/dev/null || bad "the sandbox's init $pid did not outlive the manager"
	mgr_start --idle-seconds 1 || return
	assert_eq "the record after the restart" \
		"gone|after a manager restart: init of the sandbox's PID namespace (pid $pid) exited: its pidfd turned readable, and it was reaped elsewhere" \
		"$(sandbox_row)"
	grep -qF "the previous run's sandbox $rid is gone: after a manager restart: init of the sandbox's PID namespace (pid $pid) exited" \
		"$TD/manager.log" || bad "the log does not say the restart's evidence: $(grep -F "$rid" "$TD/manager.log" | tail -n 3)"
	# gone, or a zombie its new parent has yet to reap: either way it runs no more
	case $(sed -n 's/^.*) \([A-Z]\).*$/\1/p' "/proc/$pid/stat" 2>/dev/null) in
	"" | Z | X) ;;
	*) bad "the sandbox's init $pid still runs" ;;
	esac
	return 0
}
t manager_evidence test_manager_evidence
