# shellcheck shell=bash
# The agent's own death, and Landlock's abstract-socket scope: properties that no other file covers.

# SIGKILL the agent mid-command: init's parent-death signal takes the namespace down with it.
test_agent_killed() {
	local m pid i agent
	m=$(unique_marker)
	# shellcheck disable=SC2016 # the command is for the sandbox's bash
	timeout -k 3 30 "${AS[@]}" env -u XDG_RUNTIME_DIR "$AGENT" exec --receipt-dir "$RD" --cwd "$WD" \
		--timeout-seconds 60 -- "sleep 300.$m & setsid sleep 301.$m & wait" >"$OUT" 2>"$ERR" &
	pid=$!
	for i in $(seq 1 50); do
		pgrep -f -- "sleep 301.$m" >/dev/null && break
		sleep 0.1
	done
	pgrep -f -- "sleep 301.$m" >/dev/null || bad "the command never started"
	# Kill exactly the agent: timeout's only child (setpriv and env exec into it). Init is a clone
	# with the same command line, so a pattern would kill init directly and hide a missing
	# parent-death signal (as it once did, for a root agent only).
	agent=$(pgrep -P "$pid")
	[ -n "$agent" ] && [ "$(wc -w <<<"$agent")" -eq 1 ] || bad "timeout has no single child: [$agent]"
	kill -KILL "$agent" || bad "could not kill the agent $agent"
	wait "$pid" 2>/dev/null
	for i in $(seq 1 20); do
		pgrep -f -- "$m" >/dev/null || break
		sleep 0.1
	done
	no_process "sleep 30[01].$m"
}
t agent_killed_midcommand test_agent_killed

# Host uid 0 needs no capability to write /proc/sys or read root-only files: a host-root agent's
# commands must not be host uid 0. Writing back the value just read is harmless if this ever breaks.
test_never_host_root() {
	ax_ok -- 'v=$(cat /proc/sys/kernel/printk_ratelimit); { echo "$v" > /proc/sys/kernel/printk_ratelimit; } 2>/dev/null && echo sysctl-written || echo sysctl-refused; cat /etc/shadow >/dev/null 2>&1 && echo shadow-read || echo shadow-refused'
	assert_result exited 0 null
	assert_lines "$(jr .stdout)" sysctl-refused shadow-refused
	# A root agent started with root's supplementary groups hands none of them to its commands
	# (setgroups is denied in their namespace: they could never drop one themselves).
	[ "$RUN_UID" -eq 0 ] || return 0
	local f=$TD/group-root-only
	echo secret >"$f" && chown 0:0 "$f" && chmod 0640 "$f" && chmod 0755 "$TD"
	AGENT_WRAP=(setpriv --groups=0,4)
	ax_ok -- "grep -c '^Groups:[[:space:]]*\$' /proc/self/status; cat $f 2>/dev/null || echo group-refused"
	AGENT_WRAP=()
	assert_result exited 0 null
	assert_lines "$(jr .stdout)" 1 group-refused
}
t never_host_root test_never_host_root
