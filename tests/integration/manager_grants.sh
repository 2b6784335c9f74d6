# shellcheck shell=bash
# Grants and authority snapshots with the file broker: what is granted is visible through KUBECONFIG,
# nothing else is; a change retires the sandbox (a new generation); a revocation stops the running call.

grants_start() {
	printf 'staging-credential\n' >"$TD/staging.kubeconfig"
	printf 'prod-credential\n' >"$TD/prod.kubeconfig"
	mgr_repo && mgr_start --resource "kubernetes:staging=file:$TD/staging.kubeconfig" \
		--resource "kubernetes:prod=file:$TD/prod.kubeconfig"
}

test_manager_grants() {
	grants_start && mgr_session --grant kubernetes:staging=read
	mgr exec --session "$SID" -- 'cat "$KUBECONFIG"; ls "$(dirname "$KUBECONFIG")"; cat '"$TD/prod.kubeconfig"' 2>/dev/null || echo "no host path"; touch "$KUBECONFIG" 2>/dev/null || echo read-only'
	assert_eq "exit code (stderr: $(head -c 300 "$ERR"))" 0 "$RC"
	assert_lines "$(cat "$OUT")" staging-credential "kubernetes-staging.kubeconfig" "no host path" read-only
	mgr session show --session "$SID"
	assert_json .grants '{"kubernetes:staging":"read"}'
	assert_json .generation 1
	mgr grant --session "$SID" --set kubernetes:prod=write
	assert_eq "grant exit code" 0 "$RC"
	mgr exec --session "$SID" -- 'echo "$KUBECONFIG" | tr ":" "\n" | xargs -n1 basename'
	assert_lines "$(cat "$OUT")" "kubernetes-prod.kubeconfig" "kubernetes-staging.kubeconfig"
	mgr session show --session "$SID"
	assert_json .generation 2
	# each exec records the authority it ran with
	mgr records --session "$SID"
	assert_json '[.records[].authority]' '[{"kubernetes:prod":"write","kubernetes:staging":"read"},{"kubernetes:staging":"read"}]' # newest first
	mgr grant --session "$SID" --set kubernetes:nope=read
	assert_eq "an undeclared resource" 125 "$RC"
	assert_match "its message" "not declared" "$(cat "$ERR")"
	mgr grant --session "$SID" --set kubernetes:prod=admin
	assert_eq "an unknown access" 125 "$RC"
	mgr session create --identity alice --repo "$REPO" --grant kubernetes:nope=read
	assert_eq "create with an undeclared grant" 125 "$RC"
}
t manager_grants test_manager_grants

test_manager_revoke_running() {
	local m i t0
	m=$(unique_marker)
	grants_start && mgr_session --grant kubernetes:staging=read
	mgr_bg_exec r "sleep 30.$m"
	for i in $(seq 1 50); do pgrep -f "^sleep 30.$m" >/dev/null && break; sleep 0.1; done
	t0=$(now_ms)
	mgr grant --session "$SID" --revoke kubernetes:staging
	assert_eq "revoke exit code (stderr: $(head -c 300 "$ERR"))" 0 "$RC"
	wait_bg_execs_allow_fail
	assert_lt "ms until the running call was stopped" $(($(now_ms) - t0)) 8000
	no_process "sleep 30.$m"
	mgr records --session "$SID"
	assert_json '[.records[].state]' '["cancelled"]'
	assert_match "the reason" "revoked" "$(jr '.records[0].reason')"
	mgr exec --session "$SID" -- 'echo "[${KUBECONFIG:-none}]"'
	assert_eq "after the revocation" "[none]" "$(cat "$OUT")"
}
t manager_revoke_running test_manager_revoke_running
