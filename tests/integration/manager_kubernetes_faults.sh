# shellcheck shell=bash
# The kubernetes backend on the real cluster (issue 17): deploy/kubernetes/ against the API server, the
# manager with exactly the documented Role, the in-cluster service account, a server that drops
# procMount, and the pod's life from outside: a detached child, cancel, the pod deleted or its
# container killed mid-call, idle eviction. Root only, the manager inside CLUSTER_NET (as
# manager_kubernetes.sh, whose helpers these use: k8s_cluster, k8s_cleanup). Registered in
# cluster_smoke.sh (between cluster_smoke and cluster_down); this file only defines functions, so the
# order run.sh sources the files in does not matter. Every namespace made here has kdeploy in its name
# and is deleted at the test's end.

KD_DEPLOY=$(cd "$(dirname "${BASH_SOURCE[0]}")/../../deploy/kubernetes" && pwd)
KD_PROXY=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/k8s_dropping_proxy.py

# kd ARGS...: kubectl as the cluster's admin, in CLUSTER_NET (setup and inspection only).
kd() { "${K8S_NET_CMD[@]}" kubectl --kubeconfig "$K8S_ADMIN" "$@"; }

# kd_setup: the cluster (k8s_cluster) and the cleanup of whatever this file's tests make.
kd_setup() {
	k8s_cluster
	K8S_ADMIN=$K8S_KUBECONFIG
	K8S_CA=$(dirname "$K8S_ADMIN")/pki/ca.crt
	K8S_SERVER=$(sed -n 's/^ *server: *//p' "$K8S_ADMIN" | head -n 1)
	[ -r "$K8S_CA" ] || skip "the cluster's CA $K8S_CA is not readable"
	KD_NAMESPACES=() KD_PIDS=() KD_RMDIRS=() KD_REJECT=()
	trap kd_cleanup EXIT
}

kd_cleanup() {
	local ns d p
	# the proxies first: k8s_cleanup (mgr_cleanup) waits for every child of the test
	for p in "${KD_PIDS[@]}"; do kill -TERM "$p" 2>/dev/null; done
	[ -n "${MSTATE:-}" ] && k8s_cleanup
	for ns in "${KD_NAMESPACES[@]}"; do kd delete namespace "$ns" --wait=false >/dev/null 2>&1; done
	for d in "${KD_RMDIRS[@]}"; do rmdir "$d" 2>/dev/null; done
	[ "${#KD_REJECT[@]}" -gt 0 ] && "${K8S_NET_CMD[@]}" iptables -D "${KD_REJECT[@]}" 2>/dev/null
	return 0
}

# kd_namespace WHAT: a fresh namespace kdeploy-WHAT-<pid> (in KD_NS), with its default service
# account (the admission of pods needs it), deleted at the test's end.
kd_namespace() {
	KD_NS=kdeploy-$1-$$
	kd create namespace "$KD_NS" >/dev/null || { bad "cannot create namespace $KD_NS"; return 1; }
	KD_NAMESPACES+=("$KD_NS")
	for _ in $(seq 1 100); do
		kd -n "$KD_NS" get serviceaccount default >/dev/null 2>&1 && return 0
		sleep 0.1
	done
	bad "namespace $KD_NS got no default service account"
	return 1
}

# kd_deploy_copy: deploy/kubernetes/*.yaml with their namespace made $KD_NS, in $TD/deploy.
kd_deploy_copy() {
	mkdir -p "$TD/deploy"
	for f in "$KD_DEPLOY"/*.yaml; do
		sed "s/^\( *\)namespace: infra-sandbox\$/\1namespace: $KD_NS/; s/^  name: infra-sandbox\$/  name: $KD_NS/" \
			"$f" >"$TD/deploy/$(basename "$f")"
	done
}

# kd_token SA: a token of the service account SA in $KD_NS by the TokenRequest API, in KD_TOKEN.
kd_token() {
	echo '{"apiVersion":"authentication.k8s.io/v1","kind":"TokenRequest","spec":{"expirationSeconds":3600}}' \
		>"$TD/tokenrequest.json"
	KD_TOKEN=$(kd create --raw "/api/v1/namespaces/$KD_NS/serviceaccounts/$1/token" -f "$TD/tokenrequest.json" |
		jq -r .status.token)
	if [ -z "$KD_TOKEN" ] || [ "$KD_TOKEN" = null ]; then
		bad "no token for $KD_NS/$1"
		return 1
	fi
}

# kd_kubeconfig FILE SERVER CA TOKEN: a kubeconfig of one token user.
kd_kubeconfig() {
	printf '%s\n' "apiVersion: v1" "kind: Config" "current-context: kdeploy" "contexts:" "- name: kdeploy" \
		"  context:" "    cluster: c" "    user: u" "clusters:" "- name: c" "  cluster:" "    server: $2" \
		"    certificate-authority: $3" "users:" "- name: u" "  user:" "    token: $4" >"$1"
	chmod 0600 "$1"
}

# kd_mgr_start ARGS...: as k8s_mgr_start, the kubeconfig and namespace arguments the caller's (in
# ARGS); K8S_RUN, when set, is the command prefix the manager runs under (default CLUSTER_NET).
kd_mgr_start() {
	MSTATE=$(mktemp -d /tmp/sbm.XXXXXX)
	echo "$MSTATE" >"$TD/mstate.path"
	chmod 0711 "$MSTATE" "$TD"
	MSOCK=$MSTATE/manager.sock
	K8S_ARGS=(serve --state-dir "$MSTATE" --backend kubernetes --image infra-sandbox-agent:dev
		--k8s-volume "hostpath:$MSTATE/volume" --volume "$MSTATE/volume" "$@")
	k8s_restart
}

# kd_uid: the recorded pod UID of $SID's sandbox (session show's runtime_id), in KD_UID and KD_POD.
kd_uid() {
	local rid
	mgr session show --session "$SID"
	rid=$(jr .sandbox.runtime_id)
	KD_POD=$(echo "$rid" | sed -n 's|^kubernetes:\([^/]*\)/.*|\1|p')
	KD_UID=$(echo "$rid" | cut -d/ -f2)
	[[ $KD_UID =~ ^[0-9a-f-]{36}$ ]] || { bad "no pod UID in the sandbox's identity '$rid'"; return 1; }
}

# kd_pod_state NS UID: what the real API says of the pod of UID: "gone", "terminated", or its phase.
kd_pod_state() {
	kd -n "$1" get pods -o json | jq -r --arg u "$2" '
		[.items[] | select(.metadata.uid == $u)] |
		if length == 0 then "gone"
		elif (.[0].status.containerStatuses // [] | map(select(.name == "agent" and .state.terminated != null)) | length) > 0
		then "terminated" else .[0].status.phase end'
}

# kd_evidence_row: the sandbox row of $SID as records.db has it (state|evidence).
kd_evidence_row() {
	sqlite3 -readonly "$MSTATE/records.db" "SELECT state || '|' || coalesce(evidence, '') FROM sandboxes WHERE session = '$SID'"
}

# kd_host_pids ERE: the host's PIDs whose command line matches ERE (the container's processes are the
# host's too: the node is this machine).
kd_host_pids() { pgrep -f -- "$1"; }

# ---------------------------------------------------------------- deploy/kubernetes/

# Every file of deploy/kubernetes/ is accepted by the real API server (a server-side dry run: the
# admission chain and the schema of 1.20, nothing stored), and the Role and the NetworkPolicy are
# exactly the documented ones.
test_kubernetes_deploy_dryrun() {
	kd_setup
	local out n
	kd_namespace dry || return 1
	kd_deploy_copy
	out=$(kd apply --dry-run=server -f "$TD/deploy/" 2>&1)
	assert_eq "dry run exit code ($out)" 0 "$?"
	n=$(grep -c '(server dry run)$' <<<"$out")
	assert_eq "objects accepted by the server ($out)" 13 "$n"
	for o in "namespace/$KD_NS" serviceaccount/sandbox-manager role.rbac.authorization.k8s.io/sandbox-manager \
		rolebinding.rbac.authorization.k8s.io/sandbox-manager persistentvolumeclaim/sandbox-workspaces \
		deployment.apps/sandbox-manager service/sandbox-manager deployment.apps/sandbox-postgres \
		service/sandbox-postgres networkpolicy.networking.k8s.io/sandbox-pods \
		networkpolicy.networking.k8s.io/sandbox-pods-egress \
		networkpolicy.networking.k8s.io/sandbox-managers networkpolicy.networking.k8s.io/sandbox-postgres; do
		grep -q "^$o .*(server dry run)$" <<<"$out" || bad "the dry run did not accept $o: $out"
	done
	# the dry run reaches the server's validation: a Deployment it must refuse is refused
	sed 's/replicas: 2/replicas: -1/' "$TD/deploy/deployment.yaml" >"$TD/bad.yaml"
	out=$(kd apply --dry-run=server -f "$TD/bad.yaml" 2>&1)
	assert_ne "a negative replica count: exit code" 0 "$?"
	assert_match "a negative replica count: the server says" "replicas.*must be greater than or equal to 0" "$out"
	# the Role as the server would store it: exactly these rules
	out=$(kd apply --dry-run=server -o json -f "$TD/deploy/rbac.yaml" |
		jq -c '.items[] | select(.kind == "Role") | [.rules[] | [.apiGroups, .resources, .verbs]]')
	assert_eq "the Role's rules" \
		'[[[""],["pods"],["create","get","list","watch","delete"]],[[""],["secrets"],["create","delete"]],[[""],["serviceaccounts/token"],["create"]],[["networking.k8s.io"],["networkpolicies"],["get","update"]],[["networking.k8s.io"],["networkpolicies"],["create"]]]' \
		"$out"
	# and the Deployment runs the managers as the docs say: two replicas, each with its own state
	# directory (an emptyDir), its id the pod's name, its advertised address the pod's IP
	out=$(kd apply --dry-run=server -o json -f "$TD/deploy/deployment.yaml" |
		jq -c '.spec.template.spec as $p | [.spec.replicas, .spec.strategy.type, $p.serviceAccountName,
			($p.containers[0].args | index("--backend=kubernetes") != null),
			($p.containers[0].args | index("--manager-id=$(POD_NAME)") != null),
			($p.containers[0].args | index("--advertise=tls://$(POD_IP):7444") != null),
			[$p.containers[0].env[] | select(.valueFrom.fieldRef) | .valueFrom.fieldRef.fieldPath],
			[$p.volumes[] | select(.name == "state") | .emptyDir != null][0]]')
	assert_eq "the Deployment" '[2,"RollingUpdate","sandbox-manager",true,true,true,["metadata.name","status.podIP"],true]' "$out"
	# the NetworkPolicy as the server would store it (the bridge plugin of this cluster enforces none:
	# test_backend_kubernetes netpol_selects_the_pods matches its selectors to the pods' labels)
	out=$(kd apply --dry-run=server -o json -f "$TD/deploy/networkpolicy.yaml" |
		jq -c '.items[] | select(.metadata.name == "sandbox-pods") | [.spec.podSelector, .spec.policyTypes,
			.spec.ingress[0].from, .spec.ingress[0].ports, .spec.egress]')
	assert_eq "the NetworkPolicy" '[{"matchLabels":{"app.kubernetes.io/managed-by":"infra-sandbox-manager"}},["Ingress"],[{"podSelector":{"matchLabels":{"app.kubernetes.io/name":"infra-sandbox-manager"}}}],[{"port":7443,"protocol":"TCP"}],null]' \
		"$out"
	# their egress under policy open, for no pod of policy proxy (the manager's infra-sandbox-proxy
	# allows those none, and policies add up)
	out=$(kd apply --dry-run=server -o json -f "$TD/deploy/networkpolicy.yaml" |
		jq -c '.items[] | select(.metadata.name == "sandbox-pods-egress") | [.spec.podSelector, .spec.policyTypes,
			.spec.egress[0].to[0].ipBlock.except]')
	assert_eq "the egress NetworkPolicy" '[{"matchExpressions":[{"key":"infra-sandbox/network","operator":"NotIn","values":["proxy"]}],"matchLabels":{"app.kubernetes.io/managed-by":"infra-sandbox-manager"}},["Egress"],["10.0.0.0/8","172.16.0.0/12","192.168.0.0/16","100.64.0.0/10","169.254.0.0/16","127.0.0.0/8"]]' \
		"$out"
}

# deploy/kubernetes/certs.sh for real in a namespace of its own: the operator's CA stays on the
# operator's side (only ca.crt goes in), the Secret and the ConfigMap hold exactly what
# deployment.yaml mounts, a second run changes nothing it made (the store's password among it); and
# what it issued serves: a manager with its server certificate and client CA (loopback, the process
# backend) answers a principal's client that names the certificate's name sandbox-manager, and
# refuses a client with no certificate.
test_kubernetes_deploy_certs() {
	kd_setup
	local out=$TD/certs port pw pw2 sum sum2
	local -a run
	kd_namespace certs || return 1
	jq -n --arg repo "$TD/repo" '{"alice-ci": {identities: ["alice"], repos: [$repo]}, ops: {operator: true}}' \
		>"$TD/principals.json"
	run=(env "NAMESPACE=$KD_NS" "KUBECTL=${K8S_NET_CMD[*]} kubectl --kubeconfig $K8S_ADMIN" "SANDBOX_MANAGER=$MANAGER"
		bash "$KD_DEPLOY/certs.sh" "$TD/principals.json" "$out")
	"${run[@]}" >"$TD/certs.log" 2>&1
	RC=$?
	assert_eq "certs.sh exit code ($(tail -n 3 "$TD/certs.log"))" 0 "$RC"
	assert_eq "the Secret sandbox-manager-tls" '["ca.crt","server.crt","server.key"]' \
		"$(kd -n "$KD_NS" get secret sandbox-manager-tls -o json | jq -c '.data | keys')"
	assert_eq "the ConfigMap sandbox-manager-principals" '["deny","principals.json"]' \
		"$(kd -n "$KD_NS" get configmap sandbox-manager-principals -o json | jq -c '.data | keys')"
	assert_eq "its principals" "$(jq -c . "$TD/principals.json")" \
		"$(kd -n "$KD_NS" get configmap sandbox-manager-principals -o json | jq -c '.data["principals.json"] | fromjson')"
	pw=$(kd -n "$KD_NS" get secret sandbox-postgres -o json | jq -r '.data.password' | base64 -d)
	assert_match "the store's password" '^[0-9a-f]{48}$' "$pw"
	assert_eq "the CA's key, the operator's alone" 600 "$(stat -c %a "$out/ca/ca.key")"
	sum=$(cat "$out/server/server.crt" "$out/clients/alice-ci/alice-ci.crt" | sha256sum)
	"${run[@]}" >>"$TD/certs.log" 2>&1
	RC=$?
	assert_eq "certs.sh again: exit code" 0 "$RC"
	pw2=$(kd -n "$KD_NS" get secret sandbox-postgres -o json | jq -r '.data.password' | base64 -d)
	sum2=$(cat "$out/server/server.crt" "$out/clients/alice-ci/alice-ci.crt" | sha256sum)
	assert_eq "certs.sh again: the password kept" "$pw" "$pw2"
	assert_eq "certs.sh again: the certificates kept" "$sum" "$sum2"

	# what it issued, served as deployment.yaml serves it
	port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
	mgr_repo && mgr_start --listen "tls:127.0.0.1:$port" --tls-cert "$out/server/server.crt" \
		--tls-key "$out/server/server.key" --tls-client-ca "$out/ca/ca.crt" \
		--tls-principals "$TD/principals.json" --tls-deny "$out/deny" || return 1
	trap 'mgr_cleanup; MSTATE=; kd_cleanup' EXIT
	timeout -k 3 60 env "SANDBOX_MANAGER_SOCKET=tls://127.0.0.1:$port" SANDBOX_MANAGER_TLS_NAME=sandbox-manager \
		"$MANAGER" --tls-cert "$out/clients/ops/ops.crt" --tls-key "$out/clients/ops/ops.key" \
		--tls-ca "$out/clients/ops/ca.crt" status >"$OUT" 2>"$ERR"
	RC=$?
	assert_eq "status as ops over TLS (stderr: $(head -c 300 "$ERR"))" 0 "$RC"
	timeout -k 3 60 env "SANDBOX_MANAGER_SOCKET=tls://127.0.0.1:$port" SANDBOX_MANAGER_TLS_NAME=sandbox-manager \
		"$MANAGER" --tls-cert "$out/clients/alice-ci/alice-ci.crt" --tls-key "$out/clients/alice-ci/alice-ci.key" \
		--tls-ca "$out/clients/alice-ci/ca.crt" session create --identity alice --repo "$REPO" >"$OUT" 2>"$ERR"
	RC=$?
	assert_eq "session create as alice-ci over TLS (stderr: $(head -c 300 "$ERR"))" 0 "$RC"
	assert_match "its session" '.' "$(jr .session)"
	timeout -k 3 60 env "SANDBOX_MANAGER_SOCKET=tls://127.0.0.1:$port" SANDBOX_MANAGER_TLS_NAME=sandbox-manager \
		"$MANAGER" --tls-ca "$out/clients/ops/ca.crt" status >"$OUT" 2>"$ERR"
	RC=$?
	assert_ne "status without a client certificate: exit code" 0 "$RC"
}

# ---------------------------------------------------------------- RBAC

# The manager with a token of the documented service account, bound to exactly the documented Role,
# in a namespace of its own: a session's calls run and the stop proves the pod's end. Without the
# RoleBinding it refuses to start and says why.
test_kubernetes_rbac() {
	kd_setup
	local kc=$TD/sa.kubeconfig
	kd_namespace rbac || return 1
	kd_deploy_copy
	kd apply -f "$TD/deploy/rbac.yaml" >/dev/null || { bad "cannot apply rbac.yaml in $KD_NS"; return 1; }
	kd_token sandbox-manager || return 1
	kd_kubeconfig "$kc" "$K8S_SERVER" "$K8S_CA" "$KD_TOKEN"

	# without the binding: the service account may do nothing in the namespace
	kd -n "$KD_NS" delete rolebinding sandbox-manager >/dev/null
	for _ in $(seq 1 50); do
		[ "$(kd auth can-i list pods -n "$KD_NS" --as "system:serviceaccount:$KD_NS:sandbox-manager" 2>/dev/null)" = no ] && break
		sleep 0.1
	done
	MSTATE=$(mktemp -d /tmp/sbm.XXXXXX)
	chmod 0711 "$MSTATE"
	timeout 60 "${K8S_NET_CMD[@]}" "$MANAGER" serve --state-dir "$MSTATE" --backend kubernetes --kubeconfig "$kc" \
		--namespace "$KD_NS" --image infra-sandbox-agent:dev --k8s-volume "hostpath:$MSTATE/volume" \
		--volume "$MSTATE/volume" >"$OUT" 2>"$ERR"
	assert_eq "no RoleBinding: exit code" 125 "$?"
	assert_match "no RoleBinding: says" \
		"the manager may not list pods in namespace $KD_NS \(HTTP 403\): .*system:serviceaccount:$KD_NS:sandbox-manager.*cannot list" \
		"$(cat "$ERR")"
	[ -S "$MSTATE/manager.sock" ] && bad "a manager without its Role left a socket"
	rm -rf "$MSTATE"

	# with it, exactly as deploy/kubernetes/rbac.yaml says
	kd apply -f "$TD/deploy/rbac.yaml" >/dev/null || { bad "cannot apply rbac.yaml again"; return 1; }
	for _ in $(seq 1 50); do
		[ "$(kd auth can-i list pods -n "$KD_NS" --as "system:serviceaccount:$KD_NS:sandbox-manager" 2>/dev/null)" = yes ] && break
		sleep 0.1
	done
	mgr_repo
	kd_mgr_start --kubeconfig "$kc" --namespace "$KD_NS" || return 1
	mgr_session
	mgr exec --session "$SID" -- 'pwd -P; echo rbac > rbac.txt'
	assert_eq "a call with the Role (stderr: $(head -c 300 "$ERR"); log: $(tail -n 3 "$TD/manager.log"))" 0 "$RC"
	assert_eq "its output" "$WT" "$(cat "$OUT")"
	assert_eq "the file on the host" rbac "$(cat "$WT/rbac.txt" 2>/dev/null)"
	kd_uid || return 1
	assert_eq "the pod is in the namespace given" Running "$(kd_pod_state "$KD_NS" "$KD_UID")"
	mgr exec --session "$SID" -- 'cat rbac.txt'
	assert_eq "a second call" rbac "$(cat "$OUT")"
	# policy proxy under the same Role: the first such pod has the manager create the NetworkPolicy
	# infra-sandbox-proxy, the second has it read and replace it (k8s_netpol.c); the manager's stop
	# below ends their relays too (agent_relay.c)
	local proxy
	for proxy in 1 2; do
		mgr_session --network proxy
		mgr exec --session "$SID" -- 'echo "$HTTPS_PROXY"'
		assert_eq "a call of policy proxy $proxy with the Role (stderr: $(head -c 300 "$ERR"); log: $(tail -n 3 "$TD/manager.log"))" \
			"http://127.0.0.1:3128" "$(cat "$OUT")"
	done
	assert_eq "the NetworkPolicy, kept under the Role" '["Egress"]' \
		"$(kd get networkpolicy infra-sandbox-proxy -n "$KD_NS" -o json | jq -c .spec.policyTypes)"
	kill -TERM "$MGR_PID"
	wait "$MGR_PID" 2>/dev/null
	assert_match "the stop proved the pod's end" \
		"is gone: (pod terminated for UID $KD_UID|pod UID $KD_UID gone \((404|watch DELETED) after delete with preconditions.uid\))" \
		"$(cat "$TD/manager.log")"
	assert_match "the pod, by the real API" "^(gone|terminated)$" "$(kd_pod_state "$KD_NS" "$KD_UID")"
}

# ---------------------------------------------------------------- the in-cluster service account

# No kubeconfig: the manager reads the service account files a pod has and KUBERNETES_SERVICE_HOST
# and _PORT (k8s_kubeconfig.c, in_cluster_load). Outside a pod: a private mount namespace with a
# tmpfs over /var/run/secrets/kubernetes.io/serviceaccount that holds the token, the CA and the
# namespace, as the kubelet mounts them.
test_kubernetes_incluster() {
	kd_setup
	local sa=/var/run/secrets/kubernetes.io/serviceaccount d p
	kd_namespace incluster || return 1
	kd_deploy_copy
	kd apply -f "$TD/deploy/rbac.yaml" >/dev/null || { bad "cannot apply rbac.yaml in $KD_NS"; return 1; }
	kd_token sandbox-manager || return 1
	mkdir -p "$TD/sa"
	printf '%s' "$KD_TOKEN" >"$TD/sa/token"
	cp "$K8S_CA" "$TD/sa/ca.crt"
	printf '%s' "$KD_NS" >"$TD/sa/namespace"
	chmod 0600 "$TD/sa/token"
	# the mount point: the directories missing on this host are made, and removed (deepest first) at the end
	d=$(readlink -f /var/run)/secrets/kubernetes.io/serviceaccount
	for p in "$d" "$(dirname "$d")" "$(dirname "$(dirname "$d")")"; do [ -e "$p" ] || KD_RMDIRS+=("$p"); done
	mkdir -p "$d" || { bad "cannot make $d"; return 1; }
	cat >"$TD/incluster.sh" <<EOF
#!/bin/sh
# the pod's view: the service account's files at $sa, the API server's address in the environment
mount -t tmpfs -o mode=0755,size=1m kdeploy-sa $sa || exit 1
cp "$TD/sa/token" "$TD/sa/ca.crt" "$TD/sa/namespace" $sa/ || exit 1
exec env KUBERNETES_SERVICE_HOST=127.0.0.1 KUBERNETES_SERVICE_PORT=6443 "\$@"
EOF
	chmod 0755 "$TD/incluster.sh"
	mgr_repo
	K8S_RUN=("${K8S_NET_CMD[@]}" unshare -m --propagation private "$TD/incluster.sh")
	kd_mgr_start || return 1
	unset K8S_RUN
	assert_match "the manager's server and namespace" \
		"kubernetes 1\.[0-9]+ at https://127.0.0.1:6443, namespace $KD_NS:" "$(cat "$TD/manager.log")"
	mgr_session
	mgr exec --session "$SID" -- 'pwd -P; echo in-cluster'
	assert_eq "a call (stderr: $(head -c 300 "$ERR"); log: $(tail -n 3 "$TD/manager.log"))" 0 "$RC"
	assert_lines "$(cat "$OUT")" "$WT" in-cluster
	kd_uid || return 1
	assert_eq "the pod, in the service account's namespace" Running "$(kd_pod_state "$KD_NS" "$KD_UID")"
	grep -q kdeploy-sa /proc/mounts && bad "the service account tmpfs leaked into the host's mounts"
	kill -TERM "$MGR_PID"
	wait "$MGR_PID" 2>/dev/null
	assert_match "the stop proved the pod's end" "is gone: (pod terminated for UID $KD_UID|pod UID $KD_UID gone)" \
		"$(cat "$TD/manager.log")"
}

# ---------------------------------------------------------------- a server that drops procMount, or refuses watches

# kd_proxy MODE: k8s_dropping_proxy.py in front of the real API server (KD_PROXY_MODE=MODE), its log
# $TD/proxy.log, and $TD/proxy.kubeconfig naming it.
kd_proxy() {
	local pki=$TD/proxy-pki port
	mkdir -p "$pki"
	printf 'subjectAltName=IP:127.0.0.1\n' >"$pki/ext"
	if ! openssl req -x509 -newkey rsa:2048 -nodes -days 1 -subj /CN=kdeploy-proxy-ca -keyout "$pki/ca.key" \
		-out "$pki/ca.crt" >/dev/null 2>&1 ||
		! openssl req -newkey rsa:2048 -nodes -subj /CN=127.0.0.1 -keyout "$pki/srv.key" -out "$pki/srv.csr" \
			>/dev/null 2>&1 ||
		! openssl x509 -req -in "$pki/srv.csr" -CA "$pki/ca.crt" -CAkey "$pki/ca.key" -CAcreateserial -days 1 \
			-extfile "$pki/ext" -out "$pki/srv.crt" >/dev/null 2>&1; then
		bad "openssl could not make the proxy's certificates"
		return 1
	fi
	KD_PROXY_MODE=$1 "${K8S_NET_CMD[@]}" python3 "$KD_PROXY" "$TD/proxy.port" "$pki/srv.crt" "$pki/srv.key" \
		"$K8S_SERVER" "$K8S_CA" "$(dirname "$K8S_ADMIN")/pki/admin.crt" "$(dirname "$K8S_ADMIN")/pki/admin.key" \
		2>"$TD/proxy.log" &
	KD_PIDS+=("$!")
	for _ in $(seq 1 100); do [ -s "$TD/proxy.port" ] && break; sleep 0.1; done
	port=$(cat "$TD/proxy.port" 2>/dev/null)
	[ -n "$port" ] || { bad "the proxy did not start: $(cat "$TD/proxy.log")"; return 1; }
	kd_kubeconfig "$TD/proxy.kubeconfig" "https://127.0.0.1:$port" "$pki/ca.crt" via-proxy
}

# An API server that silently drops procMount (k8s_dropping_proxy.py in front of the real one, as a
# server without the ProcMountType gate does): the manager refuses the pod naming procMount, deletes
# it, proves its end through the same server (its watch included), and does not serve.
test_kubernetes_drops_procmount() {
	kd_setup
	local kc=$TD/proxy.kubeconfig pods sess rc
	kd_proxy drop-procmount || return 1
	MSTATE=$(mktemp -d /tmp/sbm.XXXXXX)
	chmod 0711 "$MSTATE" "$TD"
	timeout 150 "${K8S_NET_CMD[@]}" "$MANAGER" serve --state-dir "$MSTATE" --backend kubernetes --kubeconfig "$kc" \
		--image infra-sandbox-agent:dev --k8s-volume "hostpath:$MSTATE/volume" --volume "$MSTATE/volume" \
		>"$OUT" 2>"$ERR"
	rc=$?
	assert_eq "a server without procMount: exit code (stderr: $(tail -c 600 "$ERR"))" 125 "$rc"
	assert_match "it says which field" \
		"the API server \(1\.[0-9]+\) did not keep procMount Unmasked \(the ProcMountType feature; on current versions it needs hostUsers false\): the boundary does not hold on this cluster, refused" \
		"$(cat "$ERR")"
	grep -q '^dropped procMount: sandbox-' "$TD/proxy.log" || bad "the proxy dropped nothing: $(cat "$TD/proxy.log")"
	grep -q "NOT proven" "$ERR" && bad "the refused pod's end is not proven: $(cat "$ERR")"
	[ -S "$MSTATE/manager.sock" ] && bad "a refusing manager left a socket"
	# the refused pod (the start's volume probe: session volprobe-*) is gone, by the real API
	sess=$(sed -n 's/.*the pod of session \(volprobe-[^ ]*\) .*/\1/p' "$ERR" | head -n 1)
	[ -n "$sess" ] || { bad "the message names no pod: $(cat "$ERR")"; return 1; }
	for _ in $(seq 1 100); do
		pods=$(kd get pods -l "infra-sandbox/session=$sess" -o name)
		[ -z "$pods" ] && break
		sleep 0.1
	done
	assert_eq "pods of session $sess left" "" "$pods"
	# its end was proven through the same server: the watch streamed through the proxy
	grep -q "^watch event: [A-Z]* sandbox-$sess-1$" "$TD/proxy.log" ||
		bad "no watch event of sandbox-$sess-1 passed the proxy: $(tail -n 5 "$TD/proxy.log")"
	rm -rf "$MSTATE"
	MSTATE=
}

# A server that allows get and list but refuses every watch (the proxy's refuse-watch mode): the
# pod's readiness waits on a watch of its next change (backend_kubernetes.c, pod_change_wait), and a
# refused one is a pause and another read, never a failure: the manager starts (its volume probe is a
# pod), a session's first call runs, and the pod's end is proven at stop, all through that server.
test_kubernetes_watch_refused() {
	kd_setup
	kd_proxy refuse-watch || return 1
	mgr_repo
	kd_mgr_start --kubeconfig "$TD/proxy.kubeconfig" || return 1
	mgr_session
	mgr exec --session "$SID" -- 'echo first-call'
	assert_eq "the first call's exit code (stderr: $(head -c 400 "$ERR"); log: $(tail -n 3 "$TD/manager.log"))" 0 "$RC"
	assert_eq "the first call's output" first-call "$(cat "$OUT")"
	grep -q "^watch refused: .*fieldSelector=metadata.name%3Dsandbox-$SID-1&watch=1" "$TD/proxy.log" ||
		bad "no watch of the session's pod was refused: $(tail -n 5 "$TD/proxy.log")"
	kill -TERM "$MGR_PID"
	wait "$MGR_PID" 2>/dev/null
	assert_match "the stop proved the pod's end" "sandbox-$SID-1/[0-9a-f-]{36}/[a-z]+://[0-9a-f]{64} is gone: " \
		"$(cat "$TD/manager.log")"
}

# ---------------------------------------------------------------- the pod's life

# A command's detached children (setsid, nohup, disown) do not outlive its call: not in the pod (the
# next call sees none), not on the node (no process of this machine has their marker).
test_kubernetes_detached() {
	kd_setup
	local m
	m=$(unique_marker)
	mgr_repo
	k8s_mgr_start || return 1
	trap kd_cleanup EXIT
	mgr_session
	mgr exec --session "$SID" -- "setsid sleep 1000.$m & nohup sleep 1001.$m >/dev/null 2>&1 & sleep 1002.$m & disown;
		sleep 0.5; for p in /proc/[0-9]*; do tr '\\0' ' ' <\$p/cmdline 2>/dev/null; echo; done | grep -c '^sleep 100[012]\\.$m'"
	assert_eq "the call (stderr: $(head -c 300 "$ERR"))" 0 "$RC"
	assert_eq "the detached children ran during the call" 3 "$(cat "$OUT")"
	# on the node, right after the call's answer
	no_process "^sleep 100[012]\\.$m"
	mgr exec --session "$SID" -- "for p in /proc/[0-9]*; do tr '\\0' ' ' <\$p/cmdline 2>/dev/null; echo; done | grep -c '^sleep 100[012]\\.$m'"
	assert_eq "in the pod, at the next call" 0 "$(cat "$OUT")"
	kd_uid || return 1
	assert_eq "the same pod" Running "$(kd_pod_state default "$KD_UID")"
}

# Cancel of a long call answers only after the pod's container is terminated for the recorded UID
# (the real API says so right then), and the call is recorded cancelled with that evidence.
test_kubernetes_cancel() {
	kd_setup
	local m t0 state row
	m=$(unique_marker)
	mgr_repo
	k8s_mgr_start || return 1
	trap kd_cleanup EXIT
	mgr_session
	mgr exec --session "$SID" -- true
	kd_uid || return 1
	mgr_bg_exec c "sleep 300.$m"
	for _ in $(seq 1 100); do kd_host_pids "^sleep 300\\.$m" >/dev/null && break; sleep 0.1; done
	kd_host_pids "^sleep 300\\.$m" >/dev/null || bad "the long call did not start"
	t0=$(now_ms)
	mgr cancel --session "$SID"
	assert_eq "cancel exit code (stderr: $(cat "$ERR"))" 0 "$RC"
	state=$(kd_pod_state default "$KD_UID")
	assert_match "the pod of UID $KD_UID when cancel answered" "^(gone|terminated)$" "$state"
	assert_json .state '"cancelled"'
	no_process "^sleep 300\\.$m"
	wait_bg_execs_allow_fail
	assert_match "the call's answer" "cancelled" "$(cat "$TD/bg-c.out")"
	mgr records --session "$SID"
	assert_json '[.records[].state]' '["cancelled","exited"]'
	row=$(kd_evidence_row)
	assert_match "the sandbox's record" \
		"^gone\\|(pod terminated for UID $KD_UID \\(container [a-z-]+://[0-9a-f]{64} exited -?[0-9]+\\)|pod UID $KD_UID gone \\((404|watch DELETED) after delete with preconditions.uid\\))$" \
		"$row"
	echo "    (cancel: $(($(now_ms) - t0)) ms to the answer; the pod then: $state; record: $row)"
}

# kd_kept_session ARGS...: a manager (k8s_mgr_start ARGS), a session whose first call wrote kept.txt
# in its worktree, and that pod's UID in KD_UID (kd_uid).
kd_kept_session() {
	mgr_repo
	k8s_mgr_start "$@" || return 1
	trap kd_cleanup EXIT
	mgr_session
	mgr exec --session "$SID" -- 'echo kept > kept.txt'
	assert_eq "the first call (stderr: $(head -c 300 "$ERR"))" 0 "$RC"
	kd_uid
}

# kd_midcall HOW: the pod ended from outside while a call runs (HOW: delete, the admin's kubectl
# delete pod; kill, SIGKILL to the container's main process on the node; unreachable, that kill with
# new connections to the pod's agent port answered host-unreachable first, as when the pod's network
# is gone before the manager asks again: then only the API server's word ends the asking). The call
# answers uncertain, its record saying the sandbox ended with the API server's evidence; the next
# call gets a new pod (new UID, generation 2) on the same workspace.
kd_midcall() {
	local m uid pid p main t0 ip
	m=$(unique_marker)
	kd_kept_session || return 1
	uid=$KD_UID
	mgr_bg_exec k "echo run >> runs.$m; sleep 60.$m"
	for _ in $(seq 1 100); do pid=$(kd_host_pids "^sleep 60\\.$m") && break; sleep 0.1; done
	[ -n "$pid" ] || { bad "the long call did not start"; return 1; }
	if [ "$1" = unreachable ]; then
		# this pod's IP only, new connections only (the call's own one stays), removed right after
		ip=$(kd -n default get pod "$KD_POD" -o jsonpath='{.status.podIP}')
		[[ $ip =~ ^[0-9.]+$ ]] || { bad "no IP of pod $KD_POD: '$ip'"; return 1; }
		KD_REJECT=(OUTPUT -d "$ip" -p tcp --dport 7443 --syn -j REJECT --reject-with icmp-host-unreachable)
		"${K8S_NET_CMD[@]}" iptables -I "${KD_REJECT[@]}" || { bad "iptables -I ${KD_REJECT[*]} failed"; return 1; }
	fi
	t0=$(now_ms)
	if [ "$1" = delete ]; then
		kd delete pod "$KD_POD" --wait=false >/dev/null || bad "kubectl delete pod $KD_POD failed"
	else
		# the container's main process: the topmost sandbox-agent serve above the command
		p=$pid main=
		while [ "$p" -gt 1 ]; do
			tr '\0' ' ' <"/proc/$p/cmdline" 2>/dev/null | grep -q '^/usr/local/bin/sandbox-agent serve ' && main=$p
			p=$(awk '/^PPid:/ {print $2}' "/proc/$p/status" 2>/dev/null)
			[ -n "$p" ] || break
		done
		[ -n "$main" ] || { bad "no sandbox-agent serve above PID $pid"; return 1; }
		kill -KILL "$main" || bad "kill -KILL $main failed"
	fi
	wait_bg_execs_allow_fail
	echo "    ($1: $(($(now_ms) - t0)) ms to the call's answer)"
	if [ "$1" = unreachable ]; then
		"${K8S_NET_CMD[@]}" iptables -D "${KD_REJECT[@]}" || bad "iptables -D ${KD_REJECT[*]} failed"
		KD_REJECT=()
	fi
	assert_match "the call's answer" "uncertain" "$(cat "$TD/bg-k.out")"
	mgr records --session "$SID"
	assert_json '[.records[].state]' '["uncertain","exited"]'
	echo "    (the lost call's record: $(jr '.records[0].reason'))"
	# the runtime's word, not "the agent could not say": the asking ended on the API server's evidence
	assert_match "the lost call's reason" \
		"^the sandbox ended during the call: (pod terminated for UID $uid |pod UID $uid gone )" \
		"$(jr '.records[0].reason')"
	# the old pod's end is proven (the record says nothing unproven) and the session is not reserved
	assert_json '.records[0].reason | test("not proven")' false
	assert_match "the old sandbox's end" "is gone: pod terminated for UID $uid|is gone: pod UID $uid gone" \
		"$(jq -r .msg "$TD/manager.log" 2>/dev/null)"
	mgr exec --session "$SID" -- "cat kept.txt; cat runs.$m"
	assert_eq "the next call (stderr: $(head -c 300 "$ERR"); log: $(tail -n 3 "$TD/manager.log"))" 0 "$RC"
	assert_lines "$(cat "$OUT")" kept run
	mgr session show --session "$SID"
	assert_json '[.state, .generation, .sandbox.state]' '["active",2,"running"]'
	kd_uid || return 1
	assert_ne "a new pod UID" "$uid" "$KD_UID"
	assert_match "the new pod's name" "^sandbox-$SID-2$" "$KD_POD"
	no_process "^sleep 60\\.$m"
}
test_kubernetes_pod_deleted() { kd_setup && kd_midcall delete; }
test_kubernetes_container_killed() { kd_setup && kd_midcall kill; }
test_kubernetes_agent_unreachable() { kd_setup && kd_midcall unreachable; }

# An idle sandbox is retired: its pod deleted and its end recorded with the API server's evidence;
# the next call resumes the session in a new pod on the same workspace.
test_kubernetes_idle() {
	kd_setup
	local row uid
	kd_kept_session --idle-seconds 1 || return 1
	uid=$KD_UID
	for _ in $(seq 1 300); do
		row=$(kd_evidence_row)
		case $row in gone\|*) break ;; esac
		sleep 0.1
	done
	assert_match "the retired sandbox's record" \
		"^gone\\|(pod terminated for UID $uid \\(container [a-z-]+://[0-9a-f]{64} exited -?[0-9]+\\)|pod UID $uid gone \\((404|watch DELETED) after delete with preconditions.uid\\))$" \
		"$row"
	assert_match "the pod, by the real API" "^(gone|terminated)$" "$(kd_pod_state default "$uid")"
	mgr exec --session "$SID" -- 'cat kept.txt'
	assert_eq "the next call (stderr: $(head -c 300 "$ERR"))" 0 "$RC"
	assert_eq "the same workspace" kept "$(cat "$OUT")"
	mgr session show --session "$SID"
	assert_json .generation 2
	kd_uid || return 1
	assert_ne "a new pod" "$uid" "$KD_UID"
}
