#!/usr/bin/env bash
# Runs each libFuzzer binary for FUZZ_SECONDS on a temporary copy of its seed corpus
# (tests/fuzz/corpus/<name>/; the committed seeds are never modified). Crash inputs of the last run
# are kept in build/fuzz/artifacts/<name>/. Usage: run.sh FUZZ_SECONDS BINARY...
# Exits non-zero when any target crashed, leaked, timed out or ran out of memory.
set -u
secs=${1:?usage: run.sh FUZZ_SECONDS BINARY...}
shift
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
failed=()
for bin in "$@"; do
	name=$(basename "$bin")
	work=$(mktemp -d "${TMPDIR:-/tmp}/fuzz-$name.XXXXXX") || exit 1
	artifacts=$(dirname "$bin")/artifacts/$name
	rm -rf "$artifacts"  # only this run's findings count
	mkdir -p "$artifacts"
	if [ -d "$here/corpus/$name" ]; then
		cp -r "$here/corpus/$name/." "$work/"
	else
		echo "fuzz: $name has no seed corpus in tests/fuzz/corpus/$name (starting empty)" >&2
	fi
	echo "== $name: ${secs}s on $(find "$work" -type f | wc -l) seeds"
	"$bin" -max_total_time="$secs" -rss_limit_mb=2048 -timeout=10 -print_final_stats=1 \
		-artifact_prefix="$artifacts/" "$work" 2>"$work.log"
	rc=$?
	grep -E '^(#[0-9]+ *DONE|stat::number_of_executed_units|stat::peak_rss_mb)' "$work.log"
	if [ "$rc" -ne 0 ] || [ -n "$(ls -A "$artifacts")" ]; then
		echo "fuzz: $name FAILED (exit $rc); inputs in $artifacts, log follows" >&2
		tail -n 60 "$work.log" >&2
		failed+=("$name")
	fi
	rm -rf "$work" "$work.log"
done
if [ "${#failed[@]}" -gt 0 ]; then
	echo "fuzz: failed: ${failed[*]}" >&2
	exit 1
fi
echo "fuzz: $# targets passed (${secs}s each)"
