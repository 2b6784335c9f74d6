#!/usr/bin/env bash
# `make bench`: a timing report, not a test. The agent (scripts/bench-agent.sh), the manager
# (bench-manager.sh) and podman (bench-podman.sh), each beside bare `bash -c true` in the same run,
# then the table of issue 18's targets (docs/performance.md). Numbers vary with the machine and its
# load; compare the ratios, run it twice.
set -euo pipefail
build=${1:-build}
# The rows of the final table: each part appends "path|measured|target|met" lines here.
export BENCH_TABLE
BENCH_TABLE=$(mktemp /tmp/infra-sandbox-bench-table.XXXXXX)
trap 'rm -f "$BENCH_TABLE"' EXIT

# The agent: per call beside bare bash, where one call goes, memory in an output flood, cold start
# (scripts/bench-agent.sh).
bash "$(dirname "$0")/bench-agent.sh" "$build"

# The manager: a warm sandbox per call, and sessions in parallel (scripts/bench-manager.sh).
echo
bash "$(dirname "$0")/bench-manager.sh" "$build"

# The podman backend: cold start and a warm call beside `podman run` and `podman exec`.
echo
bash "$(dirname "$0")/bench-podman.sh" "$build"

# The egress proxy: a request through a grant's edge beside the same request direct (scripts/bench-egress.sh).
echo
bash "$(dirname "$0")/bench-egress.sh" "$build"

# The targets of issue 18, measured in this one run.
echo
echo "| path | measured | target | met? |"
echo "|---|---|---|---|"
while IFS='|' read -r path measured target met; do
	echo "| $path | $measured | $target | $met |"
done <"$BENCH_TABLE"
