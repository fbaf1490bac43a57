"""A fake rate limit service (Envoy's `envoy.service.ratelimit.v3.RateLimitService`)
in this process, answering as a real service does, and a small upstream that
echoes the request headers it gets.

The fake speaks gRPC with `grpcio` and raw bytes: the few protobuf messages
are encoded and decoded here by hand, as the filter does (`src/rls/`). It
answers in one of two styles:

- `limitador`: Kuadrant's Limitador. One counter per descriptor set, `limit`
  hits per window; the answer holds `overall_code` only (no statuses).
- `envoy_ratelimit`: envoyproxy/ratelimit (and sluice-limiter). One counter
  per descriptor, one status per descriptor with `current_limit`,
  `limit_remaining` and `duration_until_reset`.

Counters never reset while a fake runs, and `duration_until_reset` is a
fixed `reset_seconds`, so that what a test asserts does not depend on the
clock. Knobs (attributes, set before the requests they apply to):
`response_headers`, `request_headers` (lists of (name, value) or
(name, value, "raw") for `raw_value`), `raw_body`, `code` (an overall code
sent whatever the counters say, e.g. `UNKNOWN`), `statuses` (the statuses
sent instead of the style's, as (code, limit, remaining, reset seconds)),
`garbage` (bytes that are no message), `abort` (a `grpc.StatusCode`), `delay`
(seconds before answering). Every request is recorded in `requests`.
"""

from __future__ import annotations

import http.server
import json
import socket
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

import grpc

from .processes import free_port
from .upstream import HttpUpstream

SERVICE = "envoy.service.ratelimit.v3.RateLimitService"
METHOD = "ShouldRateLimit"

UNKNOWN, OK, OVER_LIMIT = 0, 1, 2
UNITS = {1: "second", 2: "minute", 3: "hour", 4: "day"}
MINUTE = 2

# ---------------------------------------------------------------- protobuf


def varint(n: int) -> bytes:
    out = bytearray()
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def put_varint(field_no: int, n: int) -> bytes:
    return varint(field_no << 3) + varint(n)


def put_bytes(field_no: int, data: bytes) -> bytes:
    return varint((field_no << 3) | 2) + varint(len(data)) + data


def fields(data: bytes):
    """(field number, value) of a message: an int for a varint, bytes for a
    length-delimited field; fixed-width fields are skipped. Raises ValueError
    on a malformed message."""
    at = 0

    def read_varint():
        nonlocal at
        n, shift = 0, 0
        while True:
            if at >= len(data) or shift > 63:
                raise ValueError("truncated varint")
            b = data[at]
            at += 1
            n |= (b & 0x7F) << shift
            shift += 7
            if b < 0x80:
                return n

    while at < len(data):
        tag = read_varint()
        wire = tag & 7
        if wire == 0:
            yield tag >> 3, read_varint()
        elif wire == 2:
            n = read_varint()
            if at + n > len(data):
                raise ValueError("truncated field")
            yield tag >> 3, data[at:at + n]
            at += n
        elif wire in (1, 5):
            at += 8 if wire == 1 else 4
        else:
            raise ValueError(f"wire type {wire}")


@dataclass
class RlsRequest:
    """A `RateLimitRequest` as the fake got it."""
    domain: str = ""
    descriptors: list[list[tuple[str, str]]] = field(default_factory=list)
    descriptor_hits: list[int | None] = field(default_factory=list)
    hits_addend: int = 0

    @property
    def hits(self) -> int:
        """The request's weight (0 on the wire means 1)."""
        return self.hits_addend or 1

    def weight(self, i: int) -> int:
        d = self.descriptor_hits[i]
        return self.hits if d is None else d


def decode_request(data: bytes) -> RlsRequest:
    req = RlsRequest()
    for f, v in fields(data):
        if f == 1:
            req.domain = v.decode()
        elif f == 2:
            entries, hits = [], None
            for df, dv in fields(v):
                if df == 1:
                    entry = dict(fields(dv))
                    entries.append((entry.get(1, b"").decode(), entry.get(2, b"").decode()))
                elif df == 3:
                    hits = dict(fields(dv)).get(1, 0)
            req.descriptors.append(entries)
            req.descriptor_hits.append(hits)
        elif f == 3:
            req.hits_addend = v
    return req


def header_value(item) -> bytes:
    """A `config.core.v3.HeaderValue`: (key, value) or (key, value, "raw")."""
    key, value, *raw = item
    return put_bytes(1, key.encode()) + put_bytes(3 if raw else 2, value.encode())


def status(code: int, limit: int, remaining: int, reset_seconds: int, unit: int = MINUTE) -> bytes:
    """A `DescriptorStatus`."""
    current = put_varint(1, limit) + put_varint(2, unit)
    return (put_varint(1, code) + put_bytes(2, current) + put_varint(3, remaining)
            + put_bytes(4, put_varint(1, reset_seconds)))


def encode_response(code: int, statuses=(), response_headers=(), request_headers=(), raw_body: bytes = b"") -> bytes:
    out = put_varint(1, code) if code else b""
    for s in statuses:
        out += put_bytes(2, status(*s))
    for h in response_headers:
        out += put_bytes(3, header_value(h))
    for h in request_headers:
        out += put_bytes(4, header_value(h))
    if raw_body:
        out += put_bytes(5, raw_body)
    return out


def encode_request(domain: str, descriptors: list[list[tuple[str, str]]], hits: int = 1) -> bytes:
    """A `RateLimitRequest` (to check the fake without Envoy)."""
    out = put_bytes(1, domain.encode())
    for d in descriptors:
        out += put_bytes(2, b"".join(put_bytes(1, put_bytes(1, k.encode()) + put_bytes(2, v.encode())) for k, v in d))
    if hits != 1:
        out += put_varint(3, hits)
    return out


def decode_response(data: bytes) -> dict:
    """A `RateLimitResponse` read back: code, statuses (code, limit, remaining,
    reset seconds), headers and body (to check the fake without Envoy)."""
    out = {"code": 0, "statuses": [], "response_headers": [], "request_headers": [], "raw_body": b""}
    for f, v in fields(data):
        if f == 1:
            out["code"] = v
        elif f == 2:
            s = dict(fields(v))
            current = dict(fields(s.get(2, b"")))
            reset = dict(fields(s.get(4, b"")))
            out["statuses"].append((s.get(1, 0), current.get(1, 0), s.get(3, 0), reset.get(1, 0)))
        elif f in (3, 4):
            h = dict(fields(v))
            name = "response_headers" if f == 3 else "request_headers"
            out[name].append((h.get(1, b"").decode(), (h.get(2) or h.get(3) or b"").decode()))
        elif f == 5:
            out["raw_body"] = v
    return out


# ---------------------------------------------------------------- the fake service


class FakeRls:
    """A rate limit service on a loopback port, in a thread of this process."""

    def __init__(self, style: str = "envoy_ratelimit", limit: int = 5, reset_seconds: int = 60):
        if style not in ("limitador", "envoy_ratelimit"):
            raise ValueError(style)
        self.style = style
        self.limit = limit
        self.reset_seconds = reset_seconds
        self.response_headers: list[tuple] = []
        self.request_headers: list[tuple] = []
        self.raw_body = b""
        self.code: int | None = None
        self.statuses: list[tuple] | None = None
        self.garbage: bytes | None = None
        self.abort: grpc.StatusCode | None = None
        self.delay = 0.0
        self.requests: list[RlsRequest] = []
        self.counters: dict = {}
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self.port = free_port()
        self._server = grpc.server(ThreadPoolExecutor(max_workers=16))
        handler = grpc.method_handlers_generic_handler(
            SERVICE, {METHOD: grpc.unary_unary_rpc_method_handler(self._should_rate_limit)})
        self._server.add_generic_rpc_handlers((handler,))
        if self._server.add_insecure_port(f"127.0.0.1:{self.port}") != self.port:
            raise OSError(f"cannot bind 127.0.0.1:{self.port}")
        self._server.start()

    def stop(self):
        self._stopping.set()
        self._server.stop(grace=None).wait(10)

    def calls(self) -> int:
        with self._lock:
            return len(self.requests)

    def _should_rate_limit(self, body: bytes, context) -> bytes:
        req = decode_request(body)
        with self._lock:
            self.requests.append(req)
            answer = self._decide(req)
        if self.delay:
            self._stopping.wait(self.delay)
        if self.abort is not None:
            context.abort(self.abort, "fake rate limit service error")
        if self.garbage is not None:
            return self.garbage
        return answer

    def _decide(self, req: RlsRequest) -> bytes:
        if self.style == "limitador":
            # one counter per descriptor set; a denial consumes nothing
            key = (req.domain, tuple(tuple(d) for d in req.descriptors))
            used = self.counters.get(key, 0)
            allowed = used + req.hits <= self.limit
            if allowed:
                self.counters[key] = used + req.hits
            code, statuses = (OK if allowed else OVER_LIMIT), []
        else:
            # one counter per descriptor, each consumed when it has room
            statuses = []
            for i, d in enumerate(req.descriptors):
                key = (req.domain, tuple(d))
                used = self.counters.get(key, 0)
                weight = req.weight(i)
                ok = used + weight <= self.limit
                if ok:
                    used += weight
                    self.counters[key] = used
                statuses.append((OK if ok else OVER_LIMIT, self.limit, self.limit - used, self.reset_seconds))
            code = OK if all(s[0] == OK for s in statuses) else OVER_LIMIT
        if self.code is not None:
            code = self.code
        if self.statuses is not None:
            statuses = self.statuses
        return encode_response(code, statuses, self.response_headers, self.request_headers, self.raw_body)


def call(port: int, body: bytes, timeout: float = 5.0) -> bytes:
    """One raw ShouldRateLimit call (to check the fake without Envoy)."""
    with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
        return channel.unary_unary(f"/{SERVICE}/{METHOD}")(body, timeout=timeout)


# ---------------------------------------------------------------- an echo upstream


class EchoUpstream(HttpUpstream):
    """An HTTP/1.1 server on loopback answering 200 with the request's
    headers as a JSON object (lower-case names; repeated names joined with
    ", "); counts the requests it got."""

    name = "echo"

    def __init__(self):
        outer = self
        self.count = 0
        self._lock = threading.Lock()

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_GET(self):  # noqa: N802 - http.server's name
                with outer._lock:
                    outer.count += 1
                seen: dict[str, str] = {}
                for name, value in self.headers.items():
                    name = name.lower()
                    seen[name] = f"{seen[name]}, {value}" if name in seen else value
                body = json.dumps(seen).encode()
                self.send_response(200)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            do_POST = do_GET  # noqa: N815

            def log_message(self, *args):
                pass

        self._serve(Handler, backlog=5)


def raw_headers(port: int, headers: dict | None = None, path: str = "/") -> tuple[int, list[tuple[str, str]], bytes]:
    """One HTTP/1.1 request; (status, every header line in order with
    lower-case names, body): repeated headers stay apart."""
    import http.client
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        conn.request("GET", path, headers=headers or {})
        resp = conn.getresponse()
        return resp.status, [(k.lower(), v) for k, v in resp.getheaders()], resp.read()
    finally:
        conn.close()


class SilentService:
    """A loopback port that accepts connections and never answers: a hung
    service, whose calls only Envoy's own timeout ends."""

    def __init__(self):
        self._sock = socket.socket()
        self._sock.bind(("127.0.0.1", 0))
        self._sock.listen(64)
        self.port = self._sock.getsockname()[1]
        self._conns: list[socket.socket] = []
        self._thread = threading.Thread(target=self._accept, daemon=True)
        self._thread.start()

    def _accept(self):
        while True:
            try:
                conn, _ = self._sock.accept()
            except OSError:
                return
            self._conns.append(conn)

    def stop(self):
        # shutdown() wakes the accept() in the thread; close() alone may not
        try:
            self._sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self._sock.close()
        self._thread.join(10)
        for conn in self._conns:
            conn.close()
