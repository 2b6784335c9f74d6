# shellcheck shell=bash
# sandbox-manager end to end with the process backend: sessions, calls, exit codes, records, refusals.

test_manager_exec() {
	mgr_repo && mgr_start && mgr_session
	mgr exec --session "$SID" -- 'pwd -P; grep -c replicas payments/deployment.yaml; echo oops >&2; exit 3'
	assert_eq "exit code is the command's" 3 "$RC"
	assert_lines "$(cat "$OUT")" "$WT" "1"
	assert_eq "stderr" "oops" "$(cat "$ERR")"
	# SHELL is the shell that runs the command (the agent's, serve_conn.c request_from_exec): without it
	# bash looks the sandbox's uid up at each start and says /bin/sh
	mgr exec --session "$SID" --json -- 'echo "$TMPDIR"; touch "$TMPDIR/report.txt"; id -u; echo "$SHELL"'
	assert_eq "exit code" 0 "$RC"
	assert_json .status '"exited"'
	assert_json .receipt.verified true
	# never uid 0 of any namespace: the manager's uid (unprivileged) or the identity's own (root
	# manager, rule N2), 1:1
	local out
	out=$(jr .stdout)
	mgr_ids
	assert_lines "$out" "$WT/.sandbox-tmp" "$IDS_UID" /bin/bash
	[ -e "$WT/.sandbox-tmp/report.txt" ] || bad "the report written to TMPDIR is not in the worktree's scratch"
	# never host root: no /proc/sys writes, no root-only host files (the sandbox's /etc is made)
	mgr exec --session "$SID" -- 'v=$(cat /proc/sys/kernel/printk_ratelimit); { echo "$v" > /proc/sys/kernel/printk_ratelimit; } 2>/dev/null && echo sysctl-written || echo sysctl-refused; test -e /etc/shadow && echo shadow-present || echo shadow-absent'
	assert_lines "$(cat "$OUT")" sysctl-refused shadow-absent
	mgr records --session "$SID"
	assert_eq "records exit code" 0 "$RC"
	assert_json '[.records[].state]' '["exited","exited","exited"]'
	assert_json '[.records[] | .receipt.nonce == .nonce]' '[true,true,true]'
	assert_json '[.records[] | .result.exit_code]' '[0,0,3]' # newest first
	mgr session show --session "$SID"
	assert_json '.worktree' "$(json_str "$WT")"
	assert_json '.sandbox.state' '"running"'
	assert_json '.generation' 1
}
t manager_exec test_manager_exec

# limits_agree TMP SHM: `session show` says the live sandbox's /tmp and /dev/shm have these sizes, and a
# command in it measures the same; no cgroup is configured here, so no memory, pids or CPU limit holds.
limits_agree() {
	mgr exec --session "$SID" -- 'for d in /tmp /dev/shm; do echo $(( $(stat -f -c "%b * %S" "$d") )); done'
	assert_eq "exec exit code (stderr: $(head -c 300 "$ERR"))" 0 "$RC"
	assert_lines "$(cat "$OUT")" "$1" "$2"
	mgr session show --session "$SID"
	assert_eq "session show exit code" 0 "$RC"
	assert_json '[.limits.tmp_bytes, .limits.shm_bytes]' "[$1,$2]"
	assert_json '[.limits.memory_max, .limits.pids_max, .limits.cpu_max, .limits.cgroup]' '[null,null,null,null]'
}

test_manager_limits() {
	mgr_repo && mgr_start && mgr_session
	# no sandbox before the first call: no limits to say
	mgr session show --session "$SID"
	assert_json '[.sandbox, .limits]' '[null,null]'
	limits_agree 268435456 67108864
}
t manager_limits test_manager_limits

test_manager_limits_sized() {
	mgr_repo && mgr_start --tmp-size 16M --shm-size 8M && mgr_session
	limits_agree 16777216 8388608
}
t manager_limits_sized test_manager_limits_sized

test_manager_refusals() {
	mgr_repo && mgr_start --max-timeout-seconds 30 --default-timeout-seconds 10 && mgr_session
	mgr exec --session "$SID" --timeout-seconds 31 -- true
	assert_eq "over the cap: exit code" 125 "$RC"
	assert_match "over the cap: message" "over the configured maximum of 30 seconds" "$(cat "$ERR")"
	mgr exec --session 0123456789abcdef -- true
	assert_eq "unknown session" 125 "$RC"
	assert_match "unknown session: message" "no session" "$(cat "$ERR")"
	mgr session create --identity alice --repo "$TD/nope"
	assert_eq "missing repository" 125 "$RC"
	mgr session create --identity '../x' --repo "$REPO"
	assert_eq "bad identity" 125 "$RC"
	as_user git -C "$REPO" config include.path /etc/gitconfig
	mgr session create --identity alice --repo "$REPO"
	assert_eq "repository with an include" 125 "$RC"
	assert_match "include refused: message" "include.path" "$(cat "$ERR")"
	mgr exec --session "$SID"
	assert_eq "no command" 2 "$RC"
	# refused before it was bound to the session: nothing was recorded, nothing changed
	mgr records --session "$SID"
	assert_json '[.records[].state]' '[]'
	# a container limit on the process backend would do nothing: refused at start, by name
	timeout 30 "${AS[@]}" "$MANAGER" serve --state-dir "$TD/other-state" --sandbox-memory-mib 512 >/dev/null 2>"$ERR"
	assert_eq "a podman-only setting on the process backend: exit code" 125 "$?"
	assert_match "a podman-only setting: message" "sandbox-memory-mib applies to the podman backend only" "$(cat "$ERR")"
}
t manager_refusals test_manager_refusals

test_manager_timeout_and_leftovers() {
	local m t0
	m=$(unique_marker)
	mgr_repo && mgr_start && mgr_session
	t0=$(now_ms)
	mgr exec --session "$SID" --timeout-seconds 1 -- "setsid sleep 300.$m & sleep 30"
	assert_eq "timeout exit code" 124 "$RC"
	assert_lt "ms until the timeout returned" $(($(now_ms) - t0)) 4000
	no_process "sleep 300.$m"
	mgr exec --session "$SID" -- "setsid sleep 301.$m & echo detached"
	assert_eq "exit code" 0 "$RC"
	no_process "sleep 301.$m"
}
t manager_timeout_and_leftovers test_manager_timeout_and_leftovers

# Calls of one session never overlap and run in order of arrival; other sessions run meanwhile.
test_manager_serialization() {
	local i s2 t0 elapsed
	mgr_repo && mgr_start && mgr_session
	for i in 1 2 3 4 5; do
		mgr_bg_exec "$i" "echo start-$i >> \"\$TMPDIR/log\"; sleep 0.3; echo end-$i >> \"\$TMPDIR/log\""
		sleep 0.1
	done
	wait_bg_execs
	assert_lines "$(cat "$WT/.sandbox-tmp/log")" start-1 end-1 start-2 end-2 start-3 end-3 start-4 end-4 \
		start-5 end-5
	mgr session create --identity bob --repo "$REPO"
	s2=$(jr .session)
	t0=$(now_ms)
	mgr_bg_exec a "sleep 2" "$SID"
	mgr_bg_exec b "sleep 2" "$s2"
	wait_bg_execs
	elapsed=$(($(now_ms) - t0))
	assert_lt "two sessions' 2-second calls ran in parallel (ms)" "$elapsed" 3800
}
t manager_serialization test_manager_serialization


# Issue 26, N3: a closed volume. Another local user (sbtest beside a root manager, nobody beside sbtest's)
# can list neither identities/ nor an identity's workspaces/ or repositories/, nor read what a command
# wrote in its worktree; a command's new file is 0600 and its new directory 0700 (umask 077). A volume
# with a directory others can list refuses `serve`, naming the path and the fix.
test_manager_volume_closed() {
	local m vol other v
	m=$(unique_marker)
	vol=$TD/vol
	other=sbtest
	[ "$RUN_UID" -ne 0 ] && other=nobody
	local other_as=(setpriv "--reuid=$other" "--regid=$(id -g "$other")" --init-groups)
	# every other user may walk to the volume: its own modes must close it
	chmod 0711 "$TD" && chmod o+x "$(dirname "$TD")"
	mgr_repo && mgr_start --volume "$vol" && mgr_session
	mgr exec --session "$SID" -- "echo SECRET-$m > secret.txt && mkdir made.d && stat -c %a secret.txt made.d"
	assert_eq "exec (stderr: $(head -c 300 "$ERR"))" 0 "$RC"
	assert_lines "$(cat "$OUT")" 600 700
	assert_eq "volume, identities/, identity: search only" "711 711 711" \
		"$(stat -c %a "$vol" "$vol/identities" "$vol/identities/alice" | tr '\n' ' ' | sed 's/ $//')"
	assert_eq "repositories/, workspaces/: the identity's group, search only; the worktree its own" "710 710 700" \
		"$(stat -c %a "$vol/identities/alice/repositories" "$vol/identities/alice/workspaces" "$WT" | tr '\n' ' ' | sed 's/ $//')"
	"${other_as[@]}" stat "$vol/identities/alice" >/dev/null ||
		bad "$other cannot even reach the identity's directory: the check below would prove nothing"
	for v in "$vol" "$vol/identities" "$vol/identities/alice" "$vol/identities/alice/workspaces" \
		"$vol/identities/alice/repositories" "$WT"; do
		"${other_as[@]}" ls "$v" >/dev/null 2>&1 && bad "$other listed $v"
	done
	"${other_as[@]}" cat "$WT/secret.txt" >"$TD/other.out" 2>&1 &&
		bad "$other read the command's file"
	grep -q "SECRET-$m" "$TD/other.out" && bad "the secret reached $other"
	# Opened up: a root manager's serve refuses, naming the path and the fix; closed again, it serves.
	# (An unprivileged manager's sandboxes are itself: its volume is made closed, and not checked.)
	kill -KILL "$MGR_PID"
	wait "$MGR_PID" 2>/dev/null # its lock on the state directory goes with it
	if [ "$RUN_UID" -eq 0 ]; then
		chmod 0755 "$vol/identities/alice/workspaces"
		timeout 30 "${AS[@]}" "$MANAGER" serve --state-dir "$MSTATE" --volume "$vol" >/dev/null 2>"$ERR"
		assert_eq "serve on an open volume: exit code" 125 "$?"
		assert_match "the path and the fix" \
			"volume refused: $vol/identities/alice/workspaces has mode 0755.*fix: chmod 0710 $vol/identities/alice/workspaces" \
			"$(cat "$ERR")"
		chmod 0710 "$vol/identities/alice/workspaces"
	fi
	mgr_start --volume "$vol"
	mgr exec --session "$SID" -- "cat secret.txt"
	assert_eq "the session's own file, after the restart" "SECRET-$m" "$(cat "$OUT")"
}
t manager_volume_closed test_manager_volume_closed
