#!/usr/bin/env bash
# `make demo`: the seed's investigation through the managed path, on this machine, with nothing else
# installed: a manager on a temporary state directory (process backend), a session on a small
# repository of deployment manifests, and every call through `sandbox-manager exec`. Then the
# records with their receipts. Cleans up after itself.
set -euo pipefail
build=$(cd "${1:-build}" && pwd)
here=$(cd "$(dirname "$0")/.." && pwd)
work=$(mktemp -d /tmp/infra-sandbox-demo.XXXXXX)
# Under root the sandboxes run as nobody and must walk to their worktree (search only).
chmod 0711 "$work"
export SANDBOX_MANAGER_SOCKET=$work/state/manager.sock
manager_pid=

cleanup() {
	# the daemon ends on SIGTERM (143): that is the stop asked for, not a failure
	[ -n "$manager_pid" ] && kill "$manager_pid" 2>/dev/null && { wait "$manager_pid" 2>/dev/null || true; }
	# this run's own sandboxes (found by their state directory, unique to this run), killed by PID
	for p in $(pgrep -f -- "--state-dir $work/state/sandboxes/" || true); do kill -KILL "$p" 2>/dev/null || true; done
	rm -rf "$work"
}
trap cleanup EXIT

step() { printf '\n\033[1m== %s\033[0m\n' "$1"; }
call() { # call [--timeout-seconds N] COMMAND: one managed Bash call, shown as an agent would see it
	local args=()
	[ "$1" = --timeout-seconds ] && args=(--timeout-seconds "$2") && shift 2
	printf '$ %s\n' "$1"
	local rc=0
	"$build/sandbox-manager" exec --session "$session" "${args[@]}" -- "$1" || rc=$?
	printf '[exit %s]\n' "$rc"
}

step "the repository: deployment manifests for payments-api"
mkdir -p "$work/repo" "$work/state"
chmod 700 "$work/state"
cp -r "$here/tests/fixtures/deploy-repo/." "$work/repo/"
git -C "$work/repo" init -q -b main
git -C "$work/repo" add -A
git -C "$work/repo" -c user.name=demo -c user.email=demo@example.invalid commit -qm "manifests"
git -C "$work/repo" log --oneline

step "sandbox-manager serve (process backend, state in $work/state)"
"$build/sandbox-manager" serve --state-dir "$work/state" --agent "$build/sandbox-agent" \
	>"$work/manager.log" 2>&1 &
manager_pid=$!
for _ in $(seq 1 100); do [ -S "$SANDBOX_MANAGER_SOCKET" ] && break; sleep 0.1; done
[ -S "$SANDBOX_MANAGER_SOCKET" ] || { cat "$work/manager.log"; exit 1; }

step "a session: its own git worktree and branch"
"$build/sandbox-manager" session create --identity demo --repo "$work/repo" | tee "$work/session.json"
session=$(jq -r .session "$work/session.json")

step "the investigation, one managed Bash call at a time"
call 'grep -n -e replicas -e port payments/*.yaml'
call 'printf "payments-api unavailable:\n- replicas: 0\n- readiness probe on 8081, container listens on 8080\n" > "$TMPDIR/report.md"; cat "$TMPDIR/report.md"'
call "sed -i -e 's/replicas: 0/replicas: 2/' -e 's/port: 8081/port: 8080/' payments/deployment.yaml && git diff --stat && git diff | grep '^[-+] '"
call 'setsid nohup bash -c "while :; do date +%s%N > \"$TMPDIR/heartbeat\"; sleep 0.1; done" >/dev/null 2>&1 & sleep 0.3; echo "left a detached child behind"'
worktree=$(jq -r .worktree "$work/session.json")
a=$(cat "$worktree/.sandbox-tmp/heartbeat"); sleep 0.5; b=$(cat "$worktree/.sandbox-tmp/heartbeat")
[ "$a" = "$b" ] && echo "-> its heartbeat stopped: the boundary ended it with the call" ||
	{ echo "-> UNEXPECTED: the detached child is still running" >&2; exit 1; }
call --timeout-seconds 2 'echo "waiting on the cluster..."; sleep 30'
echo "-> exit 124: timed out, and nothing of it is left"

step "the report and the patch, from the host (file tools see the same paths)"
cat "$worktree/.sandbox-tmp/report.md"
git -c safe.directory='*' -C "$worktree" diff --stat

step "the records, each completed with its status and a verified receipt"
"$build/sandbox-manager" records --session "$session" |
	jq -r '.records[] | "\(.exec_id)  \(.state | .[0:9])\texit=\(.result.exit_code)  receipt: nonce=\(.receipt.nonce[0:12])... confirmed=\(.receipt.boundary.confirmed)  \(.command | gsub("\n"; " ") | .[0:50])"'
