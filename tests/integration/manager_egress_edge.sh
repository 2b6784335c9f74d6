# shellcheck shell=bash
# shellcheck disable=SC2016 # the commands expand their variables inside the sandbox
# Credentials at the edge (issue 28), end to end on the process backend: a session of policy proxy
# with a tokenrequest grant (the broker's local HTTPS stand-in, manager_brokers.sh brokers_start,
# for the Kubernetes API). Its kubeconfig names http://127.0.0.1:3129 of the sandbox's own loopback
# and holds no credential; the manager adds the token there. A read grant passes a list and refuses
# a patch before it leaves (a Kubernetes Status naming the verb and the resource); a write grant
# passes it; every request is in the exec's record. The real cluster's case is in
# manager_egress_kubernetes.sh.

# edge_respond: the stand-in's answers for the list and the patch (any credential: the test reads
# which one came from its log).
edge_respond() {
	cat >"$TD/responses.json" <<-'EOF'
		{"GET /api/v1/namespaces/default/pods?limit=500":
		   {"status": 200, "body": {"kind": "PodList", "apiVersion": "v1", "items": [{"metadata": {"name": "payments-0"}}]}},
		 "PATCH /apis/apps/v1/namespaces/default/deployments/payments":
		   {"status": 200, "body": {"kind": "Deployment", "apiVersion": "apps/v1", "metadata": {"name": "payments"}}}}
	EOF
	chown "$RUN_USER:" "$TD/responses.json"
}

test_manager_egress_edge() {
	local token m
	brokers_start || return
	edge_respond
	mgr_session --grant kubernetes:staging=read --network proxy
	mgr exec --session "$SID" -- 'cat "$KUBECONFIG"; echo; curl -s --noproxy "*" "http://127.0.0.1:3129/api/v1/namespaces/default/pods?limit=500"'
	assert_eq "a list through the edge: exit code (stderr: $(head -c 400 "$ERR"))" 0 "$RC"
	assert_match "the kubeconfig names the edge" '"server": "http://127.0.0.1:3129"' "$(cat "$OUT")"
	grep -q '"token"\|certificate-authority' "$OUT" && bad "the kubeconfig holds a credential: $(head -c 400 "$OUT")"
	assert_match "the API server's answer" '"kind": "PodList"' "$(cat "$OUT")"
	token=$(jq -rs '[.[] | select(.method == "GET")][0].headers.authorization' "$TD/requests.log")
	assert_match "the grant's token reached the API server, added at the edge" "^Bearer k8s-token-viewer-" "$token"
	token=${token#Bearer }

	# The sandbox's whole view holds no token: its environment, every process's, and every file it can
	# read outside the host's read-only /usr (proved able to find one: a marker planted first). The
	# command names each string in two halves, so that its own command line holds neither whole, and
	# the grep that reads the processes takes it from a file, not its arguments.
	m=k8s-token-marker-$$
	mgr exec --session "$SID" -- "echo $m > planted.txt; "'
		for t in "k8s-token-""marker-'"$$"'" "k8s-token-""viewer-"; do
			{ env; cat /proc/[0-9]*/environ /proc/[0-9]*/cmdline 2>/dev/null | tr "\0" "\n"; } | grep -c -F -f <(echo "$t")
			grep -rlsF --exclude-dir=proc --exclude-dir=sys --exclude-dir=usr "$t" / 2>/dev/null | head -n 3
			echo "--"
		done'
	assert_eq "the search: exit code (stderr: $(head -c 300 "$ERR"))" 0 "$RC"
	assert_match "the search finds the planted marker" "planted.txt" "$(sed -n '1,/^--$/p' "$OUT")"
	assert_eq "no token of the grant is anywhere in the sandbox" "0 --" \
		"$(sed -n '/^--$/,$p' "$OUT" | sed 1d | tr '\n' ' ' | sed 's/ $//')"

	# A patch under read: refused at the edge, nothing leaves.
	mgr exec --session "$SID" -- 'curl -s --noproxy "*" -X PATCH -H "Content-Type: application/merge-patch+json" -d "{\"spec\":{\"replicas\":1}}" -w "\n%{http_code}\n" http://127.0.0.1:3129/apis/apps/v1/namespaces/default/deployments/payments'
	assert_eq "a patch under read: the answer" 403 "$(tail -n 1 "$OUT")"
	assert_match "the refusal names the verb and the resource" 'verb \\"patch\\" on apps/deployments' "$(cat "$OUT")"
	assert_eq "nothing left the edge" 0 "$(jq -rs '[.[] | select(.method == "PATCH")] | length' "$TD/requests.log")"

	# Each exec's record lists its requests (records: newest first).
	mgr records --session "$SID"
	assert_json '[.records[] | .result.egress.requests // 0]' '[1,0,1]'
	assert_json '.records[2].result.egress.details[0].kubernetes.verb' '"list"'
	assert_json '.records[2].result.egress.details[0].status' 200
	assert_json '.records[0].result.egress.refused' 1
	assert_json '.records[0].result.egress.mutating_accepted' 0
	assert_json '.records[0].result.egress.details[0].kubernetes.resource' '"deployments"'

	# Under write the patch passes, with its body; the record says a mutating request was accepted.
	mgr grant --session "$SID" --set kubernetes:staging=write
	assert_eq "grant exit code" 0 "$RC"
	mgr exec --session "$SID" -- 'curl -s --noproxy "*" -X PATCH -H "Content-Type: application/merge-patch+json" -d "{\"spec\":{\"replicas\":1}}" -w "\n%{http_code}\n" http://127.0.0.1:3129/apis/apps/v1/namespaces/default/deployments/payments'
	assert_eq "a patch under write: the answer" 200 "$(tail -n 1 "$OUT")"
	assert_eq "its body reached the API server" '{"spec":{"replicas":1}}' \
		"$(jq -rs '[.[] | select(.method == "PATCH")][0].body' "$TD/requests.log")"
	assert_match "with the write account's token" "^Bearer k8s-token-deployer-" \
		"$(jq -rs '[.[] | select(.method == "PATCH")][0].headers.authorization' "$TD/requests.log")"
	mgr records --session "$SID"
	assert_json '.records[0].result.egress.mutating_accepted' 1
	assert_json '.records[0].result.egress.details[0].status' 200
}
t manager_egress_edge test_manager_egress_edge

# The edge on the podman backend: the grant's listener on the container's 127.0.0.1:3129 comes from
# the agent's net socket as the proxy's does; the kubeconfig names it and holds no credential, a list
# through it reaches the API server with the token the manager added, a patch under read is refused
# before it leaves, and both are on their execs' records. (The image has bash, no curl: the requests
# are written by hand.)
test_podman_egress_edge() {
	local get='exec 3<>/dev/tcp/127.0.0.1/3129 || exit 1
printf "GET /api/v1/namespaces/default/pods?limit=500 HTTP/1.1\r\nHost: 127.0.0.1:3129\r\nConnection: close\r\n\r\n" >&3
cat <&3'
	local patch='exec 3<>/dev/tcp/127.0.0.1/3129 || exit 1
printf "PATCH /apis/apps/v1/namespaces/default/deployments/payments HTTP/1.1\r\nHost: 127.0.0.1:3129\r\nContent-Type: application/merge-patch+json\r\nContent-Length: 2\r\nConnection: close\r\n\r\n{}" >&3
head -n 1 <&3'
	need_podman
	# shellcheck disable=SC2034 # read by brokers_start (manager_brokers.sh)
	BROKERS_POD=1
	brokers_start || return
	edge_respond
	mgr_session --grant kubernetes:staging=read --network proxy || return
	mgr exec --session "$SID" -- 'cat "$KUBECONFIG"'
	assert_eq "the kubeconfig: exit code (stderr: $(head -c 300 "$ERR"))" 0 "$RC"
	assert_match "the kubeconfig names the edge" '"server": "http://127.0.0.1:3129"' "$(cat "$OUT")"
	grep -q '"token"\|certificate-authority' "$OUT" && bad "the kubeconfig holds a credential: $(head -c 400 "$OUT")"
	mgr exec --session "$SID" -- "$get"
	assert_match "a list through the edge (stderr: $(head -c 300 "$ERR"))" '^HTTP/1.1 200' "$(cat "$OUT")"
	assert_match "the API server's answer" '"kind": "PodList"' "$(cat "$OUT")"
	assert_match "the grant's token reached the API server, added at the edge" "^Bearer k8s-token-viewer-" \
		"$(jq -rs '[.[] | select(.method == "GET")][0].headers.authorization' "$TD/requests.log")"
	mgr exec --session "$SID" -- "$patch"
	assert_match "a patch under read" '^HTTP/1.1 403' "$(cat "$OUT")"
	assert_eq "nothing left the edge" 0 "$(jq -rs '[.[] | select(.method == "PATCH")] | length' "$TD/requests.log")"
	mgr records --session "$SID"
	assert_json '[.records[0].result.egress.details[0] | .kubernetes.verb, .refused]' '["patch",true]'
	assert_json '[.records[1].result.egress.details[0] | .kubernetes.verb, .status]' '["list",200]'
}
t manager_egress_podman_edge test_podman_egress_edge

# The manager killed while a patch is on its way through the edge: the exec's record still says the
# patch left (kept before it did) and that its answer is not on record, whatever end recovery finds.
test_manager_egress_edge_killed() {
	local i bg patch='curl -s --noproxy "*" -X PATCH -H "Content-Type: application/merge-patch+json" -d "{\"spec\":{\"replicas\":2}}" http://127.0.0.1:3129/apis/apps/v1/namespaces/default/deployments/payments; echo "curl: $?"'
	brokers_start || return
	# the API server takes its time: the manager dies before the answer
	echo '{"PATCH /apis/apps/v1/namespaces/default/deployments/payments": {"status": 200, "delay": 8, "body": {"kind": "Deployment"}}}' \
		>"$TD/responses.json"
	chown "$RUN_USER:" "$TD/responses.json"
	mgr_session --grant kubernetes:staging=write --network proxy
	"${AS[@]}" env "SANDBOX_MANAGER_SOCKET=$MSOCK" "$MANAGER" exec --session "$SID" -- "$patch" >"$TD/bg.out" 2>&1 &
	bg=$!
	for i in $(seq 1 100); do
		[ "$(jq -rs '[.[] | select(.method == "PATCH")] | length' "$TD/requests.log" 2>/dev/null)" = 1 ] && break
		sleep 0.1
	done
	assert_eq "the patch reached the API server" 1 "$(jq -rs '[.[] | select(.method == "PATCH")] | length' "$TD/requests.log")"
	kill -KILL "$MGR_PID"
	wait "$MGR_PID" 2>/dev/null
	mgr_start || return 1
	trap 'kill "$BROKER_PID" 2>/dev/null; mgr_cleanup' EXIT # mgr_start set its own: the stand-in too
	# the client of the cut call hears of it from the restarted manager (or gives up): never rerun
	wait "$bg" 2>/dev/null
	mgr records --session "$SID" --limit 1
	assert_json '.records[0].state | IN("exited", "uncertain")' true
	assert_json '.records[0].result.egress.mutating | length' 1
	assert_json '.records[0].result.egress.mutating[0] | [.method, .verb, .resource, .name, .status]' \
		'["PATCH","patch","deployments","payments",null]'
}
t manager_egress_edge_killed test_manager_egress_edge_killed
