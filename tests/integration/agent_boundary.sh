# shellcheck shell=bash
# shellcheck disable=SC2016,SC2034 # commands are text for the inner bash; variables are read by lib.sh
# sandbox-agent exec: what a command can and cannot do inside the boundary. Privileges (capabilities,
# no_new_privs, seccomp), descriptors, the protected PID 1, the seccomp deny list, nested namespaces, the
# hidden receipt directory and the invisible nonce. Attack programs run only with the guard's inodes.

test_privileges() {
	ax_ok -- 'grep -E "^(Cap(Inh|Prm|Eff|Bnd|Amb)|NoNewPrivs|Seccomp):" /proc/self/status /proc/$$/status'
	assert_result exited 0 null
	local z=0000000000000000 who lines=()
	for who in '/proc/self/status' '/proc/[0-9]+/status'; do
		lines+=("$who:CapInh:	$z" "$who:CapPrm:	$z" "$who:CapEff:	$z" "$who:CapBnd:	$z" "$who:CapAmb:	$z"
			"$who:NoNewPrivs:	1" "$who:Seccomp:	2")
	done
	assert_lines "$(jr .stdout)" "${lines[@]}"
}
t privileges test_privileges

# /proc/self/fd shows 0, 1, 2 and the listing's own directory descriptor (3) only; 0 is /dev/null.
test_descriptors() {
	ax_ok -- 'ls -1 /proc/self/fd | tr "\n" " "; echo; cd /proc/$$/fd && echo *; readlink /proc/$$/fd/0;
		for f in 1 2; do readlink /proc/$$/fd/$f | sed "s/:\[[0-9]*\]//"; done'
	assert_result exited 0 null
	assert_lines "$(jr .stdout)" '0 1 2 3 ' '0 1 2 3' '/dev/null' 'pipe' 'pipe'
}
t descriptors test_descriptors

test_attack_init() {
	ax_ok -- "$ESC/attack_init $GUARD"
	assert_result exited 0 null
	# kill(1, ...) returns 0 (the kernel drops it: init has no handler) or EPERM (Landlock signal scope)
	local k='errno=(0|EPERM) init_alive=1'
	local -a fd_probes=('open_proc1_fd errno=EACCES') sched_probes=() proc_probes=()
	local p
	# Another process's scheduling, priority, affinity, I/O priority and memory: seccomp's EPERM
	for p in sched_setscheduler_1_idle sched_setscheduler_1_highbits sched_setparam_1 sched_setattr_1_idle \
		sched_setaffinity_1 sched_setaffinity_1_highbits setpriority_process_1 setpriority_process_1_highbits \
		setpriority_pgrp_1 setpriority_user_0 setpriority_user_own_uid ioprio_set_process_1 ioprio_set_pgrp_1 \
		ioprio_set_user_0 migrate_pages_1 move_pages_1 process_madvise_1 process_mrelease_1; do
		sched_probes+=("$p errno=EPERM")
	done
	# ...while the command's own stay changeable
	for p in setpriority_self setpriority_own_pgrp sched_setscheduler_self sched_setaffinity_self ioprio_set_self; do
		sched_probes+=("$p errno=0")
	done
	# init's /proc files: refused at open (the file's mode) or by the write handler (a capability)
	for p in oom_score_adj oom_adj coredump_filter autogroup timerslack_ns; do
		proc_probes+=("write_proc1_$p errno=(EACCES|EPERM)")
	done
	assert_lines "$(jr .stdout)" \
		'init_alive_start init_alive=1' \
		"kill_sigkill_1 $k" "kill_sigterm_1 $k" "kill_sigstop_1 $k" "kill_sigint_1 $k" "kill_sighup_1 $k" \
		'ptrace_attach_1 errno=EPERM' 'ptrace_seize_1 errno=EPERM' \
		'open_proc1_environ errno=EACCES' 'open_proc1_mem errno=EACCES' 'open_proc1_exe_write errno=EACCES' \
		"${fd_probes[@]}" 'readlink_proc1_fd errno=EACCES' 'open_proc1_fd_entry errno=EACCES' \
		'readlink_proc1_exe errno=EACCES' 'readlink_proc1_root errno=EACCES' \
		'readlink_proc1_cwd errno=EACCES' \
		'prlimit_1_cpu errno=EPERM' 'prlimit_1_get errno=EPERM' 'prlimit_1_highbits_cpu errno=EPERM' \
		"${sched_probes[@]}" \
		'init_nice_unchanged=1 init_policy_unchanged=1 init_affinity_unchanged=1 init_ioprio_unchanged=1' \
		"${proc_probes[@]}" 'proc1_writable_files none' \
		'init_alive_end init_alive=1' 'attack_init failures=0'
}
t attack_init test_attack_init

# The same from the shell, as a user would try it: init keeps running until the command ends.
test_kill_init_from_shell() {
	ax_ok -- 'kill -9 1; kill -TERM 1; kill -STOP 1; sleep 0.2; grep "^State:" /proc/1/status; echo alive'
	assert_result exited 0 null
	assert_lines "$(jr .stdout)" 'State:	[SR] .*' 'alive'
}
t kill_init_from_shell test_kill_init_from_shell

test_attack_syscalls() {
	ax_ok -- "$ESC/attack_syscalls $GUARD"
	assert_result exited 0 null
	local p
	local -a want=('open_fds 0,1,2')
	for p in mount_tmpfs umount2_proc unshare_newuser unshare_newuser_newns clone_newuser; do
		want+=("$p errno=EPERM")
	done
	want+=('clone3 errno=ENOSYS')
	for p in setns ptrace_attach_child process_vm_readv_self process_vm_writev_self pidfd_getfd bpf \
		perf_event_open keyctl add_key io_uring_setup reboot kexec_load kexec_file_load init_module \
		finit_module ioctl_tiocsti ioctl_tiocsti_highbits prlimit_self_pid; do
		want+=("$p errno=EPERM")
	done
	want+=('prlimit_pid0 errno=0' 'getrlimit errno=0' 'socket_tcp errno=0' 'setsockopt_nodelay errno=0')
	for p in setsockopt_fastopen_connect setsockopt_fastopen_connect_highbits \
		setsockopt_fastopen_connect_level_highbits sendto_fastopen sendmsg_fastopen \
		socket_mptcp_v4 socket_mptcp_v6 socket_mptcp_highbits; do
		want+=("$p errno=EPERM")
	done
	# SIGSEGV only where the machine has no int 0x80 at all (checked by the program's comment)
	want+=('int80_getpid signal=SIG(SYS|SEGV)' 'attack_syscalls failures=0')
	assert_lines "$(jr .stdout)" "${want[@]}"
}
t attack_syscalls test_attack_syscalls

# A nested PID namespace of the command's own is refused, and nothing of it remains.
test_nested_unshare() {
	local m
	m=$(unique_marker)
	ax_ok -- "unshare -U -p -f --mount-proc sleep 300.$m; echo rc=\$?; unshare -p -f sleep 301.$m; echo rc=\$?;
		unshare -U -p -f sleep 302.$m & wait \$!; echo rc=\$?"
	assert_result exited 0 null
	assert_json .stdout '"rc=1\nrc=1\nrc=1\n"'
	assert_lines "$(jr .stderr)" 'unshare: unshare failed: Operation not permitted' \
		'unshare: unshare failed: Operation not permitted' 'unshare: unshare failed: Operation not permitted'
	no_process "sleep 30[0-2].$m"
}
t nested_unshare test_nested_unshare

# The receipt directory (with the key and earlier receipts) can be neither read nor written by a command.
test_receipt_dir_hidden() {
	ax_ok --exec-id first -- true
	assert_result exited 0 null
	[ -f "$RD/first.json" ] || bad "no receipt $RD/first.json"
	[ -f "$RD/receipt.key" ] || bad "no key $RD/receipt.key"
	local key_sum
	key_sum=$(sha256sum <"$RD/receipt.key")
	ax_ok -- "ls -a '$RD' >/dev/null 2>&1; echo ls=\$?; touch '$RD/x' 2>/dev/null; echo touch=\$?;
		cat '$RD/receipt.key' >/dev/null 2>&1; echo key=\$?; cat '$RD/first.json' >/dev/null 2>&1; echo receipt=\$?;
		ln -s /etc/passwd '$RD/second.json' 2>/dev/null; echo symlink=\$?;
		cat '/proc/1/root$RD/receipt.key' >/dev/null 2>&1; echo via_init_root=\$?;
		ls '/proc/1/cwd/' >/dev/null 2>&1; echo via_init_cwd=\$?"
	assert_result exited 0 null
	assert_lines "$(jr .stdout)" 'ls=[1-9][0-9]*' 'touch=1' 'key=1' 'receipt=1' 'symlink=1' 'via_init_root=1' \
		'via_init_cwd=[1-9][0-9]*'
	[ -e "$RD/x" ] && bad "the command created $RD/x"
	[ -L "$RD/second.json" ] && bad "the command planted a symlink in $RD"
	assert_eq "key unchanged" "$key_sum" "$(sha256sum <"$RD/receipt.key")"
}
t receipt_dir_hidden test_receipt_dir_hidden

# The nonce never reaches the command: not in its environment, any argv, /proc/1, fds or the output.
test_nonce_invisible() {
	local nonce found
	nonce=$(od -An -tx1 -N32 /dev/urandom | tr -d ' \n')
	# Every hex run of 64+ characters the command can find; the host checks none is the nonce.
	ax_ok --nonce "$nonce" --output-limit 4000000 -- '
		scan() {
			cat /proc/self/environ /proc/self/cmdline /proc/[0-9]*/cmdline /proc/[0-9]*/environ
			for f in /proc/1/* /proc/1/task/*/* /proc/$$/* /proc/$$/fd/*; do
				[ -f "$f" ] && [ -r "$f" ] && timeout 2 cat "$f"
				[ -L "$f" ] && readlink "$f"
			done
			env; set
		} 2>/dev/null
		scan | wc -c | sed "s/^/scanned=/"
		scan | tr -c "0-9a-fA-F" "\n" | grep -E "^.{64,}$" | sort -u'
	assert_result exited 0 null
	assert_json .stdout_truncated false
	assert_match "bytes scanned" '^scanned=[0-9]{4,}' "$(jr .stdout | head -n 1)"
	found=$(jq -r '.stdout, .stderr' "$OUT" | grep -ci -- "$nonce")
	assert_eq "times the nonce was seen inside" 0 "$found"
	assert_json .receipt.nonce "\"$nonce\""
}
t nonce_invisible test_nonce_invisible
