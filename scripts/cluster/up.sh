#!/usr/bin/env bash
# `make cluster`: a real single-node Kubernetes (1.20.2, Debian's source) on this machine, for the
# Kubernetes backend's tests. etcd, kube-apiserver, kube-controller-manager, kube-scheduler, containerd
# (CRI, runc), the kubelet and kube-proxy all run in the cluster's OWN network namespace
# ($CLUSTER_NETNS): the API server listens on that namespace's addresses (127.0.0.1 for the
# kubeconfigs, the node's 10.250.0.1 for pods, through the `kubernetes` Service 10.0.0.1:443 that
# kube-proxy's iptables rules in the namespace route), the pods' CNI bridge lives there, nothing is
# bound to or routed from a host address. They also run in a private mount namespace and their own PID
# namespace, so `make cluster-down` (scripts/cluster/down.sh) ends all of them, the shims and the pods
# by ending the one PID it recorded.
#
# The sandbox image (infra-sandbox-agent:dev, `make image`) and a pause image built from Kubernetes'
# pause.c are imported into containerd (no registry): pods use imagePullPolicy: Never (or IfNotPresent).
#
# The last two lines it prints:
#   KUBECONFIG=PATH     admin credentials (client certificate, system:masters), server https://127.0.0.1:6443
#   CLUSTER_NET=CMD     a command prefix that runs a program inside the cluster's network namespace
# Environment: CLUSTER_STATE (default /var/lib/infra-sandbox/cluster), CLUSTER_CACHE (binaries, see
# build.sh), IMAGE (default infra-sandbox-agent:dev). Root only.
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
# shellcheck source=scripts/cluster/common.sh
. "$repo/scripts/cluster/common.sh"

[ "$(id -u)" -eq 0 ] || die "must run as root (network, mount and PID namespaces, cgroups, containerd); run: sudo make cluster"

if cluster_running; then
	echo "cluster: already running (state $state; make cluster-down removes it)" >&2
	print_lines
	exit 0
fi
if [ -e "$state/node.pid" ] || ip netns list | grep -qw "$netns"; then
	die "a previous cluster left state behind ($state, netns $netns); run: make cluster-down"
fi

t0=$(date +%s)
cache=$(bash "$repo/scripts/cluster/build.sh" | tail -n1)
[ -x "$cache/bin/kubelet" ] || die "no kubelet in $cache/bin after the build"

command -v podman >/dev/null || die "podman is missing (the sandbox image lives in root's podman storage): scripts/deps.sh"
command -v jq >/dev/null || die "jq is missing: scripts/deps.sh"
# kube-proxy's tools (build.sh installs them with the binaries)
for t in iptables iptables-restore conntrack; do
	command -v "$t" >/dev/null || die "$t is missing (kube-proxy needs it): apt-get install iptables conntrack"
done
export CONTAINERS_CONF=${CONTAINERS_CONF:-$repo/tests/podman/containers.conf}
if ! podman image exists "$image"; then
	echo "cluster: $image is not in root's podman storage; building it (make image)" >&2
	IMAGE=$image bash "$repo/scripts/image.sh" "$repo/build/sandbox-agent" >&2
fi

rm -rf --one-file-system "${state:?}"
mkdir -p "$state"/{pki,images,log,cni,cni-ipam,kubelet/seccomp/infra-sandbox,varlog,cni-lib}
chmod 0755 "$state"

# ---- what the cluster changes on the host, saved to be restored by down.sh ----
# The kubelet sets these sysctls (the host's, not per namespace).
for s in "${kubelet_sysctls[@]}"; do
	echo "$s $(sysctl -n "$s")"
done >"$state/sysctl.saved"
# The kubelet (cgroupfs driver) creates kubepods/ in every cgroup v1 hierarchy; down.sh removes the
# ones that did not exist before.
for d in /sys/fs/cgroup/*/; do
	[ -d "$d" ] && [ ! -L "${d%/}" ] && [ ! -e "${d}kubepods" ] && echo "${d}kubepods"
done >"$state/cgroups.created" || true

# ---- certificates ----
pki=$state/pki
ossl() { openssl "$@" 2>>"$state/log/openssl.log"; }
ossl req -x509 -newkey rsa:2048 -nodes -keyout "$pki/ca.key" -out "$pki/ca.crt" -days 30 \
	-subj /CN=infra-sandbox-cluster-ca
cert() { # NAME CN O [SAN]
	local name=$1 cn=$2 o=$3 san=${4:-}
	local subj="/CN=$cn"
	[ -n "$o" ] && subj="/O=$o/CN=$cn"
	ossl req -newkey rsa:2048 -nodes -keyout "$pki/$name.key" -out "$pki/$name.csr" -subj "$subj"
	{
		echo "basicConstraints=CA:FALSE"
		if [ -n "$san" ]; then
			echo "extendedKeyUsage=serverAuth"
			echo "subjectAltName=$san"
		else
			echo "extendedKeyUsage=clientAuth"
		fi
	} >"$pki/$name.ext"
	ossl x509 -req -in "$pki/$name.csr" -CA "$pki/ca.crt" -CAkey "$pki/ca.key" -CAcreateserial \
		-days 30 -extfile "$pki/$name.ext" -out "$pki/$name.crt"
	rm -f "$pki/$name.csr" "$pki/$name.ext"
}
cert apiserver kube-apiserver "" \
	"IP:127.0.0.1,IP:10.250.0.1,IP:10.0.0.1,DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local"
cert admin infra-sandbox-admin system:masters
cert apiserver-kubelet kube-apiserver-kubelet-client system:masters
cert kubelet system:node:localhost system:nodes
cert controller-manager system:kube-controller-manager ""
cert scheduler system:kube-scheduler ""
# kube-proxy's user: the default ClusterRoleBinding system:node-proxier names it
cert kube-proxy system:kube-proxy ""
ossl genrsa -out "$pki/sa.key" 2048
ossl rsa -in "$pki/sa.key" -pubout -out "$pki/sa.pub"
chmod 0600 "$pki"/*.key

kubeconfig() { # FILE CERTNAME
	cat >"$1" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: infra-sandbox
  cluster:
    server: https://127.0.0.1:6443
    certificate-authority-data: $(base64 -w0 "$pki/ca.crt")
users:
- name: $2
  user:
    client-certificate-data: $(base64 -w0 "$pki/$2.crt")
    client-key-data: $(base64 -w0 "$pki/$2.key")
contexts:
- name: infra-sandbox
  context:
    cluster: infra-sandbox
    user: $2
current-context: infra-sandbox
EOF
	chmod 0600 "$1"
}
kubeconfig "$state/admin.kubeconfig" admin
kubeconfig "$state/kubelet.kubeconfig" kubelet
kubeconfig "$state/controller-manager.kubeconfig" controller-manager
kubeconfig "$state/scheduler.kubeconfig" scheduler
kubeconfig "$state/kube-proxy.kubeconfig" kube-proxy

# ---- images: docker-archive tarballs for `ctr images import` ----
podman save --quiet --format docker-archive -o "$state/images/agent.tar" "$image"
# podman names it localhost/NAME; the kubelet asks for NAME, which the CRI reads as docker.io/library/NAME.
src_ref=$(podman image inspect --format '{{index .RepoTags 0}}' "$image")
case $image in
*/*) dst_ref=docker.io/$image ;;
*) dst_ref=docker.io/library/$image ;;
esac
echo "$src_ref $dst_ref" >"$state/images/aliases"

# The pause image: the static pause binary as a one-layer docker-archive.
pw=$state/images/pause.work
mkdir -p "$pw/rootfs" "$pw/out/layer"
install -m 0755 "$cache/bin/pause" "$pw/rootfs/pause"
tar --numeric-owner --owner=0 --group=0 --mtime=@0 -C "$pw/rootfs" -cf "$pw/out/layer/layer.tar" pause
layer_sha=$(sha256sum "$pw/out/layer/layer.tar" | cut -d' ' -f1)
mv "$pw/out/layer" "$pw/out/$layer_sha"
printf '{"architecture":"amd64","os":"linux","config":{"Entrypoint":["/pause"],"User":"65535:65535"},"rootfs":{"type":"layers","diff_ids":["sha256:%s"]}}' \
	"$layer_sha" >"$pw/out/config.json"
config_sha=$(sha256sum "$pw/out/config.json" | cut -d' ' -f1)
mv "$pw/out/config.json" "$pw/out/$config_sha.json"
printf '[{"Config":"%s.json","RepoTags":["%s"],"Layers":["%s/layer.tar"]}]' \
	"$config_sha" "$pause_image" "$layer_sha" >"$pw/out/manifest.json"
tar -C "$pw/out" -cf "$state/images/pause.tar" .
rm -rf --one-file-system "${pw:?}"

# ---- configuration ----
# Pods must not inherit the host's resolv.conf: no DNS in this cluster.
printf '# infra-sandbox test cluster: no DNS\nnameserver 127.0.0.1\n' >"$state/resolv.conf"
install -m 0644 "$repo/images/seccomp.json" "$state/kubelet/seccomp/infra-sandbox/seccomp.json"

cat >"$state/cni/10-infra-sandbox.conflist" <<EOF
{
  "cniVersion": "0.4.0",
  "name": "infra-sandbox",
  "plugins": [
    {
      "type": "bridge",
      "bridge": "isb0",
      "isGateway": true,
      "ipMasq": false,
      "hairpinMode": false,
      "ipam": {
        "type": "host-local",
        "ranges": [[{"subnet": "10.251.0.0/24"}]],
        "routes": [{"dst": "0.0.0.0/0"}],
        "dataDir": "$state/cni-ipam"
      }
    }
  ]
}
EOF

cat >"$state/containerd.toml" <<EOF
version = 2
root = "$state/containerd"
state = "/run/containerd"
oom_score = 0
# opt would create /opt/containerd on the host; the others are snapshotters this cluster does not use.
disabled_plugins = ["io.containerd.internal.v1.opt", "io.containerd.snapshotter.v1.aufs",
  "io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.zfs",
  "io.containerd.snapshotter.v1.devmapper", "io.containerd.tracing.processor.v1.otlp"]

[grpc]
  address = "/run/containerd/containerd.sock"

[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "$pause_image"
  # This machine lacks CAP_SYS_RESOURCE: containers may only raise their oom_score_adj.
  restrict_oom_score_adj = true
  enable_selinux = false
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        BinaryName = "$(command -v runc)"
        SystemdCgroup = false
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = "$state/cni"
EOF

cat >"$state/kubelet.yaml" <<EOF
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: 127.0.0.1
port: 10250
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: false}
  x509: {clientCAFile: "$pki/ca.crt"}
authorization: {mode: AlwaysAllow}
cgroupDriver: cgroupfs
failSwapOn: false
oomScoreAdj: 0
maxOpenFiles: 20000
makeIPTablesUtilChains: false
resolvConf: "$state/resolv.conf"
volumePluginDir: "$state/kubelet/volume-plugins"
featureGates: {ProcMountType: true}
evictionHard: {memory.available: "100Mi", nodefs.available: "1%", imagefs.available: "1%"}
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
serializeImagePulls: false
# A changed ConfigMap or Secret reaches its pods at a pod's next sync (kubernetes_managers revokes a
# certificate through the deny list's ConfigMap): every 10 s here, 1 min by default.
syncFrequency: 10s
EOF

# kube-proxy: iptables mode in the cluster's namespace. masqueradeAll: a pod's connection to a
# Service whose endpoint is a pod on the same bridge is SNATed to the bridge's address, so that the
# answer comes back through the namespace's conntrack (and not straight over the bridge, which would
# need br_netfilter's bridge-nf-call-iptables). No conntrack sysctls (0s: left as they are: some are
# the host's), no OOM score change (the machine lacks CAP_SYS_RESOURCE), its ports on 127.0.0.1.
cat >"$state/kube-proxy.yaml" <<EOF
apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
clientConnection:
  kubeconfig: "$state/kube-proxy.kubeconfig"
mode: iptables
hostnameOverride: localhost
bindAddress: 10.250.0.1
clusterCIDR: 10.251.0.0/24
healthzBindAddress: 127.0.0.1:10256
metricsBindAddress: 127.0.0.1:10249
oomScoreAdj: 0
iptables:
  masqueradeAll: true
  syncPeriod: 30s
  minSyncPeriod: 0s
conntrack:
  maxPerCore: 0
  min: 0
  tcpEstablishedTimeout: 0s
  tcpCloseWaitTimeout: 0s
EOF

# ---- the network namespace: loopback, and an interface for the node IP (the kubelet refuses a
# loopback one). Nothing connects it to the host. ----
ip netns add "$netns"
ip netns exec "$netns" ip link set lo up
# (a veth pair with both ends in the namespace: this kernel has no dummy driver)
ip netns exec "$netns" ip link add node0 type veth peer name node1
ip netns exec "$netns" ip addr add 10.250.0.1/24 dev node0
ip netns exec "$netns" ip link set node1 up
ip netns exec "$netns" ip link set node0 up
# The Service range (10.0.0.0/24) via the node's interface: the namespace's own connections to a
# cluster IP need a route before kube-proxy's OUTPUT rules rewrite them (pods route by their gateway).
ip netns exec "$netns" ip route add 10.0.0.0/24 dev node0

# ---- start: PID 1 of a new PID namespace, inside the netns and a private mount namespace ----
setsid nsenter --net="/run/netns/$netns" unshare --pid --fork --mount --propagation private --mount-proc \
	bash "$repo/scripts/cluster/node.sh" "$state" "$cache" >"$state/log/node.log" 2>&1 </dev/null &
outer=$!
# unshare (which nsenter became) forks the namespace's PID 1; record it (its start time too, so that down.sh never signals a
# process that merely reused the number).
init=
for _ in $(seq 1 50); do
	init=$(cat "/proc/$outer/task/$outer/children" 2>/dev/null | awk '{print $1}')
	[ -n "$init" ] && break
	sleep 0.1
done
[ -n "$init" ] || die "the cluster's PID 1 did not start (log: $state/log/node.log)"
echo "$init $(proc_start "$init") $outer $(proc_start "$outer")" >"$state/node.pid"

for _ in $(seq 1 600); do
	[ -f "$state/node.ready" ] && break
	kill -0 "$init" 2>/dev/null || {
		tail -n 20 "$state/log/node.log" >&2
		die "the cluster stopped while starting (logs: $state/log/); run: make cluster-down"
	}
	sleep 0.2
done
[ -f "$state/node.ready" ] || die "the cluster did not start in 120 s (logs: $state/log/); run: make cluster-down"

# Ready: the node reports Ready and the default service account exists (pods need it).
api() { ip netns exec "$netns" curl -sf --cacert "$pki/ca.crt" --cert "$pki/admin.crt" --key "$pki/admin.key" "https://127.0.0.1:6443$1"; }
ok=
for _ in $(seq 1 120); do
	ready=$(api /api/v1/nodes/localhost 2>/dev/null | jq -r '.status.conditions[]? | select(.type=="Ready") | .status' || true)
	# ... and the `kubernetes` Service routes (kube-proxy's rules: the namespace's own connections
	# pass the same nat rules as the pods')
	if [ "$ready" = True ] && api /api/v1/namespaces/default/serviceaccounts/default >/dev/null 2>&1 &&
		ip netns exec "$netns" curl -sf --cacert "$pki/ca.crt" --cert "$pki/admin.crt" --key "$pki/admin.key" \
			https://10.0.0.1:443/readyz >/dev/null 2>&1; then
		ok=1
		break
	fi
	sleep 1
done
[ -n "$ok" ] || die "the node did not become Ready in 120 s (logs: $state/log/); run: make cluster-down"

echo "cluster: up in $(($(date +%s) - t0)) s (state $state, logs $state/log/)" >&2
print_lines
