#!/usr/bin/env bash
# The tests' setup step (`make test-setup`; `make test`, `make test-unit` and `make test-integration`
# run it before any test): everything a test assumes that a clean clone does not hold. As root it
# creates what is missing; otherwise it prints the exact commands to run and fails, as deps.sh does.
# One list, read both ways: `--reset` (root, .ci/run) removes every item again, so that CI starts
# from what a fresh machine has and a step missing here fails CI instead of hiding behind an earlier run.
#   test-setup.sh          check every item; as root create what is missing
#   test-setup.sh --reset  remove every item (the test user and its home, the npm trees, leftovers
#                          of earlier runs outside the clone, the programs' musl libraries, which
#                          `make deps` builds again in seconds); kept: the Debian packages, npm's
#                          download cache and the Kubernetes build cache (keyed by version)
set -euo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$repo"

# The unprivileged user the integration harness repeats every test as (tests/integration/lib.sh
# IT_USER), and that owns the tests' PostgreSQL servers when root runs them (tests/support/pg.sh:
# initdb refuses root). Only a root run needs it: an unprivileged run is its own test user.
test_user=sbtest

# The tun device: slirp4netns, the process backend's network `open`, opens it as the manager's user;
# udev makes it 0666 on a standard Debian, some machines (these) have it 0600, root's only.
tun=/dev/net/tun
tun_open() { [ "$(stat -c %a "$tun" 2>/dev/null)" = 666 ]; }

# The npm trees, each from its lockfile: the MCP SDK client, its conformance suite and inspector
# (tests/mcp), Claude Code and the Agent SDK (tests/frameworks/claude), Codex (tests/frameworks/codex:
# --ignore-scripts, its binary comes in the package and its install script would download).
npm_trees=(tests/mcp tests/frameworks/claude tests/frameworks/codex)
npm_ci_args() {
	case $1 in
	tests/frameworks/codex) echo "--no-audit --no-fund --ignore-scripts" ;;
	*) echo "--no-audit --no-fund" ;;
	esac
}

# An npm tree is current when npm's own record of it (node_modules/.package-lock.json, written by
# every npm ci) is at least as new as the lockfile it came from.
npm_tree_current() {
	local hidden=$1/node_modules/.package-lock.json
	[ -f "$hidden" ] && [ ! "$1/package-lock.json" -nt "$hidden" ]
}

# Leftovers of earlier runs outside the clone: integration roots and their state, home and store
# directories (tests/integration/lib*.sh, manager_*.sh), the unit tests' PostgreSQL (pgtest.h), the
# test user's default agent directory (/tmp/sandbox-agent-UID; root's may be a real agent's, kept).
# A fresh machine has none.
leftover_globs=(/var/tmp/sandbox-it.* /var/tmp/sbu.* /tmp/sbm.* /tmp/sbh.* /tmp/sbpg.* /tmp/pgtest.*
	/var/cache/infra-sandbox/musl-libs-*)

is_root() { [ "$(id -u)" -eq 0 ]; }

# user_pids UID: the processes running as UID, from /proc (a fresh machine may not have procps yet).
user_pids() {
	local p pids=
	for p in /proc/[0-9]*; do
		[ "$(stat -c %u "$p" 2>/dev/null)" = "$1" ] && pids+="${p#/proc/} "
	done
	echo "$pids"
}

reset() {
	local t pids
	is_root || { echo "test-setup: --reset removes a user: run it as root" >&2; exit 1; }
	if id "$test_user" >/dev/null 2>&1; then
		pids=$(user_pids "$(id -u "$test_user")")
		if [ -n "$pids" ]; then
			echo "test-setup: $test_user still runs processes ($pids): end them (another run's tests?) and retry" >&2
			exit 1
		fi
		leftover_globs+=("/tmp/sandbox-agent-$(id -u "$test_user")")
		userdel -r "$test_user" 2>/dev/null || userdel "$test_user"
		echo "test-setup: removed the user $test_user and its home"
	fi
	# What a machine without udev's rule has (CI's do): the setup step must open it again.
	if [ "${CI:-}" = true ] && [ -c "$tun" ]; then
		chmod 0600 "$tun"
		echo "test-setup: $tun back to 0600"
	fi
	for t in "${npm_trees[@]}"; do
		[ -d "$t/node_modules" ] || continue
		rm -rf "$t/node_modules"
		echo "test-setup: removed $t/node_modules"
	done
	for t in "${leftover_globs[@]}"; do
		# An unmatched glob stays the pattern itself: only what exists is removed.
		[ -e "$t" ] || continue
		rm -rf -- "$t"
		echo "test-setup: removed $t (left by an earlier run)"
	done
}

# What is missing, one item per line: "user", or "npm DIR".
missing_items() {
	local t
	if is_root && ! id "$test_user" >/dev/null 2>&1; then
		echo user
	fi
	tun_open || echo tun
	for t in "${npm_trees[@]}"; do
		npm_tree_current "$t" || echo "npm $t"
	done
}

# say ITEM: the command that creates ITEM, for a person to run.
say() {
	case $1 in
	user) echo "useradd -m -s /bin/bash $test_user" ;;
	tun) echo "chmod 0666 $tun   # as root; udev's own mode on a standard Debian" ;;
	npm\ *) echo "(cd $repo/${1#npm } && npm ci $(npm_ci_args "${1#npm }"))" ;;
	esac
}

# make ITEM: creates ITEM (root).
make_item() {
	local dir
	case $1 in
	user) useradd -m -s /bin/bash "$test_user" ;;
	tun) chmod 0666 "$tun" ;;
	npm\ *)
		dir=${1#npm }
		# shellcheck disable=SC2046 # the fixed option words
		(cd "$repo/$dir" && npm ci $(npm_ci_args "$dir") >/dev/null)
		;;
	esac
}

# The test user reads the clone as it runs every test (node_modules, scripts, fixtures): a clone
# under a 0700 home cannot be tested as root and that user, and nothing here changes its modes.
check_clone_readable() {
	is_root || return 0
	if ! runuser -u "$test_user" -- test -r "$repo/tests/mcp/package.json"; then
		echo "test-setup: $test_user cannot read $repo (a directory above it is closed to other users):" >&2
		echo "  clone the repository where every user can read it (e.g. /srv or /var/tmp), or open that directory (chmod o+x)" >&2
		exit 1
	fi
}

setup() {
	local items item
	bash "$repo/scripts/deps.sh"
	items=$(missing_items)
	if [ -n "$items" ] && ! is_root; then
		echo "test-setup: the tests need these steps first; run them:" >&2
		while read -r item; do say "$item"; done <<<"$items" | sed 's/^/  /' >&2
		exit 1
	fi
	while read -r item; do
		[ -n "$item" ] || continue
		echo "test-setup: $(say "$item")"
		make_item "$item"
	done <<<"$items"
	check_clone_readable
}

case ${1:-} in
'') setup ;;
--reset) reset ;;
*)
	echo "usage: test-setup.sh [--reset]" >&2
	exit 2
	;;
esac
