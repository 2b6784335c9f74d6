#!/usr/bin/env bash
# The podman part of `make bench` (called by scripts/bench.sh): a timing report, not a test.
#   1. cold start: the first `sandbox-manager exec -- true` of new sessions (container create, start,
#      the agent serving, the call), beside `podman run --rm` of the same image running /bin/true, the
#      runtime's own cold start with no agent at all;
#   2. a warm call: `sandbox-manager exec -- true` into the running sandbox beside `podman exec` of
#      `bash -c true` into that same container (the peer baseline: no fresh namespaces, no receipt),
#      and bare `bash -c true`.
# Needs root (the rootful podman service it starts, like the tests: tests/podman/containers.conf) and
# the image (`make image`; built here when missing). Everything it started is removed on exit.
#
# Sizes (environment): BENCH_PODMAN_COLD (cold starts, default 5), BENCH_PODMAN_RUNS (warm calls, 30).
set -euo pipefail
build=$(cd "${1:-build}" && pwd)
here=$(cd "$(dirname "$0")/.." && pwd)
manager=$build/sandbox-manager
image=${IMAGE:-infra-sandbox-agent:dev}
colds=${BENCH_PODMAN_COLD:-5}
runs=${BENCH_PODMAN_RUNS:-30}
export CONTAINERS_CONF=$here/tests/podman/containers.conf

if [ "$(id -u)" -ne 0 ] || ! command -v podman >/dev/null; then
	echo "bench-podman: skipped: needs root and podman (scripts/deps.sh installs podman)"
	exit 0
fi
work=$(mktemp -d /tmp/infra-sandbox-bp.XXXXXX)
chmod 0711 "$work"
STATE=$work/state
SOCK=$work/podman.sock
export SANDBOX_MANAGER_SOCKET=$STATE/manager.sock
manager_pid= service_pid=

cleanup() {
	local id
	exec 2>/dev/null # no "Killed" notices for what is stopped on purpose
	[ -n "$manager_pid" ] && kill -KILL "$manager_pid" 2>/dev/null
	for id in $(podman ps -aq --no-trunc --filter label=infra-sandbox.session); do
		case $(podman inspect -f '{{index .Config.Labels "infra-sandbox.private-dir"}}' "$id" 2>/dev/null) in
		"$STATE"/*) podman rm -f "$id" >/dev/null 2>&1 || true ;;
		esac
	done
	[ -n "$service_pid" ] && kill "$service_pid" 2>/dev/null
	wait 2>/dev/null || true
	discard "$work"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

BENCH_NAME=bench-podman
# shellcheck source=scripts/bench-lib.sh
. "$here/scripts/bench-lib.sh"
mgr() { timeout -k 3 120 "$manager" "$@"; }
# mean_us RUNS CMD...: mean wall time of one run of CMD, in microseconds ("fail" if one failed).
mean_us() {
	local n=$1 s i
	shift
	s=$(now_us)
	for ((i = 0; i < n; i++)); do "$@" >/dev/null 2>&1 || { echo fail; return; }; done
	echo $((($(now_us) - s) / n))
}

# The image must carry this build's agent (scripts/image.sh labels it with the agent's sha256).
want=$(sha256sum "$build/sandbox-agent" | cut -d' ' -f1)
have=$(podman image inspect --format '{{index .Config.Labels "infra-sandbox.agent-sha256"}}' "$image" 2>/dev/null || true)
if [ "$have" != "$want" ]; then
	echo "bench-podman: building $image with this build's agent (scripts/image.sh)"
	IMAGE=$image bash "$here/scripts/image.sh" "$build/sandbox-agent" >/dev/null || die "scripts/image.sh failed"
fi
podman system service --time=0 "unix://$SOCK" >"$work/service.log" 2>&1 &
service_pid=$!
for _ in $(seq 1 100); do
	[ "$(curl -s --unix-socket "$SOCK" http://d/v1.41/_ping 2>/dev/null)" = OK ] && break
	sleep 0.1
done

mkdir -p "$STATE" && chmod 700 "$STATE"
bench_repo "$work/repo"
"$manager" serve --state-dir "$STATE" --backend podman --podman-socket "$SOCK" --image "$image" \
	--podman-seccomp "$here/images/seccomp.json" --idle-seconds 86400 >"$work/manager.log" 2>&1 &
manager_pid=$!
for _ in $(seq 1 300); do
	[ -S "$SANDBOX_MANAGER_SOCKET" ] && break
	kill -0 "$manager_pid" 2>/dev/null || break
	sleep 0.1
done
[ -S "$SANDBOX_MANAGER_SOCKET" ] || die "the manager did not start"

echo "sandbox-manager bench: podman backend ($(podman --version), runtime $(podman info -f '{{.Host.OCIRuntime.Name}}'))"
echo
echo "cold start (wall, mean of $colds):"
total=0
for ((i = 0; i < colds; i++)); do
	s=$(mgr session create --identity "cold$i" --repo "$work/repo" | jq -r .session) || die "session create failed"
	t0=$(now_us)
	mgr exec --session "$s" -- true >/dev/null || die "the first call of session $s failed"
	total=$((total + $(now_us) - t0))
done
cold=$((total / colds))
peer_cold=$(mean_us "$colds" podman run --rm --network none --entrypoint /bin/true "$image")
printf '  sandbox-manager exec -- true, first call of a session   %8d us   (container + agent + call)\n' "$cold"
printf '  podman run --rm IMAGE /bin/true                         %8s us   (the runtime alone)\n' "$peer_cold"

echo
echo "warm call (wall, mean of $runs, into one running sandbox):"
cid=$(mgr session show --session "$s" | jq -r '.sandbox.runtime_id' | sed -n 's/^podman://p')
[ -n "$cid" ] || die "no container recorded for session $s"
mean_us 3 "$manager" exec --session "$s" -- true >/dev/null
bare=$(mean_us "$runs" bash -c true)
boxed=$(mean_us "$runs" "$manager" exec --session "$s" -- true)
peer=$(mean_us "$runs" podman exec "$cid" bash -c true)
printf '  bash -c true                                            %8d us\n' "$bare"
printf '  sandbox-manager exec -- true                            %8s us   (%s x bare)\n' "$boxed" \
	"$([ "$boxed" = fail ] && echo - || ratio "$boxed" "$bare")"
printf '  podman exec CONTAINER bash -c true                      %8s us   (%s x bare; the peer baseline)\n' \
	"$peer" "$([ "$peer" = fail ] && echo - || ratio "$peer" "$bare")"
