#!/usr/bin/env bash
# Runs the cmocka programs of one folder: BUILD/tests/unit (make test-unit) or BUILD/tests/integration
# (the C integration tests, which find the programs through SANDBOX_AGENT and SANDBOX_MANAGER; make
# test-integration). Usage: run-cmocka.sh BUILD unit|integration [NAME]: NAME (test_records) runs that
# program only. Fails when any test fails or nothing ran; the last lines name every skipped case.
set -u
build=${1:-build}
set_name=${2:-unit}
only=${3:-}
export SANDBOX_AGENT=$build/sandbox-agent SANDBOX_MANAGER=$build/sandbox-manager
case $set_name in
unit | integration) ;;
*)
	echo "usage: run-cmocka.sh BUILD unit|integration [NAME]" >&2
	exit 2
	;;
esac
failed=0
ran=0
skipped=()
out=$(mktemp) || exit 1
trap 'rm -f "$out"' EXIT
for t in "$build/tests/$set_name"/test_*; do
	[ -x "$t" ] || continue
	[ -z "$only" ] || [ "$(basename "$t")" = "$only" ] || continue
	ran=$((ran + 1))
	# The output is shown as it comes and kept, for the summary of skipped cases.
	"$t" 2>&1 | tee "$out"
	if [ "${PIPESTATUS[0]}" -ne 0 ]; then
		echo "cmocka: FAILED: $t" >&2
		failed=$((failed + 1))
	fi
	while read -r line; do
		skipped+=("$(basename "$t"): ${line#*\] }")
	done < <(grep -F '[  SKIPPED ]' "$out" | grep -v 'test(s), listed below' | sort -u)
done
if [ "$ran" -eq 0 ]; then
	echo "cmocka: no test program${only:+ named $only} in $build/tests/$set_name" >&2
	exit 1
fi
if [ ${#skipped[@]} -gt 0 ]; then
	echo "cmocka: skipped (each says why above it; under CI=true a skip for a missing setup step fails):"
	printf '  %s\n' "${skipped[@]}"
fi
echo "cmocka ($set_name): $((ran - failed)) programs passed, $failed failed, ${#skipped[@]} cases skipped"
[ "$failed" -eq 0 ]
