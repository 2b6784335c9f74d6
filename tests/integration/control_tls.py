#!/usr/bin/env python3
"""Raw TLS clients of the manager's control API, for manager_tls.sh (what the CLI cannot be made to do).

  control_tls.py nocert PORT CA SESSION
      connects without a client certificate and, if the handshake lets it, sends an exec on SESSION;
      prints "refused" when the manager closed or failed the handshake, else the answer.
  control_tls.py hold PORT CA CERT KEY SESSION DENYFILE LINE
      one connection: a config request (prints "first: ok" when answered), then LINE appended to
      DENYFILE (a revocation), a wait of 2.5 s (over the manager's bound of 1 s), and an exec on
      SESSION on the same connection: prints "second: closed" when the manager closed it unanswered,
      else the answer.
  control_tls.py ask PORT CA CERT KEY SESSION
      one exec on SESSION (an owner elsewhere answers before anything runs); prints "owned ADDRESS OWNER" for an owned answer, else the answer.
  control_tls.py mcp MANAGER SESSION COMMAND
      runs `MANAGER mcp --session SESSION` (its manager and certificate from the environment) and one
      bash tool call of COMMAND over stdio; prints the tool result's text and "isError" when it is one.
  control_tls.py stall PORT N SECONDS
      N TCP connections that never start a handshake, held SECONDS; prints "open N" once made, then
      "closed K": how many of them the manager had closed by then.
  control_tls.py idle PORT CA CERT KEY SECONDS [N]
      one verified connection that sends nothing, held SECONDS; prints "held" once verified. With N:
      N of them, and "held H refused R": how many the manager answered at once (refused) or not.
The manager's certificate is verified against CA; its name (an address) is the CLI's business.
"""
import json
import select
import socket
import ssl
import struct
import sys
import time


def connect(port, ca, cert=None, key=None):
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.check_hostname = False
    ctx.load_verify_locations(ca)
    if cert:
        ctx.load_cert_chain(cert, key)
    raw = socket.create_connection(("127.0.0.1", int(port)), timeout=15)
    return ctx.wrap_socket(raw, server_hostname="127.0.0.1")


def send(s, req):
    body = json.dumps(req).encode()
    s.sendall(struct.pack(">I", len(body)) + body)


def answer(s):
    data = b""
    try:
        while len(data) < 4 or len(data) < 4 + struct.unpack(">I", data[:4])[0]:
            chunk = s.recv(65536)
            if not chunk:
                break
            data += chunk
    except (ssl.SSLError, OSError):
        return None
    n = struct.unpack(">I", data[:4])[0] if len(data) >= 4 else 0
    return json.loads(data[4:4 + n]) if n and len(data) >= 4 + n else None


def exec_req(session):
    return {"op": "exec", "session": session, "command": "echo ran-over-tls"}


def main():
    mode = sys.argv[1]
    if mode == "nocert":
        port, ca, session = sys.argv[2:5]
        try:
            s = connect(port, ca)
            send(s, exec_req(session))
            a = answer(s)
        except (ssl.SSLError, OSError):
            a = None
        print("refused" if a is None else json.dumps(a))
    elif mode == "hold":
        port, ca, cert, key, session, deny, line = sys.argv[2:9]
        s = connect(port, ca, cert, key)
        send(s, {"op": "config"})
        a = answer(s)
        print("first: " + ("ok" if a and a.get("ok") else json.dumps(a)), flush=True)
        with open(deny, "a") as f:
            f.write(line + "\n")
        time.sleep(2.5)
        try:
            send(s, exec_req(session))
            a = answer(s)
        except (ssl.SSLError, OSError):
            a = None
        print("second: " + ("closed" if a is None else json.dumps(a)))
    elif mode == "mcp":
        import subprocess
        manager, session, command = sys.argv[2:5]
        p = subprocess.Popen([manager, "mcp", "--session", session], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, text=True)
        def rpc(msg):
            p.stdin.write(json.dumps(msg) + "\n")
            p.stdin.flush()
        rpc({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}})
        p.stdout.readline()
        rpc({"jsonrpc": "2.0", "method": "notifications/initialized"})
        rpc({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "bash",
             "arguments": {"command": command}}})
        line = p.stdout.readline()
        p.stdin.close()
        p.wait(timeout=30)
        res = json.loads(line).get("result", {})
        text = "".join(c.get("text", "") for c in res.get("content", []))
        print(text.strip() + (" isError" if res.get("isError") else ""))
    elif mode == "stall":
        port, n, secs = sys.argv[2], int(sys.argv[3]), float(sys.argv[4])
        held = [socket.create_connection(("127.0.0.1", int(port)), timeout=5) for _ in range(n)]
        print("open %d" % len(held), flush=True)
        time.sleep(secs)
        closed = 0
        for s in held:
            s.setblocking(False)
            try:
                closed += s.recv(1) == b""
            except BlockingIOError:
                pass
            except OSError:
                closed += 1
        print("closed %d" % closed, flush=True)
    elif mode == "idle":
        port, ca, cert, key, secs = sys.argv[2:7]
        n = int(sys.argv[7]) if len(sys.argv) > 7 else 1
        held = [connect(port, ca, cert, key) for _ in range(n)]
        if n == 1:
            print("held", flush=True)
        else:
            time.sleep(0.5)  # a refusal comes at once, after the handshake
            refused = len([s for s in held if select.select([s], [], [], 0)[0]])
            print("held %d refused %d" % (n - refused, refused), flush=True)
        time.sleep(float(secs))
    elif mode == "ask":
        port, ca, cert, key, session = sys.argv[2:7]
        s = connect(port, ca, cert, key)
        send(s, {"op": "exec", "session": session, "command": "echo must-not-run"})
        a = answer(s) or {}
        e = a.get("error") or {}
        if e.get("kind") == "owned":
            print("owned %s %s" % (e.get("address"), e.get("owner")))
        else:
            print(json.dumps(a))
    else:
        sys.exit("unknown mode " + mode)


main()
