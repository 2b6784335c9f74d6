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
packages=bash,git,ca-certificates,kubernetes-client
sandbox_uid=10001
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

# ---- the cached root filesystem: everything but the agent (scripts/image-rootfs.sh) ----

IMAGE_SCRIPT=image
# shellcheck source=scripts/image-rootfs.sh
. "$repo/scripts/image-rootfs.sh"
trap image_rootfs_cleanup EXIT

# The user sandbox, as the Containerfile's `useradd --uid 10001 --user-group --create-home` adds it.
sandbox_step() {
	image_add_user "$1" sandbox "$sandbox_uid" /home/sandbox /bin/bash
	install -d -m 0755 -o "$sandbox_uid" -g "$sandbox_uid" "$1/home/sandbox"
}
image_rootfs sandbox "$packages" "sandbox:$sandbox_uid:/bin/bash" sandbox_step

# ---- this build: the cached base plus the agent ----

# Root-owned and not writable by anyone else: the sandbox's uid must not be able to replace the
# agent binary (the runc CVE-2019-5736 class, ISOLATION.md).
install -D -m 0755 -o 0 -g 0 "$agent" "$work/stage/usr/local/bin/sandbox-agent"
agent_sha=$(sha256sum "$agent" | cut -d' ' -f1)
revision=$(git -C "$repo" rev-parse HEAD 2>/dev/null || echo unknown)

echo "image: importing into podman as $image"
# A copy of the cached archive with the agent appended: no unpacking of the base.
cp "$base" "$work/rootfs.tar"
tar --numeric-owner -rf "$work/rootfs.tar" -C "$work/stage" ./usr/local/bin/sandbox-agent
image_import "$work/rootfs.tar" "$image" \
	'ENTRYPOINT ["/usr/local/bin/sandbox-agent"]' \
	'CMD ["check"]' \
	"USER $sandbox_uid:$sandbox_uid" \
	'WORKDIR /home/sandbox' \
	'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
	'LABEL org.opencontainers.image.title=infra-sandbox-agent' \
	'LABEL org.opencontainers.image.description="infra-sandbox sandbox image: bash, coreutils, git, kubectl and the static sandbox-agent"' \
	"LABEL org.opencontainers.image.revision=$revision" \
	'LABEL org.opencontainers.image.base.name=debian:bookworm-slim' \
	"LABEL infra-sandbox.agent-sha256=$agent_sha"
echo "image: $image"
echo "agent sha256: $agent_sha"
