#!/usr/bin/env python3
"""Floods a stdio `sandbox-manager mcp` with tools/call requests, for manager_mcp_queue_bound
(manager_mcp.sh): one call that holds the session (FIRST_COMMAND: it creates MARKER, then sleeps),
then, once MARKER exists (the call left the queue and runs), N quick ones written at once, faster
than the session runs them.

  mcp_flood.py MANAGER SOCKET SESSION MARKER N FIRST_COMMAND QUICK_COMMAND

Prints one JSON object: {"ok": ids answered with a result, "tool_errors": those of them whose
result is an error (with its text), "refused": ids answered with a JSON-RPC error, "errors": the
distinct error messages}; its stderr goes to ours.
"""
import json
import os
import subprocess
import sys
import time


def send(p, msg):
    p.stdin.write((json.dumps(msg) + "\n").encode())
    p.stdin.flush()


def call(p, i, command):
    send(p, {"jsonrpc": "2.0", "id": i, "method": "tools/call",
             "params": {"name": "bash", "arguments": {"command": command}}})


def main():
    manager, sock, session, marker, n, first, quick = sys.argv[1:8]
    n = int(n)
    p = subprocess.Popen([manager, "mcp", "--session", session, "--socket", sock],
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    send(p, {"jsonrpc": "2.0", "id": 1, "method": "initialize",
             "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                        "clientInfo": {"name": "mcp_flood.py", "version": "1"}}})
    assert json.loads(p.stdout.readline()).get("id") == 1
    send(p, {"jsonrpc": "2.0", "method": "notifications/initialized"})
    call(p, 2, first)
    deadline = time.monotonic() + 30
    while not os.path.exists(marker):
        if time.monotonic() > deadline:
            sys.exit("mcp_flood.py: the first call never started (no %s)" % marker)
        time.sleep(0.02)
    for i in range(3, 3 + n):
        call(p, i, quick)
    ok, refused, errors, tool_errors = [], [], set(), {}
    while len(ok) + len(refused) < n + 1:
        line = p.stdout.readline()
        if not line:
            sys.exit("mcp_flood.py: the server closed stdout with %d answers" % (len(ok) + len(refused)))
        msg = json.loads(line)
        if "id" not in msg:
            continue  # a notification (progress)
        if "error" in msg:
            refused.append(msg["id"])
            errors.add(msg["error"]["message"])
        else:
            ok.append(msg["id"])
            if msg["result"].get("isError"):
                tool_errors[msg["id"]] = msg["result"]["content"][0]["text"][-300:]
    p.stdin.close()
    p.wait(timeout=30)
    print(json.dumps({"ok": sorted(ok), "tool_errors": tool_errors, "refused": sorted(refused),
                      "errors": sorted(errors)}))


if __name__ == "__main__":
    main()
