#!/usr/bin/env bash
# Runs every cmocka binary in BUILD/tests/unit and BUILD/tests/integration (C integration tests
# find the programs through SANDBOX_AGENT and SANDBOX_MANAGER); fails when any test fails.
set -u
build=${1:-build}
export SANDBOX_AGENT=$build/sandbox-agent SANDBOX_MANAGER=$build/sandbox-manager
failed=0
ran=0
for t in "$build"/tests/unit/test_* "$build"/tests/integration/test_*; do
	[ -x "$t" ] || continue
	ran=$((ran + 1))
	if ! "$t"; then
		echo "cmocka: FAILED: $t" >&2
		failed=$((failed + 1))
	fi
done
if [ "$ran" -eq 0 ]; then
	echo "cmocka: no test binaries in $build/tests" >&2
	exit 1
fi
echo "cmocka: $((ran - failed)) binaries passed, $failed failed"
[ "$failed" -eq 0 ]
