#!/usr/bin/env bash
# The test cluster's smoke test, against a running `make cluster`, through the API only (curl with the
# kubeconfig's client certificate, inside CLUSTER_NET):
#   1. a pod of the sandbox image that sleeps, then exits 0: seen Running, then Succeeded, with a
#      containerID and exit code 0;
#   2. a pod that exits 7: Failed, exit code 7;
#   3. a pod running `sandbox-agent check` with the settings of images/kubernetes/pod.yaml (Localhost
#      seccomp profile, procMount: Unmasked): Succeeded (nested user namespace, fresh /proc);
#   4. DELETE with preconditions.uid of a wrong UID: 409, the pod still there; with the right UID: 200;
#   5. a pod past its memory limit: OOMKilled, exit code 137;
#   6. graceful deletion: DELETE of a running pod sets deletionTimestamp, its SIGTERM trap exits it, and
#      the pod is gone well before the grace period ends.
# Usage: scripts/cluster/smoke.sh [KUBECONFIG [CLUSTER_NET...]] (default: the lines `make cluster`
# prints for the default state directory). Exits non-zero, saying what failed.
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
# shellcheck source=scripts/cluster/common.sh
. "$repo/scripts/cluster/common.sh"

kubeconfig=${1:-$state/admin.kubeconfig}
if [ $# -ge 2 ]; then
	shift
	read -r -a net <<<"$*"
else
	net=(ip netns exec "$netns")
fi
[ -f "$kubeconfig" ] || die "no kubeconfig at $kubeconfig; run: make cluster"

fail() {
	echo "cluster-smoke: FAIL: $*" >&2
	exit 1
}

# The credentials, as any client reads them from the kubeconfig.
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
kc_field() { grep -m1 "^ *$1: " "$kubeconfig" | sed "s/^ *$1: //"; }
kc_field certificate-authority-data | base64 -d >"$tmp/ca.crt"
kc_field client-certificate-data | base64 -d >"$tmp/client.crt"
kc_field client-key-data | base64 -d >"$tmp/client.key"
server=$(kc_field server)

api() { # METHOD PATH [BODY]: prints the body, then the HTTP status on the last line
	local args=(-s --cacert "$tmp/ca.crt" --cert "$tmp/client.crt" --key "$tmp/client.key"
		-X "$1" -w '\n%{http_code}' -H 'Content-Type: application/json')
	[ $# -ge 3 ] && args+=(--data-binary "$3")
	"${net[@]}" curl "${args[@]}" "$server$2"
}
body() { sed '$d'; }
code() { tail -n1; }

ns=default
run_pod() { # NAME ARGS_JSON [EXTRA_POD_SPEC_JSON] [EXTRA_CONTAINER_JSON]
	local spec podx=${3:-'{}'} ctrx=${4:-'{}'}
	spec=$(jq -n --arg name "$1" --arg image "$image" --argjson args "$2" \
		--argjson podx "$podx" --argjson ctrx "$ctrx" '{
		apiVersion: "v1", kind: "Pod",
		metadata: {name: $name, labels: {"app.kubernetes.io/name": "infra-sandbox-smoke"}},
		spec: ({restartPolicy: "Never", automountServiceAccountToken: false, enableServiceLinks: false,
			terminationGracePeriodSeconds: 2,
			securityContext: {runAsNonRoot: true, runAsUser: 10001, runAsGroup: 10001},
			containers: [({name: "agent", image: $image, imagePullPolicy: "Never", args: $args,
				resources: {limits: {cpu: "1", memory: "512Mi"}}} + $ctrx)]} + $podx)}')
	local out
	out=$(api POST "/api/v1/namespaces/$ns/pods" "$spec")
	[ "$(code <<<"$out")" = 201 ] || fail "create pod $1: $(body <<<"$out")"
}

pod() { api GET "/api/v1/namespaces/$ns/pods/$1" | body; }

wait_phase() { # NAME PHASE SECONDS
	local phase=
	for _ in $(seq 1 $(($3 * 5))); do
		phase=$(pod "$1" | jq -r .status.phase)
		[ "$phase" = "$2" ] && return 0
		case $phase in Succeeded | Failed) [ "$2" = Running ] && return 1 ;; esac
		sleep 0.2
	done
	fail "pod $1: phase $phase, not $2 after $3 s: $(pod "$1" | jq -c .status)"
}

cleanup_pods() {
	local n
	for n in smoke-ok smoke-exit7 smoke-check smoke-oom smoke-term; do
		api DELETE "/api/v1/namespaces/$ns/pods/$n?gracePeriodSeconds=0" >/dev/null 2>&1 || true
	done
}
trap 'cleanup_pods; rm -rf "$tmp"' EXIT
cleanup_pods
for n in smoke-ok smoke-exit7 smoke-check smoke-oom smoke-term; do
	for _ in $(seq 1 100); do
		[ "$(api GET "/api/v1/namespaces/$ns/pods/$n" | code)" = 404 ] && break
		sleep 0.2
	done
done

t0=$(date +%s.%N)
# 1. Running, then Succeeded, exit code 0 and a containerID.
run_pod smoke-ok '[]' '{}' '{"command":["/bin/bash","-c","sleep 3; exit 0"]}'
wait_phase smoke-ok Running 60 || fail "smoke-ok never was Running"
t_run=$(date +%s.%N)
wait_phase smoke-ok Succeeded 30
st=$(pod smoke-ok | jq -c '.status.containerStatuses[0]')
cid=$(jq -r .containerID <<<"$st")
[[ $cid == containerd://* ]] || fail "smoke-ok: containerID '$cid'"
[ "$(jq -r .state.terminated.exitCode <<<"$st")" = 0 ] || fail "smoke-ok: $st"
echo "cluster-smoke: ok: pod Running $(awk "BEGIN{printf \"%.1f\", $t_run - $t0}") s after create, then Succeeded, exit 0, $cid"

# 2. A non-zero exit code reaches the API.
run_pod smoke-exit7 '[]' '{}' '{"command":["/bin/bash","-c","exit 7"]}'
wait_phase smoke-exit7 Failed 60
rc=$(pod smoke-exit7 | jq -r '.status.containerStatuses[0].state.terminated.exitCode')
[ "$rc" = 7 ] || fail "smoke-exit7: exit code $rc"
echo "cluster-smoke: ok: exit code 7, phase Failed"

# 3. The agent's own check with the boundary's settings (images/README.md).
run_pod smoke-check '["check"]' \
	'{"securityContext":{"runAsNonRoot":true,"runAsUser":10001,"runAsGroup":10001,"seccompProfile":{"type":"Localhost","localhostProfile":"infra-sandbox/seccomp.json"}}}' \
	'{"securityContext":{"procMount":"Unmasked","allowPrivilegeEscalation":false,"privileged":false,"capabilities":{"drop":["ALL"]}}}'
phase=
for _ in $(seq 1 300); do
	phase=$(pod smoke-check | jq -r .status.phase)
	case $phase in Succeeded | Failed) break ;; esac
	sleep 0.2
done
rc=$(pod smoke-check | jq -r '.status.containerStatuses[0].state.terminated.exitCode')
if [ "$phase" != Succeeded ]; then
	logs=$(api GET "/api/v1/namespaces/$ns/pods/smoke-check/log" | body | tail -n 20)
	fail "smoke-check: phase $phase exit $rc: $logs"
fi
echo "cluster-smoke: ok: sandbox-agent check Succeeded (procMount Unmasked, Localhost seccomp)"

# 4. preconditions.uid: a wrong UID is a conflict and deletes nothing; the right one deletes.
uid=$(pod smoke-ok | jq -r .metadata.uid)
out=$(api DELETE "/api/v1/namespaces/$ns/pods/smoke-ok" \
	'{"kind":"DeleteOptions","apiVersion":"v1","preconditions":{"uid":"00000000-0000-0000-0000-000000000000"}}')
[ "$(code <<<"$out")" = 409 ] || fail "delete with a wrong uid: HTTP $(code <<<"$out"), not 409"
[ "$(pod smoke-ok | jq -r .metadata.uid)" = "$uid" ] || fail "the pod changed after a refused delete"
out=$(api DELETE "/api/v1/namespaces/$ns/pods/smoke-ok" \
	"{\"kind\":\"DeleteOptions\",\"apiVersion\":\"v1\",\"preconditions\":{\"uid\":\"$uid\"}}")
[ "$(code <<<"$out")" = 200 ] || fail "delete with the right uid: HTTP $(code <<<"$out")"
echo "cluster-smoke: ok: delete with a wrong preconditions.uid is 409, with the right one 200"

# 5. The memory limit: tail keeps a line without a newline in memory until it is killed.
run_pod smoke-oom '[]' '{}' '{"command":["/bin/bash","-c","head -c 1G /dev/zero | tail"],"resources":{"limits":{"cpu":"1","memory":"64Mi"}}}'
wait_phase smoke-oom Failed 60
st=$(pod smoke-oom | jq -c '.status.containerStatuses[0].state.terminated')
[ "$(jq -r .reason <<<"$st")" = OOMKilled ] || fail "smoke-oom: $st"
[ "$(jq -r .exitCode <<<"$st")" = 137 ] || fail "smoke-oom: $st"
echo "cluster-smoke: ok: past its memory limit: OOMKilled, exit code 137"

# 6. Graceful deletion: the container's SIGTERM trap ends it; the pod object goes once it has stopped.
run_pod smoke-term '[]' '{"terminationGracePeriodSeconds":30}' '{"command":["/bin/bash","-c","trap \"exit 0\" TERM; sleep 300 & wait"]}'
wait_phase smoke-term Running 60 || fail "smoke-term never was Running"
sleep 1
out=$(api DELETE "/api/v1/namespaces/$ns/pods/smoke-term")
[ "$(code <<<"$out")" = 200 ] || fail "graceful delete: HTTP $(code <<<"$out")"
[ "$(body <<<"$out" | jq -r '.metadata.deletionTimestamp != null and .metadata.deletionGracePeriodSeconds == 30')" = true ] ||
	fail "graceful delete: no deletionTimestamp/grace period: $(body <<<"$out" | jq -c .metadata)"
gone=
for _ in $(seq 1 75); do
	if [ "$(api GET "/api/v1/namespaces/$ns/pods/smoke-term" | code)" = 404 ]; then
		gone=1
		break
	fi
	sleep 0.2
done
[ -n "$gone" ] || fail "graceful delete: the pod was still there 15 s later"
echo "cluster-smoke: ok: graceful deletion (deletionTimestamp, SIGTERM trap, gone well within 30 s)"
echo "cluster-smoke: all passed"
