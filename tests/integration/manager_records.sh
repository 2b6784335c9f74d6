# shellcheck shell=bash
# Invariant 13: no answer grows without bound, so a command cannot push its own audit trail out of an
# operator's reach. The review's break: three calls printing 2 MB of control characters each (6 bytes
# apiece as JSON escapes) pushed `records --session` over the control socket's cap, and it failed for
# good. Here the same calls run through `sandbox-manager exec`; the records stay readable, paged, with
# the whole streams' byte counts and digests.

# 2,000,000 bytes of control characters on each stream (each a 6-byte \u00XX escape in JSON); stderr
# ends with the call's name.
records_flood_gen() { yes "$(printf '\001\002\003\033\037')" | tr -d '\n' | head -c 2000000; }
records_flood_cmd() {
	echo "g() { yes \"\$(printf '\\001\\002\\003\\033\\037')\" | tr -d '\\n' | head -c 2000000; }; g; g >&2; echo call-$1 >&2"
}

test_manager_records_flood() {
	local i ids=() want_sha page before seen=() n
	want_sha=$(records_flood_gen | sha256sum | cut -d' ' -f1)
	mgr_repo && mgr_start && mgr_session
	for i in 1 2 3; do
		mgr exec --session "$SID" --json -- "$(records_flood_cmd "$i")"
		assert_eq "flood call $i: exit code (stderr: $(head -c 300 "$ERR"))" 0 "$RC"
		assert_json '[.stdout_bytes, .stderr_bytes]' '[2000000,2000007]'
		ids+=("$(jr .exec_id)")
	done
	# newest first, every record at once (three fit one page), each stream bounded in the record
	mgr records --session "$SID"
	assert_eq "records --session: exit code (stderr: $(head -c 300 "$ERR"))" 0 "$RC"
	jq -e . "$OUT" >/dev/null || bad "records --session: the answer is not JSON: $(head -c 300 "$OUT")"
	assert_json '[.records[].exec_id]' "$(printf '%s\n' "${ids[2]}" "${ids[1]}" "${ids[0]}" | jq -Rsc 'split("\n")[:-1]')"
	assert_json '[.records[].state]' '["exited","exited","exited"]'
	assert_json '[.records[].result.stdout_bytes]' '[2000000,2000000,2000000]'
	assert_json '[.records[].result.stdout_truncated]' '[true,true,true]'
	assert_json "[.records[].result.stdout_sha256] | unique" "[\"$want_sha\"]"
	assert_json '[.records[] | .result.stdout_sha256 == .receipt.stdout_sha256]' '[true,true,true]'
	assert_json '[.records[].result.stderr_truncated]' '[true,true,true]'
	assert_json '[.records[].result.stderr[-7:]]' '["call-3\n","call-2\n","call-1\n"]'
	assert_json '[.records[] | .result.stderr_sha256 == .receipt.stderr_sha256]' '[true,true,true]'
	assert_json .next_before null
	# the stored text is bounded (64 KiB by default), not the agent's 1 MiB answer
	n=$(jq '[.records[].result.stdout | length] | max' "$OUT")
	assert_lt "characters of stdout kept in a record" "$n" 70000
	# one exec by id
	mgr records --exec "${ids[0]}"
	assert_eq "records --exec: exit code (stderr: $(head -c 300 "$ERR"))" 0 "$RC"
	assert_json '[.records[].exec_id]' "[\"${ids[0]}\"]"
	assert_json '.records[0].result.stdout_bytes' 2000000
	# paging walks every record exactly once, newest first, and reaches the first
	before=""
	for page in 1 2 3 4 5; do
		if [ -z "$before" ]; then mgr records --session "$SID" --limit 1; else
			mgr records --session "$SID" --limit 1 --before "$before"; fi
		assert_eq "page $page: exit code (stderr: $(head -c 300 "$ERR"))" 0 "$RC"
		assert_json '.records | length' 1
		seen+=("$(jr '.records[0].exec_id')")
		before=$(jr '.next_before // empty')
		[ -z "$before" ] && break
	done
	assert_eq "pages walked newest first to the first record" "${ids[2]} ${ids[1]} ${ids[0]}" "${seen[*]}"
	# filters and refusals
	mgr records --session "$SID" --state exited --limit 2
	assert_json '[.records[].exec_id]' "[\"${ids[2]}\",\"${ids[1]}\"]"
	assert_json .next_before "\"${ids[1]}\""
	mgr records --session "$SID" --state uncertain
	assert_json '.records' '[]'
	mgr records --session "$SID" --state running
	assert_eq "an unknown state: exit code" 125 "$RC"
	assert_match "an unknown state: message" "state must be one of" "$(cat "$ERR")"
	mgr records --session "$SID" --before 0123456789abcdef
	assert_eq "before an exec of no such id: exit code" 125 "$RC"
	# nothing was refused for its size, and nothing was silently dropped
	if grep -q "was not sent" "$TD/manager.log"; then bad "the manager dropped an answer: $(grep 'was not sent' "$TD/manager.log")"; fi
	# a deleted session's records stay readable: they are its audit trail
	mgr session delete --session "$SID"
	assert_eq "session delete: exit code (stderr: $(head -c 300 "$ERR"))" 0 "$RC"
	mgr records --session "$SID"
	assert_eq "records of a deleted session: exit code (stderr: $(head -c 300 "$ERR"))" 0 "$RC"
	assert_json '.records | length' 3
}
t manager_records_flood test_manager_records_flood

# R7: "ok" means the record is committed. A fault in the records (a trigger refusing every final
# state, put in from outside as a failing disk would refuse the write) makes the call's answer an
# error that says its outcome is not on record, never the command's output with exit code 0.
test_manager_records_commit_failure() {
	local m
	m=$(unique_marker)
	mgr_repo && mgr_start && mgr_session
	mgr exec --session "$SID" -- 'echo first'
	assert_eq "before the fault: exit code (stderr: $(head -c 300 "$ERR"))" 0 "$RC"
	as_user python3 - "$MSTATE/records.db" <<'PY'
import sqlite3, sys
db = sqlite3.connect(sys.argv[1])
db.execute("CREATE TRIGGER it_fail_finish BEFORE UPDATE OF state ON execs"
           " WHEN NEW.state NOT IN ('accepted', 'dispatched')"
           " BEGIN SELECT RAISE(ABORT, 'injected: the final record cannot be written'); END")
db.commit()
PY
	mgr exec --session "$SID" -- "echo ran.$m"
	assert_eq "the final record did not commit: exit code" 125 "$RC"
	assert_match "the answer says so" "could not be recorded.*injected" "$(cat "$ERR")"
	# stdout holds the command's own output, streamed while it ran (docs/operations.md "Live
	# output"), and nothing of a result: none was recorded
	assert_eq "stdout: the live output only, no result" "ran.$m" "$(cat "$OUT")"
	grep -q "is not on record" "$TD/manager.log" || bad "the manager did not log the lost record"
	mgr records --session "$SID" --limit 1
	assert_json '.records[0].state' '"dispatched"'
}
t manager_records_commit_failure test_manager_records_commit_failure
