# shellcheck shell=bash
# shellcheck disable=SC2016,SC2034 # commands are text for the inner bash; variables are read by lib.sh
# sandbox-agent exec: the read-only world (rule R2 of docs/isolation.md) and the private paths held by
# descriptor (R1). The host view is read-only but for the working directory and --writable roots; /dev is
# fresh and minimal (no terminal); /tmp and /dev/shm are private and bounded; a receipt directory, a hidden
# directory or the agent binary inside a writable root is refused; every ancestor of the receipt directory
# stays where it is; the receipt's claims are measured after the command (R5).

test_readonly_world() {
	local m extra
	m=$(unique_marker)
	extra=$TD/extra
	mkdir_user "$extra"
	[ "$RUN_UID" -eq 0 ] && chown 65534:65534 "$extra"
	ax_ok --writable "$extra" -- "
		touch $TD/outside-$m 2>&1 | grep -c 'Read-only file system'
		touch $WD/inside-$m && echo inside=ok
		touch $extra/extra-$m && echo extra=ok
		echo x > /tmp/private-$m && echo tmp=ok
		touch /etc/sb-$m 2>&1 | grep -c 'Read-only file system'
		ls /dev | tr '\n' ' '; echo
		ls /tmp | tr '\n' ' '; echo"
	assert_result exited 0 null
	assert_lines "$(jr .stdout)" '1' 'inside=ok' 'extra=ok' 'tmp=ok' '1' \
		'fd full null random shm stderr stdin stdout urandom zero ' "private-$m "
	[ -e "$TD/outside-$m" ] && bad "the command wrote outside its writable roots"
	[ -e "$WD/inside-$m" ] || bad "the command could not write its working directory"
	[ -e "$extra/extra-$m" ] || bad "the command could not write its --writable root"
	[ -e "/tmp/private-$m" ] && bad "the command's /tmp is the host's"
	return 0
}
t readonly_world test_readonly_world

# /tmp and /dev/shm are bounded (256 MiB and 64 MiB by default, --tmp-size for /tmp), and their memory
# goes with the command's namespace.
test_tmp_bounded() {
	ax_ok --tmp-size 8388608 -- '
		stat -f -c "tmp_blocks=%b bsize=%S" /tmp; stat -f -c "shm_blocks=%b bsize=%S" /dev/shm
		{ head -c 9437184 /dev/zero > /tmp/big; } 2>&1 | grep -c "No space left"
		{ head -c 70000000 /dev/zero > /dev/shm/big; } 2>&1 | grep -c "No space left"'
	assert_result exited 0 null
	assert_lines "$(jr .stdout)" 'tmp_blocks=2048 bsize=4096' 'shm_blocks=16384 bsize=4096' '1' '1'
	ax_ok -- 'stat -f -c "tmp_blocks=%b" /tmp'
	assert_lines "$(jr .stdout)" 'tmp_blocks=65536'
}
t tmp_bounded test_tmp_bounded

# The command never reaches a terminal: not the operator's (the agent runs on one here, made by script(1)
# as the test's user), not any other: /dev has no pts and no ptmx, and the command has no controlling tty.
test_no_terminal() {
	local m host_pts
	m=$(unique_marker)
	host_pts=$(find /dev/pts -maxdepth 1 -name '[0-9]*' 2>/dev/null | head -n 64 | tr '\n' ' ')
	# tty.sh runs on the pty: it hands the command the pty's own name, then becomes the agent.
	cat >"$TD/tty.sh" <<EOF
p=\$(tty)
exec "\$@" "for t in /dev/tty /dev/console /dev/ptmx /dev/pts/ptmx \$p $host_pts; do
	(echo pwned-$m > \\\$t) 2>/dev/null && echo wrote=\\\$t; done
	ls /dev/pts 2>&1 | grep -c 'No such file'; echo done"
EOF
	chmod 0644 "$TD/tty.sh"
	timeout -k 3 "$AGENT_TIMEOUT" "${AS[@]}" script -qec "bash $TD/tty.sh env -u XDG_RUNTIME_DIR $AGENT exec \
		--receipt-dir $RD --cwd $WD --" /dev/null >"$OUT.tty" 2>"$ERR" </dev/null
	tr -d '\r' <"$OUT.tty" | grep -a '^{' | tail -n 1 >"$OUT"
	assert_json .status '"exited"'
	assert_lines "$(jr .stdout)" '1' 'done'
	grep -aq "pwned-$m" "$OUT.tty" && bad "the command wrote into the agent's terminal"
	return 0
}
t no_terminal test_no_terminal

# The class of the forged receipt: every ancestor of the receipt directory (and of a hidden one) is out of
# the command's reach, so it can neither move the agent's directory away nor put its own in place.
test_receipt_ancestors_fixed() {
	local m hid
	m=$(unique_marker)
	hid=$TD/hidden
	mkdir_user "$hid"
	ax_ok --exec-id "anc-$m" --hide "$hid" -- "
		for d in $RD $hid; do
			while [ \"\$d\" != / ]; do
				if mv \"\$d\" \"\$d.moved-$m\" 2>/dev/null; then echo moved=\$d; mkdir \"\$d\"; fi
				d=\$(dirname \"\$d\")
			done
		done; echo done"
	assert_result exited 0 null
	assert_lines "$(jr .stdout)" 'done'
	[ -f "$RD/anc-$m.json" ] || bad "the receipt is not in the agent's own directory $RD"
	assert_json .receipt.verified true
	verify --receipt "$RD/anc-$m.json" --key "$RD/receipt.key" --exec-id "anc-$m"
	assert_eq "verify-receipt exit code" 0 "$RC"
	# The same with the receipt directory on a tmpfs (/dev/shm): the command's /dev/shm is its own.
	local shm
	shm=$(mktemp -d /dev/shm/sb-rd.XXXXXX) && chown "$RUN_USER:" "$shm" && chmod 0700 "$shm"
	agent exec --receipt-dir "$shm" --cwd "$WD" --exec-id "shm-$m" -- "
		ls -d $shm 2>&1 | grep -c 'No such file'
		d=$shm; while [ \"\$d\" != / ]; do
			if mv \"\$d\" \"\$d.moved-$m\" 2>/dev/null; then echo moved=\$d; mkdir \"\$d\"; fi
			d=\$(dirname \"\$d\")
		done; echo done"
	assert_result exited 0 null
	assert_lines "$(jr .stdout)" '1' 'done'
	[ -f "$shm/shm-$m.json" ] || bad "the receipt is not in $shm"
	verify --receipt "$shm/shm-$m.json" --key "$shm/receipt.key" --exec-id "shm-$m"
	assert_eq "verify-receipt exit code (tmpfs)" 0 "$RC"
	rm -rf "$shm"
}
t receipt_ancestors_fixed test_receipt_ancestors_fixed

# A private directory inside (or around) a writable root is refused before anything runs, naming it.
test_private_inside_writable() {
	local m
	m=$(unique_marker)
	agent exec --receipt-dir "$RD" --cwd "$TD" -- "touch $TD/ran-$m"
	assert_json .status '"refused"'
	assert_match "error" "private directory $RD lies inside the writable $TD" "$(jr .error)"
	agent exec --receipt-dir "$RD" --cwd "$WD" --writable "$TD" -- "touch $TD/ran-$m"
	assert_json .status '"refused"'
	agent exec --receipt-dir "$RD" --cwd "$WD" --hide "$WD" -- "touch $WD/ran-$m"
	assert_json .status '"refused"'
	assert_match "error" "lies (inside|around) the writable $WD" "$(jr .error)"
	# A writable root inside a private directory, refused up front and named (mutation M5b: without
	# writable_check's "around" branch init still fails, the private directory hidden from it, but
	# later and saying only that the root cannot be opened).
	mkdir_user "$RD/sub-$m" || bad "cannot create $RD/sub-$m"
	agent exec --receipt-dir "$RD" --cwd "$RD/sub-$m" -- "touch $RD/sub-$m/ran-$m"
	assert_json .status '"refused"'
	assert_match "error" "private directory $RD lies around the writable $RD/sub-$m" "$(jr .error)"
	[ -e "$RD/sub-$m/ran-$m" ] && bad "a refused exec ran its command inside the private directory"
	rmdir "$RD/sub-$m"
	# The kernel's trees: a writable copy of the host's /dev would bring its terminals back.
	agent exec --receipt-dir "$RD" --cwd "$WD" --writable /dev -- "touch $WD/ran-$m"
	assert_json .status '"refused"'
	assert_match "error" "/dev cannot be a writable root" "$(jr .error)"
	agent exec --receipt-dir "$RD" --cwd /proc -- "touch $WD/ran-$m"
	assert_json .status '"refused"'
	# The default receipt directory under /tmp with /tmp itself writable.
	agent exec --cwd /tmp -- "touch /tmp/ran-$m"
	assert_json .status '"refused"'
	assert_match "error" "private directory /tmp/sandbox-agent-$RUN_UID/receipts lies inside the writable /tmp" \
		"$(jr .error)"
	[ -e "$TD/ran-$m" ] || [ -e "$WD/ran-$m" ] || [ -e "/tmp/ran-$m" ] && bad "a refused exec ran its command"
	return 0
}
t private_inside_writable test_private_inside_writable

# The agent binary cannot be replaced by a command: outside the writable roots it is read-only, and an agent
# whose binary lies inside one refuses to run.
test_agent_binary_protected() {
	local m copy before
	m=$(unique_marker)
	copy=$TD/bin/agent-copy
	mkdir_user "$TD/bin"
	cp "$AGENT" "$copy" && chown "$RUN_USER:" "$copy"
	before=$(sha256sum <"$copy")
	timeout -k 3 "$AGENT_TIMEOUT" "${AS[@]}" "$copy" exec --receipt-dir "$RD" --cwd "$WD" -- "
		cp /bin/true $TD/evil-$m 2>&1 | grep -c 'Read-only'; mv -f $TD/bin $WD/x 2>&1 | grep -c 'Read-only'
		echo evil > $copy 2>/dev/null || echo write=refused" >"$OUT" 2>"$ERR"
	RC=$?
	assert_result exited 0 null
	assert_lines "$(jr .stdout)" '1' '1' 'write=refused'
	assert_eq "agent binary unchanged" "$before" "$(sha256sum <"$copy")"
	timeout -k 3 "$AGENT_TIMEOUT" "${AS[@]}" "$copy" exec --receipt-dir "$RD" --cwd "$TD/bin" -- "touch $TD/ran-$m" \
		>"$OUT" 2>"$ERR"
	RC=$?
	assert_json .status '"refused"'
	assert_match "error" "agent binary $copy lies inside the writable $TD/bin" "$(jr .error)"
	[ -e "$TD/ran-$m" ] && bad "the refused exec ran its command"
	return 0
}
t agent_binary_protected test_agent_binary_protected

# R5: the command is never uid 0 of its user namespace, so it cannot raise its namespace's pid_max; and the
# receipt's pid_max_bounded is measured after the command: raised from outside (by the test, inside the
# command's namespaces only), it reads false.
test_pid_max_measured() {
	local m pid host_before
	m=$(unique_marker)
	ax_ok --exec-id "pm-$m" -- 'echo 100000 > /proc/sys/kernel/pid_max 2>/dev/null || echo refused; cat /proc/sys/kernel/pid_max; id -u'
	assert_result exited 0 null
	[ "$(jq -r .boundary.pid_max_bounded "$RD/pm-$m.json")" = true ] || skip "pid_max is not per PID namespace on this kernel"
	assert_eq "the command's pid_max write" refused "$(jr .stdout | head -n 1)"
	assert_eq "pid_max after the command's write" 1025 "$(jr .stdout | sed -n 2p)"
	assert_ne "the command's uid" 0 "$(jr .stdout | sed -n 3p)"

	host_before=$(cat /proc/sys/kernel/pid_max)
	ax --exec-id "pm2-$m" -- "sleep 4.$m" &
	local ax_pid=$! i
	for i in $(seq 1 60); do
		pid=$(pgrep -f -- "^sleep 4.$m\$" | head -n 1)
		[ -n "$pid" ] && break
		sleep 0.05
	done
	[ -n "$pid" ] || bad "the command did not start"
	# The writer joins the command's user (this user owns it; root may anyway), PID and mount namespaces
	# with setns and no exec (an exec would drop the capabilities the user namespace gave it), and
	# writes only from a child inside the command's PID namespace, checked against the host's.
	as_user python3 - "$pid" "$HOST_PIDNS" <<'PY' || bad "the test could not raise the namespace's pid_max"
import ctypes, os, sys
libc = ctypes.CDLL(None, use_errno=True)
pid, host_pidns = sys.argv[1], int(sys.argv[2])
fds = [os.open(f"/proc/{pid}/ns/{n}", os.O_RDONLY) for n in ("user", "pid", "mnt")]
if os.getuid() == 0:
    fds = fds[1:]  # root needs no user namespace of the command's
for fd in fds:
    if libc.setns(fd, 0) != 0:
        sys.exit(f"setns: {os.strerror(ctypes.get_errno())}")
child = os.fork()
if child == 0:
    if os.stat("/proc/self/ns/pid").st_ino == host_pidns:
        os._exit(3)
    with open("/proc/sys/kernel/pid_max", "w") as f:
        f.write("100000\n")
    os._exit(0)
sys.exit(os.waitpid(child, 0)[1] >> 8)
PY
	wait "$ax_pid"
	assert_result exited 0 null
	assert_eq "host pid_max untouched" "$host_before" "$(cat /proc/sys/kernel/pid_max)"
	assert_eq "receipt pid_max_bounded after a raise" false "$(jq -r .boundary.pid_max_bounded "$RD/pm2-$m.json")"
}
t pid_max_measured test_pid_max_measured

# Special files a read-only mount does not stop (the class of a review's escape): a same-uid service on a
# pathname or abstract unix socket outside, a FIFO outside the writable roots, a device node inside one.
# The command cannot create a unix socket (socketpair of a stream pair still works), cannot open a FIFO
# outside its roots for writing (Landlock), and device nodes in a writable root do not work (nodev).
test_special_files_shut() {
	local m sock fifo ready lp rp
	m=$(unique_marker)
	sock=$TD/svc.sock
	fifo=$TD/fifo
	ready=$TD/svc.ready
	# A listener on a pathname and an abstract socket, as the test's user (the agent's uid).
	as_user /usr/bin/python3 - "$sock" "$m" "$ready" <<'PY' &
import os, socket, sys
socks = []
for name in (sys.argv[1], "\0sb-it-" + sys.argv[2]):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.bind(name)
    s.listen(8)
    socks.append(s)
open(sys.argv[3], "w").close()
socks[0].settimeout(20)
try:
    socks[0].accept()
except OSError:
    pass
PY
	lp=$!
	as_user mkfifo "$fifo"
	(timeout 20 cat "$fifo" >"$TD/fifo.got" 2>/dev/null) &
	rp=$!
	local i
	for i in $(seq 1 50); do [ -e "$ready" ] && break; sleep 0.1; done
	[ -e "$ready" ] || bad "the unix listeners did not start"
	if [ "$RUN_UID" -eq 0 ]; then
		mknod "$WD/null-$m" c 1 3 && chmod 0666 "$WD/null-$m"
	fi
	ax_ok --timeout-seconds 20 -- "/usr/bin/python3 -c '
import errno, socket
def err(f):
    try:
        f()
        return \"ok\"
    except OSError as e:
        return errno.errorcode[e.errno]
def connect(name):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.connect(name)
print(\"pathname\", err(lambda: connect(\"$sock\")))
print(\"abstract\", err(lambda: connect(\"\\0sb-it-$m\")))
print(\"pair_stream\", err(lambda: socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)))
print(\"pair_dgram\", err(lambda: socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)))
print(\"pair_other\", \",\".join(err(lambda: socket.socketpair(socket.AF_UNIX, t)) for t in (0, 3, 4, 5, 6, 10, 15)))
print(\"fifo\", err(lambda: open(\"$fifo\", \"w\").write(\"injected-$m\")))
'
		if [ -e $WD/null-$m ]; then { echo x > $WD/null-$m; } 2>/dev/null && echo device ok || echo device refused
		else echo device refused; fi"
	kill "$lp" "$rp" 2>/dev/null
	wait "$lp" "$rp" 2>/dev/null
	assert_result exited 0 null
	assert_lines "$(jr .stdout)" 'pathname EPERM' 'abstract EPERM' 'pair_stream ok' 'pair_dgram EPERM' \
		'pair_other EPERM,EPERM,EPERM,EPERM,EPERM,EPERM,EPERM' 'fifo EACCES' \
		'device refused'
	grep -q "injected-$m" "$TD/fifo.got" 2>/dev/null && bad "the command wrote into a FIFO outside its roots"
	return 0
}
t special_files_shut test_special_files_shut
