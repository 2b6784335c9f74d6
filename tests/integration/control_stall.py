#!/usr/bin/env python3
"""Control clients that misbehave, for manager_resources.sh (never a real client).

  control_stall.py SOCKET stall SILENT HALF HOLD_S READY_FILE
      opens SILENT connections that send nothing and HALF that send half a frame (a header that
      announces 100 bytes, then 10), writes READY_FILE once all are open, then watches them for
      HOLD_S seconds. Prints one JSON object: how many the manager refused at once (an answer
      naming its connection limit), closed after the first-request deadline, answered for a cut
      frame, and left open; and when the closes came (seconds after READY).
  control_stall.py SOCKET slow SESSION COMMAND HOLD_S READY_FILE
      sends one exec and never reads its answer; prints when (seconds after sending) the manager
      gave up on it (its end of the connection closed), or null when it had not within HOLD_S.
"""
import json
import os
import select
import socket
import struct
import sys
import time


def connect(path):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.connect(path)
    return s


def frame(obj):
    body = json.dumps(obj).encode()
    return struct.pack(">I", len(body)) + body


def read_frame(s):
    """The first frame the manager sent, as a dict, or None when it closed without one."""
    data = b""
    s.settimeout(2)
    try:
        while True:
            chunk = s.recv(65536)
            if not chunk:
                break
            data += chunk
            if len(data) >= 4 and len(data) >= 4 + struct.unpack(">I", data[:4])[0]:
                break
    except OSError:
        pass
    if len(data) < 4:
        return None
    n = struct.unpack(">I", data[:4])[0]
    try:
        return json.loads(data[4:4 + n])
    except ValueError:
        return None


def ready(path):
    with open(path + ".tmp", "w") as f:
        f.write("ready\n")
    os.rename(path + ".tmp", path)


def stall(path, silent, half, hold, ready_file):
    conns = []
    for i in range(silent + half):
        s = connect(path)
        if i >= silent:
            s.sendall(struct.pack(">I", 100) + b"0123456789")
        conns.append((s, "half" if i >= silent else "silent"))
    t0 = time.monotonic()
    ready(ready_file)
    out = {"refused": 0, "closed": 0, "half_answered": 0, "open": 0, "other": [], "closed_s": []}
    poller = select.poll()
    by_fd = {}
    for s, kind in conns:
        poller.register(s.fileno(), select.POLLIN | select.POLLHUP | select.POLLRDHUP)
        by_fd[s.fileno()] = (s, kind)
    while by_fd and time.monotonic() - t0 < hold:
        for fd, _ in poller.poll(200):
            s, kind = by_fd.pop(fd)
            poller.unregister(fd)
            when = round(time.monotonic() - t0, 1)
            msg = read_frame(s)
            text = json.dumps(msg) if msg else ""
            if "control connections open" in text:
                out["refused"] += 1
            elif kind == "half" and "did not arrive whole" in text:
                out["half_answered"] += 1
                out["closed_s"].append(when)
            elif kind == "silent" and (msg is None or "no request within" in text):
                out["closed"] += 1
                out["closed_s"].append(when)
            else:
                out["other"].append(text[:200])
            s.close()
    out["open"] = len(by_fd)
    cs = out.pop("closed_s")
    out["first_close_s"] = min(cs) if cs else None
    out["last_close_s"] = max(cs) if cs else None
    out["other"] = out["other"][:3]
    print(json.dumps(out))


def slow(path, session, command, hold, ready_file):
    s = connect(path)
    s.sendall(frame({"op": "exec", "session": session, "command": command}))
    t0 = time.monotonic()
    ready(ready_file)
    p = select.poll()
    # Never read: only watch for the manager's end of the connection going away.
    p.register(s.fileno(), select.POLLRDHUP | select.POLLHUP)
    gave_up = None
    while time.monotonic() - t0 < hold:
        if any(ev & (select.POLLRDHUP | select.POLLHUP) for _, ev in p.poll(200)):
            gave_up = round(time.monotonic() - t0, 1)
            break
    print(json.dumps({"gave_up_s": gave_up}))


if __name__ == "__main__":
    sock, mode = sys.argv[1], sys.argv[2]
    if mode == "stall":
        stall(sock, int(sys.argv[3]), int(sys.argv[4]), float(sys.argv[5]), sys.argv[6])
    else:
        slow(sock, sys.argv[3], sys.argv[4], float(sys.argv[5]), sys.argv[6])
