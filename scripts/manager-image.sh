#!/usr/bin/env bash
# `make manager-image`: builds the manager's image offline (no registry is reachable here) the way
# scripts/image.sh builds the sandbox image, and tags it infra-sandbox-manager:dev. A Debian bookworm
# minbase root filesystem from debootstrap with git, ca-certificates and the Debian packages that hold
# the shared libraries the daemon links (found with ldd and dpkg -S on this host, which must be
# bookworm so that the packages are the ones the binaries were built against); the three programs in
# /usr/local/bin (sandbox-manager, the daemon it execs from its own directory, the static
# sandbox-agent), root-owned; the non-root user manager (10001) and its directories under
# /var/lib/sandbox-manager, where the Deployment mounts its state and workspaces: nothing is written
# to the root filesystem, so it runs with a read-only one. The root filesystem is cached under
# build/image/, keyed by suite, mirror and package list, so a rebuild only adds the binaries again.
# Usage: scripts/manager-image.sh [BUILD] (default build). Root only (debootstrap; root's podman storage).
# Environment: IMAGE (tag, default infra-sandbox-manager:dev), DEBIAN_MIRROR (default
# http://deb.debian.org/debian), CONTAINERS_CONF (default tests/podman/containers.conf). The root
# filesystem's steps are scripts/image-rootfs.sh's, shared with scripts/postgres-image.sh.
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
IMAGE_SCRIPT=manager-image
# shellcheck source=scripts/image-rootfs.sh
. "$repo/scripts/image-rootfs.sh"
build=${1:-$repo/build}
image=${IMAGE:-infra-sandbox-manager:dev}
suite=bookworm
manager_uid=10001
programs=(sandbox-manager sandbox-manager-daemon sandbox-agent)
export CONTAINERS_CONF=${CONTAINERS_CONF:-$repo/tests/podman/containers.conf}
die() { image_die "$@"; }

# ---- preconditions: say what is missing and how to get it ----

[ "$(id -u)" -eq 0 ] || die "must run as root (debootstrap creates device nodes and root-owned files, and the image goes into root's podman storage); run: sudo make manager-image"
for c in podman readelf ldd dpkg-query; do
	command -v "$c" >/dev/null || die "$c is missing; install it (scripts/deps.sh)"
done
for p in "${programs[@]}"; do
	[ -x "$build/$p" ] || die "no $p in $build; build it first: make"
done
# The image holds what the host's Debian packages provide; another suite's libraries could differ.
# shellcheck disable=SC1091 # the host's file
host_suite=$(. /etc/os-release && echo "${VERSION_CODENAME:-}")
[ "$host_suite" = "$suite" ] ||
	die "this host is '$host_suite', not $suite: the binaries must be built against $suite's libraries"
# A sanitizer build links libasan, which no runtime image should carry.
if ldd "$build/sandbox-manager-daemon" | grep -q 'libasan\|libubsan'; then
	die "$build/sandbox-manager-daemon is a sanitizer build; the image needs the plain one: make (SANITIZE=0)"
fi
if readelf -lW "$build/sandbox-agent" | grep -q 'Requesting program interpreter'; then
	die "$build/sandbox-agent is dynamically linked; the image needs the static agent"
fi
[ -f "$CONTAINERS_CONF" ] || die "CONTAINERS_CONF names $CONTAINERS_CONF, which does not exist"

# manager_image_packages: the Debian packages holding every shared library the programs load (ldd's
# resolved paths, dpkg -S on each; libc6 is in minbase already), one per line, sorted.
manager_image_packages() {
	local p lib pkg
	for p in "${programs[@]}"; do
		ldd "$build/$p" 2>/dev/null | awk '$2 == "=>" && $3 ~ /^\// { print $3 } $1 ~ /^\// { print $1 }' || true
	done | sort -u | while read -r lib; do
		# dpkg knows /lib/... and /usr/lib/... apart (merged /usr): try the path and its variants
		pkg=$(dpkg -S "$lib" 2>/dev/null || dpkg -S "$(realpath "$lib")" 2>/dev/null ||
			dpkg -S "${lib#/usr}" 2>/dev/null || dpkg -S "/usr$lib" 2>/dev/null) ||
			die "no Debian package holds $lib (ldd of the programs)"
		echo "${pkg%%:*}"
	done | sort -u | grep -v '^libc6$'
}

# manager_step ROOT: the user manager, and the mount points of the state directory and the
# workspaces (the Deployment's volumes), the manager's own so that a run without volumes can write.
manager_step() {
	image_add_user "$1" manager "$manager_uid" /var/lib/sandbox-manager
	install -d -m 0755 -o 0 -g 0 "$1/var/lib/sandbox-manager"
	install -d -m 0700 -o "$manager_uid" -g "$manager_uid" "$1/var/lib/sandbox-manager/state"
	install -d -m 0755 -o "$manager_uid" -g "$manager_uid" "$1/var/lib/sandbox-manager/volume"
}

libs=$(manager_image_packages | paste -sd, -)
# slirp4netns: the process backend's network for its sandboxes (policy open), the volume probe's among them
packages=git,ca-certificates,slirp4netns${libs:+,$libs}
trap image_rootfs_cleanup EXIT
image_rootfs manager "$packages" "manager:$manager_uid state volume" manager_step

# ---- this build: the cached base plus the programs ----

# Root-owned and not writable by the manager's uid: a compromised manager process cannot replace
# the agent that every sandbox runs, nor its own daemon.
for p in "${programs[@]}"; do
	install -D -m 0755 -o 0 -g 0 "$build/$p" "$work/stage/usr/local/bin/$p"
done
sums=$(cd "$work/stage/usr/local/bin" && sha256sum "${programs[@]}" | sha256sum | cut -c1-64)
revision=$(git -C "$repo" rev-parse HEAD 2>/dev/null || echo unknown)

echo "manager-image: importing into podman as $image"
cp "$base" "$work/rootfs.tar"
tar --numeric-owner -rf "$work/rootfs.tar" -C "$work/stage" \
	./usr/local/bin/sandbox-manager ./usr/local/bin/sandbox-manager-daemon ./usr/local/bin/sandbox-agent
image_import "$work/rootfs.tar" "$image" \
	'ENTRYPOINT ["/usr/local/bin/sandbox-manager"]' \
	'CMD ["--help"]' \
	"USER $manager_uid:$manager_uid" \
	'WORKDIR /var/lib/sandbox-manager' \
	'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
	'ENV HOME=/var/lib/sandbox-manager' \
	'LABEL org.opencontainers.image.title=infra-sandbox-manager' \
	'LABEL org.opencontainers.image.description="infra-sandbox manager image: sandbox-manager, its daemon and libraries, the static sandbox-agent, git"' \
	"LABEL org.opencontainers.image.revision=$revision" \
	'LABEL org.opencontainers.image.base.name=debian:bookworm-slim' \
	"LABEL infra-sandbox.programs-sha256=$sums"
echo "manager-image: $image"
echo "packages: $packages"
echo "programs sha256: $sums"
