#!/usr/bin/env bash
# `make cluster-image`: import the sandbox image `make image` just built into the running test
# cluster's containerd (under the same name), so that new pods run the new agent without a
# cluster-down/up. Pods already running keep the image they started with. Root only.
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
# shellcheck source=scripts/cluster/common.sh
. "$repo/scripts/cluster/common.sh"

[ "$(id -u)" -eq 0 ] || die "must run as root (the node's mount namespace and containerd); run: sudo make cluster-image"
cluster_running || die "no test cluster is running (make cluster brings one up)"
read -r pid _ <"$state/node.pid"
cache=$(bash "$repo/scripts/cluster/build.sh" | tail -n1) # ctr is built with the binaries
ctr=$cache/bin/ctr

rm -f "$state/images/agent.tar"
podman save --quiet --format docker-archive -o "$state/images/agent.tar" "$image"
# containerd's socket is in the node's private mount namespace (node.sh: /run/containerd on a tmpfs)
nsenter -t "$pid" -m "$ctr" --address /run/containerd/containerd.sock -n k8s.io images import "$state/images/agent.tar" \
	>>"$state/log/images.log" 2>&1 || die "ctr images import failed (see $state/log/images.log)"
while read -r src dst; do
	nsenter -t "$pid" -m "$ctr" --address /run/containerd/containerd.sock -n k8s.io images tag --force "$src" "$dst" \
		>>"$state/log/images.log" 2>&1 || die "ctr images tag $src $dst failed (see $state/log/images.log)"
done <"$state/images/aliases"
echo "cluster: imported $image ($(podman image inspect --format '{{.Id}}' "$image" | cut -c1-12))"
