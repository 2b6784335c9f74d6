#!/usr/bin/env bash
# `make bench`: a timing report, not a test. Per-command cost of the boundary beside a bare
# shell in the same run, and how fast the agent drains output. Numbers vary with the machine;
# compare the ratio, run it twice.
set -euo pipefail
build=${1:-build}
agent="$build/sandbox-agent"
n=${BENCH_RUNS:-200}
work=$(mktemp -d /tmp/infra-sandbox-bench.XXXXXX)
mkdir -m 700 "$work/receipts"
# Receipts are fsynced before a result is reported; on a VM disk that fsync dominates. The
# second figure puts the receipt directory on tmpfs (durable until reboot) to show the
# boundary's own cost.
shm=$(mktemp -d -p /dev/shm infra-sandbox-bench.XXXXXX 2>/dev/null || true)
trap 'rm -rf "$work" ${shm:+"$shm"}' EXIT

ns_now() { date +%s%N; }

per_call_us() { # per_call_us RUNS CMD...: mean wall time of one call, in microseconds
	local runs=$1 start end
	shift
	start=$(ns_now)
	for ((i = 0; i < runs; i++)); do "$@" >/dev/null; done
	end=$(ns_now)
	echo $(((end - start) / runs / 1000))
}

echo "infra-sandbox bench: $(uname -r), $(nproc) cores, $n runs each, uid $(id -u)"
# Warm both paths first so neither pays for a cold page cache.
per_call_us 10 bash -c true >/dev/null
per_call_us 10 "$agent" exec --receipt-dir "$work/receipts" -- true >/dev/null

bare=$(per_call_us "$n" bash -c true)
boxed=$(per_call_us "$n" "$agent" exec --receipt-dir "$work/receipts" -- true)
bare2=$(per_call_us "$n" bash -c true)
bare=$(((bare + bare2) / 2))
echo
echo "per command (wall, mean of $n):"
printf '  bash -c true                         %6d us\n' "$bare"
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f", a / b }'; }
printf '  sandbox-agent exec -- true           %6d us   (%s x bare; receipts on %s)\n' "$boxed" \
	"$(ratio "$boxed" "$bare")" "$(df --output=fstype "$work" | tail -1)"
if [ -n "$shm" ]; then
	fast=$(per_call_us "$n" "$agent" exec --receipt-dir "$shm" -- true)
	printf '  sandbox-agent exec -- true           %6d us   (%s x bare; receipts on tmpfs; target <= 1.3 x)\n' \
		"$fast" "$(ratio "$fast" "$bare")"
fi
if command -v unshare >/dev/null; then
	ref=$(per_call_us "$n" unshare -Urpf --mount-proc true)
	printf '  unshare -Urpf --mount-proc true      %6d us   (reference: namespaces + /proc alone)\n' "$ref"
fi
# The agent's own measure, clone to reap, without process start-up and receipt.
inner=$("$agent" exec --receipt-dir "$work/receipts" -- true | jq .duration_ms)
echo "  boundary only (clone -> init reaped, from the result):  ${inner} ms"

echo
echo "output drain (1 GB of zeros through a 64 KiB bound):"
res=$("$agent" exec --receipt-dir "$work/receipts" --output-limit 65536 --timeout-seconds 120 -- \
	'head -c 1000000000 /dev/zero')
echo "$res" | jq -r '"  \(.stdout_bytes) bytes in \(.duration_ms) ms = \((.stdout_bytes / 1048576) / (.duration_ms / 1000) | floor) MiB/s, truncated: \(.stdout_truncated)"'

# The manager: a warm sandbox per call, and sessions in parallel (scripts/bench-manager.sh).
echo
bash "$(dirname "$0")/bench-manager.sh" "$build"

# The podman backend: cold start and a warm call beside `podman run` and `podman exec`.
echo
bash "$(dirname "$0")/bench-podman.sh" "$build"
