#!/usr/bin/env bash
# The binaries of the test cluster (`make cluster`), built once per machine and cached outside the clone
# in $CLUSTER_CACHE (default /var/cache/infra-sandbox/kubernetes-1.20.2/), keyed by the Kubernetes
# version and a revision of this recipe, so every clone and every CI run on the machine shares them.
#
# Debian bookworm ships no kube-apiserver or kubelet, but its `kubernetes` source package (1.20.2)
# builds them with the packaged Go (1.19). Steps:
#   1. apt-get install golang-go dpkg-dev (no daemons); etcd-server and containerd are fetched with
#      `apt-get download` and unpacked with `dpkg -x` into the cache, so installing them starts no
#      service on the host and changes nothing outside the cache.
#   2. the source via a deb-src entry kept in a PRIVATE apt configuration (the system's sources and
#      lists are never touched), `dpkg-source -x`.
#   3. vendor/github.com/modern-go/reflect2 replaced by Debian's 1.0.2 (golang-github-modern-go-reflect2-dev):
#      the vendored 1.0.1 makes a Go 1.19 kube-apiserver crash (SIGSEGV) on any pretty-printed answer.
#   4. make WHAT="cmd/kube-apiserver cmd/kubelet cmd/kube-scheduler cmd/kube-controller-manager",
#      static (CGO_ENABLED=0); about 4.5 min on 2 cores, 2.7 GB of scratch, removed afterwards.
#   5. the pause image from build/pause/linux/pause.c (static), as a docker-archive tarball.
#   6. kube-proxy (cmd/kube-proxy, static), under its OWN stamp (.kube-proxy-$proxy_recipe): a cache
#      that already holds the four binaries above (stamp .complete-$recipe) gets only this one built
#      (the source is fetched again, about 4 min); a fresh cache gets all five from one source tree.
#      It runs in iptables mode inside the node (scripts/cluster/node.sh), with the host's iptables
#      and conntrack (Debian packages iptables, conntrack).
# Root only. Prints the cache directory on its last line.
set -euo pipefail

k8s_version=1.20.2
recipe=1 # bump when a step below changes what lands in the cache
cache=${CLUSTER_CACHE:-/var/cache/infra-sandbox/kubernetes-$k8s_version}
# shellcheck source=scripts/private-apt.sh
. "$(dirname "${BASH_SOURCE[0]}")/../private-apt.sh"

die() {
	echo "cluster-build: $*" >&2
	exit 1
}

[ "$(id -u)" -eq 0 ] || die "must run as root (it installs Debian packages and writes $cache); run: sudo make cluster"

stamp=$cache/.complete-$recipe
proxy_recipe=1 # bump when step 6 changes
proxy_stamp=$cache/.kube-proxy-$proxy_recipe
if [ -f "$stamp" ] && [ -f "$proxy_stamp" ]; then
	echo "$cache"
	exit 0
fi

mkdir -p "$cache"
# One build at a time per cache (two clones running `make cluster` at once).
exec 9>"$cache/.lock"
flock 9
if [ -f "$stamp" ] && [ -f "$proxy_stamp" ]; then
	echo "$cache"
	exit 0
fi
# What this run builds: the four binaries (and etcd, containerd, pause) unless their stamp is there,
# kube-proxy unless its own stamp is.
main_bins=(kube-apiserver kubelet kube-scheduler kube-controller-manager)
bins=()
[ -f "$stamp" ] || bins+=("${main_bins[@]}")
[ -f "$proxy_stamp" ] || bins+=(kube-proxy)

export DEBIAN_FRONTEND=noninteractive
t0=$(date +%s)

# ---- 1. packages ----
need=()
for p in golang-go dpkg-dev gcc libc6-dev rsync curl util-linux; do
	status=$(dpkg-query -W -f='${db:Status-Status}' "$p" 2>/dev/null || true)
	[ "$status" = installed ] || need+=("$p")
done
for p in runc containernetworking-plugins iptables conntrack; do
	status=$(dpkg-query -W -f='${db:Status-Status}' "$p" 2>/dev/null || true)
	[ "$status" = installed ] || need+=("$p")
done
if [ ${#need[@]} -gt 0 ]; then
	echo "cluster-build: apt-get install ${need[*]}" >&2
	apt-get update -qq
	apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi

work=$(mktemp -d /var/tmp/infra-sandbox-kbuild.XXXXXX)
cleanup() {
	# Go's module cache is read-only; make it removable first.
	[ -d "$work" ] || return 0
	chmod -R u+w "$work" 2>/dev/null || true
	rm -rf --one-file-system "$work"
}
trap cleanup EXIT

# The private apt configuration (scripts/private-apt.sh): binaries and the source, from the mirror.
echo "cluster-build: private apt lists from $apt_mirror" >&2
private_apt "$work/apt" deb deb-src

# ---- daemons and sources that are unpacked, not installed ----
cd "$work"
mkdir -p "$work/root" "$cache/bin"
apt-get "${papt[@]}" download golang-github-modern-go-reflect2-dev >/dev/null
dpkg -x golang-github-modern-go-reflect2-dev_*.deb "$work/root"
if [ ! -f "$stamp" ]; then
	apt-get "${papt[@]}" download etcd-server containerd >/dev/null
	for deb in etcd-server_*.deb containerd_*.deb; do
		dpkg -x "$deb" "$work/root"
	done
	install -m 0755 "$work/root/usr/bin/etcd" "$cache/bin/etcd"
	for b in containerd containerd-shim-runc-v2 ctr; do
		install -m 0755 "$work/root/usr/bin/$b" "$cache/bin/$b"
	done
fi

# ---- 2. the kubernetes source ----
echo "cluster-build: apt-get source kubernetes" >&2
apt-get "${papt[@]}" source --download-only "kubernetes=$k8s_version*" >/dev/null 2>&1 ||
	apt-get "${papt[@]}" source --download-only kubernetes >/dev/null
dsc=$(ls kubernetes_*.dsc | head -n1)
dpkg-source --no-check -x "$dsc" src >/dev/null
src=$work/src

# ---- 3. reflect2 1.0.2 ----
r2=$work/root/usr/share/gocode/src/github.com/modern-go/reflect2
[ -f "$r2/reflect2.go" ] || die "golang-github-modern-go-reflect2-dev has no sources at $r2"
rm -rf "${src:?}/vendor/github.com/modern-go/reflect2"
mkdir -p "$src/vendor/github.com/modern-go/reflect2"
find "$r2" -maxdepth 1 -type f \( -name '*.go' -o -name '*.s' -o -name LICENSE \) ! -name '*_test.go' \
	-exec cp {} "$src/vendor/github.com/modern-go/reflect2/" \;
sed -i 's#^github.com/modern-go/reflect2 v1.0.1$#github.com/modern-go/reflect2 v1.0.2#;s#^\# github.com/modern-go/reflect2 v1.0.1$#\# github.com/modern-go/reflect2 v1.0.2#' \
	"$src/vendor/modules.txt"
sed -i 's#github.com/modern-go/reflect2 v1.0.1#github.com/modern-go/reflect2 v1.0.2#' "$src/go.mod"

# ---- 4. (and 6.) build ----
echo "cluster-build: building ${bins[*]} (about 5 min for all, 4 for kube-proxy alone)" >&2
what=
for b in "${bins[@]}"; do what+=" cmd/$b"; done
t_make=$(date +%s)
(
	cd "$src"
	export GOPATH=$src/.go GOCACHE=$work/gocache CGO_ENABLED=0
	make WHAT="${what# }"
) >"$work/make.log" 2>&1 || {
	tail -n 40 "$work/make.log" >&2
	die "the Kubernetes build failed"
}
echo "cluster-build: make took $(($(date +%s) - t_make)) s" >&2
for b in "${bins[@]}"; do
	f=$(find "$src/_output" -type f -name "$b" -perm -u+x | head -n1)
	[ -n "$f" ] || die "the build produced no $b"
	install -m 0755 "$f" "$cache/bin/$b"
done

# ---- 5. the pause image ----
if [ ! -f "$stamp" ]; then
	pause_dir=$work/pause
	mkdir -p "$pause_dir/rootfs"
	gcc -Os -static -DVERSION=v3.4-infra-sandbox -o "$pause_dir/rootfs/pause" "$src/build/pause/linux/pause.c"
	strip "$pause_dir/rootfs/pause" 2>/dev/null || true
	cp "$src/build/pause/linux/pause.c" "$cache/pause.c"
	echo "$k8s_version" >"$cache/version"
	install -m 0755 "$pause_dir/rootfs/pause" "$cache/bin/pause"
	touch "$stamp"
fi
echo "cluster-build: built in $(($(date +%s) - t0)) s" >&2
touch "$proxy_stamp"
echo "$cache"
