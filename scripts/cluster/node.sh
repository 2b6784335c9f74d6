#!/usr/bin/env bash
# PID 1 of the test cluster's own PID namespace, started by scripts/cluster/up.sh inside the cluster's
# network namespace and a private mount namespace (nothing mounted here is seen by the host). It runs
# etcd, the control plane, containerd and the kubelet, and stops them on SIGTERM. When it exits, the
# kernel ends every process left in the PID namespace (shims, pods): nothing survives the cluster.
# Usage (up.sh only): node.sh STATE_DIR CACHE_DIR
set -uo pipefail

state=$1
cache=$2
export PATH=$cache/bin:/usr/sbin:/usr/bin:/sbin:/bin
pki=$state/pki
log=$state/log

die() {
	echo "cluster-node: $*" >&2
	exit 1
}

# ---- the private mounts: paths containerd and the kubelet hard-code ----
# /run (containerd's shims use /run/containerd) becomes a tmpfs: the host's /run (its sockets) is not
# visible to the cluster. /var/log (the kubelet's /var/log/pods) and /var/lib/cni (containerd's CNI
# result cache) are bind mounts of directories in the state directory.
mount --make-rprivate / || die "mount --make-rprivate /"
mount -t tmpfs -o mode=0755,nosuid,nodev tmpfs /run || die "tmpfs on /run"
mkdir -p /run/containerd "$state/varlog" "$state/cni-lib"
mount --bind "$state/varlog" /var/log || die "bind mount on /var/log"
mount --bind "$state/cni-lib" /var/lib/cni || die "bind mount on /var/lib/cni"
# The kubelet's volumes must propagate into containers: a shared mount, inside this namespace only.
mkdir -p "$state/kubelet"
mount --bind "$state/kubelet" "$state/kubelet" && mount --make-rshared "$state/kubelet"

pids=()
start() { # NAME CMD...: runs CMD in the background, its output in $log/NAME.log
	local name=$1
	shift
	"$@" >"$log/$name.log" 2>&1 &
	pids+=($!)
	echo "$name $!" >>"$state/node.pids"
}

stop_all() {
	local i
	# Reverse order: the kubelet first, etcd last.
	for ((i = ${#pids[@]} - 1; i >= 0; i--)); do
		kill -TERM "${pids[i]}" 2>/dev/null
		for _ in $(seq 1 50); do
			kill -0 "${pids[i]}" 2>/dev/null || break
			sleep 0.1
		done
		kill -KILL "${pids[i]}" 2>/dev/null
	done
	exit 0
}
trap stop_all TERM INT

wait_for() { # WHAT SECONDS CMD...
	local what=$1 secs=$2
	shift 2
	for _ in $(seq 1 $((secs * 5))); do
		"$@" >/dev/null 2>&1 && return 0
		sleep 0.2
	done
	die "$what did not come up in $secs s (logs: $log)"
}

: >"$state/node.pids"
curl_admin=(curl -sf --cacert "$pki/ca.crt" --cert "$pki/admin.crt" --key "$pki/admin.key")

start etcd etcd --name infra-sandbox --data-dir "$state/etcd" \
	--listen-client-urls http://127.0.0.1:2379 --advertise-client-urls http://127.0.0.1:2379 \
	--listen-peer-urls http://127.0.0.1:2380 --initial-advertise-peer-urls http://127.0.0.1:2380 \
	--initial-cluster infra-sandbox=http://127.0.0.1:2380
wait_for etcd 30 curl -sf http://127.0.0.1:2379/health

start kube-apiserver kube-apiserver \
	--etcd-servers=http://127.0.0.1:2379 \
	--bind-address=0.0.0.0 --secure-port=6443 --insecure-port=0 --advertise-address=10.250.0.1 \
	--tls-cert-file="$pki/apiserver.crt" --tls-private-key-file="$pki/apiserver.key" \
	--client-ca-file="$pki/ca.crt" \
	--service-account-key-file="$pki/sa.pub" --service-account-signing-key-file="$pki/sa.key" \
	--service-account-issuer=https://kubernetes.default.svc.cluster.local \
	--service-cluster-ip-range=10.0.0.0/24 \
	--authorization-mode=Node,RBAC \
	--kubelet-client-certificate="$pki/apiserver-kubelet.crt" --kubelet-client-key="$pki/apiserver-kubelet.key" \
	--kubelet-preferred-address-types=Hostname \
	--feature-gates=ProcMountType=true \
	--allow-privileged=false
wait_for kube-apiserver 60 "${curl_admin[@]}" https://127.0.0.1:6443/readyz

start kube-controller-manager kube-controller-manager \
	--kubeconfig="$state/controller-manager.kubeconfig" \
	--authentication-kubeconfig="$state/controller-manager.kubeconfig" \
	--authorization-kubeconfig="$state/controller-manager.kubeconfig" \
	--service-account-private-key-file="$pki/sa.key" --root-ca-file="$pki/ca.crt" \
	--use-service-account-credentials=true --leader-elect=false \
	--bind-address=127.0.0.1 --port=0 \
	--controllers='*,-nodeipam,-service,-route,-cloud-node-lifecycle'
start kube-scheduler kube-scheduler \
	--kubeconfig="$state/scheduler.kubeconfig" \
	--authentication-kubeconfig="$state/scheduler.kubeconfig" \
	--authorization-kubeconfig="$state/scheduler.kubeconfig" \
	--leader-elect=false --bind-address=127.0.0.1 --port=0

start containerd containerd --config "$state/containerd.toml"
wait_for containerd 30 ctr --address /run/containerd/containerd.sock version

for tarball in "$state"/images/*.tar; do
	ctr --address /run/containerd/containerd.sock -n k8s.io images import "$tarball" \
		>>"$log/images.log" 2>&1 || die "ctr images import $tarball failed (see $log/images.log)"
done
# The names the kubelet asks for (up.sh wrote "IMPORTED_NAME CRI_NAME" pairs).
while read -r src dst; do
	ctr --address /run/containerd/containerd.sock -n k8s.io images tag --force "$src" "$dst" \
		>>"$log/images.log" 2>&1 || die "ctr images tag $src $dst failed (see $log/images.log)"
done <"$state/images/aliases"

start kubelet kubelet \
	--config="$state/kubelet.yaml" \
	--kubeconfig="$state/kubelet.kubeconfig" \
	--container-runtime=remote \
	--container-runtime-endpoint=unix:///run/containerd/containerd.sock \
	--root-dir="$state/kubelet" \
	--seccomp-profile-root="$state/kubelet/seccomp" \
	--cert-dir="$state/kubelet/pki" \
	--hostname-override=localhost --node-ip=10.250.0.1 \
	--pod-infra-container-image=infra-sandbox/pause:3.4 \
	--feature-gates=ProcMountType=true

# kube-proxy (iptables mode): the Services' rules in THIS network namespace's nat table only (the
# host's tables are another namespace's), so that a pod reaches a Service's cluster IP, the
# `kubernetes` Service (10.0.0.1:443 -> the API server at 10.250.0.1:6443) among them.
start kube-proxy kube-proxy --config="$state/kube-proxy.yaml"

echo ready >"$state/node.ready"
# PID 1 reaps what is reparented to it (the shims) until SIGTERM.
while :; do
	wait
	sleep 1
done
