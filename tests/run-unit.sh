#!/usr/bin/env bash
# Runs every cmocka unit-test binary in BUILD/tests/unit; fails when any test fails.
set -u
build=${1:-build}
failed=0
ran=0
for t in "$build"/tests/unit/test_*; do
	[ -x "$t" ] || continue
	ran=$((ran + 1))
	if ! "$t"; then
		echo "unit: FAILED: $t" >&2
		failed=$((failed + 1))
	fi
done
if [ "$ran" -eq 0 ]; then
	echo "unit: no test binaries in $build/tests/unit" >&2
	exit 1
fi
echo "unit: $((ran - failed)) binaries passed, $failed failed"
[ "$failed" -eq 0 ]
