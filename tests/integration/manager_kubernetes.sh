# shellcheck shell=bash
# sandbox-manager with the kubernetes backend (manager/backend/backend_kubernetes.c). The settings'
# refusals run everywhere; the session and recovery tests run on the run's own cluster: cluster_smoke.sh
# brings it up (or finds one `make cluster` left up), writes its KUBECONFIG and CLUSTER_NET lines to
# $K8S_READY, runs these tests, and cluster_down takes it down. Root only, with the manager inside
# CLUSTER_NET so that it reaches the pods' IPs; nothing here starts or stops a cluster, and it talks to
# the cluster's API server and pods only, in the cluster's own namespace.

K8S_READY=${K8S_READY:-/var/lib/infra-sandbox/cluster.ready} # cluster_smoke.sh sets the run's own

# The kubernetes settings: what is missing or cannot hold is said at start, exit 125.
test_kubernetes_settings() {
	local st=$TD/st kc=$TD/kubeconfig
	mkdir_user "$st"
	chmod 0700 "$st"
	# a root manager's sandboxes run as nobody and must walk to the state directory
	[ "$RUN_UID" -eq 0 ] && chmod 0711 "$TD" "$st"
	as_user "$MANAGER" serve --state-dir "$st" --backend kubernetes --image infra-sandbox-agent:dev >"$OUT" 2>"$ERR"
	assert_eq "no k8s-volume: exit code" 125 "$?"
	assert_match "no k8s-volume: says" "needs k8s-volume hostpath:DIR" "$(cat "$ERR")"
	as_user "$MANAGER" serve --state-dir "$st" --backend kubernetes --image x --k8s-volume pvc:Bad_Claim >"$OUT" 2>"$ERR"
	assert_eq "pvc: a claim's name: exit code" 125 "$?"
	assert_match "pvc: says why" "k8s-volume pvc:CLAIM: 'Bad_Claim' is not a claim's name" "$(cat "$ERR")"
	as_user "$MANAGER" serve --state-dir "$st" --kubeconfig /nonexistent >"$OUT" 2>"$ERR"
	assert_eq "kubeconfig on the process backend: exit code" 125 "$?"
	assert_match "kubeconfig on the process backend: says" "kubeconfig applies to the kubernetes backend only" "$(cat "$ERR")"
	printf '%s\n' "current-context: x" "contexts:" "- name: x" "  context:" "    cluster: c" "    user: u" \
		"clusters:" "- name: c" "  cluster:" "    server: https://127.0.0.1:9" "users:" "- name: u" "  user:" \
		"    exec:" "      command: some-plugin" >"$kc"
	chown "$RUN_USER:" "$kc"
	as_user "$MANAGER" serve --state-dir "$st" --backend kubernetes --image x --k8s-volume "hostpath:$TD/v" \
		--kubeconfig "$kc" >"$OUT" 2>"$ERR"
	assert_eq "an exec user: exit code" 125 "$?"
	assert_match "an exec user: says" "gets its credentials from a program .* which the manager never runs" "$(cat "$ERR")"
	# a token user, and an API server that is not there (loopback port 9): said, bounded
	sed -i 's/^    exec:$/    token: t/; /command: some-plugin/d' "$kc"
	timeout 30 "${AS[@]}" "$MANAGER" serve --state-dir "$st" --backend kubernetes --image x \
		--k8s-volume "hostpath:$TD/v" --kubeconfig "$kc" >"$OUT" 2>"$ERR"
	assert_eq "no API server: exit code" 125 "$?"
	assert_match "no API server: says" "the Kubernetes API server https://127.0.0.1:9" "$(cat "$ERR")"
	# pvc:CLAIM passes the settings: the start goes on to the API server
	timeout 30 "${AS[@]}" "$MANAGER" serve --state-dir "$st" --backend kubernetes --image x \
		--k8s-volume pvc:ws-claim --kubeconfig "$kc" >"$OUT" 2>"$ERR"
	assert_eq "pvc: exit code" 125 "$?"
	assert_match "pvc: the settings hold, the server is asked" "the Kubernetes API server https://127.0.0.1:9" "$(cat "$ERR")"
}
t kubernetes_settings test_kubernetes_settings

# The ready file's KUBECONFIG, CLUSTER_NET (a command prefix that runs a program in the cluster's
# network namespace: `ip netns exec NAME`) and CLUSTER_HOSTPATH, or a skip that says why.
k8s_cluster() {
	[ "$RUN_UID" -eq 0 ] || skip "root only: the manager joins the cluster's network namespace"
	[ -r "$K8S_READY" ] ||
		skip_setup "no cluster: $K8S_READY is missing (cluster_smoke brings the run's cluster up, and make test-integration T=cluster_smoke runs it with every Kubernetes case)"
	K8S_KUBECONFIG=$(sed -n 's/^KUBECONFIG=//p' "$K8S_READY" | tail -n 1)
	K8S_NET=$(sed -n 's/^CLUSTER_NET=//p' "$K8S_READY" | tail -n 1)
	K8S_HOSTPATH=$(sed -n 's/^CLUSTER_HOSTPATH=//p' "$K8S_READY" | tail -n 1)
	[ -r "$K8S_KUBECONFIG" ] || skip "the cluster's kubeconfig '$K8S_KUBECONFIG' is not readable"
	[ -n "$K8S_NET" ] || skip "$K8S_READY names no CLUSTER_NET"
	read -r -a K8S_NET_CMD <<<"$K8S_NET"
	"${K8S_NET_CMD[@]}" true 2>/dev/null || skip "CLUSTER_NET '$K8S_NET' does not run (the cluster is down?)"
}

# The manager inside the cluster's network (its control socket is a unix socket: the CLI stays
# out). As mgr_start, with a longer wait: the start's volume probe runs a pod, which the node may
# take a while to schedule and start.
k8s_mgr_start() {
	local vol
	if [ -n "${K8S_HOSTPATH:-}" ]; then
		MSTATE=$(mktemp -d "$K8S_HOSTPATH/sbm.XXXXXX")
	else
		MSTATE=$(mktemp -d /tmp/sbm.XXXXXX)
	fi
	echo "$MSTATE" >"$TD/mstate.path"
	chmod 0711 "$MSTATE" "$TD"
	MSOCK=$MSTATE/manager.sock
	vol=$MSTATE/volume
	trap k8s_cleanup EXIT
	K8S_ARGS=(serve --state-dir "$MSTATE" --backend kubernetes --kubeconfig "$K8S_KUBECONFIG"
		--image "${K8S_IMAGE:-infra-sandbox-agent:dev}" --k8s-volume "hostpath:$vol" --volume "$vol" "$@")
	k8s_restart
}

# The same manager again, on the same state; K8S_RUN, when set, is the command prefix it runs under
# (default CLUSTER_NET).
k8s_restart() {
	local i
	local -a run=("${K8S_NET_CMD[@]}")
	[ -n "${K8S_RUN+x}" ] && run=("${K8S_RUN[@]}")
	rm -f "$MSOCK"
	"${run[@]}" "$MANAGER" "${K8S_ARGS[@]}" >>"$TD/manager.log" 2>&1 &
	MGR_PID=$!
	for i in $(seq 1 1200); do
		[ -S "$MSOCK" ] && return 0
		kill -0 "$MGR_PID" 2>/dev/null || break
		sleep 0.1
	done
	bad "the manager did not start: $(tail -n 5 "$TD/manager.log")"
	return 1
}

# The manager, then every pod this test's manager made (by the labels of its sessions), in the
# cluster's namespace only.
k8s_cleanup() {
	local sids
	mgr_cleanup
	sids=$(sed -n 's/.*"msg":"session \([0-9a-z-]*\): .*/\1/p; s/.*preparing the pod of session \([0-9a-z-]*\) .*/\1/p' \
		"$TD/manager.log" 2>/dev/null | sort -u)
	for s in $sids $(sed -n 's/.*sandbox-\(volprobe-[0-9a-f]*\)-[0-9]*.*/\1/p' "$TD/manager.log" 2>/dev/null | sort -u); do
		"${K8S_NET_CMD[@]}" kubectl --kubeconfig "$K8S_KUBECONFIG" delete pod -l "infra-sandbox/session=$s" \
			--wait=false >/dev/null 2>&1
	done
}

# One session: the pod as the backend made it, a call in it, and the pod's end proven by the API
# server's word for the recorded UID.
test_kubernetes_session() {
	k8s_cluster
	local rid uid
	mgr_repo
	k8s_mgr_start || return 1
	mgr_session
	mgr_ids
	mgr exec --session "$SID" -- 'pwd -P; id -u; echo from-pod > note.txt; ls /proc | grep -c "^[0-9]"'
	assert_eq "exit code (stderr: $(head -c 400 "$ERR"); log: $(tail -n 3 "$TD/manager.log"))" 0 "$RC"
	assert_lines "$(cat "$OUT")" "$WT" "$IDS_UID" "[1-4]"
	# the pod's image names only its own users: the agent's copies name the command's uid and gid
	# (serve --user-home, sandbox-agent/command_user.c), home HOME, the image's lines kept, read-only
	mgr exec --session "$SID" -- 'id -un; id -gn; getent passwd "$(id -u)" | cut -d: -f1,6 | sed "s|:$HOME\$|:HOME|";
		getent passwd 10001 | cut -d: -f1; { echo x >>/etc/passwd; } 2>/dev/null || echo read-only'
	assert_lines "$(cat "$OUT")" sandbox sandbox "sandbox:HOME" sandbox read-only
	assert_eq "the file is in the worktree on the host" from-pod "$(cat "$WT/note.txt" 2>/dev/null)"
	mgr session show --session "$SID"
	rid=$(jr .sandbox.runtime_id)
	assert_match "the sandbox's identity: pod name, UID, containerID" \
		'^kubernetes:sandbox-[0-9a-f]+-1/[0-9a-f-]{36}/[a-z-]+://[0-9a-f]{64}$' "$rid"
	uid=$(echo "$rid" | cut -d/ -f2)
	mgr exec --session "$SID" --json -- 'echo receipt'
	assert_json .receipt.verified true
	# the agent's own port is closed to commands (--block-port: Landlock), on every address; the
	# agent listens on 0.0.0.0, so the pod's loopback reaches it
	mgr exec --session "$SID" -- "bash -c 'echo > /dev/tcp/127.0.0.1/7443' 2>&1; echo rc=\$?"
	assert_match "a command connects to the agent's port" "Permission denied.*rc=1" "$(tr '\n' ' ' <"$OUT")"
	kill -TERM "$MGR_PID"
	wait "$MGR_PID" 2>/dev/null
	assert_match "the stop proved the pod's end" \
		"is gone: (pod terminated for UID $uid \(container [a-z-]+://[0-9a-f]{64} exited -?[0-9]+\)|pod UID $uid gone \((404|watch DELETED) after delete with preconditions.uid\))" \
		"$(cat "$TD/manager.log")"
}
# registered in cluster_smoke.sh, which runs it while the run's cluster is up

# `--sandbox-start create` on the kubernetes backend: the pod is made at the session's create and its
# agent connected (early_start.c); the first call runs in that pod (its runtime id, generation 1), and
# a delete right after another create waits for that start and proves its pod's end.
test_kubernetes_early_start() {
	k8s_cluster
	local rid i sid2
	mgr_repo
	k8s_mgr_start --sandbox-start create || return 1
	mgr_session
	for i in $(seq 1 600); do
		grep -q "session $SID: its sandbox started at its create" "$TD/manager.log" && break
		sleep 0.1
	done
	mgr session show --session "$SID"
	rid=$(jr .sandbox.runtime_id)
	assert_match "the pod made at the create (log: $(tail -n 3 "$TD/manager.log"))" '^kubernetes:sandbox-[0-9a-f]+-1/' "$rid"
	mgr exec --session "$SID" -- 'pwd -P'
	assert_eq "the first call (stderr: $(head -c 400 "$ERR"))" "$WT" "$(cat "$OUT")"
	mgr session show --session "$SID"
	assert_json '[.generation, .sandbox.runtime_id]' "[1,$(json_str "$rid")]"
	mgr session create --identity alice --repo "$REPO"
	sid2=$(jr .session)
	mgr session delete --session "$sid2"
	assert_eq "a delete right after the create (stderr: $(head -c 300 "$ERR"))" 0 "$RC"
	grep -q "session $sid2: its sandbox started at its create" "$TD/manager.log" ||
		bad "the delete did not wait for the start at the create"
	assert_match "the delete proved the pod's end" "session $sid2: sandbox kubernetes:sandbox-[^ ]* is gone" "$(cat "$TD/manager.log")"
}
# registered in cluster_smoke.sh, which runs it while the run's cluster is up

# A manager killed with its pod up: the next start adopts the recorded pod UID, deletes it with
# preconditions.uid and proves its end before it serves; the session gets a new pod.
test_kubernetes_recovery() {
	k8s_cluster
	local rid uid
	mgr_repo
	k8s_mgr_start || return 1
	mgr_session
	mgr exec --session "$SID" -- 'echo before'
	assert_eq "before the kill (stderr: $(head -c 300 "$ERR"))" before "$(cat "$OUT")"
	mgr session show --session "$SID"
	rid=$(jr .sandbox.runtime_id)
	uid=$(echo "$rid" | cut -d/ -f2)
	kill -KILL "$MGR_PID"
	wait "$MGR_PID" 2>/dev/null
	[ "$("${K8S_NET_CMD[@]}" kubectl --kubeconfig "$K8S_KUBECONFIG" get pod -o jsonpath='{.items[*].metadata.uid}' \
		-l "infra-sandbox/session=$SID")" = "$uid" ] || bad "the pod of UID $uid does not outlive the killed manager"
	k8s_restart || return 1
	assert_match "the restart proved the pod's end" \
		"the previous run's sandbox $rid is gone: after a manager restart: (pod terminated for UID $uid|pod UID $uid gone)" \
		"$(jq -r .msg "$TD/manager.log" 2>/dev/null)"
	mgr exec --session "$SID" -- 'echo after'
	assert_eq "after the restart (stderr: $(head -c 300 "$ERR"))" after "$(cat "$OUT")"
	mgr session show --session "$SID"
	assert_json .sandbox.generation 2
	kill -TERM "$MGR_PID"
	wait "$MGR_PID" 2>/dev/null
}
# registered in cluster_smoke.sh, which runs it while the run's cluster is up
