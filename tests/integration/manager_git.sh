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
