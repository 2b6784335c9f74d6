#!/usr/bin/env python3
"""A unix-socket proxy in front of the test PostgreSQL that a test cuts and restores, for
manager_multi.sh's partition case: one manager reaches the store through it, the others directly.

  store_proxy.py LISTEN TARGET
      forwards every connection made to the socket LISTEN to the socket TARGET. SIGUSR1 cuts: every
      forwarded connection is shut down and each new one is closed as soon as it is accepted (the
      store gone, as the kernel reports it to a client). SIGUSR2 restores. LISTEN appears once it
      accepts.
"""
import os
import signal
import socket
import sys
import threading

listen_path, target_path = sys.argv[1:3]
cut = threading.Event()
lock = threading.Lock()
open_socks = set()


def shut(s):
    try:
        s.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass


def pump(src, dst):
    try:
        while True:
            data = src.recv(65536)
            if not data:
                break
            dst.sendall(data)
    except OSError:
        pass
    shut(src)
    shut(dst)


def serve(client):
    try:
        upstream = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        upstream.connect(target_path)
    except OSError:
        client.close()
        return
    with lock:
        open_socks.update((client, upstream))
    back = threading.Thread(target=pump, args=(upstream, client), daemon=True)
    back.start()
    pump(client, upstream)
    back.join()
    with lock:
        open_socks.difference_update((client, upstream))
    client.close()
    upstream.close()


def on_cut(*_):
    cut.set()
    with lock:
        for s in list(open_socks):
            shut(s)


def on_restore(*_):
    cut.clear()


signal.signal(signal.SIGUSR1, on_cut)
signal.signal(signal.SIGUSR2, on_restore)
listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
tmp = listen_path + ".tmp"
listener.bind(tmp)
listener.listen(64)
os.rename(tmp, listen_path)
while True:
    conn, _ = listener.accept()
    if cut.is_set():
        conn.close()
        continue
    threading.Thread(target=serve, args=(conn,), daemon=True).start()
