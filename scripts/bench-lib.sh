# shellcheck shell=bash
# What the manager's bench scripts share (sourced): messages, time, ratios, the fixture repository.
# The sourcing script sets BENCH_NAME, work (its temporary directory) and here (the repository root).

# die MESSAGE: says why the bench stopped, with the end of the manager's log, and exits 1.
die() {
	echo "$BENCH_NAME: $*" >&2
	[ -f "$work/manager.log" ] && tail -n 5 "$work/manager.log" >&2
	exit 1
}
now_us() { echo "${EPOCHREALTIME/./}"; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f", a / b }'; }

# bench_repo DIR: a git repository of the fixture manifests (tests/fixtures/deploy-repo) at DIR.
bench_repo() {
	mkdir -p "$1"
	cp -r "$here/tests/fixtures/deploy-repo/." "$1/"
	git -C "$1" init -q -b main
	git -C "$1" add -A
	git -C "$1" -c user.name=bench -c user.email=bench@example.invalid commit -qm "manifests"
}
