"""An upstream that records when each request's headers came and whether
its whole body followed: what reached the service behind Envoy, and when."""

import http.server
import threading
import time
from typing import NamedTuple

from .upstream import HttpUpstream


class Seen(NamedTuple):
    """One request as the upstream saw it."""
    tag: str  # its `x-tag` header
    headers_at: float  # time.monotonic() when its headers came
    body: bytes | None  # its whole body; None until it is in, or when the stream ended before


class RecordingUpstream(HttpUpstream):
    """An HTTP/1.1 server on loopback answering 200 once a request's whole
    body is in; `seen` lists every request whose headers came, as they
    come."""

    name = "recording"

    def __init__(self):
        outer = self
        self.seen: list[Seen] = []
        self._lock = threading.Lock()

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self):  # noqa: N802 - http.server's name
                at, label = time.monotonic(), self.headers.get("x-tag", "")
                with outer._lock:
                    index = len(outer.seen)
                    outer.seen.append(Seen(label, at, None))
                try:
                    whole = self._body()
                except OSError:  # Envoy reset the stream
                    whole = None
                with outer._lock:
                    outer.seen[index] = Seen(label, at, whole)
                if whole is None:
                    self.close_connection = True
                    return
                self.send_response(200)
                self.send_header("content-length", "3")
                self.end_headers()
                self.wfile.write(b"ok\n")

            def _body(self) -> bytes | None:
                """The whole body (of its length, or chunked with any
                trailers), or None if the stream ended before."""
                if self.headers.get("transfer-encoding", "").lower() != "chunked":
                    length = int(self.headers.get("content-length", 0))
                    body = self.rfile.read(length)
                    return body if len(body) == length else None
                body = b""
                while True:
                    line = self.rfile.readline()
                    if not line.endswith(b"\r\n"):
                        return None
                    size = int(line.split(b";")[0], 16)
                    if size == 0:
                        break
                    chunk = self.rfile.read(size + 2)
                    if len(chunk) < size + 2:
                        return None
                    body += chunk[:size]
                while (line := self.rfile.readline()) not in (b"\r\n", b""):
                    pass  # trailers
                return body if line == b"\r\n" else None

            def log_message(self, *args):
                pass

        self._serve(Handler)

    def tags(self, complete: bool | None = None) -> list[str]:
        """The tags of the requests seen (only those whose body was whole,
        or was not, when `complete` says), sorted."""
        with self._lock:
            return sorted(s.tag for s in self.seen if complete is None or (s.body is not None) == complete)
