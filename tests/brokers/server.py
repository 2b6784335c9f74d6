#!/usr/bin/python3
"""A local HTTPS stand-in for the Kubernetes TokenRequest API and the Rancher v3 token API, for the
broker tests. Standard library only; binds 127.0.0.1 only, on a free port written to --port-file.

Serves the documented shapes:
  POST   /api/v1/namespaces/NS/serviceaccounts/SA/token -> 201 TokenRequest with status.token
         "k8s-token-SA-N" and status.expirationTimestamp = now + spec.expirationSeconds
  POST   /v3/tokens        -> 201 Rancher token {"id","name":"token-N","token":"token-N:rancher-secret-N",
                              "ttl", "expiresAt" = now + ttl ms, "clusterId", "description"}
  DELETE /v3/tokens/ID     -> 204
A request whose Authorization is not "Bearer <--bearer>" gets 401 (a Kubernetes Status body).
--responses FILE (read on every request, may be absent) overrides by "METHOD PATH":
  {"POST /v3/tokens": {"status": 403, "body": {...}, "delay": 2}}
and with "hold": N the body is sent chunked, as a watch's first event, then the stream is held open
N seconds before its end (a watch with no further event).
Every request is appended to --log as one JSON line: {"method","path","headers","body"}.
"""
import argparse
import datetime
import http.server
import json
import os
import re
import ssl
import sys
import time

ARGS = None
COUNTER = [0]


def iso(seconds_from_now):
    t = datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(seconds=seconds_from_now)
    return t.strftime("%Y-%m-%dT%H:%M:%SZ")


def status_body(code, reason, message):
    return {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
            "message": message, "reason": reason, "code": code}


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, fmt, *args):  # quiet: the test reads --log instead
        pass

    def answer(self, code, body):
        data = b"" if body is None else json.dumps(body).encode()
        self.send_response(code)
        if data:
            self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def stream(self, code, body, hold):
        data = (json.dumps(body) + "\n").encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
        self.wfile.flush()
        time.sleep(hold)
        try:
            self.wfile.write(b"0\r\n\r\n")
        except OSError:  # the client went: what the edge test expects
            pass

    def handle_any(self):
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        entry = {"method": self.command, "path": self.path,
                 "headers": {k.lower(): v for k, v in self.headers.items()},
                 "body": raw.decode("utf-8", "replace")}
        with open(ARGS.log, "a") as f:
            f.write(json.dumps(entry) + "\n")
        COUNTER[0] += 1
        n = COUNTER[0]
        overrides = {}
        if ARGS.responses and os.path.exists(ARGS.responses):
            with open(ARGS.responses) as f:
                overrides = json.load(f)
        o = overrides.get("%s %s" % (self.command, self.path))
        if o is not None:
            time.sleep(o.get("delay", 0))
            if "hold" in o:
                return self.stream(o.get("status", 200), o.get("body"), o["hold"])
            return self.answer(o.get("status", 200), o.get("body"))
        if self.headers.get("Authorization") != "Bearer " + ARGS.bearer:
            return self.answer(401, status_body(401, "Unauthorized", "Unauthorized"))
        try:
            req = json.loads(raw) if raw else {}
        except ValueError:
            return self.answer(400, status_body(400, "BadRequest", "the body is not JSON"))
        m = re.fullmatch(r"/api/v1/namespaces/([^/]+)/serviceaccounts/([^/]+)/token", self.path)
        if self.command == "POST" and m:
            spec = req.get("spec", {})
            seconds = spec.get("expirationSeconds", 3600)
            return self.answer(201, {
                "kind": "TokenRequest", "apiVersion": "authentication.k8s.io/v1",
                "metadata": {"name": m.group(2), "namespace": m.group(1), "creationTimestamp": None},
                "spec": spec,
                "status": {"token": "k8s-token-%s-%d" % (m.group(2), n), "expirationTimestamp": iso(seconds)}})
        if self.command == "POST" and self.path == "/v3/tokens":
            ttl = req.get("ttl", 0)
            return self.answer(201, {
                "type": "token", "baseType": "token", "id": "token-%d" % n, "name": "token-%d" % n,
                "token": "token-%d:rancher-secret-%d" % (n, n), "ttl": ttl,
                "expiresAt": iso(ttl // 1000) if ttl else "", "clusterId": req.get("clusterId", ""),
                "description": req.get("description", ""), "isDerived": True, "enabled": True})
        if self.command == "DELETE" and self.path.startswith("/v3/tokens/"):
            return self.answer(204, None)
        return self.answer(404, status_body(404, "NotFound", "the server could not find the requested resource"))

    do_GET = do_POST = do_DELETE = do_PUT = do_PATCH = handle_any


def main():
    global ARGS
    p = argparse.ArgumentParser()
    p.add_argument("--cert", required=True)
    p.add_argument("--key", required=True)
    p.add_argument("--port-file", required=True)
    p.add_argument("--log", required=True)
    p.add_argument("--bearer", required=True)
    p.add_argument("--responses")
    ARGS = p.parse_args()
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(ARGS.cert, ARGS.key)
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.socket = ctx.wrap_socket(server.socket, server_side=True)
    tmp = ARGS.port_file + ".tmp"
    with open(tmp, "w") as f:
        f.write("%d\n" % server.server_address[1])
    os.rename(tmp, ARGS.port_file)
    sys.stdout.flush()
    server.serve_forever()


if __name__ == "__main__":
    main()
