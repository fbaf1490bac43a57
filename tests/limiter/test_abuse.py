"""sluice-limiter under abuse: slow clients, idle connections, oversized and
malformed bodies, HTTP/2 stream floods, garbage on the gRPC port.

While each abuse runs, a prober keeps sending well-formed checks (over a
keep-alive connection and over fresh ones) and every one must be answered,
each within the limiter's own request timeout (REQUEST_MS, the flag the
tests pass); the limiter's memory must stay bounded and its
timeouts must close what the abusers hold open.
"""

from __future__ import annotations

import json
import resource
import socket
import subprocess
import threading
import time

import h2.config
import h2.connection
import h2.events
import h2.exceptions
import pytest

import support
from support import request
from support.processes import redis_command

CHECK = {"domain": "abuse", "limits": [
    {"key": "probe", "algorithm": "gcra", "requests": 1_000_000, "window_ms": 1000}]}
CHECK_BODY = json.dumps(CHECK).encode()

IDLE_MS = 2000
REQUEST_MS = 1000
# A well-formed probe must be answered before the limiter's own request
# timeout would have ended it: a bound the service sets for itself, not a
# guess at how fast a loaded machine is.
PROBE_BOUND_S = REQUEST_MS / 1000
# Memory the limiter may gain over an abuse run.
RSS_BOUND_KIB = 64 * 1024

DESCRIPTORS = """\
domain: abuse
descriptors:
  - key: generic_key
    value: probe
    rate_limit: {unit: second, requests_per_unit: 1000000}
"""
RLS_PATH = "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit"


def rss_kib(pid: int) -> int:
    """VmRSS of a process, in KiB."""
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise ValueError(f"no VmRSS for {pid}")


def raise_fd_limit(needed: int):
    """Raises this process's soft file limit (children inherit it) to `needed`, or skips."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft >= needed:
        return
    if hard != resource.RLIM_INFINITY and hard < needed:
        pytest.skip(f"ulimit -n hard limit {hard} < {needed}")
    resource.setrlimit(resource.RLIMIT_NOFILE, (needed, hard))


def closed_by_peer(sock: socket.socket, timeout: float) -> bool:
    """True when the peer closes `sock` (EOF or reset) within `timeout`; data read meanwhile is dropped."""
    deadline = time.monotonic() + timeout
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            return False
        sock.settimeout(left)
        try:
            if not sock.recv(65536):
                return True
        except (ConnectionResetError, BrokenPipeError):
            return True
        except socket.timeout:
            return False


def count_closed(socks: list[socket.socket], timeout: float) -> int:
    """How many of `socks` the peer closes within `timeout`, watched together."""
    import selectors
    sel = selectors.DefaultSelector()
    for s in socks:
        s.setblocking(False)
        sel.register(s, selectors.EVENT_READ)
    closed = 0
    deadline = time.monotonic() + timeout
    while sel.get_map() and (left := deadline - time.monotonic()) > 0:
        for key, _ in sel.select(left):
            try:
                data = key.fileobj.recv(65536)
            except BlockingIOError:
                continue
            except OSError:
                data = b""
            if not data:
                closed += 1
                sel.unregister(key.fileobj)
    sel.close()
    for s in socks:
        s.setblocking(True)
    return closed


# ---------------------------------------------------------------- gRPC over h2


def _pb_bytes(field: int, data: bytes) -> bytes:
    n, varint = len(data), b""
    while True:
        b = n & 0x7F
        n >>= 7
        varint += bytes([b | (0x80 if n else 0)])
        if not n:
            break
    return bytes([(field << 3) | 2]) + varint + data


def rls_request(domain: str, entries: list[tuple[str, str]]) -> bytes:
    """A RateLimitRequest protobuf with one descriptor."""
    descriptor = b"".join(_pb_bytes(1, _pb_bytes(1, k.encode()) + _pb_bytes(2, v.encode())) for k, v in entries)
    return _pb_bytes(1, domain.encode()) + _pb_bytes(2, descriptor)


def h2_call(port: int, path: str, headers: list[tuple[str, str]], body: bytes,
            timeout: float = 5.0) -> tuple[dict, bytes, dict]:
    """One HTTP/2 (h2c prior knowledge) request: (headers, data, trailers)."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
        conn = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True, header_encoding="utf-8"))
        conn.initiate_connection()
        sid = conn.get_next_available_stream_id()
        conn.send_headers(sid, [(":method", "POST"), (":scheme", "http"), (":authority", "limiter"),
                                (":path", path), *headers])
        # What the initial flow-control window takes (a larger body is cut
        # short, its stream left open: enough for a server that refuses it
        # from its length prefix).
        fits = body[:conn.local_flow_control_window(sid)]
        for i in range(0, max(len(fits), 1), conn.max_outbound_frame_size):
            part = fits[i:i + conn.max_outbound_frame_size]
            conn.send_data(sid, part, end_stream=len(fits) == len(body) and i + len(part) >= len(fits))
        s.sendall(conn.data_to_send())
        head, data, trailers = {}, b"", {}
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            chunk = s.recv(65536)
            if not chunk:
                break
            for ev in conn.receive_data(chunk):
                if isinstance(ev, h2.events.ResponseReceived):
                    head = dict(ev.headers)
                elif isinstance(ev, h2.events.DataReceived):
                    data += ev.data
                    conn.acknowledge_received_data(ev.flow_controlled_length, sid)
                elif isinstance(ev, h2.events.TrailersReceived):
                    trailers = dict(ev.headers)
                elif isinstance(ev, (h2.events.StreamEnded, h2.events.StreamReset)) and ev.stream_id == sid:
                    return head, data, trailers
            s.sendall(conn.data_to_send())
        raise TimeoutError("no complete HTTP/2 answer")


def rls_call(port: int) -> int:
    """One ShouldRateLimit call; its overall_code (1 OK, 2 OVER_LIMIT)."""
    msg = rls_request("abuse", [("generic_key", "probe")])
    head, data, trailers = h2_call(port, RLS_PATH, [("content-type", "application/grpc"), ("te", "trailers")],
                                   b"\x00" + len(msg).to_bytes(4, "big") + msg)
    status = trailers.get("grpc-status", head.get("grpc-status"))
    assert status == "0", (head, trailers)
    # RateLimitResponse: field 1 (overall_code) is a varint first.
    assert data[5] == 0x08, data
    return data[6]


# ---------------------------------------------------------------- the prober


class Prober:
    """Sends well-formed checks in the background: over one keep-alive
    HTTP/1.1 connection, every fifth over a new connection, and (with
    `grpc_port`) an RLS call every fifth. Records each latency; any failure
    is recorded too."""

    def __init__(self, port: int, grpc_port: int | None = None, period: float = 0.02):
        self.port, self.grpc_port, self.period = port, grpc_port, period
        self.latencies: list[float] = []
        self.failures: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        # Enough probes to judge by, however quick the abuse was.
        deadline = time.monotonic() + 10
        while len(self.latencies) + len(self.failures) < 10 and time.monotonic() < deadline:
            time.sleep(self.period)
        self._stop.set()
        self._thread.join(timeout=30)

    def _run(self):
        import http.client
        conn = None
        i = 0
        while not self._stop.is_set():
            i += 1
            started = time.monotonic()
            try:
                if self.grpc_port and i % 5 == 0:
                    rls_call(self.grpc_port)
                elif i % 5 == 1:
                    r = request(self.port, "/v1/check", method="POST", body=CHECK_BODY,
                                headers={"content-type": "application/json"}, timeout=5)
                    if r.status != 200:
                        raise AssertionError(f"status {r.status}: {r.body[:200]!r}")
                else:
                    if conn is None:
                        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=5)
                    conn.request("POST", "/v1/check", body=CHECK_BODY, headers={"content-type": "application/json"})
                    resp = conn.getresponse()
                    body = resp.read()
                    if resp.status != 200 or not json.loads(body)["allowed"]:
                        raise AssertionError(f"status {resp.status}: {body[:200]!r}")
                self.latencies.append(time.monotonic() - started)
            except Exception as e:  # noqa: BLE001 - every failure is reported by the test
                self.failures.append(f"{type(e).__name__}: {e}")
                if conn is not None:
                    conn.close()
                conn = None
            self._stop.wait(self.period)
        if conn is not None:
            conn.close()

    def assert_healthy(self, at_least: int = 10):
        assert not self.failures, self.failures[:5]
        assert len(self.latencies) >= at_least, len(self.latencies)
        worst = max(self.latencies)
        assert worst < PROBE_BOUND_S, f"worst probe {worst * 1000:.0f} ms"
        return worst


def limiter(processes, tmp_path, *extra, grpc: bool = False, idle_ms: int = IDLE_MS):
    args = ["--idle-timeout-ms", str(idle_ms), "--request-timeout-ms", str(REQUEST_MS), *extra]
    if grpc:
        path = tmp_path / "abuse.yaml"
        path.write_text(DESCRIPTORS)
        args += ["--grpc-listen", f"127.0.0.1:{support.free_port()}", "--descriptors", str(path)]
    lim = processes.limiter(extra_args=args)
    lim.grpc_port = int(args[args.index("--grpc-listen") + 1].rsplit(":", 1)[1]) if grpc else None
    return lim


def open_connections(lim, listener: str = "http") -> float:
    return lim.metric(f'sluice_limiter_connections{{listener="{listener}"}}')


# ---------------------------------------------------------------- the tests


def test_slowloris_headers_and_bodies_never_finished(processes, tmp_path):
    lim = limiter(processes, tmp_path)
    pid = lim.process.proc.pid
    before = rss_kib(pid)
    headers_only, body_unfinished = [], []
    with Prober(lim.port) as probe:
        for i in range(200):
            s = socket.create_connection(("127.0.0.1", lim.port))
            s.sendall(b"POST /v1/check HTTP/1.1\r\nHost: limiter\r\n")
            headers_only.append(s)
            s = socket.create_connection(("127.0.0.1", lim.port))
            s.sendall(b"POST /v1/check HTTP/1.1\r\nHost: limiter\r\ncontent-type: application/json\r\n"
                      b"content-length: 60000\r\n\r\n{\"domain\":")
            body_unfinished.append(s)
        # Trickle a header byte every 300 ms: activity, so only the header timeout can end it.
        started = time.monotonic()
        trickled_closed = 0
        while time.monotonic() - started < REQUEST_MS / 1000 + 2:
            for s in headers_only:
                try:
                    s.sendall(b"x")
                except OSError:
                    pass
            time.sleep(0.3)
        for s in headers_only:
            trickled_closed += closed_by_peer(s, 0.5)
        timed_out_408 = 0
        for s in body_unfinished:
            s.settimeout(2)
            try:
                data = s.recv(4096)
            except OSError:
                data = b""
            timed_out_408 += data.startswith(b"HTTP/1.1 408")
            assert closed_by_peer(s, 2)
        during = rss_kib(pid)
    for s in headers_only + body_unfinished:
        s.close()
    worst = probe.assert_healthy()
    assert trickled_closed == 200
    assert timed_out_408 == 200
    assert lim.metric('sluice_limiter_request_timeouts_total{listener="http"}') == 200
    support.wait_until(lambda: open_connections(lim) <= 1, what="abusers' connections closed")
    assert during - before < RSS_BOUND_KIB
    print(f"slowloris: worst probe {worst * 1000:.1f} ms, RSS {before} -> {during} KiB")


def test_thousands_of_idle_connections_are_closed_when_idle(processes, tmp_path):
    n = 3000
    raise_fd_limit(2 * n + 1024)
    idle_ms = 8000  # longer than opening them all takes
    lim = limiter(processes, tmp_path, grpc=True, idle_ms=idle_ms)
    pid = lim.process.proc.pid
    before = rss_kib(pid)
    idle: list[socket.socket] = []
    with Prober(lim.port, lim.grpc_port) as probe:
        for i in range(n):
            port = lim.grpc_port if i % 2 else lim.port
            idle.append(socket.create_connection(("127.0.0.1", port)))
        support.wait_until(lambda: open_connections(lim) + open_connections(lim, "grpc") >= n,
                           what="idle connections accepted")
        during = rss_kib(pid)
        # Nothing sent: every one is closed after the idle timeout.
        closed = count_closed(idle, idle_ms / 1000 + 5)
    for s in idle:
        s.close()
    worst = probe.assert_healthy()
    assert closed == n
    idle_closed = (lim.metric('sluice_limiter_connections_idle_closed_total{listener="http"}')
                   + lim.metric('sluice_limiter_connections_idle_closed_total{listener="grpc"}'))
    assert idle_closed >= n
    assert during - before < RSS_BOUND_KIB
    after = rss_kib(pid)
    print(f"{n} idle connections: worst probe {worst * 1000:.1f} ms, RSS {before} -> {during} -> {after} KiB")


def test_connections_beyond_the_cap_are_closed_at_once(processes, tmp_path):
    lim = limiter(processes, tmp_path, "--max-connections", "100")
    with Prober(lim.port, period=0.05) as probe:
        # The prober's keep-alive connection is one of the 100.
        support.wait_until(lambda: len(probe.latencies) >= 3, what="prober running")
        held = [socket.create_connection(("127.0.0.1", lim.port)) for _ in range(150)]
        refused = count_closed(held, 0.5)
        # The cap holds: the ones beyond it were closed on arrival; the
        # prober's fresh connections meanwhile may have been too.
        assert 50 <= refused <= 52, refused
        time.sleep(0.5)
        n_before_idle = len(probe.latencies)
        # After the idle timeout the held ones go and new connections are served again.
        support.wait_until(lambda: open_connections(lim) <= 2, timeout=IDLE_MS / 1000 + 5,
                           what="idle connections closed")
        assert request(lim.port, "/v1/check", method="POST", body=CHECK_BODY,
                       headers={"content-type": "application/json"}).status == 200
    for s in held:
        s.close()
    # Fresh-connection probes fail while the cap is full: that is the trade
    # made; the keep-alive ones never do.
    keepalive_ok = len(probe.latencies)
    assert keepalive_ok > n_before_idle
    assert lim.metric('sluice_limiter_connections_refused_total{listener="http"}') >= 50


def test_oversized_malformed_and_deeply_nested_bodies(processes, tmp_path):
    lim = limiter(processes, tmp_path)
    pid = lim.process.proc.pid
    before = rss_kib(pid)
    bad = [
        (b"[" * 100_000, 413),                      # deeply nested and too large
        (b"[" * 60_000, 400),                       # deeply nested within 64 KiB
        (b"{\"domain\":" * 6000 + b"1", 400),       # nested objects
        (b"\xff\xfe" * 1000, 400),                  # not UTF-8
        (b"{\"domain\": \"abuse\", \"limits\": [" + b"{}," * 20000 + b"{}]}", 400),
        (b"x" * (200 * 1024), 413),                 # 200 KiB
        (b"", 400),
    ]
    results = []
    with Prober(lim.port) as probe:
        for _ in range(5):
            for body, want in bad:
                r = request(lim.port, "/v1/check", method="POST", body=body,
                            headers={"content-type": "application/json"})
                results.append((r.status, want))
                assert json.loads(r.body)["error"]
        # A body announced larger than the limit is refused before it is read.
        s = socket.create_connection(("127.0.0.1", lim.port))
        s.sendall(b"POST /v1/check HTTP/1.1\r\nHost: x\r\ncontent-length: 1000000000\r\n\r\n")
        s.settimeout(5)
        assert s.recv(4096).startswith(b"HTTP/1.1 413")
        s.close()
        # Chunked, never ending: refused once past the limit.
        s = socket.create_connection(("127.0.0.1", lim.port))
        s.sendall(b"POST /v1/check HTTP/1.1\r\nHost: x\r\ntransfer-encoding: chunked\r\n\r\n")
        chunk = b"10000\r\n" + b"[" * 0x10000 + b"\r\n"
        for _ in range(4):
            try:
                s.sendall(chunk)
            except OSError:
                break
        s.settimeout(5)
        assert s.recv(4096).startswith(b"HTTP/1.1 413")
        s.close()
        during = rss_kib(pid)
    worst = probe.assert_healthy()
    assert [r for r in results if r[0] != r[1]] == []
    assert during - before < RSS_BOUND_KIB
    print(f"bodies: worst probe {worst * 1000:.1f} ms, RSS {before} -> {during} KiB")


def _h2_flood(port: int, streams: int, reset: bool) -> str:
    """Opens `streams` streams on one h2c connection without finishing them
    (or resetting each at once); returns how the server ended the connection."""
    s = socket.create_connection(("127.0.0.1", port), timeout=5)
    conn = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True, header_encoding="utf-8"))
    conn.initiate_connection()
    s.sendall(conn.data_to_send())
    outcome = "open"
    try:
        for _ in range(streams):
            sid = conn.get_next_available_stream_id()
            conn.send_headers(sid, [(":method", "POST"), (":scheme", "http"), (":authority", "x"),
                                    (":path", "/v1/check"), ("content-type", "application/json")])
            if reset:
                conn.reset_stream(sid)
            s.sendall(conn.data_to_send())
    except h2.exceptions.TooManyStreamsError:
        outcome = "stream limit"
    except h2.exceptions.ProtocolError as e:
        outcome = f"protocol error {type(e).__name__}"
    except OSError:
        outcome = "closed"
    # Read what the server says until it closes or goes quiet.
    deadline = time.monotonic() + REQUEST_MS / 1000 + IDLE_MS / 1000 + 5
    while time.monotonic() < deadline:
        try:
            s.settimeout(1)
            data = s.recv(65536)
        except socket.timeout:
            continue
        except OSError:
            outcome += ", reset"
            break
        if not data:
            outcome += ", closed"
            break
        try:
            for ev in conn.receive_data(data):
                if isinstance(ev, h2.events.ConnectionTerminated):
                    outcome += ", goaway"
        except h2.exceptions.ProtocolError:
            pass
        try:
            s.sendall(conn.data_to_send())
        except OSError:
            pass
    s.close()
    return outcome


def test_http2_stream_floods(processes, tmp_path):
    lim = limiter(processes, tmp_path)
    pid = lim.process.proc.pid
    before = rss_kib(pid)
    with Prober(lim.port) as probe:
        outcomes = []
        threads = [threading.Thread(target=lambda r=r: outcomes.append(_h2_flood(lim.port, 5000, r)))
                   for r in (False, True, False, True)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=60)
        during = rss_kib(pid)
    worst = probe.assert_healthy()
    assert len(outcomes) == 4
    # Every abusive connection was ended by the server (GOAWAY and/or close).
    assert all("closed" in o or "reset" in o or "goaway" in o for o in outcomes), outcomes
    support.wait_until(lambda: open_connections(lim) <= 1, timeout=IDLE_MS / 1000 + 5,
                       what="h2 connections closed")
    assert during - before < RSS_BOUND_KIB
    print(f"h2 floods: {outcomes}; worst probe {worst * 1000:.1f} ms, RSS {before} -> {during} KiB")


def test_rls_port_garbage_oversized_and_unfinished_messages(processes, tmp_path):
    lim = limiter(processes, tmp_path, grpc=True)
    port = lim.grpc_port
    pid = lim.process.proc.pid
    before = rss_kib(pid)
    with Prober(lim.port, port) as probe:
        assert rls_call(port) == 1
        # Garbage instead of the HTTP/2 preface: closed at once.
        for junk in (b"GET / HTTP/1.1\r\n\r\n", b"\x00" * 100, bytes(range(256)) * 10):
            s = socket.create_connection(("127.0.0.1", port))
            s.sendall(junk)
            assert closed_by_peer(s, 2)
            s.close()
        # A message larger than the decoder takes (4 MiB): refused, not buffered.
        big = rls_request("abuse", [("generic_key", "x" * (5 * 1024 * 1024))])
        head, _, trailers = h2_call(port, RLS_PATH, [("content-type", "application/grpc"), ("te", "trailers")],
                                    b"\x00" + len(big).to_bytes(4, "big") + big, timeout=10)
        assert trailers.get("grpc-status", head.get("grpc-status")) not in (None, "0"), (head, trailers)
        # A length prefix promising 1 GiB, then nothing.
        head, _, trailers = h2_call(port, RLS_PATH, [("content-type", "application/grpc"), ("te", "trailers")],
                                    b"\x00" + (1 << 30).to_bytes(4, "big") + b"\x0a", timeout=10)
        assert trailers.get("grpc-status", head.get("grpc-status")) not in (None, "0"), (head, trailers)
        # An unfinished message: the request timeout ends the call.
        started = time.monotonic()
        with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
            conn = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True, header_encoding="utf-8"))
            conn.initiate_connection()
            sid = conn.get_next_available_stream_id()
            conn.send_headers(sid, [(":method", "POST"), (":scheme", "http"), (":authority", "x"), (":path", RLS_PATH),
                                    ("content-type", "application/grpc"), ("te", "trailers")])
            conn.send_data(sid, b"\x00\x00\x00\x00\x10\x0a")
            s.sendall(conn.data_to_send())
            status = None
            while status is None and time.monotonic() - started < 10:
                data = s.recv(65536)
                if not data:
                    break
                for ev in conn.receive_data(data):
                    if isinstance(ev, (h2.events.ResponseReceived, h2.events.TrailersReceived)):
                        status = dict(ev.headers).get("grpc-status", status)
                s.sendall(conn.data_to_send())
        waited = time.monotonic() - started
        assert status == "1", status  # CANCELLED: tonic ends a call past its timeout so
        assert waited < REQUEST_MS / 1000 + 1
        during = rss_kib(pid)
    worst = probe.assert_healthy()
    assert during - before < RSS_BOUND_KIB
    print(f"rls abuse: worst probe {worst * 1000:.1f} ms, RSS {before} -> {during} KiB")


def rls_code(port: int, domain: str, entries: list[tuple[str, str]]) -> int:
    """One ShouldRateLimit call with one descriptor: its overall_code."""
    msg = rls_request(domain, entries)
    head, data, trailers = h2_call(port, RLS_PATH, [("content-type", "application/grpc"), ("te", "trailers")],
                                   b"\x00" + len(msg).to_bytes(4, "big") + msg)
    assert trailers.get("grpc-status", head.get("grpc-status")) == "0", (head, trailers)
    assert data[5] == 0x08, data
    return data[6]


@pytest.mark.parametrize("store", ["memory", "redis"])
def test_rls_long_descriptor_values_are_kept_as_bounded_keys(processes, tmp_path, store):
    """A descriptor value is as long as the client sends (up to the 4 MiB
    message): its state is kept under the hash of a key past 512 bytes."""
    path = tmp_path / "bounds.yaml"
    path.write_text("domain: bounds\ndescriptors:\n  - key: user\n"
                    "    rate_limit: {unit: hour, requests_per_unit: 2}\n")
    url = "memory"
    if store == "redis":
        redis = processes.redis()
        url = f"redis://127.0.0.1:{redis.port}"
    grpc = support.free_port()
    lim = processes.limiter(store=url, extra_args=["--grpc-listen", f"127.0.0.1:{grpc}", "--descriptors", str(path)])
    a = "a" * 60_000
    b = a[:-1] + "b"
    assert [rls_code(grpc, "bounds", [("user", a)]) for _ in range(3)] == [1, 1, 2]
    assert [rls_code(grpc, "bounds", [("user", b)]) for _ in range(3)] == [1, 1, 2]
    assert [rls_code(grpc, "bounds", [("user", "c")]) for _ in range(1)] == [1]
    if store == "redis":
        keys = redis_command(redis.port, "KEYS", "*").split(b"\r\n")[1::2]
        lengths = sorted(int(k[1:]) for k in keys if k.startswith(b"$"))
        assert len(lengths) == 3 and max(lengths) < 600, lengths
    else:
        assert lim.metric("sluice_limiter_store_keys") == 3


def nested_descriptors(levels: int) -> str:
    text = "domain: d\ndescriptors:\n"
    for i in range(levels):
        pad = "    " * i
        if i:
            text += f"{pad}descriptors:\n"
        text += f"{pad}  - key: k{i}\n{pad}    rate_limit: {{unit: second, requests_per_unit: 1}}\n"
    return text


PAST_BOUNDS = {
    "large": (lambda: "domain: d\n#" + "x" * (4 << 20) + "\n", "larger than 4194304 bytes (4 MiB)"),
    "deep": (lambda: nested_descriptors(33), "descriptors nested deeper than 32 levels"),
    "many": (lambda: "domain: d\ndescriptors:\n" + "".join(f"  - {{key: k, value: v{i}}}\n" for i in range(100_001)),
             "more than 100000 descriptors in the file"),
}


@pytest.mark.parametrize("name", sorted(PAST_BOUNDS))
def test_descriptor_files_past_their_bounds_stop_startup(tmp_path, name):
    text, message = PAST_BOUNDS[name]
    path = tmp_path / f"{name}.yaml"
    path.write_text(text())
    proc = subprocess.run([str(support.LIMITER_BIN), "--listen", f"127.0.0.1:{support.free_port()}",
                           "--grpc-listen", f"127.0.0.1:{support.free_port()}", "--descriptors", str(path)],
                          capture_output=True, text=True, timeout=30)
    assert proc.returncode != 0
    out = proc.stdout + proc.stderr
    assert message in out and str(path) in out, out[-2000:]


@pytest.mark.parametrize("path", ["/v1/check", "/v1/permits", "/v1/charge"])
def test_every_api_body_is_bounded_at_64_kib(processes, tmp_path, path):
    lim = limiter(processes, tmp_path)
    headers = {"content-type": "application/json"}
    # Just past the bound: refused whole, with a message.
    r = request(lim.port, path, method="POST", body=b" " * (64 * 1024 + 1), headers=headers)
    assert r.status == 413, (r.status, r.body[:200])
    assert "64 KiB" in json.loads(r.body)["error"]
    # At the bound, whitespace and all: read, then refused for what it says.
    r = request(lim.port, path, method="POST", body=b"{}" + b" " * (64 * 1024 - 2), headers=headers)
    assert r.status == 400, (r.status, r.body[:200])
    # Announced larger: refused before it is read.
    with socket.create_connection(("127.0.0.1", lim.port)) as s:
        s.sendall(f"POST {path} HTTP/1.1\r\nHost: x\r\ncontent-length: 1000000000\r\n\r\n".encode())
        s.settimeout(5)
        assert s.recv(4096).startswith(b"HTTP/1.1 413")
