#!/usr/bin/env bash
# inside.sh DIR CMD [ARG...]: run by tests/frameworks/offline.sh (never outside it: it checks), in
# the namespace Codex runs in. Starts the fake Responses model (../fake_responses.py, scripted by
# DIR/script.json, logging every request body to DIR/requests.jsonl) on 127.0.0.1, writes
# DIR/home/config.toml from DIR/config.toml.in with its port for __PORT__, then runs CMD with
# CODEX_HOME=DIR/home; the model is stopped (by its PID) when CMD ends. Exit: CMD's.
set -euo pipefail
dir=$1
shift
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# The guard of offline.sh, again: only loopback here, or nothing starts.
[ "$(ip -o link show | awk -F': ' '{ sub(/@.*/, "", $2); print $2 }')" = lo ] ||
	{ echo "inside.sh: not in a loopback-only network namespace: run it through offline.sh" >&2; exit 97; }
rm -f "$dir/port"
python3 "$here/../fake_responses.py" "$dir/script.json" "$dir/requests.jsonl" "$dir/port" 2>>"$dir/model.log" &
model=$!
trap 'kill "$model" 2>/dev/null; wait "$model" 2>/dev/null || true' EXIT
for _ in $(seq 1 100); do
	[ -s "$dir/port" ] && break
	kill -0 "$model" 2>/dev/null || { echo "inside.sh: the fake model did not start: $(tail -n 3 "$dir/model.log")" >&2; exit 1; }
	sleep 0.05
done
[ -s "$dir/port" ] || { echo "inside.sh: the fake model did not start" >&2; exit 1; }
mkdir -p "$dir/home"
sed "s/__PORT__/$(cat "$dir/port")/g" "$dir/config.toml.in" >"$dir/home/config.toml"
rc=0
CODEX_HOME=$dir/home FAKE_MODEL_KEY=test-key "$@" || rc=$?
exit "$rc"
