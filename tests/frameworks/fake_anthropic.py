#!/usr/bin/env python3
"""A scripted stand-in for the Anthropic Messages API, for the framework tests (run inside
tests/frameworks/offline.sh, on 127.0.0.1 only).

    fake_anthropic.py --script SCRIPT.json --log LOG.jsonl --port-file FILE

SCRIPT is a JSON list of steps. Each POST /v1/messages whose `tools` include SCRIPT's tool (the
agent's own turn, not a side request such as a title) is answered by step k, where k is the number
of tool_result blocks in the request's messages: stateless, so a retried request gets the same
answer. A step is {"tool": NAME, "input": {...}} (a tool_use), or {"text": "..."} (a final answer);
past the end, a final "done". A step may also carry "gate": PATH: before answering, the server
creates PATH.waiting and waits (up to 60 s) for PATH to exist, so a test can act in between (stop
the manager). Any other request gets a short text. Every request body is appended to LOG, one JSON
object a line ({"path", "body"}), before it is answered. Streams (stream: true) as server-sent
events, as the API does.
"""
import argparse
import json
import os
import sys
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

ARGS = None
SCRIPT = []


def tool_results(body):
    n = 0
    for m in body.get("messages", []):
        if isinstance(m.get("content"), list):
            n += sum(1 for b in m["content"] if isinstance(b, dict) and b.get("type") == "tool_result")
    return n


def agent_turn(body):
    names = [t.get("name") for t in body.get("tools", []) if isinstance(t, dict)]
    return ARGS.tool in names


def step_for(body):
    if not agent_turn(body):
        return {"text": "ok"}
    k = tool_results(body)
    return SCRIPT[k] if k < len(SCRIPT) else {"text": "done"}


def gate(step):
    path = step.get("gate")
    if not path:
        return
    open(path + ".waiting", "w").close()
    deadline = time.monotonic() + 60
    while not os.path.exists(path) and time.monotonic() < deadline:
        time.sleep(0.05)


def blocks(step, n):
    if "tool" in step:
        return [{"type": "tool_use", "id": "toolu_fake_%d" % n, "name": step["tool"], "input": step["input"]}], "tool_use"
    return [{"type": "text", "text": step["text"]}], "end_turn"


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, fmt, *a):  # the request log is the record; no stderr noise
        pass

    def reply_json(self, code, obj):
        data = json.dumps(obj).encode()
        self.send_response(code)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self):
        self.reply_json(200, {})

    def do_HEAD(self):
        self.send_response(200)
        self.send_header("content-length", "0")
        self.end_headers()

    def do_POST(self):
        raw = self.rfile.read(int(self.headers.get("content-length") or 0))
        try:
            body = json.loads(raw or b"{}")
        except ValueError:
            body = {"unparsed": raw.decode("utf-8", "replace")}
        with open(ARGS.log, "a") as f:
            f.write(json.dumps({"path": self.path, "body": body}) + "\n")
        path = self.path.split("?")[0]
        if path.endswith("/count_tokens"):
            return self.reply_json(200, {"input_tokens": 10})
        if not path.endswith("/v1/messages"):
            return self.reply_json(404, {"type": "error", "error": {"type": "not_found_error", "message": path}})
        step = step_for(body)
        gate(step)
        n = tool_results(body)
        content, stop = blocks(step, n)
        msg = {"id": "msg_fake_%d" % n, "type": "message", "role": "assistant", "model": body.get("model", "fake"),
               "content": content, "stop_reason": stop, "stop_sequence": None,
               "usage": {"input_tokens": 10, "output_tokens": 10}}
        if not body.get("stream"):
            return self.reply_json(200, msg)
        self.send_response(200)
        self.send_header("content-type", "text/event-stream")
        self.send_header("cache-control", "no-cache")
        self.send_header("connection", "close")
        self.end_headers()
        self.close_connection = True
        start = dict(msg, content=[], stop_reason=None)
        self.event("message_start", {"type": "message_start", "message": start})
        for i, b in enumerate(content):
            if b["type"] == "tool_use":
                self.event("content_block_start", {"type": "content_block_start", "index": i,
                                                   "content_block": dict(b, input={})})
                delta = {"type": "input_json_delta", "partial_json": json.dumps(b["input"])}
            else:
                self.event("content_block_start", {"type": "content_block_start", "index": i,
                                                   "content_block": {"type": "text", "text": ""}})
                delta = {"type": "text_delta", "text": b["text"]}
            self.event("content_block_delta", {"type": "content_block_delta", "index": i, "delta": delta})
            self.event("content_block_stop", {"type": "content_block_stop", "index": i})
        self.event("message_delta", {"type": "message_delta", "delta": {"stop_reason": stop, "stop_sequence": None},
                                     "usage": {"output_tokens": 10}})
        self.event("message_stop", {"type": "message_stop"})

    def event(self, name, data):
        self.wfile.write(("event: %s\ndata: %s\n\n" % (name, json.dumps(data))).encode())
        self.wfile.flush()


def main():
    global ARGS, SCRIPT
    p = argparse.ArgumentParser()
    p.add_argument("--script", required=True)
    p.add_argument("--log", required=True)
    p.add_argument("--port-file", required=True)
    p.add_argument("--tool", default="mcp__sandbox__bash")
    ARGS = p.parse_args()
    with open(ARGS.script) as f:
        SCRIPT = json.load(f)
    srv = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    srv.daemon_threads = True
    tmp = ARGS.port_file + ".tmp"
    with open(tmp, "w") as f:
        f.write("%d\n" % srv.server_address[1])
    os.rename(tmp, ARGS.port_file)
    srv.serve_forever()


if __name__ == "__main__":
    sys.exit(main())
