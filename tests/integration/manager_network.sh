# shellcheck shell=bash
# Every sandbox has a network of its own (issue 26, N1; process backend). A listener of the host on
# 127.0.0.1 (a stand-in for any loopback service) and the manager's own MCP HTTP listener are out of a
# command's reach under both policies; `none` gives loopback only (up: a command's own server works);
# `open` adds slirp4netns's device, through which a server outside is reached, inside a network
# namespace this test makes (its "outside": 192.0.2.1, TEST-NET-1), never a real address. The policy
# is recorded with the session and shown by `session show`; slirp4netns ends with its sandbox.

# net_probe PORT...: the command each case runs: the interfaces it sees, then for each PORT of the
# host's loopback "PORT:reached" or "PORT:refused", then whether a server of its own on 127.0.0.1 works.
net_probe() {
	local p cmd='echo "ifaces=$(tail -n +3 /proc/net/dev | cut -d: -f1 | tr -d " " | sort | tr "\n" ",")";'
	for p in "$@"; do
		cmd+=" if (exec 3<>/dev/tcp/127.0.0.1/$p) 2>/dev/null; then echo $p:reached; else echo $p:refused; fi;"
	done
	cmd+=' python3 -c "import socket; s=socket.socket(); s.bind((\"127.0.0.1\", 0)); s.listen(1);
c=socket.create_connection(s.getsockname(), timeout=2); print(\"own-loopback=ok\")" 2>&1 | tail -n 1'
	echo "$cmd"
}

# sandbox_init_pid: the pid of the session's sandbox init, from the recorded runtime id process:PID:START.
sandbox_init_pid() {
	mgr session show --session "$SID"
	jr .sandbox.runtime_id | cut -d: -f2
}

# net_mcp_http: the manager's MCP HTTP listener for $SID on a free loopback port; sets MCP_PORT and
# MCP_PID (stopped at the test's end with the manager).
net_mcp_http() {
	local i
	echo "sandbox-test-token-0123456789abcdef" >"$TD/token" && chmod 0600 "$TD/token" && chown "$RUN_USER:" "$TD/token"
	"${AS[@]}" "$MANAGER" mcp --session "$SID" --socket "$MSOCK" --http 127.0.0.1:0 --token-file "$TD/token" \
		2>"$TD/mcp-http.log" &
	MCP_PID=$!
	for i in $(seq 1 100); do
		MCP_PORT=$(grep -o 'listening on [^" ]*' "$TD/mcp-http.log" | head -n 1 | sed -n 's/.*127\.0\.0\.1:\([0-9]*\).*/\1/p')
		[ -n "$MCP_PORT" ] && return 0
		sleep 0.1
	done
	bad "the MCP HTTP listener did not start: $(head -c 300 "$TD/mcp-http.log")"
	return 1
}

# net_cleanup: the test's listeners (by PID), then the manager (mgr_cleanup waits for every child).
net_cleanup() {
	# shellcheck disable=SC2086 # zero, one or two PIDs, this test's own
	kill ${MCP_PID:-} ${LISTENER_PID:-} 2>/dev/null
	mgr_cleanup
}

test_network_none() {
	local a b pid
	mgr_repo && mgr_start && mgr_session --network none || return
	trap net_cleanup EXIT
	start_listener "$TD/ports" || return
	read -r a b _ <"$TD/ports"
	assert_json .network '"none"'
	mgr session show --session "$SID"
	assert_json .network '"none"'
	net_mcp_http || return
	mgr exec --session "$SID" -- "$(net_probe "$a" "$b" "$MCP_PORT")"
	assert_eq "exit code (stderr: $(head -c 300 "$ERR"))" 0 "$RC"
	assert_eq "what the command saw" "ifaces=lo,
$a:refused
$b:refused
$MCP_PORT:refused
own-loopback=ok" "$(cat "$OUT")"
	pid=$(sandbox_init_pid)
	assert_match "the sandbox's init pid" '^[0-9]+$' "$pid"
	pgrep -f -- "^/usr/bin/slirp4netns .* $pid tap0$" >/dev/null && bad "a network helper runs for a session of policy none"
	return 0
}
t manager_network_none test_network_none

# open, the default: the NAT's device, and still none of the host's loopback; slirp4netns lives as long
# as the sandbox (its pid is gone once the session is deleted).
test_network_open_default() {
	local a b slirp
	mgr_repo && mgr_start && mgr_session || return
	trap net_cleanup EXIT
	start_listener "$TD/ports" || return
	read -r a b _ <"$TD/ports"
	assert_json .network '"open"'
	net_mcp_http || return
	mgr exec --session "$SID" -- "$(net_probe "$a" "$b" "$MCP_PORT")"
	assert_eq "exit code (stderr: $(head -c 300 "$ERR"))" 0 "$RC"
	assert_eq "what the command saw" "ifaces=lo,tap0,
$a:refused
$b:refused
$MCP_PORT:refused
own-loopback=ok" "$(cat "$OUT")"
	slirp=$(pgrep -f -- "^/usr/bin/slirp4netns .*--disable-host-loopback .* $(sandbox_init_pid) tap0$")
	[ -n "$slirp" ] || bad "no slirp4netns for the session's sandbox"
	mgr session delete --session "$SID"
	assert_eq "session delete (stderr: $(head -c 300 "$ERR"))" 0 "$RC"
	[ -n "$slirp" ] && [ -e "/proc/$slirp" ] && bad "slirp4netns (pid $slirp) outlived its sandbox: $(cat "/proc/$slirp/status" | head -n 3 | tr '\n' ' ')"
	return 0
}
t manager_network_open test_network_open_default

# The policy's words: the manager's default (serve --network none; a session may still ask for open),
# a bad word refused at start (exit 2) and at create (nothing made).
test_network_policy_words() {
	mgr_repo && mgr_start --network none && mgr_session || return
	assert_json .network '"none"'
	mgr session create --identity alice --repo "$REPO" --network open
	assert_eq "create --network open" 0 "$RC"
	assert_json .network '"open"'
	mgr session create --identity alice --repo "$REPO" --network proxy
	assert_eq "create --network proxy" 0 "$RC"
	assert_json .network '"proxy"'
	mgr session create --identity alice --repo "$REPO" --network maybe
	assert_ne "create --network maybe" 0 "$RC"
	assert_match "its message" "network must be open, none or proxy" "$(cat "$ERR")"
	mgr session list --identity alice
	assert_json '.sessions | length' 3
	"${AS[@]}" "$MANAGER" serve --state-dir "$TD/other" --network maybe >"$TD/serve.out" 2>&1
	assert_eq "serve --network maybe: exit code" 2 "$?"
	grep -q "network must be open, none or proxy, not 'maybe'" "$TD/serve.out" || bad "serve's message: $(head -c 300 "$TD/serve.out")"
	# proxy on the kubernetes backend is the agent's relay (kubernetes_egress_proxy): the config takes
	# it, and this start fails for the volume it lacks alone
	"${AS[@]}" "$MANAGER" serve --state-dir "$TD/other" --backend kubernetes --kubeconfig "$TD/none.kubeconfig" \
		--image infra-sandbox-agent:dev --network proxy >"$TD/serve.out" 2>&1
	assert_ne "serve --backend kubernetes --network proxy, no volume: exit code" 0 "$?"
	grep -q "network proxy" "$TD/serve.out" &&
		bad "serve refused kubernetes with network proxy: $(head -c 300 "$TD/serve.out")"
	grep -q "the kubernetes backend needs k8s-volume" "$TD/serve.out" ||
		bad "serve's message names the volume: $(head -c 300 "$TD/serve.out")"
	"${AS[@]}" "$MANAGER" serve --state-dir "$TD/other" --egress-allow api.internal. >"$TD/serve.out" 2>&1
	assert_eq "serve --egress-allow api.internal.: exit code" 2 "$?"
	grep -q "no trailing dot" "$TD/serve.out" || bad "serve's message for a trailing dot: $(head -c 300 "$TD/serve.out")"
	# podman's host network would be the host's loopback listeners (refused before any service is asked)
	"${AS[@]}" "$MANAGER" serve --state-dir "$TD/other" --backend podman --podman-socket "$TD/none.sock" \
		--image infra-sandbox-agent:dev --podman-network host >"$TD/serve.out" 2>&1
	assert_ne "serve --podman-network host: exit code" 0 "$?"
	grep -q "podman-network host would give commands the host's network" "$TD/serve.out" ||
		bad "serve's message for podman-network host: $(head -c 300 "$TD/serve.out")"
}
t manager_network_policy_words test_network_policy_words

# The test's namespace and everything in it, after the manager and its sandboxes (by PID).
net_ns_cleanup() {
	# The server first: mgr_cleanup waits for every child of the test.
	[ -n "${NET_SERVER_PID:-}" ] && kill -KILL "$NET_SERVER_PID" 2>/dev/null
	[ -n "${MSTATE:-}" ] && mgr_cleanup
	wait 2>/dev/null
	ip netns delete "$NET_NS" 2>/dev/null
	return 0
}

# open reaches out: the manager runs inside a network namespace this test makes, with a server on
# 192.0.2.1 (a dummy device there, TEST-NET-1) and another on that namespace's 127.0.0.1; the command
# reaches the first through the NAT and not the second. Root harness only (ip netns needs root); the
# sbtest run's manager is unprivileged, which needs /dev/net/tun open to every user (test-setup.sh).
test_network_open_reaches_out() {
	local ns="sbnet$BASHPID" out
	[ "$(id -u)" -eq 0 ] || skip "making a network namespace needs root: the harness runs as $(id -un)"
	ip netns add "$ns" || { bad "cannot make the test's network namespace"; return; }
	NET_NS=$ns
	trap net_ns_cleanup EXIT
	# The "outside": one end of a veth pair inside the namespace (both ends stay in it).
	ip -n "$ns" link set lo up && ip -n "$ns" link add outside type veth peer name outside-peer &&
		ip -n "$ns" addr add 192.0.2.1/24 dev outside && ip -n "$ns" link set outside up &&
		ip -n "$ns" link set outside-peer up || { bad "cannot set the namespace's devices up"; return; }
	ip netns exec "$ns" python3 -c '
import socket, sys
a = socket.create_server(("192.0.2.1", 18080)); b = socket.create_server(("127.0.0.1", 18081))
import select
while True:
    for s in select.select([a, b], [], [])[0]:
        c, _ = s.accept(); c.sendall(b"hello from " + s.getsockname()[0].encode() + b"\n"); c.close()
' &
	NET_SERVER_PID=$!
	mgr_repo || return
	MGR_WRAP=(ip netns exec "$ns")
	mgr_start
	trap net_ns_cleanup EXIT # mgr_start set its own: ours stops the manager too
	mgr_session || return
	mgr exec --session "$SID" -- 'for a in 192.0.2.1/18080 127.0.0.1/18081 10.0.2.2/18081; do
		if exec 3<>/dev/tcp/${a%/*}/${a#*/} 2>/dev/null; then head -n 1 <&3; exec 3<&-; else echo "$a: refused"; fi; done'
	out=$(cat "$OUT")
	assert_eq "exit code (stderr: $(head -c 300 "$ERR"))" 0 "$RC"
	assert_eq "what the command reached" "hello from 192.0.2.1
127.0.0.1/18081: refused
10.0.2.2/18081: refused" "$out"
}
t manager_network_open_reaches_out test_network_open_reaches_out

# No listener lets an unauthenticated peer hold shared capacity (N1): 40 connections held idle
# without a token (the review's attack: 32 held every slot, and the token's holder got 503) keep at
# most 8 slots, the oldest closed as newer ones come; a client with the token is still served.
test_mcp_http_unauth_budget() {
	mgr_repo && mgr_start && mgr_session || return
	trap net_cleanup EXIT
	net_mcp_http || return
	timeout 60 python3 - "$MCP_PORT" "$(cat "$TD/token")" >"$TD/flood.out" 2>&1 <<'PY'
import socket, sys, time
port, token = int(sys.argv[1]), sys.argv[2]
idle = []
for _ in range(40):
    s = socket.create_connection(("127.0.0.1", port))
    s.sendall(b"POST /mcp HTTP/1.1\r\nHost: x\r\n")  # a head that never ends, no token
    idle.append(s)
time.sleep(1)
c = socket.create_connection(("127.0.0.1", port))
c.sendall(b"GET /mcp HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + token.encode() + b"\r\n\r\n")
c.settimeout(10)
print("token holder:", c.recv(64).split(b"\r\n")[0].decode())
closed = 0
for s in idle:  # closed by the manager: its end read (after a 503 or nothing), or a reset
    s.settimeout(0.5)
    try:
        while s.recv(4096):
            pass
        closed += 1
    except socket.timeout:
        pass
    except OSError:
        closed += 1
print("idle closed:", closed)
PY
	assert_eq "the flood's exit code ($(cat "$TD/flood.out"))" 0 "$?"
	assert_eq "the token holder's answer" "token holder: HTTP/1.1 405 Method Not Allowed" "$(sed -n 1p "$TD/flood.out")"
	assert_ge "idle connections closed" "$(sed -n 's/^idle closed: //p' "$TD/flood.out")" 32
}
t manager_mcp_http_unauth_budget test_mcp_http_unauth_budget

# ---------------------------------------------------------------- podman: what the runtime gives

# pod_net_probe PORT...: net_probe for the sandbox image, which has bash and coreutils, no python:
# the interfaces, then "PORT:reached" or "PORT:refused" for each PORT of 127.0.0.1 (the only address
# it tries: inside a container, its own loopback).
pod_net_probe() {
	local p cmd='echo "ifaces=$(tail -n +3 /proc/net/dev | cut -d: -f1 | tr -d " " | sort | tr "\n" ",")";'
	for p in "$@"; do
		cmd+=" if (exec 3<>/dev/tcp/127.0.0.1/$p) 2>/dev/null; then echo $p:reached; else echo $p:refused; fi;"
	done
	echo "$cmd"
}

# pod_net_case POLICY IFACES MODE: a podman session of POLICY (the manager's default network, bridge,
# for open); the container's NetworkMode is MODE, the command sees IFACES, and neither the host's
# 127.0.0.1 listeners nor the manager's MCP HTTP and metrics listeners answer it.
pod_net_case() {
	local a b m
	need_podman
	# a free port for the metrics listener (manager_status.sh's free_port is defined after this file runs)
	m=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
	mgr_repo && pod_mgr_start --metrics-listen "127.0.0.1:$m" && mgr_session --network "$1" || return
	trap 'kill ${MCP_PID:-} ${LISTENER_PID:-} 2>/dev/null; pod_cleanup' EXIT
	start_listener "$TD/ports" || return
	read -r a b _ <"$TD/ports"
	assert_json .network "\"$1\""
	net_mcp_http || return
	mgr exec --session "$SID" -- "$(pod_net_probe "$a" "$b" "$MCP_PORT" "$m")"
	assert_eq "exit code (stderr: $(head -c 300 "$ERR"))" 0 "$RC"
	assert_eq "what the command saw" "ifaces=$2
$a:refused
$b:refused
$MCP_PORT:refused
$m:refused" "$(cat "$OUT")"
	assert_eq "the container's NetworkMode" "$3" "$(podman_cli inspect -f '{{.HostConfig.NetworkMode}}' "$(pod_sandbox_id)")"
	# the probe is not blind: the same lines from the host's own network reach both listeners
	(exec 3<>"/dev/tcp/127.0.0.1/$a") 2>/dev/null || bad "the host's listener on 127.0.0.1:$a does not answer the host"
	(exec 3<>"/dev/tcp/127.0.0.1/$MCP_PORT") 2>/dev/null || bad "the MCP HTTP listener does not answer the host"
	(exec 3<>"/dev/tcp/127.0.0.1/$m") 2>/dev/null || bad "the metrics listener does not answer the host"
	return 0
}

# none: podman's NetworkMode none, loopback only.
test_network_podman_none() { pod_net_case none "lo," none; }
t manager_network_podman_none test_network_podman_none

# open: the tests' rootful service's default network, bridge (CNI): the container's own namespace with
# lo and eth0; 127.0.0.1 there is the container's, so the host's loopback stays out of reach.
test_network_podman_open() { pod_net_case open "eth0,lo," bridge; }
t manager_network_podman_open test_network_podman_open
