#!/usr/bin/env bash
# The manager part of `make bench` (called by scripts/bench.sh): a timing report, not a test.
#   1. per call, bare and boxed interleaved (BENCH_ROUNDS blocks each): bare `bash -c true`, the
#      kernel's floor (scripts/bench-nsfloor.c: issue 32's targets are ratios to it),
#      `sandbox-manager version` (the client's start alone), `sandbox-manager exec -- true` on a warm
#      sandbox, and a warm MCP `bash` call (scripts/bench-mcp.py: one client of `sandbox-manager mcp`,
#      sequential calls); wall time and CPU time (user+sys of the client, the daemon and the session's
#      agent, which reaps the command), with the agents' step clock off, as a user runs them; then
#      where a call's time goes inside the daemon (its step clock, sandbox_manager_call_step_seconds);
#   1b. BENCH_PARALLEL (16) sessions in parallel beside as many parallel loops of the floor program
#      (floor, boxed, floor), calls/s each; then the rows of issue 32's table in its form,
#      "| path | measured | target | met? |", and as "path|measured|target|met" lines appended to
#      $BENCH_TABLE when it is set (scripts/bench.sh prints one table of every part's rows);
#   1c. where a warm CLI call's wall time goes: the manager started again with the agents' step clock
#      on (SANDBOX_AGENT_TIMING=1), one more block of CLI calls, the daemon's steps and the agent's;
#   2. throughput: 1, 8 and 64 sessions in parallel, each created beforehand and warmed with one call,
#      each running calls of `true` back to back; total execs/s, and the overlaps within any one
#      session found in the records (a call dispatched before the previous one of its session finished).
# A manager on a temporary state directory (process backend); everything it started is stopped on exit.
# The machine may be busy: compare the CPU figures as well as the wall ones.
#
# Sizes (environment):
#   BENCH_MANAGER_RUNS  calls per figure in part 1                      (default 400)
#   BENCH_ROUNDS        interleaved blocks those calls are split into   (default 4)
#   BENCH_PARALLEL      sessions (and bare loops) in part 1b            (default 16)
#   BENCH_PARALLEL_SECONDS  length of each part 1b run, in seconds      (default 5)
#   BENCH_SESSIONS      parallel session counts in part 2               (default "1 8 64")
#   BENCH_SECONDS       length of each throughput run, in seconds       (default 10)
#   BENCH_CALLS         if set, each session runs exactly this many calls instead of BENCH_SECONDS
#   BENCH_CALL_TIMEOUT  bound on any single client call, in seconds     (default 60)
set -euo pipefail
build=$(cd "${1:-build}" && pwd)
here=$(cd "$(dirname "$0")/.." && pwd)
manager=$build/sandbox-manager
runs=${BENCH_MANAGER_RUNS:-400}
levels=${BENCH_SESSIONS:-1 8 64}
secs=${BENCH_SECONDS:-10}
calls=${BENCH_CALLS:-0}
call_timeout=${BENCH_CALL_TIMEOUT:-60}

# A short path: the agents' unix sockets live below the state directory (at most 107 bytes).
work=$(mktemp -d /tmp/infra-sandbox-bm.XXXXXX)
# Under root the sandboxes run as nobody and must walk to their worktree (search only).
chmod 0711 "$work"
STATE=$work/state
export SANDBOX_MANAGER_SOCKET=$STATE/manager.sock
manager_pid=
bg_pids=()

# manager_down: the manager stopped (TERM: it stops its sandboxes first), KILL after 10 s.
manager_down() {
	local i
	[ -n "$manager_pid" ] || return 0
	if kill -TERM "$manager_pid" 2>/dev/null; then
		for ((i = 0; i < 100; i++)); do kill -0 "$manager_pid" 2>/dev/null || break; sleep 0.1; done
		kill -KILL "$manager_pid" 2>/dev/null || true
	fi
	wait "$manager_pid" 2>/dev/null || true
	manager_pid=
	rm -f "$SANDBOX_MANAGER_SOCKET"
}

cleanup() {
	local p
	for p in "${bg_pids[@]}"; do kill -KILL "$p" 2>/dev/null || true; done
	manager_down
	# this run's own sandboxes (found by their state directory, unique to this run), killed by PID
	for p in $(pgrep -f -- "--state-dir $STATE/sandboxes/" || true); do kill -KILL "$p" 2>/dev/null || true; done
	discard "$work"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

BENCH_NAME=bench-manager
# shellcheck source=scripts/bench-lib.sh
. "$here/scripts/bench-lib.sh"
mgr() { timeout -k 3 "$call_timeout" "$manager" "$@"; }
# cpu_snap: total and idle jiffies of all cores, from /proc/stat
cpu_snap() { awk '/^cpu / { print $2 + $3 + $4 + $5 + $6 + $7 + $8 + $9, $5 + $6 }' /proc/stat; }

# --- a manager on a fresh state directory, and a repository of the fixture manifests ---------------
mkdir -p "$STATE"
chmod 700 "$STATE"
bench_repo "$work/repo"
# The kernel's floor (scripts/bench-nsfloor.c), the unit of issue 32's targets.
cc -O2 -static -Wall -Wextra -Werror -o "$work/bench-nsfloor" "$here/scripts/bench-nsfloor.c" ||
	die "cannot build scripts/bench-nsfloor.c"
floor=$work/bench-nsfloor

# The step clock off for the table's rows (part 1c turns it on for its breakdown).
manager_up "$manager" "$build/sandbox-agent"

sessions=()
# warm SESSION...: one call in each, in parallel; dies when one fails.
warm() {
	local s p failed=0 pids=()
	for s in "$@"; do
		mgr exec --session "$s" -- true >/dev/null 2>&1 &
		pids+=("$!")
		bg_pids+=("$!")
	done
	for p in "${pids[@]}"; do wait "$p" || failed=$((failed + 1)); done
	bg_pids=()
	((failed == 0)) || die "$failed warm-up calls failed"
}
# new_sessions COUNT: creates sessions until there are COUNT, then warms the new ones with one call
# each (in parallel); prints how long that took.
new_sessions() {
	local want=$1 have=${#sessions[@]} s t0 t1 t2
	((want > have)) || return 0
	t0=$(now_us)
	while ((${#sessions[@]} < want)); do
		s=$(mgr session create --identity "bench${#sessions[@]}" --repo "$work/repo" | jq -r .session) ||
			die "session create failed"
		[ -n "$s" ] && [ "$s" != null ] || die "session create returned no session"
		sessions+=("$s")
	done
	t1=$(now_us)
	warm "${sessions[@]:have}"
	t2=$(now_us)
	printf '  (%d new sessions: created in %.1f s, one after another; warmed in %.1f s, in parallel)\n' \
		$((want - have)) "$(awk -v a="$t0" -v b="$t1" 'BEGIN { print (b - a) / 1e6 }')" \
		"$(awk -v a="$t1" -v b="$t2" 'BEGIN { print (b - a) / 1e6 }')"
}

echo "sandbox-manager bench: process backend, state on $(df --output=fstype "$work" | tail -1), uid $(id -u)"

# --- 1. per call: the table's rows, bare and boxed interleaved --------------------------------------
# CPU time of a process from /proc (utime + stime + its reaped children's), in microseconds; the
# daemon's and the session's agent's are read around each loop, so a boxed call's CPU is the
# client's + the daemon's + the agent's (and the command's, which the agent reaps).
tck=$(getconf CLK_TCK)
proc_cpu_us() {
	local p sum=0 v
	for p in "$@"; do
		v=$(awk -v t="$tck" '{ sub(/.*\) /, ""); print int(($12 + $13 + $14 + $15) * 1000000 / t) }' "/proc/$p/stat" 2>/dev/null) || v=0
		sum=$((sum + ${v:-0}))
	done
	echo "$sum"
}
# agent_pid SESSION: the pid of the session's sandbox agent (process backend).
agent_pid() { pgrep -o -f -- "--state-dir $STATE/sandboxes/$1\\.g" || echo "$manager_pid"; }

# loop_cpu BOUND RUNS CMD...: "WALL_US CPU_US" per call of CMD in a child shell that the bound ends
# (CPU: the calls' own, from `times`); "fail" if a call failed or the bound ran out.
loop_cpu() {
	local bound=$1
	shift
	timeout -k 3 "$bound" bash -c '
		runs=$1; shift
		s=${EPOCHREALTIME/./}
		for ((i = 0; i < runs; i++)); do "$@" >/dev/null 2>&1 || exit 1; done
		e=${EPOCHREALTIME/./}
		echo "$runs $(((e - s) / runs))"
		times' _ "$@" | awk '
		function us(t,  m) { m = t; sub(/m.*/, "", m); sub(/^[0-9]+m/, "", t); sub(/s$/, "", t); return m * 60e6 + t * 1e6 }
		NR == 1 { runs = $1; w = $2 } NR == 3 { printf "%d %d\n", w, (us($1) + us($2)) / runs; ok = 1 }
		END { if (!ok) print "fail" }'
}

s=$(mgr session create --identity bench-percall --repo "$work/repo" | jq -r .session) ||
	die "session create failed"
t0=$(now_us)
mgr exec --session "$s" -- true >/dev/null || die "the first call failed"
cold=$(($(now_us) - t0))
apid=$(agent_pid "$s")
bound=$((runs * 5 + 30))
loop_cpu 60 5 bash -c true >/dev/null
python3 "$here/scripts/bench-mcp.py" "$manager" "$s" 3 >/dev/null || die "the MCP client failed"
# rounds: each figure is the mean over ROUNDS interleaved blocks of RUNS/ROUNDS calls.
rounds=${BENCH_ROUNDS:-4}
per=$(((runs + rounds - 1) / rounds))
declare -A wall cpu
for k in bare floor version cli mcp; do wall[$k]=0 cpu[$k]=0; done
steps0=$(mgr metrics)
for ((r = 0; r < rounds; r++)); do
	read -r w c <<<"$(loop_cpu "$bound" "$per" bash -c true)"
	[ "$w" != fail ] || die "bash -c true failed"
	wall[bare]=$((wall[bare] + w)) cpu[bare]=$((cpu[bare] + c))
	read -r w c <<<"$(loop_cpu "$bound" "$per" "$floor" true)"
	[ "$w" != fail ] || die "bench-nsfloor failed"
	wall[floor]=$((wall[floor] + w)) cpu[floor]=$((cpu[floor] + c))
	read -r w c <<<"$(loop_cpu "$bound" "$per" "$manager" version)"
	[ "$w" != fail ] || die "sandbox-manager version failed"
	wall[version]=$((wall[version] + w)) cpu[version]=$((cpu[version] + c))
	d0=$(proc_cpu_us "$manager_pid" "$apid")
	read -r w c <<<"$(loop_cpu "$bound" "$per" "$manager" exec --session "$s" -- true)"
	[ "$w" != fail ] || die "sandbox-manager exec failed"
	d1=$(proc_cpu_us "$manager_pid" "$apid")
	wall[cli]=$((wall[cli] + w)) cpu[cli]=$((cpu[cli] + c + (d1 - d0) / per))
	read -r w c o <<<"$(python3 "$here/scripts/bench-mcp.py" "$manager" "$s" "$per" "$manager_pid" "$apid" || echo fail)"
	[ "$w" != fail ] || die "the MCP client failed"
	wall[mcp]=$((wall[mcp] + w)) cpu[mcp]=$((cpu[mcp] + c + o))
done
steps1=$(mgr metrics)
for k in bare floor version cli mcp; do wall[$k]=$((wall[$k] / rounds)) cpu[$k]=$((cpu[$k] / rounds)); done
ncalls=$((rounds * per * 2))
echo
echo "per call (mean of $rounds interleaved rounds of $per calls; wall, and CPU = user+sys of client, daemon and agent):"
printf '  %-44s %7d us wall %7d us CPU\n' "bash -c true" "${wall[bare]}" "${cpu[bare]}"
printf '  %-44s %7d us wall %7d us CPU   (x%s wall: the unit of issue 32'"'"'s targets)\n' "the floor (bench-nsfloor true)" \
	"${wall[floor]}" "${cpu[floor]}" "$(ratio "${wall[floor]}" "${wall[bare]}")"
printf '  %-44s %7d us wall %7d us CPU   (x%s wall: the client'"'"'s start)\n' "sandbox-manager version" \
	"${wall[version]}" "${cpu[version]}" "$(ratio "${wall[version]}" "${wall[bare]}")"
printf '  %-44s %7d us wall %7d us CPU   (x%s wall, x%s CPU of the floor)\n' "sandbox-manager exec -- true (warm)" \
	"${wall[cli]}" "${cpu[cli]}" "$(ratio "${wall[cli]}" "${wall[floor]}")" "$(ratio "${cpu[cli]}" "${cpu[floor]}")"
printf '  %-44s %7d us wall %7d us CPU   (x%s wall, x%s CPU of the floor)\n' "MCP bash {\"command\":\"true\"} (warm)" \
	"${wall[mcp]}" "${cpu[mcp]}" "$(ratio "${wall[mcp]}" "${wall[floor]}")" "$(ratio "${cpu[mcp]}" "${cpu[floor]}")"
printf '  %-44s %7d us   (starts the sandbox: %s ms, target <= 20 ms, issue 32; one call: bench-agent.sh takes the median)\n' \
	"sandbox-manager exec -- true (first, cold)" "$cold" "$(awk -v c="$cold" 'BEGIN { printf "%.1f", c / 1000 }')"
# Where a warm call's time goes, inside the daemon: its step clock (metrics.c, microseconds) over
# the calls of the loops above; the agent's own part (clone to reaped) from the records.
echo "  inside the daemon (mean per call, from sandbox_manager_call_step_seconds over the $ncalls calls above):"
paste <(echo "$steps0" | sed -n 's/^sandbox_manager_call_step_seconds_sum{step="\([a-z]*\)"} /\1 /p') \
	<(echo "$steps1" | sed -n 's/^sandbox_manager_call_step_seconds_sum{step="\([a-z]*\)"} /\1 /p') |
	awk -v n="$ncalls" '{ printf "    %-9s %6d us\n", $1, ($4 - $2) * 1e6 / n; t += ($4 - $2) * 1e6 / n } END { printf "    %-9s %6d us\n", "total", t }'
# --- 1b. 16 sessions in parallel against 16 parallel loops of the floor ------------------------------
par=${BENCH_PARALLEL:-16}
psecs=${BENCH_PARALLEL_SECONDS:-5}
# par_rate CMD_KIND: calls/s of PAR loops in parallel for PSECS seconds; floor loops run the floor
# program (bench-nsfloor true), boxed ones each call their own session.
par_rate() {
	local kind=$1 i p start until n=0 pids=() dir
	dir=$work/par-$kind
	mkdir -p "$dir"
	start=$(($(now_us) + 500000))
	until=$((start + psecs * 1000000))
	for ((i = 0; i < par; i++)); do
		: >"$dir/$i"
		if [ "$kind" = floor ]; then
			set -- "$floor" true
		else
			set -- "$manager" exec --session "${sessions[i]}" -- true
		fi
		timeout -k 3 $((psecs + call_timeout + 10)) bash -c '
			out=$1 start=$2 until=$3; shift 3
			d=$((start - ${EPOCHREALTIME/./}))
			((d > 0)) && sleep "$((d / 1000000)).$(printf %06d $((d % 1000000)))"
			while ((${EPOCHREALTIME/./} < until)); do "$@" >/dev/null 2>&1 && printf . >>"$out"; done' \
			_ "$dir/$i" "$start" "$until" "$@" &
		pids+=("$!")
		bg_pids+=("$!")
	done
	for p in "${pids[@]}"; do wait "$p" || true; done
	bg_pids=()
	for ((i = 0; i < par; i++)); do c=$(<"$dir/$i"); n=$((n + ${#c})); done
	awk -v n="$n" -v us=$(($(now_us) - start)) 'BEGIN { printf "%.1f", n / (us / 1e6) }'
}
echo
echo "$par sessions in parallel, calls of true back to back for $psecs s, beside $par parallel loops of the floor (bench-nsfloor true):"
new_sessions "$par"
r_floor1=$(par_rate floor)
r_box=$(par_rate boxed)
r_floor2=$(par_rate floor)
r_floor=$(awk -v a="$r_floor1" -v b="$r_floor2" 'BEGIN { printf "%.1f", (a + b) / 2 }')
printf '  floor: %s and %s calls/s; sandbox-manager exec: %s calls/s (%s of the floor)\n' "$r_floor1" "$r_floor2" "$r_box" \
	"$(awk -v a="$r_box" -v b="$r_floor" 'BEGIN { printf "%.2f", a / b }')"

# --- the table (scripts/bench.sh prints one for every row of issue 32) ------------------------------
row() { # row PATH MEASURED TARGET OK: one "path|measured|target|met" line
	printf '%s|%s|%s|%s\n' "$1" "$2" "$3" "$( [ "$4" = 1 ] && echo yes || echo no)"
}
le() { awk -v a="$1" -v b="$2" 'BEGIN { exit !(a <= b) }' && echo 1 || echo 0; }
ge() { awk -v a="$1" -v b="$2" 'BEGIN { exit !(a >= b) }' && echo 1 || echo 0; }
# Issue 32's rows: ratios to the floor measured in the same interleaved rounds.
x_mcp=$(ratio "${wall[mcp]}" "${wall[floor]}") x_cli=$(ratio "${wall[cli]}" "${wall[floor]}")
x_par=$(awk -v a="$r_box" -v b="$r_floor" 'BEGIN { printf "%.2f", a / b }')
ms() { echo "$(($1 / 1000)).$(printf %03d $(($1 % 1000))) ms"; }
rows=$(
	row 'a warm MCP `bash` call (`sandbox-manager mcp`, one client, sequential calls)' \
		"x$x_mcp of the floor ($(ms "${wall[mcp]}") vs $(ms "${wall[floor]}"); CPU x$(ratio "${cpu[mcp]}" "${cpu[floor]}"))" '<= x1.25' "$(le "$x_mcp" 1.25)"
	row 'a warm `sandbox-manager exec` (CLI)' \
		"x$x_cli of the floor ($(ms "${wall[cli]}"); CPU x$(ratio "${cpu[cli]}" "${cpu[floor]}"))" '<= x1.5' "$(le "$x_cli" 1.5)"
	row "$par sessions in parallel, calls/s vs $par parallel loops of the floor" "$x_par ($r_box vs $r_floor calls/s)" '>= 0.8' "$(ge "$x_par" 0.8)"
)
echo
echo "| path | measured | target | met? |"
echo "|---|---|---|---|"
while IFS='|' read -r path measured target met; do
	echo "| $path | $measured | $target | $met |"
done <<<"$rows"
[ -z "${BENCH_TABLE:-}" ] || echo "$rows" >>"$BENCH_TABLE"

# --- 1c. where a warm CLI call's time goes, with the agents' step clock on ------------------------
# The rows above ran as a user runs the manager: the step clock off. The breakdown needs it
# (SANDBOX_AGENT_TIMING=1, passed on by the manager: one line per exec in each agent's log,
# timestamps only), so the manager is stopped (it stops its sandboxes) and started again with it,
# and the session's next call starts its sandbox anew.
manager_down
SANDBOX_AGENT_TIMING=1 manager_up "$manager" "$build/sandbox-agent"
warm "$s" "${sessions[@]}" # every session warm again, as part 2 expects them
echo
# Where a warm CLI call's wall time goes: one more block of CLI calls alone (the MCP calls above
# start no client), between two snapshots of the daemon's step clock; the agent's own steps of the
# same calls from its timing lines (sandbox-agent/steptime.h), the last lines of its log.
cli0=$(mgr metrics)
read -r cliw _ <<<"$(loop_cpu "$bound" "$runs" "$manager" exec --session "$s" -- true)"
[ "$cliw" != fail ] || die "sandbox-manager exec failed"
cli1=$(mgr metrics)
step_us() { # step_us NAME: the daemon's mean for that step over the CLI block
	paste <(echo "$cli0" | sed -n "s/^sandbox_manager_call_step_seconds_sum{step=\"$1\"} //p") \
		<(echo "$cli1" | sed -n "s/^sandbox_manager_call_step_seconds_sum{step=\"$1\"} //p") |
		awk -v n="$runs" '{ printf "%d", ($2 - $1) * 1e6 / n }'
}
daemon_us=0
for k in queue sandbox dispatch command receipt record; do daemon_us=$((daemon_us + $(step_us "$k"))); done
# What the agent does on a call's path, from the Exec claimed to the Result sent. `view` is the call's
# checks on its prebuilt init, with any wait for that init's build (calls back to back); the init's own
# build steps are never in a call's line (init.c marks its call's steps only).
agent_steps=$(grep -h 'sandbox-agent timing (serve exec' "$STATE"/sandboxes/"$s".g*/agent.log 2>/dev/null |
	tail -n "$runs" |
	awk -v keep="request begin prepare view idmaps cmd_fork landlock seccomp cmd_ran teardown receipt result_json journal result total wakeups" '
	BEGIN { n = split(keep, order, " "); for (i = 1; i <= n; i++) want[order[i]] = 1 }
	{ for (i = 1; i <= NF; i++) if (split($i, kv, "=") == 2 && (kv[1] in want)) { sum[kv[1]] += kv[2]; cnt[kv[1]]++ } }
	END { for (i = 1; i <= n; i++) if (cnt[order[i]]) printf " %s %d", order[i], sum[order[i]] / cnt[order[i]] }')
agent_us=$(awk '{ for (i = 1; i < NF; i++) if ($i == "total") print $(i + 1) }' <<<"$agent_steps")
echo "  where a warm CLI call's wall time goes ($runs more CLI calls, ${cliw} us each; means):"
printf '    %-92s %6d us\n' "the client's start (sandbox-manager version)" "${wall[version]}" \
	"control round trip, the client's request and answer (exec - version - the daemon's steps)" \
	$((cliw - wall[version] - daemon_us)) \
	"the daemon's own steps (queue, sandbox, dispatch, receipt, record: 3 commits)" \
	$((daemon_us - $(step_us command))) \
	"TLS round trip to the agent (the daemon's command step - the agent's own time)" \
	$(($(step_us command) - ${agent_us:-0})) \
	"the agent, from the Exec claimed to the Result sent (its steps below)" "${agent_us:-0}"
printf '  the daemon'"'"'s steps on those calls (us):'
for k in queue sandbox dispatch command receipt record; do printf ' %s %d' "$k" "$(step_us "$k")"; done
echo
echo "  the agent's steps on those calls (SANDBOX_AGENT_TIMING=1, means, us; each since the previous one):"
echo "   ${agent_steps:- (no timing lines: the agent log was not found)}"

# --- 2. throughput ---------------------------------------------------------------------------------
# A worker: one session, calls of `true` back to back until the deadline (or BENCH_CALLS calls);
# one character per call in its file ("." exit 0, "x" otherwise). It starts at START_US.
worker='
	sid=$1 start=$2 until=$3 calls=$4 out=$5 manager=$6
	d=$((start - ${EPOCHREALTIME/./}))
	((d > 0)) && sleep "$((d / 1000000)).$(printf %06d $((d % 1000000)))"
	n=0
	while :; do
		if ((calls > 0)); then ((n >= calls)) && break; else ((${EPOCHREALTIME/./} >= until)) && break; fi
		if "$manager" exec --session "$sid" -- true >/dev/null 2>>"$out.err"; then printf . >>"$out"; else printf x >>"$out"; fi
		n=$((n + 1))
	done'

echo
if ((calls > 0)); then
	echo "throughput (each session: $calls calls of true back to back, sessions in parallel):"
else
	echo "throughput (each session: calls of true back to back for ${secs} s, sessions in parallel):"
fi
for level in $levels; do
	new_sessions "$level"
	run=$work/level-$level
	mkdir -p "$run"
	start=$(($(now_us) + 1000000)) # all workers start together, a second from now
	until=$((start + secs * 1000000))
	if ((calls > 0)); then bound=$((calls * call_timeout + 30)); else bound=$((secs + call_timeout + 30)); fi
	pids=()
	read -r cpu_t0 cpu_i0 < <(cpu_snap)
	for ((i = 0; i < level; i++)); do
		: >"$run/$i"
		timeout -k 3 "$bound" bash -c "$worker" _ "${sessions[i]}" "$start" "$until" "$calls" "$run/$i" "$manager" &
		pids+=("$!")
		bg_pids+=("$!")
	done
	hung=0
	for p in "${pids[@]}"; do wait "$p" || hung=$((hung + 1)); done
	bg_pids=()
	elapsed=$(($(now_us) - start))
	read -r cpu_t1 cpu_i1 < <(cpu_snap)
	busy=$(awk -v t=$((cpu_t1 - cpu_t0)) -v i=$((cpu_i1 - cpu_i0)) 'BEGIN { printf "%d", (t > 0) ? 100 * (t - i) / t : 0 }')
	ok=0 failed=0
	for ((i = 0; i < level; i++)); do
		c=$(<"$run/$i")
		d=${c//x/}
		ok=$((ok + ${#d}))
		failed=$((failed + ${#c} - ${#d}))
	done
	# The records of the run, one line per exec, then the overlaps within each session.
	for ((i = 0; i < level; i++)); do
		mgr records --session "${sessions[i]}" | jq -c --argjson t0 $((start / 1000)) '
			.records[] | select(.accepted_ms >= $t0)
			| {s: .session, a: .accepted_ms, d: .dispatched_ms, f: .finished_ms, st: .state}' ||
			echo '{"s":"records-unavailable"}'
	done >"$run/records.jsonl"
	stats=$(jq -rs '
		(map(select(.d != null and .f != null))) as $ok
		| ([group_by(.s)[] | map(select(.d != null and .f != null)) | sort_by(.d) | . as $r
		    | [range(1; length) as $i | select($r[$i].d < $r[$i - 1].f)] | length] | add // 0) as $ov
		| ($ok | map(.f - .a) | sort) as $lat
		| "\(length) \($ov) \(map(select(.st != "exited")) | length) \(if ($ok | length) > 0 then ($ok | map(.d - .a) | add) / ($ok | length) | floor else 0 end) \(if ($ok | length) > 0 then ($ok | map(.f - .d) | add) / ($ok | length) | floor else 0 end) \($lat[(($lat | length) * 0.5) | floor] // 0) \($lat[(($lat | length) * 0.95) | floor] // 0)"
		' "$run/records.jsonl")
	read -r nrec overlaps notexited q r p50 p95 <<<"$stats"
	rate=$(awk -v n="$ok" -v us="$elapsed" 'BEGIN { printf "%.1f", n / (us / 1e6) }')
	printf '  %2d session(s): %5d calls in %5.1f s = %7s execs/s   overlaps: %d   failed: %d' \
		"$level" "$ok" "$(awk -v us="$elapsed" 'BEGIN { print us / 1e6 }')" "$rate" "$overlaps" "$failed"
	((hung == 0)) || printf '   WORKERS TIMED OUT: %d' "$hung"
	printf '\n'
	printf '      records: %d (not exited: %d); accepted->dispatched %d ms, dispatched->finished %d ms (mean); accepted->finished p50 %d ms, p95 %d ms; CPU busy %d%% of %d cores\n' \
		"$nrec" "$notexited" "$q" "$r" "$p50" "$p95" "$busy" "$(nproc)"
	discard "$run"
done
echo "  targets: at least 400 execs/s in total on 2 cores; 0 overlaps"
