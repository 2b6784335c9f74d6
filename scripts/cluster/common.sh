# shellcheck shell=bash disable=SC2034
# Shared by scripts/cluster/up.sh and down.sh (sourced): names, paths and the checks both need.
state=${CLUSTER_STATE:-/var/lib/infra-sandbox/cluster}
netns=${CLUSTER_NETNS:-infra-sandbox-cluster}
image=${IMAGE:-infra-sandbox-agent:dev}
pause_image=docker.io/infra-sandbox/pause:3.4
# The host sysctls the kubelet writes (setupKernelTunables); saved by up.sh, restored by down.sh.
kubelet_sysctls=(vm.overcommit_memory vm.panic_on_oom kernel.panic kernel.panic_on_oops
	kernel.keys.root_maxkeys kernel.keys.root_maxbytes)

die() {
	echo "cluster: $*" >&2
	exit 1
}

# The start time of a process (field 22 of /proc/PID/stat), empty if it does not exist: a recorded
# PID is signalled only while it still names the process that was started.
proc_start() {
	local stat
	stat=$(cat "/proc/$1/stat" 2>/dev/null) || return 0
	stat=${stat##*) }
	# After "PID (comm) " the fields start at 3: state is $1, start time (22) is ${20}.
	set -- $stat
	echo "${20}"
}

# 0 when the PID recorded in $state/node.pid is alive and is still the process that was started.
cluster_running() {
	local pid start
	[ -f "$state/node.pid" ] || return 1
	read -r pid start _ <"$state/node.pid" || return 1
	[ -n "$pid" ] && [ "$(proc_start "$pid")" = "$start" ] && [ -f "$state/node.ready" ]
}

print_lines() {
	echo "KUBECONFIG=$state/admin.kubeconfig"
	echo "CLUSTER_NET=ip netns exec $netns"
}
