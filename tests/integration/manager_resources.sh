# shellcheck shell=bash
# Resources and load (issue 14, part 2): a full records volume, a full receipt directory, control
# clients that stall or never read, and many clients at once. Each test says what the user sees and
# checks in the records that no call was lost, recorded twice or run twice.

RES_HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)

# ---- a manager whose state directory, or its sandboxes/, is on a small tmpfs ----------------------
# The tmpfs lives in a private mount namespace held by a sleeping process (RES_HOLD), and the manager
# runs in it (RES_NS: the nsenter prefix). As root that is `unshare -m`. sbtest cannot mount on the
# host: `unshare -Urm` gives it a user and mount namespace where it may, and a second user namespace
# inside maps its own uid back, so the manager runs as sbtest, an unprivileged manager as in every
# other test (as uid 0 of a namespace it would be a root manager, whose sandbox uid is not mapped
# there). The control socket and the volume stay on the host's filesystem, so clients and the
# test's own checks need no namespace.

# res_ns_start STATE_SIZE SANDBOXES_SIZE: a tmpfs of STATE_SIZE on $MSTATE ("-": none) and one of
# SANDBOXES_SIZE on $MSTATE/sandboxes ("-": none).
res_ns_start() {
	local mounts="" i last
	MSTATE=$(mktemp -d /tmp/sbm.XXXXXX) && chown "$RUN_USER:" "$MSTATE" && chmod 0700 "$MSTATE"
	last=$MSTATE
	[ "$2" != - ] && last=$MSTATE/sandboxes
	[ "$1" != - ] && mounts="mount -t tmpfs -o size=$1,mode=0700 tmpfs $MSTATE && "
	[ "$2" != - ] && mounts+="mkdir -p $MSTATE/sandboxes && mount -t tmpfs -o size=$2,mode=0700 tmpfs $MSTATE/sandboxes && "
	if [ "$RUN_UID" -eq 0 ]; then
		unshare -m --propagation private bash -c "${mounts}exec sleep 600" &
	else
		"${AS[@]}" unshare -Urm --propagation private bash -c \
			"${mounts}exec unshare -U -m --map-user=$RUN_UID --map-group=$(id -g "$RUN_USER") sleep 600" &
	fi
	RES_HOLD=$!
	disown "$RES_HOLD" # killed at the end by PID; no job report
	trap res_cleanup EXIT
	RES_NS=(nsenter -t "$RES_HOLD" -m)
	[ "$RUN_UID" -eq 0 ] || RES_NS=(nsenter -t "$RES_HOLD" -U -m --preserve-credentials)
	for i in $(seq 1 50); do
		"${AS[@]}" "${RES_NS[@]}" findmnt -n "$last" >/dev/null 2>&1 && return 0
		sleep 0.1
	done
	bad "the namespace with the tmpfs did not come up"
	return 1
}

# res_mgr_start [SERVE ARGS...]: mgr_start's manager, inside the namespace, with its socket and volume
# on the host (RES_VOLUME: the volume elsewhere). Called again, it restarts on the same state.
res_mgr_start() {
	local i
	MSOCK=$TD/m.sock
	rm -f "$MSOCK"
	[ "$RUN_UID" -eq 0 ] && chmod 0711 "$TD"
	"${AS[@]}" "${RES_NS[@]}" "$MANAGER" serve --state-dir "$MSTATE" --socket "$MSOCK" --volume "${RES_VOLUME:-$TD/volume}" \
		"$@" >>"$TD/manager.log" 2>&1 &
	MGR_PID=$!
	for i in $(seq 1 100); do
		[ -S "$MSOCK" ] && return 0
		kill -0 "$MGR_PID" 2>/dev/null || break
		sleep 0.1
	done
	bad "the manager did not start: $(tail -n 5 "$TD/manager.log")"
	return 1
}

res_cleanup() {
	[ -n "${RES_HOLD:-}" ] && kill -KILL "$RES_HOLD" 2>/dev/null
	mgr_cleanup
}

# res_fill DIR: fills DIR's filesystem (in the namespace) until it has no byte left.
res_fill() {
	"${AS[@]}" "${RES_NS[@]}" sh -c "dd if=/dev/zero of='$1/fill' bs=64k >/dev/null 2>&1; \
		head -c 65536 /dev/zero > '$1/fill.tail' 2>/dev/null; [ \"\$(stat -f -c %a '$1')\" = 0 ]" ||
		bad "$1 is not full: $("${AS[@]}" "${RES_NS[@]}" df -h "$1" | tail -n 1)"
}
res_free() { "${AS[@]}" "${RES_NS[@]}" rm -f "$1/fill" "$1/fill.tail"; }

# The records' volume fills up (ENOSPC for real, where manager_file_size_limit uses RLIMIT_FSIZE):
# a call arriving then is refused, not run, and says why; a call running when it fills answers
# uncertain (its end could not be recorded) and stays dispatched; the manager keeps serving, the
# next call after space returns works, and a restart settles the dispatched one from the agent's
# journal. Every command ran at most once. The agents' directories are on another tmpfs, so only
# the records are short of space.
test_manager_enospc_records() {
	local m
	m=$(unique_marker)
	mgr_repo && res_ns_start 8m 64m && res_mgr_start && mgr_session
	mgr exec --session "$SID" -- 'echo one'
	assert_eq "a call before the volume fills" 0 "$RC"
	res_fill "$MSTATE"
	mgr exec --session "$SID" -- "echo run >> \"\$TMPDIR/runs.$m.a\"; echo ran"
	assert_eq "a call on a full records volume: exit code" 125 "$RC"
	assert_match "it says it did not run, and why" "exec not run: it could not be recorded .*(disk is full|No space)" \
		"$(cat "$ERR")"
	[ -e "$WT/.sandbox-tmp/runs.$m.a" ] && bad "the call the manager could not record ran"
	mgr session show --session "$SID"
	assert_eq "session show on a full volume" 0 "$RC"
	mgr records --session "$SID"
	assert_json '[.records[].state]' '["exited"]'
	kill -0 "$MGR_PID" 2>/dev/null || bad "the manager did not survive the full volume"

	# The volume fills while a call runs: its end cannot be recorded.
	res_free "$MSTATE"
	mgr_bg_exec b "echo run >> \"\$TMPDIR/runs.$m.b\"; sleep 2; echo done.$m"
	for _ in $(seq 1 100); do [ -s "$WT/.sandbox-tmp/runs.$m.b" ] && break; sleep 0.05; done
	res_fill "$MSTATE"
	wait_bg_execs_allow_fail
	assert_match "the running call's answer" "uncertain: exec [0-9a-f]+ ended exited, but that could not be recorded" \
		"$(cat "$TD/bg-b.out")"
	mgr records --session "$SID"
	assert_json '[.records[].state]' '["dispatched","exited"]'
	res_free "$MSTATE"
	mgr exec --session "$SID" -- 'echo after'
	assert_eq "the first call once space is back (stderr: $(head -c 300 "$ERR"))" 0 "$RC"
	assert_eq "its output" after "$(cat "$OUT")"

	# A restart settles the dispatched call from the agent's journal: its real end, not a rerun.
	kill -KILL "$MGR_PID"
	wait "$MGR_PID" 2>/dev/null
	res_mgr_start
	mgr records --session "$SID"
	assert_json '[.records[].state]' '["exited","exited","exited"]'
	assert_json '[.records[].result.stdout]' "[\"after\\n\",\"done.$m\\n\",\"one\\n\"]"
	assert_eq "the call caught by the full volume ran once" 1 "$(wc -l <"$WT/.sandbox-tmp/runs.$m.b")"
}
t manager_enospc_records test_manager_enospc_records

# The sandbox's private directory (the agent's journal and receipts, <state>/sandboxes/<id>/state) has
# no space. A call arriving then is refused by the agent before it runs (its receipt's room and its
# journal entry come first): it did not run. A call running when the space goes still gets its
# receipt, written into the room its agent took before the command ran (rule N4; before, it was
# uncertain and its sandbox stopped), and its end into the journal's fixed slot: it ends exited
# with its output, ran once, and the next call runs on the same generation.
test_manager_enospc_receipts() {
	local m
	m=$(unique_marker)
	mgr_repo && res_ns_start - 4m && res_mgr_start && mgr_session
	mgr exec --session "$SID" -- 'echo one'
	assert_eq "a call before the receipts' directory fills" 0 "$RC"
	res_fill "$MSTATE/sandboxes"
	mgr exec --session "$SID" -- "echo run >> \"\$TMPDIR/runs.$m.a\"; echo ran"
	assert_eq "a call with no room for its journal: exit code" 125 "$RC"
	assert_match "it says why" "refused.*(receipt room|journal entry).*No space left on device" "$(cat "$ERR")"
	[ -e "$WT/.sandbox-tmp/runs.$m.a" ] && bad "the refused call ran"
	mgr records --session "$SID"
	assert_json '[.records[].state]' '["refused","exited"]'

	# The space goes while a call runs: no receipt can be written for it.
	res_free "$MSTATE/sandboxes"
	mgr_bg_exec b "echo run >> \"\$TMPDIR/runs.$m.b\"; sleep 2; echo done.$m"
	for _ in $(seq 1 100); do [ -s "$WT/.sandbox-tmp/runs.$m.b" ] && break; sleep 0.05; done
	res_fill "$MSTATE/sandboxes"
	wait_bg_execs_allow_fail
	assert_eq "the running call's answer" "done.$m" "$(cat "$TD/bg-b.out")"
	mgr records --session "$SID"
	assert_json '[.records[].state]' '["exited","refused","exited"]'
	assert_json '.records[0].result.receipt.verified' true
	res_free "$MSTATE/sandboxes"
	mgr exec --session "$SID" -- "echo after"
	assert_eq "the next call once there is space (stderr: $(head -c 300 "$ERR"))" 0 "$RC"
	assert_eq "its output" after "$(cat "$OUT")"
	assert_eq "the caught call ran once" 1 "$(wc -l <"$WT/.sandbox-tmp/runs.$m.b")"
	mgr session show --session "$SID"
	assert_json .generation 1
	mgr records --session "$SID"
	assert_json '[.records[].state]' '["exited","exited","refused","exited"]'
}
t manager_enospc_receipts test_manager_enospc_receipts

# ---- rule N4: a tenant that fills the volume (issue 26, break 2) -------------------------------------

# res_in COMMAND...: a command as the test user inside the namespace (where the tmpfs is).
res_in() { "${AS[@]}" "${RES_NS[@]}" "$@"; }

# The default layout: the volume in the state directory, records, private directories and worktrees
# on one 128 MiB filesystem; the manager holds a 16 MiB reserve there. Identity mallory's command
# fills the filesystem from its worktree while alice's call runs: alice's call ends with its real
# result and exit code, recorded with its output (before: `uncertain ... could not be recorded
# (database or disk is full)`, left dispatched). The reserve, given back to write that record, is
# not held while the filesystem is full: every new call is refused as not run, naming the full
# filesystem; once mallory's file is gone the reserve is held again and calls run.
test_manager_disk_reserve() {
	local m b a wtb wta
	m=$(unique_marker)
	mgr_repo && res_ns_start 128m - && RES_VOLUME=$MSTATE/volume res_mgr_start --disk-reserve 16M || return
	mgr_session
	b=$SID wtb=$WT
	mgr session create --identity mallory --repo "$REPO"
	a=$(jr .session) wta=$(jr .worktree)
	mgr session show --session "$b"
	assert_json '[.disk.bound, .disk.bytes, .disk.held, .disk.released]' '["reserve",16777216,true,0]'
	[ "$(res_in stat -c %s "$MSTATE/disk-reserve")" = 16777216 ] || bad "no 16 MiB reserve file in the state directory"
	mgr exec --session "$a" -- 'echo warm'
	assert_eq "mallory's first call" 0 "$RC"
	mgr_bg_exec b "echo run >> runs.$m; sleep 3; echo done.$m; exit 7" "$b"
	for _ in $(seq 1 100); do res_in test -s "$wtb/runs.$m" && break; sleep 0.05; done
	mgr exec --session "$a" -- 'dd if=/dev/zero of=fill bs=1M >/dev/null 2>&1; df -k . | tail -n 1'
	echo "    (mallory's filling call: exit $RC, $(head -c 300 "$OUT")$(head -c 300 "$ERR"))"
	grep -q "its reserve of 16777216 bytes is given back" "$TD/manager.log" ||
		bad "the filesystem did not fill, or the reserve was not given back: $(res_in df -k "$MSTATE" | tail -n 1)"
	wait_bg_execs_allow_fail
	assert_eq "alice's call: its real output" "done.$m" "$(cat "$TD/bg-b.out")"
	mgr records --session "$b" --limit 1
	assert_json '.records[0].state' '"exited"'
	assert_json '.records[0].result.exit_code' 7
	assert_json '.records[0].result.stdout' "\"done.$m\\n\""
	assert_eq "alice's command ran once" 1 "$(res_in cat "$wtb/runs.$m" | wc -l)"
	mgr session show --session "$b"
	assert_json .disk.held false
	mgr status --json
	assert_match "status names the full filesystem" "filesystem is full" "$(jr '.problems[]')"
	assert_json .disk.held false
	# Nothing is accepted while the reserve is given back: not run, and said so.
	mgr exec --session "$b" -- "echo run >> runs.$m.c; echo ran"
	assert_eq "a call while the reserve is given back: exit code" 125 "$RC"
	assert_match "it says the filesystem is full, and that it did not run" \
		"unavailable: exec not run: the filesystem of the state directory .* is full \([0-9]+ bytes free\)" "$(cat "$ERR")"
	res_in test -e "$wtb/runs.$m.c" && bad "the refused call ran"
	mgr records --session "$b" --limit 1
	assert_json '.records[0].state' '"exited"'
	# Space back: the reserve is held again at the next call, which runs.
	res_in rm -f "$wta/fill"
	mgr exec --session "$b" -- 'echo after'
	assert_eq "alice's next call once space is back (stderr: $(head -c 300 "$ERR"))" 0 "$RC"
	assert_eq "its output" after "$(cat "$OUT")"
	mgr session show --session "$b"
	assert_json .disk.held true
	assert_json .disk.released 1
}
t manager_disk_reserve test_manager_disk_reserve

# As manager_disk_reserve, but mallory's command goes on after the filesystem is full (it holds the
# space: dd, then a sleep), so alice's call ends while nothing is free and no record has failed yet:
# its agent's receipt and journal entry go into room its agent took before the command ran, and the
# record takes the manager's reserve. Alice's call ends exited, recorded with its output.
test_manager_disk_full_while_running() {
	local m b a wtb
	m=$(unique_marker)
	mgr_repo && res_ns_start 128m - && RES_VOLUME=$MSTATE/volume res_mgr_start --disk-reserve 16M || return
	mgr_session
	b=$SID wtb=$WT
	mgr session create --identity mallory --repo "$REPO"
	a=$(jr .session)
	mgr exec --session "$a" -- 'echo warm'
	mgr exec --session "$b" -- 'echo warm'
	mgr_bg_exec b "echo run >> runs.$m; sleep 3; echo done.$m; exit 7" "$b"
	for _ in $(seq 1 100); do res_in test -s "$wtb/runs.$m" && break; sleep 0.05; done
	mgr_bg_exec a "dd if=/dev/zero of=fill bs=1M >/dev/null 2>&1; sleep 6; echo filler" "$a"
	for _ in $(seq 1 100); do [ "$(res_in stat -f -c %a "$MSTATE")" -lt 2 ] && break; sleep 0.05; done
	[ "$(res_in stat -f -c %a "$MSTATE")" -lt 2 ] || bad "the filesystem did not fill: $(res_in df -k "$MSTATE" | tail -n 1)"
	wait_bg_execs_allow_fail
	echo "    (mallory's call: $(head -c 300 "$TD/bg-a.out"))"
	assert_eq "alice's call: its real output" "done.$m" "$(cat "$TD/bg-b.out")"
	mgr records --session "$b" --limit 1
	assert_json '[.records[0].state, .records[0].result.exit_code]' '["exited",7]'
	assert_json '.records[0].result.stdout' "\"done.$m\\n\""
	assert_json '.records[0].result.receipt.verified' true
	assert_eq "alice's command ran once" 1 "$(res_in cat "$wtb/runs.$m" | wc -l)"
	mgr records --session "$a" --limit 1
	echo "    (mallory's record: $(jv '.records[0] | {state, reason}'))"
	assert_match "mallory's call is recorded, not left in flight" "exited|uncertain" "$(jr '.records[0].state')"
}
t manager_disk_full_while_running test_manager_disk_full_while_running

# The volume on a filesystem of its own: the state directory's is one no sandbox writes, and the
# manager says so; no reserve is held (a leftover one is removed).
test_manager_disk_separate() {
	mgr_repo && res_ns_start 32m - && res_in touch "$MSTATE/disk-reserve" && res_mgr_start || return
	mgr_session
	mgr session show --session "$SID"
	assert_json .disk '{"bound":"separate filesystem"}'
	mgr status --json
	assert_json .disk '{"bound":"separate filesystem"}'
	mgr status
	assert_match "status says it" "disk: separate filesystem" "$(cat "$OUT")"
	res_in test -e "$MSTATE/disk-reserve" && bad "a reserve file is left with separate filesystems"
	grep -q "separate filesystems" "$TD/manager.log" || bad "the manager did not log the separate filesystems"
}
t manager_disk_separate test_manager_disk_separate

# --disk-reserve 0 on one filesystem: no bound, and session show and the log say so. A bad size is a
# usage error naming the setting.
test_manager_disk_reserve_flag() {
	mgr_repo && mgr_start --disk-reserve 0 || return
	mgr_session
	mgr session show --session "$SID"
	assert_json .disk.bound '"none"'
	assert_match "it says why" "disk-reserve is 0" "$(jr .disk.why)"
	grep -q "disk-reserve is 0" "$TD/manager.log" || bad "the manager did not warn that no reserve is held"
	local bad_size rc
	for bad_size in 12X -1 ""; do
		"${AS[@]}" "$MANAGER" serve --state-dir "$TD/s2" --disk-reserve "$bad_size" >"$OUT" 2>"$ERR"
		rc=$?
		assert_eq "--disk-reserve '$bad_size': exit code" 2 "$rc"
		assert_match "--disk-reserve '$bad_size': the message" "disk-reserve must be a size" "$(cat "$ERR")"
	done
}
t manager_disk_reserve_flag test_manager_disk_reserve_flag

# A reserve over a quarter of the filesystem could never be taken again once given back (it needs
# twice its size free): the manager does not start, and says what to do.
test_manager_disk_reserve_too_large() {
	res_ns_start 16m - || return
	timeout 20 "${AS[@]}" "${RES_NS[@]}" "$MANAGER" serve --state-dir "$MSTATE" --socket "$TD/m.sock" \
		--disk-reserve 8M >"$OUT" 2>"$ERR"
	assert_eq "exit code" 125 "$?"
	assert_match "the message" "disk-reserve 8388608 bytes is too large for the filesystem of .* set at most a quarter" \
		"$(cat "$ERR")"
}
t manager_disk_reserve_too_large test_manager_disk_reserve_too_large

# A file size limit below the reserve: the start is refused naming the limit (it said "File too large").
test_manager_disk_reserve_fsize() {
	(
		ulimit -f 600
		exec timeout 20 "${AS[@]}" "$MANAGER" serve --state-dir "$TD/fsize" --socket "$TD/fsize.sock" >"$OUT" 2>"$ERR"
	)
	assert_eq "exit code" 125 "$?"
	assert_match "the message" "disk reserve .* is over this process's file size limit \\(RLIMIT_FSIZE, ulimit -f\\)" \
		"$(cat "$ERR")"
	[ -S "$TD/fsize.sock" ] && bad "the manager serves"
	return 0
}
t manager_disk_reserve_fsize test_manager_disk_reserve_fsize

# ---- control clients that stall, and many at once -------------------------------------------------

# mgr_threads / mgr_fds: the manager's thread and open descriptor counts, now.
mgr_threads() { awk '/^Threads:/ { print $2 }' "/proc/$MGR_PID/status"; }
mgr_fds() { find "/proc/$MGR_PID/fd" -mindepth 1 -maxdepth 1 | wc -l; }

# stall_run NAME ARGS...: control_stall.py in the background as the test user; waits until its
# connections are open. Its JSON summary lands in $TD/NAME.json.
stall_run() {
	local name=$1 i
	shift
	rm -f "$TD/$name.ready"
	"${AS[@]}" python3 "$RES_HERE/control_stall.py" "$MSOCK" "$@" "$TD/$name.ready" >"$TD/$name.json" 2>"$TD/$name.err" &
	STALL_PID=$!
	for i in $(seq 1 200); do [ -e "$TD/$name.ready" ] && return 0; sleep 0.05; done
	bad "$name: the stalled clients did not connect: $(head -c 300 "$TD/$name.err")"
}

# Clients that connect and send nothing, or half a frame, cost one thread each while they stall and
# are bounded: the manager closes a silent one 10 s after it connected and answers a cut frame 10 s
# after its first byte; meanwhile other clients are served. Past the connection limit (half the
# descriptors, at most 512) a new connection is answered at once that the manager is at its limit
# (nothing ran), and never costs a thread; threads and descriptors stay within the limit.
test_manager_control_stalled() {
	local t0 f0 t1 f1
	mgr_repo && mgr_start && mgr_session
	mgr exec --session "$SID" -- true
	t0=$(mgr_threads)
	f0=$(mgr_fds)
	stall_run a stall 300 20 16
	mgr session show --session "$SID"
	assert_eq "session show beside 320 stalled clients" 0 "$RC"
	mgr exec --session "$SID" -- 'echo served'
	assert_eq "a call beside 320 stalled clients (stderr: $(head -c 300 "$ERR"))" 0 "$RC"
	assert_eq "its output" served "$(cat "$OUT")"
	t1=$(mgr_threads)
	assert_ge "threads held by the stalled clients" $((t1 - t0)) 300
	assert_lt "threads held by the stalled clients" $((t1 - t0)) 330
	wait "$STALL_PID"
	assert_json '[.refused, .closed, .half_answered, .open, .other]' '[0,300,20,0,[]]' "$TD/a.json"
	assert_ge "the first close, s after connecting" "$(jr '.first_close_s * 10 | floor' "$TD/a.json")" 95
	assert_lt "the last close, s after connecting" "$(jr '.last_close_s * 10 | floor' "$TD/a.json")" 140
	sleep 0.5
	assert_lt "threads once they are gone" "$(mgr_threads)" $((t0 + 3))

	# Past the limit: 600 at once.
	stall_run b stall 600 0 14
	f1=$(mgr_fds)
	t1=$(mgr_threads)
	# several: the answer may come before the client has written its request (the CLI still reads it)
	for _ in 1 2 3 4 5; do
		mgr session show --session "$SID"
		assert_eq "session show at the limit: exit code" 125 "$RC"
		assert_match "it says why" "unavailable: the manager has [0-9]+ control connections open, its limit: nothing ran" \
			"$(cat "$ERR")"
	done
	assert_lt "descriptors at the limit" "$f1" $((f0 + 512 + 16))
	assert_lt "threads at the limit" "$t1" $((t0 + 512 + 4))
	wait "$STALL_PID"
	assert_ge "connections refused at once" "$(jr .refused "$TD/b.json")" 88
	assert_eq "refused + closed" 600 "$(jr '.refused + .closed' "$TD/b.json")"
	assert_json '[.open, .other]' '[0,[]]' "$TD/b.json"
	mgr session show --session "$SID"
	assert_eq "session show once they are gone" 0 "$RC"
	grep -q "refused a control connection: [0-9]* open, the limit" "$TD/manager.log" || bad "the refusals are not logged"
	kill -0 "$MGR_PID" 2>/dev/null || bad "the manager did not survive the stalled clients"
}
t manager_control_stalled test_manager_control_stalled

# A client sends an exec with a large output and never reads the answer: the exec is recorded
# exited all the same (the record is written before the answer), other clients are served, the same
# session's next call runs (the session's turn is not held by the unread answer), and the manager
# gives the answer up after 30 s without progress, freeing the thread.
test_manager_control_slow_reader() {
	local i
	mgr_repo && mgr_start && mgr_session
	mgr exec --session "$SID" -- true
	stall_run s slow "$SID" 'head -c 8000000 /dev/zero | tr "\0" x' 45
	for i in $(seq 1 100); do
		mgr records --session "$SID" --limit 1
		[ "$(jr '.records[0].state')" = exited ] && [ "$(jr '.records[0].command')" != true ] && break
		sleep 0.1
	done
	assert_json '[.records[0].state, .records[0].result.stdout_bytes]' '["exited",8000000]'
	mgr session show --session "$SID"
	assert_eq "session show while an answer is unread" 0 "$RC"
	mgr exec --session "$SID" -- 'echo next'
	assert_eq "the same session's next call (stderr: $(head -c 300 "$ERR"))" 0 "$RC"
	assert_eq "its output" next "$(cat "$OUT")"
	wait "$STALL_PID"
	assert_ge "s until the manager gave the answer up" "$(jr '.gave_up_s * 10 | floor' "$TD/s.json")" 290
	assert_lt "s until the manager gave the answer up" "$(jr '.gave_up_s * 10 | floor' "$TD/s.json")" 400
	grep -q "the answer to exec was not read for 30 s" "$TD/manager.log" || bad "the manager did not log the unread answer"
	mgr records --session "$SID"
	assert_json '[.records[].state]' '["exited","exited","exited"]'
}
t manager_control_slow_reader test_manager_control_slow_reader

# 250 clients at once on the control socket (listen backlog 128): 200 reads (records, session show)
# and 50 execs over 10 sessions. All are answered, none fails, and the calls of one session never
# overlap: neither in the records (accepted..finished intervals) nor as the commands saw it (each
# holds a directory in the session's scratch while it runs).
test_manager_many_clients() {
	local i s pids=() failed=0
	local -a sids=()
	mgr_repo && mgr_start
	for i in $(seq 0 9); do
		mgr_session
		sids+=("$SID")
		mgr exec --session "$SID" -- true
	done
	for i in $(seq 0 249); do
		s=${sids[$((i / 5 % 10))]}
		if ((i % 5 == 0)); then
			"${AS[@]}" env "SANDBOX_MANAGER_SOCKET=$MSOCK" timeout 120 "$MANAGER" exec --session "$s" -- \
				"mkdir \"\$TMPDIR/busy\" || echo OVERLAP; sleep 0.05; rmdir \"\$TMPDIR/busy\"; echo call-$i" \
				>"$TD/c$i.out" 2>"$TD/c$i.err" &
		elif ((i % 2)); then
			"${AS[@]}" env "SANDBOX_MANAGER_SOCKET=$MSOCK" timeout 120 "$MANAGER" records --session "$s" \
				>"$TD/c$i.out" 2>"$TD/c$i.err" &
		else
			"${AS[@]}" env "SANDBOX_MANAGER_SOCKET=$MSOCK" timeout 120 "$MANAGER" session show --session "$s" \
				>"$TD/c$i.out" 2>"$TD/c$i.err" &
		fi
		pids+=("$!")
	done
	for i in "${!pids[@]}"; do
		wait "${pids[$i]}" || { failed=$((failed + 1)); [ "$failed" -le 3 ] && bad "client $i: $(head -c 200 "$TD/c$i.err")"; }
	done
	assert_eq "clients that failed" 0 "$failed"
	# exactly its own line: "OVERLAP" would mean it saw another call of its session running
	for i in $(seq 0 5 249); do
		assert_eq "call $i's output" "call-$i" "$(cat "$TD/c$i.out")"
	done
	for i in $(seq 1 2 249); do
		((i % 5 == 0)) && continue
		jq -e '.records | type == "array"' "$TD/c$i.out" >/dev/null || bad "records client $i: $(head -c 200 "$TD/c$i.out")"
	done
	for s in "${sids[@]}"; do
		mgr records --session "$s"
		assert_json '[.records[].state] | (length, unique)' $'6\n["exited"]'
		# each call is accepted after the previous one finished
		# shellcheck disable=SC2016 # jq's own variables
		assert_json '[.records | sort_by(.accepted_ms) | . as $r | range(1; length) | select($r[.].accepted_ms < $r[. - 1].finished_ms)] | length' 0
		assert_json '[.records[] | select(.dispatched_ms < .accepted_ms or .finished_ms < .dispatched_ms)] | length' 0
	done
	kill -0 "$MGR_PID" 2>/dev/null || bad "the manager did not survive 250 clients"
}
t manager_many_clients test_manager_many_clients

# One identity cannot take the host's sandboxes from another (a bound per tenant): with
# --sandboxes-per-identity 2, alice's third session's first call retires her least recently used
# idle sandbox (its session's next call gets a new one, nothing lost); with both her sandboxes
# running calls, a fourth session's call is refused before it runs, recorded refused with the
# reason; bob, meanwhile, is not held up by her bound.
test_manager_sandboxes_per_identity() {
	local a1 a2 a3 a4 b1 i
	mgr_repo && mgr_start --sandboxes-per-identity 2 || return
	mgr_session && a1=$SID
	mgr_session && a2=$SID
	mgr_session && a3=$SID
	mgr_session && a4=$SID
	mgr exec --session "$a1" -- true
	assert_eq "alice's first session" 0 "$RC"
	mgr exec --session "$a2" -- true
	assert_eq "alice's second session" 0 "$RC"
	# at the bound: a3's call retires a1's sandbox (the least recently used, idle)
	mgr exec --session "$a3" -- 'echo a3 ran'
	assert_eq "alice's third session, at the bound (stderr: $(head -c 300 "$ERR"))" 0 "$RC"
	assert_eq "its output" "a3 ran" "$(cat "$OUT")"
	mgr session show --session "$a1"
	assert_json '.sandbox' 'null'
	mgr session show --session "$a2"
	assert_json '.sandbox.state' '"running"'
	# a2 and a3 each run a call: a4's call finds no idle sandbox of alice's
	mgr_bg_exec busy2 "sleep 4" "$a2"
	mgr_bg_exec busy3 "sleep 4" "$a3"
	for i in $(seq 1 50); do [ "$(pgrep -fc '^sleep 4$')" -ge 2 ] && break; sleep 0.1; done
	mgr exec --session "$a4" -- 'echo must-not-run > "$TMPDIR/a4"'
	assert_eq "alice's fourth session while two calls run" 125 "$RC"
	assert_match "the refusal names the bound" "identity alice has 2 sandboxes on this manager, each running a call" \
		"$(cat "$ERR")"
	mgr records --session "$a4"
	assert_json '[.records[].state]' '["refused"]'
	# bob is not held up by alice's bound
	mgr session create --identity bob --repo "$REPO"
	b1=$(jr .session)
	mgr exec --session "$b1" -- 'echo bob ran'
	assert_eq "bob meanwhile (stderr: $(head -c 300 "$ERR"))" 0 "$RC"
	wait_bg_execs
	# once a call ended, a4 runs (its sandbox retires an idle one of alice's), and a1 goes on
	mgr exec --session "$a4" -- 'echo a4 ran'
	assert_eq "alice's fourth session after the calls ended" "a4 ran" "$(cat "$OUT")"
	mgr exec --session "$a1" -- 'echo a1 again'
	assert_eq "alice's first session on a new sandbox" "a1 again" "$(cat "$OUT")"
	mgr session show --session "$a1"
	assert_json '.generation' 2
	[ ! -e "$WT/.sandbox-tmp/a4" ] || bad "the refused call ran"
}
t manager_sandboxes_per_identity test_manager_sandboxes_per_identity

# Descriptors are shared by every identity's sandboxes: the manager takes its hard limit (up to
# 65536) at start, so the usual soft 1024 does not let a few identities at their bounds take every
# descriptor from the rest; it says so when even the hard limit is low.
test_manager_nofile_raised() {
	local pid lim p
	mgr_repo || return
	MGR_WRAP=(prlimit --nofile=1024:8192)
	mgr_start || return
	MGR_WRAP=()
	# the daemon (its namespace's holder, sbm-userns under subuid, is started before the raise)
	pid=$MGR_PID
	for p in $(pgrep -f -- "serve --state-dir $MSTATE"); do
		[ "$(cat "/proc/$p/comm" 2>/dev/null)" = sandbox-manager ] && pid=$p
	done
	lim=$(awk '/^Max open files/ { print $4 " " $5 }' "/proc/$pid/limits")
	assert_eq "the daemon's descriptor limits (soft hard)" "8192 8192" "$lim"
	mgr_session
	mgr exec --session "$SID" -- 'ulimit -Hn'
	assert_eq "a command's hard limit is the one it had" 8192 "$(cat "$OUT")"
	mgr_cleanup
	MSTATE=""
	MGR_WRAP=(prlimit --nofile=1024:2048)
	mgr_start || return
	MGR_WRAP=()
	assert_match "a low hard limit is warned about" "the descriptor limit is 2048 \\(hard\\)" "$(cat "$TD/manager.log")"
}
t manager_nofile_raised test_manager_nofile_raised
