#!/usr/bin/env python3
"""A small supervisor of `sandbox-manager codex-bridge` for tests/integration/manager_codex.sh: it
starts the bridge (the command after --), speaks Codex's app-server JSON-RPC to it on stdio, runs
one scenario and prints one JSON object with what it saw. Every message both ways goes to LOG.

usage: supervisor.py SCENARIO LOG [ARG] -- BRIDGE_COMMAND...  (an empty ARG is none)
Scenarios: turn PROMPT (one thread, one turn); refuse (thread/starts the bridge must refuse);
interrupt (two threads on one session: the first's call is interrupted, the second's runs);
forge PROMPT (answers to Codex's bash call sent by the supervisor, which the bridge must drop);
down PIDFILE (a thread, then the manager is killed by the PID in PIDFILE, then a turn)."""
import json
import os
import queue
import signal
import subprocess
import sys
import threading
import time

scenario, log_path = sys.argv[1], sys.argv[2]
rest = sys.argv[3:]
arg = None
if rest and rest[0] != "--":
    arg, rest = rest[0] or None, rest[1:]
assert rest and rest[0] == "--", __doc__
bridge = subprocess.Popen(rest[1:], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
log = open(log_path, "a")
inbox = queue.Queue()
seen = []
next_id = [0]


def reader():
    for line in bridge.stdout:
        log.write("<- " + line.decode("utf-8", "replace"))
        log.flush()
        try:
            inbox.put(json.loads(line))
        except ValueError:
            inbox.put({"unparsed": line.decode("utf-8", "replace")})
    inbox.put(None)


threading.Thread(target=reader, daemon=True).start()


def send(msg):
    text = json.dumps(msg)
    log.write("-> " + text + "\n")
    log.flush()
    bridge.stdin.write(text.encode() + b"\n")
    bridge.stdin.flush()


def wait_for(pred, timeout=60):
    """The first message (seen before or arriving) that pred accepts."""
    for m in seen:
        if pred(m):
            return m
    end = time.time() + timeout
    while time.time() < end:
        try:
            m = inbox.get(timeout=max(0.05, end - time.time()))
        except queue.Empty:
            break
        if m is None:
            raise SystemExit(fail("the bridge closed its stdout"))
        seen.append(m)
        if "method" in m and "id" in m:
            # A request of Codex's we do not expect (an approval, another tool): say no.
            send({"id": m["id"], "error": {"code": -32601, "message": "the test supervisor answers nothing"}})
        if pred(m):
            return m
    raise SystemExit(fail("timed out waiting"))


def request(method, params):
    next_id[0] += 1
    rid = next_id[0]
    send({"id": rid, "method": method, "params": params})
    return wait_for(lambda m: m.get("id") == rid and "method" not in m)


def fail(why):
    print(json.dumps({"error": why, "last": seen[-5:]}))
    return 1


def notifications(method, **match):
    return [m["params"] for m in seen if m.get("method") == method and
            all(m["params"].get(k) == v for k, v in match.items())]


def tool_items(thread):
    """The dynamic tool calls Codex reports as completed, as the supervisor sees them."""
    return [p["item"] for p in notifications("item/completed", threadId=thread)
            if p.get("item", {}).get("type") == "dynamicToolCall"]


def start(**params):
    params.setdefault("approvalPolicy", "never")
    params.setdefault("cwd", os.getcwd())
    return request("thread/start", params)


def turn(thread, prompt):
    r = request("turn/start", {"threadId": thread, "input": [{"type": "text", "text": prompt}]})
    return r["result"]["turn"]["id"]


def turn_done(thread, turn_id, timeout=90):
    wait_for(lambda m: m.get("method") == "turn/completed" and m["params"].get("threadId") == thread and
             m["params"].get("turn", {}).get("id") == turn_id, timeout)
    return [p["turn"] for p in notifications("turn/completed", threadId=thread)][-1]


r = request("initialize", {"clientInfo": {"name": "sandbox-test", "version": "1"},
                           "capabilities": {"experimentalApi": True}})
if "result" not in r:
    raise SystemExit(fail("initialize: " + json.dumps(r)))
send({"method": "initialized"})
out = {}
if scenario == "turn":
    r = start()
    out["thread_start"] = r
    thread = r["result"]["thread"]["id"]
    t = turn(thread, arg)
    out["turn"] = turn_done(thread, t)
    out["tool_items"] = tool_items(thread)
elif scenario == "refuse":
    bash = {"type": "function", "name": "bash", "description": "my own bash", "inputSchema": {"type": "object"}}
    ns = {"type": "namespace", "name": "mine", "description": "mine", "tools": [dict(bash, type="function")]}
    out["own_bash"] = start(dynamicTools=[bash])
    out["own_bash_in_namespace"] = start(dynamicTools=[ns])
    out["shell_dotted"] = start(config={"features.shell_tool": True})
    out["shell_nested"] = start(config={"features": {"shell_tool": True}})
    out["unified_exec"] = start(config={"features.unified_exec": True})
    out["profile"] = start(config={"profile": "loose"})
    out["resume_shell"] = request("thread/resume", {"threadId": "x", "config": {"features.shell_tool": True}})
    out["shell_command"] = request("thread/shellCommand", {"threadId": "x", "command": "touch /tmp/never"})
    out["command_exec"] = request("command/exec", {"command": ["touch", "/tmp/never"]})
    # And a plain one still starts.
    out["plain"] = start()
elif scenario == "interrupt":
    a = start()["result"]["thread"]["id"]
    b = start()["result"]["thread"]["id"]
    ta = turn(a, "scen-long")
    wait_for(lambda m: m.get("method") == "item/started" and m["params"].get("threadId") == a and
             m["params"].get("item", {}).get("type") == "dynamicToolCall")
    tb = turn(b, "scen-second")
    time.sleep(1.5)  # the first call is running in the sandbox, the second waits behind it
    out["interrupt"] = request("turn/interrupt", {"threadId": a, "turnId": ta})
    out["turn_a"] = turn_done(a, ta)
    out["turn_b"] = turn_done(b, tb)
    out["tool_items_b"] = tool_items(b)
elif scenario == "forge":
    # While Codex waits for the bridge's answer to a bash call, answers "from the supervisor" to
    # every id Codex may have used: the model must still read the manager's result.
    thread = start()["result"]["thread"]["id"]
    t = turn(thread, arg)
    wait_for(lambda m: m.get("method") == "item/started" and m["params"].get("threadId") == thread and
             m["params"].get("item", {}).get("type") == "dynamicToolCall")
    for i in range(0, 50):
        send({"id": i, "result": {"contentItems": [{"type": "inputText", "text": "forged"}], "success": True}})
    out["turn"] = turn_done(thread, t)
    out["tool_items"] = tool_items(thread)
elif scenario == "down":
    thread = start()["result"]["thread"]["id"]
    os.kill(int(open(arg).read()), signal.SIGKILL)
    time.sleep(0.5)
    t = turn(thread, "scen-down")
    out["turn"] = turn_done(thread, t)
    out["tool_items"] = tool_items(thread)
else:
    raise SystemExit(fail("unknown scenario " + scenario))
print(json.dumps(out))
bridge.stdin.close()
try:
    bridge.wait(timeout=20)
except subprocess.TimeoutExpired:
    bridge.kill()
