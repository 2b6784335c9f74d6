#!/usr/bin/env bash
# The Kubernetes backend's first call on the test cluster (issue 32's row; not part of `make bench`: it
# needs `make cluster`). Usage: bash scripts/cluster/bench.sh [BUILD]. A manager of the kubernetes
# backend (BUILD's sandbox-manager) inside the cluster's network namespace, on a temporary state
# directory; BENCH_CLUSTER_RUNS sessions (default 7), each created and then its first `exec -- true`
# timed (the pod is made by that call; each line says when the call began, epoch ms, to join with the
# cluster's logs); the median and every figure, in ms. scripts/cluster/bench-bare.sh measures the
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
STATE=$work/state
export SANDBOX_MANAGER_SOCKET=$STATE/manager.sock
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
"${net[@]}" "$manager" serve --state-dir "$STATE" --backend kubernetes --kubeconfig "$kc" \
	--image "${K8S_IMAGE:-infra-sandbox-agent:dev}" --k8s-volume "hostpath:$work/volume" --volume "$work/volume" \
	>"$work/manager.log" 2>&1 &
manager_pid=$!
for ((i = 0; i < 1200; i++)); do
	[ -S "$SANDBOX_MANAGER_SOCKET" ] && break
	kill -0 "$manager_pid" 2>/dev/null || { cat "$work/manager.log" >&2; exit 1; }
	sleep 0.1
done

ms() { date +%s%N | cut -c1-13; }
figures=()
for ((r = 0; r < runs; r++)); do
	sid=$("$manager" session create --identity bench --repo "$work/repo" | jq -r .session)
	t0=$(ms)
	"$manager" exec --session "$sid" -- true >/dev/null
	t1=$(ms)
	figures+=($((t1 - t0)))
	echo "first call $r: $((t1 - t0)) ms (session $sid, from $t0)"
	"$manager" session delete --session "$sid" >/dev/null 2>&1 || true
done
median=$(printf '%s\n' "${figures[@]}" | sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}')
echo "first call of a new session, Kubernetes backend: median $median ms of $runs (${figures[*]})"
[ -n "${BENCH_CLUSTER_KEEP:-}" ] && echo "kept: $work"
