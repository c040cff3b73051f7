"""A local HTTP server (127.0.0.1, ephemeral port) that serves files and fails on purpose.

It answers GET with Range (``bytes=a-b``, ``a-``, ``-n``) by 206, unless ``ranges`` is off, and
records every request with the bytes it really sent, so tests can check resumption and that each
byte was fetched once. Faults per path: a fixed status (500, 404, ...), a connection dropped after N
body bytes for the next ``times`` requests, a stall (N body bytes, then silence for ``stall_s``
before closing), a drip (one byte every ``drip_s`` seconds), or other bytes than the real ones (set
them with :meth:`FaultServer.put`). Each file has an ETag, and ``If-Range`` with another validator
gets the whole file (200), as HTTP says. A path can also redirect (302) anywhere, and a server made
with ``length=False`` sends no Content-Length (the body ends when the connection closes).
"""

import hashlib

import re
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class FaultServer:
    def __init__(self, ranges=True, length=True):
        self.files = {}
        self.ranges = ranges
        self.length = length
        self.requests = []  # dicts: method, path, range, status, start, end, sent
        self._faults = {}
        self._lock = threading.Lock()
        self._httpd = None
        self._thread = None

    # -- set-up --
    def put(self, path, data):
        self.files["/" + path.lstrip("/")] = bytes(data)

    def fail(self, path, status=None, drop_after=None, times=1, stall_s=0.0, drip_s=0.0, redirect=None):
        """status: answer it every time; drop_after: after N body bytes close the connection (or,
        with ``stall_s``, go silent that long first), for the next ``times`` GETs; drip_s: send
        the body one byte at a time, every ``drip_s`` seconds, until the client goes away;
        redirect: answer 302 with this Location."""
        self._faults["/" + path.lstrip("/")] = {"status": status, "drop_after": drop_after, "times": times,
                                                "stall_s": stall_s, "drip_s": drip_s, "redirect": redirect}

    def url(self, path=""):
        host, port = self._httpd.server_address[:2]
        return "http://%s:%d/%s" % (host, port, path.lstrip("/"))

    # -- queries --
    def gets(self, path):
        path = "/" + path.lstrip("/")
        with self._lock:
            return [r for r in self.requests if r["path"] == path and r["method"] == "GET"]

    def bytes_sent(self, path):
        return sum(r["sent"] for r in self.gets(path))

    def clear(self):
        with self._lock:
            del self.requests[:]

    # -- life cycle --
    def start(self):
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):  # keep test output clean
                pass

            def do_HEAD(self):
                self._answer(head=True)

            def do_GET(self):
                self._answer(head=False)

            def _record(self, status, start=None, end=None, sent=0):
                # Recorded before the body is written, so a client that has read everything never
                # looks at the log before its own request is in it.
                entry = {"method": self.command, "path": self.path, "range": self.headers.get("Range"),
                         "status": status, "start": start, "end": end, "sent": sent}
                with server._lock:
                    server.requests.append(entry)
                return entry

            def _answer(self, head):
                data = server.files.get(self.path)
                fault = server._faults.get(self.path) or {}
                if fault.get("redirect"):
                    self._record(302)
                    self.send_response(302)
                    self.send_header("Location", fault["redirect"])
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                if fault.get("status"):
                    self._record(fault["status"])
                    self.send_error(fault["status"])
                    return
                if data is None:
                    self._record(404)
                    self.send_error(404)
                    return
                size = len(data)
                start, end, status = 0, size - 1, 200
                etag = '"%s"' % hashlib.sha1(data).hexdigest()[:16]
                wanted = self.headers.get("Range")
                if self.headers.get("If-Range") not in (None, etag):
                    wanted = None  # the client's copy is of another version: send it all
                if wanted and server.ranges:
                    match = re.fullmatch(r"bytes=(\d*)-(\d*)", wanted.strip())
                    if not match or (not match.group(1) and not match.group(2)):
                        self._record(416)
                        self.send_error(416)
                        return
                    if match.group(1):
                        start = int(match.group(1))
                        end = min(int(match.group(2)), size - 1) if match.group(2) else size - 1
                    else:
                        start, end = max(0, size - int(match.group(2))), size - 1
                    if start >= size or start > end:
                        self._record(416)
                        self.send_response(416)
                        self.send_header("Content-Range", "bytes */%d" % size)
                        self.send_header("Content-Length", "0")
                        self.end_headers()
                        return
                    status = 206
                body = data[start:end + 1]
                self.send_response(status)
                self.send_header("Content-Type", "application/x-tar")
                if server.length:
                    self.send_header("Content-Length", str(len(body)))
                self.send_header("ETag", etag)
                if server.ranges:
                    self.send_header("Accept-Ranges", "bytes")
                if status == 206:
                    self.send_header("Content-Range", "bytes %d-%d/%d" % (start, end, size))
                self.end_headers()
                if head:
                    self._record(status, start, end, 0)
                    return
                if fault.get("drip_s"):
                    entry = self._record(status, start, end, 0)
                    try:
                        for index in range(len(body)):
                            self.wfile.write(body[index:index + 1])
                            self.wfile.flush()
                            with server._lock:
                                entry["sent"] += 1
                            time.sleep(fault["drip_s"])
                    except OSError:  # the client gave up
                        pass
                    self.close_connection = True
                    return
                drop = None
                with server._lock:
                    if fault.get("drop_after") is not None and fault.get("times", 0) > 0:
                        fault["times"] -= 1
                        drop = fault["drop_after"]
                if drop is not None and drop < len(body):
                    self._record(status, start, end, drop)
                    try:
                        self.wfile.write(body[:drop])
                        self.wfile.flush()
                        if fault.get("stall_s"):
                            time.sleep(fault["stall_s"])
                        self.connection.shutdown(socket.SHUT_RDWR)
                    except OSError:
                        pass
                    self.close_connection = True
                    return
                entry = self._record(status, start, end, len(body))
                sent = 0
                try:
                    for offset in range(0, len(body), 1 << 16):
                        piece = body[offset:offset + (1 << 16)]
                        self.wfile.write(piece)
                        sent += len(piece)
                except OSError:  # the client went away
                    with server._lock:
                        entry["sent"] = sent

        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._httpd.daemon_threads = True
        self._thread = threading.Thread(target=self._httpd.serve_forever, args=(0.05,), name="fault-http", daemon=True)
        self._thread.start()
        return self

    def stop(self):
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
            self._thread.join()

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()
