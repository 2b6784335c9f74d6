# shellcheck shell=bash
# The warm path of `sandbox-agent serve` (sandbox-agent/prebuilt.h): the next call's init built while the
# agent is idle, used only when it is exactly what a fresh one would be. The cases are the test_prebuilt_*
# cases of tests/integration/test_agent_serve.c, the real `serve` driven by the manager's agent client
# (a call's working directory is not the CLI's to choose): run here as each test user. Each fails when its
# rule is removed: a mount made between calls is in the next call's view (POLLPRI on mountinfo) and a new
# alias of a private directory is hidden there (root only: the binary puts itself and the agent in a private
# mount namespace), also when the mount came while a call ran, before the next init was built from the
# builder's kept copy of the mount table (test_prebuilt_mount_during_call); a working directory renamed
# away and replaced between calls is not the one the command runs in; another working directory discards the init; a prebuilt init killed while it waits makes the next
# call build afresh (and say so); eight calls in a row each get a PID namespace of their own (the command
# is pid 2 there, and what an earlier call left running is not); the waiting init is already under the
# command's seccomp filter and the command runs under exactly that one (test_prebuilt_filtered_before_call),
# and the escape programs attack_init and attack_syscalls hold through a prebuilt init as through one-shot
# exec (test_prebuilt_escapes; agent_boundary.sh runs them through exec); the agent holds exactly one
# mount namespace at rest, the waiting init's, and lets each call's go after its result
# (test_prebuilt_holds_one_mount_namespace); no call's timing line carries its init's build marks
# (test_prebuilt_lines_without_build_marks).

PREBUILT_BUILD=$(cd "${1:-build}" 2>/dev/null && pwd)

test_prebuilt_serve() {
	local bin=$TD/test_agent_serve want=12
	[ -x "$PREBUILT_BUILD/tests/integration/test_agent_serve" ] ||
		skip_setup "no $PREBUILT_BUILD/tests/integration/test_agent_serve: build it with make test"
	if ! cp "$PREBUILT_BUILD/tests/integration/test_agent_serve" "$bin" || ! chmod 0755 "$bin"; then
		bad "cannot copy the test"
		return
	fi
	# the binary makes its own directories under /tmp (short unix socket paths)
	timeout -k 3 120 "${AS[@]}" env "SANDBOX_AGENT=$AGENT" 'TEST_AGENT_SERVE_FILTER=test_prebuilt*' \
		"ESCAPE_DIR=$ESC" "ESCAPE_GUARD=$GUARD" "$bin" \
		>"$OUT" 2>"$ERR"
	RC=$?
	assert_eq "test_prebuilt_* exit code (output: $(grep -v '"ts"' "$OUT" "$ERR" | tail -n 20))" 0 "$RC"
	# all twelve; as the unprivileged user all but the two mount cases (they need root)
	[ "$RUN_UID" -ne 0 ] && want=10
	grep -q "\[  PASSED  \] $want test(s)" "$OUT" "$ERR" ||
		bad "not every prebuilt case ran: $(grep -E 'PASSED|SKIPPED|FAILED' "$OUT" "$ERR")"
}
t prebuilt_serve test_prebuilt_serve
