# shellcheck shell=bash
# One manager per state dir (issue 14). The break this guards: a second `serve` on a live manager's
# state dir took its sandboxes for leftovers and killed them (a running call became uncertain),
# rebound the socket, and both wrote one records.db. Now the second exits 2 with the holder's pid,
# touching nothing; the lock (daemon.c state_lock) goes with the holder, so a crash never blocks a
# restart. And a first unprivileged `serve` with the default state dir creates its parents.

test_manager_lock() {
	local first sock0 gen0 sb0 rc
	mgr_repo && mgr_start && mgr_session || return
	first=$MGR_PID
	mgr exec --session "$SID" -- true
	assert_eq "first call: exit code (stderr: $(head -c 300 "$ERR"))" 0 "$RC"
	mgr session show --session "$SID"
	gen0=$(jr .generation)
	sb0=$(jr .sandbox.runtime_id)
	sock0=$(stat -c %i "$MSOCK")
	assert_eq "the pid in the lock file" "$first" "$(tr -d '\n' <"$MSTATE/manager.lock" 2>/dev/null)"
	# a call running while the second manager tries its luck
	mgr_bg_exec sleeper 'sleep 3; echo slept'
	sleep 0.5

	# not through mgr_start: it removes the socket first
	timeout -k 2 10 "${AS[@]}" "$MANAGER" serve --state-dir "$MSTATE" >"$TD/second.out" 2>"$TD/second.err"
	rc=$?
	assert_eq "second serve: exit code (stderr: $(head -c 300 "$TD/second.err"))" 2 "$rc"
	grep -qF "state dir $MSTATE is in use by pid $first" "$TD/second.err" ||
		bad "second serve: no 'in use by pid $first' in: $(head -c 300 "$TD/second.err")"
	assert_eq "the socket is the first manager's (not rebound)" "$sock0" "$(stat -c %i "$MSOCK" 2>/dev/null)"
	kill -0 "$first" 2>/dev/null || bad "the first manager is gone"

	# the running call ends as it would have, and the first manager still serves
	wait_bg_execs
	assert_eq "the call running meanwhile printed" slept "$(cat "$TD/bg-sleeper.out")"
	mgr exec --session "$SID" -- 'echo still'
	assert_eq "a call after the second serve: exit code (stderr: $(head -c 300 "$ERR"))" 0 "$RC"
	assert_eq "a call after the second serve: output" still "$(cat "$OUT")"
	mgr records --session "$SID"
	assert_json '[.records[].state]' '["exited","exited","exited"]'
	mgr session show --session "$SID"
	assert_eq "the session's generation (its sandbox was not taken for a leftover)" "$gen0" "$(jr .generation)"
	assert_eq "the session's sandbox" "$sb0" "$(jr .sandbox.runtime_id)"

	# a crash leaves no claim: SIGKILL, reaped (every thread gone), then a new manager starts
	kill -KILL "$first"
	wait "$first" 2>/dev/null
	mgr_start || return
	mgr exec --session "$SID" -- 'echo after'
	assert_eq "a call on the restarted manager: exit code (stderr: $(head -c 300 "$ERR"))" 0 "$RC"
	assert_eq "a call on the restarted manager: output" after "$(cat "$OUT")"
	assert_eq "the pid in the lock file" "$MGR_PID" "$(tr -d '\n' <"$MSTATE/manager.lock" 2>/dev/null)"
}
t manager_lock test_manager_lock

# A fresh account: no ~/.local/state yet. The default state dir and its parents are created, 0700.
test_manager_default_state_dir() {
	local home pid i dir want
	[ "$RUN_UID" -eq 0 ] && skip "root's default state dir is /var/lib/infra-sandbox: a test does not touch it"
	# short: the agents' sockets live below the state dir, and a unix socket path has at most 107 bytes
	home=$(mktemp -d /tmp/sbh.XXXXXX) && chown "$RUN_USER:" "$home" || { bad "cannot create a home"; return; }
	dir=$home/.local/state/infra-sandbox
	"${AS[@]}" env -u XDG_STATE_HOME "HOME=$home" "$MANAGER" serve >"$TD/default.log" 2>&1 &
	pid=$!
	for i in $(seq 1 100); do
		[ -S "$dir/manager.sock" ] && break
		kill -0 "$pid" 2>/dev/null || break
		sleep 0.1
	done
	[ -S "$dir/manager.sock" ] || bad "serve with the default state dir did not start: $(tail -n 3 "$TD/default.log")"
	# With the subordinate ids (the default where the user has them, a 0700 home included) the
	# daemon is its namespace's root, whose state directory is search-only for others (0711).
	want=700
	[ -s "$dir/userns-holder" ] && want=711
	assert_eq "modes of .local, .local/state, infra-sandbox" "700 700 $want" \
		"$(stat -c %a "$home/.local" "$home/.local/state" "$dir" 2>/dev/null | tr '\n' ' ' | sed 's/ $//')"
	kill -KILL "$pid" 2>/dev/null
	[ -s "$dir/userns-holder" ] && kill -KILL "$(cat "$dir/userns-holder")" 2>/dev/null
	wait "$pid" 2>/dev/null
	[ -z "${IT_KEEP:-}" ] && rm -rf "$home"
}
t manager_default_state_dir test_manager_default_state_dir

# Started with descriptors 0, 1 and 2 closed (a careless supervisor, `2>&-`): the daemon opens
# /dev/null on each first (main.c, daemon_main.c fd_stdio_ensure), so its lock file and records never
# take those numbers and a stray write to stdout or a log line never lands in them.
test_manager_stdio_closed() {
	local fd
	mgr_repo || return 1
	# a fixed wrapper, no input in it: the manager exec'd with its three standard descriptors closed
	MGR_WRAP=(bash -c 'exec "$@" <&- >&- 2>&-' closed)
	mgr_start && mgr_session || return 1
	for fd in 0 1 2; do
		assert_eq "the daemon's descriptor $fd" /dev/null "$(readlink "/proc/$MGR_PID/fd/$fd")"
	done
	mgr exec --session "$SID" -- 'echo ran'
	assert_eq "a call (stderr: $(head -c 300 "$ERR"))" ran "$(cat "$OUT")"
	assert_eq "the lock file holds the pid alone" "$MGR_PID" "$(cat "$MSTATE/manager.lock")"
}
t manager_stdio_closed test_manager_stdio_closed
