# shellcheck shell=bash
# `sandbox-agent serve --user-home` (sandbox-agent/command_user.c): in a view whose /etc/passwd and
# /etc/group have no entry for the command's ids (a Kubernetes pod's image), the command's uid and gid
# are named "sandbox" by the agent's copies, bound read-only, with every line of the view's files kept;
# a copy replaced in the agent's state directory refuses the calls built after it; without the option
# nothing is added; a view whose /etc/passwd is a link keeps it as it is (a warning in the agent's log)
# and its calls still run. The cases are test_user_home_names_the_command and test_user_home_link_left
# of tests/integration/test_agent_serve.c (the agent in a mount namespace of its own whose passwd and
# group are the test's), run here as each test user: as root the command is 65534, unprivileged it is
# the user's own uid.

USERS_BUILD=$(cd "${1:-build}" 2>/dev/null && pwd)

test_user_home_serve() {
	local bin=$TD/test_agent_serve
	[ -x "$USERS_BUILD/tests/integration/test_agent_serve" ] ||
		skip_setup "no $USERS_BUILD/tests/integration/test_agent_serve: build it with make test"
	if ! cp "$USERS_BUILD/tests/integration/test_agent_serve" "$bin" || ! chmod 0755 "$bin"; then
		bad "cannot copy the test"
		return
	fi
	timeout -k 3 120 "${AS[@]}" env "SANDBOX_AGENT=$AGENT" 'TEST_AGENT_SERVE_FILTER=test_user_home*' "$bin" \
		>"$OUT" 2>"$ERR"
	RC=$?
	assert_eq "test_user_home_* exit code (output: $(grep -v '"ts"' "$OUT" "$ERR" | tail -n 20))" 0 "$RC"
	grep -q '\[  PASSED  \] 2 test(s)' "$OUT" "$ERR" ||
		bad "the case did not run: $(grep -E 'PASSED|SKIPPED|FAILED' "$OUT" "$ERR")"
}
t user_home_serve test_user_home_serve
