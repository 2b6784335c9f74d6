#!/usr/bin/env bash
# `make cluster-image`: import images from root's podman storage into the running test cluster's
# containerd (under the names the kubelet asks for), so that new pods run them without a
# cluster-down/up. With no arguments, the sandbox image `make image` just built ($IMAGE, default
# infra-sandbox-agent:dev); with arguments, those images, e.g. the managers' and PostgreSQL's for
# deploy/kubernetes (`sudo scripts/cluster/image.sh infra-sandbox-manager:dev
# infra-sandbox-postgres:dev`, after make manager-image postgres-image). Pods already running keep the
# image they started with. Root only.
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
# shellcheck source=scripts/cluster/common.sh
. "$repo/scripts/cluster/common.sh"

[ "$(id -u)" -eq 0 ] || die "must run as root (the node's mount namespace and containerd); run: sudo make cluster-image"
cluster_running || die "no test cluster is running (make cluster brings one up)"
read -r pid _ <"$state/node.pid"
cache=$(bash "$repo/scripts/cluster/build.sh" | tail -n1) # ctr is built with the binaries
ctr=$cache/bin/ctr
export CONTAINERS_CONF=${CONTAINERS_CONF:-$repo/tests/podman/containers.conf}

# containerd's socket is in the node's private mount namespace (node.sh: /run/containerd on a tmpfs)
nctr() {
	nsenter -t "$pid" -m "$ctr" --address /run/containerd/containerd.sock -n k8s.io "$@" >>"$state/log/images.log" 2>&1
}

[ $# -gt 0 ] || set -- "$image"
for img in "$@"; do
	podman image exists "$img" || die "$img is not in root's podman storage"
	tar=$state/images/import.tar
	[ "$img" = "$image" ] && tar=$state/images/agent.tar # the one up.sh saved
	rm -f "$tar"
	podman save --quiet --format docker-archive -o "$tar" "$img"
	nctr images import "$tar" || die "ctr images import $img failed (see $state/log/images.log)"
	# podman names it localhost/NAME; the kubelet asks for NAME, which the CRI reads as
	# docker.io/library/NAME (docker.io/NAME when NAME has a slash)
	src_ref=$(podman image inspect --format '{{index .RepoTags 0}}' "$img")
	case $img in
	*/*) dst_ref=docker.io/$img ;;
	*) dst_ref=docker.io/library/$img ;;
	esac
	nctr images tag --force "$src_ref" "$dst_ref" || die "ctr images tag $src_ref $dst_ref failed (see $state/log/images.log)"
	[ "$img" = "$image" ] || rm -f "$tar"
	echo "cluster: imported $img ($(podman image inspect --format '{{.Id}}' "$img" | cut -c1-12))"
done
