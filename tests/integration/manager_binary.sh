# shellcheck shell=bash
# Binary output end to end (issue 14): a NUL, bytes that are not UTF-8 and control bytes travel from
# the agent through its journal, the wire, the records and the CLI with their status. The break this
# guards: a NUL in a command's output made the agent's journal refuse the result (\u0000 without
# JSON_ALLOW_NUL), so the call stalled 5 s, was recorded uncertain and the sandbox was retired.
# The exec result's one rule (docs/operations.md): a stream holding a byte that is not UTF-8, or a
# NUL, is escaped (\xNN, backslashes doubled); `exec` without --json prints the original bytes.

# binary_checks: the checks, on the session $SID of a running manager (either backend).
binary_checks() {
	local gen0 sb0 t0 ms
	# the sandbox up first, so that what is timed below is the call, not a start
	mgr exec --session "$SID" -- true
	assert_eq "warm-up call: exit code (stderr: $(head -c 300 "$ERR"))" 0 "$RC"
	mgr session show --session "$SID"
	gen0=$(jr .generation)
	sb0=$(jr .sandbox.runtime_id)

	t0=$(now_ms)
	mgr exec --session "$SID" -- 'printf "a\000b"'
	ms=$(($(now_ms) - t0))
	assert_eq "NUL: exit code (stderr: $(head -c 300 "$ERR"))" 0 "$RC"
	printf 'a\000b' >"$TD/want-nul"
	cmp -s "$TD/want-nul" "$OUT" || bad "NUL: the CLI printed $(od -An -c "$OUT" | head -c 200), not a\\0b"
	assert_lt "NUL: milliseconds the call took" "$ms" 2500

	# --json: the result as the rule shapes it
	mgr exec --session "$SID" --json -- 'printf "a\000b\\\\\377"; printf "x\000" >&2'
	assert_eq "NUL, --json: exit code (stderr: $(head -c 300 "$ERR"))" 0 "$RC"
	assert_json '[.status, .exit_code, .stdout, .stdout_bytes, .stdout_escaped]' '["exited",0,"a\\x00b\\\\\\xff",5,true]'
	assert_json '[.stderr, .stderr_bytes, .stderr_escaped]' '["x\\x00",2,true]'

	# 100 random bytes, kept by the command in the worktree: the CLI's stdout and stderr are that file
	mgr exec --session "$SID" -- 'head -c 100 /dev/urandom > rand.bin && cat rand.bin && cat rand.bin >&2'
	assert_eq "random bytes: exit code (stderr: $(head -c 300 "$ERR" | od -An -c | head -c 200))" 0 "$RC"
	assert_eq "random bytes: the file's size" 100 "$(stat -c %s "$WT/rand.bin" 2>/dev/null)"
	cmp -s "$WT/rand.bin" "$OUT" || bad "random bytes: the CLI's stdout differs from the file ($(cmp "$WT/rand.bin" "$OUT" 2>&1))"
	cmp -s "$WT/rand.bin" "$ERR" || bad "random bytes: the CLI's stderr differs from the file ($(cmp "$WT/rand.bin" "$ERR" 2>&1))"

	# control bytes and a backslash in text that is otherwise UTF-8 (JSON escapes, not the rule's)
	mgr exec --session "$SID" -- 'printf "\001\033[1m\177\\\\x41 caf\303\251\n"'
	assert_eq "control bytes: exit code (stderr: $(head -c 300 "$ERR"))" 0 "$RC"
	printf '\001\033[1m\177\\x41 caf\303\251\n' >"$TD/want-ctl"
	cmp -s "$TD/want-ctl" "$OUT" || bad "control bytes: the CLI printed $(od -An -c "$OUT" | head -c 300)"

	# every call recorded exited (none uncertain), and the sandbox never retired
	mgr records --session "$SID"
	assert_eq "records: exit code (stderr: $(head -c 300 "$ERR"))" 0 "$RC"
	assert_json '[.records[].state] | unique' '["exited"]'
	assert_json '.records | length' 5
	assert_json '[.records[] | select(.result.stdout_bytes == 100) | .result.stdout_escaped]' '[true]'
	mgr session show --session "$SID"
	assert_eq "the session's generation (the sandbox was not retired)" "$gen0" "$(jr .generation)"
	assert_eq "the session's sandbox" "$sb0" "$(jr .sandbox.runtime_id)"
}

test_manager_binary() {
	mgr_repo && mgr_start && mgr_session && binary_checks
}
t manager_binary test_manager_binary

test_manager_binary_podman() {
	need_podman
	mgr_repo && pod_mgr_start && mgr_session && binary_checks
}
t manager_binary_podman test_manager_binary_podman
