# shellcheck shell=bash
# shellcheck disable=SC2016 # commands are text for the container's bash
# The sandbox image (scripts/image.sh, images/) under a real podman: what it holds, that `sandbox-agent
# check` passes inside with the documented settings and fails, naming the setting, without them; that
# `sandbox-agent exec` inside a container gets a nested user + PID namespace with a fresh /proc and
# leaves nothing behind; and that images/seccomp.json refuses what it should. Podman itself runs as the
# root harness (podman_cli); the container's user is the test user's uid, or nobody in the root run.

# The documented Podman settings for the boundary (images/README.md).
IMG_SECCOMP=(--security-opt "seccomp=$PODMAN_SECCOMP")

# img_uid: the container's uid for this run; never 0.
img_uid() {
	if [ "$RUN_UID" -eq 0 ]; then echo 65534; else echo "$RUN_UID"; fi
}

# img_podman ARGS...: podman_cli under a timeout (a hung runtime fails the test instead of the run).
img_podman() { timeout -k 3 60 env "CONTAINERS_CONF=$PODMAN_CONF" podman "$@"; }

# img_run ARGS...: `podman run --rm` of the image as this run's container user, labeled so that the
# run's end removes it if the test cannot. Sets RC; stdout in $OUT, stderr in $ERR.
img_run() {
	img_podman run --rm --label "infra-sandbox.test=$IT_ROOT" --user "$(img_uid)" "$@" >"$OUT" 2>"$ERR"
	RC=$?
}

test_image_contents() {
	need_podman
	local static=$IT_REPO/build/sandbox-agent info=$TD/image.json
	if ! podman_cli image inspect "$PODMAN_IMAGE" >"$info" 2>"$ERR"; then
		bad "no image $PODMAN_IMAGE: $(head -c 300 "$ERR")"
		return
	fi
	assert_json '.[0].Config.Entrypoint' '["/usr/local/bin/sandbox-agent"]' "$info"
	assert_json '.[0].Config.Cmd' '["check"]' "$info"
	# Numeric, so that Kubernetes' runAsNonRoot can verify it without a runAsUser.
	assert_json '.[0].Config.User' '"10001:10001"' "$info"

	# The agent as the image holds it, read out by a container: the static build's exact bytes.
	img_run --entrypoint /bin/cat "$PODMAN_IMAGE" /usr/local/bin/sandbox-agent
	assert_eq "cat the agent from the image (stderr: $(head -c 200 "$ERR"))" 0 "$RC"
	assert_eq "sha256 of the image's agent" "$(sha256sum <"$static" | cut -d' ' -f1)" \
		"$(sha256sum <"$OUT" | cut -d' ' -f1)"
	assert_match "ldd of the image's agent" "not a dynamic executable" "$(ldd "$OUT" 2>&1)"

	# Root-owned and not writable by the sandbox's uid (the runc CVE-2019-5736 class).
	img_run --entrypoint /usr/bin/stat "$PODMAN_IMAGE" -c '%u:%g %a' /usr/local/bin/sandbox-agent
	assert_eq "owner and mode of the image's agent" "0:0 755" "$(cat "$OUT")"

	# With no --user at all, the image's own user: sandbox (10001), never root.
	img_podman run --rm --label "infra-sandbox.test=$IT_ROOT" --entrypoint /usr/bin/id "$PODMAN_IMAGE" >"$OUT" 2>"$ERR"
	assert_eq "id in the image as its default user" "uid=10001(sandbox) gid=10001(sandbox) groups=10001(sandbox)" \
		"$(cat "$OUT")"
	img_run --entrypoint /bin/bash "$PODMAN_IMAGE" -c 'git --version && test -s /etc/ssl/certs/ca-certificates.crt &&
		ls /var/lib/apt/lists | wc -l && kubectl version --client --short'
	assert_lines "$(cat "$OUT")" 'git version 2\.[0-9.]+' '0' 'Client Version: v1\.[0-9.]+'
}
t image_contents test_image_contents

# check_passes SECURITY_OPT...: `check` in the image with these settings (plus the profile) passes.
check_passes() {
	local -a sec=()
	local o
	for o in "$@"; do sec+=(--security-opt "$o"); done
	img_run "${sec[@]}" "${IMG_SECCOMP[@]}" "$PODMAN_IMAGE" check
	assert_eq "check with $* exit code (stderr: $(head -c 600 "$ERR"))" 0 "$RC"
	assert_json .ok true
	assert_json .problems '[]'
	assert_json .uid "$(img_uid)"
	assert_json .features.proc_mount.ok true
	assert_json .features.seccomp.ok true
}

# check inside the container passes with the documented settings: the full unmask, and the minimal
# one (/proc only) together with no_new_privs, which Kubernetes' allowPrivilegeEscalation: false sets.
test_image_check_boundary() {
	need_podman
	check_passes 'unmask=ALL'
	check_passes 'unmask=/proc/*' no-new-privileges
}
t image_check_boundary test_image_check_boundary

# Without the unmask the runtime's masked /proc paths make the kernel refuse a fresh /proc: check must
# fail and say so, naming the setting for each runtime, on stdout (JSON) and stderr (words).
test_image_check_masked() {
	need_podman
	local reason fix
	img_run "${IMG_SECCOMP[@]}" "$PODMAN_IMAGE" check
	assert_eq "check without unmask exit code" 1 "$RC"
	assert_json .ok false
	assert_json '[.problems[].feature]' '["proc_mount"]'
	assert_json .features.proc_mount.error '"Operation not permitted"'
	reason=$(jr '.problems[0].reason')
	fix=$(jr '.problems[0].fix')
	assert_match "the reason" '^/proc cannot be mounted .*masked or read-only over it \(/proc/' "$reason"
	assert_match "the fix names Podman's setting" '--security-opt unmask=ALL' "$fix"
	assert_match "the fix names Docker's setting" '--security-opt systempaths=unconfined' "$fix"
	assert_match "the fix names Kubernetes' setting" 'procMount: Unmasked' "$fix"
	assert_match "stderr" 'sandbox-agent check: proc_mount: /proc cannot be mounted .*; fix: .*unmask=ALL' "$(cat "$ERR")"
}
t image_check_masked test_image_check_masked

# sandbox-agent exec inside a running container (as the manager's podman backend runs it): the command
# is PID 2 of a nested PID namespace under a nested user namespace, with a /proc showing only its own
# namespace; a detached child is gone when exec returns, while the container still runs.
test_image_exec_nested() {
	need_podman
	local cid ctr_user ctr_pid m_control m out
	cid=$(img_podman run -d --label "infra-sandbox.test=$IT_ROOT" --user "$(img_uid)" \
		--security-opt 'unmask=/proc/*' --security-opt no-new-privileges "${IMG_SECCOMP[@]}" \
		--entrypoint /bin/sleep "$PODMAN_IMAGE" 600 2>"$ERR")
	if [ -z "$cid" ]; then
		bad "podman run -d failed: $(head -c 300 "$ERR")"
		return
	fi
	# shellcheck disable=SC2064 # the id is fixed now
	trap "podman_cli rm -f -t 0 '$cid' >/dev/null 2>&1" EXIT
	ctr_user=$(img_podman exec "$cid" readlink /proc/self/ns/user)
	ctr_pid=$(img_podman exec "$cid" readlink /proc/self/ns/pid)

	# Control: a detached child started in the container without the agent survives, and this host
	# sees it; so the absence below is the agent's doing, not a blind spot of pgrep.
	m_control=$(unique_marker)
	img_podman exec "$cid" bash -c "setsid sleep 600.$m_control </dev/null >/dev/null 2>&1 &"
	local tries found=
	for tries in $(seq 30 -1 1); do
		found=$(pgrep -f -- "sleep 600.$m_control") && break
		[ "$tries" -gt 1 ] && sleep 0.1
	done
	[ -n "$found" ] || bad "control: the host sees no detached child of a plain podman exec"

	m=$(unique_marker)
	img_podman exec "$cid" bash -c 'mkdir -p /tmp/w /tmp/r && chmod 0700 /tmp/r &&
		exec sandbox-agent exec --receipt-dir /tmp/r --cwd /tmp/w --timeout-seconds 20 -- "$1"' _ \
		'echo "pid=$$ uid=$(id -u)"; p=(/proc/[0-9]*); echo "proc=${p[*]}"
		 echo "user=$(readlink /proc/self/ns/user)"; echo "pidns=$(readlink /proc/self/ns/pid)"
		 setsid sleep 600.'"$m"' </dev/null >/dev/null 2>&1 & echo started' >"$OUT" 2>"$ERR"
	RC=$?
	no_process "sleep 600.$m"
	assert_result exited 0 null
	assert_json .receipt.verified true
	out=$(jr .stdout)
	assert_lines "$out" "pid=2 uid=$(img_uid)" 'proc=/proc/1 /proc/2' 'user=user:\[[0-9]+\]' \
		'pidns=pid:\[[0-9]+\]' started
	assert_ne "the command's user namespace (the container's is $ctr_user)" "$ctr_user" \
		"$(sed -n 's/^user=//p' <<<"$out")"
	assert_ne "the command's PID namespace (the container's is $ctr_pid)" "$ctr_pid" \
		"$(sed -n 's/^pidns=//p' <<<"$out")"
	assert_eq "the container still runs" running "$(podman_cli inspect -f '{{.State.Status}}' "$cid" 2>&1)"
}
t image_exec_nested test_image_exec_nested

# images/seccomp.json against the container's own process (no agent filter in the way): each probe is
# EPERM under the profile, and under podman's default profile the same calls reach the kernel, which
# proves that the profile is what refuses them. The container gets a user namespace of its own (as
# hostUsers: false does in Kubernetes), which the attack program's guard requires.
test_image_seccomp_profile() {
	need_podman
	local -a run=(--uidmap 0:400000:65536 --gidmap 0:400000:65536
		-v "$ESC/attack_container:/attack_container:ro" --entrypoint /attack_container)
	img_run "${run[@]}" "${IMG_SECCOMP[@]}" "$PODMAN_IMAGE" "$HOST_PIDNS" "$HOST_USERNS"
	assert_eq "attack_container under images/seccomp.json (stderr: $(head -c 300 "$ERR"))" 0 "$RC"
	assert_lines "$(cat "$OUT")" \
		'keyctl errno=EPERM' 'add_key errno=EPERM' 'request_key errno=EPERM' 'bpf errno=EPERM' \
		'perf_event_open errno=EPERM' 'io_uring_setup errno=EPERM' 'userfaultfd errno=EPERM' \
		'name_to_handle_at errno=EPERM' 'ptrace_peekuser errno=EPERM' 'process_vm_readv_self errno=EPERM' \
		'pidfd_getfd errno=EPERM' 'prlimit64_pid errno=EPERM' 'setns errno=EPERM' \
		'sched_setaffinity_pid errno=EPERM' 'sched_setaffinity_highbits errno=EPERM' \
		'sched_setscheduler_pid errno=EPERM' 'sched_setparam_pid errno=EPERM' 'sched_setattr_pid errno=EPERM' \
		'setpriority_pid errno=EPERM' 'setpriority_user_0 errno=EPERM' 'ioprio_set_pid errno=EPERM' \
		'ioprio_set_user_0 errno=EPERM' 'sched_setaffinity_self errno=0' 'sched_setscheduler_self errno=0' \
		'setpriority_self errno=0' 'ioprio_set_self errno=0' \
		'prlimit64_self errno=0' 'open_tree_reaches_kernel errno=ENOENT' \
		'mount_setattr_reaches_kernel errno=EINVAL' 'pidfd_open errno=0' 'landlock_abi errno=0' \
		'seccomp_action_avail errno=0' 'unshare_user_pid_mount errno=0'

	img_run "${run[@]}" "$PODMAN_IMAGE" "$HOST_PIDNS" "$HOST_USERNS"
	assert_eq "attack_container under podman's default profile exit code" 1 "$RC"
	assert_match "keyctl under podman's default profile" '^keyctl errno=0$' "$(grep '^keyctl ' "$OUT")"
	assert_match "setns under podman's default profile" '^setns errno=EBADF$' "$(grep '^setns ' "$OUT")"
	assert_match "prlimit64 on a pid under podman's default profile" '^prlimit64_pid errno=0$' \
		"$(grep '^prlimit64_pid ' "$OUT")"
	# the process's own pid by number: the kernel allows each call, so the EPERM above is the profile's
	local call
	for call in sched_setaffinity_pid sched_setaffinity_highbits sched_setscheduler_pid sched_setparam_pid \
		sched_setattr_pid setpriority_pid ioprio_set_pid; do
		assert_match "$call under podman's default profile" "^$call errno=0\$" "$(grep "^$call " "$OUT")"
	done
}
t image_seccomp_profile test_image_seccomp_profile
