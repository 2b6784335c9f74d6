#!/usr/bin/env bash
# with_fake_anthropic.sh SCRIPT LOG CMD [ARG...]: inside tests/frameworks/offline.sh, starts the fake
# model (fake_anthropic.py) on 127.0.0.1, runs CMD with ANTHROPIC_BASE_URL pointing at it and the
# switches that keep a framework quiet (no telemetry, no updates, a dummy key), then stops the fake
# model (by its PID). CMD's exit code is this script's.
set -euo pipefail
[ $# -ge 3 ] || { echo "usage: with_fake_anthropic.sh SCRIPT LOG CMD [ARG...]" >&2; exit 2; }
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
script=$1 log=$2
shift 2
# Never against the real network: offline.sh leaves loopback only.
[ "$(ip -o link show | wc -l)" -eq 1 ] || { echo "with_fake_anthropic.sh: not in offline.sh's namespace" >&2; exit 97; }
port_file=$(mktemp -u "${TMPDIR:-/tmp}/fake-anthropic-port.XXXXXX")
python3 "$here/fake_anthropic.py" --script "$script" --log "$log" --port-file "$port_file" &
fake=$!
trap 'kill "$fake" 2>/dev/null; wait "$fake" 2>/dev/null || true; rm -f "$port_file"' EXIT
for _ in $(seq 1 100); do
	[ -s "$port_file" ] && break
	kill -0 "$fake" 2>/dev/null || { echo "with_fake_anthropic.sh: the fake model did not start" >&2; exit 1; }
	sleep 0.05
done
[ -s "$port_file" ] || { echo "with_fake_anthropic.sh: the fake model did not start" >&2; exit 1; }
port=$(cat "$port_file")
export ANTHROPIC_BASE_URL="http://127.0.0.1:$port"
export ANTHROPIC_API_KEY=sk-ant-fake-key-for-tests
export CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1 DISABLE_TELEMETRY=1 DISABLE_AUTOUPDATER=1 DISABLE_ERROR_REPORTING=1
export ENABLE_TOOL_SEARCH=false
rc=0
"$@" || rc=$?
exit "$rc"
