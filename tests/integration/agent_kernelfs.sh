# shellcheck shell=bash
# shellcheck disable=SC2016 # commands are text for the inner bash
# Rule N7 of docs/isolation.md: kernel filesystems are decided by their statfs type, never by path. A
# writable tree that holds one (a host procfs bound below a --writable root, sysfs nested deeper, a bind of
# a part of procfs, the cgroup tree), or a writable root that is one itself (through a bind, a symbolic
# link, or its own path), is refused before the command runs, naming the path and the type; the mounts a
# writable root holds are read-only, nodev, nosuid and noexec unless declared writable themselves. Each
# case builds its mounts in a mount namespace of its own (as the unprivileged user: the root of a user
# namespace of its own, where the agent runs as in a rootless container), the agent inside it.

KFS_BUILD=$(cd "${1:-build}" 2>/dev/null && pwd)

# kfs_exec MOUNTS ARGS...: `agent exec` with this test's receipt and working directories, in a fresh mount
# namespace where the shell text MOUNTS ran first.
kfs_exec() {
	local mounts=$1
	local -a as=("${AS[@]}") userns=()
	shift
	[ "$RUN_UID" -ne 0 ] && userns=(-U -r)
	AGENT_WRAP=("${as[@]}" unshare "${userns[@]}" -m --propagation private bash -c "set -e; $mounts; exec \"\$@\"" kfs)
	AS=()
	agent exec --receipt-dir "$RD" --cwd "$WD" "$@"
	AS=("${as[@]}")
	AGENT_WRAP=()
}

# kfs_refused WHAT ERE: the last exec was refused with an error matching ERE. Refused by the agent, before
# init exists: no receipt.
kfs_refused() {
	kfs_refused_by_init "$@"
	assert_json .receipt null
}

# kfs_refused_by_init WHAT ERE: refused, by init or before; a receipt, if any, says refused: no command
# ran, no exit code (its boundary.confirmed says only that init's namespace ended empty).
kfs_refused_by_init() {
	local receipt
	assert_eq "$1: agent exit code" 0 "$RC"
	assert_json .status '"refused"'
	assert_match "$1: error" "$2" "$(jr .error)"
	receipt=$(jr .receipt.path)
	if [ -n "$receipt" ] && [ "$receipt" != null ]; then
		assert_json .status '"refused"' "$receipt"
		assert_json .exit_code null "$receipt"
	fi
}

# The reviewer's break: a host procfs below a --writable root stayed writable, and the command raised an
# outside process's oom_score_adj and its autogroup nice (the receipt said confirmed). The outside process
# belongs to the command's own uid outside (nobody under a root agent), so only the boundary stops it.
test_kernel_fs_in_writable_refused() {
	local m extra pid oom0 nice0 w cg src owner tested=
	m=$(unique_marker)
	extra=$TD/extra
	mkdir_user "$extra" "$extra/proc" "$extra/a/b/sys" "$extra/ps" "$extra/cg" "$extra/sp ace/proc"
	touch "$extra/oom"
	[ "$RUN_UID" -eq 0 ] && chown -R 65534:65534 "$extra"
	ln -s "$extra" "$TD/link"
	# Not through a function: $! must be the sleep itself; in a session (so an autogroup) of its own, so
	# that a regression raises only its nice, not the runner's.
	if [ "$RUN_UID" -eq 0 ]; then
		setpriv --reuid=65534 --regid=65534 --clear-groups setsid sleep "300.$m" &
		owner=65534
	else
		"${AS[@]}" setsid sleep "300.$m" &
		owner=$RUN_UID
	fi
	pid=$!
	for _ in 1 2 3 4 5 6 7 8 9 10; do
		[ "$(cat "/proc/$pid/comm" 2>/dev/null)" = sleep ] && break
		sleep 0.1
	done
	assert_eq "the outside process's owner" "$owner" "$(stat -c %u "/proc/$pid")"
	oom0=$(cat "/proc/$pid/oom_score_adj")
	nice0=$(cat "/proc/$pid/autogroup")
	w="echo 900 > $extra/proc/$pid/oom_score_adj; echo 19 > $extra/proc/$pid/autogroup; touch $WD/ran-$m"
	kfs_exec "mount --rbind /proc $extra/proc" --writable "$extra" -- "$w"
	kfs_refused "procfs below the writable root" "the writable $extra holds a proc filesystem at $extra/proc, .*unmount it"
	# Reached through a symbolic link to the root: the same tree, the same refusal.
	kfs_exec "mount --rbind /proc $extra/proc" --writable "$TD/link" -- "$w"
	kfs_refused "through a link" "holds a proc filesystem at $extra/proc"
	# The working directory is a writable root too.
	kfs_exec "mount --rbind /proc $extra/proc" --cwd "$extra/proc" -- "$w"
	kfs_refused "procfs as the working directory" "the writable $extra/proc is on a proc filesystem"
	# The writable root itself a kernel filesystem, at any name.
	kfs_exec "mount --rbind /proc $extra/proc" --writable "$extra/proc/sys" -- "$w"
	kfs_refused "a part of procfs as the root" "the writable $extra/proc/sys is on a proc filesystem"
	agent exec --receipt-dir "$RD" --cwd "$WD" --writable /proc/sys -- "$w"
	kfs_refused "/proc/sys" "the writable /proc/sys is on a proc filesystem"
	# Nested deeper, a bind of a part of procfs, the cgroup tree.
	kfs_exec "mount --rbind /sys $extra/a/b/sys" --writable "$extra" -- "$w"
	kfs_refused "nested sysfs" "holds a sysfs filesystem at $extra/a/b/sys"
	kfs_exec "mount --rbind /proc/sys $extra/ps" --writable "$extra" -- "$w"
	kfs_refused "a bind of /proc/sys" "holds a proc filesystem at $extra/ps"
	# One file of procfs bound into the root: the outside process's oom_score_adj itself.
	kfs_exec "mount --bind /proc/$pid/oom_score_adj $extra/oom" --writable "$extra" -- "echo 900 > $extra/oom"
	kfs_refused "a procfs file" "holds a proc filesystem at $extra/oom,"
	# A mount point whose name the mount table escapes (a space is \040 there).
	kfs_exec "mount --rbind /proc '$extra/sp ace/proc'" --writable "$extra" -- "$w"
	kfs_refused "a name with a space" "holds a proc filesystem at $extra/sp ace/proc,"
	# The host's cgroup directory as the root: a cgroup2 filesystem itself, or (v1, hybrid) a tmpfs of them.
	agent exec --receipt-dir "$RD" --cwd "$WD" --writable /sys/fs/cgroup -- "$w"
	kfs_refused "/sys/fs/cgroup" "the writable /sys/fs/cgroup (is on|holds) a cgroup2? filesystem"
	# The cgroup trees this host has (v2, v1 or both), each bound below the root.
	for cg in cgroup2 cgroup; do
		src=$(findmnt -n -t "$cg" -o TARGET | head -n 1)
		[ -n "$src" ] || continue
		tested=1
		kfs_exec "mount --rbind $src $extra/cg" --writable "$extra" -- "$w"
		kfs_refused "the $cg tree" "holds a $cg filesystem at $extra/cg"
	done
	[ -n "$tested" ] || bad "no cgroup filesystem on this host to test with"
	assert_eq "oom_score_adj of the outside process" "$oom0" "$(cat "/proc/$pid/oom_score_adj")"
	assert_eq "autogroup of the outside process" "$nice0" "$(cat "/proc/$pid/autogroup")"
	[ -e "$WD/ran-$m" ] && bad "a refused exec ran its command"
	kill "$pid"
	wait "$pid" 2>/dev/null
	return 0
}
t kernel_fs_in_writable_refused test_kernel_fs_in_writable_refused

# A mount inside a writable root is read-only, nodev, nosuid and noexec unless it is declared writable
# itself, whichever order the roots are given in; the root's own mount keeps write and exec.
test_writable_submounts_readonly() {
	local m extra
	m=$(unique_marker)
	extra=$TD/extra
	mkdir_user "$extra" "$extra/sub" "$extra/own"
	[ "$RUN_UID" -eq 0 ] && chown -R 65534:65534 "$extra"
	kfs_exec "mount -t tmpfs -o mode=1777 sub $extra/sub; cp /bin/true $extra/sub/t;
		mount -t tmpfs -o mode=1777 own $extra/own" --writable "$extra/own" --writable "$extra" -- "
		touch $extra/sub/x-$m 2>&1 | grep -c 'Read-only file system'
		$extra/sub/t 2>&1 | grep -c 'Permission denied'
		touch $extra/own/x-$m && cp /bin/true $extra/own/t && $extra/own/t && echo own=ok
		cp /bin/true $extra/t-$m && $extra/t-$m && echo root=ok"
	assert_result exited 0 null
	assert_lines "$(jr .stdout)" '1' '1' 'own=ok' 'root=ok'
	[ -e "$extra/t-$m" ] || bad "the command could not write its --writable root"
	return 0
}
t writable_submounts_readonly test_writable_submounts_readonly

# A kernel filesystem mounted after the agent's checks, before init copies the root (the failpoint agent,
# stopped at agent.exec.view_checked while the test mounts in its namespace): init finds it on the view it
# built and refuses the call before the command exists.
test_kernel_fs_mounted_late() {
	local m extra agent pid bg fp=$KFS_BUILD/fp/sandbox-agent
	m=$(unique_marker)
	extra=$TD/extra
	if [ ! -x "$fp" ]; then
		bad "no failpoint agent at $fp: build it with make failpoints"
		return
	fi
	cp "$fp" "$TD/agent-fp" && chmod 0755 "$TD/agent-fp"
	mkdir_user "$extra" "$extra/proc"
	[ "$RUN_UID" -eq 0 ] && chown -R 65534:65534 "$extra"
	AGENT_ENV=(SB_FAILPOINT=agent.exec.view_checked:stop)
	(AGENT=$TD/agent-fp kfs_exec "true" --exec-id "late-$m" --writable "$extra" -- "touch $WD/ran-$m"; exit "$RC") &
	bg=$!
	for _ in $(seq 100); do
		for pid in $(pgrep -f -- "late-$m"); do
			[ "$(cat "/proc/$pid/comm" 2>/dev/null)" = agent-fp ] && [ "$(awk '{print $3}' "/proc/$pid/stat")" = T ] &&
				agent=$pid
		done
		[ -n "${agent:-}" ] && break
		sleep 0.1
	done
	AGENT_ENV=()
	if [ -z "${agent:-}" ]; then
		bad "the agent never stopped at its failpoint"
		wait "$bg"
		return
	fi
	if [ "$RUN_UID" -eq 0 ]; then
		nsenter -t "$agent" -m mount --rbind /proc "$extra/proc" || bad "cannot mount in the agent's namespace"
	else
		as_user nsenter -t "$agent" -U -m --preserve-credentials mount --rbind /proc "$extra/proc" ||
			bad "cannot mount in the agent's namespace"
	fi
	kill -CONT "$agent"
	wait "$bg"
	RC=$?
	kfs_refused_by_init "procfs mounted after the check" "^init: the writable $extra holds a proc filesystem at $extra/proc"
	[ -e "$WD/ran-$m" ] && bad "the refused exec ran its command"
	return 0
}
t kernel_fs_mounted_late test_kernel_fs_mounted_late
