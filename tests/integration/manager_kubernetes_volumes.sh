# shellcheck shell=bash
# The kubernetes backend's volumes and Secrets (manager/backend/k8s_secrets.c, backend_kubernetes.c)
# on the run's cluster, with the helpers of manager_kubernetes.sh (sourced before this file): the
# pod's two Secrets (the agent's, the snapshot's credentials) exist with the pod's ownerReference, a
# command cannot read the agent's key at its mount path, the receipt verifies, and both Secrets are
# gone after the pod's end; and pvc:CLAIM, on a PersistentVolume of type hostPath bound to a claim of
# this test's. Root only; registered in cluster_smoke.sh, which runs them while the cluster is up.

k8s_kubectl() {
	"${K8S_NET_CMD[@]}" kubectl --kubeconfig "$K8S_KUBECONFIG" "$@"
}

# "UID Kind blockOwnerDeletion" of the Secret's first ownerReference, or "absent".
k8s_secret_owner() {
	k8s_kubectl get secret "$1" -o jsonpath='{.metadata.ownerReferences[0].uid} {.metadata.ownerReferences[0].kind} {.metadata.ownerReferences[0].blockOwnerDeletion}' 2>/dev/null ||
		echo absent
}

test_kubernetes_secrets() {
	k8s_cluster
	local rid uid pod i
	printf 'staging-credential\n' >"$TD/staging.kubeconfig"
	mgr_repo
	k8s_mgr_start --resource "kubernetes:staging=file:$TD/staging.kubeconfig" || return 1
	mgr_session --grant kubernetes:staging=read
	mgr exec --session "$SID" -- 'cat "$KUBECONFIG"; touch "$KUBECONFIG" 2>/dev/null || echo read-only
		cat /.sandbox/agent/tls/agent.key 2>&1; echo "key rc=$?"
		cat /.sandbox/agent/tls/receipt.key 2>/dev/null | wc -c
		ls /.sandbox/agent/tls/..data/ 2>&1; echo "ls rc=$?"'
	assert_eq "exit code (stderr: $(head -c 400 "$ERR"); log: $(tail -n 3 "$TD/manager.log"))" 0 "$RC"
	assert_lines "$(cat "$OUT")" staging-credential read-only ".*agent.key: (No such file or directory|Permission denied)" \
		"key rc=1" 0 ".*(Permission denied|No such file or directory)" "ls rc=2"
	grep -q "PRIVATE KEY" "$OUT" && bad "a command read the agent's key"
	mgr exec --session "$SID" --json -- 'echo receipt'
	assert_json .receipt.verified true
	mgr session show --session "$SID"
	rid=$(jr .sandbox.runtime_id)
	pod=$(echo "$rid" | sed 's|^kubernetes:\([^/]*\)/.*|\1|')
	uid=$(echo "$rid" | cut -d/ -f2)
	assert_eq "the agent Secret is the pod's" "$uid Pod false" "$(k8s_secret_owner "$pod-agent")"
	assert_eq "the credentials Secret is the pod's" "$uid Pod false" "$(k8s_secret_owner "$pod-credentials")"
	assert_eq "the agent Secret's keys" "agent.crt agent.key ca.crt empty receipt.key" \
		"$(k8s_kubectl get secret "$pod-agent" -o json | jq -r '.data | keys | join(" ")')"
	kill -TERM "$MGR_PID"
	wait "$MGR_PID" 2>/dev/null
	assert_match "the stop proved the pod's end" "is gone: (pod terminated for UID $uid|pod UID $uid gone)" \
		"$(cat "$TD/manager.log")"
	for i in $(seq 1 50); do
		[ "$(k8s_secret_owner "$pod-agent")$(k8s_secret_owner "$pod-credentials")" = absentabsent ] && break
		sleep 0.2
	done
	assert_eq "the agent Secret after the pod's end" absent "$(k8s_secret_owner "$pod-agent")"
	assert_eq "the credentials Secret after the pod's end" absent "$(k8s_secret_owner "$pod-credentials")"
}
# registered in cluster_smoke.sh, which runs it while the run's cluster is up

# The claim and its volume, this test's: deleted when the test ends (the claim first; the volume
# is Retain, so nothing on the host is removed by the cluster).
k8s_pvc_cleanup() {
	k8s_cleanup
	[ -n "${K8S_CLAIM:-}" ] || return 0
	k8s_kubectl delete pvc "$K8S_CLAIM" --wait=false >/dev/null 2>&1
	k8s_kubectl delete pv "$K8S_CLAIM" --wait=false >/dev/null 2>&1
}

# A manager on pvc:CLAIM: a PersistentVolume of type hostPath at the manager's volume (what the
# claim must hold at its root), storageClassName "" and a claimRef to the claim, bound; then the
# manager, whose start's volume probe reads in a pod a file it wrote through its own side.
k8s_pvc_start() {
	local vol phase
	MSTATE=$(mktemp -d /tmp/sbm.XXXXXX)
	echo "$MSTATE" >"$TD/mstate.path"
	chmod 0711 "$MSTATE" "$TD"
	# shellcheck disable=SC2034 # read by mgr (lib_manager.sh)
	MSOCK=$MSTATE/manager.sock
	vol=$MSTATE/volume
	mkdir -m 0711 "$vol" # a closed volume (N3)
	K8S_CLAIM=ksecret-$(head -c 4 /dev/urandom | od -An -tx1 | tr -d ' \n')
	trap k8s_pvc_cleanup EXIT
	k8s_kubectl apply -f - >"$TD/pv.out" 2>&1 <<EOT || { bad "the volume and claim: $(cat "$TD/pv.out")"; return 1; }
apiVersion: v1
kind: PersistentVolume
metadata: {name: $K8S_CLAIM}
spec:
  capacity: {storage: 1Gi}
  accessModes: [ReadWriteOnce]
  persistentVolumeReclaimPolicy: Retain
  storageClassName: ""
  hostPath: {path: $vol, type: Directory}
  claimRef: {namespace: default, name: $K8S_CLAIM}
---
apiVersion: v1
kind: PersistentVolumeClaim
metadata: {name: $K8S_CLAIM, namespace: default}
spec:
  accessModes: [ReadWriteOnce]
  storageClassName: ""
  volumeName: $K8S_CLAIM
  resources: {requests: {storage: 1Gi}}
EOT
	# The PV controller binds on the claim's event, or at its next sync (every 15 s) when the PV
	# was not yet in its cache: wait up to 90 s (a loaded CI machine has missed the first).
	local until=$((SECONDS + 90))
	while :; do
		phase=$(k8s_kubectl get pvc "$K8S_CLAIM" -o jsonpath='{.status.phase}' 2>/dev/null)
		[ "$phase" = Bound ] || [ "$SECONDS" -ge "$until" ] && break
		sleep 0.5
	done
	assert_eq "the claim is bound" Bound "$phase"
	[ "$phase" = Bound ] || return 1
	K8S_ARGS=(serve --state-dir "$MSTATE" --backend kubernetes --kubeconfig "$K8S_KUBECONFIG"
		--image "${K8S_IMAGE:-infra-sandbox-agent:dev}" --k8s-volume "pvc:$K8S_CLAIM" --volume "$vol")
	k8s_restart
}

test_kubernetes_pvc() {
	k8s_cluster
	local rid uid
	mgr_repo
	k8s_pvc_start || return 1
	assert_match "the start's volume probe ran in a pod of the claim" "volume probe: exclusive create" \
		"$(cat "$TD/manager.log")"
	mgr_session
	mgr exec --session "$SID" -- 'pwd -P; echo from-pvc > note.txt
		git config core.editor vi 2>&1; echo "config rc=$?"
		touch "$(git rev-parse --git-common-dir)/planted" 2>&1; echo "common rc=$?"
		git log --oneline | wc -l'
	assert_eq "exit code (stderr: $(head -c 400 "$ERR"); log: $(tail -n 3 "$TD/manager.log"))" 0 "$RC"
	assert_lines "$(cat "$OUT")" "$WT" ".*(Read-only file system|could not lock config file).*" "config rc=[1-9][0-9]*" \
		".*Read-only file system" "common rc=1" 1
	assert_eq "the file is in the worktree on the host" from-pvc "$(cat "$WT/note.txt" 2>/dev/null)"
	as_user git -C "$WT" config --get core.editor >/dev/null && bad "core.editor was written"
	mgr session show --session "$SID"
	rid=$(jr .sandbox.runtime_id)
	uid=$(echo "$rid" | cut -d/ -f2)
	assert_eq "the pod's workspace is the claim" "$K8S_CLAIM" \
		"$(k8s_kubectl get pod "$(echo "$rid" | sed 's|^kubernetes:\([^/]*\)/.*|\1|')" -o json |
			jq -r '[.spec.volumes[] | select(.persistentVolumeClaim) | .persistentVolumeClaim.claimName] | unique | join(" ")')"
	assert_eq "no hostPath in the pod" 0 "$(k8s_kubectl get pods -l "infra-sandbox/session=$SID" -o json |
		jq '[.items[].spec.volumes[] | select(.hostPath)] | length')"
	mgr exec --session "$SID" --json -- 'echo receipt'
	assert_json .receipt.verified true
	kill -TERM "$MGR_PID"
	wait "$MGR_PID" 2>/dev/null
	assert_match "the stop proved the pod's end" "is gone: (pod terminated for UID $uid|pod UID $uid gone)" \
		"$(cat "$TD/manager.log")"
}
# registered in cluster_smoke.sh, which runs it while the run's cluster is up
