#!/usr/bin/python3
"""A loopback TLS proxy in front of a real API server that behaves as an API server which silently
drops a field it does not know: it removes securityContext.procMount from every pod in its replies
(a create, a get, a list's items, each watch event's object), as a server without the ProcMountType
feature gate does. Used by manager_kubernetes_faults.sh (kubernetes_drops_procmount) only.
With KD_PROXY_MODE=refuse-watch it drops nothing and refuses every watch instead (HTTP 403, a Status,
logged "watch refused: PATH"), as a server or an RBAC that allows get and list but not watch does
(kubernetes_watch_refused).

Usage: k8s_dropping_proxy.py PORTFILE CERT KEY UPSTREAM_URL UPSTREAM_CA CLIENT_CERT CLIENT_KEY
It listens on 127.0.0.1 (a free port, written to PORTFILE when it serves), serves TLS with CERT/KEY,
and speaks to UPSTREAM_URL as the holder of CLIENT_CERT (the client's own credentials are not passed
on). Each pod it changed is logged on stderr ("dropped procMount: NAME"), and each watch event it
passed on ("watch event: TYPE NAME")."""
import http.client
import http.server
import json
import os
import ssl
import sys
import urllib.parse

portfile, cert, key, upstream, upstream_ca, client_cert, client_key = sys.argv[1:8]
up = urllib.parse.urlsplit(upstream)
up_ctx = ssl.create_default_context(cafile=upstream_ca)
up_ctx.load_cert_chain(client_cert, client_key)
refuse_watch = os.environ.get("KD_PROXY_MODE") == "refuse-watch"


def drop_pod(pod):
    if refuse_watch:
        return
    if not isinstance(pod, dict) or pod.get("kind", "Pod") != "Pod":
        return
    changed = False
    for c in pod.get("spec", {}).get("containers", []) or []:
        sc = c.get("securityContext")
        if isinstance(sc, dict) and "procMount" in sc:
            del sc["procMount"]
            changed = True
    if changed:
        sys.stderr.write("dropped procMount: %s\n" % pod.get("metadata", {}).get("name", "?"))
        sys.stderr.flush()


def drop(doc):
    if not isinstance(doc, dict):
        return
    if doc.get("kind") == "PodList":
        for item in doc.get("items", []) or []:
            drop_pod(item)
    elif "type" in doc and "object" in doc:  # a watch event
        drop_pod(doc["object"])
    else:
        drop_pod(doc)


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, fmt, *args):
        pass

    def forward(self):
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length > 0 else None
        if refuse_watch and ("watch=1" in self.path or "watch=true" in self.path):
            data = json.dumps({"kind": "Status", "apiVersion": "v1", "status": "Failure", "code": 403,
                               "reason": "Forbidden", "message": "watch refused by the test's proxy"}).encode()
            sys.stderr.write("watch refused: %s\n" % self.path)
            sys.stderr.flush()
            self.send_response(403)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
            return
        headers = {h: self.headers[h] for h in ("Accept", "Content-Type") if self.headers.get(h)}
        conn = http.client.HTTPSConnection(up.hostname, up.port, context=up_ctx, timeout=120)
        conn.request(self.command, self.path, body=body, headers=headers)
        resp = conn.getresponse()
        watch = "watch=1" in self.path or "watch=true" in self.path
        self.send_response(resp.status)
        ctype = resp.getheader("Content-Type") or "application/json"
        self.send_header("Content-Type", ctype)
        if watch and resp.status == 200:
            # one JSON event a line: each rewritten and passed on at once (chunked)
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            while True:
                line = resp.readline()
                if not line:
                    break
                try:
                    doc = json.loads(line)
                    drop(doc)
                    sys.stderr.write("watch event: %s %s\n" % (doc.get("type"),
                                     doc.get("object", {}).get("metadata", {}).get("name", "?")))
                    sys.stderr.flush()
                    line = (json.dumps(doc) + "\n").encode()
                except ValueError:
                    pass
                self.wfile.write(b"%x\r\n%s\r\n" % (len(line), line))
                self.wfile.flush()
            self.wfile.write(b"0\r\n\r\n")
            self.wfile.flush()
        else:
            data = resp.read()
            if "json" in ctype:
                try:
                    doc = json.loads(data)
                    drop(doc)
                    data = json.dumps(doc).encode()
                except ValueError:
                    pass
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
        conn.close()

    do_GET = do_POST = do_DELETE = do_PUT = do_PATCH = forward


srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
srv.daemon_threads = True
ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
ctx.load_cert_chain(cert, key)
srv.socket = ctx.wrap_socket(srv.socket, server_side=True)
with open(portfile + ".tmp", "w") as f:
    f.write("%d\n" % srv.server_address[1])
os.rename(portfile + ".tmp", portfile)
srv.serve_forever()
