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

# discard DIR: a part's work directory, gone. Under scripts/bench.sh it is moved into $BENCH_TRASH
# (a rename frees no inode) and removed after the last part: on ext4 without a journal (this
# project's test machines' root filesystem) each new inode is found past every inode freed in the
# last 60-360 s, so one part's removal of thousands of files would slow the next part's calls
# (docs/performance.md, "Found: a fresh inode costs up to ~2 ms per call").
discard() {
	if [ -n "${BENCH_TRASH:-}" ] && [ -d "$BENCH_TRASH" ] && [ -e "$1" ]; then
		mv "$1" "$(mktemp -d -p "$BENCH_TRASH")/" && return 0
	fi
	rm -rf "$1"
}
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f", a / b }'; }

# bench_repo DIR: a git repository of the fixture manifests (tests/fixtures/deploy-repo) at DIR.
bench_repo() {
	mkdir -p "$1"
	cp -r "$here/tests/fixtures/deploy-repo/." "$1/"
	git -C "$1" init -q -b main
	git -C "$1" add -A
	git -C "$1" -c user.name=bench -c user.email=bench@example.invalid commit -qm "manifests"
}

# manager_up MANAGER AGENT: a process-backend manager on $STATE (its socket SANDBOX_MANAGER_SOCKET),
# idle eviction off for the run (sessions warmed for a later part must still be warm when it
# starts), its log in $work/manager.log; sets manager_pid, or dies when it does not come up in 10 s.
manager_up() {
	"$1" serve --state-dir "$STATE" --agent "$2" --idle-seconds 86400 "${@:3}" >"$work/manager.log" 2>&1 &
	manager_pid=$!
	for _ in $(seq 1 100); do
		[ -S "$SANDBOX_MANAGER_SOCKET" ] && return 0
		kill -0 "$manager_pid" 2>/dev/null || break
		sleep 0.1
	done
	die "the manager did not start"
}
