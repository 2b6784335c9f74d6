#!/usr/bin/env bash
# `make bench`: a timing report, not a test. The agent (scripts/bench-agent.sh), the manager
# (bench-manager.sh) and podman (bench-podman.sh), each beside bare `bash -c true` in the same run,
# then the table of issue 32's targets, each a ratio to the kernel's floor measured in the same run
# (scripts/bench-nsfloor.c), with the floor and the anchors (unshare, bubblewrap) as rows of their own
# (docs/performance.md). Numbers vary with the machine and its load; compare the ratios, run it twice.
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

# The Kubernetes backend's first call needs the test cluster (make cluster), which make bench does
# not start: its row says where it is measured.
echo "first call of a new session, Kubernetes backend|not measured by make bench: needs make cluster (docs/performance.md)|<= 0.5 s|-" >>"$BENCH_TABLE"

# The targets of issue 32, measured in this one run.
echo
echo "| path | measured | target | met? |"
echo "|---|---|---|---|"
while IFS='|' read -r path measured target met; do
	echo "| $path | $measured | $target | $met |"
done <"$BENCH_TABLE"
