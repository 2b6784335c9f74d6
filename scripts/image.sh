#!/usr/bin/env bash
# `make image`: builds the sandbox image offline (no registry is reachable here) and tags it
# infra-sandbox-agent:dev. The same contents as images/Containerfile: a Debian bookworm minbase root
# filesystem from debootstrap with bash, coreutils, git, ca-certificates and kubectl (Debian's
# kubernetes-client: a grant's cluster reached through the manager's edge, issue 28), the static agent at
# /usr/local/bin/sandbox-agent, the non-root user sandbox (10001). The root filesystem is cached under
# build/image/, keyed by suite, mirror and package list, so a rebuild only adds the agent again.
# Usage: scripts/image.sh [AGENT] (default build/sandbox-agent). Root only: debootstrap and the
# root podman storage that the tests' podman service uses both need it.
# Environment: IMAGE (tag, default infra-sandbox-agent:dev), DEBIAN_MIRROR (default
# http://deb.debian.org/debian), CONTAINERS_CONF (default tests/podman/containers.conf).
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
agent=${1:-$repo/build/sandbox-agent}
image=${IMAGE:-infra-sandbox-agent:dev}
mirror=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
suite=bookworm
packages=bash,git,ca-certificates,kubernetes-client
sandbox_uid=10001
cache_dir=$repo/build/image
export CONTAINERS_CONF=${CONTAINERS_CONF:-$repo/tests/podman/containers.conf}

die() {
	echo "image: $*" >&2
	exit 1
}

# ---- preconditions: say what is missing and how to get it ----

[ "$(id -u)" -eq 0 ] || die "must run as root (debootstrap creates device nodes and root-owned files, and the image goes into root's podman storage); run: sudo make image"
command -v podman >/dev/null || die "podman is missing; install it: apt-get install podman runc (or run scripts/deps.sh)"
command -v readelf >/dev/null || die "readelf is missing; install it: apt-get install binutils"
if [ ! -f "$agent" ] || [ ! -x "$agent" ]; then
	die "no agent at $agent; build it first: make"
fi
# A dynamically linked agent (the ASan build) would not find its libraries in the image.
if readelf -lW "$agent" | grep -q 'Requesting program interpreter'; then
	die "$agent is dynamically linked; the image needs the static agent: make (SANITIZE=0), then build/sandbox-agent"
fi
[ -f "$CONTAINERS_CONF" ] || die "CONTAINERS_CONF names $CONTAINERS_CONF, which does not exist"

# ---- the cached root filesystem: everything but the agent ----

key=$(printf '%s\n' "$suite" "$mirror" minbase "$packages" "sandbox:$sandbox_uid" | sha256sum | cut -c1-16)
base=$cache_dir/rootfs-$suite-$key.tar
mkdir -p "$cache_dir"
work=$(mktemp -d "$cache_dir/work.XXXXXX")

# debootstrap mounts /proc and /sys inside the target while it runs; a failed run may leave them.
# Unmount before removing, and never cross into another file system while removing.
cleanup() {
	local m
	[ -d "$work" ] || return 0
	while read -r m; do
		umount -l "$m" || true
	done < <(findmnt -rn -o TARGET | grep -F "$work/" | sort -r || true)
	rm -rf --one-file-system "$work"
}
trap cleanup EXIT

if [ ! -s "$base" ]; then
	command -v debootstrap >/dev/null ||
		die "debootstrap is missing; install it: apt-get install debootstrap (or run scripts/deps.sh)"
	echo "image: debootstrap $suite (minbase + $packages) from $mirror, cached as $base"
	t0=$(date +%s)
	root=$work/rootfs
	if ! debootstrap --variant=minbase --include="$packages" "$suite" "$root" "$mirror" \
		>"$work/debootstrap.log" 2>&1; then
		tail -n 20 "$work/debootstrap.log" >&2
		if [ -f "$root/debootstrap/debootstrap.log" ]; then
			tail -n 20 "$root/debootstrap/debootstrap.log" >&2
		fi
		die "debootstrap failed (mirror $mirror; set DEBIAN_MIRROR to use another)"
	fi
	# What an image must not carry: package caches and lists (the Containerfile's apt-get clean
	# and rm -rf /var/lib/apt/lists), debootstrap's leftovers, logs. /dev, /proc and /sys are the
	# runtime's to fill.
	rm -rf "${root:?}/debootstrap" "${root:?}/var/cache/apt/"*.bin "${root:?}/var/cache/apt/archives/"*.deb \
		"${root:?}/var/lib/apt/lists/"* "${root:?}/var/log/"*.log "${root:?}/var/log/apt/"* "${root:?}/dev/"*
	# The user sandbox, as the Containerfile's `useradd --uid 10001 --user-group --create-home`
	# adds it (written directly: useradd would run the target's binaries on the host).
	echo "sandbox:x:$sandbox_uid:$sandbox_uid:infra-sandbox:/home/sandbox:/bin/bash" >>"$root/etc/passwd"
	echo "sandbox:x:$sandbox_uid:" >>"$root/etc/group"
	echo "sandbox:!:19000:0:99999:7:::" >>"$root/etc/shadow"
	echo "sandbox:!::" >>"$root/etc/gshadow"
	install -d -m 0755 -o "$sandbox_uid" -g "$sandbox_uid" "$root/home/sandbox"
	tar --numeric-owner --xattrs -C "$root" -cf "$base.tmp" .
	mv "$base.tmp" "$base"
	rm -rf --one-file-system "$root"
	echo "image: root filesystem cached in $(($(date +%s) - t0)) s"
fi

# ---- this build: the cached base plus the agent ----

# Root-owned and not writable by anyone else: the sandbox's uid must not be able to replace the
# agent binary (the runc CVE-2019-5736 class, ISOLATION.md).
install -D -m 0755 -o 0 -g 0 "$agent" "$work/stage/usr/local/bin/sandbox-agent"
agent_sha=$(sha256sum "$agent" | cut -d' ' -f1)
revision=$(git -C "$repo" rev-parse HEAD 2>/dev/null || echo unknown)
# The image this build replaces, removed below once nothing refers to it.
old_iid=$(podman image inspect --format '{{.Id}}' "$image" 2>/dev/null || true)

echo "image: importing into podman as $image"
# A copy of the cached archive with the agent appended: no unpacking of the base.
cp "$base" "$work/rootfs.tar"
tar --numeric-owner -rf "$work/rootfs.tar" -C "$work/stage" ./usr/local/bin/sandbox-agent
iid=$(podman import --quiet \
	--change 'ENTRYPOINT ["/usr/local/bin/sandbox-agent"]' \
	--change 'CMD ["check"]' \
	--change "USER $sandbox_uid:$sandbox_uid" \
	--change 'WORKDIR /home/sandbox' \
	--change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
	--change 'LABEL org.opencontainers.image.title=infra-sandbox-agent' \
	--change 'LABEL org.opencontainers.image.description="infra-sandbox sandbox image: bash, coreutils, git, kubectl and the static sandbox-agent"' \
	--change "LABEL org.opencontainers.image.revision=$revision" \
	--change 'LABEL org.opencontainers.image.base.name=debian:bookworm-slim' \
	--change "LABEL infra-sandbox.agent-sha256=$agent_sha" \
	--message "infra-sandbox offline image build (scripts/image.sh)" \
	"$work/rootfs.tar" "$image")
iid=${iid##*:}
[ -n "$iid" ] || die "podman import printed no image id"
# A rebuild leaves the previous image untagged; drop it unless a container still uses it.
if [ -n "$old_iid" ] && [ "$old_iid" != "$iid" ]; then
	podman rmi "$old_iid" >/dev/null 2>&1 || true
fi

echo "image: $image"
echo "image id: $iid"
echo "agent sha256: $agent_sha"
