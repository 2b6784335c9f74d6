#!/usr/bin/env bash
# `make cluster-down`: removes the test cluster that scripts/cluster/up.sh started, and what it changed
# on the host. It signals only the PIDs up.sh recorded (the cluster's PID 1 and the unshare above it,
# each checked against its recorded start time): SIGTERM (node.sh stops the kubelet, containerd and the
# control plane), SIGKILL after 30 s; when PID 1 of the cluster's PID namespace ends, the kernel ends
# every process left in it (shims, pods), and its private mounts go with its mount namespace. Then it
# deletes the network namespace, removes the kubepods cgroups the kubelet created, restores the sysctls
# the kubelet changed and removes the state directory. Safe to run when nothing is running.
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
# shellcheck source=scripts/cluster/common.sh
. "$repo/scripts/cluster/common.sh"

[ "$(id -u)" -eq 0 ] || die "must run as root; run: sudo make cluster-down"

alive() { # PID START
	[ -n "$1" ] && [ -n "$2" ] && [ "$(proc_start "$1")" = "$2" ]
}

if [ -f "$state/node.pid" ]; then
	read -r init init_start outer outer_start <"$state/node.pid" || true
	if alive "${init:-}" "${init_start:-}"; then
		kill -TERM "$init" 2>/dev/null || true
		for _ in $(seq 1 300); do
			alive "$init" "$init_start" || break
			sleep 0.1
		done
		if alive "$init" "$init_start"; then
			echo "cluster: PID 1 ($init) did not stop in 30 s; SIGKILL" >&2
			kill -KILL "$init" 2>/dev/null || true
		fi
	fi
	# The unshare (which nsenter became) exits once its child has.
	for _ in $(seq 1 100); do
		alive "${outer:-}" "${outer_start:-}" || break
		sleep 0.1
	done
	if alive "${outer:-}" "${outer_start:-}"; then
		kill -KILL "$outer" 2>/dev/null || true
	fi
fi

if ip netns list | awk '{print $1}' | grep -qx "$netns"; then
	ip netns delete "$netns"
fi

# The kubepods trees the kubelet created (deepest first); the processes in them are gone, but the
# kernel may need a moment to release an emptied cgroup.
if [ -f "$state/cgroups.created" ]; then
	while read -r dir; do
		case $dir in /sys/fs/cgroup/*/kubepods) ;; *) continue ;; esac
		[ -d "$dir" ] || continue
		for _ in $(seq 1 50); do
			find "$dir" -depth -type d -exec rmdir {} + 2>/dev/null || true
			[ -d "$dir" ] || break
			sleep 0.1
		done
		[ -d "$dir" ] && echo "cluster: could not remove $dir" >&2
	done <"$state/cgroups.created"
fi

if [ -f "$state/sysctl.saved" ]; then
	while read -r name value; do
		[ -n "$name" ] || continue
		if [ "$(sysctl -n "$name")" != "$value" ]; then
			sysctl -q -w "$name=$value"
		fi
	done <"$state/sysctl.saved"
fi

# Nothing may still be mounted below the state directory (a mount would mean a process survived).
if findmnt -rn -o TARGET | grep -qF "$state"; then
	die "mounts remain below $state; not removing it"
fi
if [ -d "$state" ]; then
	rm -rf --one-file-system "${state:?}"
fi
echo "cluster: down" >&2
