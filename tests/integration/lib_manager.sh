# shellcheck shell=bash
# Helpers for the manager's integration tests (sourced by run.sh after lib.sh). Each test starts its own
# `sandbox-manager serve` as the test user on a fresh state directory, with the process backend, and stops it (and every sandbox it left) when the test's subshell exits.

MGR_FIXTURE=$(cd "$(dirname "${BASH_SOURCE[0]}")/../fixtures/deploy-repo" && pwd)

# mgr_repo: a git repository of the fixture manifests, owned by the test user, at $REPO.
mgr_repo() {
	REPO=$TD/repo
	# Never an empty source: "$MGR_FIXTURE"/. would then copy the whole root filesystem.
	[ -n "$MGR_FIXTURE" ] && [ -d "$MGR_FIXTURE" ] || { bad "no fixture repository at '$MGR_FIXTURE'"; return 1; }
	mkdir -p "$REPO" && cp -r "$MGR_FIXTURE"/. "$REPO"/ && chown -R "$RUN_USER:" "$REPO"
	as_user git -C "$REPO" init -q -b main &&
		as_user git -C "$REPO" add -A &&
		as_user git -C "$REPO" -c user.name=test -c user.email=test@example.invalid commit -qm "manifests"
}

# mgr_start [SERVE ARGS...]: a manager on a short state directory (a unix socket path has at most
# 107 bytes, and the agents' sockets live below it); sets MSTATE, MSOCK, MGR_PID. Called again,
# it restarts on the same state. MGR_WRAP (array) goes before it, e.g. ip netns exec NAME.
mgr_start() {
	local i
	if [ -z "${MSTATE:-}" ]; then
		MSTATE=$(mktemp -d /tmp/sbm.XXXXXX) && chown "$RUN_USER:" "$MSTATE" && echo "$MSTATE" >"$TD/mstate.path"
	fi
	MSOCK=$MSTATE/manager.sock
	rm -f "$MSOCK" # the socket of a killed manager must not pass for the new one's"
	# a root manager's sandboxes run as their identity's ids and must walk to their worktree
	chmod 0711 "$TD"
	"${MGR_WRAP[@]}" "${AS[@]}" "$MANAGER" serve --state-dir "$MSTATE" "$@" >>"$TD/manager.log" 2>&1 &
	MGR_PID=$!
	# a test's PostgreSQL too, even when this start fails (store_cleanup calls mgr_cleanup)
	if [ -n "${PGD:-}" ]; then trap store_cleanup EXIT; else trap mgr_cleanup EXIT; fi
	# Up to 30 s: a restart settles what the killed one left (it may ask an agent) before it
	# binds its socket, on a machine that CI may share with other work.
	for i in $(seq 1 300); do
		[ -S "$MSOCK" ] && return 0
		kill -0 "$MGR_PID" 2>/dev/null || break
		sleep 0.1
	done
	bad "the manager did not start: $(tail -n 5 "$TD/manager.log")"
	return 1
}

# The sandboxes outlive a killed manager by design (the next start stops them with evidence);
# a test's end stops everything it started.
mgr_cleanup() {
	[ -n "${MGR_PID:-}" ] && kill -KILL "$MGR_PID" 2>/dev/null
	local pids
	pids=$(pgrep -f -- "--state-dir $MSTATE/sandboxes/")
	# shellcheck disable=SC2086 # this test's own sandboxes (its state directory), by PID
	[ -n "$pids" ] && kill -KILL $pids 2>/dev/null
	# `sandbox-ids subuid`: the holder of the manager's user namespace (identity_userns.c), by its pid
	[ -s "$MSTATE/userns-holder" ] && kill -KILL "$(cat "$MSTATE/userns-holder")" 2>/dev/null
	wait 2>/dev/null
	[ -z "${IT_KEEP:-}" ] && rm -rf "$MSTATE"
	return 0
}

# as_in_manager_ns CMD...: CMD as the manager's user, and, under an unprivileged manager in its
# subuid namespace (identity_userns.c), as that namespace's uid 0: the worktrees belong to the
# identities' subordinate ids there, which the user reaches only through its namespace (as with
# `podman unshare`). The manager's socket is the same user's either way.
as_in_manager_ns() {
	if [ "$RUN_UID" -ne 0 ] && [ -s "$MSTATE/userns-holder" ]; then
		"${AS[@]}" nsenter --user --target "$(cat "$MSTATE/userns-holder")" -- "$@"
	else
		"${AS[@]}" "$@"
	fi
}

# mgr_ids [SESSION]: the uid and gid the session's identity runs as (`session show` .ids), in IDS_UID
# and IDS_GID; under a root manager they must be the identity's own, never nobody (rule N2).
mgr_ids() {
	mgr session show --session "${1:-$SID}"
	IDS_UID=$(jr .ids.uid)
	IDS_GID=$(jr .ids.gid)
	assert_match "the identity's uid" '^[0-9]+$' "$IDS_UID"
	local start count
	start=$(awk -F: -v u="$RUN_USER" '$1 == u { print $2; exit }' /etc/subuid)
	count=$(awk -F: -v u="$RUN_USER" '$1 == u { print $3; exit }' /etc/subuid)
	if [ "$RUN_UID" -eq 0 ]; then
		[ "$IDS_UID" -ge 1000 ] && [ "$IDS_UID" -ne 65534 ] && [ "$IDS_GID" -ne 65534 ] ||
			bad "a root manager's identity runs as $IDS_UID:$IDS_GID"
	elif [ -n "$start" ] && [[ $(jr .ids.from) == *"/etc/subuid"* ]]; then
		# subordinate ids (the process backend's default where the user has them, identity_userns.c;
		# manager_identity_ids checks that it is taken there): ids of that range
		[ "$IDS_UID" -gt "$start" ] && [ "$IDS_UID" -lt $((start + count)) ] ||
			bad "an unprivileged manager's identity runs as $IDS_UID, outside $RUN_USER's subordinate range"
	else
		assert_eq "an unprivileged manager's identity runs as the manager" "$RUN_UID:$(id -g "$RUN_USER")" "$IDS_UID:$IDS_GID"
	fi
}

# sandbox_agent_kill: SIGKILL to the session's sandbox agent (found by its own state directory, this
# test's), by PID.
sandbox_agent_kill() {
	local pids
	pids=$(pgrep -f -- "--state-dir $MSTATE/sandboxes/$SID")
	[ -n "$pids" ] || { bad "no sandbox agent to kill"; return 1; }
	# shellcheck disable=SC2086 # one or more PIDs, this test's own
	kill -KILL $pids
}

# mgr ARGS...: a client command as the test user. Sets RC; stdout in $OUT, stderr in $ERR.
mgr() {
	timeout -k 3 "${MGR_TIMEOUT:-60}" "${AS[@]}" env "SANDBOX_MANAGER_SOCKET=$MSOCK" "$MANAGER" "$@" \
		>"$OUT" 2>"$ERR"
	RC=$?
}

# mgr_session: creates a session on $REPO; sets SID and WT (its worktree).
mgr_session() {
	mgr session create --identity alice --repo "$REPO" "$@"
	assert_eq "session create exit code (stderr: $(head -c 300 "$ERR"))" 0 "$RC"
	SID=$(jr .session)
	WT=$(jr .worktree)
	[ -n "$SID" ] && [ "$SID" != null ] || bad "no session id: $(cat "$OUT")"
}

# sandbox_agent_kill: SIGKILL to the session's sandbox agent (found by its own state directory, this
# test's), by PID.
sandbox_agent_kill() {
	local pids
	pids=$(pgrep -f -- "--state-dir $MSTATE/sandboxes/$SID")
	[ -n "$pids" ] || { bad "no sandbox agent to kill"; return 1; }
	# shellcheck disable=SC2086 # one or more PIDs, this test's own
	kill -KILL $pids
}

# mgr_uncertain MARKER: a call on $SID whose agent dies mid-command, so its record is uncertain; it
# appends a line to $TMPDIR/runs.MARKER (its one run) and sets UNCERTAIN to its exec id.
mgr_uncertain() {
	local i
	mgr_bg_exec k "echo run >> \"\$TMPDIR/runs.$1\"; sleep 20.$1"
	# anchored: the client's own command line holds the same words
	for i in $(seq 1 50); do pgrep -f "^sleep 20.$1" >/dev/null && break; sleep 0.1; done
	sandbox_agent_kill
	wait_bg_execs_allow_fail
	mgr records --session "$SID" --limit 1
	UNCERTAIN=$(jr '.records[0].exec_id')
	assert_json '.records[0].state' '"uncertain"'
}

# mgr_bg_exec NAME COMMAND [SESSION]: a call in the background; wait_bg_execs waits for them all.
mgr_bg_exec() {
	timeout 60 "${AS[@]}" env "SANDBOX_MANAGER_SOCKET=$MSOCK" "$MANAGER" exec --session "${3:-$SID}" -- "$2" \
		>"$TD/bg-$1.out" 2>&1 &
	BG_PIDS+=("$!")
}
wait_bg_execs() {
	local p
	for p in "${BG_PIDS[@]}"; do
		wait "$p" || bad "background call $p failed"
	done
	BG_PIDS=()
}
BG_PIDS=()

wait_bg_execs_allow_fail() {
	local p
	for p in "${BG_PIDS[@]}"; do wait "$p"; done
	BG_PIDS=()
}

# ---- the test PostgreSQL (tests/support/pg.sh), for the records' second store ----

PG_SH=$(cd "$(dirname "${BASH_SOURCE[0]}")/../support" && pwd)/pg.sh
PG_BIN=${PG_BIN:-/usr/lib/postgresql/15/bin}

# store_pg_start: a server in a short directory of its own (the socket path has at most 107 bytes);
# sets PGD and STORE, and stops the server when the test's subshell exits (after the manager).
store_pg_start() {
	local rc
	PGD=$(mktemp -d /tmp/sbpg.XXXXXX) || { bad "cannot create the server's directory"; return 1; }
	bash "$PG_SH" start "$PGD" >"$TD/pg.env" 2>"$TD/pg.err"
	rc=$?
	if [ "$rc" -eq 77 ]; then
		rmdir "$PGD"
		skip_setup "no PostgreSQL 15 binaries in $PG_BIN (scripts/deps.sh installs postgresql-15)"
	fi
	[ "$rc" -eq 0 ] || { bad "the test PostgreSQL did not start: $(head -c 500 "$TD/pg.err")"; return 1; }
	# shellcheck disable=SC2034 # read by the manager_*.sh files
	STORE="postgres:host=$PGD port=5432 user=sbrecords dbname=postgres"
	trap store_cleanup EXIT
}

store_cleanup() {
	[ -n "${MSTATE:-}" ] && mgr_cleanup
	if [ -n "${PGD:-}" ] && [ -d "$PGD" ]; then
		bash "$PG_SH" stop "$PGD" || echo "    (the test PostgreSQL in $PGD did not stop)"
		[ -z "${IT_KEEP:-}" ] && rm -rf -- "$PGD"
	fi
	return 0
}

# psql_q SQL: one query's rows, unaligned, on the test's server.
psql_q() {
	"$PG_BIN/psql" -X -q -At -h "$PGD" -p 5432 -U sbrecords -d postgres -c "$1" 2>&1
}
