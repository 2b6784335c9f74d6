#!/usr/bin/env bash
# The dependency step, called by the Makefile (and .ci/run): every Debian package that the build,
# the tests and the demo need. As root it installs what is missing with apt-get; otherwise it
# prints the exact apt-get line to run and fails. Nothing else is ever downloaded.
# sqlite3: the live backup of records.db that docs/operations.md describes (and its test);
# systemd: systemd-analyze verify of the units (tests/integration/manager_install.sh; no running
# systemd is needed). libpq-dev: the records' PostgreSQL store (`serve --store postgres:...`);
# postgresql-15: its binaries, for the servers the tests start of their own on a unix socket
# (tests/support/pg.sh); the package's own cluster is not used. slirp4netns: the network policy
# `open` of the process backend's sandboxes (manager/backend/process_net.c).
# python3-yaml: test_backend_kubernetes reads deploy/kubernetes/*.yaml (the NetworkPolicy's selectors
# against the labels the backend sets).
# bubblewrap: an anchor of `make bench` only (bubblewrap with user and PID namespaces, beside the
# kernel's floor; scripts/bench-agent.sh), never used by the project itself.
# musl-tools, dpkg-dev, cmake, gperf: the static programs' libraries built against musl from
# Debian's sources (scripts/musl-libs.sh, which the Makefile's dependency step runs after this one;
# gperf makes libseccomp's syscall tables).
# libmicrohttpd-dev: the manager's HTTP listeners (the metrics listener, manager/core/metrics_http.c;
# `mcp --http`, manager/front/mcp_http.c; issue 28's egress proxy), linked into the daemon only.
set -euo pipefail

packages=(
	build-essential pkg-config clang
	libcap-dev libseccomp-dev libmbedtls-dev libprotobuf-c-dev protobuf-c-compiler
	libcurl4-openssl-dev libsqlite3-dev libpq-dev libjansson-dev libcmocka-dev libmicrohttpd-dev
	git jq util-linux procps passwd iproute2 nodejs python3 python3-yaml openssl
	podman runc uidmap debootstrap curl
	sqlite3 systemd postgresql-15 slirp4netns bubblewrap
	musl-tools dpkg-dev cmake gperf
)

missing=()
for p in "${packages[@]}"; do
	# dpkg-query prints the status word; anything but "installed" counts as missing.
	status=$(dpkg-query -W -f='${db:Status-Status}' "$p" 2>/dev/null || true)
	[ "$status" = installed ] || missing+=("$p")
done

# kubectl: the cluster tests' admin client and the one a sandbox runs through its grant's edge
# (issue 28; the process backend's view is the host's /usr). Debian's is kubernetes-client, of the
# test cluster's version; a kubectl installed otherwise (another vendor's package) is used as it is,
# since both packages own /usr/bin/kubectl.
if ! command -v kubectl >/dev/null 2>&1; then
	missing+=(kubernetes-client)
fi

# The MCP tests run the official TypeScript SDK client: NodeSource's nodejs ships npm, Debian's
# needs the npm package beside it.
if ! command -v npm >/dev/null 2>&1; then
	missing+=(npm)
fi

if [ ${#missing[@]} -eq 0 ]; then
	exit 0
fi

if [ "$(id -u)" -ne 0 ]; then
	echo "infra-sandbox: missing Debian packages: ${missing[*]}" >&2
	echo "run as root: apt-get update && apt-get install -y --no-install-recommends ${missing[*]}" >&2
	exit 1
fi

echo "infra-sandbox: installing ${missing[*]}" >&2
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
