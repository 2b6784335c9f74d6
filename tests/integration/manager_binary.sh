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

# Rule N6 through the manager: a command prints ESC, a raw 0x9b, U+009B (CSI), U+009D (OSC), DEL and
# U+202E; `exec --json` and `records` print none of them raw (the agent's text escapes them, and the
# command itself, which holds U+202E, U+009B and DEL, is printed with \uXXXX by textesc_json_dumps), and
# read back to the same text; `exec` without --json still writes the command's very bytes, as ssh does.
test_manager_terminal_safe() {
	local cmd out_text err_text
	cmd='printf "A\033[31mB\233C\302\233D\302\235E\177F\342\200\256G\n"; printf "\302\233\302\235\177\342\200\256\033" >&2 #'$' \xe2\x80\xae\xc2\x9b\x7f'
	out_text='A\x1b[31mB\x9bC\xc2\x9bD\xc2\x9dE\x7fF\xe2\x80\xaeG'$'\n'
	err_text='\xc2\x9b\xc2\x9d\x7f\xe2\x80\xae\x1b'
	mgr_repo && mgr_start && mgr_session
	mgr exec --session "$SID" --json -- "$cmd"
	assert_eq "exec --json: exit code (stderr: $(head -c 300 "$ERR"))" 0 "$RC"
	assert_terminal_safe "sandbox-manager exec --json" "$OUT"
	assert_json '[.stdout, .stdout_bytes, .stdout_escaped]' "[$(json_str "$out_text"),22,true]"
	assert_json '[.stderr, .stderr_bytes, .stderr_escaped]' "[$(json_str "$err_text"),9,true]"

	mgr exec --session "$SID" -- "$cmd"
	assert_eq "exec: exit code (stderr: $(head -c 300 "$ERR"))" 0 "$RC"
	printf 'A\033[31mB\233C\302\233D\302\235E\177F\342\200\256G\n' >"$TD/want-out"
	printf '\302\233\302\235\177\342\200\256\033' >"$TD/want-err"
	cmp -s "$TD/want-out" "$OUT" || bad "exec: stdout is not the command's bytes: $(od -An -tx1 "$OUT" | head -c 300)"
	cmp -s "$TD/want-err" "$ERR" || bad "exec: stderr is not the command's bytes: $(od -An -tx1 "$ERR" | head -c 300)"

	mgr records --session "$SID"
	assert_eq "records: exit code (stderr: $(head -c 300 "$ERR"))" 0 "$RC"
	assert_terminal_safe "sandbox-manager records" "$OUT"
	assert_json '.records | length' 2
	assert_json '[.records[].result.stdout] | unique' "[$(json_str "$out_text")]"
	assert_json '[.records[].result.stderr] | unique' "[$(json_str "$err_text")]"
	assert_json '[.records[].command] | unique' "[$(json_str "$cmd")]"

	# a refusal that quotes what it was given prints it escaped too
	mgr records --session "$SID"$'\xe2\x80\xae\xc2\x9b'
	assert_ne "records of no such session: exit code" 0 "$RC"
	grep -qF "no session $SID"'\xe2\x80\xae\xc2\x9b' "$ERR" || bad "the refusal does not quote the session escaped: $(head -c 300 "$ERR")"
	assert_terminal_safe "a refusal on stderr" "$ERR"
}
t manager_terminal_safe test_manager_terminal_safe
