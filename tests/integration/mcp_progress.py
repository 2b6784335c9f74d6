#!/usr/bin/env python3
"""One tools/call with a progress token on a stdio `sandbox-manager mcp`, for manager_mcp_progress
(manager_live.sh): records each progress notification with its arrival time.

  mcp_progress.py MANAGER SOCKET SESSION COMMAND

Prints one JSON object: {"progress": [{"t": seconds since the call, "progress": N, "message": M}],
"result": the tools/call result}; its stderr goes to ours.
"""
import json
import subprocess
import sys
import time


def send(p, msg):
    p.stdin.write((json.dumps(msg) + "\n").encode())
    p.stdin.flush()


def main():
    manager, sock, session, command = sys.argv[1:5]
    p = subprocess.Popen([manager, "mcp", "--session", session, "--socket", sock],
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    send(p, {"jsonrpc": "2.0", "id": 1, "method": "initialize",
             "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                        "clientInfo": {"name": "mcp_progress.py", "version": "1"}}})
    assert json.loads(p.stdout.readline()).get("id") == 1
    send(p, {"jsonrpc": "2.0", "method": "notifications/initialized"})
    t0 = time.monotonic()
    send(p, {"jsonrpc": "2.0", "id": 2, "method": "tools/call",
             "params": {"name": "bash", "arguments": {"command": command}, "_meta": {"progressToken": "tok"}}})
    progress, result = [], None
    while result is None:
        line = p.stdout.readline()
        if not line:
            sys.exit("mcp_progress.py: the server closed stdout before the result")
        msg = json.loads(line)
        if msg.get("method") == "notifications/progress":
            prm = msg["params"]
            progress.append({"t": round(time.monotonic() - t0, 3), "progress": prm["progress"],
                             "message": prm.get("message"), "token": prm["progressToken"]})
        elif msg.get("id") == 2:
            result = msg.get("result", msg)
    p.stdin.close()
    p.wait(timeout=30)
    print(json.dumps({"progress": progress, "result": result}))


if __name__ == "__main__":
    main()
