# shellcheck shell=bash
# shellcheck disable=SC2034 # variables are read by lib.sh
# sandbox-agent exec: when the command's namespace cannot empty, the result says so and never claims a
# clean end. A process stuck in uninterruptible sleep is made with a FUSE server (tests/fuse/fuse_stall.c)
# that reads a request and never answers it: a SIGKILLed process waiting on such a request sleeps in D state
# until the connection is aborted, so init cannot be reaped. The agent bounds that wait (5 s after the
# command's end or kill) and returns "uncertain", with a receipt that says boundary.confirmed=false.
# Needs root (mount(2) of type fuse) and /dev/fuse; the agent itself runs as each test user.

# Where the server is built: run.sh's BUILD_DIR (its $1, seen here because run.sh sources this file).
FUSE_SRC=$(cd "$(dirname "${BASH_SOURCE[0]}")/../fuse" 2>/dev/null && pwd)/fuse_stall.c
FUSE_BUILD=$(cd "${1:-build}" 2>/dev/null && pwd)
FUSE_PID=
FUSE_MNT=
FUSE_NS=

# fuse_state PID: the process's state letter (R, S, D, Z...), empty when it does not exist.
fuse_state() { sed -n 's/^.*) \([A-Za-z]\).*/\1/p' "/proc/$1/stat" 2>/dev/null; }

# fuse_alive PID: the process exists and is not a zombie.
fuse_alive() {
	local s
	s=$(fuse_state "$1")
	[ -n "$s" ] && [ "$s" != Z ]
}

# fuse_mounted DIR: DIR is a mount point in this mount namespace.
fuse_mounted() { awk -v m="$1" '$5 == m { found = 1 } END { exit !found }' /proc/self/mountinfo; }

# fuse_stat_procs: the ids of the processes whose command line holds "stat MNT/x" (the stuck stat, and any
# process of the command's namespace that still carries the command).
fuse_stat_procs() { pgrep -f -- "stat $FUSE_MNT/x"; }

# fuse_ns_procs: the live (not zombie) processes in the command's PID namespace FUSE_NS ("pid:[N]").
fuse_ns_procs() {
	local ino=${FUSE_NS//[^0-9]/} p s
	[ -n "$ino" ] || return 0
	for p in $(stat -L -c '%i %n' /proc/[0-9]*/ns/pid 2>/dev/null | awk -v i="$ino" '$1 == i { split($2, a, "/"); print a[3] }'); do
		s=$(fuse_state "$p")
		[ -n "$s" ] && [ "$s" != Z ] && echo "$p"
	done
}

# fuse_preconditions: skips (exit 77) unless a FUSE server can be started here.
fuse_preconditions() {
	local t_def=0 t_max=0 eff
	[ "$(id -u)" -eq 0 ] || skip "needs root for FUSE (mount(2) of type fuse; the test harness is uid $(id -u))"
	if [ ! -c /dev/fuse ] || ! grep -qw fuse /proc/filesystems; then
		command -v modprobe >/dev/null && modprobe fuse 2>/dev/null
	fi
	[ -c /dev/fuse ] || skip "no /dev/fuse (modprobe fuse failed or is not possible here)"
	grep -qw fuse /proc/filesystems || skip "the kernel has no fuse filesystem type (/proc/filesystems)"
	command -v cc >/dev/null || skip_setup "no C compiler (cc) to build tests/fuse/fuse_stall.c"
	[ -f "$FUSE_SRC" ] || skip_setup "no $FUSE_SRC"
	[ -n "$FUSE_BUILD" ] || skip_setup "no build directory"
	# Kernels from 6.14 can abort a connection whose request waits too long (/proc/sys/fs/fuse); a stall
	# shorter than the agent's 5 s bound plus slack would not test the bound.
	[ -r /proc/sys/fs/fuse/default_request_timeout ] && t_def=$(cat /proc/sys/fs/fuse/default_request_timeout)
	[ -r /proc/sys/fs/fuse/max_request_timeout ] && t_max=$(cat /proc/sys/fs/fuse/max_request_timeout)
	eff=$t_def
	if [ "${t_max:-0}" -gt 0 ] 2>/dev/null && { [ "${eff:-0}" -eq 0 ] || [ "$eff" -gt "$t_max" ]; }; then
		eff=$t_max
	fi
	if [ "${eff:-0}" -gt 0 ] 2>/dev/null && [ "$eff" -lt 15 ]; then
		skip "FUSE requests time out after ${eff}s here (/proc/sys/fs/fuse): too short to hold a process past the agent's 5 s bound"
	fi
}

# fuse_start: builds the server, mounts it on a fresh FUSE_MNT and waits (5 s at most) for "ready".
fuse_start() {
	local bin=$FUSE_BUILD/tests/fuse_stall i
	mkdir -p "$FUSE_BUILD/tests" || { bad "cannot create $FUSE_BUILD/tests"; return 1; }
	if ! cc -O2 -Wall -Wextra -Werror -o "$bin" "$FUSE_SRC" 2>"$TD/cc.err"; then
		bad "cannot build fuse_stall: $(head -c 2000 "$TD/cc.err")"
		return 1
	fi
	FUSE_MNT=$(mktemp -d "$TD/fuse.XXXXXX") || { bad "mktemp"; return 1; }
	chmod 0755 "$FUSE_MNT"
	"$bin" "$FUSE_MNT" >"$TD/fuse.out" 2>"$TD/fuse.err" </dev/null &
	FUSE_PID=$!
	for i in $(seq 1 50); do
		grep -qx ready "$TD/fuse.out" 2>/dev/null && break
		fuse_alive "$FUSE_PID" || break
		sleep 0.1
	done
	if ! grep -qx ready "$TD/fuse.out" 2>/dev/null; then
		bad "fuse_stall did not become ready within 5 s: $(head -c 2000 "$TD/fuse.err")"
		return 1
	fi
	fuse_mounted "$FUSE_MNT" || { bad "$FUSE_MNT is not a mount point after ready"; return 1; }
	# The root answers (GETATTR); this runs in the background so that a broken server cannot stall the test.
	stat -c %F "$FUSE_MNT" >"$TD/root.stat" 2>&1 &
	local sp=$!
	for i in $(seq 1 30); do
		fuse_alive "$sp" || break
		sleep 0.1
	done
	if fuse_alive "$sp"; then
		bad "stat of the FUSE root hangs (the server does not answer GETATTR)"
		return 1
	fi
	wait "$sp"
	assert_eq "stat of the FUSE root" directory "$(cat "$TD/root.stat")"
	echo "    fuse_stall pid $FUSE_PID ready on $FUSE_MNT"
}

# fuse_cleanup: always (also from the traps): ends the server (SIGTERM, then SIGKILL after 3 s), detaches
# the mount, then checks that the stuck stat was freed (the aborted connection ends its request).
fuse_cleanup() {
	local i rc left
	if [ -n "$FUSE_PID" ]; then
		kill -TERM "$FUSE_PID" 2>/dev/null
		for i in $(seq 1 30); do
			fuse_alive "$FUSE_PID" || break
			sleep 0.1
		done
		if fuse_alive "$FUSE_PID"; then
			bad "fuse_stall did not end within 3 s of SIGTERM: SIGKILL"
			kill -KILL "$FUSE_PID" 2>/dev/null
		fi
		wait "$FUSE_PID" 2>/dev/null
		rc=$?
		[ "$rc" -eq 0 ] || bad "fuse_stall exited $rc: $(tail -c 2000 "$TD/fuse.err" 2>/dev/null)"
		FUSE_PID=
	fi
	if [ -n "$FUSE_MNT" ]; then
		if fuse_mounted "$FUSE_MNT"; then
			echo "    $FUSE_MNT still mounted after the server ended: umount -l"
			umount -l "$FUSE_MNT" || bad "umount -l $FUSE_MNT failed"
		fi
		for i in $(seq 1 30); do
			[ -z "$(fuse_stat_procs)" ] && [ -z "$(fuse_ns_procs)" ] && break
			sleep 0.1
		done
		left=$(fuse_stat_procs | tr '\n' ' ')
		[ -n "$left" ] && echo "    left after cleanup: $left (states: $(for p in $left; do fuse_state "$p"; done | tr '\n' ' '))"
		no_process "stat $FUSE_MNT/x"
		left=$(fuse_ns_procs | tr '\n' ' ')
		[ -n "$left" ] && bad "processes still alive in the command's namespace $FUSE_NS after the abort: $left"
		FUSE_NS=
		fuse_mounted "$FUSE_MNT" || rmdir "$FUSE_MNT" 2>/dev/null
		FUSE_MNT=
	fi
}

# The command `stat MNT/x` waits on a LOOKUP the server has read and never answers. At the 1 s timeout the
# agent SIGKILLs init; the kernel's SIGKILL leaves stat in D state, so init is never reaped. The agent must
# answer "uncertain" at 1 s + 5 s, with an unconfirmed boundary in the result and in a valid receipt.
uncertain_body() {
	local nonce f pids p state t_end
	nonce=$(od -An -tx1 -N32 /dev/urandom | tr -d ' \n')
	fuse_start || return
	ax_ok --timeout-seconds 1 --exec-id fuse-stall --nonce "$nonce" -- "stat $FUSE_MNT/x"
	t_end=$(now_ms)
	echo "    agent returned after ${ELAPSED_MS} ms, rc $RC: $(head -c 1500 "$OUT")"

	# the setup did what it claims: the server holds a LOOKUP, and stat sits in D state right now
	grep -q 'holding LOOKUP' "$TD/fuse.err" || bad "the server never took a LOOKUP: $(head -c 2000 "$TD/fuse.err")"
	pids=$(pgrep -f -- "^stat $FUSE_MNT/x\$")
	[ -n "$pids" ] || bad "no stat process left in the namespace after the result (nothing was stuck)"
	for p in $pids; do
		state=$(fuse_state "$p")
		echo "    stuck: pid $p state $state wchan $(cat "/proc/$p/wchan" 2>/dev/null)"
		assert_eq "state of the stuck stat (pid $p)" D "$state"
	done
	echo "    namespace processes after the result: $(fuse_stat_procs | tr '\n' ' ')"

	assert_json .status '"uncertain"'
	assert_json .receipt.boundary_confirmed false
	assert_match ".error" 'NOT confirmed' "$(jr .error)"
	assert_ge "ms until the result (1 s timeout + 5 s bound)" "$ELAPSED_MS" 5900
	assert_lt "ms until the result (1 s timeout + 5 s bound + slack)" "$ELAPSED_MS" 8000
	echo "    duration_ms $(jr .duration_ms), exit_code $(jv .exit_code), signal $(jv .signal), error: $(jr .error)"

	f=$RD/fuse-stall.json
	if [ ! -f "$f" ]; then
		bad "no receipt at $f (result receipt: $(jv .receipt))"
		return
	fi
	assert_json .receipt.path "$(json_str "$f")"
	echo "    receipt: $(jv . "$f")"
	FUSE_NS=$(jr .boundary.pid_namespace "$f")
	assert_match "receipt boundary.pid_namespace" '^pid:\[[0-9]+\]$' "$FUSE_NS"
	echo "    live in $FUSE_NS after the result: $(fuse_ns_procs | tr '\n' ' ')"
	assert_json '[.exec_id, .nonce, .status]' "[\"fuse-stall\",\"$nonce\",\"uncertain\"]" "$f"
	assert_json '[.boundary.init_reaped, .boundary.confirmed]' '[false,false]' "$f"
	cp "$OUT" "$TD/exec.json"
	agent verify-receipt --receipt "$f" --key "$RD/receipt.key" --nonce "$nonce" --exec-id fuse-stall
	assert_eq "verify-receipt exit code" 0 "$RC"
	assert_json .verified true
	echo "    checks done $(($(now_ms) - t_end)) ms after the result"
}

test_uncertain_fuse_stall() {
	local t0
	fuse_preconditions
	trap fuse_cleanup EXIT
	trap 'fuse_cleanup; exit 1' TERM INT HUP
	uncertain_body
	t0=$(now_ms)
	fuse_cleanup
	trap - EXIT TERM INT HUP
	echo "    cleanup took $(($(now_ms) - t0)) ms"
}
t uncertain_fuse_stall test_uncertain_fuse_stall

# The command itself ends (exit 0 after 1 s), leaving behind a stat stuck on the held LOOKUP with the
# command's stdout and stderr open. Init reports the command's status and exits; its namespace cannot
# empty, and the output never ends. The agent must still see the status through init's report pipe
# (boundary_run.c wait_loop(): watched from REPORTS_QUIET_MS on, output open or not) and answer
# "uncertain" at the command's end + 5 s, long before the call's 30 s timeout.
held_output_body() {
	local nonce f
	nonce=$(od -An -tx1 -N32 /dev/urandom | tr -d ' \n')
	fuse_start || return
	ax_ok --timeout-seconds 30 --exec-id fuse-held --nonce "$nonce" -- "stat $FUSE_MNT/x & sleep 1; exit 0"
	echo "    agent returned after ${ELAPSED_MS} ms, rc $RC: $(head -c 1500 "$OUT")"
	grep -q 'holding LOOKUP' "$TD/fuse.err" || bad "the server never took a LOOKUP: $(head -c 2000 "$TD/fuse.err")"
	assert_json .status '"uncertain"'
	assert_json .receipt.boundary_confirmed false
	assert_match ".error" 'NOT confirmed' "$(jr .error)"
	assert_ge "ms until the result (the command's 1 s + 5 s bound)" "$ELAPSED_MS" 5900
	assert_lt "ms until the result (the command's 1 s + 5 s bound + slack; its timeout is 30 s)" "$ELAPSED_MS" 9000
	f=$RD/fuse-held.json
	[ -f "$f" ] || { bad "no receipt at $f"; return; }
	FUSE_NS=$(jr .boundary.pid_namespace "$f")
	assert_json '[.exec_id, .nonce, .status, .boundary.init_reaped, .boundary.confirmed]' \
		"[\"fuse-held\",\"$nonce\",\"uncertain\",false,false]" "$f"
}

test_uncertain_held_output() {
	fuse_preconditions
	trap fuse_cleanup EXIT
	trap 'fuse_cleanup; exit 1' TERM INT HUP
	held_output_body
	fuse_cleanup
	trap - EXIT TERM INT HUP
}
t uncertain_held_output test_uncertain_held_output
