#!/usr/bin/env bash
# `make demo-agent`: the agent's boundary alone on real commands, on this machine, with nothing else
# installed. Every step runs through `sandbox-agent exec`, the path the manager uses too.
set -euo pipefail
build=${1:-build}
agent="$build/sandbox-agent"
work=$(mktemp -d /tmp/infra-sandbox-demo.XXXXXX)
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/worktree" "$work/receipts"
chmod 700 "$work/receipts"
printf 'apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: payments-api\nspec:\n  replicas: 0\n' \
	>"$work/worktree/deployment.yaml"
# A root agent runs its commands as nobody, never as host root: the worktree must be theirs to write.
if [ "$(id -u)" -eq 0 ]; then
	chmod 0711 "$work"
	chown -R 65534:65534 "$work/worktree"
fi

run() { # run TITLE TIMEOUT COMMAND
	echo
	echo "== $1"
	echo "\$ $3"
	"$agent" exec --cwd "$work/worktree" --receipt-dir "$work/receipts" --timeout-seconds "$2" -- "$3" |
		jq '{status, exit_code, stdout, stderr, duration_ms, receipt: {verified: .receipt.verified,
		     boundary_confirmed: .receipt.boundary_confirmed, path: .receipt.path}}'
}

echo "infra-sandbox demo: each command runs in fresh user + PID + mount namespaces under a protected PID 1"
"$agent" check | jq -c '{ok, landlock: .features.landlock, problems: [.problems[].feature]}'

run "read the manifests (same absolute path inside)" 10 'pwd; grep -n replicas deployment.yaml'
run "who am I inside: no capabilities, no_new_privs, seccomp, PID 2" 10 \
	'echo "pid=$$"; grep -E "^(CapEff|CapBnd|NoNewPrivs|Seccomp):" /proc/self/status; ls /proc | grep -cE "^[0-9]+$"'
run "a detached child: setsid + nohup, writing a heartbeat" 10 \
	'setsid nohup bash -c "while :; do date +%s%N > heartbeat; sleep 0.1; done" >/dev/null 2>&1 & sleep 0.3; echo "started detached child"'
before=$(cat "$work/worktree/heartbeat")
sleep 0.5
after=$(cat "$work/worktree/heartbeat")
if [ "$before" = "$after" ]; then
	echo "-> the heartbeat stopped when the command ended: the boundary killed the detached child"
else
	echo "-> UNEXPECTED: the detached child is still writing" >&2
	exit 1
fi
run "the command tries to stop PID 1 and read its secrets" 10 \
	'kill -9 1; cat /proc/1/environ; ls '"$work/receipts"'; echo "init still protects the namespace"'
run "a timeout: sleep 30 under a 2-second limit" 2 'echo sleeping; sleep 30'

echo
echo "== the receipts, written by the agent after each namespace was empty"
ls -l "$work/receipts"
last=$(ls -t "$work/receipts"/*.json | head -1)
jq . "$last"
"$agent" verify-receipt --receipt "$last" --key "$work/receipts/receipt.key" | jq -c .
