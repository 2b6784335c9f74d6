#!/usr/bin/env bash
# `make mutants` (issue 27): does each guarding check have a test that notices when it is gone?
# For every tests/mutations/M*.patch (or those named in MUTANTS=M1,M15): a copy of HEAD (git archive,
# under /var/tmp), the patch applied (one that no longer applies is "stale"), only what its tests need
# built, its tests run (the patch's "Tests:" line: test_* is a cmocka program of tests/unit/ or
# tests/integration/, *_check a source check of tests/ (tests/NAME.py), anything else an integration
# case for tests/integration/run.sh), and a line:
# "caught by X", "SURVIVED", or "stale". Before that, each test runs once on the unmutated copy: a
# test that fails there proves nothing ("baseline failed", also a failure). Exits non-zero when any
# mutation survived, is stale, or could not be judged. The copies are removed; the logs stay in
# BUILD/mutants/. Usage: mutants.sh [BUILD] (MUTANTS=..., MUTANTS_JOBS=N for make -jN, default 1).
# A mutation may make a test hang (test_queue under M8): a cmocka program has MUTANTS_UNIT_SECONDS
# (120), an integration case MUTANTS_IT_SECONDS (1200); a timeout is a failure, so "caught".
set -u
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${1:-build}
jobs=${MUTANTS_JOBS:-1}
logs=$root/$build/mutants
mkdir -p "$logs" || exit 1

# The selection, in the order given (or every patch, sorted as M1, M2, ..., M8b, M9a, ...).
select_patches() {
	local id
	if [ -n "${MUTANTS:-}" ]; then
		for id in ${MUTANTS//,/ }; do
			echo "$root/tests/mutations/$id.patch"
		done
	else
		find "$root/tests/mutations" -name 'M*.patch' | sort -V
	fi
}
mapfile -t patches < <(select_patches)
for p in "${patches[@]}"; do
	[ -f "$p" ] || { echo "mutants: no mutation $(basename "$p" .patch) in tests/mutations/" >&2; exit 2; }
done
[ "${#patches[@]}" -gt 0 ] || { echo "mutants: no mutation selected" >&2; exit 2; }

tests_of() { sed -n 's/^Tests: *//p' "$1" | head -n 1; }

# What a test needs built: a cmocka program, or (for a case) the binaries, the failpoint build and
# the attack programs.
targets_of() {
	local t
	for t in "$@"; do
		if [ -f "$root/tests/$t.py" ]; then
			continue # reads the sources: nothing to build
		elif [ -f "$root/tests/unit/$t.c" ]; then
			echo "$build/tests/unit/$t"
		elif [ -f "$root/tests/integration/$t.c" ]; then
			echo "all failpoints $build/tests/integration/$t"
		else
			echo "all failpoints"
			for e in "$root"/tests/escape/*.c; do
				echo "$build/tests/escape/$(basename "$e" .c)"
			done
		fi
	done | tr ' ' '\n' | sort -u
}

# One test in tree $1, its output to $2; 0 when it passed.
run_test() {
	local tree=$1 log=$2 t=$3
	(
		cd "$tree" || exit 1
		if [ -f "tests/$t.py" ]; then
			timeout -k 5 "${MUTANTS_UNIT_SECONDS:-120}" python3 "tests/$t.py"
		elif [ -f "tests/unit/$t.c" ]; then
			timeout -k 5 "${MUTANTS_UNIT_SECONDS:-120}" bash tests/run-cmocka.sh "$build" unit "$t"
		elif [ -f "tests/integration/$t.c" ]; then
			timeout -k 5 "${MUTANTS_IT_SECONDS:-1200}" bash tests/run-cmocka.sh "$build" integration "$t"
		else
			timeout -k 5 "${MUTANTS_IT_SECONDS:-1200}" bash tests/integration/run.sh "$build" "$t"
		fi
	) >"$log" 2>&1
}

work=$(mktemp -d /var/tmp/sb-mutants.XXXXXX) || exit 1
trap 'rm -rf "$work"' EXIT
trap 'exit 130' INT TERM
# The integration harness runs cases as the test user too: the copies must be readable by it.
chmod 755 "$work"
mkdir "$work/base"
git -C "$root" archive HEAD | tar -x -C "$work/base" || { echo "mutants: git archive of HEAD failed" >&2; exit 1; }

all_tests=()
for p in "${patches[@]}"; do
	read -r -a ts <<<"$(tests_of "$p")"
	all_tests+=("${ts[@]}")
done
mapfile -t all_tests < <(printf '%s\n' "${all_tests[@]}" | sort -u)
mapfile -t base_targets < <(targets_of "${all_tests[@]}")
echo "mutants: building the unmutated copy (${base_targets[*]})"
if [ "${#base_targets[@]}" -gt 0 ] &&
	! make -C "$work/base" -j"$jobs" --no-print-directory BUILD="$build" "${base_targets[@]}" >"$logs/base-build.log" 2>&1; then
	echo "mutants: the unmutated copy does not build: $logs/base-build.log" >&2
	exit 1
fi

declare -A base_ok
for t in "${all_tests[@]}"; do
	if run_test "$work/base" "$logs/base-$t.log" "$t"; then
		base_ok[$t]=1
	else
		base_ok[$t]=0
		echo "mutants: $t fails without any mutation ($logs/base-$t.log): it proves nothing here"
	fi
done

caught=0 survived=0 stale=0 unjudged=0
for p in "${patches[@]}"; do
	id=$(basename "$p" .patch)
	read -r -a ts <<<"$(tests_of "$p")"
	tree=$work/$id
	# cp -a keeps the base's times: make rebuilds only what the patch touched.
	cp -a "$work/base" "$tree"
	if [ "${#ts[@]}" -eq 0 ]; then
		line="$id: not judged (its header names no test)"
		unjudged=$((unjudged + 1))
	elif ! (cd "$tree" && git apply "$p") >"$logs/$id-apply.log" 2>&1; then
		line="$id: stale (the patch no longer applies: $logs/$id-apply.log)"
		stale=$((stale + 1))
	else
		mapfile -t tg < <(targets_of "${ts[@]}")
		if [ "${#tg[@]}" -gt 0 ] &&
			! make -C "$tree" -j"$jobs" --no-print-directory BUILD="$build" "${tg[@]}" >"$logs/$id-build.log" 2>&1; then
			# The mutation is an edit of a check, never a syntax error: a build failure is the patch's.
			line="$id: does not build ($logs/$id-build.log)"
			unjudged=$((unjudged + 1))
		else
			by=() judged=0
			for t in "${ts[@]}"; do
				[ "${base_ok[$t]}" = 1 ] || continue
				judged=1
				run_test "$tree" "$logs/$id-$t.log" "$t" || by+=("$t")
			done
			if [ "${#by[@]}" -gt 0 ]; then
				line="$id: caught by ${by[*]}"
				caught=$((caught + 1))
			elif [ "$judged" = 0 ]; then
				line="$id: not judged (every test of it fails without the mutation)"
				unjudged=$((unjudged + 1))
			else
				line="$id: SURVIVED (${ts[*]} passed with the mutation)"
				survived=$((survived + 1))
			fi
		fi
	fi
	rm -rf "$tree"
	echo "$line  -- $(sed -n 's/^Claim: *//p' "$p" | head -n 1)"
done
echo "mutants: ${#patches[@]} mutations: $caught caught, $survived survived, $stale stale, $unjudged not judged (logs: $logs)"
[ "$survived" -eq 0 ] && [ "$stale" -eq 0 ] && [ "$unjudged" -eq 0 ]
