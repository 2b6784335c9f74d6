#!/usr/bin/env bash
# The Kubernetes backend's first call on the test cluster (issue 32's row; not part of `make bench`: it
# needs `make cluster`). Usage: bash scripts/cluster/bench.sh [BUILD]. A manager of the kubernetes
# backend (BUILD's sandbox-manager) inside the cluster's network namespace, on a temporary state
# directory; BENCH_CLUSTER_RUNS sessions (default 7), each created and then its first `exec -- true`
# timed, twice: with the pod made by that call (sandbox-start call), then with the pod made at the
# create (sandbox-start create: the call made once the pod is up); each line says when the call began,
# epoch ms, to join with the cluster's logs; the medians and every figure, in ms. scripts/cluster/bench-bare.sh measures the
# kubelet's floor. BENCH_CLUSTER_KEEP=1 keeps the work directory (the manager's log). Root only; a
# timing report, never a test (docs/performance.md, "The Kubernetes backend's first call").
set -euo pipefail
build=$(cd "${1:-build}" && pwd)
here=$(cd "$(dirname "$0")/../.." && pwd)
manager=$build/sandbox-manager
runs=${BENCH_CLUSTER_RUNS:-7}
ready=${K8S_READY:-}
kc=/var/lib/infra-sandbox/cluster/admin.kubeconfig
net=(ip netns exec infra-sandbox-cluster)
[ -n "$ready" ] && kc=$(sed -n 's/^KUBECONFIG=//p' "$ready" | tail -n 1)
[ -r "$kc" ] || { echo "bench-cluster: no cluster ($kc): make cluster" >&2; exit 2; }
"${net[@]}" true

work=$(mktemp -d /tmp/infra-sandbox-bc.XXXXXX)
chmod 0711 "$work"
manager_pid=
cleanup() {
	local i
	if [ -n "$manager_pid" ] && kill -TERM "$manager_pid" 2>/dev/null; then
		for ((i = 0; i < 300; i++)); do kill -0 "$manager_pid" 2>/dev/null || break; sleep 0.1; done
		kill -KILL "$manager_pid" 2>/dev/null || true
		wait "$manager_pid" 2>/dev/null || true
	fi
	[ -n "${BENCH_CLUSTER_KEEP:-}" ] || rm -rf "$work"
}
trap cleanup EXIT

mkdir -p "$work/repo" "$work/volume"
chmod 0711 "$work/volume"
cp -r "$here/tests/fixtures/deploy-repo/." "$work/repo/"
git -C "$work/repo" init -q -b main
git -C "$work/repo" add -A
git -C "$work/repo" -c user.name=bench -c user.email=bench@example.invalid commit -qm bench
# manager_up [SERVE ARGS...]: a kubernetes-backend manager in the cluster's namespace on a fresh state.
manager_up() {
	STATE=$work/state$((++ups))
	export SANDBOX_MANAGER_SOCKET=$STATE/manager.sock
	"${net[@]}" "$manager" serve --state-dir "$STATE" --backend kubernetes --kubeconfig "$kc" \
		--image "${K8S_IMAGE:-infra-sandbox-agent:dev}" --k8s-volume "hostpath:$work/volume" --volume "$work/volume" \
		"$@" >"$work/manager.log" 2>&1 &
	manager_pid=$!
	for ((i = 0; i < 1200; i++)); do
		[ -S "$SANDBOX_MANAGER_SOCKET" ] && return 0
		kill -0 "$manager_pid" 2>/dev/null || { cat "$work/manager.log" >&2; exit 1; }
		sleep 0.1
	done
	echo "bench-cluster: the manager did not start" >&2
	exit 1
}
manager_down() {
	kill -TERM "$manager_pid" 2>/dev/null && wait "$manager_pid" 2>/dev/null || true
	manager_pid=
}
ups=0

ms() { date +%s%N | cut -c1-13; }
median_of() { printf '%s\n' "$@" | sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }

# 1. The pod made by the first call (sandbox-start call, the default): the start on the call's path.
manager_up
figures=()
for ((r = 0; r < runs; r++)); do
	sid=$("$manager" session create --identity bench --repo "$work/repo" | jq -r .session)
	t0=$(ms)
	"$manager" exec --session "$sid" -- true >/dev/null
	t1=$(ms)
	figures+=($((t1 - t0)))
	echo "started by its first call $r: $((t1 - t0)) ms (session $sid, from $t0)"
	"$manager" session delete --session "$sid" >/dev/null 2>&1 || true
done
echo "the pod started by the first call (sandbox-start call): median $(median_of "${figures[@]}") ms of $runs (${figures[*]})"
manager_down

# 2. The pod made at the session's create (sandbox-start create, early_start.c): its start awaited
# (the manager's log says when the pod is up and its agent connected: a model's first turn), then
# the first call timed.
manager_up --sandbox-start create
figures=() ups_ms=()
for ((r = 0; r < runs; r++)); do
	sid=$("$manager" session create --identity bench --repo "$work/repo" | jq -r .session)
	t0=$(ms)
	for ((i = 0; i < 6000; i++)); do
		grep -q "session $sid: its sandbox started at its create" "$work/manager.log" && break
		grep -q "session $sid: its sandbox did not start" "$work/manager.log" && { echo "bench-cluster: the start at create failed" >&2; exit 1; }
		sleep 0.01
	done
	t1=$(ms)
	"$manager" exec --session "$sid" -- true >/dev/null
	t2=$(ms)
	figures+=($((t2 - t1)))
	ups_ms+=($((t1 - t0)))
	echo "first call $r: $((t2 - t1)) ms, the pod up and connected $((t1 - t0)) ms after the create answered (session $sid, from $t1)"
	"$manager" session delete --session "$sid" >/dev/null 2>&1 || true
done
median=$(median_of "${figures[@]}")
echo "the start at create, from the create's answer: median $(median_of "${ups_ms[@]}") ms (${ups_ms[*]})"
echo "first call of a new session, Kubernetes backend: median $median ms of $runs (sandbox-start create; ${figures[*]})"
if [ -n "${BENCH_CLUSTER_KEEP:-}" ]; then echo "kept: $work"; fi
