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
