#!/usr/bin/env python3
"""Tagged calls and cancels on the manager's control socket, as the MCP front sends them (the CLI
names no tag), for manager_cancel.sh.

  control_tagged.py SOCKET exec SESSION TAG COMMAND
      one exec carrying TAG; prints the manager's answer (one JSON object).
  control_tagged.py SOCKET cancel SESSION TAG
      one cancel of TAG, and exits at once without reading the answer, as Claude Code does
      about 250 ms after it sends one.
  control_tagged.py SOCKET cancel-answer SESSION TAG
      the same cancel; prints the answer.
  control_tagged.py SOCKET late SESSION TAG N COMMAND
      N execs, TAG-1 to TAG-N, each followed by its cancel once the exec's answer is in (a cancel
      that crossed its call's answer); prints each cancel's answer, one JSON object a line.
"""
import json
import socket
import struct
import sys


def send(path, req):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.connect(path)
    body = json.dumps(req).encode()
    s.sendall(struct.pack(">I", len(body)) + body)
    return s


def answer(s):
    data = b""
    while len(data) < 4 or len(data) < 4 + struct.unpack(">I", data[:4])[0]:
        chunk = s.recv(65536)
        if not chunk:
            break
        data += chunk
    n = struct.unpack(">I", data[:4])[0] if len(data) >= 4 else 0
    return json.loads(data[4:4 + n]) if n else None


if __name__ == "__main__":
    sock, mode, session, tag = sys.argv[1:5]
    if mode == "late":
        for i in range(1, int(sys.argv[5]) + 1):
            one = f"{tag}-{i}"
            answer(send(sock, {"op": "exec", "session": session, "tag": one, "command": sys.argv[6]}))
            print(json.dumps(answer(send(sock, {"op": "cancel", "session": session, "tag": one}))))
    elif mode == "exec":
        print(json.dumps(answer(send(sock, {"op": "exec", "session": session, "tag": tag, "command": sys.argv[5]}))))
    else:
        s = send(sock, {"op": "cancel", "session": session, "tag": tag})
        if mode == "cancel-answer":
            print(json.dumps(answer(s)))
        s.close()
