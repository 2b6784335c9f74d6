# shellcheck shell=bash
# shellcheck disable=SC2016,SC2034 # commands are text for the inner bash; variables are read by lib.sh
# sandbox-agent exec: the result contract (status, exit code, signal, streams), the environment and working
# directory a command gets, its PID namespace, `check`, and the refusal of bad command lines.

# Static, and against musl (issue 32): a glibc program's start pays dozens of `cpuid`s, each an exit
# to the hypervisor in a VM, and `sandbox-agent exec` is one process per command.
test_static_binary() {
	[ "${SANITIZE:-0}" = 1 ] && skip "the sanitizer build is dynamic"
	local out notes
	out=$(as_user ldd "$AGENT" 2>&1)
	assert_match "ldd $AGENT" "not a dynamic executable" "$out"
	notes=$(LC_ALL=C readelf -nW "$AGENT" 2>&1)
	case $notes in
	*NT_GNU_ABI_TAG*) bad "the static agent is glibc's (an ABI tag note): build it with AGENT_LIBC=musl" ;;
	esac
	# musl gives a thread 128 KiB unless the program asks (-z stack-size); glibc gave 8 MiB.
	assert_match "the agent's thread stack size" 'stack size: 0x800000' "$notes"
	# Its own objects copy small blocks inline (scripts/musl-libs.sh --cflags): GCC records each
	# object's options in its debug information.
	local units slow
	units=$(LC_ALL=C readelf --debug-dump=info "$AGENT" 2>/dev/null | grep 'DW_AT_producer.*GNU C11' || true)
	slow=$(grep -vc -- '-mmemcpy-strategy=unrolled_loop' <<<"$units" || true)
	assert_match "the agent's C objects in its debug information" '.' "$units"
	assert_eq "the agent's objects built without the inline copies" 0 "$slow"
}
t static_binary test_static_binary

test_exit_codes() {
	ax_ok -- 'exit 0'
	assert_result exited 0 null
	assert_json '.stdout_bytes' 0
	assert_json '.stdout_truncated' false
	assert_json '.duration_ms | type' '"number"'
	assert_match "exec_id" '^.+$' "$(jr .exec_id)"

	ax_ok -- 'exit 3'
	assert_result exited 3 null

	ax_ok -- 'exit 255'
	assert_result exited 255 null

	ax_ok -- 'kill -9 $$'
	assert_result signaled null 9

	ax_ok -- 'kill -TERM $$'
	assert_result signaled null 15
}
t exit_codes test_exit_codes

test_streams_separate() {
	ax_ok -- 'echo out; echo err >&2'
	assert_result exited 0 null
	assert_json .stdout '"out\n"'
	assert_json .stderr '"err\n"'
	assert_json '[.stdout_bytes, .stderr_bytes]' '[4,4]'
	assert_json '[.stdout_escaped, .stderr_escaped, .stdout_truncated, .stderr_truncated]' \
		'[false,false,false,false]'
}
t streams_separate test_streams_separate

# 400 kB to stderr before anything to stdout: a reader that drains one stream first deadlocks.
test_streams_concurrent() {
	local want_out want_err
	want_out=$(yes out | head -n 100000 | sha256sum | cut -d' ' -f1)
	want_err=$(yes err | head -n 100000 | sha256sum | cut -d' ' -f1)
	ax_ok --timeout-seconds 20 --output-limit 1000000 -- 'yes err | head -n 100000 >&2; yes out | head -n 100000'
	assert_result exited 0 null
	assert_json '[.stdout_bytes, .stderr_bytes]' '[400000,400000]'
	assert_eq "stdout sha256" "$want_out" "$(jq -j .stdout "$OUT" | sha256sum | cut -d' ' -f1)"
	assert_eq "stderr sha256" "$want_err" "$(jq -j .stderr "$OUT" | sha256sum | cut -d' ' -f1)"
}
t streams_concurrent test_streams_concurrent

test_stdin_is_dev_null() {
	ax_ok -- 'cat; echo "stdin=$(readlink /proc/self/fd/0)"' <<<"STDIN-LEAK"
	assert_result exited 0 null
	assert_json .stdout '"stdin=/dev/null\n"'
}
t stdin_is_dev_null test_stdin_is_dev_null

# Only PATH, HOME, LANG, TMPDIR, TMP, TEMP, PWD and --env reach the command (bash adds SHLVL and _; the
# agent also sets SHELL=/bin/bash). The caller's own values never show through.
test_environment_explicit() {
	export SB_IT_MARKER=leak-$RANDOM SHELL=/bin/caller-shell LANG=caller-lang TMPDIR=/caller-tmp
	ax_ok --env FOO=bar --env 'SPACED=a b=c' -- \
		'env | cut -d= -f1 | sort | tr "\n" " "; echo; printf "%s|%s|%s\n" "$FOO" "$SPACED" "$SHELL";
		 [ "$TMP" = "$TMPDIR" ] && [ "$TEMP" = "$TMPDIR" ] && [ -d "$TMPDIR" ] && [ -w "$TMPDIR" ] && echo tmp=ok;
		 env | grep -c -e ^SB_IT_MARKER= -e =/bin/caller-shell -e =caller-lang -e =/caller-tmp'
	unset SB_IT_MARKER
	assert_result exited 1 null # grep -c found nothing
	assert_lines "$(jr .stdout)" 'FOO HOME LANG PATH PWD SHELL SHLVL SPACED TEMP TMP TMPDIR _ ' 'bar\|a b=c\|/bin/bash' \
		'tmp=ok' '0'
	assert_json .stderr '""'
}
t environment_explicit test_environment_explicit

# The agent's own entries share one buffer, one after the other (cli_exec.c env_put). Each has its
# own room: a TMPDIR longer than that room is cut in HOME, TMP and TEMP, each in its room, and the
# entries written after them (PWD, SHELL) are whole. The --env entry itself is passed whole, last.
test_environment_long_values() {
	local long
	long=/t$(head -c 4200 /dev/zero | tr '\0' x)
	ax_ok --env "TMPDIR=$long" -- \
		'printf "%s %s %s %s %s|%s|%s|%s|%s\n" ${#HOME} ${#TMP} ${#TEMP} ${#TMPDIR} ${#LANG} "$PWD" "$SHELL" "$PATH" \
		 "$([ "${HOME}" = "${TMPDIR:0:${#HOME}}" ] && echo prefix=ok)"'
	assert_result exited 0 null
	# An entry's room is PATH_MAX + 16 bytes with its NUL: 4111 of text, the name and '=' included.
	assert_json .stdout "\"4106 4107 4106 4202 7|$WD|/bin/bash|/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin|prefix=ok\\n\""
}
t environment_long_values test_environment_long_values

test_cwd() {
	mkdir_user "$WD/sub dir"
	ax_ok --cwd "$WD/sub dir" -- 'pwd -P; echo "$PWD"'
	assert_result exited 0 null
	local real
	real=$(realpath "$WD/sub dir")
	assert_json .stdout "$(json_str "$real"$'\n'"$real"$'\n')"
}
t cwd test_cwd

# Every signal reaches the command with its default disposition and unblocked, even one the agent's
# own parent ignored (SIG_IGN survives execve). 34 (RTMIN to glibc) is musl's own, which its
# sigaction refuses, so init resets each one with the kernel's rt_sigaction (common/nsspawn.c
# spawn_signals_default).
test_signals_default() {
	AGENT_WRAP=(perl -e '$SIG{$_} = "IGNORE" for qw(PIPE TERM HUP USR1 RTMIN NUM40 RTMAX); exec @ARGV or die')
	ax_ok -- 'grep -E "^Sig(Ign|Blk):" /proc/self/status; grep -E "^Sig(Ign|Blk):" /proc/1/status'
	AGENT_WRAP=()
	assert_result exited 0 null
	assert_json .stdout "$(json_str $'SigBlk:\t0000000000000000\nSigIgn:\t0000000000000000\nSigBlk:\t0000000000000000\nSigIgn:\t0000000000000000\n')"
}
t signals_default test_signals_default

# A log line is one write, its newline included (common/log.c): musl writes "%s\n" as two, and a line
# written in two can be cut by another process's write to the same O_APPEND log (the process
# backend's agent.log) or pipe. stderr is a SOCK_SEQPACKET socket here: one packet per write.
test_log_line_one_write() {
	local line
	line=$(as_user /usr/bin/python3 - "$AGENT" "$WD" <<'PY'
import json, socket, subprocess, sys
agent, wd = sys.argv[1], sys.argv[2]
mine, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
pem = wd + "/absent.pem"
# serve refuses a state directory that is not there, with one log line
subprocess.run([agent, "serve", "--listen", "unix:" + wd + "/absent/agent.sock", "--state-dir", wd + "/absent",
                "--tls-cert", pem, "--tls-key", pem, "--tls-ca", pem, "--manager-name", "m"],
               stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=theirs, timeout=20)
theirs.close()
first = mine.recv(1 << 16).decode()
try:
    whole = first.endswith("\n") and first.count("\n") == 1 and json.loads(first)["level"] == "error"
except ValueError:
    whole = False
print("one whole line" if whole else "not one whole line: " + repr(first))
PY
	)
	assert_eq "the log's first write" "one whole line" "$line"
}
t log_line_one_write test_log_line_one_write

# The command is PID 2 of a fresh PID namespace whose PID 1 is the agent's init; only they exist.
test_pid_namespace() {
	ax_ok -- 'echo $$; cd /proc && for d in [0-9]*; do printf "%s " "$d"; done; echo;
		stat -L -c %i /proc/self/ns/pid /proc/self/ns/user; cat /proc/1/comm; cat /proc/1/status | grep -E "^(PPid|State):"'
	assert_result exited 0 null
	local o
	o=$(jr .stdout)
	assert_eq "the command's pid" 2 "$(sed -n 1p <<<"$o")"
	assert_eq "pids in /proc (from bash itself)" "1 2 " "$(sed -n 2p <<<"$o")"
	assert_ne "pid namespace" "$HOST_PIDNS" "$(sed -n 3p <<<"$o")"
	assert_ne "user namespace" "$HOST_USERNS" "$(sed -n 4p <<<"$o")"
	assert_match "/proc/1/comm" '^[a-z-]+$' "$(sed -n 5p <<<"$o")"
	assert_ne "/proc/1/comm" bash "$(sed -n 5p <<<"$o")"
	assert_eq "init's PPid" "PPid:	0" "$(sed -n 7p <<<"$o")"
	assert_match "init's state" '^State:	S ' "$(sed -n 6p <<<"$o")"
}
t pid_namespace test_pid_namespace

test_check() {
	agent check
	assert_eq "check exit code" 0 "$RC"
	assert_json .ok true
	assert_json .problems '[]'
	assert_json '.features | type' '"object"'
	assert_json '.features.landlock.abi | type' '"number"'
	# what bounds every command by default; a command then measures the same
	assert_json '[.limits.rlimit_nproc, .limits.tmp_bytes, .limits.shm_bytes]' '[1024,268435456,67108864]'
	assert_json .limits.pid_max_per_namespace "$(jv .features.pid_max_per_namespace.ok)"
	if printf '%s\n' 6.14 "$(uname -r | cut -d- -f1)" | sort -V -C; then
		assert_json .limits.pid_max_per_namespace true # Linux >= 6.14 keeps pid_max per PID namespace
	fi
	ax_ok -- 'ulimit -u; for d in /tmp /dev/shm; do echo $(( $(stat -f -c "%b * %S" "$d") )); done'
	assert_result exited 0 null
	assert_lines "$(jr .stdout)" 1024 268435456 67108864
}
t check test_check

# Usage errors: exit 2, a message on stderr, nothing on stdout, nothing run.
test_bad_input() {
	local case
	local -a cases=(
		"--bogus -- true"
		"--cwd /nonexistent/sandbox-it -- true"
		"--nonce abc -- true"
		"--nonce $(printf 'a%.0s' {1..63}) -- true"
		"--nonce $(printf 'a%.0s' {1..65}) -- true"
		"--nonce $(printf 'g%.0s' {1..64}) -- true"
		"--timeout-seconds abc -- true"
		"--timeout 5 -- true"
		"--timeout-seconds -1 -- true"
		"--timeout-seconds 5x -- true"
		"--output-limit lots -- true"
		"--max-processes x -- true"
		"--block-port 70000 -- true"
		"--env NOEQUALS -- true"
		"touch $WD/ran-without-dashdash"
		"--"
	)
	for case in "${cases[@]}"; do
		# shellcheck disable=SC2086 # each case is a list of words
		agent exec --receipt-dir "$RD" $case
		assert_eq "exit code of 'exec $case'" 2 "$RC"
		assert_eq "stdout of 'exec $case'" "" "$(cat "$OUT")"
		[ -s "$ERR" ] || bad "no message on stderr for 'exec $case'"
	done
	[ -e "$WD/ran-without-dashdash" ] && bad "a command ran without --"
	agent no-such-subcommand
	assert_eq "exit code of an unknown subcommand" 2 "$RC"
	return 0
}
t bad_input test_bad_input
