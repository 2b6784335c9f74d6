# shellcheck shell=bash
# Several managers on one PostgreSQL store (issue 19 part 2; docs/scaling.md, whose failure table
# names these cases). Each test starts its own throwaway server (tests/support/pg.sh) and managers
# m1..mN on it, each with its own state dir, socket and sandboxes, `--manager-id mN`,
# `--lease-ms 2000` and the process backend, and one volume shared by all (the sessions' worktrees,
# as a shared filesystem holds them in production). A session is owned by one manager at a time
# (its lease in the store): another answers "owned", and the client follows; a dead or paused
# owner's sessions are taken over once its lease expires, the generation raised, and the store's
# fence refuses the old owner's writes. Every command here appends to a file in the worktree, so
# the lines counted say how often it ran.

MULTI_HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
MULTI_LEASE_MS=2000
MM_STATE=()
MM_SOCK=()
MM_PID=()
MM_STORE=()
MM_BG=()
MM_DIRS=() # other directories a test made, removed at its end

# multi_setup N: the test's PostgreSQL, the fixture repository at $REPO, the shared volume $MVOL,
# and managers m1..mN started one after the other (each registered before the next starts).
multi_setup() {
	local i
	store_pg_start || return 1
	trap multi_cleanup EXIT
	mgr_repo || return 1
	# a root manager's sandboxes run as nobody and must walk to their worktree
	[ "$RUN_UID" -eq 0 ] && chmod 0711 "$TD"
	MVOL=$TD/volume
	mkdir_user "$MVOL" && chmod 0711 "$MVOL" || { bad "cannot create the shared volume $MVOL"; return 1; }
	for i in $(seq 1 "$1"); do
		multi_serve "$i" || return 1
	done
}

# multi_serve I [SERVE ARGS...]: manager mI on its own short state directory (a unix socket path
# has at most 107 bytes, and its agents' sockets live below it); sets MM_STATE[I], MM_SOCK[I],
# MM_PID[I]; its log is $TD/mI.log. MM_STORE[I], when set, is its store instead of $STORE.
multi_serve() {
	local i=$1
	shift
	if [ -z "${MM_STATE[i]:-}" ]; then
		MM_STATE[i]=$(mktemp -d /tmp/sbm.XXXXXX) && chown "$RUN_USER:" "${MM_STATE[i]}" ||
			{ bad "cannot create m$i's state dir"; return 1; }
	fi
	MM_SOCK[i]=${MM_STATE[i]}/manager.sock
	rm -f "${MM_SOCK[i]}" # a killed manager's socket must not pass for the new one's
	"${AS[@]}" "$MANAGER" serve --state-dir "${MM_STATE[i]}" --volume "$MVOL" --store "${MM_STORE[i]:-$STORE}" \
		--manager-id "m$i" --lease-ms "$MULTI_LEASE_MS" "$@" >>"$TD/m$i.log" 2>&1 &
	MM_PID[i]=$!
	for _ in $(seq 1 100); do
		[ -S "${MM_SOCK[i]}" ] && return 0
		kill -0 "${MM_PID[i]}" 2>/dev/null || break
		sleep 0.1
	done
	bad "manager m$i did not start: $(tail -n 5 "$TD/m$i.log")"
	return 1
}

# Everything a test started, by PID: its client loops, its managers (a paused one too), every
# sandbox below their state dirs; then the server.
multi_cleanup() {
	local i p pids
	for p in "${MM_BG[@]}"; do kill -KILL "$p" 2>/dev/null; done
	for i in "${!MM_PID[@]}"; do kill -KILL "${MM_PID[i]}" 2>/dev/null; done
	for i in "${!MM_STATE[@]}"; do
		pids=$(pgrep -f -- "--state-dir ${MM_STATE[i]}/sandboxes/")
		# shellcheck disable=SC2086 # this test's own sandboxes (its managers' state dirs), by PID
		[ -n "$pids" ] && kill -KILL $pids 2>/dev/null
		# an unprivileged manager's subuid namespace holder (identity_userns.c), by its pid
		[ -s "${MM_STATE[i]}/userns-holder" ] && kill -KILL "$(cat "${MM_STATE[i]}/userns-holder")" 2>/dev/null
	done
	wait 2>/dev/null
	if [ -z "${IT_KEEP:-}" ]; then
		for p in "${MM_STATE[@]}" "${MM_DIRS[@]}"; do
			[ -n "$p" ] && rm -rf -- "$p"
		done
	fi
	store_cleanup
}

# multi_socks "I J ...": the sockets of managers I, J... joined by ':' (SANDBOX_MANAGER_SOCKET's list).
multi_socks() {
	local i list=
	for i in $1; do list=${list:+$list:}${MM_SOCK[i]}; done
	echo "$list"
}

# mm "I J ..." ARGS...: a client command as the test user, given the sockets of managers I, J... in
# that order (SANDBOX_MANAGER_SOCKET); "" gives none (the command's own --socket flags). The rest of
# the environment passes (VAR=value mm ...). Sets RC, ELAPSED_MS; stdout in $OUT, stderr in $ERR.
mm() {
	local socks t0
	socks=$(multi_socks "$1")
	shift
	t0=$(now_ms)
	if [ -n "$socks" ]; then
		timeout -k 3 "${MGR_TIMEOUT:-60}" "${AS[@]}" env "SANDBOX_MANAGER_SOCKET=$socks" "$MANAGER" "$@" \
			>"$OUT" 2>"$ERR"
	else
		timeout -k 3 "${MGR_TIMEOUT:-60}" "${AS[@]}" env -u SANDBOX_MANAGER_SOCKET "$MANAGER" "$@" >"$OUT" 2>"$ERR"
	fi
	RC=$?
	ELAPSED_MS=$(($(now_ms) - t0))
}

# mm_bg NAME "I J ..." COMMAND: an exec on $SID in the background (its output in $TD/bg-NAME.out,
# its exit code in $TD/bg-NAME.rc); sets BG_PID.
mm_bg() {
	local socks
	socks=$(multi_socks "$2")
	(
		timeout -k 3 40 "${AS[@]}" env "SANDBOX_MANAGER_SOCKET=$socks" "$MANAGER" exec --session "$SID" -- "$3" \
			>"$TD/bg-$1.out" 2>&1
		echo $? >"$TD/bg-$1.rc"
	) &
	BG_PID=$!
	MM_BG+=("$BG_PID")
}

# mm_raw I COMMAND: one exec on $SID sent to manager mI's socket on the control protocol itself
# (control_tagged.py), no client following a refusal: the manager's own answer, in $OUT.
mm_raw() {
	timeout -k 3 30 "${AS[@]}" python3 "$MULTI_HERE/control_tagged.py" "${MM_SOCK[$1]}" exec "$SID" \
		"multi-$(unique_marker)" "$2" >"$OUT" 2>"$ERR"
	RC=$?
}

# mm_session I: a session of alice on $REPO created through manager mI; sets SID and WT.
mm_session() {
	mm "$1" session create --identity alice --repo "$REPO"
	assert_eq "session create through m$1: exit code (stderr: $(head -c 300 "$ERR"))" 0 "$RC"
	SID=$(jr .session)
	WT=$(jr .worktree)
	[ -n "$SID" ] && [ "$SID" != null ] || { bad "no session id: $(head -c 300 "$OUT")"; return 1; }
}

# assert_owner I WHAT: the last `session show` names manager mI as the owner, with its socket as its
# address and a lease that expires in the future, within one lease time.
assert_owner() {
	local exp now
	assert_json .owner.manager "\"m$1\""
	assert_json .owner.address "$(json_str "${MM_SOCK[$1]}")"
	exp=$(jr .owner.lease_expires_ms)
	now=$(date +%s%3N)
	if ! [ "$exp" -gt "$((now - 500))" ] 2>/dev/null || ! [ "$exp" -le "$((now + MULTI_LEASE_MS + 500))" ]; then
		bad "$2: owner.lease_expires_ms [$exp] is not within a lease ($MULTI_LEASE_MS ms) of now ($now)"
	fi
}

# assert_refused_owned I WHAT: $OUT is the manager's refusal that sends the client to manager mI:
# kind "owned", the owner and its address, a wait of at most one lease.
assert_refused_owned() {
	local wait
	assert_json .ok false
	assert_json .error.kind '"owned"'
	assert_json .error.owner "\"m$1\""
	assert_json .error.address "$(json_str "${MM_SOCK[$1]}")"
	assert_match "$2: the refusal's message" "^session $SID is owned by manager m$1 \\(its control socket " \
		"$(jr .error.message)"
	wait=$(jr .error.retry_after_ms)
	if ! [ "$wait" -ge 0 ] 2>/dev/null || ! [ "$wait" -le "$MULTI_LEASE_MS" ]; then
		bad "$2: retry_after_ms [$wait] is not within 0..$MULTI_LEASE_MS"
	fi
}

# assert_taken_over GEN0 WHAT: the last `session show` is of a session taken over from generation
# GEN0 and then given a sandbox by its new owner: the takeover raises the generation by one (the
# old owner's writes at GEN0 are fenced), and the new sandbox is a new generation again; the
# store's sandbox row is that sandbox's.
assert_taken_over() {
	assert_eq "$2: the generation (GEN0 $1, + 1 for the takeover, + 1 for the new owner's sandbox)" \
		"$(($1 + 2))" "$(jr .generation)"
	assert_eq "$2: the sandbox's generation in the store" "$(jr .generation)" \
		"$(psql_q "SELECT generation FROM sandboxes WHERE session = '$SID'")"
}

# sandboxes_of I: how many processes run below manager mI's sandboxes for $SID.
sandboxes_of() { pgrep -c -f -- "--state-dir ${MM_STATE[$1]}/sandboxes/$SID" || true; }

# lines_in FILE: its line count, 0 when it does not exist.
lines_in() { if [ -e "$1" ]; then wc -l <"$1"; else echo 0; fi; }

# Two managers: the session is m1's; m2 refuses a request about it, and says whose it is (on the
# protocol: nothing recorded, nothing ran, no sandbox on m2); the client follows that answer, given
# m2 only (the refusal's address), m2 then m1 as flags, or the same list in SANDBOX_MANAGER_SOCKET:
# each call runs once, on m1, and no takeover happens (the generation stays).
test_multi_two_managers() {
	local m gen0 n0 form
	m=$(unique_marker)
	multi_setup 2 || return
	mm_session 1 || return
	mm 1 exec --session "$SID" -- 'echo first'
	assert_eq "a call through m1: exit code (stderr: $(head -c 300 "$ERR"))" 0 "$RC"
	mm 1 session show --session "$SID"
	assert_eq "session show through m1: exit code (stderr: $(head -c 300 "$ERR"))" 0 "$RC"
	assert_owner 1 "session show through m1"
	gen0=$(jr .generation)
	n0=$(psql_q "SELECT count(*) FROM execs")

	mm_raw 2 "echo refused >> \"\$TMPDIR/runs.$m\""
	assert_refused_owned 1 "an exec sent to m2"
	assert_eq "execs on record after m2's refusal" "$n0" "$(psql_q "SELECT count(*) FROM execs")"
	assert_eq "lines of the refused exec" 0 "$(lines_in "$WT/.sandbox-tmp/runs.$m")"
	assert_eq "m2's sandboxes for the session" 0 "$(sandboxes_of 2)"

	for form in only-m2 flags env; do
		case $form in
		only-m2) mm 2 exec --session "$SID" -- "echo $form >> \"\$TMPDIR/runs.$m\"; echo $form" ;;
		flags) mm "" exec --socket "${MM_SOCK[2]}" --socket "${MM_SOCK[1]}" --session "$SID" -- \
			"echo $form >> \"\$TMPDIR/runs.$m\"; echo $form" ;;
		env) mm "2 1" exec --session "$SID" -- "echo $form >> \"\$TMPDIR/runs.$m\"; echo $form" ;;
		esac
		assert_eq "a call given $form: exit code (stderr: $(head -c 300 "$ERR"))" 0 "$RC"
		assert_eq "a call given $form: output" "$form" "$(cat "$OUT")"
	done
	assert_eq "the calls' lines, each once" "only-m2 flags env" "$(tr '\n' ' ' <"$WT/.sandbox-tmp/runs.$m" | sed 's/ $//')"
	mm 1 records --session "$SID"
	assert_json '[.records[] | .state]' '["exited","exited","exited","exited"]'
	mm 1 session show --session "$SID"
	assert_owner 1 "session show after the calls"
	assert_eq "the generation (no takeover)" "$gen0" "$(jr .generation)"
	assert_eq "m2's sandboxes for the session (every call ran on m1)" 0 "$(sandboxes_of 2)"
	[ "$(sandboxes_of 1)" -gt 0 ] || bad "m1 has no sandbox for the session: where did the calls run?"
}
t multi_two_managers test_multi_two_managers

# Three managers, one session, three client loops each naming the managers in another order, six
# calls each: the owner runs them one at a time (no call starts before the one before it ended).
test_multi_three_no_overlap() {
	local order p k rc calls lines
	multi_setup 3 || return
	mm_session 1 || return
	# shellcheck disable=SC2016 # expanded in the sandbox
	calls='echo "start $(date +%s%N)" >> "$TMPDIR/calls"; sleep 0.1; echo "end $(date +%s%N)" >> "$TMPDIR/calls"'
	MM_BG=()
	for order in "1 2 3" "2 3 1" "3 1 2"; do
		(
			for k in 1 2 3 4 5 6; do
				timeout -k 3 60 "${AS[@]}" env "SANDBOX_MANAGER_SOCKET=$(multi_socks "$order")" "$MANAGER" \
					exec --session "$SID" -- "$calls" >"$TD/loop-${order// /}-$k.out" 2>&1
				echo $? >"$TD/loop-${order// /}-$k.rc"
			done
		) &
		MM_BG+=("$!")
	done
	for p in "${MM_BG[@]}"; do wait "$p"; done
	MM_BG=()
	for order in 123 231 312; do
		for k in 1 2 3 4 5 6; do
			rc=$(cat "$TD/loop-$order-$k.rc" 2>/dev/null)
			assert_eq "loop $order call $k: exit code (output: $(head -c 300 "$TD/loop-$order-$k.out"))" 0 "$rc"
		done
	done
	lines=$WT/.sandbox-tmp/calls
	assert_eq "start lines" 18 "$(grep -c '^start [0-9]*$' "$lines")"
	assert_eq "end lines" 18 "$(grep -c '^end [0-9]*$' "$lines")"
	# in time order, every start is followed by its own end: an overlap puts two starts together
	assert_eq "starts not after the previous call's end" 0 \
		"$(sort -k2,2n "$lines" | awk '$1 != (NR % 2 ? "start" : "end") { n++ } END { print n + 0 }')"
	mm 1 records --session "$SID" --limit 50
	assert_eq "exited records" 18 "$(jr '[.records[] | select(.state == "exited")] | length')"
	assert_eq "records" 18 "$(jr '.records | length')"
	mm 1 session show --session "$SID"
	assert_owner 1 "session show after the loops"
	assert_eq "m2's and m3's sandboxes for the session" "0 0" "$(sandboxes_of 2) $(sandboxes_of 3)"
}
t multi_three_no_overlap test_multi_three_no_overlap

# kill -9 of the owner while a call runs: a client given both sockets finds m1 gone, is told by m2
# that the session is still m1's, waits out the lease and is served by m2, which took the session
# over (generation + 1) and settled the killed call without running it again.
test_multi_kill_owner_midcall() {
	local m gen0 i rc n0
	m=$(unique_marker)
	multi_setup 2 || return
	mm_session 1 || return
	mm 1 exec --session "$SID" -- true
	assert_eq "a first call through m1: exit code (stderr: $(head -c 300 "$ERR"))" 0 "$RC"
	mm 1 session show --session "$SID"
	gen0=$(jr .generation)
	mm_bg killed 1 "echo run >> \"\$TMPDIR/runs.$m\"; sleep 3.$m"
	# anchored: the client's own command line holds the same words
	for i in $(seq 1 50); do pgrep -f "^sleep 3.$m" >/dev/null && break; sleep 0.1; done
	pgrep -f "^sleep 3.$m" >/dev/null || bad "the call never started: $(cat "$TD/bg-killed.out" 2>/dev/null)"
	kill -KILL "${MM_PID[1]}"
	wait "${MM_PID[1]}" 2>/dev/null
	wait "$BG_PID"
	rc=$(cat "$TD/bg-killed.rc")
	assert_ne "the killed call's client: exit code (its manager died)" 0 "$rc"

	# within m1's lease (at least 1.3 s of it left), a client that may not wait for it: m2's
	# refusal, printed as it came; nothing recorded, nothing ran
	n0=$(psql_q "SELECT count(*) FROM execs")
	SANDBOX_MANAGER_OWNED_WAIT_MS=0 mm 2 exec --session "$SID" -- "echo early >> \"\$TMPDIR/runs.$m\""
	assert_eq "a call to m2 alone within m1's lease, no wait allowed: exit code (output: $(head -c 300 "$OUT"))" 125 "$RC"
	assert_match "its message" "^sandbox-manager: owned: session $SID is owned by manager m1 \\(its control socket ${MM_SOCK[1]}\\)" \
		"$(cat "$ERR")"
	assert_eq "execs on record after that refusal" "$n0" "$(psql_q "SELECT count(*) FROM execs")"

	MGR_TIMEOUT=60 mm "1 2" exec --session "$SID" -- "echo after.$m"
	assert_eq "a call given m1 (dead) then m2: exit code (stderr: $(head -c 300 "$ERR"))" 0 "$RC"
	assert_eq "a call given m1 (dead) then m2: output" "after.$m" "$(cat "$OUT")"
	# the lease (2 s) at most, then one retry; a loaded machine gets some slack
	assert_lt "the takeover's wait, ms" "$ELAPSED_MS" 15000
	mm 2 session show --session "$SID"
	assert_eq "session show through m2: exit code (stderr: $(head -c 300 "$ERR"))" 0 "$RC"
	assert_owner 2 "session show after the takeover"
	assert_taken_over "$gen0" "session show after the takeover"
	mm 2 records --session "$SID"
	assert_json '[.records[] | select(.command | endswith("after.'"$m"'")) | .state]' '["exited"]'
	assert_match "the killed call's record" '^\["(exited|uncertain)"\]$' \
		"$(jv '[.records[] | select(.command | endswith("sleep 3.'"$m"'")) | .state]')"
	assert_eq "the killed call ran once" 1 "$(lines_in "$WT/.sandbox-tmp/runs.$m")"
	assert_eq "execs not final in the store" 0 \
		"$(psql_q "SELECT count(*) FROM execs WHERE state IN ('accepted', 'dispatched')")"
	# the takeover settles m1's sandbox too: nothing of it outlives m1 for long
	for i in $(seq 1 50); do [ "$(sandboxes_of 1)" -eq 0 ] && break; sleep 0.1; done
	no_process "--state-dir ${MM_STATE[1]}/sandboxes/"
}
t multi_kill_owner_midcall test_multi_kill_owner_midcall

# The owner paused (SIGSTOP) past its lease while a call runs: m2 takes the session over. Resumed,
# m1 is fenced: its stalled call's end cannot overwrite what m2 recorded, and m1 sends a request
# about the session to m2 instead of running it.
test_multi_paused_owner_fenced() {
	local m gen0 i before after log0 n0 rc
	m=$(unique_marker)
	multi_setup 2 || return
	mm_session 1 || return
	mm 1 exec --session "$SID" -- true
	assert_eq "a first call through m1: exit code (stderr: $(head -c 300 "$ERR"))" 0 "$RC"
	mm 1 session show --session "$SID"
	gen0=$(jr .generation)
	mm_bg stalled 1 "sleep 2.$m; echo done >> \"\$TMPDIR/runs.$m\""
	for i in $(seq 1 50); do pgrep -f "^sleep 2.$m" >/dev/null && break; sleep 0.1; done
	pgrep -f "^sleep 2.$m" >/dev/null || bad "the call never started: $(cat "$TD/bg-stalled.out" 2>/dev/null)"
	kill -STOP "${MM_PID[1]}"
	sleep 3 # past the lease (2 s from m1's last renewal)

	# m2 only: a paused manager's socket still accepts, and would hold the client until SIGCONT
	mm 2 exec --session "$SID" -- "echo taken.$m"
	assert_eq "a call through m2 with m1 paused: exit code (stderr: $(head -c 300 "$ERR"))" 0 "$RC"
	assert_eq "a call through m2 with m1 paused: output" "taken.$m" "$(cat "$OUT")"
	mm 2 session show --session "$SID"
	assert_owner 2 "session show after the takeover"
	assert_taken_over "$gen0" "session show after the takeover"
	mm 2 records --session "$SID"
	before=$(jv '[.records[] | select(.command | startswith("sleep 2.'"$m"'"))]')
	assert_match "the stalled call as m2 settled it" '^\[\{.*"state":"(exited|uncertain)"' "$before"
	n0=$(lines_in "$WT/.sandbox-tmp/runs.$m")
	log0=$(lines_in "$TD/m1.log")

	kill -CONT "${MM_PID[1]}"
	sleep 2
	mm 2 records --session "$SID"
	after=$(jv '[.records[] | select(.command | startswith("sleep 2.'"$m"'"))]')
	assert_eq "the stalled call's record 2 s after SIGCONT" "$before" "$after"
	wait "$BG_PID"
	rc=$(cat "$TD/bg-stalled.rc")
	assert_ne "the stalled call's client: exit code (m1 could not record its end: $(head -c 300 "$TD/bg-stalled.out"))" 0 "$rc"
	mm 2 records --session "$SID"
	after=$(jv '[.records[] | select(.command | startswith("sleep 2.'"$m"'"))]')
	assert_eq "the stalled call's record once its client had its answer" "$before" "$after"

	mm_raw 1 "echo again >> \"\$TMPDIR/runs.$m\""
	assert_refused_owned 2 "an exec sent to m1 after SIGCONT"
	sleep 0.5
	assert_eq "lines of runs.$m after m1's refusal" "$n0" "$(lines_in "$WT/.sandbox-tmp/runs.$m")"
	[ "$n0" -le 1 ] || bad "the stalled call ran $n0 times"
	tail -n +"$((log0 + 1))" "$TD/m1.log" | grep -qE 'fenced|refused' ||
		bad "m1's log after SIGCONT says nothing of being fenced or refused: $(tail -n +"$((log0 + 1))" "$TD/m1.log" | head -c 600)"
	mm 2 session show --session "$SID"
	assert_owner 2 "session show at the end"
	assert_taken_over "$gen0" "session show at the end"
}
t multi_paused_owner_fenced test_multi_paused_owner_fenced

# A session goes back to the manager that lost it: m1 paused past its lease, m2 takes the session
# over (and stops m1's sandbox), m1 resumes, then m2 is killed and m1 takes the session back after
# m2's lease. m1 still lists its sandbox of before; that one is of a generation the fence refuses
# now, so m1 proves it gone and drops it before the call, which runs on a new sandbox (not on the
# stale one, whose dispatch the store would refuse).
test_multi_taken_back() {
	local m gen1 log0
	m=$(unique_marker)
	multi_setup 2 || return
	mm_session 1 || return
	mm 1 exec --session "$SID" -- true
	assert_eq "a first call through m1: exit code (stderr: $(head -c 300 "$ERR"))" 0 "$RC"
	kill -STOP "${MM_PID[1]}"
	sleep 3 # past m1's lease
	mm 2 exec --session "$SID" -- "echo taken.$m"
	assert_eq "a call through m2 with m1 paused: exit code (stderr: $(head -c 300 "$ERR"))" 0 "$RC"
	kill -CONT "${MM_PID[1]}"
	mm 2 session show --session "$SID"
	assert_owner 2 "session show after m2's takeover"
	gen1=$(jr .generation)
	kill -KILL "${MM_PID[2]}"
	sleep 3 # past m2's lease
	log0=$(lines_in "$TD/m1.log")
	mm 1 exec --session "$SID" -- "echo back.$m"
	assert_eq "the call through m1 taking the session back: exit code (stderr: $(head -c 300 "$ERR"))" 0 "$RC"
	assert_eq "the call through m1 taking the session back: output" "back.$m" "$(cat "$OUT")"
	mm 1 session show --session "$SID"
	assert_owner 1 "session show after m1 took it back"
	assert_taken_over "$gen1" "session show after m1 took it back"
	tail -n +"$((log0 + 1))" "$TD/m1.log" | grep -q "from before another manager took the session is gone" ||
		bad "m1's log does not say its sandbox of before was proven gone: $(tail -n +"$((log0 + 1))" "$TD/m1.log" | head -c 600)"
	mm 1 exec --session "$SID" -- "echo again.$m"
	assert_eq "the next call through m1: output" "again.$m" "$(cat "$OUT")"
}
t multi_taken_back test_multi_taken_back

# A clean stop (SIGTERM) releases the owner's sessions and its registration: another manager takes
# them at the first request, with no wait for a lease.
test_multi_clean_stop_release() {
	local m
	m=$(unique_marker)
	multi_setup 2 || return
	mm_session 1 || return
	mm 1 exec --session "$SID" -- true
	assert_eq "a first call through m1: exit code (stderr: $(head -c 300 "$ERR"))" 0 "$RC"
	kill -TERM "${MM_PID[1]}"
	wait "${MM_PID[1]}"
	assert_eq "m1's exit status after SIGTERM" 0 "$?"
	assert_eq "the session's owner in the store after m1's clean stop" "" \
		"$(psql_q "SELECT coalesce(owner, '') FROM sessions WHERE id = '$SID'")"
	assert_eq "m1's registration after its clean stop" 0 "$(psql_q "SELECT count(*) FROM managers WHERE id = 'm1'")"
	# on the protocol: m2 serves it at once, no "owned" answer to wait out
	mm_raw 2 "echo next.$m"
	assert_json '[.ok, .result.status, .result.stdout]' "[true,\"exited\",\"next.$m\\n\"]"
	mm "1 2" exec --session "$SID" -- "echo then.$m"
	assert_eq "a call given m1 (stopped) then m2: exit code (stderr: $(head -c 300 "$ERR"))" 0 "$RC"
	assert_eq "a call given m1 (stopped) then m2: output" "then.$m" "$(cat "$OUT")"
	mm 2 session show --session "$SID"
	assert_owner 2 "session show after the release"
	mm 2 records --session "$SID"
	assert_json '[.records[] | .state]' '["exited","exited","exited"]'
	no_process "--state-dir ${MM_STATE[1]}/sandboxes/"
}
t multi_clean_stop_release test_multi_clean_stop_release

# m1 cut off from the store (its connections reset, new ones closed: store_proxy.py), m2 not: m1
# runs nothing it cannot record; its lease runs out and m2 takes the session over; with the link
# back, m1 sends a request about the session to m2 instead of running it.
test_multi_store_partition() {
	local m px proxy gen0 i
	m=$(unique_marker)
	multi_setup 0 || return
	px=$(mktemp -d /tmp/sbpx.XXXXXX) && chown "$RUN_USER:" "$px" || { bad "cannot create the proxy's directory"; return; }
	MM_DIRS+=("$px")
	"${AS[@]}" python3 "$MULTI_HERE/store_proxy.py" "$px/.s.PGSQL.5432" "$PGD/.s.PGSQL.5432" 2>"$TD/proxy.err" &
	proxy=$!
	MM_BG+=("$proxy")
	for i in $(seq 1 50); do [ -S "$px/.s.PGSQL.5432" ] && break; sleep 0.1; done
	[ -S "$px/.s.PGSQL.5432" ] || { bad "the store's proxy did not start: $(head -c 300 "$TD/proxy.err")"; return; }
	MM_STORE[1]="postgres:host=$px port=5432 user=sbrecords dbname=postgres"
	multi_serve 1 && multi_serve 2 || return
	mm_session 1 || return
	mm 1 exec --session "$SID" -- true
	assert_eq "a first call through m1: exit code (stderr: $(head -c 300 "$ERR"))" 0 "$RC"
	mm 1 session show --session "$SID"
	gen0=$(jr .generation)

	kill -USR1 "$proxy"
	MGR_TIMEOUT=20 mm 1 exec --session "$SID" -- "echo cut >> \"\$TMPDIR/runs.$m\""
	assert_eq "a call to m1 cut off from the store: exit code (output: $(head -c 300 "$OUT"))" 125 "$RC"
	assert_match "its message names the records' PostgreSQL" '^sandbox-manager: .*records: .*(postgres|PostgreSQL)' \
		"$(cat "$ERR")"
	assert_eq "lines of the call m1 could not record" 0 "$(lines_in "$WT/.sandbox-tmp/runs.$m")"
	sleep 2.5 # past m1's lease, which it cannot renew
	mm 2 exec --session "$SID" -- "echo m2 >> \"\$TMPDIR/runs.$m\"; echo m2"
	assert_eq "a call through m2 after m1's lease: exit code (stderr: $(head -c 300 "$ERR"))" 0 "$RC"
	assert_eq "a call through m2 after m1's lease: output" m2 "$(cat "$OUT")"
	mm 2 session show --session "$SID"
	assert_owner 2 "session show after the takeover"
	assert_taken_over "$gen0" "session show after the takeover"

	kill -USR2 "$proxy"
	sleep 1
	# the statement that finds the cut connection fails, and the next one reconnects (a renewal
	# usually is that statement; a request may be)
	for i in 1 2 3; do
		mm_raw 1 "echo back >> \"\$TMPDIR/runs.$m\""
		[[ $(jr .error.message) == *"was lost; reconnected for the next call"* ]] || break
	done
	assert_refused_owned 2 "an exec sent to m1 with the link back"
	sleep 0.5
	assert_eq "the lines: m2's call only" m2 "$(cat "$WT/.sandbox-tmp/runs.$m" 2>/dev/null)"
	kill -0 "${MM_PID[1]}" 2>/dev/null || bad "m1 died of the partition: $(tail -n 5 "$TD/m1.log")"
	assert_eq "execs not final in the store" 0 \
		"$(psql_q "SELECT count(*) FROM execs WHERE state IN ('accepted', 'dispatched')")"
}
t multi_store_partition test_multi_store_partition

# PostgreSQL restarted under a manager making calls: each call succeeds or fails at once naming the
# records (none hangs); the manager reconnects by itself; nothing that succeeded is lost, and nothing
# is left in flight.
test_multi_db_restart() {
	local m i rc ok=0 failed=0 loop pending
	m=$(unique_marker)
	multi_setup 1 || return
	mm_session 1 || return
	mkdir -p "$TD/db"
	(
		for i in $(seq 1 30); do
			timeout -k 3 15 "${AS[@]}" env "SANDBOX_MANAGER_SOCKET=${MM_SOCK[1]}" "$MANAGER" \
				exec --session "$SID" -- "echo call.$i.$m" >"$TD/db/$i.out" 2>"$TD/db/$i.err"
			rc=$?
			echo "$rc" >"$TD/db/$i.rc"
			# a hang ends the loop: the rest would only wait as long
			[ "$rc" -eq 124 ] || [ "$rc" -eq 137 ] && break
			sleep 0.2
		done
	) &
	loop=$!
	MM_BG+=("$loop")
	for i in $(seq 1 300); do [ -e "$TD/db/6.rc" ] && break; sleep 0.1; done
	[ -e "$TD/db/6.rc" ] || bad "the calls before the restart did not end within 30 s"
	bash "$PG_SH" restart "$PGD" >/dev/null 2>"$TD/pg-restart.err" ||
		bad "pg.sh restart: $(head -c 300 "$TD/pg-restart.err")"
	wait "$loop"
	for i in $(seq 1 30); do
		rc=$(cat "$TD/db/$i.rc" 2>/dev/null)
		case $rc in
		0)
			ok=$((ok + 1))
			assert_eq "call $i: output" "call.$i.$m" "$(cat "$TD/db/$i.out")"
			assert_eq "call $i (exit 0): its record" exited \
				"$(psql_q "SELECT state FROM execs WHERE command = 'echo call.$i.$m'")"
			;;
		124 | 137) bad "call $i did not answer within 15 s (stderr: $(head -c 300 "$TD/db/$i.err"))" ;;
		'') bad "call $i was never made (the loop ended early)" ;;
		*)
			failed=$((failed + 1))
			assert_match "call $i (exit $rc): its message names the records' PostgreSQL" \
				'^sandbox-manager: .*records: .*(postgres|PostgreSQL)' "$(cat "$TD/db/$i.err")"
			;;
		esac
	done
	echo "    ($ok calls exited 0, $failed failed while PostgreSQL restarted)"
	# 24 calls after the restart began, 0.2 s apart at least: the last finds the server back
	assert_eq "the loop's last call: exit code (stderr: $(head -c 300 "$TD/db/30.err"))" 0 "$(cat "$TD/db/30.rc" 2>/dev/null)"
	kill -0 "${MM_PID[1]}" 2>/dev/null || bad "the manager died with the database's restart: $(tail -n 5 "$TD/m1.log")"
	mm 1 exec --session "$SID" -- "echo after.$m"
	assert_eq "a call after the restart: exit code (stderr: $(head -c 300 "$ERR"))" 0 "$RC"
	assert_eq "a call after the restart: output" "after.$m" "$(cat "$OUT")"
	# what a lost write left in flight is settled by the manager, not by a restart of it
	for i in $(seq 1 100); do
		pending=$(psql_q "SELECT count(*) FROM execs WHERE state IN ('accepted', 'dispatched')")
		[ "$pending" = 0 ] && break
		sleep 0.1
	done
	assert_eq "execs left accepted or dispatched 10 s after the restart ($(psql_q "SELECT id, state, command FROM execs WHERE state IN ('accepted', 'dispatched')" | tr '\n' ' '))" 0 "$pending"
	assert_eq "execs on record that ran (none twice)" "$(psql_q "SELECT count(*) FROM execs WHERE command LIKE 'echo call.%.$m'")" \
		"$(psql_q "SELECT count(DISTINCT command) FROM execs WHERE command LIKE 'echo call.%.$m'")"
}
t multi_db_restart test_multi_db_restart

# A second manager under a running one's id, on the same store: refused, and the first serves on.
test_multi_manager_id_in_use() {
	local state rc inc
	multi_setup 1 || return
	mm_session 1 || return
	state=$(mktemp -d /tmp/sbm.XXXXXX) && chown "$RUN_USER:" "$state" || { bad "cannot create a state dir"; return; }
	MM_DIRS+=("$state")
	inc=$(psql_q "SELECT incarnation FROM managers WHERE id = 'm1'")
	assert_match "m1's incarnation in the store" '^[0-9a-f]{32}$' "$inc"
	timeout -k 2 20 "${AS[@]}" "$MANAGER" serve --state-dir "$state" --volume "$MVOL" --store "$STORE" \
		--manager-id m1 --lease-ms "$MULTI_LEASE_MS" >"$TD/second.out" 2>"$TD/second.err"
	rc=$?
	assert_eq "a second serve as m1: exit code (stderr: $(head -c 300 "$TD/second.err"))" 125 "$rc"
	grep -qF "manager id m1 is in use by a running manager (its address ${MM_SOCK[1]}, heartbeat " "$TD/second.err" ||
		bad "a second serve as m1: no 'manager id m1 is in use by a running manager (its address ${MM_SOCK[1]}, ...' in: $(head -c 300 "$TD/second.err")"
	[ -e "$state/manager.sock" ] && bad "the refused serve made a control socket"
	kill -0 "${MM_PID[1]}" 2>/dev/null || bad "the first manager is gone: $(tail -n 5 "$TD/m1.log")"
	assert_eq "m1's row in the store after the refused serve (its incarnation)" "$inc" \
		"$(psql_q "SELECT incarnation FROM managers WHERE id = 'm1'")"
	mm 1 exec --session "$SID" -- 'echo still'
	assert_eq "a call on the first manager: exit code (stderr: $(head -c 300 "$ERR"))" 0 "$RC"
	assert_eq "a call on the first manager: output" still "$(cat "$OUT")"
	mm 1 session show --session "$SID"
	assert_owner 1 "session show after the refused serve"
}
t multi_manager_id_in_use test_multi_manager_id_in_use

# One manager on the default SQLite store, as before issue 19: the session's owner is the manager
# (named by the host name, the default id), and calls never raise the generation past the first
# sandbox's.
test_multi_sqlite_unchanged() {
	local k host
	host=$(uname -n)
	mgr_repo && mgr_start && mgr_session || return
	for k in 1 2 3; do
		mgr exec --session "$SID" -- "echo $k"
		assert_eq "call $k: exit code (stderr: $(head -c 300 "$ERR"))" 0 "$RC"
		assert_eq "call $k: output" "$k" "$(cat "$OUT")"
		mgr session show --session "$SID"
		assert_json .owner.manager "$(json_str "$host")"
		assert_json .owner.address "$(json_str "$MSOCK")"
		assert_json .generation 1
	done
	mgr records --session "$SID"
	assert_json '[.records[] | .state]' '["exited","exited","exited"]'
	[ -e "$MSTATE/records.db" ] || bad "no records.db in the state dir"
}
t multi_sqlite_unchanged test_multi_sqlite_unchanged
