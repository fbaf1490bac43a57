"""Delay mode: requests over a gcra or leaky_bucket limit are held until they conform.

Times are measured on the client side from the moment the requests are sent
together, each relative to the first answer (answered at once: its latency is
what every answer shares on a loaded machine); the tolerance is ±25 ms around
each computed time.
"""

import functools
import http.client
import json
import socket
import threading
import time

import pytest

from support import limiter_cluster, request, run_all, sluice_config, wait_until

TOLERANCE = 0.025
STEP = 0.1  # GCRA 10/s: one request every 100 ms


def paced(max_queued=None, **limit):
    """One rule on a constant key: GCRA 10/s, burst 1, held up to 1s."""
    rule = {"name": "paced", "key": ["const:k"],
            "limits": [dict({"algorithm": "gcra", "requests": 10, "window": "1s", "burst": 1,
                             "on_exceed": "delay", "max_delay": "1s"}, **limit)]}
    if max_queued is not None:
        rule["max_queued"] = max_queued
    return sluice_config([rule])


def fire(port, n):
    """Sends `n` requests at once, one connection each (opened beforehand).

    Returns [(seconds from the first send to the response, response)], by
    completion time."""
    return fire_through([port], n)


class Fired(list):
    """`fire`'s results, and how far apart their requests were sent
    (`spread`, seconds: a request sent that much after the first waits that
    much less)."""

    spread: float = 0.0


def fire_through(ports, n):
    """`fire` with the connections spread over `ports` in turn."""
    conns = [http.client.HTTPConnection("127.0.0.1", ports[i % len(ports)], timeout=30) for i in range(n)]
    for c in conns:
        c.connect()
    barrier = threading.Barrier(n)
    sent, done = [0.0] * n, [None] * n

    def one(i):
        try:
            barrier.wait(timeout=10)
            sent[i] = time.monotonic()
            conns[i].request("GET", "/")
            resp = conns[i].getresponse()
            body = resp.read()
            done[i] = (time.monotonic(), resp.status, {k.lower(): v for k, v in resp.getheaders()}, body)
        finally:
            conns[i].close()

    run_all([functools.partial(one, i) for i in range(n)])
    start = min(sent)
    fired = Fired(sorted((at - start, status, headers) for at, status, headers, _ in done))
    fired.spread = max(sent) - start
    return fired


def delayed_ms(headers):
    value = headers.get("x-sluice-delayed-ms")
    return None if value is None else int(value)


def assert_paced(results, spread: float | None = None):
    """The k-th response completes k*100 ms after the requests were sent,
    ±25 ms, and no later than that after the first response (which is
    answered at once: its time is what a decision took, a limiter call for a
    global limit, and the held ones were decided about as late). Its delay
    is k*100 ms less how much later than the first it arrived (at most the
    sends' `spread`, taken from `results` when they are `fire`'s)."""
    spread = getattr(results, "spread", 0.0) if spread is None else spread
    first = results[0][0]
    assert first < STEP, results
    for k, (elapsed, status, headers) in enumerate(results):
        assert status == 200, results
        early, late = elapsed - k * STEP, elapsed - first - k * STEP
        assert early >= -TOLERANCE and late <= TOLERANCE, f"response {k} at {elapsed * 1000:.0f} ms: {results}"
        if k == 0:
            assert delayed_ms(headers) is None
        else:
            off = delayed_ms(headers) - k * 100
            assert -(TOLERANCE + spread) * 1000 <= off <= TOLERANCE * 1000, (spread, results)


def test_concurrent_requests_complete_one_step_apart(envoy):
    e = envoy(paced())
    assert_paced(fire(e.port, 5))
    # each worker flushes its own counts
    wait_until(lambda: e.sluice_stat("sluice.paced.delayed") == 4, what="sluice.paced.delayed == 4")
    wait_until(lambda: e.sluice_stat("sluice.paced.allowed") == 5, what="sluice.paced.allowed == 5")
    # total held time: 100 + 200 + 300 + 400 ms, less the time between the
    # sends; each hold is counted in whole milliseconds, rounded up
    held_ms = e.sluice_stat("sluice.paced.delayed_ms")
    assert 1000 - 4 * 25 <= held_ms <= 1000 + 4, held_ms
    assert e.sluice_stat("sluice.paced.denied") == 0


def test_requests_beyond_max_delay_are_denied_with_retry_after(envoy):
    e = envoy(paced())
    results = fire(e.port, 15)
    passed = [r for r in results if r[1] == 200]
    denied = [r for r in results if r[1] == 429]
    # 0, 100, ..., 1000 ms fit within max_delay; 1100 ms and later do not
    assert (len(passed), len(denied)) == (11, 4), results
    assert_paced(passed, results.spread)
    for elapsed, _, headers in denied:
        assert elapsed < STEP, results  # answered at once, not held
        # they would conform after 1.1 to 1.4 s: retry-after rounds up to 2
        assert headers["retry-after"] == "2"
        assert headers["x-sluice-rule"] == "paced"
        assert delayed_ms(headers) is None
    wait_until(lambda: e.sluice_stat("sluice.paced.denied") == 4, what="sluice.paced.denied == 4")


def worker_connections(e):
    """Connections accepted by each worker of the test listener."""
    stats = e.stats()
    prefix = f"listener.127.0.0.1_{e.port}.worker_"
    return {name: v for name, v in stats.items() if name.startswith(prefix) and name.endswith(".downstream_cx_total")}


def settled_worker_connections(e):
    """`worker_connections` once earlier connections (the readiness probe's
    too) have all been accepted: two reads 100 ms apart agree."""
    seen = [worker_connections(e)]

    def stable():
        time.sleep(0.1)
        seen.append(worker_connections(e))
        return seen[-1] == seen[-2]

    wait_until(stable, what="listener connection counts settle")
    return seen[-1]


def test_a_full_queue_denies(envoy):
    e = envoy(paced(max_queued=2))
    settled_worker_connections(e)
    # spends the key's burst: the 8 requests below all have to wait
    assert request(e.port, "/").status == 200
    before = worker_connections(e)  # its connection was accepted before it was answered
    results = fire(e.port, 8)
    after = worker_connections(e)
    per_worker = [after[name] - before.get(name, 0) for name in after]
    assert sum(per_worker) == 8, after
    # each worker holds at most 2 requests of the rule; the others are denied
    held = sum(min(2, n) for n in per_worker)
    statuses = [status for _, status, _ in results]
    assert statuses.count(200) == held, (per_worker, results)
    assert statuses.count(429) == 8 - held
    for _, status, headers in results:
        if status == 200:
            assert delayed_ms(headers) > 0
        else:
            # its delay (at most 500 ms here) in whole seconds, rounded up
            assert headers["retry-after"] == "1"
            assert headers["x-sluice-rule"] == "paced"
    # each worker flushes its own counts
    wait_until(lambda: e.sluice_stat("sluice.paced.delayed") == held, what=f"sluice.paced.delayed == {held}")
    wait_until(lambda: e.sluice_stat("sluice.paced.denied") == 8 - held, what=f"sluice.paced.denied == {8 - held}")


def test_a_client_leaving_while_held_gives_its_quota_back(envoy):
    # 2/s: a step long enough that the steps below fit in it on a loaded machine
    step = 0.5
    e = envoy(paced(requests=2))
    assert request(e.port, "/").status == 200
    t0 = time.monotonic()  # after the first decision: the step counts from it
    # the second request is held for about 500 ms; its client leaves at once
    s = socket.create_connection(("127.0.0.1", e.port))
    s.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
    time.sleep(0.03)
    s.close()
    time.sleep(0.03)
    # with its quota back, the next request conforms at +500 ms, not +1000 ms
    r = request(e.port, "/")
    waited = time.monotonic() - t0
    assert r.status == 200
    assert delayed_ms(r.headers) is not None and delayed_ms(r.headers) <= (step - 0.06 + TOLERANCE) * 1000, r.headers
    assert waited <= step + TOLERANCE
    # nothing stuck, nothing broken
    assert e.process.alive()
    assert "panic" not in e.log()
    wait_until(lambda: e.sluice_stat("sluice.paced.delayed") == 2, what="sluice.paced.delayed == 2")


def test_requests_held_during_a_configuration_push_complete(envoy):
    e = envoy(paced())
    results = []
    thread = threading.Thread(target=lambda: results.extend(fire(e.port, 5)))
    thread.start()
    time.sleep(0.05)
    assert e.push_config(paced(requests=20))
    thread.join(timeout=10)
    assert not thread.is_alive()
    assert [status for _, status, _ in results] == [200] * 5
    assert all(delayed_ms(h) for _, _, h in results[1:]), results
    # the held ones were not released early, nor long after their time
    assert abs(results[-1][0] - results[0][0] - 4 * STEP) <= TOLERANCE, results
    assert request(e.port, "/").status == 200


def test_a_global_limit_paces_two_envoys_from_one_clock(envoy, processes):
    redis = processes.redis()
    limiters = [processes.limiter(store=redis.url, extra_args=["--store-timeout-ms", "5000"]) for _ in range(2)]
    rule = {"name": "paced", "key": ["const:k"],
            "limits": [{"algorithm": "gcra", "requests": 10, "window": "1s", "burst": 1, "scope": "global",
                        "on_exceed": "delay", "max_delay": "1s"}]}
    # a limiter failure denies: it can only lower the count of 200s
    cfg = sluice_config([rule], limiter={"cluster": "sluice_limiter", "authority": "sluice-limiter",
                                         "timeout": "5s", "failure_mode": "deny"})
    cluster = [limiter_cluster("sluice_limiter", [lim.port for lim in limiters])]
    envoys = [envoy(cfg, clusters=cluster) for _ in range(2)]
    results = fire_through([e.port for e in envoys], 16)
    passed = [r for r in results if r[1] == 200]
    denied = [r for r in results if r[1] == 429]
    # one schedule for both Envoys, from Redis's clock: 0, 100, ..., 1000 ms
    # fit within max_delay, one request each; nothing more is admitted
    failures = sum(e.sluice_stat("sluice.limiter_errors") for e in envoys)
    assert (len(passed), len(denied)) == (11, 5), (failures, results)
    assert_paced(passed, results.spread)
    for elapsed, _, headers in denied:
        assert elapsed < STEP, results  # answered at once, not held
        assert headers["retry-after"] == "2"
        assert delayed_ms(headers) is None
    assert sum(lim.metric("sluice_limiter_delayed_total") for lim in limiters) == 10
    # each Envoy counts the requests it held
    wait_until(lambda: sum(e.sluice_stat("sluice.paced.delayed") for e in envoys) == 10,
               what="sluice.paced.delayed == 10 over both Envoys")


GOOD = {"name": "r", "key": ["const:x"], "limits": [{"algorithm": "gcra", "requests": 1, "window": "1h"}]}


def with_limit(**changes):
    return json.dumps(sluice_config([dict(GOOD, limits=[dict(GOOD["limits"][0], **changes)])]))


BAD = {
    "delay on fixed_window": (with_limit(algorithm="fixed_window", on_exceed="delay", max_delay="1s"),
                              "rules[0].limits[0].on_exceed"),
    "delay without max_delay": (with_limit(on_exceed="delay"), "rules[0].limits[0].max_delay"),
    "max_delay without delay": (with_limit(max_delay="1s"), "rules[0].limits[0].max_delay"),
    "max_queued out of range": (json.dumps(sluice_config([dict(GOOD, max_queued=0)])), "rules[0].max_queued"),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_bad_delay_configuration_is_refused_with_the_field_named(envoy, case):
    e = envoy(sluice_config([GOOD]))
    assert request(e.port, "/").status == 200
    config, field = BAD[case]
    assert not e.push_config(config)
    lines = [line for line in e.log().splitlines() if "sluice: invalid configuration" in line]
    assert lines and f"{field}:" in lines[-1], lines
    # still serving the previous configuration and its counters
    assert request(e.port, "/").status == 429
