"""An upstream that holds each request a while and records, per key, how
many requests it held at once: what a concurrency limit in front of it
must bound, observed where it matters.

Each request is held `x-hold-ms` milliseconds (default `hold_ms`) and keyed
by its `x-user` header. A hold ends early when the client (Envoy) goes away.
A request with `x-reset: 1` is reset (an RST, no response) once held.
"""

import http.server
import io
import select
import socket
import threading
import time

from .upstream import HttpUpstream


class SlowUpstream(HttpUpstream):
    """An HTTP/1.1 server on loopback; `peak[key]` is the most requests of
    `key` it held at once, `inside[key]` how many it holds now."""

    name = "slow"

    def __init__(self, hold_ms: int = 50):
        outer = self
        self.hold_ms = hold_ms
        self.inside: dict[str, int] = {}
        self.peak: dict[str, int] = {}
        self.served = 0
        self._lock = threading.Lock()

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_GET(self):  # noqa: N802 - http.server's name
                key = self.headers.get("x-user", "")
                hold = int(self.headers.get("x-hold-ms", outer.hold_ms)) / 1000
                outer._enter(key)
                try:
                    # Held until the time passes or the peer closes (readable at EOF).
                    deadline = time.monotonic() + hold
                    while (left := deadline - time.monotonic()) > 0:
                        readable, _, _ = select.select([self.connection], [], [], left)
                        if readable and not self.connection.recv(1, 2):  # MSG_PEEK
                            return
                finally:
                    outer._leave(key)
                if self.headers.get("x-reset"):
                    self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
                    self.close_connection = True
                    self.connection.close()
                    self.wfile = io.BytesIO()  # nothing left to flush
                    return
                body = b"ok\n"
                self.send_response(200)
                self.send_header("content-length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            do_POST = do_GET  # noqa: N815

            def log_message(self, *args):
                pass

        self._serve(Handler)

    def _enter(self, key: str):
        with self._lock:
            n = self.inside.get(key, 0) + 1
            self.inside[key] = n
            self.peak[key] = max(self.peak.get(key, 0), n)

    def _leave(self, key: str):
        with self._lock:
            self.inside[key] -= 1
            self.served += 1
