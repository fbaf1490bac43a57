"""Header values as keys, end to end: long values, bytes that are not
UTF-8, control bytes and case (the bounds of docs/reference/bounds.md)."""

from __future__ import annotations

import socket

from support import limiter_cluster, sluice_config


def user_rule(requests: int = 2, scope: str | None = None, **top) -> dict:
    limit = {"algorithm": "fixed_window", "requests": requests, "window": "1h"}
    if scope:
        limit["scope"] = scope
    return sluice_config([{"name": "per-user", "key": ["header:x-user"], "limits": [limit]}], **top)


def raw_status(port: int, value: bytes) -> int:
    """The status of `GET /` with `x-user: value` sent as raw bytes."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        s.sendall(b"GET / HTTP/1.1\r\nhost: x\r\nconnection: close\r\nx-user: " + value + b"\r\n\r\n")
        data = b""
        while b"\r\n" not in data:
            chunk = s.recv(4096)
            if not chunk:
                break
            data += chunk
    return int(data.split(b" ", 2)[1]) if data else 0


def statuses(port: int, value: bytes, n: int) -> list[int]:
    return [raw_status(port, value) for _ in range(n)]


def test_a_value_that_is_not_utf8_is_a_key_and_the_filter_stays_up(envoy):
    e = envoy(user_rule())
    assert statuses(e.port, b"\xff\xfe", 3) == [200, 200, 429]
    # Each invalid byte reads as U+FFFD: values differing only there share a key.
    assert statuses(e.port, b"\xfd\xfc", 1) == [429]
    assert statuses(e.port, b"caf\xc3\xa9", 3) == [200, 200, 429]  # valid UTF-8: its own key
    assert statuses(e.port, b"bob", 3) == [200, 200, 429]
    assert "panicked" not in e.log() and "unwrap" not in e.log()


def test_control_bytes_are_refused_by_envoy_before_the_filter(envoy):
    e = envoy(user_rule(requests=1))
    for value in (b"a\x01b", b"a\x00b", b"a\x7fb"):
        assert statuses(e.port, value, 2) == [400, 400], value
    assert statuses(e.port, b"a\tb", 2) == [200, 429]  # a tab is a header byte like any other


def test_values_are_case_sensitive_names_are_not(envoy):
    e = envoy(user_rule())
    assert statuses(e.port, b"Alice", 3) == [200, 200, 429]
    assert statuses(e.port, b"alice", 3) == [200, 200, 429]
    assert statuses(e.port, b"ALICE", 1) == [200]
    with socket.create_connection(("127.0.0.1", e.port), timeout=10) as s:
        s.sendall(b"GET / HTTP/1.1\r\nhost: x\r\nconnection: close\r\nX-USER: ALICE\r\n\r\n")
        assert s.recv(4096).split(b" ", 2)[1] == b"200"
    assert statuses(e.port, b"ALICE", 1) == [429]


LONG = 50 * 1024  # under Envoy's default 60 KiB of request headers


def test_long_values_are_exact_keys_locally(envoy):
    e = envoy(user_rule(local_max_keys=1000))
    a, b = b"a" * LONG, b"a" * (LONG - 1) + b"b"
    assert statuses(e.port, a, 3) == [200, 200, 429]
    assert statuses(e.port, b, 3) == [200, 200, 429]
    # Past Envoy's header limit the request never reaches the filter.
    assert statuses(e.port, b"a" * (64 * 1024), 1) == [431]


def test_long_values_are_hashed_into_bounded_limiter_keys(envoy, processes):
    lim = processes.limiter()
    e = envoy(user_rule(scope="global", limiter={"cluster": "sluice_limiter", "authority": "sluice-limiter",
                                                 "timeout": "5s", "failure_mode": "deny"}),
              clusters=[limiter_cluster("sluice_limiter", [lim.port])])
    a, b = b"a" * LONG, b"a" * (LONG - 1) + b"b"
    assert statuses(e.port, a, 3) == [200, 200, 429]
    assert statuses(e.port, b, 3) == [200, 200, 429]
    # Two keys held, each at most 512 bytes (a longer key would be refused: 400, then denied).
    assert lim.metric("sluice_limiter_store_keys") == 2
