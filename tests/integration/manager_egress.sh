# shellcheck shell=bash
# The network policy `proxy` (issue 28; process backend): the sandbox has loopback only, and the
# manager's egress proxy listens on the sandbox's own 127.0.0.1:3128 (a socket the manager made in
# the sandbox's network namespace and holds). CONNECT to the allow-list's destinations tunnels,
# unread; anything else gets an HTTP error naming the rule. The manager runs inside a network
# namespace this test makes: its destinations are 192.0.2.1 (TEST-NET-1, a veth end there) and that
# namespace's own 127.0.0.1, never a real address. "api.internal" is 192.0.2.1 through the
# namespace's /etc/hosts (ip netns exec mounts /etc/netns/NAME/hosts over /etc/hosts).

EG_PORT=3128

# egress_ns: the namespace, its devices, the servers (plain TCP echo on 192.0.2.1:18444, HTTPS on
# 192.0.2.1:18443, a "manager loopback" marker on its 127.0.0.1:18081), and the manager in it
# (mgr_start's args: "$@"; EG_POD=1: pod_mgr_start's, the podman backend). Sets NET_NS, NET_SERVER_PID.
egress_ns() {
	local ns="sbeg$BASHPID" i
	ip netns add "$ns" || { bad "cannot make the test's network namespace"; return 1; }
	NET_NS=$ns
	trap egress_cleanup EXIT
	mkdir -p "/etc/netns/$ns" && printf '127.0.0.1 localhost\n192.0.2.1 api.internal\n' >"/etc/netns/$ns/hosts"
	ip -n "$ns" link set lo up && ip -n "$ns" link add outside type veth peer name outside-peer &&
		ip -n "$ns" addr add 192.0.2.1/24 dev outside && ip -n "$ns" link set outside up &&
		ip -n "$ns" link set outside-peer up || { bad "cannot set the namespace's devices up"; return 1; }
	openssl req -x509 -newkey rsa:2048 -nodes -keyout "$TD/srv.key" -out "$TD/srv.crt" -days 1 \
		-subj /CN=api.internal >/dev/null 2>&1 || { bad "cannot make the server's certificate"; return 1; }
	ip netns exec "$ns" python3 -c '
import socket, ssl, select, sys, threading
ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER); ctx.load_cert_chain(sys.argv[1], sys.argv[2])
echo = socket.create_server(("192.0.2.1", 18444)); tls = socket.create_server(("192.0.2.1", 18443))
mark = socket.create_server(("127.0.0.1", 18081))
def serve_echo(c):
    c.sendall(b"echo ready\n")
    while True:
        d = c.recv(65536)
        if not d: break
        c.sendall(d)
    c.close()
def serve_tls(c):
    try:
        s = ctx.wrap_socket(c, server_side=True); s.recv(4096)
        s.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 15\r\nConnection: close\r\n\r\nhello over tls\n"); s.close()
    except Exception: c.close()
while True:
    for l in select.select([echo, tls, mark], [], [])[0]:
        c, _ = l.accept()
        if l is mark: c.sendall(b"manager loopback\n"); c.close()
        else: threading.Thread(target=serve_echo if l is echo else serve_tls, args=(c,), daemon=True).start()
' "$TD/srv.crt" "$TD/srv.key" &
	NET_SERVER_PID=$!
	for i in $(seq 1 50); do
		ip netns exec "$ns" bash -c '(exec 3<>/dev/tcp/127.0.0.1/18081)' 2>/dev/null && break
		sleep 0.1
	done
	mgr_repo || return 1
	MGR_WRAP=(ip netns exec "$ns")
	if [ "${EG_POD:-0}" = 1 ]; then pod_mgr_start "$@" || return 1; else mgr_start "$@" || return 1; fi
	trap egress_cleanup EXIT # mgr_start set its own: ours stops the manager too
}

egress_cleanup() {
	[ -n "${NET_SERVER_PID:-}" ] && kill -KILL "$NET_SERVER_PID" 2>/dev/null
	[ -n "${HOLD_PID:-}" ] && kill -KILL "$HOLD_PID" 2>/dev/null
	if [ -n "${MSTATE:-}" ]; then
		if [ "${EG_POD:-0}" = 1 ]; then pod_cleanup; else mgr_cleanup; fi
	fi
	wait 2>/dev/null
	[ -n "${NET_NS:-}" ] && ip netns delete "$NET_NS" 2>/dev/null && rm -rf "/etc/netns/$NET_NS"
	return 0
}

# eg_connect TARGET [SEND]: a python3 program for the sandbox: CONNECT TARGET through the proxy on
# its loopback, then prints the answer's status line; on 200 sends SEND and prints what came back
# (the destination's first line); otherwise prints the body.
eg_connect() {
	cat <<PY
python3 - <<'X'
import socket
s = socket.create_connection(("127.0.0.1", $EG_PORT), timeout=10)
s.sendall(b"CONNECT $1 HTTP/1.1\r\nHost: $1\r\n\r\n")
head = b""
while b"\r\n\r\n" not in head:
    d = s.recv(1)
    if not d: break
    head += d
print(head.split(b"\r\n")[0].decode())
if b" 200 " in head:
    print(s.recv(4096).decode().strip())
else:
    print(s.recv(4096).decode().strip())
X
PY
}

# Under proxy: the variables, a TLS request by curl through HTTPS_PROXY, 256 KiB of random bytes
# through a tunnel and back unchanged, a destination off the list (403 naming the rule), a request
# that is not CONNECT (403), a name resolving to the manager's loopback (403), and no way around the
# proxy (the destination and the manager's loopback unreachable directly). Under none, no listener
# and no variables.
test_egress_proxy_tunnel() {
	egress_ns --network proxy --egress-allow api.internal:18443 --egress-allow 192.0.2.1:18444 \
		--egress-allow localhost:18081 --egress-allow .corp.example || return
	mgr_session || return
	assert_json .network '"proxy"'
	mgr session show --session "$SID"
	assert_json .network '"proxy"'
	assert_json .egress.proxy "\"http://127.0.0.1:$EG_PORT\""
	assert_json .egress.allow '"api.internal:18443, 192.0.2.1:18444, localhost:18081, .corp.example:443"'
	mgr exec --session "$SID" -- 'env | grep -i _proxy= | sort'
	assert_eq "exit code (stderr: $(head -c 300 "$ERR"))" 0 "$RC"
	assert_eq "the proxy variables" "HTTPS_PROXY=http://127.0.0.1:$EG_PORT
HTTP_PROXY=http://127.0.0.1:$EG_PORT
NO_PROXY=localhost,127.0.0.1
http_proxy=http://127.0.0.1:$EG_PORT
https_proxy=http://127.0.0.1:$EG_PORT
no_proxy=localhost,127.0.0.1" "$(cat "$OUT")"
	# TLS end to end: the proxy passes the handshake's bytes as they are (-k: the test's own cert)
	mgr exec --session "$SID" -- 'curl -sSk --max-time 20 https://api.internal:18443/'
	assert_eq "curl through HTTPS_PROXY (stderr: $(head -c 300 "$ERR"))" "hello over tls" "$(cat "$OUT")"
	# on the exec's record: the tunnel, its destination and status, unread and so counted mutating
	mgr records --session "$SID" --limit 1
	assert_json '.records[0].result.egress | [.requests, .refused, .mutating_accepted]' '[1,0,1]'
	assert_json '.records[0].result.egress.details[0] | [.method, .host, .status]' '["CONNECT","api.internal:18443",200]'
	mgr exec --session "$SID" -- "python3 - <<'X'
import hashlib, os, socket
s = socket.create_connection(('127.0.0.1', $EG_PORT), timeout=20)
s.sendall(b'CONNECT 192.0.2.1:18444 HTTP/1.1\r\nHost: 192.0.2.1:18444\r\n\r\n')
f = s.makefile('rb')
print(f.readline().decode().strip()); f.readline(); print(f.readline().decode().strip())
data = b'GET / HTTP/1.1\r\nHost: x\r\n\r\n' + os.urandom(256 * 1024)
s.sendall(data); s.shutdown(socket.SHUT_WR)
back = f.read()
print('unchanged' if back == data else 'changed: %d bytes of %d' % (len(back), len(data)))
X"
	assert_eq "a raw tunnel (stderr: $(head -c 300 "$ERR"))" "HTTP/1.1 200 Connection established
echo ready
unchanged" "$(cat "$OUT")"
	mgr exec --session "$SID" -- "$(eg_connect example.com:443)"
	assert_eq "off the list" "HTTP/1.1 403 Forbidden
infra-sandbox egress: \"example.com:443\" is not allowed for session $SID (allowed: api.internal:18443, 192.0.2.1:18444, localhost:18081, .corp.example:443)" "$(cat "$OUT")"
	mgr exec --session "$SID" -- "$(eg_connect localhost:18081)"
	assert_match "a name resolving to the manager's loopback" "^HTTP/1.1 403 Forbidden
infra-sandbox egress: \"localhost:18081\" is refused for session $SID: localhost resolves only to loopback" "$(cat "$OUT")"
	mgr exec --session "$SID" -- 'curl -sS --max-time 10 -o /dev/null -w "%{http_code}\n" http://api.internal:18443/; cat /dev/null'
	assert_eq "a plain HTTP request through HTTP_PROXY" "403" "$(cat "$OUT")"
	# no way around it: the destination and the manager's loopback, directly; the proxy's port is
	# the only one on the sandbox's loopback
	mgr exec --session "$SID" -- 'for a in 192.0.2.1/18444 127.0.0.1/18081 10.0.2.2/18081; do
		if (exec 3<>/dev/tcp/${a%/*}/${a#*/}) 2>/dev/null; then echo "$a: reached"; else echo "$a: refused"; fi; done
		echo "ifaces=$(tail -n +3 /proc/net/dev | cut -d: -f1 | tr -d " " | sort | tr "\n" ",")"'
	assert_eq "direct connections" "192.0.2.1/18444: refused
127.0.0.1/18081: refused
10.0.2.2/18081: refused
ifaces=lo," "$(cat "$OUT")"
	# none: loopback only, no listener, no variables
	mgr_session --network none || return
	mgr session show --session "$SID"
	assert_json .egress null
	mgr exec --session "$SID" -- "env | grep -ci _proxy=; if (exec 3<>/dev/tcp/127.0.0.1/$EG_PORT) 2>/dev/null; then echo reached; else echo refused; fi"
	assert_eq "policy none" "0
refused" "$(cat "$OUT")"
}
t manager_egress_proxy_tunnel test_egress_proxy_tunnel

# A session's own allow-list (session create --egress-allow, kept with the session, schema 7) is
# added to the manager's for that session alone: its destination tunnels for it and gets 403 for a
# session without it, whose list names the manager's alone. A pattern is checked by the manager's
# rules at create, and a list is refused for a session that has no proxy.
test_egress_session_allow() {
	local own other
	egress_ns --network proxy --egress-allow api.internal:18443 || return
	mgr_session --egress-allow 192.0.2.1:18444 || return
	own=$SID
	mgr session show --session "$own"
	assert_json .egress.allow '"api.internal:18443, 192.0.2.1:18444"'
	assert_json .egress.session_allow '"192.0.2.1:18444"'
	mgr_session || return
	other=$SID
	mgr session show --session "$other"
	assert_json .egress.allow '"api.internal:18443"'
	mgr exec --session "$own" -- "$(eg_connect 192.0.2.1:18444)"
	assert_eq "its own destination (stderr: $(head -c 300 "$ERR"))" "HTTP/1.1 200 Connection established
echo ready" "$(cat "$OUT")"
	mgr exec --session "$other" -- "$(eg_connect 192.0.2.1:18444)"
	assert_eq "another session's destination" "HTTP/1.1 403 Forbidden
infra-sandbox egress: \"192.0.2.1:18444\" is not allowed for session $other (allowed: api.internal:18443)" "$(cat "$OUT")"
	mgr records --session "$other" --limit 1
	assert_json '.records[0].result.egress | [.requests, .refused]' '[1,1]'
	mgr session create --identity alice --repo "$REPO" --egress-allow api.internal.
	assert_ne "a pattern with a trailing dot" 0 "$RC"
	assert_match "its message" "no trailing dot" "$(cat "$ERR")"
	mgr session create --identity alice --repo "$REPO" --network none --egress-allow 192.0.2.1:18444
	assert_ne "a list for a session of network none" 0 "$RC"
	assert_match "its message" "egress-allow is for a session of network proxy" "$(cat "$ERR")"
	mgr session list --identity alice
	assert_json '.sessions | length' 2
}
t manager_egress_session_allow test_egress_session_allow

# A `file:` Kubernetes grant's API server is admitted for the sandboxes that hold the grant: its
# kubeconfig is inside, so kubectl goes through the proxy to the server it names (https://
# api.internal:18443 here, the namespace's TLS server), while the manager's list names nothing. A
# session without the grant gets 403 for the same server.
test_egress_grant_endpoint() {
	cat >"$TD/files.kubeconfig" <<-'EOF'
		apiVersion: v1
		kind: Config
		clusters:
		- name: c
		  cluster:
		    server: https://api.internal:18443
		users:
		- name: u
		  user:
		    token: file-grant-token
		contexts:
		- name: ctx
		  context:
		    cluster: c
		    user: u
		current-context: ctx
	EOF
	chown "$RUN_USER:" "$TD/files.kubeconfig"
	egress_ns --network proxy --resource "kubernetes:files=file:$TD/files.kubeconfig" || return
	mgr_session --grant kubernetes:files=read || return
	mgr exec --session "$SID" -- 'curl -sSk --max-time 20 https://api.internal:18443/'
	assert_eq "the grant's server through the proxy (stderr: $(head -c 300 "$ERR"))" "hello over tls" "$(cat "$OUT")"
	mgr records --session "$SID" --limit 1
	assert_json '.records[0].result.egress.details[0] | [.method, .host, .status]' '["CONNECT","api.internal:18443",200]'
	mgr_session || return
	mgr exec --session "$SID" -- 'curl -sSk --max-time 20 -o /dev/null -w "%{http_connect}\n" https://api.internal:18443/; true'
	assert_eq "the same server for a session without the grant" 403 "$(cat "$OUT")"
}
t manager_egress_grant_endpoint test_egress_grant_endpoint

# pod_eg_connect TARGET: a bash program for the sandbox image (no python there): CONNECT TARGET
# through the proxy on its loopback, then prints the answer's status line; on 200 prints the
# destination's first line, sends "hello" and prints what came back; otherwise prints the body.
pod_eg_connect() {
	cat <<SH
exec 3<>/dev/tcp/127.0.0.1/$EG_PORT || exit 1
printf 'CONNECT $1 HTTP/1.1\r\nHost: $1\r\n\r\n' >&3
IFS= read -r -t 10 st <&3; echo "\${st%\$'\r'}"
while IFS= read -r -t 10 l <&3 && [ -n "\${l%\$'\r'}" ]; do :; done
IFS= read -r -t 10 l <&3; echo "\$l"
case \$st in *" 200 "*) echo hello >&3; IFS= read -r -t 10 l <&3; echo "\$l" ;; esac
SH
}

# The podman backend under proxy: the container's network is the runtime's loopback-only
# namespace (NetworkMode none); the agent makes 127.0.0.1:3128 there and hands it to the manager
# over sock/net.sock (a rootful service's container is not the manager's to enter), and holds no
# copy: ss in the container's namespace names the manager alone. The variables, a tunnel to an
# allowed destination on the exec's record, a destination off the list refused naming the rule,
# and no direct way out.
test_egress_podman_proxy() {
	local cpid held
	need_podman
	EG_POD=1
	egress_ns --network proxy --egress-allow 192.0.2.1:18444 || return
	mgr_session || return
	assert_json .network '"proxy"'
	mgr exec --session "$SID" -- 'env | grep -i _proxy= | sort'
	assert_eq "exit code (stderr: $(head -c 300 "$ERR"))" 0 "$RC"
	assert_eq "the proxy variables" "HTTPS_PROXY=http://127.0.0.1:$EG_PORT
HTTP_PROXY=http://127.0.0.1:$EG_PORT
NO_PROXY=localhost,127.0.0.1
http_proxy=http://127.0.0.1:$EG_PORT
https_proxy=http://127.0.0.1:$EG_PORT
no_proxy=localhost,127.0.0.1" "$(cat "$OUT")"
	mgr exec --session "$SID" -- "$(pod_eg_connect 192.0.2.1:18444)"
	assert_eq "a tunnel to an allowed destination (stderr: $(head -c 300 "$ERR"))" "HTTP/1.1 200 Connection established
echo ready
hello" "$(cat "$OUT")"
	mgr records --session "$SID" --limit 1
	assert_json '.records[0].result.egress | [.requests, .refused]' '[1,0]'
	assert_json '.records[0].result.egress.details[0] | [.method, .host, .status]' '["CONNECT","192.0.2.1:18444",200]'
	mgr exec --session "$SID" -- "$(pod_eg_connect example.com:443)"
	assert_eq "off the list" "HTTP/1.1 403 Forbidden
infra-sandbox egress: \"example.com:443\" is not allowed for session $SID (allowed: 192.0.2.1:18444)" "$(cat "$OUT")"
	mgr records --session "$SID" --limit 1
	assert_json '.records[0].result.egress | [.requests, .refused]' '[1,1]'
	mgr exec --session "$SID" -- 'for a in 192.0.2.1/18444 127.0.0.1/18081; do
		if (exec 3<>/dev/tcp/${a%/*}/${a#*/}) 2>/dev/null; then echo "$a: reached"; else echo "$a: refused"; fi; done
		echo "ifaces=$(tail -n +3 /proc/net/dev | cut -d: -f1 | tr -d " " | sort | tr "\n" ",")"'
	assert_eq "direct connections" "192.0.2.1/18444: refused
127.0.0.1/18081: refused
ifaces=lo," "$(cat "$OUT")"
	# the agent's net socket is out of the command's reach, as agent.sock beside it
	mgr exec --session "$SID" -- 'for f in net.sock agent.sock; do if [ -e /.sandbox/agent/sock/$f ]; then echo "$f: seen"; else echo "$f: hidden"; fi; done'
	assert_eq "the agent's sockets from a command" "net.sock: hidden
agent.sock: hidden" "$(cat "$OUT")"
	[ -n "$(find "$MSTATE" -name net.sock -type s 2>/dev/null)" ] || bad "no net.sock in the sandbox's private directory"
	assert_eq "the container's NetworkMode" none "$(podman_cli inspect -f '{{.HostConfig.NetworkMode}}' "$(pod_sandbox_id)")"
	cpid=$(podman_cli inspect -f '{{.State.Pid}}' "$(pod_sandbox_id)")
	held=$(nsenter -t "$cpid" -n ss -Hltnp "sport = :$EG_PORT")
	assert_match "who holds 127.0.0.1:$EG_PORT in the container ($held)" "127\\.0\\.0\\.1:$EG_PORT .*\\(\\(\"sandbox-manager\",pid=$MGR_PID,fd=[0-9]+\\)\\)\$" "$held"
}
t manager_egress_podman_proxy test_egress_podman_proxy

# mgr_sockets: how many sockets the manager holds (its /proc/PID/fd).
mgr_sockets() { find "/proc/$MGR_PID/fd" -lname 'socket:*' 2>/dev/null | wc -l; }

# The per-sandbox connection limit (EGRESS_CONN_MAX, 16) holds: 16 tunnels held open, the 17th gets
# 503, and another session's proxy still works meanwhile. The listener is the manager's (ss in the
# sandbox's network namespace names the manager's pid, and no process of the sandbox), and it is
# closed with the session: the manager's sockets go back to their count before the sandbox.
test_egress_proxy_limit_and_close() {
	local first second first_wt init before during held i
	egress_ns --network proxy --egress-allow 192.0.2.1:18444 --egress-allow api.internal:18443 || return
	mgr_session || return
	first=$SID
	before=$(mgr_sockets)
	mgr exec --session "$first" -- true
	init=$(mgr session show --session "$first" && jr .sandbox.runtime_id | cut -d: -f2)
	assert_match "the sandbox's init pid" '^[0-9]+$' "$init"
	held=$(nsenter -t "$init" -n ss -Hltnp "sport = :$EG_PORT")
	assert_match "who holds 127.0.0.1:$EG_PORT in the sandbox ($held)" "127\\.0\\.0\\.1:$EG_PORT .*\"sandbox-manager\",pid=$MGR_PID,fd=[0-9]+\\)\\)\$" "$held"
	during=$(mgr_sockets)
	mgr_session || return
	second=$SID
	mgr exec --session "$second" -- true
	"${AS[@]}" env "SANDBOX_MANAGER_SOCKET=$MSOCK" "$MANAGER" exec --session "$first" -- "python3 - <<'X'
import os, socket, time
held = []
for i in range(16):
    s = socket.create_connection(('127.0.0.1', $EG_PORT), timeout=10)
    s.sendall(b'CONNECT 192.0.2.1:18444 HTTP/1.1\r\n\r\n')
    f = s.makefile('rb'); st = f.readline(); f.readline(); ready = f.readline()
    held.append((s, f))
    if b' 200 ' not in st or ready != b'echo ready\n': print('tunnel', i, st, ready)
print('held', len(held))
s = socket.create_connection(('127.0.0.1', $EG_PORT), timeout=10)
s.sendall(b'CONNECT 192.0.2.1:18444 HTTP/1.1\r\n\r\n')
print(s.makefile('rb').readline().decode().strip())
open('held', 'w').close()
for _ in range(300):
    if os.path.exists('release'): break
    time.sleep(0.1)
X" >"$TD/first.out" 2>"$TD/first.err" &
	HOLD_PID=$!
	first_wt=$(mgr session show --session "$first" && jr .worktree)
	for i in $(seq 1 300); do [ -e "$first_wt/held" ] && break; sleep 0.1; done
	mgr exec --session "$second" -- 'curl -sSk --max-time 20 https://api.internal:18443/'
	assert_eq "another session's proxy while the first is full (stderr: $(head -c 300 "$ERR"))" "hello over tls" "$(cat "$OUT")"
	touch "$first_wt/release"
	wait "$HOLD_PID"
	HOLD_PID=
	assert_eq "the first session's connections (stderr: $(head -c 300 "$TD/first.err"))" "held 16
HTTP/1.1 503 Service Unavailable" "$(cat "$TD/first.out")"
	mgr session delete --session "$first"
	assert_eq "session delete (stderr: $(head -c 300 "$ERR"))" 0 "$RC"
	mgr session delete --session "$second"
	assert_eq "session delete (stderr: $(head -c 300 "$ERR"))" 0 "$RC"
	assert_ge "sockets while the sandbox lived ($during, before it: $before)" "$during" $((before + 1))
	assert_eq "the manager's sockets once both sessions are deleted" "$before" "$(mgr_sockets)"
}
t manager_egress_proxy_limit_and_close test_egress_proxy_limit_and_close
