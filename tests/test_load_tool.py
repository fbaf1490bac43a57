"""`sluice-load`, the load the flood, fault and soak checks count with: every
request accounted for, a fresh client address per request when asked, and a
request that gets no answer counted as a timeout, never waited on forever."""

import socket
import threading

from support import free_port, run_load, sluice_config


def per_ip(requests):
    return sluice_config(
        [{"name": "per-ip", "key": ["client_ip"],
          "limits": [{"algorithm": "fixed_window", "requests": requests, "window": "1h"}]}],
        client_ip={"xff_trusted_hops": 1},
        # slots enough that 3,000 keys never put three in one slot
        local_max_keys=10_000_000,
    )


def test_every_request_is_counted_and_ip_keys_are_distinct(envoy):
    e = envoy(per_ip(2))
    url = f"http://127.0.0.1:{e.port}/"
    fresh = run_load(url, connections=4, requests=3000, headers={"x-forwarded-for": "{ip}"})
    assert (fresh.sent, fresh.answered, fresh.status) == (3000, 3000, {200: 3000})
    assert fresh.timeouts == fresh.io_errors == 0
    assert sum(b["answered"] for b in fresh.timeline) == 3000
    assert 0 < fresh.latency_us["p50"] <= fresh.latency_us["max"]

    # 10 addresses, 100 requests: each address admitted twice, the rest limited.
    repeated = run_load(url, connections=2, requests=100, headers={"x-forwarded-for": "{ip}"},
                        distinct=10, first=1_000_000)
    assert repeated.status == {200: 20, 429: 80}


def test_unanswered_requests_are_timeouts():
    # A server that accepts and reads but never answers.
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(64)
    port = listener.getsockname()[1]
    held = []

    def accept():
        while True:
            try:
                conn, _ = listener.accept()
            except OSError:
                return
            held.append(conn)

    threading.Thread(target=accept, daemon=True).start()
    try:
        report = run_load(f"http://127.0.0.1:{port}/", connections=2, duration=1.2, timeout=0.3)
        assert report.answered == 0
        assert report.timeouts == report.sent >= 4
        assert 300_000 <= report.latency_us["max"] < 1_000_000
    finally:
        listener.close()
        for c in held:
            c.close()


def test_refused_connections_are_not_requests():
    report = run_load(f"http://127.0.0.1:{free_port()}/", connections=1, duration=0.3)
    assert report.sent == 0
    assert report.connect_errors > 0
