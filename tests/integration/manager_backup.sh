# shellcheck shell=bash
# The live backup of records.db that docs/operations.md "Backup" tells operators to take (issue 14):
# `sqlite3 -readonly records.db "VACUUM INTO 'FILE'"` as the manager's user, while calls run. What
# this guards: a copy that is torn or misses calls that were already recorded, a backup that
# disturbs the running calls, and a restore (the documented steps) that the manager does not take.

# backup_loop: calls one after another until $TD/stop appears (at most 150: every record of the
# session then fits one page); each call that printed its number is appended to $TD/done.
backup_loop() {
	local i=0 OUT=$TD/loop.out ERR=$TD/loop.err
	while [ ! -e "$TD/stop" ] && [ "$i" -lt 150 ]; do
		i=$((i + 1))
		mgr exec --session "$SID" -- "echo $i"
		if [ "$RC" -ne 0 ] || [ "$(cat "$OUT")" != "$i" ]; then
			echo "call $i: exit code $RC, output $(head -c 100 "$OUT"), stderr $(head -c 200 "$ERR")" >"$TD/loop.failed"
			return
		fi
		echo "$i" >>"$TD/done"
	done
}

# done_count: how many calls of the loop have finished.
done_count() { wc -l <"$TD/done" 2>/dev/null | tr -d ' ' || echo 0; }

test_manager_backup() {
	local k before after copy n exited missing loop_pid db
	mgr_repo && mgr_start && mgr_session || return
	db=$MSTATE/records.db
	: >"$TD/done"
	backup_loop &
	loop_pid=$!
	for _ in $(seq 1 100); do
		[ "$(done_count)" -ge 5 ] && break
		sleep 0.1
	done
	[ "$(done_count)" -ge 5 ] || bad "the calls did not start: $(cat "$TD/loop.failed" 2>/dev/null)"

	for k in 1 2 3; do
		copy=$TD/backup-$k.db
		before=$(done_count)
		# the documented command; umask 077: the copy holds the commands' output
		(umask 077 && as_user sqlite3 -readonly "$db" "VACUUM INTO '$copy'") >"$OUT" 2>"$ERR"
		assert_eq "backup $k: exit code (stderr: $(head -c 300 "$ERR"))" 0 "$?"
		after=$(done_count)
		assert_eq "backup $k: PRAGMA integrity_check" ok "$(sqlite3 -readonly "$copy" 'PRAGMA integrity_check')"
		assert_eq "backup $k: mode" 600 "$(stat -c %a "$copy")"
		assert_eq "backup $k: schema version (PRAGMA user_version)" \
			"$(as_user sqlite3 -readonly "$db" 'PRAGMA user_version')" "$(sqlite3 -readonly "$copy" 'PRAGMA user_version')"
		# Every call finished before the backup began is in it, finished; none that began after it
		# ended (the one running at its end may be there, accepted or dispatched).
		n=$(sqlite3 -readonly "$copy" 'SELECT count(*) FROM execs')
		exited=$(sqlite3 -readonly "$copy" "SELECT count(*) FROM execs WHERE state = 'exited'")
		assert_ge "backup $k: exited calls in the copy (finished before it: $before)" "$exited" "$before"
		assert_lt "backup $k: calls in the copy (finished after it: $after)" "$n" "$((after + 2))"
		echo "backup $k: $n calls ($exited exited); $before finished before, $after after" >>"$TD/backups.txt"
		sleep 0.3
	done
	touch "$TD/stop"
	wait "$loop_pid"
	[ -e "$TD/loop.failed" ] && bad "a call failed while backups were taken: $(cat "$TD/loop.failed")"

	# What a copy says is finished, the live file says the same (id, state, result).
	for k in 1 2 3; do
		missing=$(as_user sqlite3 -readonly "$db" "ATTACH '$TD/backup-$k.db' AS c;
			SELECT count(*) FROM c.execs AS b LEFT JOIN main.execs AS l
			  ON l.id = b.id AND l.state = b.state AND l.result_json IS b.result_json
			WHERE b.state NOT IN ('accepted', 'dispatched') AND l.id IS NULL")
		assert_eq "backup $k: finished calls that differ from the live records" 0 "$missing"
	done

	# The documented restore: stop the manager (here, as a crash would: the -wal stays), drop the
	# -wal and -shm of the file being replaced, put the copy in place, start.
	kill -KILL "$MGR_PID"
	wait "$MGR_PID" 2>/dev/null
	as_user rm -f "$db-wal" "$db-shm"
	as_user cp "$TD/backup-3.db" "$db"
	n=$(sqlite3 -readonly "$TD/backup-3.db" 'SELECT count(*) FROM execs')
	mgr_start || return
	mgr records --session "$SID" --limit 200
	assert_eq "records after the restore: exit code (stderr: $(head -c 300 "$ERR"))" 0 "$RC"
	assert_eq "records after the restore" "$n" "$(jr '.records | length')"
	mgr exec --session "$SID" -- 'echo after the restore'
	assert_eq "a call after the restore: exit code (stderr: $(head -c 300 "$ERR"))" 0 "$RC"
	assert_eq "a call after the restore: output" "after the restore" "$(cat "$OUT")"
	assert_eq "records.db's mode after the restore" 600 "$(stat -c %a "$db")"
	cat "$TD/backups.txt"
}
t manager_backup test_manager_backup
