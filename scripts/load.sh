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
# Sizes (environment):
#   LOAD_SESSIONS      sessions                                    (default 64)
#   LOAD_CALLS         calls per session (split over its 2 loops)  (default 100)
#   LOAD_SECONDS       if set, each loop calls until then instead  (`make soak`: SOAK_SECONDS, 1800)
#   LOAD_CALL_TIMEOUT  bound on one client call, in seconds        (default 120)
set -euo pipefail
build=$(cd "${1:-build}" && pwd)
here=$(cd "$(dirname "$0")/.." && pwd)
manager=$build/sandbox-manager
nsessions=${LOAD_SESSIONS:-64}
ncalls=${LOAD_CALLS:-100}
secs=${LOAD_SECONDS:-0}
call_timeout=${LOAD_CALL_TIMEOUT:-120}

# A short path: the agents' unix sockets live below the state directory (at most 107 bytes).
work=$(mktemp -d /tmp/infra-sandbox-load.XXXXXX)
chmod 0711 "$work" # under root the sandboxes run as nobody and walk to their worktrees
STATE=$work/state
export SANDBOX_MANAGER_SOCKET=$STATE/manager.sock
manager_pid=
bg_pids=()

# shellcheck disable=SC2317 # run by the EXIT trap
cleanup() {
	local p i
	for p in "${bg_pids[@]}"; do kill -KILL "$p" 2>/dev/null || true; done
	if [ -n "$manager_pid" ] && kill -TERM "$manager_pid" 2>/dev/null; then
		for ((i = 0; i < 50; i++)); do kill -0 "$manager_pid" 2>/dev/null || break; sleep 0.1; done
		kill -KILL "$manager_pid" 2>/dev/null || true
		wait "$manager_pid" 2>/dev/null || true
	fi
	# this run's own sandboxes, by their state directory
	pkill -KILL -f -- "--state-dir $STATE/sandboxes/" 2>/dev/null || true
	if [ -n "${LOAD_KEEP:-}" ]; then echo "load: kept $work"; else rm -rf "$work"; fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

BENCH_NAME=load
# shellcheck source=scripts/bench-lib.sh
. "$here/scripts/bench-lib.sh"
mgr() { timeout -k 3 "$call_timeout" "$manager" "$@"; }

# sample: one line "mono_ms rss_kib fds threads" of the manager, now.
sample() {
	local rss thr fds
	rss=$(awk '/^VmRSS:/ { print $2 }' "/proc/$manager_pid/status" 2>/dev/null || echo 0)
	thr=$(awk '/^Threads:/ { print $2 }' "/proc/$manager_pid/status" 2>/dev/null || echo 0)
	fds=$(find "/proc/$manager_pid/fd" -mindepth 1 -maxdepth 1 2>/dev/null | wc -l)
	echo "$(($(now_us) / 1000)) $rss $fds $thr"
}

mkdir -p "$STATE" "$work/bin"
chmod 700 "$STATE"
# Copies: a rebuild during a long run must not change (or, mid-link, remove) the client every call
# starts, nor the agent every new sandbox starts.
cp "$build/sandbox-manager" "$build/sandbox-manager-daemon" "$build/sandbox-agent" "$work/bin/"
chmod 0755 "$work/bin" "$work/bin/"*
manager=$work/bin/sandbox-manager
bench_repo "$work/repo"
manager_up "$manager" "$work/bin/sandbox-agent"

echo "sandbox-manager load: process backend, uid $(id -u), $(nproc) cores, $nsessions sessions x" \
	"$([ "$secs" -gt 0 ] && echo "calls for $secs s" || echo "$ncalls calls") (2 client loops each)"

# --- sessions, each warmed with one call --------------------------------------------------------
sids=() wts=()
for ((i = 0; i < nsessions; i++)); do
	out=$(mgr session create --identity "load$i" --repo "$work/repo") || die "session create failed"
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
python3 - "$work/calls.txt" "$work/records.jsonl" "$work/samples" "$elapsed" "$nsessions" "$rss0" "$fds0" "$thr0" <<'EOF' || status=$?
import collections, json, re, sys

calls_file, records_file, samples_file = sys.argv[1:4]
elapsed_s = int(sys.argv[4]) / 1e6
nsessions = int(sys.argv[5])
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
print("manager (VmRSS, open descriptors, threads):")
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
# What the manager said was wrong, if anything (its log goes with the work directory).
if grep -q '"level":"\(warn\|error\)"' "$work/manager.log"; then
	echo "manager warnings and errors (first 5 of $(grep -c '"level":"\(warn\|error\)"' "$work/manager.log")):"
	grep '"level":"\(warn\|error\)"' "$work/manager.log" | head -n 5 | cut -c1-300 | sed 's/^/  /'
fi
exit "$status"
