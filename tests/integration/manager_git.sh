# shellcheck shell=bash
# Git inside a real sandbox: what the mount plan supports works, what it does not fails with a clear
# git error and leaves the repository intact.

test_manager_git_operations() {
	mgr_repo && mgr_start && mgr_session
	mgr exec --session "$SID" --turn 3 -- 'set -e
		g() { git -c user.name=agent -c user.email=agent@example.invalid "$@"; }
		echo "replicas fix" >> README.md
		git status --short
		git diff --stat | tail -n 1
		git add README.md && g commit -qm "fix replicas" && echo committed
		git branch feature && git branch --list feature
		echo scratch > payments/service.yaml && git stash -q && git stash list | wc -l && git stash pop -q && echo popped
		git checkout -- payments/service.yaml && git status --short | wc -l
		g commit -qm "second" --allow-empty
		g rebase -q HEAD~1 && echo rebased
		git log --oneline | wc -l'
	assert_eq "exit code (stderr: $(head -c 400 "$ERR"))" 0 "$RC"
	assert_lines "$(cat "$OUT")" " M README.md" " 1 file changed, 1 insertion\(\+\)" committed "  feature" 1 popped 0 rebased 3
	mgr records --session "$SID"
	assert_json '.records[0].turn' 3
	# Not supported by the plan: the repository's config is read-only. A clear git error, no change.
	mgr exec --session "$SID" -- 'git config core.editor vi; echo "rc=$?"'
	assert_match "git config refused" "rc=[1-9]" "$(cat "$OUT")"
	assert_match "the reason" "Read-only file system|could not lock config file" "$(cat "$ERR")"
	as_user git -C "$WT" config --get core.editor >/dev/null && bad "core.editor was written"
	mgr exec --session "$SID" -- 'git log --oneline | wc -l'
	assert_eq "the repository is intact" 3 "$(cat "$OUT")"
}
t manager_git_operations test_manager_git_operations

# Issue 13, R3: root's trusted git reads nothing through a link a command planted. packed-refs.d/ is
# writable in every sandbox of the identity; a command replaces the packed refs with a link to a file
# only the manager can read (git would quote its first line in an error). The sweep after the call
# removes the link, logged with the session (issue 26, N5), and the delete's git may read only the
# repository anyway (gitrun read_roots): the marker appears in no answer and no log line.
test_manager_git_planted_link_not_read() {
	local m secret
	m=$(unique_marker)
	secret=$TD/secret.$m
	printf 'SECRET-%s hunter2\n' "$m" >"$secret" && chown "$RUN_USER:" "$secret" && chmod 0600 "$secret"
	mgr_repo && mgr_start && mgr_session
	mgr exec --session "$SID" -- 'git log --oneline | wc -l'
	assert_eq "a call first (exit code)" 0 "$RC"
	mgr exec --session "$SID" -- "rm -f \"\$(git rev-parse --git-common-dir)/packed-refs.d/packed-refs\" &&
		ln -s '$secret' \"\$(git rev-parse --git-common-dir)/packed-refs.d/packed-refs\" && echo planted"
	assert_eq "the command planted the link (stderr: $(head -c 300 "$ERR"))" planted "$(cat "$OUT")"
	assert_match "the sweep removed it, naming the session" \
		"removed a symbolic link at [^\"]*packed-refs.d/packed-refs -> [^\"]*, planted by a command of session $SID" \
		"$(cat "$TD/manager.log")"
	mgr session delete --session "$SID"
	assert_eq "the delete (stderr: $(head -c 300 "$ERR"))" 0 "$RC"
	grep -q "SECRET-$m" "$OUT" "$ERR" "$TD/manager.log" && bad "the secret reached an answer or the log"
	assert_eq "the secret is unchanged" "SECRET-$m hunter2" "$(cat "$secret")"
}
t manager_git_planted_link_not_read test_manager_git_planted_link_not_read

# Issue 26, N5: a session's metadata decides only that session. A command of session A writes an include
# into its own config.worktree and plants a link and a FIFO among the identity's shared refs. Session B
# (created before, no sandbox yet) and a new session C still work; the log names A as the planter; A's
# own next sandbox is refused for its config.worktree, naming A.
test_manager_git_planted_decides_its_session() {
	local a b i
	mgr_repo && mgr_start && mgr_session
	a=$SID
	mgr_session
	b=$SID
	SID=$a
	mgr exec --session "$a" -- 'set -e
		git config --file "$(git rev-parse --git-dir)/config.worktree" include.path /etc/gitconfig
		c=$(git rev-parse --git-common-dir)
		ln -s /etc/passwd "$c/refs/heads/planted-link"
		mkfifo "$c/refs/heads/planted-fifo"
		echo planted'
	assert_eq "A planted (stderr: $(head -c 300 "$ERR"))" planted "$(cat "$OUT")"
	assert_match "the log names A for the link" \
		"removed a symbolic link at [^\"]*refs/heads/planted-link -> /etc/passwd, planted by a command of session $a" \
		"$(cat "$TD/manager.log")"
	assert_match "the log names A for the FIFO" \
		"removed a FIFO at [^\"]*refs/heads/planted-fifo, planted by a command of session $a" "$(cat "$TD/manager.log")"
	mgr exec --session "$b" -- 'git status --short | wc -l'
	assert_eq "B's next call runs (stderr: $(head -c 300 "$ERR"))" 0 "$RC"
	mgr session create --identity alice --repo "$REPO"
	assert_eq "a new session of the identity (stderr: $(head -c 300 "$ERR"))" 0 "$RC"
	mgr exec --session "$(jr .session)" -- 'git log --oneline | wc -l'
	assert_eq "its first call" 0 "$RC"
	# A's sandbox is replaced (its agent killed): the new one is prepared, and A's own metadata refuses it.
	sandbox_agent_kill
	# SIGKILL lands asynchronously: a call sent before the agent is gone would be in doubt (uncertain).
	for i in $(seq 1 50); do pgrep -f -- "--state-dir $MSTATE/sandboxes/$SID" >/dev/null || break; sleep 0.1; done
	mgr exec --session "$a" -- true
	assert_match "A's next sandbox is refused, naming A" \
		"checking the workspace of session $a: repository refused: config key include.path" "$(cat "$OUT" "$ERR")"
	# Its keys were made beside the workspace's check (sandbox.c keys_and_workspace): the refusal
	# takes them back with the generation's private directory; no directory of A is left.
	assert_eq "no private directory of A's refused generation" "" \
		"$(find "$MSTATE/sandboxes" -maxdepth 1 -name "$a.g*" -printf '%f ')"
	mgr exec --session "$b" -- true
	assert_eq "B still runs" 0 "$RC"
}
t manager_git_planted_decides_its_session test_manager_git_planted_decides_its_session

# Issue 13, R3: after a restart the manager reads a sandbox's receipt key back from state/, which
# belongs to the sandbox's uid. A link there (to a 32-byte file the manager can read) or a second name
# of another file is refused, never used as the HMAC key: the exec it was for is settled uncertain,
# with the reason, and not run again.
test_manager_receipt_key_replaced() {
	local m i key secret s1 w1
	m=$(unique_marker)
	secret=$TD/key.$m
	head -c 32 /dev/urandom >"$secret" && chown "$RUN_USER:" "$secret" && chmod 0600 "$secret"
	mgr_repo && mgr_start && mgr_session
	s1=$SID w1=$WT
	mgr_session
	mgr_bg_exec a "echo run >> \"\$TMPDIR/runs.$m\"; sleep 2; echo done.$m" "$s1"
	mgr_bg_exec b "echo run >> \"\$TMPDIR/runs.$m\"; sleep 2; echo done.$m" "$SID"
	for i in $(seq 1 50); do [ -s "$w1/.sandbox-tmp/runs.$m" ] && [ -s "$WT/.sandbox-tmp/runs.$m" ] && break; sleep 0.1; done
	kill -KILL "$MGR_PID"
	wait_bg_execs_allow_fail
	key=$(echo "$MSTATE/sandboxes/$s1".g*/state/receipt.key)
	rm -f "$key" && ln -s "$secret" "$key" || bad "could not plant the link at $key"
	key=$(echo "$MSTATE/sandboxes/$SID".g*/state/receipt.key)
	rm -f "$key" && ln "$secret" "$key" || bad "could not plant the hard link at $key"
	sleep 2.5
	mgr_start
	mgr records --session "$s1"
	assert_json '[.records[].state]' '["uncertain"]'
	assert_match "why (link)" "receipt key .*cannot be opened: a symbolic link" "$(cat "$OUT")"
	mgr records --session "$SID"
	assert_json '[.records[].state]' '["uncertain"]'
	assert_match "why (hard link)" "receipt key .*refused: it has 2 names" "$(cat "$OUT")"
	assert_eq "each command ran once" 1 "$(wc -l <"$w1/.sandbox-tmp/runs.$m")"
	assert_eq "each command ran once" 1 "$(wc -l <"$WT/.sandbox-tmp/runs.$m")"
}
t manager_receipt_key_replaced test_manager_receipt_key_replaced
