#!/usr/bin/env bash
# Integration tests against real namespaces: the C programs BUILD/tests/integration/test_* (cmocka,
# tests/run-cmocka.sh), then every test in tests/integration/setup_*.sh, agent_*.sh, manager_*.sh and
# cluster_*.sh, each run as root and as an unprivileged user. Usage: run.sh BUILD_DIR [NAME] (SANITIZE=1 for
# build/asan). NAME selects: a file (manager_lock, or manager_lock.sh: the cases it registers or
# defines), a C program (test_agent_serve), or one case by its name (kubernetes_session); IT_FILTER=ERE
# selects cases by name as well, IT_FILES by file (below). Exits non-zero when any test fails or NAME names nothing; the last
# line is always "integration: N passed, N failed".
set -u
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
build=${1:-build}
only=${2:-}

# NAME, read: IT_FILE (a file's cases), a C program (run alone, here), or IT_FILTER (a case's name).
IT_FILE=
if [ -n "$only" ]; then
	if [ -f "$here/${only%.sh}.sh" ] && [[ $only != lib* ]]; then
		IT_FILE=$here/${only%.sh}.sh
	elif [[ $only == test_* ]]; then
		exec bash "$here/../run-cmocka.sh" "$build" integration "$only"
	else
		IT_FILTER="^${only}\$"
	fi
fi
# shellcheck source=tests/integration/lib.sh
. "$here/lib.sh"
# shellcheck source=tests/integration/lib_manager.sh
. "$here/lib_manager.sh"
# shellcheck source=tests/integration/lib_podman.sh
. "$here/lib_podman.sh"

for tool in jq timeout setpriv pgrep python3 sha256sum; do
	if ! command -v "$tool" >/dev/null; then
		echo "integration: $tool is missing (install it: see scripts/deps.sh)" >&2
		echo "integration: 0 passed, 1 failed"
		exit 1
	fi
done

# A pattern that names no file is a typo that would drop its cases unseen: refused.
read -ra it_pats <<<"${IT_FILES:-}"
for pat in "${it_pats[@]}"; do
	compgen -G "$here/$pat.sh" >/dev/null || {
		echo "integration: IT_FILES names no file: $pat" >&2
		echo "integration: 0 passed, 1 failed"
		exit 1
	}
done
if [ -z "$only" ]; then
	bash "$here/../run-cmocka.sh" "$build" integration || c_failed=1
fi
it_setup "$build"
echo "integration: agent $AGENT, modes: $IT_MODES, host pid ns $HOST_PIDNS, user ns $HOST_USERNS"
# One podman service and an up-to-date image for the tests that need a container runtime (root only).
podman_setup

# IT_FILES="agent_* manager_session ...": only the files whose names (without .sh) match one of these
# patterns (make test-asan's named set); each file's time is printed, to see where a run's minutes go.
it_file_selected() {
	local name=${1%.sh} pat pats
	[ -n "${IT_FILES:-}" ] || return 0
	read -ra pats <<<"$IT_FILES" # split on blanks, no pathname expansion
	for pat in "${pats[@]}"; do
		# shellcheck disable=SC2053 # a glob pattern, on purpose
		[[ $name == $pat ]] && return 0
	done
	return 1
}
for f in "$here"/setup_*.sh "$here"/agent_*.sh "$here"/manager_*.sh "$here"/cluster_*.sh; do
	it_file_selected "$(basename "$f")" || continue
	file_start=$SECONDS
	echo "== $(basename "$f")"
	# shellcheck source=/dev/null
	. "$f"
	echo "== $(basename "$f"): $((SECONDS - file_start)) s"
done

if [ -n "$only" ] && [ $((IT_PASS + IT_FAIL + IT_SKIP)) -eq 0 ]; then
	echo "integration: no file, C program or case is named '$only' (tests/README.md)" >&2
	IT_FAIL=$((IT_FAIL + 1))
	IT_FAILED+=("$only: nothing by that name")
fi
if [ "${c_failed:-0}" -eq 1 ]; then
	IT_FAIL=$((IT_FAIL + 1))
	IT_FAILED+=("the C integration programs (tests/run-cmocka.sh, above)")
fi
if [ "$IT_SKIP" -gt 0 ]; then
	echo "skipped (by design, or for want of a setup step outside CI):"
	printf '  %s\n' "${IT_SKIPPED[@]}"
fi
if [ "$IT_FAIL" -gt 0 ]; then
	echo "failed:"
	printf '  %s\n' "${IT_FAILED[@]}"
fi
[ "$IT_SKIP" -gt 0 ] && echo "integration: $IT_SKIP skipped"
echo "integration: $IT_PASS passed, $IT_FAIL failed"
[ "$IT_FAIL" -eq 0 ] && [ "$IT_PASS" -gt 0 ]
