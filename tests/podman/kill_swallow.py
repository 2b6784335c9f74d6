#!/usr/bin/env python3
"""A runtime that accepts a kill and does not kill: a proxy in front of a podman service's unix socket
that forwards every request, except that once FLAG exists it answers POST .../kill with 204 and forwards
nothing. The manager must then find no evidence (the container stays "running") and record the call
`uncertain` with the workspace reserved: an accepted kill is not evidence.

usage: kill_swallow.py LISTEN_SOCKET PODMAN_SOCKET FLAG_FILE
"""
import http.client
import http.server
import os
import socket
import socketserver
import sys

LISTEN, UPSTREAM, FLAG = sys.argv[1:4]


class UnixConnection(http.client.HTTPConnection):
    def connect(self):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(60)
        self.sock.connect(UPSTREAM)


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def forward(self):
        if self.command == "POST" and "/kill" in self.path and os.path.exists(FLAG):
            self.send_response(204)
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else None
        up = UnixConnection("d")
        headers = {k: v for k, v in self.headers.items() if k.lower() not in ("host", "connection")}
        up.request(self.command, self.path, body=body, headers=headers)
        resp = up.getresponse()
        data = resp.read()
        self.send_response(resp.status)
        for k, v in resp.getheaders():
            if k.lower() not in ("transfer-encoding", "content-length", "connection"):
                self.send_header(k, v)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)
        up.close()

    do_GET = do_POST = do_DELETE = do_HEAD = forward

    def log_message(self, *args):
        pass


class Server(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
    daemon_threads = True


if os.path.exists(LISTEN):
    os.unlink(LISTEN)
with Server(LISTEN, Handler) as server:
    os.chmod(LISTEN, 0o666)
    server.serve_forever()
