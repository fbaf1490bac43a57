"""What a request's headers do while Sluice reads its body (a rule keyed by
`body:user`), seen from the upstream behind Envoy: by default they go on
and a refused request's body never follows; with `headers_while_reading_body:
hold` and Envoy's `allow_on_headers_stop_iteration`, nothing of a refused
request reaches the upstream, and an admitted one arrives whole, after its
body was sent. Without Envoy's setting, such requests stall until Envoy's
stream idle timeout. A request that ends with trailers is decided on them,
in both modes."""

from __future__ import annotations

import http.client
import itertools
import socket
import threading
import time

import h2.config
import h2.connection
import h2.events
import pytest

from support import limiter_cluster, sluice_config, start_envoy, wait_until, wasm_filter
from support.recording_upstream import RecordingUpstream

LIMIT = 10
USERS = ["ann", "bob", "cat", "dan"]
_tags = itertools.count()


def rule(scope: str = "local") -> dict:
    limit = {"algorithm": "fixed_window", "requests": LIMIT, "window": "1h"}
    if scope == "global":
        limit["scope"] = "global"
    return {"name": "per-user", "key": ["body:user"], "limits": [limit]}


@pytest.fixture
def upstream():
    up = RecordingUpstream()
    yield up
    up.stop()


@pytest.fixture
def proxy(tmp_path, upstream):
    started = []

    def start(config: dict, allow_stop: bool = True, clusters=(), **hcm):
        e = start_envoy(tmp_path, [wasm_filter(config, allow_stop_iteration=allow_stop)], clusters=[upstream.cluster(), *clusters],
                        hcm_extra={**RecordingUpstream.route_config(), **hcm})
        started.append(e)
        return e

    yield start
    for e in started:
        e.stop()


def tag() -> str:
    return f"r{next(_tags)}"


def post(port: int, user: str, label: str, late: float = 0.0, before_body=None) -> tuple[int, float]:
    """A POST of `{"user": user}` tagged `label`, its body sent `late`
    seconds after its headers (and once `before_body()`, if given, has
    returned); (status, when the body was sent)."""
    body = f'{{"user":"{user}"}}'.encode()
    with socket.create_connection(("127.0.0.1", port), timeout=30) as c:
        c.sendall(f"POST / HTTP/1.1\r\nhost: x\r\nx-tag: {label}\r\ncontent-type: application/json\r\n"
                  f"content-length: {len(body)}\r\n\r\n".encode())
        time.sleep(late)
        if before_body:
            before_body()
        sent = time.monotonic()
        c.sendall(body)
        head = c.recv(4096).split(b"\r\n", 1)[0].split()
        return int(head[1]), sent


def load(port: int, per_user: int, connections: int = 32) -> dict[str, dict]:
    """`per_user` POSTs for each user at once over `connections` keep-alive
    connections; per user, status -> tags."""
    jobs = [(u, tag()) for u in USERS for _ in range(per_user)]
    out: dict[str, dict] = {u: {} for u in USERS}
    lock = threading.Lock()

    def worker(mine):
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        try:
            for user, label in mine:
                conn.request("POST", "/", body=f'{{"user":"{user}"}}'.encode(),
                             headers={"x-tag": label, "content-type": "application/json"})
                resp = conn.getresponse()
                resp.read()
                with lock:
                    out[user].setdefault(resp.status, []).append(label)
                if resp.getheader("connection") == "close":
                    conn.close()
        finally:
            conn.close()

    threads = [threading.Thread(target=worker, args=(jobs[i::connections],)) for i in range(connections)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return out


def test_by_default_the_headers_of_a_refused_request_reach_the_upstream(proxy, upstream):
    e = proxy(sluice_config([rule()]), allow_stop=False)
    labels = [tag() for _ in range(LIMIT + 2)]

    def headers_upstream(label):
        return lambda: wait_until(lambda: label in upstream.tags(), what=f"{label}'s headers upstream")

    # Each request's headers reach the upstream before its body is sent.
    assert [post(e.port, "ann", t, before_body=headers_upstream(t))[0] for t in labels] == \
        [200] * LIMIT + [429] * 2
    # The refused ones' bodies never follow: Envoy resets their streams.
    wait_until(lambda: upstream.tags(complete=False) == sorted(labels[LIMIT:]), what="two streams reset")
    assert upstream.tags(complete=True) == sorted(labels[:LIMIT])


def test_held_headers_keep_every_refused_request_from_the_upstream(proxy, upstream):
    e = proxy(sluice_config([rule()], headers_while_reading_body="hold"))
    # A body sent late: its headers reach the upstream only after it.
    first, late = tag(), 0.3
    status, sent = post(e.port, "eve", first, late=late)
    assert status == 200
    (seen,) = [s for s in upstream.seen if s.tag == first]
    assert seen.headers_at >= sent and seen.body == b'{"user":"eve"}', (seen, sent)
    # 40 requests of each of 4 users over 32 connections: each user's
    # first 10 reach the upstream, whole; no other request reaches it.
    statuses = load(e.port, per_user=40)
    admitted = []
    for user in USERS:
        assert {code: len(tags) for code, tags in statuses[user].items()} == {200: LIMIT, 429: 40 - LIMIT}, user
        admitted += statuses[user][200]
    assert upstream.tags() == sorted(admitted + [first])
    assert upstream.tags(complete=False) == []


def test_a_client_gone_before_its_body_takes_nothing_and_reaches_nothing(proxy, upstream):
    e = proxy(sluice_config([rule()], headers_while_reading_body="hold"))
    for _ in range(3):
        with socket.create_connection(("127.0.0.1", e.port)) as c:
            c.sendall(b"POST / HTTP/1.1\r\nhost: x\r\nx-tag: gone\r\ncontent-type: application/json\r\n"
                      b"content-length: 14\r\n\r\n{\"user\":")
    labels = [tag() for _ in range(LIMIT + 1)]
    assert [post(e.port, "fay", t)[0] for t in labels] == [200] * LIMIT + [429]
    assert upstream.tags() == sorted(labels[:LIMIT])


def test_held_headers_with_a_global_limit_through_two_envoys(proxy, upstream, processes):
    limiter = processes.limiter()
    config = sluice_config([rule("global")], headers_while_reading_body="hold",
                           limiter={"cluster": "sluice_limiter", "authority": "sluice-limiter",
                                    "timeout": "5s", "failure_mode": "deny"})
    envoys = [proxy(config, clusters=[limiter_cluster("sluice_limiter", [limiter.port])]) for _ in range(2)]
    results: list[dict] = []
    threads = [threading.Thread(target=lambda e=e: results.append(load(e.port, per_user=20))) for e in envoys]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    admitted = []
    for user in USERS:
        codes: dict[int, int] = {}
        for r in results:
            for code, tags in r[user].items():
                codes[code] = codes.get(code, 0) + len(tags)
                admitted += tags if code == 200 else []
        assert codes == {200: LIMIT, 429: 40 - LIMIT}, user
    assert upstream.tags() == sorted(admitted)
    assert upstream.tags(complete=False) == []


def test_held_headers_without_envoys_setting_stall_until_the_stream_idle_timeout(proxy, upstream):
    e = proxy(sluice_config([rule()], headers_while_reading_body="hold"), allow_stop=False,
              stream_idle_timeout="1s")
    # Envoy holds the body from the filter: no decision, nothing upstream,
    # and Envoy's own answer at its stream idle timeout.
    assert [post(e.port, "gil", tag())[0] for _ in range(2)] == [504, 504]
    assert upstream.seen == []


def h2_post_with_trailers(port: int, user: str, label: str) -> int:
    """An HTTP/2 POST of `{"user": user}` in two DATA frames, ended by
    trailers; its status."""
    conn = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True))
    with socket.create_connection(("127.0.0.1", port), timeout=30) as s:
        conn.initiate_connection()
        stream = conn.get_next_available_stream_id()
        conn.send_headers(stream, [(":method", "POST"), (":path", "/"), (":scheme", "http"), (":authority", "x"),
                                   ("content-type", "application/json"), ("x-tag", label)])
        body = f'{{"user":"{user}"}}'.encode()
        conn.send_data(stream, body[:5])
        s.sendall(conn.data_to_send())
        conn.send_data(stream, body[5:])
        conn.send_headers(stream, [("x-checksum", "1")], end_stream=True)
        s.sendall(conn.data_to_send())
        while True:
            data = s.recv(65536)
            assert data, "the connection closed without an answer"
            for event in conn.receive_data(data):
                if isinstance(event, h2.events.ResponseReceived) and event.stream_id == stream:
                    return int(dict(event.headers)[b":status"])
            s.sendall(conn.data_to_send())


@pytest.mark.parametrize("headers", ["forward", "hold"])
def test_a_request_ending_with_trailers_is_decided_on_its_body(proxy, upstream, headers):
    e = proxy(sluice_config([rule()], headers_while_reading_body=headers), allow_stop=headers == "hold")
    labels = [tag() for _ in range(LIMIT + 3)]
    assert [h2_post_with_trailers(e.port, "hal", t) for t in labels] == [200] * LIMIT + [429] * 3
    admitted = sorted(labels[:LIMIT])
    # The admitted ones reach the upstream whole, the refused ones' bodies
    # never (with `forward`, their headers may have gone on before the
    # decision); with `hold`, nothing of them does.
    wait_until(lambda: upstream.tags(complete=True) == admitted, what="the admitted requests upstream")
    if headers == "hold":
        assert upstream.tags() == admitted
