#!/usr/bin/env bash
# `make load` / `make soak`: a load report against one process-backend manager, not a CI test.
# LOAD_SESSIONS sessions, each driven by two client loops at once (so the session's queue is
# contended), make mixed calls: plain commands, output floods (over the output limit), binary
# output, timeouts, failures, and cancels (loop 0 only: it cancels its own call once that call is
# seen running). Then, from the records (every page), per session: every call made is recorded
# exactly once with the state its kind must end in, and no two calls of a session overlap
# (accepted..finished). Meanwhile the manager's RSS, open descriptors and threads are sampled.
# Exit 0 when those hold, 1 when a call was lost, recorded twice, ended otherwise than it must, or
# overlapped another; the figures are printed either way.
#
# Several managers on one PostgreSQL store (`make load STORE=postgres MANAGERS=N`): a throwaway
# server (tests/support/pg.sh) and N managers (m1..mN), each its own state directory, the same
# --store and --volume; session i is created through manager i % N, and every client is given all N sockets
# (SANDBOX_MANAGER_SOCKET=S1:S2:...), so a call that reaches a manager not owning its session
# follows the owner (docs/operations.md, "Several managers"). The figures are then the N managers'
# summed. STORE unset: one manager on its own SQLite file, as before.
#
# Sizes (environment):
#   LOAD_SESSIONS      sessions                                    (default 64)
#   LOAD_CALLS         calls per session (split over its 2 loops)  (default 100)
#   LOAD_SECONDS       if set, each loop calls until then instead  (`make soak`: SOAK_SECONDS, 1800)
#   LOAD_CALL_TIMEOUT  bound on one client call, in seconds        (default 120)
#   STORE              unset (SQLite) or postgres
#   MANAGERS           managers, 1 to 3 (more than 1: STORE=postgres)       (default 1)
set -euo pipefail
build=$(cd "${1:-build}" && pwd)
here=$(cd "$(dirname "$0")/.." && pwd)
manager=$build/sandbox-manager
nsessions=${LOAD_SESSIONS:-64}
ncalls=${LOAD_CALLS:-100}
secs=${LOAD_SECONDS:-0}
call_timeout=${LOAD_CALL_TIMEOUT:-120}
store=${STORE:-}
nmanagers=${MANAGERS:-1}
case $store in '' | sqlite | postgres) ;; *) echo "load: STORE takes postgres (or nothing), not '$store'" >&2; exit 2 ;; esac
case $nmanagers in 1 | 2 | 3) ;; *) echo "load: MANAGERS takes 1 to 3, not '$nmanagers'" >&2; exit 2 ;; esac
if [ "$nmanagers" -gt 1 ] && [ "$store" != postgres ]; then
	echo "load: MANAGERS=$nmanagers shares one store: give STORE=postgres" >&2
	exit 2
fi

# A short path: the agents' unix sockets live below the state directory (at most 107 bytes).
work=$(mktemp -d /tmp/infra-sandbox-load.XXXXXX)
chmod 0711 "$work" # under root the sandboxes run as nobody and walk to their worktrees
STATE=$work/state
pgdir=$work/pg
# Manager m (0-based), m1..mN: its state directory, socket and log; m1 keeps the names of one.
states=() socks=() logs=()
for ((m = 0; m < nmanagers; m++)); do
	n=$([ "$m" -eq 0 ] || echo "$((m + 1))") # "", 2, 3
	states+=("$STATE$n")
	socks+=("$STATE$n/manager.sock")
	logs+=("$work/manager$n.log")
done
SANDBOX_MANAGER_SOCKET=$(IFS=:; echo "${socks[*]}")
export SANDBOX_MANAGER_SOCKET
manager_pids=()
pg_started=
bg_pids=()

# shellcheck disable=SC2317 # run by the EXIT trap
cleanup() {
	local p i s
	for p in "${bg_pids[@]}"; do kill -KILL "$p" 2>/dev/null || true; done
	for p in "${manager_pids[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
	for p in "${manager_pids[@]}"; do
		for ((i = 0; i < 50; i++)); do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done
		kill -KILL "$p" 2>/dev/null || true
		wait "$p" 2>/dev/null || true
	done
	# this run's own sandboxes, by their state directories
	# this run's own sandboxes (found by their state directory, unique to this run), killed by PID
	for s in "${states[@]}"; do
		for p in $(pgrep -f -- "--state-dir $s/sandboxes/" || true); do kill -KILL "$p" 2>/dev/null || true; done
	done
	# after the managers: none is left holding a connection to it
	if [ -n "$pg_started" ]; then bash "$here/tests/support/pg.sh" stop "$pgdir" || true; fi
	if [ -n "${LOAD_KEEP:-}" ]; then echo "load: kept $work"; else rm -rf "$work"; fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

BENCH_NAME=load
# shellcheck source=scripts/bench-lib.sh
. "$here/scripts/bench-lib.sh"
mgr() { timeout -k 3 "$call_timeout" "$manager" "$@"; }

# sample: one line "mono_ms rss_kib fds threads" of the managers (summed), now.
sample() {
	local p rss=0 thr=0 fds=0 r t
	for p in "${manager_pids[@]}"; do
		r=$(awk '/^VmRSS:/ { print $2 }' "/proc/$p/status" 2>/dev/null || echo 0)
		t=$(awk '/^Threads:/ { print $2 }' "/proc/$p/status" 2>/dev/null || echo 0)
		rss=$((rss + ${r:-0})) thr=$((thr + ${t:-0}))
		fds=$((fds + $(find "/proc/$p/fd" -mindepth 1 -maxdepth 1 2>/dev/null | wc -l)))
	done
	echo "$(($(now_us) / 1000)) $rss $fds $thr"
}

# managers_up AGENT: the N managers (on the PostgreSQL store when STORE=postgres), each its own
# state directory, socket and log; sets manager_pids, or dies when one does not come up in 10 s.
managers_up() {
	local m with_id='' store_args=() id_args=()
	if [ "$store" = postgres ]; then
		# one volume too: a session's worktree is where any manager that owns it finds it
		mkdir -p "$work/volume"
		chmod 0711 "$work/volume"
		store_args=(--store "postgres:host=$pgdir port=5432 user=sbrecords dbname=sandbox_load"
			--volume "$work/volume")
		# --manager-id once the daemon has it (the ownership of sessions between managers)
		if "$manager" serve --help 2>/dev/null | grep -q -- --manager-id; then with_id=1; fi
	fi
	for ((m = 0; m < nmanagers; m++)); do
		mkdir -p "${states[m]}"
		chmod 700 "${states[m]}"
		[ -z "$with_id" ] || id_args=(--manager-id "m$((m + 1))")
		"$manager" serve --state-dir "${states[m]}" --agent "$1" --idle-seconds 86400 "${store_args[@]}" \
			"${id_args[@]}" >"${logs[m]}" 2>&1 &
		manager_pids+=("$!")
	done
	for ((m = 0; m < nmanagers; m++)); do
		for _ in $(seq 1 100); do
			[ -S "${socks[m]}" ] && continue 2
			kill -0 "${manager_pids[m]}" 2>/dev/null || break
			sleep 0.1
		done
		tail -n 5 "${logs[m]}" >&2
		die "manager m$((m + 1)) did not start"
	done
}

mkdir -p "$work/bin"
# Copies: a rebuild during a long run must not change (or, mid-link, remove) the client every call
# starts, nor the agent every new sandbox starts.
cp "$build/sandbox-manager" "$build/sandbox-manager-daemon" "$build/sandbox-agent" "$work/bin/"
chmod 0755 "$work/bin" "$work/bin/"*
manager=$work/bin/sandbox-manager
bench_repo "$work/repo"
if [ "$store" = postgres ]; then
	mkdir "$pgdir"
	pg_started=1
	rc=0
	bash "$here/tests/support/pg.sh" start "$pgdir" >/dev/null || rc=$?
	[ "$rc" -eq 0 ] || die "PostgreSQL did not start (pg.sh exit $rc)"
	"${PG_BIN:-/usr/lib/postgresql/15/bin}/createdb" -h "$pgdir" -p 5432 -U sbrecords sandbox_load ||
		die "createdb sandbox_load failed"
fi
managers_up "$work/bin/sandbox-agent"

echo "sandbox-manager load: process backend, $nmanagers manager(s) on $([ "$store" = postgres ] && echo "one PostgreSQL" || echo "SQLite")," \
	"uid $(id -u), $(nproc) cores, $nsessions sessions x" \
	"$([ "$secs" -gt 0 ] && echo "calls for $secs s" || echo "$ncalls calls") (2 client loops each)"

# --- sessions, each warmed with one call --------------------------------------------------------
sids=() wts=()
for ((i = 0; i < nsessions; i++)); do
	# through manager i % N, which then owns it; the calls reach it by following (all sockets given)
	out=$(mgr session create --socket "${socks[i % nmanagers]}" --identity "load$i" --repo "$work/repo") ||
		die "session create failed"
	sids+=("$(jq -r .session <<<"$out")")
	wts+=("$(jq -r .worktree <<<"$out")")
done
pids=()
for s in "${sids[@]}"; do
	mgr exec --session "$s" -- true >/dev/null 2>&1 &
	pids+=("$!")
done
for p in "${pids[@]}"; do wait "$p" || die "a warm-up call failed"; done
sample >"$work/samples"
read -r _ rss0 fds0 thr0 <"$work/samples"

# --- the calls ------------------------------------------------------------------------------------
# A loop: session S, loop W (0 cancels, 1 does not), N calls or until UNTIL_US. One line per call
# in OUT: "tag kind client_exit latency_us". Each command carries its tag, so the records can be
# matched to the calls. Kinds by the call's number, 20 a cycle: 11 plain, 2 floods, 2 binary,
# 2 failures, 1 timeout, 1 stderr, 1 cancel (loop 1: plain instead).
# shellcheck disable=SC2016 # the loop's text, expanded by its own shell
worker='
	s=$1 w=$2 n=$3 until=$4 out=$5 manager=$6 wt=$7 sidx=$8 ct=$9
	k=0
	while :; do
		if ((until > 0)); then ((${EPOCHREALTIME/./} >= until)) && break; else ((k >= n)) && break; fi
		tag="s$sidx-w$w-n$k"
		case $((k % 20)) in
		3 | 13) kind=flood cmd="head -c 3000000 /dev/zero | tr \"\\0\" a" ;;
		5 | 15) kind=binary cmd="head -c 200000 /dev/urandom" ;;
		7 | 17) kind=fail cmd="echo failing >&2; exit 3" ;;
		9) kind=timeout cmd="sleep 10" ;;
		11) kind=stderr cmd="echo to-stderr >&2" ;;
		19) if ((w == 0)); then kind=cancel; else kind=plain; fi; cmd="echo plain" ;;
		*) kind=plain cmd="echo plain" ;;
		esac
		t0=${EPOCHREALTIME/./}
		if [ "$kind" = cancel ]; then
			timeout -k 3 "$ct" "$manager" exec --session "$s" -- ": $tag; touch \"\$TMPDIR/run.$tag\"; sleep 60" >/dev/null 2>&1 &
			p=$!
			# Only once its own call runs: a cancel stops whatever call of the session is running.
			while [ ! -e "$wt/.sandbox-tmp/run.$tag" ] && kill -0 "$p" 2>/dev/null; do sleep 0.05; done
			[ -e "$wt/.sandbox-tmp/run.$tag" ] && { timeout -k 3 "$ct" "$manager" cancel --session "$s" >/dev/null 2>&1 || true; }
			rc=0; wait "$p" || rc=$?
		elif [ "$kind" = timeout ]; then
			rc=0; timeout -k 3 "$ct" "$manager" exec --session "$s" --timeout-seconds 1 -- ": $tag; $cmd" >/dev/null 2>&1 || rc=$?
		else
			rc=0; timeout -k 3 "$ct" "$manager" exec --session "$s" -- ": $tag; $cmd" >/dev/null 2>&1 || rc=$?
		fi
		echo "$tag $kind $rc $((${EPOCHREALTIME/./} - t0))" >>"$out"
		k=$((k + 1))
	done'

mkdir -p "$work/calls"
start=$(now_us)
until=0
((secs > 0)) && until=$((start + secs * 1000000))
for ((i = 0; i < nsessions; i++)); do
	for w in 0 1; do
		n=$(((ncalls + 1 - w) / 2))
		bash -c "$worker" _ "${sids[i]}" "$w" "$n" "$until" "$work/calls/$i.$w" "$manager" "${wts[i]}" "$i" \
			"$call_timeout" &
		bg_pids+=("$!")
	done
done
# sample every second until the loops are done
(while :; do sample >>"$work/samples"; sleep 1; done) &
sampler=$!
for p in "${bg_pids[@]}"; do wait "$p" || true; done
bg_pids=()
elapsed=$(($(now_us) - start))
kill "$sampler" 2>/dev/null || true
wait "$sampler" 2>/dev/null || true
sleep 2 # what the last calls left (sandboxes restarted after cancels) settles
sample >>"$work/samples"

# --- the records, every page of every session -------------------------------------------------
for ((i = 0; i < nsessions; i++)); do
	b=
	while :; do
		mgr records --session "${sids[i]}" --limit 200 ${b:+--before "$b"} >"$work/page.json" ||
			die "records of session ${sids[i]} failed"
		jq -c --arg i "$i" '.records[] | {i: $i, id: .exec_id, c: .command, st: .state, x: .result.exit_code,
			tr: .result.stdout_truncated, a: .accepted_ms, d: .dispatched_ms, f: .finished_ms}' "$work/page.json"
		b=$(jq -r '.next_before // empty' "$work/page.json")
		[ -n "$b" ] || break
	done
done >"$work/records.jsonl"
cat "$work/calls"/* >"$work/calls.txt"

# --- the report ----------------------------------------------------------------------------------
status=0
python3 - "$work/calls.txt" "$work/records.jsonl" "$work/samples" "$elapsed" "$nsessions" "$rss0" "$fds0" "$thr0" \
	"$nmanagers" "${store:-sqlite}" <<'EOF' || status=$?
import collections, json, re, sys

calls_file, records_file, samples_file = sys.argv[1:4]
elapsed_s = int(sys.argv[4]) / 1e6
nsessions = int(sys.argv[5])
nmanagers, store = int(sys.argv[9]), sys.argv[10]
calls = [l.split() for l in open(calls_file) if l.strip()]
records = [json.loads(l) for l in open(records_file) if l.strip()]
samples = [list(map(int, l.split())) for l in open(samples_file) if l.strip()]

# What each kind must end as: (record state, exit code or None, client exit code)
want = {"plain": ("exited", 0, 0), "stderr": ("exited", 0, 0), "flood": ("exited", 0, 0),
        "binary": ("exited", 0, 0), "fail": ("exited", 3, 3), "timeout": ("timed_out", None, 124),
        "cancel": ("cancelled", None, None)}
by_tag = collections.defaultdict(list)
for r in records:
    m = re.match(r"^: (s\d+-w\d-n\d+);", r["c"] or "")
    if m:
        by_tag[m.group(1)].append(r)
lost, dup, wrong, client_wrong = [], [], [], []
lat = collections.defaultdict(list)
for tag, kind, rc, us in calls:
    rs = by_tag.get(tag, [])
    lat[kind].append(int(us) / 1000)
    if not rs:
        lost.append(f"{tag} {kind}: client exit {rc}")
        continue
    if len(rs) > 1:
        dup.append(tag)
    st, code, crc = want[kind]
    r = rs[0]
    if r["st"] != st or (code is not None and r["x"] != code) or (kind == "flood" and r["tr"] is not True):
        wrong.append(f"{tag} {kind}: {r['st']} exit {r['x']}")
    if crc is not None and int(rc) != crc:
        client_wrong.append(f"{tag} {kind}: client exit {rc}")
untagged = [r for r in records if not re.match(r"^: s\d+-w\d-n\d+;", r["c"] or "") and r["c"] != "true"]

overlaps = 0
sess = collections.defaultdict(list)
for r in records:
    sess[r["i"]].append(r)
for rs in sess.values():
    rs = sorted((r for r in rs if r["a"] is not None and r["f"] is not None), key=lambda r: r["a"])
    overlaps += sum(1 for a, b in zip(rs, rs[1:]) if b["a"] < a["f"])
unfinished = [r["id"] for r in records if r["st"] in ("accepted", "dispatched")]

def pct(xs, p):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(len(xs) * p))] if xs else 0

alllat = [x for k, v in lat.items() for x in v]
quick = lat["plain"] + lat["stderr"] + lat["fail"]
print(f"calls: {len(calls)} in {elapsed_s:.1f} s = {len(calls) / elapsed_s:.1f} calls/s "
      f"with {nmanagers} manager{'s' if nmanagers > 1 else ''} ({store}) "
      f"({', '.join(f'{k} {len(v)}' for k, v in sorted(lat.items()))})")
print(f"latency (client wall, ms): all p50 {pct(alllat, .5):.0f} p99 {pct(alllat, .99):.0f}; "
      f"plain/stderr/fail p50 {pct(quick, .5):.0f} p99 {pct(quick, .99):.0f}; "
      f"flood p50 {pct(lat['flood'], .5):.0f} p99 {pct(lat['flood'], .99):.0f}; "
      f"binary p50 {pct(lat['binary'], .5):.0f} p99 {pct(lat['binary'], .99):.0f}; "
      f"cancel p50 {pct(lat['cancel'], .5):.0f} p99 {pct(lat['cancel'], .99):.0f}")
print(f"records: {len(records)} in {len(sess)} sessions (calls made + {nsessions} warm-ups = "
      f"{len(calls) + nsessions}); lost {len(lost)}, recorded twice {len(dup)}, ended wrong {len(wrong)}, "
      f"unexpected client exits {len(client_wrong)}, left unfinished {len(unfinished)}, "
      f"not made by this run {len(untagged)}; overlaps within a session: {overlaps}")
for what, xs in (("lost", lost), ("twice", dup), ("wrong", wrong), ("client", client_wrong)):
    for x in xs[:5]:
        print(f"  {what}: {x}")
t0 = samples[0][0]
mid = min(samples, key=lambda s: abs(s[0] - (t0 + samples[-1][0]) / 2))
print("manager (VmRSS, open descriptors, threads):" if nmanagers == 1 else
      f"managers, the {nmanagers} summed (VmRSS, open descriptors, threads):")
for name, s in (("start", samples[0]), ("middle", mid), ("end", samples[-1])):
    print(f"  {name:6s} {s[1] / 1024:7.1f} MiB  {s[2]:5d} fds  {s[3]:4d} threads")
print(f"  max    {max(s[1] for s in samples) / 1024:7.1f} MiB  {max(s[2] for s in samples):5d} fds  "
      f"{max(s[3] for s in samples):4d} threads  ({len(samples)} samples)")
# The trend: a leak grows through a soak, a cache or malloc's arenas level off.
tenths = [samples[min(len(samples) - 1, len(samples) * k // 10)] for k in range(11)]
print("  VmRSS MiB at each tenth of the run: " + " ".join(f"{s[1] / 1024:.0f}" for s in tenths))
bad = lost or dup or wrong or unfinished or overlaps or len(records) != len(calls) + nsessions
print("result: " + ("PROBLEMS (see above)" if bad else "every call recorded once, as it must end; no overlap"))
sys.exit(1 if bad else 0)
EOF
# What the managers said was wrong, if anything (their logs go with the work directory).
for ((m = 0; m < nmanagers; m++)); do
	if grep -q '"level":"\(warn\|error\)"' "${logs[m]}"; then
		echo "manager m$((m + 1)) warnings and errors (first 5 of $(grep -c '"level":"\(warn\|error\)"' "${logs[m]}")):"
		grep '"level":"\(warn\|error\)"' "${logs[m]}" | head -n 5 | cut -c1-300 | sed 's/^/  /'
	fi
done
exit "$status"
