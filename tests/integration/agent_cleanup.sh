# shellcheck shell=bash
# shellcheck disable=SC2016,SC2034 # commands are text for the inner bash; variables are read by lib.sh
# sandbox-agent exec: nothing a command starts survives it. Every escape a shell offers (setsid, double
# fork, nohup, disown, ignored signals, a daemon(3)), the timeout, and a fork bomb. Each leftover is
# looked for by a marker unique to the test, right when the result has returned.

# survivor CMD: CMD (with @M@ replaced by a unique marker) starts a background process whose command line
# holds the marker and prints "started"; the result must come back at once with nothing left.
survivor() {
	local m cmd
	m=$(unique_marker)
	cmd=${1//@M@/$m}
	ax_ok --timeout-seconds 20 -- "$cmd"
	no_process "$m"
	assert_result exited 0 null
	assert_json .stdout '"started\n"'
	assert_lt "ms until the result (a leftover may hold the output pipes)" "$ELAPSED_MS" 3000
}

test_setsid() { survivor 'setsid sleep 300.@M@ & echo started'; }
t leftover_setsid test_setsid

test_setsid_fork() { survivor 'setsid -f sleep 300.@M@; echo started'; }
t leftover_setsid_fork test_setsid_fork

test_double_fork() { survivor '( ( sleep 300.@M@ & ) & ); echo started'; }
t leftover_double_fork test_double_fork

test_nohup() { survivor 'nohup sleep 300.@M@ >/dev/null 2>&1 & echo started'; }
t leftover_nohup test_nohup

test_disown() { survivor 'sleep 300.@M@ & disown; echo started'; }
t leftover_disown test_disown

test_trap_ignore() { survivor '( trap "" HUP TERM INT QUIT; exec sleep 300.@M@ ) & echo started'; }
t leftover_trap_ignore test_trap_ignore

test_new_process_group() { survivor 'set -m; sleep 300.@M@ & echo started'; }
t leftover_process_group test_new_process_group

# A shell loop in its own session that ignores HUP and TERM and keeps writing a heartbeat.
test_heartbeat_loop() {
	local m hb
	m=$(unique_marker)
	hb=$WD/heartbeat.$m
	ax_ok --timeout-seconds 20 -- "setsid bash -c 'trap \"\" HUP TERM; while :; do date +%s%N > $hb; sleep 0.1; done; : $m' &
		while [ ! -s $hb ]; do sleep 0.05; done; echo started"
	no_process "$m"
	assert_result exited 0 null
	assert_json .stdout '"started\n"'
	heartbeat_stopped "$hb"
}
t leftover_heartbeat_loop test_heartbeat_loop

# attack_survive: the daemon(3) escape in C, with stdio on /dev/null and holding the output pipes.
survive() {
	local m hb
	m=$(unique_marker)
	hb=$WD/survive.$m
	ax_ok --timeout-seconds 20 -- "$ESC/attack_survive $GUARD $hb $1"
	no_process "$hb"
	assert_result exited 0 null
	assert_json .stdout '"attack_survive daemon_started=1\n"'
	assert_lt "ms until the result" "$ELAPSED_MS" 3000
	heartbeat_stopped "$hb"
}

test_attack_survive() { survive daemon; }
t attack_survive test_attack_survive

test_attack_survive_pipes() { survive keep-stdio; }
t attack_survive_keep_stdio test_attack_survive_pipes

test_timeout() {
	local m
	m=$(unique_marker)
	ax_ok --timeout-seconds 1 --exec-id timeout-1 --nonce "$(printf '0%.0s' {1..63})1" -- "echo partial; sleep 30.$m"
	no_process "$m"
	assert_result timed_out null "$(jv .signal)"
	assert_json .stdout '"partial\n"'
	assert_ge "ms until the result" "$ELAPSED_MS" 1000
	assert_lt "ms until the result" "$ELAPSED_MS" 2500
	assert_ge "duration_ms" "$(jr .duration_ms)" 1000
	assert_lt "duration_ms" "$(jr .duration_ms)" 2500
	assert_json .receipt.verified true
	assert_json .receipt.boundary_confirmed true
	assert_json '[.status, .exit_code, .boundary.confirmed]' '["timed_out",null,true]' "$RD/timeout-1.json"
}
t timeout test_timeout

# A timeout with escapees that ignore signals and hold the output pipes.
test_timeout_with_escapees() {
	local m
	m=$(unique_marker)
	ax_ok --timeout-seconds 1 -- "setsid bash -c 'trap \"\" HUP TERM; sleep 31.$m' & nohup sleep 32.$m & sleep 30.$m"
	no_process "$m"
	assert_result timed_out null "$(jv .signal)"
	assert_lt "ms until the result" "$ELAPSED_MS" 2500
}
t timeout_with_escapees test_timeout_with_escapees

# fork_bomb MAX [ARGS...]: a fork bomb (whose shell then sleeps, so PID 2 lives on) under a 2 s timeout ends
# as timed_out within 5 s, with at most MAX processes at its peak (host view) and none left. As root a pids
# cgroup (4096) keeps a broken bound from hurting the machine; its pids.peak is the measured peak.
fork_bomb() {
	local max=$1 m cg="" before after peak sampler
	shift
	m=$(unique_marker)
	if [ "$(id -u)" -eq 0 ] && [ -w /sys/fs/cgroup/pids ] && mkdir "/sys/fs/cgroup/pids/sandbox-it-$m" 2>/dev/null; then
		cg=/sys/fs/cgroup/pids/sandbox-it-$m
		echo 4096 >"$cg/pids.max"
		# shellcheck disable=SC2016 # expanded by the wrapper shell
		AGENT_WRAP=(bash -c 'echo $$ > "$0/cgroup.procs" && exec "$@"' "$cg")
	fi
	before=$(find /proc -maxdepth 1 -name '[0-9]*' | wc -l)
	(while [ ! -e "$TD/stop" ]; do pgrep -c -f "bomb_$m"; sleep 0.05; done >"$TD/counts" 2>/dev/null) &
	sampler=$!
	ax_ok --timeout-seconds 2 "$@" -- "bomb_$m() { bomb_$m | bomb_$m & }; bomb_$m; sleep 30"
	touch "$TD/stop"
	wait "$sampler"
	no_process "bomb_$m"
	assert_result timed_out null "$(jv .signal)"
	assert_lt "ms until the result" "$ELAPSED_MS" 5000
	peak=$(sort -n "$TD/counts" | tail -n 1)
	if [ -n "$cg" ]; then
		[ -r "$cg/pids.peak" ] && peak=$(cat "$cg/pids.peak") # older kernels have no pids.peak
		rmdir "$cg" 2>/dev/null
	fi
	echo "    peak processes: $peak (bound $max; sampled by pgrep: $(sort -n "$TD/counts" | tail -n 1))"
	# the wrapper, the agent and its init are counted too
	assert_lt "peak processes" "${peak:-none}" $((max + 6))
	sleep 0.5
	after=$(find /proc -maxdepth 1 -name '[0-9]*' | wc -l)
	assert_lt "host processes after (before: $before)" "$after" $((before + 30))
}

test_fork_bomb() { fork_bomb 1024; }
t fork_bomb test_fork_bomb

# RLIMIT_NPROC holds under a host-root agent too: its commands run as nobody, not as host root.
test_fork_bomb_small_bound() { fork_bomb 64 --max-processes 64; }
t fork_bomb_max_processes test_fork_bomb_small_bound

# The classic bomb returns at once (its shell exits): the agent's end of PID 2 takes the bomb with it.
test_fork_bomb_parent_exits() {
	local m
	m=$(unique_marker)
	ax_ok --timeout-seconds 10 -- "bomb_$m() { bomb_$m | bomb_$m & }; bomb_$m"
	no_process "bomb_$m"
	assert_result exited 0 null
	assert_lt "ms until the result" "$ELAPSED_MS" 3000
}
t fork_bomb_parent_exits test_fork_bomb_parent_exits

# The agent sleeps while the namespace empties; it never spins. Init closes its report pipe as it
# exits, before the kernel has emptied the namespace: a loop that kept polling that hung-up pipe woke
# thousands of times, and on a busy core held init's exit behind it (~1 ms of every call, measured).
# Here a process left in the background holds a private /tmp filled with 128 MiB: the namespace
# empties only once it is killed and that tmpfs freed, milliseconds after init's pipe closed. The
# count comes from the timing line (SANDBOX_AGENT_TIMING=1): wakeups of the wait loop, not time.
wakeups_of() { grep -o 'wakeups=[0-9]*' "$ERR" | cut -d= -f2; }

test_wait_no_spin() {
	local m
	m=$(unique_marker)
	AGENT_ENV=(SANDBOX_AGENT_TIMING=1)
	ax_ok --timeout-seconds 30 -- "head -c 128M /dev/zero >/tmp/fill; sleep 300.$m & echo started"
	no_process "$m"
	assert_result exited 0 null
	assert_match "the timing line" '^[0-9]+$' "$(wakeups_of)"
	assert_lt "wait-loop wakeups while the namespace emptied" "$(wakeups_of)" 20
	ax_ok -- 'true'
	assert_lt "wait-loop wakeups for true" "$(wakeups_of)" 20
	AGENT_ENV=()
}
t wait_no_spin test_wait_no_spin
