# shellcheck shell=bash
# shellcheck disable=SC2034 # PODMAN_* are read by the agent_image.sh and manager_podman.sh tests
# Helpers for the tests that need a real container runtime (sourced by run.sh after lib_manager.sh).
# When root, podman_setup builds or refreshes the image (scripts/image.sh, with the static agent
# build/sandbox-agent whatever run.sh's build directory is: the image must not carry the ASan build) and
# starts ONE rootful `podman system service` on a unix socket for the whole run; tests reach it through
# PODMAN_SOCK (the manager's backend) or podman_cli (the harness's own look at the same storage).

IT_REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
PODMAN_CONF=$IT_REPO/tests/podman/containers.conf
PODMAN_SECCOMP=$IT_REPO/images/seccomp.json
PODMAN_UNAVAILABLE="podman_setup did not run"

# podman_cli ARGS...: podman as the harness user (root), with the tests' containers.conf, on the same
# storage as the service.
podman_cli() { CONTAINERS_CONF=$PODMAN_CONF podman "$@"; }

# podman_ids LABEL_FILTER: the full ids of the containers matching the label filter, one per line.
podman_ids() { podman_cli ps -a -q --no-trunc --filter "label=$1" 2>/dev/null; }

# podman_image_refresh: builds the image unless its agent is already build/sandbox-agent (the
# image's infra-sandbox.agent-sha256 label, set by scripts/image.sh from the file it copies).
podman_image_refresh() {
	local agent=$IT_REPO/build/sandbox-agent want have
	if [ ! -x "$agent" ]; then
		# A sanitizer run builds only build/asan; the image needs the static agent.
		echo "integration: building the static agent for the image ($agent)"
		if ! env -u MAKEFLAGS -u MFLAGS -u MAKELEVEL make -C "$IT_REPO" BUILD=build SANITIZE=0 build/sandbox-agent \
			>"$IT_ROOT/podman/make.log" 2>&1; then
			PODMAN_UNAVAILABLE="cannot build $agent: $(tail -n 3 "$IT_ROOT/podman/make.log")"
			return 1
		fi
	fi
	want=$(sha256sum "$agent" | cut -d' ' -f1)
	have=$(podman_cli image inspect --format '{{index .Config.Labels "infra-sandbox.agent-sha256"}}' \
		"$PODMAN_IMAGE" 2>/dev/null)
	[ "$have" = "$want" ] && return 0
	echo "integration: building $PODMAN_IMAGE with the agent $want (scripts/image.sh)"
	if ! IMAGE=$PODMAN_IMAGE CONTAINERS_CONF=$PODMAN_CONF bash "$IT_REPO/scripts/image.sh" "$agent" \
		>"$IT_ROOT/podman/image.log" 2>&1; then
		PODMAN_UNAVAILABLE="scripts/image.sh failed: $(tail -n 3 "$IT_ROOT/podman/image.log")"
		return 1
	fi
	sed 's/^/integration: /' "$IT_ROOT/podman/image.log" | grep -E 'image id|agent sha256|cached in'
}

# podman_setup: once per run, after it_setup. Without root, or without podman, PODMAN_SOCK stays unset
# and PODMAN_UNAVAILABLE says why (need_podman reports it).
podman_setup() {
	local i
	PODMAN_IMAGE=${PODMAN_IMAGE:-infra-sandbox-agent:dev}
	# IT_NO_PODMAN=1: a focused local run that needs no container runtime (never in CI: need_podman fails there).
	if [ "${IT_NO_PODMAN:-0}" = 1 ]; then
		PODMAN_UNAVAILABLE="IT_NO_PODMAN=1"
		return 0
	fi
	if [ "$(id -u)" -ne 0 ]; then
		PODMAN_UNAVAILABLE="not root: the tests' podman service and image are root's (run the tests as root)"
		return 0
	fi
	for i in podman runc curl readelf; do
		if ! command -v "$i" >/dev/null; then
			PODMAN_UNAVAILABLE="$i is missing (install it: scripts/deps.sh)"
			echo "integration: $PODMAN_UNAVAILABLE: the podman tests cannot run"
			return 0
		fi
	done
	mkdir -p "$IT_ROOT/podman" && chmod 0755 "$IT_ROOT/podman"
	podman_image_refresh || {
		echo "integration: $PODMAN_UNAVAILABLE"
		return 0
	}
	local sock=$IT_ROOT/podman/podman.sock
	CONTAINERS_CONF=$PODMAN_CONF podman system service --time=0 "unix://$sock" \
		>"$IT_ROOT/podman/service.log" 2>&1 &
	PODMAN_SERVICE_PID=$!
	trap 'podman_cleanup; it_cleanup' EXIT
	for i in $(seq 1 100); do
		if [ "$(curl -s --max-time 2 --unix-socket "$sock" http://d/v1.41/_ping 2>/dev/null)" = OK ]; then
			# A manager running as the unprivileged user may use the rootful service, as a
			# member of a docker group would.
			chown "$IT_USER:" "$sock" || { PODMAN_UNAVAILABLE="cannot chown $sock"; return 0; }
			PODMAN_SOCK=$sock
			export PODMAN_SOCK PODMAN_IMAGE
			export CONTAINERS_CONF=$PODMAN_CONF
			echo "integration: podman service on $sock, image $PODMAN_IMAGE"
			return 0
		fi
		kill -0 "$PODMAN_SERVICE_PID" 2>/dev/null || break
		sleep 0.1
	done
	PODMAN_UNAVAILABLE="the podman service did not answer on $sock: $(tail -n 3 "$IT_ROOT/podman/service.log")"
	echo "integration: $PODMAN_UNAVAILABLE"
}

# podman_run_ids: the containers this run made, and no other's (runs at the same time share podman's
# storage): a manager session's container carries its sandbox's private directory as a label
# (infra-sandbox.private-dir), below the state dir of the test that started the manager, which each
# test notes in its own directory under IT_ROOT (mstate.path, lib_manager.sh mgr_start); the image
# tests label theirs infra-sandbox.test=$IT_ROOT.
podman_run_ids() {
	local id dir state states
	states=$(cat "$IT_ROOT"/*/*/mstate.path 2>/dev/null)
	[ -n "$states" ] && for id in $(podman_ids infra-sandbox.session); do
		dir=$(podman_cli inspect -f '{{index .Config.Labels "infra-sandbox.private-dir"}}' "$id" 2>/dev/null)
		while read -r state; do
			case $dir in
			"$state"/*)
				echo "$id"
				break
				;;
			esac
		done <<<"$states"
	done
	podman_ids "infra-sandbox.test=$IT_ROOT"
}

# At the end of the run: the containers this run created (podman_run_ids), then the service.
podman_cleanup() {
	local id
	[ -n "${PODMAN_SERVICE_PID:-}" ] || return 0
	for id in $(podman_run_ids); do
		podman_cli rm -f -t 0 "$id" >/dev/null 2>&1
	done
	kill -TERM "$PODMAN_SERVICE_PID" 2>/dev/null
	wait "$PODMAN_SERVICE_PID" 2>/dev/null
	PODMAN_SERVICE_PID=
	return 0
}

# need_podman: at the start of a test that needs the service and the image. CI installs podman, so
# there its absence is a failure; elsewhere the test is skipped with the reason.
need_podman() {
	[ -n "${PODMAN_SOCK:-}" ] && return 0
	skip_setup "podman is not available: $PODMAN_UNAVAILABLE"
}

# ---- helpers of the podman-backend manager tests (manager_*.sh) ----
POD_REPO_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)

# pod_mgr_start [SERVE ARGS...]: a manager with the podman backend and the shipped seccomp profile.
# mgr_start sets its own EXIT trap: this one replaces it on every (re)start.
pod_mgr_start() {
	local rc
	mgr_start --backend podman --podman-socket "${POD_SOCK:-$PODMAN_SOCK}" --image "$PODMAN_IMAGE" \
		--podman-seccomp "$POD_REPO_ROOT/images/seccomp.json" "$@"
	rc=$?
	trap pod_cleanup EXIT
	return "$rc"
}

# pod_ids SESSION: the ids of the session's containers, running or not (podman's own view).
pod_ids() {
	podman_cli ps -a --no-trunc -q --filter "label=infra-sandbox.session=$1"
}

# pod_cleanup: the test's containers go with it (the EXIT trap of the test's subshell).
pod_cleanup() {
	local id
	# first: mgr_cleanup waits for every child of the test, the proxy included
	[ -n "${PROXY_PID:-}" ] && kill "$PROXY_PID" 2>/dev/null
	mgr_cleanup
	for id in $(podman_cli ps -a -q --no-trunc --filter "label=infra-sandbox.session"); do
		case $(podman_cli inspect -f '{{index .Config.Labels "infra-sandbox.private-dir"}}' "$id" 2>/dev/null) in
		"$MSTATE"/*) podman_cli rm -f "$id" >/dev/null 2>&1 ;;
		esac
	done
	return 0
}

# pod_sandbox_id: the container Id the manager recorded for $SID's sandbox.
pod_sandbox_id() {
	mgr session show --session "$SID"
	jr '.sandbox.runtime_id' | sed -n 's/^podman://p'
}
