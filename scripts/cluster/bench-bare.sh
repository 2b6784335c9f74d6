#!/usr/bin/env bash
# The kubelet's floor on the test cluster (issue 32): BENCH_CLUSTER_RUNS bare pods of the sandbox image
# (no volume, no Secret, no security context: `sleep 30`), each created with kubectl and timed from
# the create to the API server's word that its container runs (a watch on the pod); the median, in
# ms. What the Kubernetes backend's first call cannot go below on this cluster. Root only; a timing
# report, never a test. Usage: bash scripts/cluster/bench-bare.sh.
set -euo pipefail
runs=${BENCH_CLUSTER_RUNS:-7}
kc=${KUBECONFIG_FILE:-/var/lib/infra-sandbox/cluster/admin.kubeconfig}
net=(ip netns exec infra-sandbox-cluster)
k() { "${net[@]}" kubectl --kubeconfig "$kc" "$@"; }
figures=()
for ((r = 0; r < runs; r++)); do
	name=bench-bare-$$-$r
	t0=$(date +%s%N)
	k run "$name" --image="${K8S_IMAGE:-infra-sandbox-agent:dev}" --image-pull-policy=Never --restart=Never \
		--command -- /bin/bash -c 'sleep 30' >/dev/null
	k wait --for=condition=Ready --timeout=60s "pod/$name" >/dev/null
	t1=$(date +%s%N)
	figures+=($(((t1 - t0) / 1000000)))
	echo "bare pod $r: ${figures[-1]} ms"
	k delete pod "$name" --grace-period=0 --wait=false >/dev/null 2>&1 || true
done
median=$(printf '%s\n' "${figures[@]}" | sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}')
echo "bare pod of the sandbox image, create to Ready: median $median ms of $runs (${figures[*]})"
