#!/usr/bin/env bash
# `make demo-cluster`: the seed's running example on the real test cluster (issue 28). A payments
# Deployment that is unavailable (0 replicas, a readiness probe on the wrong port) in namespace
# payments; an agent investigates it through managed Bash calls with the real kubectl, whose
# kubeconfig holds no credential: the manager's edge adds a short-lived token for the grant's
# service account and judges each request. Under a `read` grant `get` and `describe` pass and a
# server-side dry run of the fixed manifest is refused; under `write` it passes. The fix stays in the
# session's worktree for review, and the records show each request of each call.
#
# Root only (the cluster and its network namespace are root's). Uses the running cluster of `make
# cluster`, or brings one up and takes it down at the end. The manager runs inside the cluster's
# network namespace (it reaches the API server there; its sandboxes have only their loopback), on a
# temporary state directory; everything made in the cluster is deleted at the end.
# Usage: scripts/demo-cluster.sh [BUILD]
set -euo pipefail
build=$(cd "${1:-build}" && pwd)
here=$(cd "$(dirname "$0")/.." && pwd)
# shellcheck source=scripts/cluster/common.sh
. "$here/scripts/cluster/common.sh"
[ "$(id -u)" -eq 0 ] || die "make demo-cluster runs as root (the test cluster is root's): sudo make demo-cluster"

work=$(mktemp -d /tmp/infra-sandbox-demo-cluster.XXXXXX)
export SANDBOX_MANAGER_SOCKET=$work/state/manager.sock
manager_pid= brought_up= made=
kubeconfig=$state/admin.kubeconfig
net=(ip netns exec "$netns")
admin() { "${net[@]}" kubectl --kubeconfig "$kubeconfig" "$@"; }

cleanup() {
	[ -n "$manager_pid" ] && kill "$manager_pid" 2>/dev/null && { wait "$manager_pid" 2>/dev/null || true; }
	# this run's own sandboxes (found by their state directory, unique to this run), by PID
	for p in $(pgrep -f -- "--state-dir $work/state/sandboxes/" || true); do kill -KILL "$p" 2>/dev/null || true; done
	if [ -n "$made" ]; then
		admin delete namespace payments --ignore-not-found --wait=false >/dev/null 2>&1 || true
	fi
	[ -n "$brought_up" ] && bash "$here/scripts/cluster/down.sh" >/dev/null 2>&1
	rm -rf "$work"
}
trap cleanup EXIT

step() { printf '\n\033[1m== %s\033[0m\n' "$1"; }
call() { # call COMMAND: one managed Bash call, shown as an agent would see it
	printf '$ %s\n' "$1"
	local rc=0
	"$build/sandbox-manager" exec --session "$session" -- "$1" || rc=$?
	printf '[exit %s]\n' "$rc"
}

step "the cluster"
if ! cluster_running; then
	echo "no test cluster is running: bringing one up (make cluster; taken down at the end)"
	brought_up=1
	bash "$here/scripts/cluster/up.sh" >"$work/up.log" 2>&1 || { tail -n 20 "$work/up.log" >&2; exit 1; }
fi
admin get nodes
admin get namespace payments >/dev/null 2>&1 &&
	die "a namespace payments exists already: not this demo's, left alone (delete it to run the demo)"

step "namespace payments: the unavailable Deployment, and the grant's service accounts"
made=1
admin create namespace payments
admin apply -f "$here/tests/fixtures/deploy-repo/payments/deployment.yaml"
# read: the view ClusterRole in payments; write: edit. The manager's own account may only create
# tokens of those two (TokenRequest), and its token is the operator's credential.
admin -n payments create serviceaccount demo-read
admin -n payments create serviceaccount demo-write
admin -n payments create serviceaccount demo-manager
admin -n payments create rolebinding demo-view --clusterrole=view --serviceaccount=payments:demo-read
admin -n payments create rolebinding demo-edit --clusterrole=edit --serviceaccount=payments:demo-write
admin -n payments create role demo-tokens --verb=create --resource=serviceaccounts/token \
	--resource-name=demo-read --resource-name=demo-write
admin -n payments create rolebinding demo-tokens --role=demo-tokens --serviceaccount=payments:demo-manager
echo '{"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": {"expirationSeconds": 3600}}' \
	>"$work/request.json"
admin create --raw /api/v1/namespaces/payments/serviceaccounts/demo-manager/token -f "$work/request.json" |
	jq -r .status.token >"$work/manager.token"
chmod 0600 "$work/manager.token"
sed -n 's/^ *certificate-authority-data: *//p' "$kubeconfig" | head -n 1 | base64 -d >"$work/ca.crt"
server=$(sed -n 's/^ *server: *//p' "$kubeconfig" | head -n 1)
jq -n --arg server "$server" --arg ca "$work/ca.crt" --arg tok "$work/manager.token" \
	'{server: $server, ca_file: $ca, namespace: "payments", read_service_account: "demo-read",
	  write_service_account: "demo-write", token_file: $tok, expiration_seconds: 600}' >"$work/broker.json"

step "the repository: deployment manifests for payments-api"
mkdir -p "$work/repo" "$work/state"
chmod 0700 "$work/state"
cp -r "$here/tests/fixtures/deploy-repo/." "$work/repo/"
git -C "$work/repo" init -q -b main
git -C "$work/repo" add -A
git -C "$work/repo" -c user.name=demo -c user.email=demo@example.invalid commit -qm "manifests"

step "sandbox-manager serve, inside the cluster's network (process backend)"
"${net[@]}" "$build/sandbox-manager" serve --state-dir "$work/state" --agent "$build/sandbox-agent" \
	--resource "kubernetes:payments=tokenrequest:$work/broker.json" >"$work/manager.log" 2>&1 &
manager_pid=$!
for _ in $(seq 1 100); do [ -S "$SANDBOX_MANAGER_SOCKET" ] && break; sleep 0.1; done
[ -S "$SANDBOX_MANAGER_SOCKET" ] || { cat "$work/manager.log"; exit 1; }

step "a session with a read grant to the cluster, network policy proxy"
"$build/sandbox-manager" session create --identity demo --repo "$work/repo" --grant kubernetes:payments=read \
	--network proxy | tee "$work/session.json"
session=$(jq -r .session "$work/session.json")
worktree=$(jq -r .worktree "$work/session.json")

step "the investigation: kubectl through the edge, no credential in the sandbox"
call 'grep -c -e token -e client-key "$KUBECONFIG"; grep server "$KUBECONFIG"'
call 'kubectl -n payments get deployment payments-api'
call 'kubectl -n payments describe deployment payments-api | grep -E "^(Replicas|Conditions)|Readiness"'
call "sed -i -e 's/replicas: 0/replicas: 2/' -e 's/port: 8081/port: 8080/' payments/deployment.yaml && git diff --stat"
call 'kubectl apply --dry-run=server -f payments/deployment.yaml'
echo "-> refused at the edge: a read grant passes get, list and watch only"

step "the grant raised to write: the same dry run passes (nothing is changed in the cluster)"
"$build/sandbox-manager" grant --session "$session" --set kubernetes:payments=write | jq -c '{session, grants}'
call 'kubectl apply --dry-run=server -f payments/deployment.yaml'
echo "replicas in the cluster: $(admin -n payments get deployment payments-api -o jsonpath='{.spec.replicas}')"

step "the patch, left for review in the session's worktree"
git -c safe.directory='*' -C "$worktree" diff

step "the records: each call, and each request it sent to the cluster"
# one line per request (discovery's requests of the API's paths too), repeats of a line counted
"$build/sandbox-manager" records --session "$session" | jq -r '.records | reverse[] |
	"\(.exec_id)  exit=\(.result.exit_code)  \(.command | gsub("\n"; " ") | .[0:60])",
	([(.result.egress.details // [])[] | "    \(.method) \(.status) \(.kubernetes.verb // "-")" +
		"\(if .kubernetes.dry_run then " (dry run)" else "" end) " +
		"\(if (.kubernetes.resource // "") != "" then .kubernetes.resource else .path end)" +
		"\(if (.kubernetes.name // "") != "" then "/" + .kubernetes.name else "" end)\(if .refused then "  REFUSED" else "" end)"] |
	 reduce .[] as $l ([]; if length > 0 and .[-1][0] == $l then .[-1][1] += 1 else . + [[$l, 1]] end) |
	 .[] | if .[1] > 1 then "\(.[0])  (x\(.[1]))" else .[0] end)'
