# shellcheck shell=bash
# What operators look at (issue 14): `sandbox-manager status` (counts from the records, the live
# sandboxes, a health verdict as the exit code: 0 healthy, 1 degraded, 125 unreachable) and the
# metrics (Prometheus text, through the control socket and the opt-in loopback HTTP listener).

PROM_TEXT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../support" && pwd)/prom_text.py
OPS_DOC=$(cd "$(dirname "${BASH_SOURCE[0]}")/../../docs" && pwd)/operations.md

# prom_parse FILE: the summary of a strict parse ({"families", "samples"}) in $TD/prom.json; a text that
# breaks the format fails the test with the parser's reasons.
prom_parse() {
	if ! python3 "$PROM_TEXT" "$1" >"$TD/prom.json" 2>"$TD/prom.err"; then
		bad "not Prometheus text ($1): $(head -c 600 "$TD/prom.err")"
		return 1
	fi
}

# prom_value SERIES: the value of one series in the last parse (integers without ".0").
prom_value() { jq -r --arg s "$1" '.samples[$s] // "missing" | if type == "number" then (if . == floor then floor else . end) else . end' "$TD/prom.json"; }

free_port() { python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }

# A fresh manager is healthy with every count 0; after calls that exit 0, exit 3 and time out, the counts
# are what `records` holds and the metrics count each call once per step.
test_manager_status() {
	local steps step want have
	mgr_repo && mgr_start || return
	mgr status --json
	assert_eq "status on a fresh manager: exit code (stderr: $(head -c 300 "$ERR"))" 0 "$RC"
	assert_json .backend '"process"'
	assert_json .health '"healthy"'
	assert_json .problems '[]'
	assert_json .version "\"$("$MANAGER" version | cut -d' ' -f2)\""
	assert_json .state_dir "$(json_str "$MSTATE")"
	assert_json .socket "$(json_str "$MSOCK")"
	assert_json .pid "$MGR_PID"
	assert_json .execs '{"accepted":0,"cancelled":0,"dispatched":0,"exited":0,"refused":0,"signaled":0,"timed_out":0,"uncertain":0}'
	assert_json .sessions '{"active":0,"deleted":0,"deleting":0,"reserved":0}'
	assert_json .sandboxes '{"busy":0,"idle":0,"live":0}'
	assert_json '[.uncertain, .reserved, .in_flight]' '[0,0,0]'
	assert_json .metrics_listen null

	mgr_session || return
	mgr exec --session "$SID" -- true
	assert_eq "exec true" 0 "$RC"
	mgr exec --session "$SID" -- 'exit 3'
	assert_eq "exec exit 3" 3 "$RC"
	mgr exec --session "$SID" --timeout-seconds 1 -- 'sleep 20'
	assert_eq "exec that times out" 124 "$RC"
	mgr records --session "$SID"
	have=$(jq -c '[.records[].state] | group_by(.) | map({(.[0]): length}) | add' "$OUT")
	assert_eq "the records' states" '{"exited":2,"timed_out":1}' "$have"
	mgr status --json
	assert_eq "status after three calls: exit code" 0 "$RC"
	assert_eq "status: the execs by state are the records' (non-zero ones)" "$have" \
		"$(jq -c '.execs | with_entries(select(.value > 0))' "$OUT")"
	assert_json .execs.cancelled 0
	assert_json .sessions.active 1
	assert_json .sandboxes '{"busy":0,"idle":1,"live":1}'
	assert_json .health '"healthy"'
	assert_ge "uptime_seconds" "$(jr .uptime_seconds)" 0
	mgr status
	assert_eq "status (text): exit code" 0 "$RC"
	assert_match "status (text)" "execs: 2 exited, 0 signaled, 1 timed_out, 0 cancelled, 0 uncertain, 0 refused" "$(cat "$OUT")"
	assert_match "status (text)" "health: healthy" "$(cat "$OUT")"

	mgr metrics
	assert_eq "metrics: exit code (stderr: $(head -c 300 "$ERR"))" 0 "$RC"
	prom_parse "$OUT" || return
	assert_eq "execs_total exited" 2 "$(prom_value 'sandbox_manager_execs_total{status="exited"}')"
	assert_eq "execs_total timed_out" 1 "$(prom_value 'sandbox_manager_execs_total{status="timed_out"}')"
	assert_eq "execs_total uncertain" 0 "$(prom_value 'sandbox_manager_execs_total{status="uncertain"}')"
	# every family rendered is documented with its type, and nothing else is
	# shellcheck disable=SC2016 # the backticks are the table's, for sed
	assert_eq "the metrics table of docs/operations.md (name type)" \
		"$(jq -r '.families | to_entries[] | "\(.key) \(.value)"' "$TD/prom.json" | sort)" \
		"$(sed -n 's/^| `\(sandbox_manager_[a-z_]*\)` | \([a-z]*\) |.*/\1 \2/p' "$OPS_DOC" | sort)"
	steps=$(jq -r '.samples | keys[] | select(startswith("sandbox_manager_call_step_seconds_count"))' "$TD/prom.json" |
		sed 's/.*step="\([a-z]*\)".*/\1/' | sort | tr '\n' ' ')
	assert_eq "the steps" "command dispatch queue receipt record sandbox " "$steps"
	for step in $steps; do
		assert_eq "step $step: _count (one per call)" 3 \
			"$(prom_value "sandbox_manager_call_step_seconds_count{step=\"$step\"}")"
	done
	# the call that timed out spent its second in the command step
	want=$(prom_value 'sandbox_manager_call_step_seconds_bucket{step="command",le="0.5"}')
	assert_ge "command step: calls over 0.5 s" $((3 - want)) 1
	assert_eq "sandboxes idle" 1 "$(prom_value 'sandbox_manager_sandboxes{state="idle"}')"
	assert_eq "sandboxes busy" 0 "$(prom_value 'sandbox_manager_sandboxes{state="busy"}')"
	assert_eq "uncertain execs" 0 "$(prom_value sandbox_manager_uncertain_execs)"
	assert_eq "reserved sessions" 0 "$(prom_value sandbox_manager_reserved_sessions)"
	assert_eq "sessions active" 1 "$(prom_value 'sandbox_manager_sessions{state="active"}')"
	# this scrape's own connection is open while it is answered
	assert_eq "control connections" 1 "$(prom_value sandbox_manager_control_connections)"
	assert_eq "build info" 1 \
		"$(prom_value "sandbox_manager_build_info{version=\"$("$MANAGER" version | cut -d' ' -f2)\",backend=\"process\"}")"
}
t manager_status test_manager_status

# An exec whose outcome is lost (its sandbox's agent killed mid-command, sandbox_agent_kill from
# manager_recovery.sh) makes the manager degraded,
# status exits 1 and names the session and the exec; deleting the session (the workspace is gone) makes
# it healthy again.
test_manager_status_uncertain() {
	local m exec_id
	m=$(unique_marker)
	mgr_repo && mgr_start && mgr_session || return
	mgr exec --session "$SID" -- true
	mgr_bg_exec k "sleep 20.$m"
	for _ in $(seq 1 50); do pgrep -f "^sleep 20.$m" >/dev/null && break; sleep 0.1; done
	sandbox_agent_kill
	wait_bg_execs_allow_fail
	mgr records --session "$SID" --state uncertain
	exec_id=$(jr '.records[0].exec_id')
	if [ -z "$exec_id" ] || [ "$exec_id" = null ]; then
		bad "no uncertain exec: $(head -c 300 "$OUT")"
		return
	fi

	mgr status --json
	assert_eq "status with an uncertain exec: exit code" 1 "$RC"
	assert_json .health '"degraded"'
	assert_json '[.uncertain, .reserved, .execs.uncertain, .execs.exited]' '[1,0,1,1]'
	assert_json .uncertain_sessions "[{\"newest_exec\":\"$exec_id\",\"session\":\"$SID\",\"uncertain\":1}]"
	assert_json '.problems | length' 1
	assert_match "the problem names the session and the exec" "1 unresolved uncertain exec .*session $SID \(1, newest exec $exec_id\)" \
		"$(jr '.problems[0]')"
	mgr status
	assert_eq "status (text) with an uncertain exec: exit code" 1 "$RC"
	assert_match "status (text)" "health: degraded" "$(cat "$OUT")"
	assert_match "status (text) names the exec" "  - 1 unresolved uncertain exec .*$exec_id" "$(cat "$OUT")"
	mgr metrics
	prom_parse "$OUT" || return
	assert_eq "metrics: uncertain execs" 1 "$(prom_value sandbox_manager_uncertain_execs)"
	assert_eq "metrics: execs_total uncertain" 1 "$(prom_value 'sandbox_manager_execs_total{status="uncertain"}')"

	# an operator's word settles it: healthy again, the exec still counted uncertain
	mgr resolve --exec "$exec_id" --outcome not-ran --note "the marker file is absent"
	assert_eq "resolve the uncertain exec (stderr: $(head -c 300 "$ERR"))" 0 "$RC"
	mgr status --json
	assert_eq "status once the exec is resolved: exit code" 0 "$RC"
	assert_json '[.health, .uncertain, .execs.uncertain, (.problems | length)]' '["healthy",0,1,0]'

	mgr session delete --session "$SID"
	assert_eq "delete the session (stderr: $(head -c 300 "$ERR"))" 0 "$RC"
	mgr status --json
	assert_eq "status once the session is deleted: exit code" 0 "$RC"
	assert_json '[.health, .uncertain, .execs.uncertain, .sessions.deleted]' '["healthy",0,1,1]'
}
t manager_status_uncertain test_manager_status_uncertain

# No manager: status and metrics exit 125 with one line that says so, and print nothing on stdout.
test_manager_status_unreachable() {
	mgr_start || return
	kill -KILL "$MGR_PID"
	wait "$MGR_PID" 2>/dev/null
	mgr status
	assert_eq "status, manager stopped: exit code" 125 "$RC"
	assert_eq "status, manager stopped: stderr lines" 1 "$(wc -l <"$ERR")"
	assert_match "status, manager stopped: message" "^sandbox-manager: the manager is not reachable at $MSOCK" "$(cat "$ERR")"
	assert_eq "status, manager stopped: stdout" "" "$(cat "$OUT")"
	mgr status --json
	assert_eq "status --json, manager stopped: exit code" 125 "$RC"
	mgr metrics
	assert_eq "metrics, manager stopped: exit code" 125 "$RC"
	assert_eq "metrics, manager stopped: stderr lines" 1 "$(wc -l <"$ERR")"
	mgr status --bogus
	assert_eq "status with an unknown flag: exit code" 2 "$RC"
}
t manager_status_unreachable test_manager_status_unreachable

# The HTTP listener answers GET /metrics with the families the control socket gives, 404 and 405 for
# anything else, a silent client does not hold up a second scrape, nor does a crowd of them (the 8
# slots shed the oldest: issue 26, N1), a head over 8 KiB is 431, and only loopback is accepted.
test_manager_metrics_http() {
	local port
	port=$(free_port)
	timeout -k 2 10 "${AS[@]}" "$MANAGER" serve --state-dir /nonexistent/x --metrics-listen "0.0.0.0:$port" \
		>"$TD/remote.out" 2>"$TD/remote.err"
	assert_eq "a non-loopback --metrics-listen: exit code (a usage error)" 2 "$?"
	assert_match "its message" "metrics-listen must be 127.0.0.1:PORT.*not '0.0.0.0:$port'" "$(cat "$TD/remote.err")"

	mgr_start --metrics-listen "127.0.0.1:$port" || return
	mgr status --json
	assert_json .metrics_listen "\"127.0.0.1:$port\""
	mgr metrics
	prom_parse "$OUT" || return
	jq -c '.families' "$TD/prom.json" >"$TD/families.socket"
	python3 - "$port" "$TD" <<'EOF' >"$TD/http.log" 2>&1
import socket, sys, time
port, td = int(sys.argv[1]), sys.argv[2]

def get(path, method="GET"):
    s = socket.create_connection(("127.0.0.1", port), timeout=5)
    s.sendall(f"{method} {path} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
    data = b""
    while True:
        chunk = s.recv(65536)
        if not chunk:
            break
        data += chunk
    s.close()
    head, _, body = data.partition(b"\r\n\r\n")
    return head.decode(), body

# a client that connects and says nothing, held open through the scrapes below
silent = socket.create_connection(("127.0.0.1", port), timeout=5)
t0 = time.monotonic()
head, body = get("/metrics")
took = time.monotonic() - t0
print("status", head.splitlines()[0])
print("type", [l for l in head.splitlines() if l.lower().startswith("content-type:")])
print("took_ms", int(took * 1000))
open(f"{td}/http.metrics", "wb").write(body)
print("404", get("/other")[0].splitlines()[0])
print("405", get("/metrics", "POST")[0].splitlines()[0])
# the silent one is dropped at its deadline, not kept forever
silent.settimeout(10)
t0 = time.monotonic()
print("silent_closed", silent.recv(1) == b"", int(time.monotonic() - t0 < 10))
# a crowd of silent connections (more than the listener holds) sheds its oldest: a scrape still passes
crowd = [socket.create_connection(("127.0.0.1", port), timeout=5) for _ in range(32)]
time.sleep(0.5)
print("crowd_scrape", get("/metrics")[0].splitlines()[0])
shed = 0
for c in crowd:
    c.settimeout(0.2)
    try:
        shed += c.recv(1) == b""
    except socket.timeout:
        pass
    except OSError:
        shed += 1
print("crowd_shed", shed)
# a head over 8 KiB: a clear refusal from the HTTP server, not a hang
def head_of(pad):
    s = socket.create_connection(("127.0.0.1", port), timeout=5)
    s.sendall(f"GET /metrics HTTP/1.1\r\nHost: x\r\nX-Pad: {'a' * pad}\r\n\r\n".encode())
    try:
        return s.recv(64).split(b"\r\n")[0].decode() or "closed"
    except OSError as e:
        return f"closed ({e})"  # a reset: the head's rest was never read
print("pad7k", head_of(7000))
print("big", head_of(9000))
EOF
	assert_match "GET /metrics" "status HTTP/1.1 200 OK" "$(cat "$TD/http.log")"
	assert_match "its content type" "type \['Content-Type: text/plain; version=0.0.4; charset=utf-8'\]" "$(cat "$TD/http.log")"
	assert_lt "ms for a scrape while a silent client is connected" "$(sed -n 's/^took_ms //p' "$TD/http.log")" 1000
	assert_match "another path" "404 HTTP/1.1 404 Not Found" "$(cat "$TD/http.log")"
	assert_match "another method" "405 HTTP/1.1 405 Method Not Allowed" "$(cat "$TD/http.log")"
	assert_match "a scrape while 32 silent connections are held" "crowd_scrape HTTP/1.1 200 OK" "$(cat "$TD/http.log")"
	# 32 + the scrape into 8 slots: 25 shed (without the shedding, MHD's limit of 16 refuses 17)
	assert_ge "silent connections shed, oldest first (8 slots)" "$(sed -n 's/^crowd_shed //p' "$TD/http.log")" 24
	assert_match "a head of 7 KB" "pad7k HTTP/1.1 200 OK" "$(cat "$TD/http.log")"
	assert_match "a head over 8 KiB: 431, or a reset" "big (HTTP/1.1 431 |closed)" "$(cat "$TD/http.log")"
	assert_match "the silent client is closed at its deadline" "silent_closed True 1" "$(cat "$TD/http.log")"
	prom_parse "$TD/http.metrics" || return
	assert_eq "the HTTP families are the control socket's" "$(cat "$TD/families.socket")" "$(jq -c '.families' "$TD/prom.json")"
	kill -0 "$MGR_PID" 2>/dev/null || bad "the manager died"
}
t manager_metrics_http test_manager_metrics_http

# metrics-listen unix:PATH: the same answer over a unix socket, mode 0660.
test_manager_metrics_unix() {
	local path=$TD/metrics.sock
	mgr_start --metrics-listen "unix:$path" || return
	assert_eq "the metrics socket's mode" 660 "$(stat -c %a "$path" 2>/dev/null)"
	as_user python3 - "$path" <<'EOF' >"$TD/unix.out" 2>&1
import socket, sys
s = socket.socket(socket.AF_UNIX)
s.connect(sys.argv[1])
s.sendall(b"GET /metrics HTTP/1.0\r\n\r\n")
data = b""
while chunk := s.recv(65536):
    data += chunk
sys.stdout.write(data.partition(b"\r\n\r\n")[2].decode())
EOF
	prom_parse "$TD/unix.out" || return
	assert_eq "build info over the unix socket" 1 \
		"$(prom_value "sandbox_manager_build_info{version=\"$("$MANAGER" version | cut -d' ' -f2)\",backend=\"process\"}")"
}
t manager_metrics_unix test_manager_metrics_unix
