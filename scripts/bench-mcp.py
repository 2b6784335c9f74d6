#!/usr/bin/env python3
"""One MCP client of `sandbox-manager mcp` (stdio), for scripts/bench-manager.sh: an initialize, then
RUNS sequential tools/call bash {"command": "true"}, each waited for. Prints one line: the mean wall
time of a call, the mcp process's CPU time (user+sys) per call, and that of the processes PID...
(with their reaped children: the daemon, the session's agent) per call, in microseconds, all read
around the timed calls only. Exit 1 if a call did not come back as a success.
Usage: bench-mcp.py MANAGER SESSION RUNS [PID...]"""
import json
import os
import subprocess
import sys
import time


def cpu_us(pid, children=False):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    ticks = int(fields[11]) + int(fields[12]) + (int(fields[13]) + int(fields[14]) if children else 0)
    return ticks * 1e6 / os.sysconf("SC_CLK_TCK")


def others_us(pids):
    return sum(cpu_us(p, children=True) for p in pids)


def main():
    manager, session, runs, pids = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4:]
    p = subprocess.Popen([manager, "mcp", "--session", session], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                         stderr=subprocess.DEVNULL)
    ids = iter(range(1, 1 << 30))

    def call(method, params, notify=False):
        msg = {"jsonrpc": "2.0", "method": method, "params": params}
        if not notify:
            msg["id"] = next(ids)
        p.stdin.write((json.dumps(msg) + "\n").encode())
        p.stdin.flush()
        if notify:
            return None
        line = p.stdout.readline()
        if not line:
            sys.exit("bench-mcp: the mcp server closed its output")
        return json.loads(line)

    call("initialize", {"protocolVersion": "2025-06-18", "capabilities": {},
                        "clientInfo": {"name": "bench", "version": "0"}})
    call("notifications/initialized", {}, notify=True)
    tool = {"name": "bash", "arguments": {"command": "true"}}
    for _ in range(3):  # warm: the daemon's settings, the sandbox's connection
        call("tools/call", tool)
    o0, c0, t0 = others_us(pids), cpu_us(p.pid), time.monotonic()
    for _ in range(runs):
        r = call("tools/call", tool)
        if "result" not in r or r["result"].get("isError"):
            sys.exit(f"bench-mcp: a call failed: {json.dumps(r)[:300]}")
    t1, c1, o1 = time.monotonic(), cpu_us(p.pid), others_us(pids)
    p.stdin.close()
    p.wait(timeout=30)
    print(int((t1 - t0) * 1e6 / runs), int((c1 - c0) / runs), int((o1 - o0) / runs))


main()
