"""Every algorithm, end to end in Envoy: exact admits, headers, Retry-After, recovery."""

import math
import time

import pytest

from support import ALGORITHMS, concurrent_requests, request, sluice_config
from support.windows import away_from_window_boundary

# Algorithms whose windows are aligned to the epoch: a test must not straddle a boundary.
ALIGNED = {"fixed_window", "sliding_window"}


def one_rule(algorithm, requests, window, **limit):
    return sluice_config([{
        "name": "users",
        "key": ["header:x-user"],
        "limits": [{"algorithm": algorithm, "requests": requests, "window": window, **limit}],
    }])


@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_fresh_key_admits_exactly_requests_then_denies_with_headers(envoy, algorithm):
    e = envoy(one_rule(algorithm, 5, "2s"))
    if algorithm in ALIGNED:
        away_from_window_boundary(2.0)
    alice = {"x-user": "alice"}
    for i in range(5):
        r = request(e.port, "/", headers=alice)
        assert r.status == 200, f"request {i + 1} of 5 was denied"
        assert r.header("x-ratelimit-limit") == "5"
        assert r.header("x-ratelimit-remaining") == str(4 - i)
        assert r.header("ratelimit-policy") == '"users";q=5;w=2'
        assert r.header("ratelimit").startswith(f'"users";r={4 - i};t=')
        # the sliding window counter weighs this window's hits into the next one too
        max_reset = 4 if algorithm == "sliding_window" else 2
        assert 1 <= int(r.header("x-ratelimit-reset")) <= max_reset

    started = time.time()
    denied = request(e.port, "/", headers=alice)
    assert denied.status == 429
    assert denied.body == b"rate limited\n"
    assert denied.header("x-sluice-rule") == "users"
    assert denied.header("x-ratelimit-remaining") == "0"
    assert denied.header("ratelimit").startswith('"users";r=0;t=')
    retry_after = int(denied.header("retry-after"))
    # the IETF `t` (time until more quota) is never later than retry-after
    assert 1 <= int(denied.header("ratelimit").rpartition(";t=")[2]) <= retry_after
    if algorithm in ("token_bucket", "leaky_bucket", "gcra"):
        # one request's worth refills in 2 s / 5 = 400 ms, rounded up to whole seconds
        assert retry_after == 1
    elif algorithm == "sliding_log":
        # the oldest of the five leaves the trailing window 2 s after it arrived
        assert retry_after == 2
    else:
        boundary = math.ceil(started / 2.0) * 2.0
        assert 1 <= retry_after <= math.ceil(boundary - started + 0.4) + 1

    # another key is untouched
    assert request(e.port, "/", headers={"x-user": "bob"}).status == 200

    # waiting Retry-After is the protocol under test, not a readiness wait
    time.sleep(max(0.0, started + retry_after - time.time()))
    assert request(e.port, "/", headers=alice).status == 200


@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_exact_count_under_concurrency(envoy, algorithm):
    # 32 connections spread over both workers; the window is long enough that
    # nothing refills while the test runs.
    e = envoy(one_rule(algorithm, 1000, "365d"), concurrency=2)
    counts = concurrent_requests(e.port, connections=32, total=3000, headers={"x-user": "hot"})
    assert counts == {200: 1000, 429: 2000}


def test_cost_of_burst_one_request_per_window(envoy):
    e = envoy(one_rule("gcra", 1, "1h"))
    assert request(e.port, "/", headers={"x-user": "a"}).status == 200
    denied = request(e.port, "/", headers={"x-user": "a"})
    assert denied.status == 429
    assert 3599 <= int(denied.header("retry-after")) <= 3600


def test_burst_larger_than_rate(envoy):
    # 1 request per second sustained, bursts of 4
    e = envoy(one_rule("token_bucket", 1, "1s", burst=4))
    statuses = [request(e.port, "/", headers={"x-user": "a"}).status for _ in range(5)]
    assert statuses == [200, 200, 200, 200, 429]
