#!/usr/bin/env python3
"""Stops a stdio `sandbox-manager mcp` the way Claude Code does, for manager_mcp_stop (manager_mcp.sh):
writes notifications/cancelled for the running call and at once sends SIGINT, then SIGTERM 100 ms
and SIGKILL 400 ms later while the server is still there.

  mcp_stop.py MANAGER SOCKET SESSION MARKER cancel|no-cancel COMMAND

COMMAND must create MARKER first: the signals are sent once it exists (the call is running).
Prints one JSON object: the server's exit status and the last signal sent; its stderr goes to ours.
"""
import json
import os
import signal
import subprocess
import sys
import time


def send(p, msg):
    p.stdin.write((json.dumps(msg) + "\n").encode())
    p.stdin.flush()


def read_answer(p, want_id):
    while True:
        line = p.stdout.readline()
        if not line:
            sys.exit("mcp_stop.py: the server closed stdout before answering %r" % want_id)
        msg = json.loads(line)
        if msg.get("id") == want_id:
            return msg


def main():
    manager, sock, session, marker, mode, command = sys.argv[1:7]
    p = subprocess.Popen([manager, "mcp", "--session", session, "--socket", sock],
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    send(p, {"jsonrpc": "2.0", "id": 1, "method": "initialize",
             "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                        "clientInfo": {"name": "mcp_stop.py", "version": "1"}}})
    read_answer(p, 1)
    send(p, {"jsonrpc": "2.0", "method": "notifications/initialized"})
    send(p, {"jsonrpc": "2.0", "id": 2, "method": "tools/call",
             "params": {"name": "bash", "arguments": {"command": command}}})
    deadline = time.monotonic() + 30
    while not os.path.exists(marker):
        if time.monotonic() > deadline:
            sys.exit("mcp_stop.py: the call never started (no %s)" % marker)
        time.sleep(0.02)
    # Claude Code's order: the cancellation is written, then the signal follows at once.
    if mode == "cancel":
        send(p, {"jsonrpc": "2.0", "method": "notifications/cancelled",
                 "params": {"requestId": 2, "reason": "interrupted"}})
    last = "SIGINT"
    os.kill(p.pid, signal.SIGINT)
    for wait, sig in ((0.1, signal.SIGTERM), (0.4, signal.SIGKILL)):
        try:
            p.wait(timeout=wait)
            break
        except subprocess.TimeoutExpired:
            os.kill(p.pid, sig)
            last = sig.name
    status = p.wait()
    print(json.dumps({"status": status, "last_signal": last}))


if __name__ == "__main__":
    main()
