# shellcheck shell=bash
# sandbox-manager with the podman backend, against the real podman service the run started
# (lib_podman.sh): the agent in the sandbox image, reached over a unix socket in a bind-mounted
# private directory (never a container address); evidence from the runtime for the recorded Id.
# As root the manager runs the containers as nobody; as sbtest it uses the rootful service like a
# docker-group member would, and the containers run as sbtest. Never as uid 0.

# pod_mgr_start, pod_ids, pod_cleanup and pod_sandbox_id live in lib_podman.sh (manager_binary.sh uses them too).

# The same worktree path inside, the container as the sandbox's unprivileged uid, the limits and
# security options on the container, and the agent's nested namespaces with a fresh /proc.
test_podman_session() {
	need_podman
	mgr_repo && pod_mgr_start && mgr_session
	local want_uid id
	mgr_ids
	want_uid=$IDS_UID
	mgr exec --session "$SID" -- 'pwd -P; id -u; echo from-sandbox > note.txt; git status --short; ls /proc | grep -c "^[0-9]"'
	assert_eq "exit code (stderr: $(head -c 400 "$ERR"))" 0 "$RC"
	# pid 1 (the command's init), its shell and ls, and grep: nothing of the agent or the host
	assert_lines "$(cat "$OUT")" "$WT" "$want_uid" "\?\? note.txt" "[1-4]"
	assert_eq "the file is in the worktree on the host" from-sandbox "$(cat "$WT/note.txt" 2>/dev/null)"
	id=$(pod_sandbox_id)
	assert_match "recorded runtime id" '^[0-9a-f]{64}$' "$id"
	assert_eq "podman's container for the session" "$id" "$(pod_ids "$SID")"
	podman_cli inspect "$id" >"$TD/inspect.json"
	assert_json '.[0].State.Status' '"running"' "$TD/inspect.json"
	assert_json '.[0].Config.Labels["infra-sandbox.generation"]' '"1"' "$TD/inspect.json"
	assert_json '.[0].Config.User' "\"$IDS_UID:$IDS_GID\"" "$TD/inspect.json"
	assert_json '.[0].HostConfig.PortBindings // {} | length' 0 "$TD/inspect.json"
	assert_json '.[0].HostConfig.ReadonlyRootfs' true "$TD/inspect.json"
	assert_json '.[0].HostConfig.Memory' $((2048 * 1024 * 1024)) "$TD/inspect.json"
	assert_json '.[0].HostConfig.PidsLimit' 1024 "$TD/inspect.json"
	assert_json '.[0].HostConfig.NanoCpus' 2000000000 "$TD/inspect.json"
	assert_json '[.[0].HostConfig.CapAdd // [] | length, (.[0].EffectiveCaps // [] | length)]' '[0,0]' "$TD/inspect.json"
	assert_json '.[0].HostConfig.CapDrop | index("CAP_SETUID") != null' true "$TD/inspect.json"
	assert_json '.[0].HostConfig.SecurityOpt' "[\"no-new-privileges\",\"seccomp=$POD_REPO_ROOT/images/seccomp.json\"]" \
		"$TD/inspect.json"
	# the agent is the container's PID 1, running the image's binary (not the host's)
	assert_match "the container's init" '^/usr/local/bin/sandbox-agent serve ' \
		"$(tr '\0' ' ' <"/proc/$(jr '.[0].State.Pid' "$TD/inspect.json")/cmdline")"
	mgr exec --session "$SID" --json -- 'git add note.txt && git -c user.name=t -c user.email=t@e commit -qm note && git log --oneline | wc -l'
	assert_json .status '"exited"'
	assert_json .stdout '"2\n"'
	assert_json .receipt.verified true
	# kubectl (a Go program) runs under the image's seccomp profile and the agent's own filter
	mgr exec --session "$SID" -- 'kubectl version --client --short'
	assert_eq "kubectl in the sandbox: exit code (stderr: $(head -c 300 "$ERR"))" 0 "$RC"
	assert_match "kubectl in the sandbox" '^Client Version: v1\.' "$(cat "$OUT")"
	mgr records --session "$SID"
	assert_json "[.records[].sandbox] | unique" "[\"podman:$id\"]"
}
t podman_session test_podman_session

# A detached child of a command does not outlive its call, inside a container too.
test_podman_detached() {
	need_podman
	local m
	m=$(unique_marker)
	mgr_repo && pod_mgr_start && mgr_session
	mgr exec --session "$SID" -- "(setsid sleep 40.$m </dev/null >/dev/null 2>&1 &); nohup sleep 41.$m >/dev/null 2>&1 & disown; echo started"
	assert_eq "exit code (stderr: $(head -c 300 "$ERR"))" 0 "$RC"
	assert_eq "output" started "$(cat "$OUT")"
	no_process "sleep 4[01].$m"
	mgr session show --session "$SID"
	assert_json .sandbox.state '"running"'
}
t podman_detached test_podman_detached

# Cancel stops the container and answers only once podman says it exited (or it is deleted):
# right after the answer, podman has no running container for the session and nothing runs.
test_podman_cancel() {
	need_podman
	local m i id
	m=$(unique_marker)
	mgr_repo && pod_mgr_start && mgr_session
	mgr_bg_exec c "sleep 30.$m"
	for i in $(seq 1 100); do pgrep -f "^sleep 30.$m" >/dev/null && break; sleep 0.1; done
	id=$(pod_sandbox_id)
	mgr cancel --session "$SID"
	assert_eq "cancel exit code (stderr: $(cat "$ERR"))" 0 "$RC"
	assert_json .state '"cancelled"'
	assert_eq "podman's running containers of the session" "" "$(podman_cli ps -q --filter "label=infra-sandbox.session=$SID")"
	case $(podman_cli inspect -f '{{.State.Status}}' "$id" 2>&1) in
	exited | *"no such"*) ;;
	*) bad "container $id is not exited nor deleted: $(podman_cli inspect -f '{{.State.Status}}' "$id" 2>&1)" ;;
	esac
	no_process "sleep 30.$m"
	mgr records --session "$SID"
	assert_json '[.records[].state]' '["cancelled"]'
	mgr session show --session "$SID"
	assert_json '[.state, .sandbox]' '["active",null]'
	wait_bg_execs_allow_fail
	mgr exec --session "$SID" -- 'echo again'
	assert_eq "the next call: exit code" 0 "$RC"
	assert_eq "the next call: output" again "$(cat "$OUT")"
}
t podman_cancel test_podman_cancel

# A container killed from outside during a call: the call is uncertain (never rerun), and the
# session comes back with a new container, a new generation and the same workspace.
test_podman_killed_outside() {
	need_podman
	local m i id
	m=$(unique_marker)
	mgr_repo && pod_mgr_start && mgr_session
	mgr exec --session "$SID" -- 'echo kept > kept.txt'
	id=$(pod_sandbox_id)
	mgr_bg_exec k "echo ran >> runs.txt; sleep 30.$m"
	for i in $(seq 1 100); do pgrep -f "^sleep 30.$m" >/dev/null && break; sleep 0.1; done
	podman_cli kill "$id" >/dev/null || bad "podman kill $id failed"
	wait_bg_execs_allow_fail
	assert_match "the call's answer" "uncertain" "$(cat "$TD/bg-k.out")"
	no_process "sleep 30.$m"
	mgr records --session "$SID"
	assert_json '[.records[].state]' '["uncertain","exited"]' # newest first
	mgr exec --session "$SID" -- 'cat kept.txt runs.txt; pwd -P'
	assert_eq "after the kill: exit code (stderr: $(head -c 300 "$ERR"))" 0 "$RC"
	assert_lines "$(cat "$OUT")" kept ran "$WT"
	mgr session show --session "$SID"
	assert_json .generation 2
	assert_ne "a new container" "podman:$id" "$(jr .sandbox.runtime_id)"
	case $(podman_cli inspect -f '{{.State.Status}}' "$id" 2>&1) in
	exited | *"no such"*) ;;
	*) bad "the killed container $id is neither exited nor deleted" ;;
	esac
}
t podman_killed_outside test_podman_killed_outside

# A runtime that accepts the kill and does not kill (a proxy in front of podman that answers 204 and
# forwards nothing): no evidence within the bound, so the call is uncertain, not cancelled, and the
# session's workspace stays reserved, which session show says, until the container is removed and a
# manager restart proves it gone.
test_podman_no_evidence() {
	need_podman
	local m i id
	m=$(unique_marker)
	POD_SOCK=$TD/proxy.sock
	python3 "$POD_REPO_ROOT/tests/podman/kill_swallow.py" "$POD_SOCK" "$PODMAN_SOCK" "$TD/swallow" \
		>"$TD/proxy.log" 2>&1 &
	PROXY_PID=$!
	for i in $(seq 1 50); do [ -S "$POD_SOCK" ] && break; sleep 0.1; done
	mgr_repo && pod_mgr_start && mgr_session
	mgr_bg_exec n "sleep 60.$m"
	for i in $(seq 1 100); do pgrep -f "^sleep 60.$m" >/dev/null && break; sleep 0.1; done
	id=$(pod_sandbox_id)
	touch "$TD/swallow"
	MGR_TIMEOUT=90 mgr cancel --session "$SID"
	assert_eq "cancel exit code" 125 "$RC"
	assert_match "cancel says" "uncertain.*not proven.*reserved" "$(cat "$ERR")"
	mgr records --session "$SID"
	assert_json '[.records[].state]' '["uncertain"]'
	assert_match "the record's reason" "^cancelled by request; and the sandbox's end is not proven: container [0-9a-f]{12} is still running" \
		"$(jr '.records[0].reason')"
	mgr session show --session "$SID"
	assert_json .state '"reserved"'
	assert_json .sandbox.state '"unproven"'
	assert_match "session show says why" "container [0-9a-f]{12} is still running after 10000 ms: not proven gone" \
		"$(jr .sandbox.evidence)"
	mgr exec --session "$SID" -- true
	assert_eq "a reserved session refuses calls" 125 "$RC"
	assert_eq "the container really still runs" running "$(podman_cli inspect -f '{{.State.Status}}' "$id" 2>&1)"
	wait_bg_execs_allow_fail
	# The operator's way out: remove the container, restart the manager. The restart proves the
	# end (a 404 for the recorded Id) and gives the session its workspace back.
	podman_cli rm -f "$id" >/dev/null
	rm -f "$TD/swallow"
	kill -TERM "$MGR_PID"
	wait "$MGR_PID" 2>/dev/null
	pod_mgr_start
	mgr session show --session "$SID"
	assert_json '[.state, .sandbox]' '["active",null]'
	mgr exec --session "$SID" -- 'echo released'
	assert_eq "after the release: exit code (stderr: $(head -c 300 "$ERR"))" 0 "$RC"
	assert_eq "after the release: output" released "$(cat "$OUT")"
}
t podman_no_evidence test_podman_no_evidence

# A manager killed with its sandbox running: the restart stops that container with evidence from
# podman before serving, and the session goes on in a new one.
test_podman_restart() {
	need_podman
	local id
	mgr_repo && pod_mgr_start && mgr_session
	mgr exec --session "$SID" -- true
	id=$(pod_sandbox_id)
	kill -KILL "$MGR_PID"
	wait "$MGR_PID" 2>/dev/null
	assert_eq "the container outlives the manager" running "$(podman_cli inspect -f '{{.State.Status}}' "$id" 2>&1)"
	pod_mgr_start
	case $(podman_cli inspect -f '{{.State.Status}}' "$id" 2>&1) in
	exited | *"no such"*) ;;
	*) bad "after the restart, container $id is still $(podman_cli inspect -f '{{.State.Status}}' "$id" 2>&1)" ;;
	esac
	mgr exec --session "$SID" -- 'pwd -P'
	assert_eq "exit code after the restart" 0 "$RC"
	assert_eq "same worktree" "$WT" "$(cat "$OUT")"
}
t podman_restart test_podman_restart

# A retired container is recorded gone with podman's word for the recorded Id (backend.h evidence()):
# its inspect state, not a fixed text; and the manager's log says the same.
test_podman_evidence() {
	need_podman
	local id i row=
	mgr_repo && pod_mgr_start --idle-seconds 1 && mgr_session
	mgr exec --session "$SID" -- true
	assert_eq "call: exit code (stderr: $(head -c 300 "$ERR"))" 0 "$RC"
	id=$(pod_sandbox_id)
	assert_match "recorded runtime id" '^[0-9a-f]{64}$' "$id"
	# idle: the evictor retires it
	for i in $(seq 1 200); do
		row=$(as_user sqlite3 -readonly "$MSTATE/records.db" \
			"SELECT state || '|' || coalesce(evidence, '') FROM sandboxes WHERE session = '$SID'")
		case $row in gone\|*) break ;; esac
		sleep 0.1
	done
	assert_match "the record of the retired container" \
		"^gone\\|container exited for Id $id \\(podman inspect: State.Status exited, ExitCode [0-9]+, FinishedAt [^)]+\\)$" "$row"
	grep -qF "sandbox podman:$id is gone: container exited for Id $id (podman inspect: State.Status exited" \
		"$TD/manager.log" || bad "the log does not say podman's evidence: $(grep -F "$id" "$TD/manager.log" | tail -n 3)"
	assert_eq "the container is deleted after the evidence" "" "$(pod_ids "$SID")"
}
t podman_evidence test_podman_evidence

# Wrong settings are said at start, clearly, and nothing is served.
test_podman_config_errors() {
	need_podman
	mgr_repo
	MSTATE=$(mktemp -d /tmp/sbm.XXXXXX) && chown "$RUN_USER:" "$MSTATE"
	trap pod_cleanup EXIT
	timeout 30 "${AS[@]}" "$MANAGER" serve --state-dir "$MSTATE" --backend podman --podman-socket "$PODMAN_SOCK" \
		--image infra-sandbox-agent:missing >"$OUT" 2>"$ERR"
	assert_ne "a missing image: exit code" 0 "$?"
	assert_match "a missing image: message" "no image 'infra-sandbox-agent:missing'.*make image" "$(cat "$ERR")"
	timeout 30 "${AS[@]}" "$MANAGER" serve --state-dir "$MSTATE" --backend podman --podman-socket "$TD/nothing.sock" \
		--image "$PODMAN_IMAGE" >"$OUT" 2>"$ERR"
	assert_ne "no service: exit code" 0 "$?"
	assert_match "no service: message" "podman service.*podman system service" "$(cat "$ERR")"
	timeout 30 "${AS[@]}" "$MANAGER" serve --state-dir "$MSTATE" --backend podman --image "$PODMAN_IMAGE" >"$OUT" 2>"$ERR"
	assert_match "no socket: message" "needs podman-socket" "$(cat "$ERR")"
	[ -S "$MSTATE/manager.sock" ] && bad "a manager with a wrong podman setting left a socket"
}
t podman_config_errors test_podman_config_errors

# The MCP tool's kept output in a container (manager_mcp.sh): the worktree is at the same path inside,
# so the file the marker names is read there by the next call.
test_manager_mcp_output_podman() {
	need_podman
	mgr_repo && pod_mgr_start && mgr_session && mcp_output_checks
}
t manager_mcp_output_podman test_manager_mcp_output_podman

# The run's last cleanup (lib_podman.sh podman_cleanup) removes the containers this run made and no
# other run's: it removed every manager session's container, those of runs going on at the same time
# on the same storage included. Two containers as a manager labels them (created, never started): one
# below a state dir this test noted (mstate.path), one below another run's.
test_podman_cleanup_scope() {
	need_podman
	local m mine other ids
	m=$(unique_marker)
	echo "/tmp/sbm.scope$m" >"$TD/mstate.path"
	mine=$(podman_cli create --label "infra-sandbox.session=scope-$m" \
		--label "infra-sandbox.private-dir=/tmp/sbm.scope$m/sandboxes/s1" "$PODMAN_IMAGE" 2>>"$ERR")
	other=$(podman_cli create --label "infra-sandbox.session=scope-$m" \
		--label "infra-sandbox.private-dir=/tmp/sbm.other$m/sandboxes/s1" "$PODMAN_IMAGE" 2>>"$ERR")
	if [ -z "$mine" ] || [ -z "$other" ]; then
		bad "podman create failed: $(head -c 300 "$ERR")"
		return
	fi
	ids=$(podman_run_ids)
	grep -qxF -- "$mine" <<<"$ids" || bad "this run's container $mine is not among the run's: $ids"
	grep -qxF -- "$other" <<<"$ids" && bad "another run's container $other is among this run's"
	podman_cli rm -f -t 0 "$mine" "$other" >/dev/null 2>&1
	rm -f "$TD/mstate.path"
}
t podman_cleanup_scope test_podman_cleanup_scope
