"""HTTP from Python: one request, and concurrent load for exact-count tests.

The benchmark drives its load with wrk (`bench/load.py`); it shares
`request` for readiness checks. `concurrent_requests` and `load_through`
send a known number of requests and count every answer, which is what the
end-to-end tests assert on.
"""

from __future__ import annotations

import http.client
import socket
import ssl
import threading
import time
from dataclasses import dataclass
from typing import NamedTuple


@dataclass
class Response:
    status: int
    headers: dict
    body: bytes

    def header(self, name: str):
        return self.headers.get(name.lower())


def request(port: int, path: str = "/", method: str = "GET", headers: dict | None = None,
            body: bytes | None = None, host: str = "127.0.0.1", timeout: float = 10.0,
            tls: ssl.SSLContext | None = None) -> Response:
    """One HTTP/1.1 request on a new connection (HTTPS with `tls`)."""
    conn = (http.client.HTTPSConnection(host, port, timeout=timeout, context=tls) if tls
            else http.client.HTTPConnection(host, port, timeout=timeout))
    try:
        conn.request(method, path, body=body, headers=headers or {})
        resp = conn.getresponse()
        data = resp.read()
        return Response(resp.status, {k.lower(): v for k, v in resp.getheaders()}, data)
    finally:
        conn.close()


def _merge(into: dict[int, int], counts: dict[int, int]):
    for k, v in counts.items():
        into[k] = into.get(k, 0) + v


def run_all(calls: list) -> None:
    """Runs every zero-argument callable on its own thread; re-raises the first error."""
    errors: list[BaseException] = []

    def run(call):
        try:
            call()
        except BaseException as e:  # noqa: BLE001 - surfaced below
            errors.append(e)

    threads = [threading.Thread(target=run, args=(c,)) for c in calls]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]


def concurrent_requests(port: int, connections: int, total: int, path: str = "/",
                        headers: dict | None = None) -> dict:
    """Sends `total` requests over `connections` keep-alive connections at once.

    Returns a map status -> count. Every request gets an answer or the call fails.
    """
    counts: dict[int, int] = {}
    lock = threading.Lock()
    barrier = threading.Barrier(connections)
    per_conn = [total // connections + (1 if i < total % connections else 0) for i in range(connections)]

    def worker(n: int):
        local: dict[int, int] = {}
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        try:
            conn.connect()
            barrier.wait(timeout=30)
            for _ in range(n):
                conn.request("GET", path, headers=headers or {})
                resp = conn.getresponse()
                resp.read()
                local[resp.status] = local.get(resp.status, 0) + 1
                if resp.getheader("connection", "").lower() == "close":
                    conn.close()
                    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        finally:
            conn.close()
            with lock:
                _merge(counts, local)

    run_all([lambda n=n: worker(n) for n in per_conn])
    return counts


def load_through(envoys, per_envoy: int, connections: int = 16, headers: dict | None = None) -> dict:
    """Sends `per_envoy` requests through each of `envoys` (anything with a
    `port`) at the same time, as `concurrent_requests` does; merged status counts."""
    merged: dict[int, int] = {}
    lock = threading.Lock()

    def one(envoy):
        counts = concurrent_requests(envoy.port, connections, per_envoy, headers=headers)
        with lock:
            _merge(merged, counts)

    run_all([lambda e=e: one(e) for e in envoys])
    return merged


class GrpcAnswer(NamedTuple):
    """A unary gRPC call's answer: seconds from the request sent to the stream's end, response headers, trailers,
    and the body's bytes."""
    seconds: float
    headers: dict
    trailers: dict
    body: bytes


def grpc_call(port: int, metadata=(), timeout: float = 10.0) -> GrpcAnswer:
    """One unary gRPC call over h2c (an empty message) to `/test.Echo/Say` on loopback."""
    import h2.config
    import h2.connection
    import h2.events
    sock = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    try:
        conn = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True, header_encoding="utf-8"))
        conn.initiate_connection()
        sock.sendall(conn.data_to_send())
        stream = conn.get_next_available_stream_id()
        conn.send_headers(stream, [(":method", "POST"), (":scheme", "http"), (":path", "/test.Echo/Say"),
                                   (":authority", "127.0.0.1"), ("content-type", "application/grpc"),
                                   ("te", "trailers"), *metadata])
        conn.send_data(stream, b"\x00\x00\x00\x00\x00", end_stream=True)
        sock.sendall(conn.data_to_send())
        start = time.monotonic()
        headers, trailers, body, done = {}, {}, b"", False
        while not done:
            data = sock.recv(65536)
            if not data:
                break
            for event in conn.receive_data(data):
                if isinstance(event, h2.events.ResponseReceived):
                    headers.update(event.headers)
                elif isinstance(event, h2.events.TrailersReceived):
                    trailers.update(event.headers)
                elif isinstance(event, h2.events.DataReceived):
                    body += event.data
                    conn.acknowledge_received_data(event.flow_controlled_length, event.stream_id)
                elif isinstance(event, (h2.events.StreamEnded, h2.events.StreamReset)):
                    done = True
            sock.sendall(conn.data_to_send())
        return GrpcAnswer(time.monotonic() - start, headers, trailers, body)
    finally:
        sock.close()
