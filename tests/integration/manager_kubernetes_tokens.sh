# shellcheck shell=bash
# shellcheck disable=SC2016 # the commands expand their variables inside the sandbox
# The tokenrequest broker on the kubernetes backend, on the run's real cluster: the token a call
# gets is bound to the sandbox's pod (boundObjectRef Pod, name and UID), which runs as the grant's
# service account; the API server's TokenReview says so (extra authentication.kubernetes.io/pod-name
# and pod-uid). A grant change gives a new pod of the other service account, and the old token stops
# authenticating once its pod is gone (after the API server's cache of ~10 s), while the new one
# works. Root only, inside CLUSTER_NET (k8s_cluster, k8s_mgr_start: manager_kubernetes.sh); every
# object made here has ktoken in its name and is deleted at the end. Registered in cluster_smoke.sh.

# ktoken_kubectl ARGS...: kubectl with the cluster's admin credentials, inside its network.
ktoken_kubectl() {
	"${K8S_NET_CMD[@]}" kubectl --kubeconfig "$K8S_KUBECONFIG" "$@"
}

# ktoken_review TOKEN: the TokenReview's status for TOKEN (admin credentials), as compact JSON.
ktoken_review() {
	jq -n --arg t "$1" '{apiVersion: "authentication.k8s.io/v1", kind: "TokenReview", spec: {token: $t}}' \
		>"$TD/review.json"
	ktoken_kubectl create --raw /apis/authentication.k8s.io/v1/tokenreviews -f "$TD/review.json" | jq -c .status
}

# ktoken_setup: the grant's two service accounts (read, write), the manager's own account with a
# Role that may create tokens of exactly those two, the manager's token (TokenRequest, unbound: the
# operator's credential), and the broker config.
ktoken_setup() {
	KT=ktoken-$$
	KT_NS=default # the backend's namespace: the admin kubeconfig names none
	if ! { ktoken_kubectl create serviceaccount "$KT-read" &&
		ktoken_kubectl create serviceaccount "$KT-write" &&
		ktoken_kubectl create serviceaccount "$KT-manager" &&
		ktoken_kubectl create role "$KT-tokens" --verb=create --resource=serviceaccounts/token \
			--resource-name="$KT-read" --resource-name="$KT-write" &&
		ktoken_kubectl create rolebinding "$KT-tokens" --role="$KT-tokens" \
			--serviceaccount="$KT_NS:$KT-manager"; } >"$TD/setup.out" 2>&1; then
		bad "cannot make the service accounts and RBAC: $(tail -n 2 "$TD/setup.out")"
		return 1
	fi
	echo '{"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": {"expirationSeconds": 3600}}' \
		>"$TD/manager-request.json"
	ktoken_kubectl create --raw "/api/v1/namespaces/$KT_NS/serviceaccounts/$KT-manager/token" \
		-f "$TD/manager-request.json" | jq -r .status.token >"$TD/manager.token"
	chmod 0600 "$TD/manager.token"
	[ -s "$TD/manager.token" ] || { bad "no token for the manager's service account"; return 1; }
	# the cluster's kubeconfig (YAML, scripts/cluster/up.sh): its CA and server
	sed -n 's/^ *certificate-authority-data: *//p' "$K8S_KUBECONFIG" | head -n 1 | base64 -d >"$TD/ca.crt"
	grep -q "BEGIN CERTIFICATE" "$TD/ca.crt" || { bad "no CA in $K8S_KUBECONFIG"; return 1; }
	KT_SERVER=$(sed -n 's/^ *server: *//p' "$K8S_KUBECONFIG" | head -n 1)
	jq -n --arg server "$KT_SERVER" --arg ca "$TD/ca.crt" --arg ns "$KT_NS" --arg r "$KT-read" --arg w "$KT-write" \
		--arg tok "$TD/manager.token" '{server: $server, ca_file: $ca, namespace: $ns, read_service_account: $r,
		write_service_account: $w, token_file: $tok, expiration_seconds: 600}' >"$TD/ktoken.json"
}

ktoken_cleanup() {
	[ -n "${KT:-}" ] || return 0
	ktoken_kubectl delete rolebinding "$KT-tokens" --ignore-not-found >/dev/null 2>&1
	ktoken_kubectl delete role "$KT-tokens" --ignore-not-found >/dev/null 2>&1
	ktoken_kubectl delete serviceaccount "$KT-read" "$KT-write" "$KT-manager" --ignore-not-found >/dev/null 2>&1
}

# ktoken_call: a call that prints its kubeconfig's token; sets TOKEN, POD and POD_UID (the
# sandbox's recorded identity, from session show).
ktoken_call() {
	local rid
	mgr exec --session "$SID" -- 'jq -r ".users[0].user.token" "$KUBECONFIG" 2>/dev/null ||
		sed -n "s/.*\"token\": *\"\([^\"]*\)\".*/\1/p" "$KUBECONFIG"'
	assert_eq "the call's exit code (stderr: $(head -c 400 "$ERR"); log: $(tail -n 2 "$TD/manager.log"))" 0 "$RC"
	TOKEN=$(tail -n 1 "$OUT")
	mgr session show --session "$SID"
	rid=$(jr .sandbox.runtime_id)
	POD=$(echo "$rid" | sed 's/^kubernetes:\([^/]*\)\/.*/\1/')
	POD_UID=$(echo "$rid" | cut -d/ -f2)
	if [ -z "$TOKEN" ] || [ -z "$POD_UID" ]; then bad "no token or pod: $(head -c 300 "$OUT"); sandbox $rid"; fi
}

# ktoken_assert_bound WHAT SA: the TokenReview of $TOKEN says the service account SA, bound to
# $POD of $POD_UID; the pod runs as SA and has no token of it mounted.
ktoken_assert_bound() {
	local st
	st=$(ktoken_review "$TOKEN")
	assert_eq "$1: authenticated ($st)" true "$(echo "$st" | jq -r .authenticated)"
	assert_eq "$1: the service account" "system:serviceaccount:$KT_NS:$2" "$(echo "$st" | jq -r .user.username)"
	assert_eq "$1: bound to the pod's name" "$POD" \
		"$(echo "$st" | jq -r '.user.extra["authentication.kubernetes.io/pod-name"][0]')"
	assert_eq "$1: bound to the pod's UID" "$POD_UID" \
		"$(echo "$st" | jq -r '.user.extra["authentication.kubernetes.io/pod-uid"][0]')"
	assert_eq "$1: the pod's serviceAccountName" "$2" \
		"$(ktoken_kubectl get pod "$POD" -o jsonpath='{.spec.serviceAccountName}')"
	assert_eq "$1: no token of it mounted" false \
		"$(ktoken_kubectl get pod "$POD" -o jsonpath='{.spec.automountServiceAccountToken}')"
}

# ktoken_wait_dead TOKEN: TokenReview of TOKEN once a second until it no longer authenticates (the
# API server caches a valid token for about 10 s), 60 s at most; the last review in st, the seconds
# waited in i.
ktoken_wait_dead() {
	for i in $(seq 1 60); do
		st=$(ktoken_review "$1")
		[ "$(echo "$st" | jq -r .authenticated)" = true ] || return 0
		sleep 1
	done
}

test_kubernetes_tokens() {
	k8s_cluster
	local old_token old_uid old_pod st i
	trap ktoken_cleanup EXIT
	ktoken_setup || return 1
	mgr_repo
	k8s_mgr_start --resource "kubernetes:ktoken=tokenrequest:$TD/ktoken.json" || return 1
	trap 'k8s_cleanup; ktoken_cleanup' EXIT
	mgr_session --grant kubernetes:ktoken=read
	ktoken_call
	ktoken_assert_bound "read" "$KT-read"
	grep -q "$(cat "$TD/manager.token")" "$OUT" && bad "the manager's own token reached the sandbox"

	# A grant change: the sandbox is retired (its pod deleted with evidence), the next call runs
	# in a new pod of the write account with a new token; the old token dies with its pod.
	old_token=$TOKEN old_uid=$POD_UID old_pod=$POD
	mgr grant --session "$SID" --set kubernetes:ktoken=write
	assert_eq "grant exit code (stderr: $(head -c 300 "$ERR"))" 0 "$RC"
	ktoken_call
	assert_ne "a new pod" "$old_uid" "$POD_UID"
	assert_ne "a new token" "$old_token" "$TOKEN"
	# its end proven (its container terminated, or the object gone): deleted, or on its way
	st=$(ktoken_kubectl get pod "$old_pod" --ignore-not-found -o json | jq -r --arg u "$old_uid" \
		'select(.metadata.uid == $u) | .metadata.deletionTimestamp // "not deleted"')
	assert_ne "the old pod is deleted" "not deleted" "$st"
	ktoken_assert_bound "write" "$KT-write"
	ktoken_wait_dead "$old_token"
	assert_ne "the old token stops authenticating (after ${i} s: $st)" true "$(echo "$st" | jq -r .authenticated)"
	assert_match "the API server says why" "invalid bearer token|has been invalidated|not found" \
		"$(echo "$st" | jq -r .error)"
	[ "$(echo "$st" | jq -r .authenticated)" = true ] || echo "the old token stopped authenticating ${i} s after its pod's end was proven"
	st=$(ktoken_review "$TOKEN")
	assert_eq "the new token still works ($st)" true "$(echo "$st" | jq -r .authenticated)"

	kill -TERM "$MGR_PID"
	wait "$MGR_PID" 2>/dev/null
	# and the new token dies with the new pod, which the stop deleted
	ktoken_wait_dead "$TOKEN"
	assert_ne "the last token dies with the stop's pod (after ${i} s)" true "$(echo "$st" | jq -r .authenticated)"
}
# registered in cluster_smoke.sh, which runs it while the run's cluster is up
