#!/usr/bin/env python3
"""A scripted stand-in for the OpenAI Responses API (POST /v1/responses, streamed as SSE), for the
Codex tests: run it inside the same tests/frameworks/offline.sh namespace as Codex, on 127.0.0.1.

usage: fake_responses.py SCRIPT.json LOG.jsonl PORT_FILE

SCRIPT maps a scenario (a word the user messages contain) to its steps; the request's step
is the number of tool results (function_call_output items) in its input, so the answer depends on
the request alone and a retried request gets the same one. A step is {"call": {"name": N,
["namespace": NS,] "arguments": {...}}} or {"say": TEXT}; past the last step the model says
"done". Every request body is appended to LOG as one JSON line, before it is answered."""
import http.server
import json
import sys
import threading

SCRIPT = json.load(open(sys.argv[1]))
LOG = sys.argv[2]
PORT_FILE = sys.argv[3]
log_lock = threading.Lock()
counter = [0]


def user_text(body):
    return "\n".join(c["text"] for item in body.get("input") or [] if item.get("role") == "user"
                     for c in item.get("content") or [] if isinstance(c, dict) and isinstance(c.get("text"), str))


def steps_for(body):
    text = user_text(body)
    # The longest matching name wins ("interrupt-b" over "interrupt").
    for name in sorted(SCRIPT, key=len, reverse=True):
        if name in text:
            return SCRIPT[name]
    return []


def answer_item(body):
    done = sum(1 for i in body.get("input") or [] if i.get("type") == "function_call_output")
    steps = steps_for(body)
    with log_lock:
        counter[0] += 1
        n = counter[0]
    step = steps[done] if done < len(steps) else {"say": "done"}
    if "call" in step:
        call = step["call"]
        item = {"type": "function_call", "id": f"fc_{n}", "call_id": f"call_{n}", "name": call["name"],
                "arguments": json.dumps(call.get("arguments", {}))}
        if call.get("namespace"):
            item["namespace"] = call["namespace"]
        return n, item
    return n, {"type": "message", "role": "assistant", "id": f"msg_{n}", "status": "completed",
               "content": [{"type": "output_text", "text": step["say"], "annotations": []}]}


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, fmt, *args):
        sys.stderr.write("fake_responses: " + (fmt % args) + "\n")

    def do_GET(self):
        # /models and the like: nothing to offer.
        self.send_response(404)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def do_POST(self):
        raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        try:
            body = json.loads(raw)
        except ValueError:
            body = {"unparsed": raw.decode("utf-8", "replace")}
        with log_lock:
            with open(LOG, "a") as f:
                f.write(json.dumps({"path": self.path, "body": body}) + "\n")
        if not self.path.endswith("/responses"):
            self.send_response(404)
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        n, item = answer_item(body)
        rid = f"resp_{n}"
        events = [
            ("response.created", {"type": "response.created", "response": {"id": rid}}),
            ("response.output_item.done", {"type": "response.output_item.done", "output_index": 0, "item": item}),
            ("response.completed", {"type": "response.completed", "response": {
                "id": rid, "usage": {"input_tokens": 10, "input_tokens_details": {"cached_tokens": 0},
                                     "output_tokens": 5, "output_tokens_details": {"reasoning_tokens": 0},
                                     "total_tokens": 15}}}),
        ]
        data = "".join(f"event: {e}\ndata: {json.dumps(d)}\n\n" for e, d in events).encode()
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
with open(PORT_FILE + ".tmp", "w") as f:
    f.write(str(server.server_address[1]))
import os
os.rename(PORT_FILE + ".tmp", PORT_FILE)
server.serve_forever()
