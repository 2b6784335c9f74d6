#!/usr/bin/env bash
# The egress part of `make bench` (called by scripts/bench.sh): a timing report, not a test. A
# Kubernetes list request through a grant's edge (policy proxy, docs/operations.md) from inside a
# sandbox, beside the same request sent straight from the host with the token, both to the broker
# tests' local HTTPS stand-in of the API server (tests/brokers/server.py) on loopback: milliseconds
# per request, BENCH_EGRESS_RUNS sequential requests each (default 200), in one exec and one loop.
# A manager on a temporary state directory (process backend); everything it started is stopped on exit.
set -euo pipefail
build=$(cd "${1:-build}" && pwd)
here=$(cd "$(dirname "$0")/.." && pwd)
manager=$build/sandbox-manager
runs=${BENCH_EGRESS_RUNS:-200}
work=$(mktemp -d /tmp/infra-sandbox-be.XXXXXX)
chmod 0711 "$work"
pids=()
cleanup() {
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
	[ -s "$work/state/userns-holder" ] && kill -KILL "$(cat "$work/state/userns-holder")" 2>/dev/null
	wait 2>/dev/null || true
	rm -rf "$work"
}
trap cleanup EXIT
export NO_PROXY=localhost,127.0.0.1 no_proxy=localhost,127.0.0.1

# The stand-in's certificate (as tests/integration/manager_brokers.sh makes it) and its answer.
d=$work/tls
mkdir -p "$d"
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -keyout "$d/ca.key" -out "$d/ca.crt" -days 1 \
	-subj /CN=bench-ca -addext basicConstraints=critical,CA:TRUE -addext keyUsage=critical,keyCertSign 2>/dev/null
openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -keyout "$d/server.key" -out "$d/server.csr" \
	-subj /CN=localhost 2>/dev/null
printf 'subjectAltName=DNS:localhost\nextendedKeyUsage=serverAuth\n' >"$d/ext"
openssl x509 -req -in "$d/server.csr" -CA "$d/ca.crt" -CAkey "$d/ca.key" -CAcreateserial -out "$d/server.crt" \
	-days 1 -extfile "$d/ext" 2>/dev/null
echo '{"GET /api/v1/namespaces/default/pods?limit=500": {"status": 200, "body": {"kind": "PodList", "items": []}}}' \
	>"$work/responses.json"
python3 "$here/tests/brokers/server.py" --cert "$d/server.crt" --key "$d/server.key" --port-file "$work/port" \
	--log /dev/null --bearer bench-manager-token --responses "$work/responses.json" >"$work/server.log" 2>&1 &
pids+=($!)
for _ in $(seq 1 100); do [ -s "$work/port" ] && break; sleep 0.05; done
port=$(cat "$work/port")
echo bench-manager-token >"$work/manager.token"
chmod 0600 "$work/manager.token"
printf '{"server": "https://localhost:%s", "ca_file": "%s", "namespace": "default", "read_service_account": "viewer", "token_file": "%s"}\n' \
	"$port" "$d/ca.crt" "$work/manager.token" >"$work/broker.json"

git init -q "$work/repo" && git -C "$work/repo" -c user.name=b -c user.email=b@b commit -q --allow-empty -m init
"$manager" serve --state-dir "$work/state" --socket "$work/manager.sock" \
	--resource "kubernetes:bench=tokenrequest:$work/broker.json" >"$work/manager.log" 2>&1 &
pids+=($!)
for _ in $(seq 1 300); do [ -S "$work/manager.sock" ] && break; sleep 0.1; done
export SANDBOX_MANAGER_SOCKET=$work/manager.sock
sid=$("$manager" session create --identity bench --repo "$work/repo" --network proxy --grant kubernetes:bench=read | jq -r .session)

# One loop of $runs requests: its milliseconds per request (curl's own total time, averaged by awk).
loop='for i in $(seq 1 '"$runs"'); do curl -s -o /dev/null -w "%{time_total}\n" '
avg="done | awk '{ s += \$1 } END { printf \"%.3f\", s * 1000 / NR }'"
edge=$("$manager" exec --session "$sid" -- "${loop}--noproxy '*' 'http://127.0.0.1:3129/api/v1/namespaces/default/pods?limit=500'; $avg")
direct=$(bash -c "${loop}--cacert '$d/ca.crt' -H 'Authorization: Bearer bench-manager-token' 'https://localhost:$port/api/v1/namespaces/default/pods?limit=500'; $avg")
echo "egress: a Kubernetes list request, $runs in a row, ms each (curl's total time; TLS to the stand-in each time)"
echo "  through the grant's edge, from the sandbox: $edge"
echo "  direct from the host, with the token:       $direct"
[ -z "${BENCH_TABLE:-}" ] || echo "a list request through the edge (direct: $direct ms)|$edge ms|-|-" >>"$BENCH_TABLE"
