#!/usr/bin/env bash
# The manager part of `make bench` (called by scripts/bench.sh): a timing report, not a test.
#   1. per call: `sandbox-manager exec -- true` on a warm sandbox beside bare `bash -c true` in the
#      same run, and where the manager's time goes (from its records);
#   2. throughput: 1, 8 and 64 sessions in parallel, each created beforehand and warmed with one call,
#      each running calls of `true` back to back; total execs/s, and the overlaps within any one
#      session found in the records (a call dispatched before the previous one of its session finished).
# A manager on a temporary state directory (process backend); everything it started is stopped on exit.
#
# Sizes (environment):
#   BENCH_MANAGER_RUNS  calls per figure in part 1                      (default 40)
#   BENCH_SESSIONS      parallel session counts in part 2               (default "1 8 64")
#   BENCH_SECONDS       length of each throughput run, in seconds       (default 10)
#   BENCH_CALLS         if set, each session runs exactly this many calls instead of BENCH_SECONDS
#   BENCH_CALL_TIMEOUT  bound on any single client call, in seconds     (default 60)
set -euo pipefail
build=$(cd "${1:-build}" && pwd)
here=$(cd "$(dirname "$0")/.." && pwd)
manager=$build/sandbox-manager
runs=${BENCH_MANAGER_RUNS:-40}
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

cleanup() {
	local p i
	for p in "${bg_pids[@]}"; do kill -KILL "$p" 2>/dev/null || true; done
	if [ -n "$manager_pid" ] && kill -TERM "$manager_pid" 2>/dev/null; then
		for ((i = 0; i < 50; i++)); do kill -0 "$manager_pid" 2>/dev/null || break; sleep 0.1; done
		kill -KILL "$manager_pid" 2>/dev/null || true
		wait "$manager_pid" 2>/dev/null || true
	fi
	pkill -KILL -f -- "--state-dir $STATE/sandboxes/" 2>/dev/null || true
	rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

BENCH_NAME=bench-manager
# shellcheck source=scripts/bench-lib.sh
. "$here/scripts/bench-lib.sh"
mgr() { timeout -k 3 "$call_timeout" "$manager" "$@"; }
# cpu_snap: total and idle jiffies of all cores, from /proc/stat
cpu_snap() { awk '/^cpu / { print $2 + $3 + $4 + $5 + $6 + $7 + $8 + $9, $5 + $6 }' /proc/stat; }

# loop_us BOUND_SECONDS RUNS CMD...: mean wall time of one call in microseconds, measured in a child
# shell that the bound ends; prints "fail" if a call failed or the bound ran out.
loop_us() {
	local bound=$1
	shift
	timeout -k 3 "$bound" bash -c '
		runs=$1; shift
		s=${EPOCHREALTIME/./}
		for ((i = 0; i < runs; i++)); do "$@" >/dev/null 2>&1 || exit 1; done
		e=${EPOCHREALTIME/./}
		echo $(((e - s) / runs))' _ "$@" || echo fail
}

# --- a manager on a fresh state directory, and a repository of the fixture manifests ---------------
mkdir -p "$STATE"
chmod 700 "$STATE"
bench_repo "$work/repo"

# Idle eviction off for the run: sessions warmed for a later level must still be warm when it starts.
"$manager" serve --state-dir "$STATE" --agent "$build/sandbox-agent" --idle-seconds 86400 \
	>"$work/manager.log" 2>&1 &
manager_pid=$!
for _ in $(seq 1 100); do
	[ -S "$SANDBOX_MANAGER_SOCKET" ] && break
	kill -0 "$manager_pid" 2>/dev/null || break
	sleep 0.1
done
[ -S "$SANDBOX_MANAGER_SOCKET" ] || die "the manager did not start"

sessions=()
# new_sessions COUNT: creates sessions until there are COUNT, then warms the new ones with one call
# each (in parallel); prints how long that took.
new_sessions() {
	local want=$1 have=${#sessions[@]} s t0 t1 t2 p failed=0 pids=()
	((want > have)) || return 0
	t0=$(now_us)
	while ((${#sessions[@]} < want)); do
		s=$(mgr session create --identity "bench${#sessions[@]}" --repo "$work/repo" | jq -r .session) ||
			die "session create failed"
		[ -n "$s" ] && [ "$s" != null ] || die "session create returned no session"
		sessions+=("$s")
	done
	t1=$(now_us)
	for s in "${sessions[@]:have}"; do
		mgr exec --session "$s" -- true >/dev/null 2>&1 &
		pids+=("$!")
		bg_pids+=("$!")
	done
	for p in "${pids[@]}"; do wait "$p" || failed=$((failed + 1)); done
	bg_pids=()
	t2=$(now_us)
	((failed == 0)) || die "$failed warm-up calls failed"
	printf '  (%d new sessions: created in %.1f s, one after another; warmed in %.1f s, in parallel)\n' \
		$((want - have)) "$(awk -v a="$t0" -v b="$t1" 'BEGIN { print (b - a) / 1e6 }')" \
		"$(awk -v a="$t1" -v b="$t2" 'BEGIN { print (b - a) / 1e6 }')"
}

echo "sandbox-manager bench: process backend, state on $(df --output=fstype "$work" | tail -1), uid $(id -u)"

# --- 1. per call -----------------------------------------------------------------------------------
s=$(mgr session create --identity bench-percall --repo "$work/repo" | jq -r .session) ||
	die "session create failed"
t0=$(now_us)
mgr exec --session "$s" -- true >/dev/null || die "the first call failed"
cold=$(($(now_us) - t0))
# warm the bare path the same way
loop_us 60 5 bash -c true >/dev/null
bound=$((runs * 5 + 30))
bare=$(loop_us "$bound" "$runs" bash -c true)
boxed=$(loop_us "$bound" "$runs" "$manager" exec --session "$s" -- true)
bare2=$(loop_us "$bound" "$runs" bash -c true)
[ "$bare" != fail ] && [ "$bare2" != fail ] || die "bash -c true failed"
bare=$(((bare + bare2) / 2))
echo
echo "per call (wall, mean of $runs; the first call of the session excluded):"
printf '  bash -c true                                   %7d us\n' "$bare"
if [ "$boxed" = fail ]; then
	echo "  sandbox-manager exec -- true (warm)            failed or timed out"
else
	printf '  sandbox-manager exec -- true (warm)            %7d us   (%s x bare; target <= 3 x)\n' \
		"$boxed" "$(ratio "$boxed" "$bare")"
fi
printf '  sandbox-manager exec -- true (first, cold)     %7d us   (starts the sandbox)\n' "$cold"
# Where it goes, from the records of the warm calls: accepted -> dispatched (queue, record, dispatch),
# dispatched -> finished (the sandbox: run, receipt, verification), the agent's own duration, and the
# rest of the wall time (client start-up, socket, reply).
mgr records --session "$s" | jq -r --argjson wall "${boxed/fail/0}" '
	[.records[] | select(.dispatched_ms != null and .finished_ms != null)] | sort_by(.accepted_ms) | .[1:]
	| if length == 0 then "  (no records)" else
	  (length) as $n
	  | ((map(.dispatched_ms - .accepted_ms) | add) / $n) as $q
	  | ((map(.finished_ms - .dispatched_ms) | add) / $n) as $r
	  | ((map(.result.duration_ms // 0) | add) / $n) as $a
	  | "  from the \($n) records (mean):  accepted->dispatched \($q | floor) ms,  dispatched->finished \($r | floor) ms (agent duration \($a | floor) ms)"
	    + (if $wall > 0 then ",  outside the records \((($wall / 1000) - $q - $r) | floor) ms" else "" end)
	  end' || echo "  (records unavailable)"

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
	rm -rf "$run"
done
echo "  targets: at least 400 execs/s in total on 2 cores; 0 overlaps"
