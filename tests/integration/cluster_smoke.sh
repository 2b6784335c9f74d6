# shellcheck shell=bash
# The test cluster (`make cluster`, scripts/cluster/): it comes up and prints its two lines, pods of the
# sandbox image run through the API (scripts/cluster/smoke.sh: Running then Succeeded with a containerID
# and exit code, exit code 7, `sandbox-agent check` with the boundary's settings, preconditions.uid 409),
# and `make cluster-down` leaves no process, mount, cgroup, network namespace or sysctl changed. Root
# only. The first run on a machine builds the binaries (about 5 to 10 min; cached in
# /var/cache/infra-sandbox/), hence the longer deadline; later runs take about a minute.

CLUSTER_IT_STATE=/var/lib/infra-sandbox/cluster

# cluster_host: what the cluster may change on the host, one line per item.
cluster_host() {
	local s
	. "$IT_REPO/scripts/cluster/common.sh"
	for s in "${kubelet_sysctls[@]}"; do echo "sysctl $s=$(sysctl -n "$s")"; done
	ls -d /sys/fs/cgroup/*/kubepods 2>/dev/null | sed 's/^/cgroup /'
	ip netns list | awk '{print "netns " $1}' | grep -x "netns $netns"
	findmnt -rn -o TARGET | grep -F "$CLUSTER_IT_STATE" | sed 's/^/mount /'
	ps -eo pid=,args= | grep -F "$CLUSTER_IT_STATE" | grep -v grep | sed 's/^/process /'
	[ -e "$CLUSTER_IT_STATE" ] && echo "state $CLUSTER_IT_STATE"
	return 0
}

# The run's cluster lives from cluster_smoke to cluster_down: the Kubernetes backend's tests
# (manager_kubernetes.sh, registered below) run on it in between, reading its lines from
# $K8S_READY. A cluster someone else started is used, never brought down.
K8S_READY=${K8S_READY:-$IT_ROOT/cluster.ready} # a focused run may name a cluster already up
CLUSTER_OURS=$IT_ROOT/cluster.ours     # this run brought the cluster up: cluster_down takes it down
CLUSTER_BEFORE=$IT_ROOT/cluster.before # the host as it was before

test_cluster_smoke() {
	[ "$RUN_UID" -eq 0 ] || skip "the test cluster needs root (network, mount and PID namespaces, cgroups, containerd)"
	need_podman # the sandbox image comes from root's podman storage
	if [ -e "$CLUSTER_IT_STATE/node.pid" ]; then
		printf 'KUBECONFIG=%s\nCLUSTER_NET=%s\n' "$CLUSTER_IT_STATE/admin.kubeconfig" \
			"ip netns exec infra-sandbox-cluster" >"$K8S_READY"
		skip "a test cluster is already running (state $CLUSTER_IT_STATE; someone's make cluster): used as it is, not brought up or down"
	fi
	local kc net rc
	cluster_host >"$CLUSTER_BEFORE"

	CLUSTER_STATE=$CLUSTER_IT_STATE IMAGE=$PODMAN_IMAGE CONTAINERS_CONF=$PODMAN_CONF \
		bash "$IT_REPO/scripts/cluster/up.sh" >"$TD/up.out" 2>"$TD/up.err"
	rc=$?
	if [ "$rc" -ne 0 ]; then
		bad "make cluster failed ($rc): $(tail -n 5 "$TD/up.err")"
		tail -n 20 "$CLUSTER_IT_STATE"/log/kubelet.log 2>/dev/null
	else
		kc=$(tail -n 2 "$TD/up.out" | sed -n 's/^KUBECONFIG=//p')
		net=$(tail -n 1 "$TD/up.out" | sed -n 's/^CLUSTER_NET=//p')
		assert_eq "KUBECONFIG line" "$CLUSTER_IT_STATE/admin.kubeconfig" "$kc"
		assert_eq "CLUSTER_NET line" "ip netns exec infra-sandbox-cluster" "$net"
		# shellcheck disable=SC2086 # CLUSTER_NET is a command prefix
		if ! IMAGE=$PODMAN_IMAGE bash "$IT_REPO/scripts/cluster/smoke.sh" "$kc" $net >"$TD/smoke.out" 2>&1; then
			bad "smoke test: $(tail -n 3 "$TD/smoke.out")"
		fi
		grep -q '^cluster-smoke: all passed' "$TD/smoke.out" || bad "smoke test did not finish: $(tail -n 3 "$TD/smoke.out")"
		cat "$TD/smoke.out"
		tail -n 2 "$TD/up.out" >"$K8S_READY"
	fi
	: >"$CLUSTER_OURS"
}

test_cluster_down() {
	[ "$RUN_UID" -eq 0 ] || skip "the test cluster needs root"
	[ -e "$CLUSTER_OURS" ] || skip "this run did not bring a cluster up"
	local after
	if ! CLUSTER_STATE=$CLUSTER_IT_STATE bash "$IT_REPO/scripts/cluster/down.sh" >"$TD/down.out" 2>&1; then
		bad "make cluster-down failed: $(tail -n 3 "$TD/down.out")"
	fi
	rm -f "$CLUSTER_OURS" "$K8S_READY"
	after=$(cluster_host)
	[ "$(cat "$CLUSTER_BEFORE")" = "$after" ] ||
		bad "the host changed: $(diff "$CLUSTER_BEFORE" <(echo "$after") | grep '^[<>]' | head -n 10)"
}

IT_TEST_DEADLINE=900 t cluster_smoke test_cluster_smoke
# The Kubernetes backend on the real cluster (the functions are in manager_kubernetes*.sh).
t kubernetes_session test_kubernetes_session
t kubernetes_early_start test_kubernetes_early_start
t kubernetes_tokens test_kubernetes_tokens # manager_kubernetes_tokens.sh
t kubernetes_egress_edge test_kubernetes_egress_edge # manager_egress_kubernetes.sh: issue 28 on the real cluster
t kubernetes_egress_proxy test_kubernetes_egress_proxy # manager_egress_kubernetes.sh: policy proxy on the kubernetes backend
t kubernetes_demo_cluster test_kubernetes_demo_cluster # manager_egress_kubernetes.sh: make demo-cluster
t kubernetes_recovery test_kubernetes_recovery
# The Secrets and pvc:CLAIM (manager_kubernetes_volumes.sh).
t kubernetes_secrets test_kubernetes_secrets
t kubernetes_pvc test_kubernetes_pvc
# deploy/kubernetes/, RBAC, the in-cluster account, a server that drops procMount, and the pod's life
# from outside (the functions are in manager_kubernetes_faults.sh).
t kubernetes_deploy_dryrun test_kubernetes_deploy_dryrun
t kubernetes_deploy_certs test_kubernetes_deploy_certs
t kubernetes_rbac test_kubernetes_rbac
t kubernetes_incluster test_kubernetes_incluster
t kubernetes_drops_procmount test_kubernetes_drops_procmount
t kubernetes_watch_refused test_kubernetes_watch_refused
t kubernetes_detached test_kubernetes_detached
t kubernetes_cancel test_kubernetes_cancel
t kubernetes_pod_deleted test_kubernetes_pod_deleted
t kubernetes_container_killed test_kubernetes_container_killed
t kubernetes_agent_unreachable test_kubernetes_agent_unreachable
t kubernetes_idle test_kubernetes_idle
# Two managers from deploy/kubernetes behind their Service, their pod deleted and killed mid-call
# (manager_kubernetes_managers.sh); the images are built from this run's binaries (about a minute
# with the root filesystems cached in build/image/).
IT_TEST_DEADLINE=600 t kubernetes_managers test_kubernetes_managers
t cluster_down test_cluster_down
