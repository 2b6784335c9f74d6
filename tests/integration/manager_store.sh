# shellcheck shell=bash
# The records' two stores (issue 19): a manager on PostgreSQL (a throwaway server of the test's own,
# tests/support/pg.sh, on a unix socket only) runs a session and its calls, restarts on the same
# store (named this time by the config file's `store` and libpq's PG* environment) and keeps its
# records; a store whose schema is newer is refused; an unreachable or malformed store is a clear
# error that leaves nothing created; sqlite:PATH puts the file where it says.

test_manager_store_postgres() {
	local sid
	store_pg_start || return
	mgr_repo && mgr_start --store "$STORE" && trap store_cleanup EXIT && mgr_session || return
	sid=$SID
	mgr exec --session "$SID" -- 'echo one'
	assert_eq "a call on postgres: exit code (stderr: $(head -c 300 "$ERR"))" 0 "$RC"
	assert_eq "a call on postgres: output" one "$(cat "$OUT")"
	# the records are the server's, and no SQLite file was made beside them
	assert_eq "the session's row in PostgreSQL" "$sid|alice|active" "$(psql_q "SELECT id, identity, state FROM sessions")"
	assert_eq "the exec's row in PostgreSQL" "exited|echo one" "$(psql_q "SELECT state, command FROM execs")"
	assert_eq "the schema version" 7 "$(psql_q "SELECT version FROM records_schema")"
	[ -e "$MSTATE/records.db" ] && bad "a records.db was created in the state dir with --store postgres"
	grep -qF "backend process, store postgres)" "$TD/manager.log" || bad "the start's log line does not name the store"

	# a restart on the same store: named by the config file's "store" and libpq's environment
	kill -TERM "$MGR_PID"
	wait "$MGR_PID" 2>/dev/null
	printf '{"store": "postgres:"}\n' >"$TD/store.json" && chmod 0644 "$TD/store.json"
	PGHOST=$PGD PGPORT=5432 PGUSER=sbrecords PGDATABASE=postgres mgr_start --config "$TD/store.json" || return
	trap store_cleanup EXIT
	mgr records --session "$sid"
	assert_eq "records after the restart: exit code (stderr: $(head -c 300 "$ERR"))" 0 "$RC"
	assert_json '[.records[] | [.state, .command]]' '[["exited","echo one"]]'
	mgr exec --session "$sid" -- 'echo two'
	assert_eq "a call after the restart: exit code (stderr: $(head -c 300 "$ERR"))" 0 "$RC"
	assert_eq "a call after the restart: output" two "$(cat "$OUT")"
	mgr records --session "$sid"
	assert_json '[.records[] | .command]' '["echo two","echo one"]'
	mgr session show --session "$sid"
	assert_json '.identity' '"alice"'
	assert_eq "the execs in PostgreSQL" 2 "$(psql_q "SELECT count(*) FROM execs WHERE state = 'exited'")"
}
t manager_store_postgres test_manager_store_postgres

# kill -9 of a manager on PostgreSQL mid-call: the next one, on the same store, settles the call
# from the agent's journal (the recovery reads and writes the store), and the command ran once.
test_manager_store_postgres_midcall() {
	local m
	m=$(unique_marker)
	store_pg_start || return
	mgr_repo && mgr_start --store "$STORE" && trap store_cleanup EXIT && mgr_session || return
	mgr_bg_exec r "echo run >> \"\$TMPDIR/runs.$m\"; sleep 2; echo done.$m"
	for _ in $(seq 1 50); do [ -s "$WT/.sandbox-tmp/runs.$m" ] && break; sleep 0.1; done
	assert_eq "the exec in flight, in PostgreSQL" dispatched "$(psql_q "SELECT state FROM execs")"
	kill -KILL "$MGR_PID"
	wait_bg_execs_allow_fail
	sleep 2.5
	mgr_start --store "$STORE" || return
	trap store_cleanup EXIT
	mgr records --session "$SID"
	assert_json '[.records[].state]' '["exited"]'
	assert_json '.records[0].result.stdout' "\"done.$m\\n\""
	assert_eq "the command ran once" 1 "$(wc -l <"$WT/.sandbox-tmp/runs.$m")"
	assert_eq "the exec, in PostgreSQL" exited "$(psql_q "SELECT state FROM execs")"
	mgr exec --session "$SID" -- 'echo after'
	assert_eq "a call after the recovery: output" after "$(cat "$OUT")"
}
t manager_store_postgres_midcall test_manager_store_postgres_midcall

# A database whose schema is newer than this manager's is refused, left as it was, and nothing of
# the manager's is created.
test_manager_store_newer_schema() {
	local state rc
	store_pg_start || return
	psql_q "CREATE TABLE records_schema (version BIGINT NOT NULL); INSERT INTO records_schema VALUES (9)" >/dev/null
	state=$TD/never
	timeout -k 2 20 "${AS[@]}" "$MANAGER" serve --state-dir "$state" --store "$STORE" >"$TD/serve.out" 2>"$TD/serve.err"
	rc=$?
	assert_eq "serve on a newer schema: exit code (stderr: $(head -c 300 "$TD/serve.err"))" 125 "$rc"
	grep -qF "has schema version 9, newer than this sandbox-manager understands (7)" "$TD/serve.err" ||
		bad "no 'newer than this sandbox-manager understands' in: $(head -c 300 "$TD/serve.err")"
	grep -qF "database postgres on $PGD" "$TD/serve.err" || bad "the error does not name the store: $(head -c 300 "$TD/serve.err")"
	assert_eq "the version is left as it was" 9 "$(psql_q "SELECT version FROM records_schema")"
	assert_eq "no table was created" "records_schema" "$(psql_q "SELECT string_agg(tablename, ',') FROM pg_tables WHERE schemaname = 'public'")"
	[ -e "$state" ] && bad "serve refused the store but created its state dir $state"
}
t manager_store_newer_schema test_manager_store_newer_schema

# No PostgreSQL needed: a server that is not there, a store of neither kind, and sqlite:PATH.
test_manager_store_refusals() {
	local state rc bad_store
	state=$TD/never
	timeout -k 2 20 "${AS[@]}" "$MANAGER" serve --state-dir "$state" \
		--store "postgres:host=$TD/nowhere port=5432 dbname=records password=s3cret" >"$TD/serve.out" 2>"$TD/serve.err"
	rc=$?
	assert_eq "serve on an unreachable store: exit code (stderr: $(head -c 300 "$TD/serve.err"))" 125 "$rc"
	grep -qF "cannot connect to the store postgres (database records on $TD/nowhere port 5432)" "$TD/serve.err" ||
		bad "the error does not name the store: $(head -c 300 "$TD/serve.err")"
	grep -qF s3cret "$TD/serve.err" && bad "the password is in the error: $(head -c 300 "$TD/serve.err")"
	[ -e "$state" ] && bad "serve could not reach the store but created its state dir $state"

	for bad_store in mysql:localhost sqlite:relative.db sqlite:; do
		timeout -k 2 20 "${AS[@]}" "$MANAGER" serve --state-dir "$state" --store "$bad_store" >"$TD/serve.out" 2>"$TD/serve.err"
		rc=$?
		assert_eq "serve --store $bad_store: exit code" 2 "$rc"
		grep -qF "config: store must be sqlite:PATH (PATH absolute) or postgres:CONNINFO" "$TD/serve.err" ||
			bad "serve --store $bad_store: $(head -c 300 "$TD/serve.err")"
	done
	[ -e "$state" ] && bad "a malformed store created the state dir $state"

	# sqlite:PATH: the file where it says, none in the state dir
	mgr_repo && mkdir_user "$TD/db" && mgr_start --store "sqlite:$TD/db/elsewhere.db" && mgr_session || return
	mgr exec --session "$SID" -- 'echo here'
	assert_eq "a call on sqlite:PATH: output" here "$(cat "$OUT")"
	[ -s "$TD/db/elsewhere.db" ] || bad "no $TD/db/elsewhere.db"
	[ -e "$MSTATE/records.db" ] && bad "a records.db in the state dir with --store sqlite:$TD/db/elsewhere.db"
	assert_eq "the file's mode" 600 "$(stat -c %a "$TD/db/elsewhere.db")"
}
t manager_store_refusals test_manager_store_refusals
