#!/usr/bin/env bash
# Integration tests against real namespaces: every test in tests/integration/agent_*.sh, manager_*.sh
# and cluster_*.sh, each run as root and as an unprivileged user. Usage: run.sh BUILD_DIR (SANITIZE=1
# for build/asan). IT_FILTER=ERE runs only the tests whose names match. Exits non-zero when any test
# fails; the last line is always "integration: N passed, N failed".
set -u
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
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

it_setup "${1:-build}"
echo "integration: agent $AGENT, modes: $IT_MODES, host pid ns $HOST_PIDNS, user ns $HOST_USERNS"
# One podman service and an up-to-date image for the tests that need a container runtime (root only).
podman_setup

for f in "$here"/agent_*.sh "$here"/manager_*.sh "$here"/cluster_*.sh; do
	echo "== $(basename "$f")"
	# shellcheck source=/dev/null
	. "$f"
done

if [ "$IT_FAIL" -gt 0 ]; then
	echo "failed:"
	printf '  %s\n' "${IT_FAILED[@]}"
fi
[ "$IT_SKIP" -gt 0 ] && echo "integration: $IT_SKIP skipped"
echo "integration: $IT_PASS passed, $IT_FAIL failed"
[ "$IT_FAIL" -eq 0 ] && [ "$IT_PASS" -gt 0 ]
