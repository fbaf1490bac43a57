"""A small xDS management server serving `RateLimitConfig` resources over
ADS, state of the world, as Envoy Gateway serves its rate limit deployment:
a snapshot per node id (go-control-plane's snapshot cache, keyed by the
node's id), every resource in every response, each response with a new
version and nonce, pushed to open streams when the snapshot changes.

It speaks gRPC with `grpcio` and raw bytes: the messages
(`envoy.service.discovery.v3.DiscoveryRequest` / `DiscoveryResponse`,
`google.protobuf.Any`, `ratelimit.config.ratelimit.v3.RateLimitConfig`)
are encoded and decoded here by hand from their protos' field numbers,
independently of the limiter's own definitions. A configuration is given
as the dicts of Envoy Gateway's translator output
(internal/xds/translator/testdata/out/ratelimit-config/*.yaml).

Every request the server gets is recorded (`requests`), with the stream's
gRPC metadata (`headers`).
"""

from __future__ import annotations

import queue
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

import grpc

from .fake_rls import fields, put_bytes, put_varint
from .processes import free_port

SERVICE = "envoy.service.discovery.v3.AggregatedDiscoveryService"
METHOD = "StreamAggregatedResources"
TYPE_URL = "type.googleapis.com/ratelimit.config.ratelimit.v3.RateLimitConfig"
UNITS = {"UNKNOWN": 0, "SECOND": 1, "MINUTE": 2, "HOUR": 3, "DAY": 4, "MONTH": 5, "YEAR": 6, "WEEK": 7}


def _string(no: int, s: str) -> bytes:
    return put_bytes(no, s.encode()) if s else b""


def _bool(no: int, b: bool) -> bytes:
    return put_varint(no, 1) if b else b""


def encode_policy(p: dict) -> bytes:
    """`RateLimitPolicy`: unit 1, requests_per_unit 2, unlimited 3, name 4, replaces 5."""
    unit = UNITS[p.get("unit", "UNKNOWN").upper()]
    out = (put_varint(1, unit) if unit else b"") + (put_varint(2, p["requests_per_unit"])
                                                   if p.get("requests_per_unit") else b"")
    out += _bool(3, p.get("unlimited", False)) + _string(4, p.get("name", ""))
    return out + b"".join(put_bytes(5, _string(1, r["name"])) for r in p.get("replaces") or [])


def encode_descriptor(d: dict) -> bytes:
    """`RateLimitDescriptor`: key 1, value 2, rate_limit 3, descriptors 4,
    shadow_mode 5, detailed_metric 6, quota_mode 7."""
    out = _string(1, d["key"]) + _string(2, d.get("value", ""))
    if d.get("rate_limit") is not None:
        out += put_bytes(3, encode_policy(d["rate_limit"]))
    out += b"".join(put_bytes(4, encode_descriptor(c)) for c in d.get("descriptors") or [])
    return (out + _bool(5, d.get("shadow_mode", False)) + _bool(6, d.get("detailed_metric", False))
            + _bool(7, d.get("quota_mode", False)))


def encode_config(c: dict) -> bytes:
    """`RateLimitConfig`: name 1, domain 2, descriptors 3."""
    return (_string(1, c["name"]) + _string(2, c["domain"])
            + b"".join(put_bytes(3, encode_descriptor(d)) for d in c.get("descriptors") or []))


def encode_response(version: str, resources: list[bytes], nonce: str, type_url: str = TYPE_URL) -> bytes:
    """`DiscoveryResponse`: version_info 1, resources 2 (`Any`: type_url 1,
    value 2), type_url 4, nonce 5."""
    anys = b"".join(put_bytes(2, put_bytes(1, type_url.encode()) + put_bytes(2, r)) for r in resources)
    return _string(1, version) + anys + put_bytes(4, type_url.encode()) + put_bytes(5, nonce.encode())


@dataclass
class Request:
    """A `DiscoveryRequest` as the server got it."""
    version_info: str = ""
    node_id: str = ""
    node_metadata: dict = field(default_factory=dict)
    type_url: str = ""
    response_nonce: str = ""
    error: str | None = None


def _struct_strings(data: bytes) -> dict:
    """A `Struct`'s string values (fields 1: entries of key 1, `Value` 2 with string_value 3)."""
    out = {}
    for no, entry in fields(data):
        if no == 1:
            kv = dict(fields(entry))
            value = dict(fields(kv.get(2, b"")))
            out[kv.get(1, b"").decode()] = value.get(3, b"").decode()
    return out


def decode_request(data: bytes) -> Request:
    """version_info 1, node 2 (id 1, metadata 3), type_url 4, response_nonce 5,
    error_detail 6 (`google.rpc.Status`: message 2)."""
    r = Request()
    for no, v in fields(data):
        if no == 1:
            r.version_info = v.decode()
        elif no == 2:
            node = list(fields(v))
            r.node_id = next((x.decode() for n, x in node if n == 1), "")
            r.node_metadata = next((_struct_strings(x) for n, x in node if n == 3), {})
        elif no == 4:
            r.type_url = v.decode()
        elif no == 5:
            r.response_nonce = v.decode()
        elif no == 6:
            r.error = dict(fields(v)).get(2, b"").decode()
    return r


class XdsServer:
    """The management server on a loopback port, in threads of this process.
    `tls`: (CA, server leaf) for mutual TLS, as Envoy Gateway serves it."""

    def __init__(self, node_id: str = "envoy-ratelimit", tls=None, port: int | None = None):
        self.node_id = node_id
        self.tls = tls
        self.port = port or free_port()
        self.requests: list[Request] = []
        self.headers: list[dict] = []
        self._snapshot: tuple[str, list[bytes]] | None = None
        self._streams: list[queue.Queue] = []
        self._version = 0
        self._nonce = 0
        self._lock = threading.Lock()
        self._server = None
        self.start()

    def start(self):
        self._server = grpc.server(ThreadPoolExecutor(max_workers=8))
        handler = grpc.method_handlers_generic_handler(
            SERVICE, {METHOD: grpc.stream_stream_rpc_method_handler(self._stream)})
        self._server.add_generic_rpc_handlers((handler,))
        address = f"127.0.0.1:{self.port}"
        if self.tls:
            ca, leaf = self.tls
            creds = grpc.ssl_server_credentials([(leaf.key.read_bytes(), leaf.cert.read_bytes())],
                                                root_certificates=ca.cert.read_bytes(), require_client_auth=True)
            bound = self._server.add_secure_port(address, creds)
        else:
            bound = self._server.add_insecure_port(address)
        if bound != self.port:
            raise OSError(f"cannot bind {address}")
        self._server.start()

    def stop(self):
        """Stops serving: open streams end (the snapshot is kept for a restart)."""
        with self._lock:
            for q in self._streams:
                q.put(None)
            self._streams.clear()
        self._server.stop(grace=None).wait(10)

    def set_configs(self, configs: list[dict]) -> str:
        """A new snapshot of these configurations (Envoy Gateway's shape), pushed
        to open streams; returns its version."""
        return self.set_resources([encode_config(c) for c in configs])

    def set_resources(self, resources: list[bytes]) -> str:
        with self._lock:
            self._version += 1
            self._snapshot = (str(self._version), resources)
            for q in self._streams:
                q.put(self._snapshot)
            return str(self._version)

    def acked(self) -> list[str]:
        """The versions acknowledged, in order."""
        with self._lock:
            return [r.version_info for r in self.requests if r.response_nonce and r.error is None]

    def nacks(self) -> list[Request]:
        with self._lock:
            return [r for r in self.requests if r.error is not None]

    def _stream(self, request_iterator, context):
        q: queue.Queue = queue.Queue()
        with self._lock:
            self.headers.append(dict(context.invocation_metadata()))
            self._streams.append(q)
        threading.Thread(target=self._read, args=(request_iterator, q), daemon=True).start()
        try:
            while context.is_active():
                try:
                    item = q.get(timeout=0.1)
                except queue.Empty:
                    continue
                if item is None:
                    return
                version, resources = item
                with self._lock:
                    self._nonce += 1
                    nonce = str(self._nonce)
                yield encode_response(version, resources, nonce)
        finally:
            with self._lock:
                if q in self._streams:
                    self._streams.remove(q)

    def _read(self, request_iterator, q: queue.Queue):
        try:
            for body in request_iterator:
                req = decode_request(body)
                with self._lock:
                    self.requests.append(req)
                    first = not req.response_nonce
                    # As the snapshot cache: a node gets the snapshot set for its id only.
                    if first and req.node_id == self.node_id and self._snapshot is not None:
                        q.put(self._snapshot)
        except grpc.RpcError:
            pass
        q.put(None)
