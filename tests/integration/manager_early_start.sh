# shellcheck shell=bash
# `serve --sandbox-start create` (manager/core/early_start.c): a session's sandbox started, and its
# agent connected, at the session's create, under the session's turn, so that its first call finds
# it up. What it must keep: the first call runs on that sandbox (one start, one generation), never
# before it is up; a start that cannot be made (the identity's bound) takes nothing from another
# session and fails nothing (the first call starts one); a delete or a stop right after the create
# waits for the start and proves the sandbox's end.

# early_wait SESSION: until the session's sandbox is up, recorded running (10 s at most); its runtime id
# in RID.
early_wait() {
	local i
	for i in $(seq 1 100); do
		mgr session show --session "$1"
		RID=$(jr .sandbox.runtime_id)
		[ "$(jr .sandbox.state)" = running ] && return 0
		sleep 0.1
	done
	bad "the sandbox of session $1 did not start at its create: $(tail -n 3 "$TD/manager.log")"
	return 1
}

# The first call runs on the sandbox started at the create (its runtime id and generation 1), over
# the connection made then: with the agent's socket removed after the start, a new connection is
# impossible, and the call still runs (without the connection made ahead it fails: M43).
test_manager_early_start_first_call() {
	local rid sock
	mgr_repo && mgr_start --sandbox-start create && mgr_session || return
	early_wait "$SID" || return
	rid=$RID
	assert_json '[.generation, .sandbox.state]' '[1,"running"]'
	# the start's log line comes after its connection is made (early_start.c early_thread)
	for _ in $(seq 1 100); do
		grep -q "session $SID: its sandbox started at its create" "$TD/manager.log" && break
		sleep 0.1
	done
	grep -q "session $SID: its sandbox started at its create" "$TD/manager.log" ||
		bad "the log does not say the sandbox started at the create: $(tail -n 3 "$TD/manager.log")"
	sock=$(ls -d "$MSTATE"/sandboxes/"$SID".g1/sock/agent.sock 2>/dev/null)
	[ -n "$sock" ] || { bad "no agent socket for session $SID, generation 1"; return 1; }
	as_in_manager_ns rm -f "$sock" || { bad "cannot remove the agent's socket $sock"; return 1; }
	mgr exec --session "$SID" --json -- 'pwd -P'
	assert_eq "the first call: exit code (stderr: $(head -c 300 "$ERR"))" 0 "$RC"
	assert_json '[.status, .stdout, .receipt.verified]' "[\"exited\",$(json_str "$WT
"),true]"
	mgr session show --session "$SID"
	assert_json '.generation' 1
	assert_json '.sandbox.runtime_id' "$(json_str "$rid")"
	assert_eq "sandbox starts of the session" 1 "$(grep -c "session $SID: sandbox .* up, generation" "$TD/manager.log")"
}
t manager_early_start_first_call test_manager_early_start_first_call

# A first call sent the moment the create answers waits for the start under way (the create took the
# session's turn before it answered) and runs on that sandbox: one start, generation 1.
test_manager_early_start_back_to_back() {
	local i
	mgr_repo && mgr_start --sandbox-start create || return
	for i in 1 2 3; do
		mgr_session || return
		mgr exec --session "$SID" -- 'echo first'
		assert_eq "session $i: the first call at once (stderr: $(head -c 300 "$ERR"))" first "$(cat "$OUT")"
		mgr session show --session "$SID"
		assert_json '.generation' 1
		assert_eq "session $i: sandbox starts" 1 "$(grep -c "session $SID: sandbox .* up, generation" "$TD/manager.log")"
		grep -q "session $SID: its sandbox started at its create" "$TD/manager.log" ||
			bad "session $i: the first call did not run on the sandbox started at the create"
	done
}
t manager_early_start_back_to_back test_manager_early_start_back_to_back

# At the identity's bound a start at create retires nothing (a call would retire the least recently
# used idle sandbox: manager_sandboxes_per_identity): the other session's sandbox stays, this
# session has none, the log says why; its first call then starts one as any call does, and bob's
# sessions are not held by alice's bound (without the check: M44).
test_manager_early_start_bound() {
	local a1 a2 rid1
	mgr_repo && mgr_start --sandbox-start create --sandboxes-per-identity 1 || return
	mgr_session && a1=$SID
	early_wait "$a1" || return
	rid1=$RID
	mgr_session && a2=$SID
	for _ in $(seq 1 100); do
		grep -q "session $a2: its sandbox did not start at its create" "$TD/manager.log" && break
		sleep 0.1
	done
	assert_match "the log says why" "session $a2: its sandbox did not start at its create \\(identity alice has 1 sandboxes on this manager \\(its bound, sandboxes-per-identity\\)\\); its first call starts one" \
		"$(grep "session $a2: its sandbox did not" "$TD/manager.log")"
	mgr session show --session "$a1"
	assert_json '.sandbox.runtime_id' "$(json_str "$rid1")"
	mgr session show --session "$a2"
	assert_json '[.sandbox, .generation]' '[null,0]'
	mgr session create --identity bob --repo "$REPO"
	assert_eq "bob's session" 0 "$RC"
	early_wait "$(jr .session)"
	mgr exec --session "$a2" -- 'echo a2 ran'
	assert_eq "alice's second session's first call (stderr: $(head -c 300 "$ERR"))" "a2 ran" "$(cat "$OUT")"
	mgr session show --session "$a1"
	assert_json '.sandbox' null
}
t manager_early_start_bound test_manager_early_start_bound

# A delete sent the moment the create answers waits for the start, then retires its sandbox with
# evidence: no process of it is left, the session is deleted.
test_manager_early_start_delete() {
	mgr_repo && mgr_start --sandbox-start create && mgr_session || return
	mgr session delete --session "$SID"
	assert_eq "the delete (stderr: $(head -c 300 "$ERR"))" 0 "$RC"
	assert_eq "processes of the session's sandbox" "" "$(pgrep -f -- "--state-dir $MSTATE/sandboxes/$SID" | tr '\n' ' ')"
	mgr exec --session "$SID" -- true
	assert_eq "a call on the deleted session" 125 "$RC"
	assert_match "its message" "no session '$SID'" "$(cat "$ERR")"
	[ -e "$WT" ] && bad "the deleted session's worktree $WT is still there"
	return 0
}
t manager_early_start_delete test_manager_early_start_delete

# A grant changed between the create and the first call (the sandbox already up with the create's
# snapshot) retires that sandbox, as for any live one: the first call runs on generation 2 with the
# new grants, and its record names them; a revocation the same way, never a credential left behind.
test_manager_early_start_grant_changed() {
	printf 'staging-credential\n' >"$TD/staging.kubeconfig"
	printf 'prod-credential\n' >"$TD/prod.kubeconfig"
	mgr_repo && mgr_start --sandbox-start create --resource "kubernetes:staging=file:$TD/staging.kubeconfig" \
		--resource "kubernetes:prod=file:$TD/prod.kubeconfig" || return
	mgr_session --grant kubernetes:staging=read
	early_wait "$SID" || return
	mgr grant --session "$SID" --set kubernetes:prod=read
	assert_eq "grant exit code" 0 "$RC"
	mgr grant --session "$SID" --revoke kubernetes:staging
	assert_eq "revoke exit code" 0 "$RC"
	mgr exec --session "$SID" -- 'echo "$KUBECONFIG" | tr ":" "\n" | xargs -n1 basename; cat "$KUBECONFIG"'
	assert_eq "the first call (stderr: $(head -c 300 "$ERR"))" 0 "$RC"
	assert_lines "$(cat "$OUT")" "kubernetes-prod.kubeconfig" prod-credential
	mgr session show --session "$SID"
	assert_json .generation 2
	mgr records --session "$SID"
	assert_json '[.records[].authority]' '[{"kubernetes:prod":"read"}]'
}
t manager_early_start_grant_changed test_manager_early_start_grant_changed
