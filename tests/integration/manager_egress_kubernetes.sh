# shellcheck shell=bash
# shellcheck disable=SC2016 # the commands expand their variables inside the sandbox
# Credentials at the edge (issue 28) on the run's real cluster, with the real kubectl: a process
# backend manager inside the cluster's network (CLUSTER_NET: it reaches the API server, its
# sandboxes have only their loopback), a tokenrequest grant whose read account has the `view`
# ClusterRole and write account `edit` (RoleBindings in default), and a session of policy proxy.
# kubectl in the sandbox talks to http://127.0.0.1:3129 with no credential; the manager adds the
# token and judges each request: under read, get/list/watch pass and a scale or a server-side dry
# run is refused (Forbidden, the verb and resource named, the deployment unchanged); under write
# they pass. Each exec's record lists its requests. Root only (the cluster is root's); every object
# made here has the test's prefix in its name except the `payments` Deployment the case is about,
# and all are deleted at the end. Registered in cluster_smoke.sh. The stand-in's case is
# manager_egress_edge.sh.

# kedge_setup: ktoken_setup's accounts and broker config (manager_kubernetes_tokens.sh), view and
# edit bound to them, and the payments Deployment (0 replicas; a scaled pod stays Pending: its
# nodeSelector matches no node, so nothing is pulled or run).
kedge_setup() {
	ktoken_setup || return 1
	if ktoken_kubectl get deployment payments >/dev/null 2>&1; then
		bad "a payments Deployment is already in $KT_NS: not this test's, left alone"
		return 1
	fi
	cat >"$TD/payments.yaml" <<-'EOF'
		apiVersion: apps/v1
		kind: Deployment
		metadata: {name: payments, labels: {app: payments}}
		spec:
		  replicas: 0
		  selector: {matchLabels: {app: payments}}
		  template:
		    metadata: {labels: {app: payments}}
		    spec:
		      nodeSelector: {infra-sandbox/no-such-node: "true"}
		      containers:
		      - {name: payments, image: infra-sandbox-agent:dev, imagePullPolicy: Never}
	EOF
	KEDGE_DEPLOY=1
	if ! { ktoken_kubectl create rolebinding "$KT-view" --clusterrole=view --serviceaccount="$KT_NS:$KT-read" &&
		ktoken_kubectl create rolebinding "$KT-edit" --clusterrole=edit --serviceaccount="$KT_NS:$KT-write" &&
		ktoken_kubectl create -f "$TD/payments.yaml"; } >"$TD/kedge-setup.out" 2>&1; then
		bad "cannot bind view/edit or make the payments Deployment: $(tail -n 2 "$TD/kedge-setup.out")"
		return 1
	fi
}

kedge_cleanup() {
	[ -n "${KT:-}" ] || return 0
	[ -n "${KEDGE_DEPLOY:-}" ] && ktoken_kubectl delete deployment payments --ignore-not-found --wait=false >/dev/null 2>&1
	ktoken_kubectl delete rolebinding "$KT-view" "$KT-edit" --ignore-not-found >/dev/null 2>&1
	ktoken_cleanup
}

# kedge_replicas: the payments Deployment's spec.replicas, by the admin's word.
kedge_replicas() { ktoken_kubectl get deployment payments -o jsonpath='{.spec.replicas}'; }

# kedge_scale: kubectl scale to 1 in the sandbox ($OUT, $ERR, $RC).
kedge_scale() { mgr exec --session "$SID" -- 'kubectl scale deploy payments --replicas=1'; }

# kedge_dryrun: a changed manifest (2 replicas) applied as a server-side dry run.
kedge_dryrun() { mgr exec --session "$SID" -- 'kubectl apply --dry-run=server -f payments.yaml'; }

# kedge_search: the sandbox's environment, every process's environ and cmdline, and every file it
# can read outside /usr, /proc and /sys, searched for a string: first a planted one (in a file and
# an exported variable: the search must find both), then the JWT prefix every TokenRequest token
# starts with. The command names each string in two halves, so that its own command line holds
# neither whole, and the greps take it from a file, not their arguments.
kedge_search() {
	MGR_TIMEOUT=180 mgr exec --session "$SID" -- '
		search() {
			{ env; cat /proc/[0-9]*/environ /proc/[0-9]*/cmdline 2>/dev/null | tr "\0" "\n"; } | grep -c -F -f <(echo "$1")
			grep -rlsF --exclude-dir=proc --exclude-dir=sys --exclude-dir=usr -f <(echo "$1") / 2>/dev/null | head -n 5
			echo "--"
		}
		p="eyJhbG""ciOi"
		echo "${p}planted" >planted.txt
		(export SB_PLANTED="${p}planted"; search "${p}planted")
		rm -f planted.txt
		search "$p"'
}

test_kubernetes_egress_edge() {
	k8s_cluster
	local t0 r
	t0=$(date +%s)
	KEDGE_DEPLOY=
	trap kedge_cleanup EXIT
	kedge_setup || return 1
	mgr_repo || return 1
	MGR_WRAP=("${K8S_NET_CMD[@]}")
	mgr_start --resource "kubernetes:kedge=tokenrequest:$TD/ktoken.json" || return 1
	trap 'mgr_cleanup; kedge_cleanup' EXIT
	mgr_session --grant kubernetes:kedge=read --network proxy
	mgr exec --session "$SID" -- 'command -v kubectl'
	[ "$RC" -eq 0 ] || skip "no kubectl in the process backend's view (command -v kubectl: $RC; stderr: $(head -c 200 "$ERR"))"

	# Reads through the edge: a list and a get.
	mgr exec --session "$SID" -- 'kubectl get pods -n default'
	assert_eq "kubectl get pods under read: exit code (stderr: $(head -c 400 "$ERR"); log: $(tail -n 2 "$TD/manager.log"))" 0 "$RC"
	mgr exec --session "$SID" -- 'grep -c "\"token\"\|certificate-authority\|client-key" "$KUBECONFIG"; grep "\"server\"" "$KUBECONFIG"'
	assert_match "the kubeconfig names the edge and holds no credential" '^0.*"server": "http://127.0.0.1:3129"' \
		"$(tr '\n' ' ' <"$OUT")"
	mgr exec --session "$SID" -- 'kubectl get deploy payments -o name'
	assert_eq "kubectl get deploy under read: exit code (stderr: $(head -c 400 "$ERR"))" 0 "$RC"
	assert_eq "the payments Deployment is seen" "deployment.apps/payments" "$(cat "$OUT")"

	kedge_search
	assert_eq "the search: exit code (stderr: $(head -c 300 "$ERR"))" 0 "$RC"
	r=$(sed -n '1,/^--$/p' "$OUT")
	assert_match "the search finds the planted string in the file" "planted.txt" "$r"
	[ "$(echo "$r" | head -n 1)" -ge 1 ] 2>/dev/null || bad "the search did not find the planted string in the environment: $r"
	assert_eq "no token is anywhere in the sandbox" "0 --" \
		"$(sed -n '/^--$/,$p' "$OUT" | sed 1d | tr '\n' ' ' | sed 's/ $//')"

	# Writes under read: refused at the edge, the deployment unchanged.
	kedge_scale
	assert_ne "kubectl scale under read: exit code" 0 "$RC"
	assert_match "the refusal: Forbidden, the verb and the resource" \
		'Forbidden.*verb "patch".* on apps/deployments' "$(cat "$ERR")"
	assert_eq "the deployment is unchanged" 0 "$(kedge_replicas)"
	# the manifest changed in the worktree (2 replicas)
	mgr exec --session "$SID" -- "cat >payments.yaml <<'EOF'
$(sed 's/replicas: 0/replicas: 2/' "$TD/payments.yaml")
EOF"
	assert_eq "the changed manifest: exit code (stderr: $(head -c 200 "$ERR"))" 0 "$RC"
	kedge_dryrun
	assert_ne "kubectl apply --dry-run=server under read: exit code" 0 "$RC"
	assert_match "the dry run's refusal names the verb, as a dry run" \
		'Forbidden.*verb "patch" \(dry run\) on apps/deployments' "$(cat "$ERR")"

	mgr records --session "$SID"
	cp "$OUT" "$TD/records-read.json"
	# newest first: 0 dry run, 1 manifest, 2 scale, 3 search, 4 get deploy, 5 kubeconfig, 6 get pods, 7 command -v
	assert_json '[.records[6].result.egress.details[] | select(.kubernetes.verb == "list" and .kubernetes.resource == "pods") | .status]' '[200]'
	assert_json '[.records[4].result.egress.details[] | select(.kubernetes.verb == "get" and .kubernetes.resource == "deployments") | .kubernetes.name]' '["payments"]'
	assert_json '.records[4].result.egress.refused' 0
	assert_json '.records[2].result.egress.refused' 1
	assert_json '.records[2].result.egress.mutating_accepted' 0
	assert_json '[.records[2].result.egress.details[] | select(.refused) | [.method, .status, .kubernetes.verb, .kubernetes.group, .kubernetes.resource]]' \
		'[["PATCH",403,"patch","apps","deployments"]]'
	assert_json '.records[0].result.egress.refused' 1
	assert_json '[.records[0].result.egress.details[] | select(.refused) | .kubernetes.dry_run]' '[true]'
	assert_json '[.records[3,5,7] | .result.egress.requests // 0]' '[0,0,0]'

	# Under write: the same scale passes and changes the deployment; the dry run passes.
	mgr grant --session "$SID" --set kubernetes:kedge=write
	assert_eq "grant exit code (stderr: $(head -c 300 "$ERR"))" 0 "$RC"
	kedge_scale
	assert_eq "kubectl scale under write: exit code (stderr: $(head -c 400 "$ERR"))" 0 "$RC"
	assert_eq "the deployment changed" 1 "$(kedge_replicas)"
	kedge_dryrun
	assert_eq "kubectl apply --dry-run=server under write: exit code (stderr: $(head -c 400 "$ERR"))" 0 "$RC"
	assert_match "the dry run says so" "deployment.apps/payments (configured|unchanged) \(server dry run\)" "$(cat "$OUT")"
	assert_eq "a dry run changes nothing" 1 "$(kedge_replicas)"

	# A watch streams through the edge until the sandbox's timeout cuts it; the manager goes on.
	mgr exec --session "$SID" -- 'timeout 5 kubectl get pods --watch -l app=payments'
	assert_eq "the watch is cut by timeout (stderr: $(head -c 300 "$ERR"))" 124 "$RC"
	assert_match "the watch printed the existing pod" "payments-[a-z0-9]+-[a-z0-9]+ +0/1 +Pending" "$(cat "$OUT")"
	mgr exec --session "$SID" -- 'kubectl get deploy payments -o jsonpath="{.spec.replicas}"'
	assert_eq "a call after the watch: exit code (stderr: $(head -c 300 "$ERR"))" 0 "$RC"
	assert_eq "a call after the watch: its answer" 1 "$(cat "$OUT")"

	mgr records --session "$SID"
	cp "$OUT" "$TD/records-write.json"
	# newest first: 0 get, 1 watch, 2 dry run, 3 scale
	assert_json '.records[3].result.egress.refused' 0
	assert_json '.records[3].result.egress.mutating_accepted' 1
	assert_json '[.records[3].result.egress.details[] | select(.mutating) | [.method, .status, .kubernetes.verb, .kubernetes.resource]]' \
		'[["PATCH",200,"patch","deployments"]]'
	assert_json '[.records[2].result.egress.details[] | select(.mutating) | [.status, .kubernetes.dry_run]]' '[[200,true]]'
	assert_json '[.records[1].result.egress.details[] | select(.kubernetes.verb == "watch") | .kubernetes.resource]' '["pods"]'
	echo "kubernetes_egress_edge: $(($(date +%s) - t0)) s after the cluster was up"
}
# registered in cluster_smoke.sh, which runs it while the run's cluster is up

# `make demo-cluster` (scripts/demo-cluster.sh) on the run's cluster, as a user runs it: kubectl in
# the sandbox reads the unavailable payments Deployment through a read grant (no credential in its
# kubeconfig), the fix is made in the worktree, the server-side dry run is refused under read and
# passes under write without changing the cluster, the patch is left for review, and the records
# list each request of each call. Its namespace is gone at the end. Registered in cluster_smoke.sh.
test_kubernetes_demo_cluster() {
	k8s_cluster
	local out=$TD/demo.out rc=0
	bash "$IT_REPO/scripts/demo-cluster.sh" "$IT_ROOT/bin" >"$out" 2>&1 || rc=$?
	assert_eq "make demo-cluster: exit code ($(tail -n 5 "$out"))" 0 "$rc"
	assert_match "the kubeconfig names the edge" '"server": "http://127.0.0.1:3129"' "$(cat "$out")"
	assert_match "kubectl get through the edge" 'payments-api +0/0 ' "$(cat "$out")"
	assert_match "kubectl describe shows the probe's wrong port" 'Readiness: +http-get http://:8081/healthz' "$(cat "$out")"
	assert_match "the dry run under read: refused at the edge, exit 1" \
		'refused by grant "kubernetes:payments" \(read\): verb "patch" \(dry run\) on apps/deployments "payments-api".*\[exit 1\]' \
		"$(tr '\n' ' ' <"$out")"
	assert_match "the dry run under write: passes, exit 0" \
		'deployment.apps/payments-api configured \(server dry run\) \[exit 0\] replicas in the cluster: 0' \
		"$(tr '\n' ' ' <"$out")"
	grep -qE '^\+  replicas: 2$' "$out" || bad "the patch left for review: no such line"
	grep -qE '^    GET 200 get deployments/payments-api$' "$out" || bad "the records: the read's get: no such line"
	grep -qE '^    PATCH 403 patch \(dry run\) deployments/payments-api  REFUSED$' "$out" || bad "the records: the refused dry run: no such line"
	grep -qE '^    PATCH 200 patch \(dry run\) deployments/payments-api$' "$out" || bad "the records: the allowed dry run: no such line"
	[ "$(ktoken_kubectl get namespace payments -o jsonpath='{.status.phase}' 2>/dev/null)" = Active ] &&
		bad "the demo's namespace payments is still active"
	return 0
}

# The network policy `proxy` on the kubernetes backend (issue 28), on the run's real cluster: the
# manager runs in the cluster's network namespace, the pods are its sandboxes. The agent holds the
# pod's 127.0.0.1:3128 and the edge's :3129 and carries each connection to the manager inside the
# mTLS link the manager opens to it (manager/agentlink/agent_relay.c, sandbox-agent/serve_net.c);
# the manager's egress proxy and edge judge them as on the other backends. The destination is a TCP
# echo on 192.0.2.1:18444 (TEST-NET-1, a veth end this test adds to the cluster's namespace and
# removes), never a real address. The cluster's bridge plugin enforces no NetworkPolicy: the test
# checks the policy object the backend keeps and the pod's label it selects, not its enforcement.

# kproxy_dest: the veth end and the echo server in the cluster's namespace (KP_DEV, KP_SERVER_PID).
kproxy_dest() {
	local ns=${K8S_NET_CMD[3]} i
	KP_NS=$ns
	KP_DEV=sbkp$$
	if ! { ip -n "$ns" link add "$KP_DEV" type veth peer name "${KP_DEV}p" &&
		ip -n "$ns" addr add 192.0.2.1/24 dev "$KP_DEV" && ip -n "$ns" link set "$KP_DEV" up &&
		ip -n "$ns" link set "${KP_DEV}p" up; } >"$TD/kproxy-dev.out" 2>&1; then
		bad "cannot add the destination's device to $ns: $(tail -n 2 "$TD/kproxy-dev.out")"
		return 1
	fi
	"${K8S_NET_CMD[@]}" python3 -c '
import socket, threading
echo = socket.create_server(("192.0.2.1", 18444))
def serve(c):
    c.sendall(b"echo ready\n")
    while True:
        d = c.recv(65536)
        if not d: break
        c.sendall(d)
    c.close()
while True:
    c, _ = echo.accept()
    threading.Thread(target=serve, args=(c,), daemon=True).start()
' &
	KP_SERVER_PID=$!
	for i in $(seq 1 50); do
		"${K8S_NET_CMD[@]}" bash -c '(exec 3<>/dev/tcp/192.0.2.1/18444)' 2>/dev/null && return 0
		sleep 0.1
	done
	bad "the echo server on 192.0.2.1:18444 did not start"
	return 1
}

kproxy_cleanup() {
	[ -n "${KP_SERVER_PID:-}" ] && kill -KILL "$KP_SERVER_PID" 2>/dev/null
	[ -n "${KP_DEV:-}" ] && ip -n "$KP_NS" link del "$KP_DEV" 2>/dev/null
	# the manager keeps it for its pods of policy proxy; the cluster is as before without it
	[ -n "${KT:-}" ] && ktoken_kubectl delete networkpolicy infra-sandbox-proxy --ignore-not-found >/dev/null 2>&1
	kedge_cleanup
	return 0
}

# kproxy_connect TARGET: a bash program for the sandbox (the image has no curl or python3): CONNECT
# TARGET through $HTTPS_PROXY's port on the pod's loopback; prints the status line, then on 200
# the destination's first line and the echo of a line sent through, else the body.
kproxy_connect() {
	cat <<EOS
exec 3<>/dev/tcp/127.0.0.1/3128 || exit 9
printf 'CONNECT $1 HTTP/1.1\r\nHost: $1\r\n\r\n' >&3
IFS= read -r -t 10 status <&3; echo "\${status%\$'\r'}"
while IFS= read -r -t 10 l <&3 && [ -n "\${l%\$'\r'}" ]; do :; done
case "\$status" in
*" 200 "*) IFS= read -r -t 10 l <&3; echo "\$l"; echo through-the-agent >&3; IFS= read -r -t 10 l <&3; echo "\$l" ;;
*) timeout 10 cat <&3; echo ;;
esac
EOS
}

test_kubernetes_egress_proxy() {
	k8s_cluster
	local pod
	KEDGE_DEPLOY=
	trap kproxy_cleanup EXIT
	kedge_setup || return 1
	kproxy_dest || return 1
	mgr_repo || return 1
	K8S_IMAGE=${K8S_IMAGE:-$PODMAN_IMAGE} k8s_mgr_start --network proxy --egress-allow 192.0.2.1:18444 \
		--resource "kubernetes:kp=tokenrequest:$TD/ktoken.json" || return 1
	trap 'kproxy_cleanup; k8s_cleanup' EXIT # the echo server first: mgr_cleanup waits for every job
	mgr_session --grant kubernetes:kp=read || return 1

	# The variables, as on every backend.
	mgr exec --session "$SID" -- 'env | grep -i _proxy= | sort'
	assert_eq "exit code (stderr: $(head -c 300 "$ERR"); log: $(tail -n 3 "$TD/manager.log"))" 0 "$RC"
	assert_eq "the proxy variables" "HTTPS_PROXY=http://127.0.0.1:3128
HTTP_PROXY=http://127.0.0.1:3128
NO_PROXY=localhost,127.0.0.1
http_proxy=http://127.0.0.1:3128
https_proxy=http://127.0.0.1:3128
no_proxy=localhost,127.0.0.1" "$(cat "$OUT")"

	# The NetworkPolicy the backend keeps for such pods, and the pod's label it selects (the pod
	# is made at the session's first call).
	ktoken_kubectl get networkpolicy infra-sandbox-proxy -o json >"$TD/netpol.json" 2>"$TD/netpol.err"
	assert_eq "the NetworkPolicy exists ($(head -c 300 "$TD/netpol.err"))" 0 "$?"
	assert_json '.spec.podSelector' '{"matchLabels":{"infra-sandbox/network":"proxy"}}' "$TD/netpol.json"
	assert_json '.spec.policyTypes' '["Egress"]' "$TD/netpol.json"
	assert_json '.spec.egress // []' '[]' "$TD/netpol.json"
	assert_json '.spec.ingress' null "$TD/netpol.json"
	mgr session show --session "$SID"
	pod=$(jr .sandbox.runtime_id | sed 's/^kubernetes:\([^/]*\)\/.*/\1/')
	assert_eq "the pod's label" proxy \
		"$(ktoken_kubectl get pod "$pod" -o json | jq -r '.metadata.labels["infra-sandbox/network"]')"

	# A tunnel to the listed destination, through the agent's link and the manager's proxy.
	mgr exec --session "$SID" -- "$(kproxy_connect 192.0.2.1:18444)"
	assert_eq "a tunnel to the listed destination (stderr: $(head -c 300 "$ERR"); log: $(tail -n 3 "$TD/manager.log"))" \
		"HTTP/1.1 200 Connection established
echo ready
through-the-agent" "$(cat "$OUT")"
	# Off the list: 403 naming the list.
	mgr exec --session "$SID" -- "$(kproxy_connect example.com:443)"
	assert_eq "off the list" "HTTP/1.1 403 Forbidden
infra-sandbox egress: \"example.com:443\" is not allowed for session $SID (allowed: 192.0.2.1:18444)" "$(cat "$OUT")"

	# The broker grant at the edge: kubectl get through 127.0.0.1:3129, no credential in the pod.
	mgr exec --session "$SID" -- 'kubectl get deploy payments -o name; grep -c "\"token\"\|certificate-authority\|client-key" "$KUBECONFIG"; grep "\"server\"" "$KUBECONFIG"'
	assert_eq "kubectl get through the edge: exit code (stderr: $(head -c 400 "$ERR"); log: $(tail -n 3 "$TD/manager.log"))" 0 "$RC"
	assert_match "the deployment seen; the kubeconfig names the edge and holds no credential" \
		'^deployment.apps/payments 0 +"server": "http://127.0.0.1:3129"' "$(tr '\n' ' ' <"$OUT")"
	kedge_search
	assert_eq "the search: exit code (stderr: $(head -c 300 "$ERR"))" 0 "$RC"
	assert_match "the search finds the planted string in the file" "planted.txt" "$(sed -n '1,/^--$/p' "$OUT")"
	assert_eq "no token is anywhere in the pod" "0 --" \
		"$(sed -n '/^--$/,$p' "$OUT" | sed 1d | tr '\n' ' ' | sed 's/ $//')"

	# Each on its exec's record. Newest first: 0 search, 1 kubectl, 2 off the list, 3 tunnel, 4 env.
	mgr records --session "$SID"
	assert_json '.records[3].result.egress | [.requests, .refused]' '[1,0]'
	assert_json '.records[3].result.egress.details[0] | [.method, .host, .status]' '["CONNECT","192.0.2.1:18444",200]'
	assert_json '.records[2].result.egress | [.requests, .refused]' '[1,1]'
	assert_json '.records[2].result.egress.details[0] | [.method, .host, .status]' '["CONNECT","example.com:443",403]'
	assert_json '[.records[1].result.egress.details[] | select(.kubernetes.resource == "deployments") | [.status, .kubernetes.verb, .kubernetes.name]]' \
		'[[200,"get","payments"]]'
	assert_json '.records[4].result.egress.requests // 0' 0

	# Measured (printed): 20 tunnels one after another, each a new connection relayed through a new
	# mTLS connection to the agent; then 1 MiB through one tunnel and back, unchanged.
	mgr exec --session "$SID" -- 't0=$(date +%s%N); ok=0
		for i in $(seq 1 20); do
			exec 3<>/dev/tcp/127.0.0.1/3128
			printf "CONNECT 192.0.2.1:18444 HTTP/1.1\r\nHost: x\r\n\r\n" >&3
			IFS= read -r -t 10 s <&3
			while IFS= read -r -t 10 l <&3 && [ -n "${l%$'"'"'\r'"'"'}" ]; do :; done
			IFS= read -r -t 10 l <&3; [ "$l" = "echo ready" ] && ok=$((ok + 1))
			exec 3>&-
		done
		echo "$ok $(( ($(date +%s%N) - t0) / 1000000 ))"'
	assert_eq "20 tunnels: exit code (stderr: $(head -c 300 "$ERR"))" 0 "$RC"
	assert_eq "20 tunnels, each reaching the destination" 20 "$(cut -d' ' -f1 "$OUT")"
	echo "kubernetes_egress_proxy: 20 tunnels one after another in $(cut -d' ' -f2 "$OUT") ms"
	mgr exec --session "$SID" -- 'head -c 1048576 /dev/urandom >big
		exec 3<>/dev/tcp/127.0.0.1/3128
		printf "CONNECT 192.0.2.1:18444 HTTP/1.1\r\nHost: x\r\n\r\n" >&3
		while IFS= read -r -t 10 l <&3 && [ -n "${l%$'"'"'\r'"'"'}" ]; do :; done
		IFS= read -r -t 10 l <&3
		t0=$(date +%s%N)
		cat big >&3 &
		back=$(timeout 60 head -c 1048576 <&3 | sha256sum | cut -d" " -f1)
		t1=$(date +%s%N)
		wait
		[ "$back" = "$(sha256sum <big | cut -d" " -f1)" ] && echo unchanged || echo changed
		echo $(( (t1 - t0) / 1000000 )); rm -f big'
	assert_eq "1 MiB through a tunnel and back: exit code (stderr: $(head -c 300 "$ERR"))" 0 "$RC"
	assert_eq "1 MiB through a tunnel and back" unchanged "$(head -n 1 "$OUT")"
	echo "kubernetes_egress_proxy: 1 MiB through a tunnel and back in $(sed -n 2p "$OUT") ms"
}
# registered in cluster_smoke.sh, which runs it while the run's cluster is up
