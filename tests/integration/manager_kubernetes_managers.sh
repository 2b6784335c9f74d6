# shellcheck shell=bash
# Two managers as deploy/kubernetes runs them, on the real cluster of `make cluster` (issue 29): the
# manager and PostgreSQL images of this run (make manager-image, make postgres-image) imported into
# the node's containerd (scripts/cluster/image.sh), the real manifests applied for real in a namespace
# of this test (their namespace and image tags replaced, nothing else), certs.sh's Secrets, and a
# PersistentVolume of type hostPath for the claim sandbox-workspaces (the test's fixture: the operator
# brings the volume). A client pod of the manager image (labeled infra-sandbox.dev/client) runs the
# CLI and `sandbox-manager mcp` against the Service sandbox-manager: sessions made on both managers,
# calls through the Service running once each with no two of a session overlapping; the owner pod
# deleted with --grace-period=0 --force mid-call, and (second case) the owner's process killed with
# SIGKILL mid-call: the call ends exited or uncertain, ran once (a marker file in the worktree counts
# the runs), the session goes on on a new sandbox pod, the old one proven gone by its UID, the records
# neither lost nor duplicated; a client without a certificate, with another CA's, with a principal
# of another identity or (at the end) revoked by the deny list is refused through the Service, and
# nothing is recorded. Root only, through
# CLUSTER_NET (manager_kubernetes.sh's k8s_cluster); registered in cluster_smoke.sh. Everything is in
# the namespace kmgr-<pid> and the PersistentVolume of the same name, both deleted at the end.

KM_DEPLOY=$(cd "$(dirname "${BASH_SOURCE[0]}")/../../deploy/kubernetes" && pwd)
# The volume's root in the manager pods (deployment.yaml) and the fixture repository inside it.
KM_MVOL=/var/lib/sandbox-manager/volume
# shellcheck disable=SC2016 # expanded in the sandbox
KM_CALL='echo "start $(date +%s%N)" >> "$TMPDIR/calls"; sleep 0.3; echo "end $(date +%s%N)" >> "$TMPDIR/calls"'

km() { timeout -k 5 180 "${K8S_NET_CMD[@]}" kubectl --kubeconfig "$K8S_KUBECONFIG" "$@"; }
kmn() { km -n "$KM_NS" "$@"; }

km_cleanup() {
	[ -n "${KM_NS:-}" ] && km delete namespace "$KM_NS" --wait=false >/dev/null 2>&1
	[ -n "${KM_PV:-}" ] && km delete pv "$KM_PV" --wait=false >/dev/null 2>&1
	for p in "${KM_PIDS[@]}"; do kill -TERM "$p" 2>/dev/null; done
	[ -n "${KM_MIMG:-}" ] && timeout 60 env "CONTAINERS_CONF=$PODMAN_CONF" podman rmi -f "$KM_MIMG" "$KM_PGIMG" >/dev/null 2>&1
	return 0
}

# km_client WHO TARGET ARGS...: the CLI in the client pod as the image's user, with WHO's certificate
# (alice, bob, ops, other: alice-ci's name from another CA; none: no certificate), to TARGET (tls://).
# Sets RC; stdout in $OUT, stderr in $ERR.
km_client() {
	local who=$1 target=$2
	shift 2
	local -a env=("SANDBOX_MANAGER_SOCKET=$target" SANDBOX_MANAGER_TLS_NAME=sandbox-manager
		SANDBOX_MANAGER_TLS_CA=/certs/ca.crt)
	[ "$who" = none ] || env+=("SANDBOX_MANAGER_TLS_CERT=/certs/$who.crt" "SANDBOX_MANAGER_TLS_KEY=/certs/$who.key")
	# A connection refused sent nothing (the Service's endpoint of a manager whose process is
	# restarting, until its readiness probe fails), nor did an "owned" answer the client could not
	# follow (an owner registered again but not serving yet), nor a call refused on a session
	# reserved while a taking-over manager could not yet prove the old sandbox pod gone (the API
	# server slow to answer; each call asks again, and the refused call is recorded refused, never
	# run): tried again, as a user would, for up to 30 s.
	for _ in $(seq 1 30); do
		kmn exec kmgr-client -- env "${env[@]}" sandbox-manager "$@" >"$OUT" 2>"$ERR"
		RC=$?
		grep -q 'the manager is not reachable at .*Connection refused\|^sandbox-manager: owned: \|is reserved: no calls run on it until' "$ERR" || break
		echo "km_client: $(head -n 1 "$ERR"); again in 1 s"
		sleep 1
	done
}

# km_pod_gone UID: "gone" when the API server has no pod of UID or its containers have all
# terminated, else its phase.
km_pod_gone() {
	kmn get pods -o json | jq -r --arg u "$1" '[.items[] | select(.metadata.uid == $u)] |
		if length == 0 then "gone"
		elif ([.[0].status.containerStatuses[]? | select(.state.terminated == null)] | length) == 0 then "gone"
		else .[0].status.phase end'
}

# km_host_wt SID: the session's worktree on this host (the PersistentVolume's directory), in KM_WT.
km_host_wt() {
	KM_WT=$KM_VOL${KM_WT_OF[$1]#"$KM_MVOL"}
}

# km_pod_uid SID: the UID of the session's sandbox pod, from its runtime id (pod/UID/container).
km_pod_uid() {
	km_client ops "$KM_SVC" session show --session "$1"
	jr .sandbox.runtime_id | cut -d/ -f2
}

# km_images: this run's manager image and a PostgreSQL image, built side by side, then imported into
# the node's containerd.
km_images() {
	local tag t0
	tag=it-$(basename "$IT_ROOT" | tr '[:upper:]' '[:lower:]')
	KM_MIMG=infra-sandbox-manager:$tag KM_PGIMG=infra-sandbox-postgres:$tag
	t0=$SECONDS
	IMAGE=$KM_MIMG CONTAINERS_CONF=$PODMAN_CONF bash "$IT_REPO/scripts/manager-image.sh" "$IT_ROOT/bin" \
		>"$TD/mimg.log" 2>&1 &
	local m=$!
	IMAGE=$KM_PGIMG CONTAINERS_CONF=$PODMAN_CONF bash "$IT_REPO/scripts/postgres-image.sh" >"$TD/pgimg.log" 2>&1 &
	local p=$!
	wait "$m" || { bad "scripts/manager-image.sh failed: $(tail -n 5 "$TD/mimg.log")"; return 1; }
	wait "$p" || { bad "scripts/postgres-image.sh failed: $(tail -n 5 "$TD/pgimg.log")"; return 1; }
	CLUSTER_STATE=$(dirname "$K8S_KUBECONFIG") CONTAINERS_CONF=$PODMAN_CONF \
		bash "$IT_REPO/scripts/cluster/image.sh" "$KM_MIMG" "$KM_PGIMG" >"$TD/import.log" 2>&1 ||
		{ bad "scripts/cluster/image.sh: $(tail -n 3 "$TD/import.log")"; return 1; }
	echo "images built and imported in $((SECONDS - t0)) s"
}

# km_certs: the principals, certs.sh applied for real (the Secrets and ConfigMap the Deployment
# mounts), another CA's certificate for alice-ci, and the Secret kmgr-clients of the client pod.
km_certs() {
	jq -n --arg r "$KM_MVOL/fixture/" '{"alice-ci": {identities: ["alice"], repos: [$r]},
		"bob-ci": {identities: ["bob"]}, ops: {operator: true}}' >"$TD/principals.json"
	NAMESPACE=$KM_NS KUBECTL="${K8S_NET_CMD[*]} kubectl --kubeconfig $K8S_KUBECONFIG" SANDBOX_MANAGER=$MANAGER \
		bash "$KM_DEPLOY/certs.sh" "$TD/principals.json" "$TD/certs" >"$TD/certs.log" 2>&1 ||
		{ bad "certs.sh: $(tail -n 3 "$TD/certs.log")"; return 1; }
	KUBECTL=none SANDBOX_MANAGER=$MANAGER bash "$KM_DEPLOY/certs.sh" "$TD/principals.json" "$TD/other" \
		>>"$TD/certs.log" 2>&1 || { bad "certs.sh (another CA): $(tail -n 3 "$TD/certs.log")"; return 1; }
	local c=$TD/certs/clients
	kmn create secret generic kmgr-clients --from-file=ca.crt="$TD/certs/ca/ca.crt" \
		--from-file=alice.crt="$c/alice-ci/alice-ci.crt" --from-file=alice.key="$c/alice-ci/alice-ci.key" \
		--from-file=bob.crt="$c/bob-ci/bob-ci.crt" --from-file=bob.key="$c/bob-ci/bob-ci.key" \
		--from-file=ops.crt="$c/ops/ops.crt" --from-file=ops.key="$c/ops/ops.key" \
		--from-file=other.crt="$TD/other/clients/alice-ci/alice-ci.crt" \
		--from-file=other.key="$TD/other/clients/alice-ci/alice-ci.key" >/dev/null ||
		{ bad "the client's Secret"; return 1; }
}

# km_deploy: deploy/kubernetes applied as its README says, with the volume, certificates and a
# client pod; waits for both managers to be Ready.
km_deploy() {
	local f
	mkdir -p "$TD/deploy"
	for f in "$KM_DEPLOY"/*.yaml; do
		sed "s/^\( *\)namespace: infra-sandbox\$/\1namespace: $KM_NS/; s/^  name: infra-sandbox\$/  name: $KM_NS/;
			s#infra-sandbox-manager:VERSION#$KM_MIMG#; s#infra-sandbox-postgres:VERSION#$KM_PGIMG#;
			s#infra-sandbox-agent:VERSION#$PODMAN_IMAGE#" "$f" >"$TD/deploy/$(basename "$f")"
	done
	# the volume: the claim's root is the managers' --volume; the repository inside it, theirs
	KM_VOL=$TD/vol
	[ -n "$MGR_FIXTURE" ] && [ -d "$MGR_FIXTURE" ] || { bad "no fixture repository at '$MGR_FIXTURE'"; return 1; }
	mkdir -p "$KM_VOL/fixture/repo" && cp -r "$MGR_FIXTURE"/. "$KM_VOL/fixture/repo"/ || return 1
	git -C "$KM_VOL/fixture/repo" init -q -b main && git -C "$KM_VOL/fixture/repo" add -A &&
		git -C "$KM_VOL/fixture/repo" -c user.name=test -c user.email=test@example.invalid commit -qm manifests ||
		{ bad "the fixture repository"; return 1; }
	chown -R 10001:10001 "$KM_VOL" && chmod 0755 "$KM_VOL" "$TD"
	km apply -f "$TD/deploy/namespace.yaml" >/dev/null || { bad "namespace.yaml"; return 1; }
	km apply -f "$TD/deploy/rbac.yaml" -f "$TD/deploy/pvc.yaml" >/dev/null || { bad "rbac.yaml, pvc.yaml"; return 1; }
	km apply -f - >"$TD/pv.out" 2>&1 <<EOT || { bad "the PersistentVolume: $(cat "$TD/pv.out")"; return 1; }
apiVersion: v1
kind: PersistentVolume
metadata: {name: $KM_PV}
spec:
  capacity: {storage: 20Gi}
  accessModes: [ReadWriteMany]
  persistentVolumeReclaimPolicy: Retain
  storageClassName: ""
  hostPath: {path: $KM_VOL, type: Directory}
  claimRef: {namespace: $KM_NS, name: sandbox-workspaces}
EOT
	km_certs || return 1
	km apply -f "$TD/deploy/postgres.yaml" >/dev/null || { bad "postgres.yaml"; return 1; }
	kmn rollout status deploy/sandbox-postgres --timeout=120s >"$TD/rollout.log" 2>&1 ||
		{ bad "PostgreSQL did not become ready: $(tail -n 2 "$TD/rollout.log")"; return 1; }
	km apply -f "$TD/deploy/deployment.yaml" -f "$TD/deploy/service.yaml" -f "$TD/deploy/networkpolicy.yaml" \
		>/dev/null || { bad "deployment.yaml, service.yaml, networkpolicy.yaml"; return 1; }
	kmn apply -f - >"$TD/client.out" 2>&1 <<EOT || { bad "the client pod: $(cat "$TD/client.out")"; return 1; }
apiVersion: v1
kind: Pod
metadata:
  name: kmgr-client
  labels: {infra-sandbox.dev/client: "true"}
spec:
  automountServiceAccountToken: false
  terminationGracePeriodSeconds: 1
  securityContext: {runAsNonRoot: true, runAsUser: 10001, runAsGroup: 10001, fsGroup: 10001}
  containers:
    - name: client
      image: $KM_MIMG
      command: ["sleep", "3600"]
      securityContext: {allowPrivilegeEscalation: false, readOnlyRootFilesystem: true, capabilities: {drop: [ALL]}}
      volumeMounts: [{name: certs, mountPath: /certs, readOnly: true}]
  volumes: [{name: certs, secret: {secretName: kmgr-clients, defaultMode: 0440}}]
EOT
	if ! kmn rollout status deploy/sandbox-manager --timeout=180s >"$TD/rollout.log" 2>&1; then
		bad "the managers did not become ready: $(tail -n 2 "$TD/rollout.log")"
		kmn get pods -o wide
		kmn logs deploy/sandbox-manager --tail=20 2>&1
		return 1
	fi
	kmn wait --for=condition=Ready pod/kmgr-client --timeout=60s >/dev/null || { bad "the client pod is not Ready"; return 1; }
	kmn get pods -l app.kubernetes.io/name=infra-sandbox-manager -o json >"$TD/managers.json"
	assert_eq "manager pods Ready" 2 \
		"$(jq '[.items[] | select(.metadata.deletionTimestamp == null) | select(.status.conditions[]? | .type == "Ready" and .status == "True")] | length' "$TD/managers.json")"
	mapfile -t KM_PODS < <(jq -r '.items[] | select(.metadata.deletionTimestamp == null) | .metadata.name' "$TD/managers.json")
	declare -gA KM_IP
	for f in "${KM_PODS[@]}"; do
		KM_IP[$f]=$(jq -r --arg n "$f" '.items[] | select(.metadata.name == $n) | .status.podIP' "$TD/managers.json")
	done
	KM_SVC=tls://$(kmn get svc sandbox-manager -o jsonpath='{.spec.clusterIP}'):7444
	[ "${#KM_PODS[@]}" -eq 2 ] && [ "$KM_SVC" != tls://:7444 ]
}

# km_calls SID N: N calls through the Service from two clients at once (N each); each must exit 0.
km_calls() {
	local sid=$1 n=$2 c k
	for c in 1 2; do
		(
			for k in $(seq 1 "$n"); do
				OUT=$TD/call-$sid-$c-$k.out ERR=$TD/call-$sid-$c-$k.err
				km_client alice "$KM_SVC" exec --session "$sid" -- "$KM_CALL"
				echo "$RC" >"$TD/call-$sid-$c-$k.rc"
			done
		) &
	done
	wait
	for c in 1 2; do
		for k in $(seq 1 "$n"); do
			assert_eq "call $c.$k on $sid through the Service: exit code ($(head -c 300 "$TD/call-$sid-$c-$k.err"))" 0 \
				"$(cat "$TD/call-$sid-$c-$k.rc" 2>/dev/null)"
		done
	done
}

# km_no_overlap SID N: the session's calls file holds N starts, each followed by its own end.
km_no_overlap() {
	local lines
	km_host_wt "$1"
	lines=$(find "$KM_WT" -path '*/.sandbox-tmp/calls' 2>/dev/null | head -n 1)
	assert_eq "start lines of $1" "$2" "$(grep -c '^start [0-9]*$' "$lines" 2>/dev/null)"
	assert_eq "calls of $1 overlapping another" 0 \
		"$(sort -k2,2n "$lines" | awk '$1 != (NR % 2 ? "start" : "end") { n++ } END { print n + 0 }')"
}

# km_owner_pid POD: the host PIDs of the manager processes of pod POD (their --manager-id is its name).
km_owner_pids() {
	local p
	for p in /proc/[0-9]*; do
		{ tr '\0' ' ' <"$p/cmdline"; } 2>/dev/null | grep -q -- "--manager-id=$1 " && echo "${p#/proc/}"
	done
}

# km_failover SID HOW: a call on SID (a marker line per run in its worktree), its owner pod deleted
# (HOW=delete: --grace-period=0 --force) or its manager processes killed (HOW=kill: SIGKILL) once the
# call runs; the call's client ends, the session's next call runs on a new sandbox pod, the old pod
# proven gone by its UID, the interrupted call ran once and is recorded exited or uncertain.
km_failover() {
	local sid=$1 how=$2 owner old_uid new_uid pid rc t0 state pids p
	km_client ops "$KM_SVC" session show --session "$sid"
	owner=$(jr .owner.manager)
	old_uid=$(km_pod_uid "$sid")
	km_host_wt "$sid"
	[ -n "$owner" ] && [ -n "$old_uid" ] || { bad "$sid: no owner or sandbox pod ($(head -c 300 "$OUT"))"; return 1; }
	(
		OUT=$TD/$how-call.out ERR=$TD/$how-call.err
		km_client alice "$KM_SVC" exec --session "$sid" -- "echo run >> $how-marker; sleep 40; echo done >> $how-marker"
		echo "$RC" >"$TD/$how-call.rc"
	) &
	pid=$!
	for _ in $(seq 1 300); do
		[ -s "$KM_WT/$how-marker" ] && break
		sleep 0.2
	done
	[ -s "$KM_WT/$how-marker" ] || { bad "$how: the call did not start ($(cat "$TD/$how-call.err" 2>/dev/null))"; return 1; }
	if [ "$how" = delete ]; then
		kmn delete pod "$owner" --grace-period=0 --force >/dev/null 2>&1 || bad "kubectl delete pod $owner --force"
	else
		pids=$(km_owner_pids "$owner")
		[ -n "$pids" ] || { bad "no process of manager $owner on this host"; return 1; }
		# shellcheck disable=SC2086 # one PID a word
		kill -KILL $pids
	fi
	t0=$SECONDS
	wait "$pid"
	rc=$(cat "$TD/$how-call.rc" 2>/dev/null)
	echo "$how: the interrupted call's client ended in $((SECONDS - t0)) s, exit code $rc: $(head -c 200 "$TD/$how-call.err")"
	assert_ne "$how: the interrupted call's client did not exit 0" 0 "$rc"
	# the next call, through the Service: the session taken over after the lease, on a new sandbox pod
	t0=$SECONDS
	km_client alice "$KM_SVC" exec --session "$sid" -- "grep -c run $how-marker"
	assert_eq "$how: the next call (stderr: $(head -c 300 "$ERR"))" 0 "$RC"
	if [ "$RC" -ne 0 ]; then
		kmn get pods -o json | jq -c --arg u "$old_uid" '.items[] | select(.metadata.uid == $u) | .status'
		for p in $(kmn get pods -l app.kubernetes.io/name=infra-sandbox-manager -o name); do
			kmn logs "$p" | grep -F "$sid"
			kmn logs "$p" --previous 2>/dev/null | grep -F "$sid"
		done
	fi
	assert_eq "$how: the interrupted call ran once" 1 "$(head -n 1 "$OUT")"
	echo "$how: the next call served in $((SECONDS - t0)) s"
	km_client ops "$KM_SVC" session show --session "$sid"
	echo "$how: owner $owner before, $(jr .owner.manager) after"
	[ "$how" = delete ] && assert_ne "$how: the session's owner after the deleted pod" "$owner" "$(jr .owner.manager)"
	new_uid=$(jr .sandbox.runtime_id | cut -d/ -f2)
	assert_match "$how: a new sandbox pod" '^[0-9a-f-]{36}$' "$new_uid"
	assert_ne "$how: the sandbox pod's UID after" "$old_uid" "$new_uid"
	assert_eq "$how: the old sandbox pod (UID $old_uid), by the API server" gone "$(km_pod_gone "$old_uid")"
	kmn logs -l app.kubernetes.io/name=infra-sandbox-manager --tail=-1 --prefix >"$TD/$how-managers.log" 2>&1
	assert_match "$how: a manager proved the old sandbox pod gone by its UID" "UID $old_uid" "$(cat "$TD/$how-managers.log")"
	# the interrupted call's record: one, exited or uncertain
	km_client ops "$KM_SVC" records --session "$sid" --limit 100
	state=$(jq -r --arg m "$how-marker; sleep 40" '[.records[] | select(.command | contains($m)) | .state] | join(",")' "$OUT")
	assert_match "$how: the interrupted call's record" '^(exited|uncertain)$' "$state"
	assert_eq "$how: the marker after the takeover (no second run)" 1 "$(grep -c '^run$' "$KM_WT/$how-marker")"
}

test_kubernetes_managers() {
	k8s_cluster
	need_podman
	if ldd "$IT_ROOT/bin/sandbox-manager-daemon" 2>/dev/null | grep -q 'libasan\|libubsan'; then
		skip "this run's binaries are a sanitizer build; the image holds the plain one (make manager-image)"
	fi
	local t_all=$SECONDS sid s1 s2 p n t0 n_before
	KM_NS=kmgr-$$ KM_PV=kmgr-$$ KM_PIDS=()
	declare -gA KM_WT_OF
	trap km_cleanup EXIT
	km_images || return
	t0=$SECONDS
	km_deploy || return
	echo "deployed, two managers Ready in $((SECONDS - t0)) s"

	# a session made through each manager pod's own address; its owner is that pod
	for p in "${KM_PODS[@]}"; do
		km_client alice "tls://${KM_IP[$p]}:7444" session create --identity alice --repo "$KM_MVOL/fixture/repo"
		assert_eq "session create through $p (stderr: $(head -c 300 "$ERR"))" 0 "$RC"
		sid=$(jr .session)
		[ -n "$sid" ] && [ "$sid" != null ] || return
		KM_WT_OF[$sid]=$(jr .worktree)
		t0=$SECONDS
		km_client alice "$KM_SVC" exec --session "$sid" -- true
		echo "$sid: its first call (a new sandbox pod) through the Service in $((SECONDS - t0)) s"
		km_client ops "$KM_SVC" session show --session "$sid"
		assert_eq "the owner of $sid" "$p" "$(jr .owner.manager)"
		if [ -z "${s1:-}" ]; then s1=$sid; else s2=$sid; fi
	done
	# calls through the Service on both sessions at once: each runs once, none overlapping another of its session
	km_calls "$s1" 2 &
	km_calls "$s2" 2 &
	wait
	for sid in "$s1" "$s2"; do
		km_no_overlap "$sid" 4
		km_client ops "$KM_SVC" records --session "$sid" --limit 100
		assert_eq "exited records of $sid" 5 "$(jr '[.records[] | select(.state == "exited")] | length')"
		assert_eq "records of $sid" 5 "$(jr '.records | length')"
	done

	# sandbox-manager mcp in the client pod, through the Service: a tool call on the session
	printf '%s\n' '{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"it","version":"0"}}}' \
		'{"jsonrpc":"2.0","method":"notifications/initialized"}' \
		'{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"bash","arguments":{"command":"echo from-mcp; hostname"}}}' |
		kmn exec -i kmgr-client -- env "SANDBOX_MANAGER_SOCKET=$KM_SVC" SANDBOX_MANAGER_TLS_NAME=sandbox-manager \
			SANDBOX_MANAGER_TLS_CA=/certs/ca.crt SANDBOX_MANAGER_TLS_CERT=/certs/alice.crt \
			SANDBOX_MANAGER_TLS_KEY=/certs/alice.key sandbox-manager mcp --session "$s2" >"$TD/mcp.out" 2>"$TD/mcp.err"
	assert_match "mcp in the client pod: the tool's answer (stderr: $(head -c 300 "$TD/mcp.err"))" 'from-mcp' \
		"$(jq -r 'select(.id == 2) | .result.content[0].text' "$TD/mcp.out" 2>/dev/null)"
	assert_eq "mcp: isError" false "$(jq -r 'select(.id == 2) | .result.isError // false' "$TD/mcp.out" 2>/dev/null)"

	# refused through the Service, nothing recorded
	km_client ops "$KM_SVC" records --session "$s1" --limit 100
	n_before=$(jr '.records | length')
	km_client none "$KM_SVC" exec --session "$s1" -- 'echo refused >> refused-marker'
	assert_ne "exec without a client certificate: exit code" 0 "$RC"
	km_client other "$KM_SVC" exec --session "$s1" -- 'echo refused >> refused-marker'
	assert_eq "exec with another CA's certificate: exit code" 125 "$RC"
	assert_match "exec with another CA's certificate: why" "handshake" "$(cat "$ERR")"
	km_client bob "$KM_SVC" exec --session "$s1" -- 'echo refused >> refused-marker'
	assert_ne "exec as bob-ci on alice's session: exit code" 0 "$RC"
	assert_match "bob-ci is told" 'not_found|no such session' "$(cat "$ERR")"
	km_client ops "$KM_SVC" records --session "$s1" --limit 100
	assert_eq "records of $s1 after the refused clients" "$n_before" "$(jr '.records | length')"
	km_host_wt "$s1"
	[ -e "$KM_WT/refused-marker" ] && bad "a refused call ran"

	# the owner pod deleted mid-call; then the other session's owner killed mid-call
	km_failover "$s1" delete
	km_failover "$s2" kill
	# every call of both sessions recorded once: 5 + 1 interrupted + 1 after; the mcp call on s2
	# (a call refused on a reserved session never ran: recorded refused, and not counted here)
	for sid in "$s1" "$s2"; do
		n=7
		[ "$sid" = "$s2" ] && n=8
		km_client ops "$KM_SVC" records --session "$sid" --limit 100
		assert_eq "records of $sid at the end" "$n" "$(jr '[.records[] | select(.state != "refused")] | length')"
		assert_eq "distinct records of $sid" "$n" \
			"$(jr '[.records[] | select(.state != "refused") | .exec_id] | unique | length')"
	done

	# a revoked certificate: the deny list changed as an operator does (certs.sh again, with
	# OUTDIR/deny), the ConfigMap reaches each pod at its kubelet's next sync of that pod (the test
	# cluster's period is 10 s), each manager reloads the list within a second: once every manager
	# refuses alice-ci, her call through the Service is refused, and nothing is recorded
	km_revoke "$s1" || return
	echo "kubernetes_managers: $((SECONDS - t_all)) s in all"
}

# km_revoke SESSION: alice-ci revoked by principal; refused by every manager pod within 120 s, then
# her call through the Service refused and unrecorded. Each pod's kubelet updates its own copy of the
# ConfigMap at its own sync, so one manager refusing says nothing of the other: each is asked by its
# pod address, with a request it answers itself (session list: no owner to follow).
km_revoke() {
	local n_before i ip
	local -a ips
	km_client ops "$KM_SVC" records --session "$1" --limit 100
	n_before=$(jr '.records | length')
	echo "principal alice-ci" >>"$TD/certs/deny"
	NAMESPACE=$KM_NS KUBECTL="${K8S_NET_CMD[*]} kubectl --kubeconfig $K8S_KUBECONFIG" SANDBOX_MANAGER=$MANAGER \
		bash "$KM_DEPLOY/certs.sh" "$TD/principals.json" "$TD/certs" >>"$TD/certs.log" 2>&1 ||
		{ bad "certs.sh with the deny list: $(tail -n 3 "$TD/certs.log")"; return 1; }
	# the pods of now: the delete above replaced one
	kmn get pods -l app.kubernetes.io/name=infra-sandbox-manager -o json >"$TD/managers-now.json"
	mapfile -t ips < <(jq -r '.items[] | select(.metadata.deletionTimestamp == null) | .status.podIP' "$TD/managers-now.json")
	assert_eq "manager pods before the revocation check" 2 "${#ips[@]}"
	for ip in "${ips[@]}"; do
		for i in $(seq 1 60); do
			km_client alice "tls://$ip:7444" session list --identity alice
			[ "$RC" -ne 0 ] && break
			sleep 2
		done
		assert_match "alice-ci at the manager at $ip after the revocation (after $((i * 2)) s)" "revoked" "$(cat "$ERR")"
	done
	km_client alice "$KM_SVC" exec --session "$1" -- 'echo revoked-ran >> revoked-marker'
	assert_eq "exec with the revoked certificate: exit code" 125 "$RC"
	km_client ops "$KM_SVC" records --session "$1" --limit 100
	assert_eq "records of $1 after the revoked client" "$n_before" "$(jr '.records | length')"
	km_host_wt "$1"
	[ -e "$KM_WT/revoked-marker" ] && bad "a revoked client's call ran"
	return 0
}
