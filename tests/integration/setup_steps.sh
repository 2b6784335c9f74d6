# shellcheck shell=bash
# The tests' setup step itself (scripts/test-setup.sh, issue 25), on a copy of the clone's layout in
# the test's directory, so nothing of the real clone or machine changes: unprivileged, a missing or
# stale npm tree makes it print the exact command and fail, and a current tree passes silently; as root
# (nothing missing), a clone the test user cannot read is refused with the fix. The creation itself
# (useradd, npm ci) is what .ci/run's fresh-machine step proves on every CI run.

SETUP_REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)

# setup_copy DIR: the setup script, deps.sh and the three npm folders' lockfiles, each tree current.
setup_copy() {
	local d
	mkdir -p "$1/scripts" && cp "$SETUP_REPO/scripts/test-setup.sh" "$SETUP_REPO/scripts/deps.sh" "$1/scripts/" || return 1
	for d in tests/mcp tests/frameworks/claude tests/frameworks/codex; do
		mkdir -p "$1/$d/node_modules" && cp "$SETUP_REPO/$d/package.json" "$SETUP_REPO/$d/package-lock.json" "$1/$d/" &&
			touch "$1/$d/node_modules/.package-lock.json" || return 1
	done
	touch -d '1 hour ago' "$1"/tests/mcp/package-lock.json "$1"/tests/frameworks/*/package-lock.json
}

test_setup_steps() {
	local r=$TD/repo out
	setup_copy "$r" && chown -R "$RUN_USER:" "$r" || { bad "cannot copy the layout"; return; }
	if [ "$RUN_UID" -eq 0 ]; then
		# Root, everything current: nothing to do, then refused when the test user cannot read the clone.
		out=$(bash "$r/scripts/test-setup.sh" 2>&1)
		assert_eq "exit code, all current" 0 "$?"
		assert_eq "output, all current" "" "$out"
		chmod 0700 "$TD"
		out=$(bash "$r/scripts/test-setup.sh" 2>&1)
		assert_eq "exit code, a clone closed to $IT_USER" 1 "$?"
		assert_match "the refusal" "$IT_USER cannot read $r .*chmod o\\+x" "$out"
		chmod 0755 "$TD"
		return
	fi
	out=$(as_user bash "$r/scripts/test-setup.sh" 2>&1)
	assert_eq "exit code, all current" 0 "$?"
	assert_eq "output, all current" "" "$out"
	# A missing tree and a lockfile newer than its tree: each named with the exact command, nothing run.
	as_user rm -r "$r/tests/frameworks/codex/node_modules"
	as_user touch "$r/tests/mcp/package-lock.json"
	out=$(as_user bash "$r/scripts/test-setup.sh" 2>&1)
	assert_eq "exit code, two trees missing" 1 "$?"
	assert_match "the mcp step" "  \\(cd $r/tests/mcp && npm ci --no-audit --no-fund\\)" "$out"
	assert_match "the codex step" "  \\(cd $r/tests/frameworks/codex && npm ci --no-audit --no-fund --ignore-scripts\\)" "$out"
	[[ $out == *"tests/frameworks/claude"* ]] && bad "a current tree was named: $out"
	[ -e "$r/tests/frameworks/codex/node_modules" ] && bad "the unprivileged setup created a tree"
	out=$(as_user bash "$r/scripts/test-setup.sh" --reset 2>&1)
	assert_eq "exit code, --reset unprivileged" 1 "$?"
	assert_match "the --reset refusal" "run it as root" "$out"
	[ -e "$r/tests/mcp/node_modules" ] || bad "the refused --reset removed a tree"
}
t setup_steps test_setup_steps
