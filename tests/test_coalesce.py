"""Coalescing: requests with the same global check share calls to the limiter, and admit exactly the limit."""

import pytest

from support import ALGORITHMS, limiter_cluster, load_through, request, sluice_config, wait_until
from test_delay import STEP, assert_paced, fire_through

YEAR = "365d"


def coalesced_rule(algorithm, requests, **limit):
    return {"name": "hot", "key": ["const:k"],
            "limits": [dict({"algorithm": algorithm, "requests": requests, "window": YEAR, "scope": "global",
                             "sync": {"mode": "coalesce"}}, **limit)]}


def global_config(rules):
    # a limiter failure denies: it can only lower the count of 200s
    return sluice_config(rules, limiter={"cluster": "sluice_limiter", "authority": "sluice-limiter",
                                         "timeout": "5s", "failure_mode": "deny"})


@pytest.fixture
def shared_limiters(processes):
    """Two limiters sharing one Redis, and the Envoy cluster of both."""
    redis = processes.redis()
    limiters = [processes.limiter(store=redis.url, extra_args=["--store-timeout-ms", "5000"]) for _ in range(2)]
    return limiters, [limiter_cluster("sluice_limiter", [lim.port for lim in limiters])]


@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_coalesced_checks_admit_exactly_the_limit_with_fewer_calls(envoy, shared_limiters, algorithm):
    limiters, cluster = shared_limiters
    envoys = [envoy(global_config([coalesced_rule(algorithm, 100)]), clusters=cluster) for _ in range(2)]
    counts = load_through(envoys, per_envoy=150, connections=32)
    assert counts == {200: 100, 429: 200}
    assert sum(e.sluice_stat("sluice.limiter_errors") for e in envoys) == 0
    # the over-limit cache answers once the key is spent; the requests that
    # reached the limiter shared calls
    calls = sum(lim.metric("sluice_limiter_checks_total") for lim in limiters)
    batches = sum(lim.metric("sluice_limiter_batches_total") for lim in limiters)
    carried = sum(lim.metric("sluice_limiter_batched_requests_total") for lim in limiters)
    assert batches > 0 and carried > batches, (calls, batches, carried)
    wait_until(lambda: sum(e.sluice_stat("sluice.coalesced") for e in envoys) == carried,
               what="sluice.coalesced == requests carried by batches")


def test_requests_of_other_checks_do_not_wait_for_each_other(envoy, shared_limiters):
    limiters, cluster = shared_limiters
    rule = coalesced_rule("fixed_window", 20)
    rule["key"] = ["header:x-user"]
    e = envoy(global_config([rule]), clusters=cluster)
    for user in ("a", "b", "c"):
        assert load_through([e], per_envoy=40, connections=16, headers={"x-user": user}) == {200: 20, 429: 20}
    r = request(e.port, "/", headers={"x-user": "d"})
    assert (r.status, r.header("x-ratelimit-limit"), r.header("x-ratelimit-remaining")) == (200, "20", "19")


def test_coalesced_delay_mode_paces_requests_from_one_schedule(envoy, shared_limiters):
    limiters, cluster = shared_limiters
    rule = {"name": "paced", "key": ["const:k"],
            "limits": [{"algorithm": "gcra", "requests": 10, "window": "1s", "burst": 1, "scope": "global",
                        "on_exceed": "delay", "max_delay": "1s", "sync": {"mode": "coalesce"}}]}
    envoys = [envoy(global_config([rule]), clusters=cluster) for _ in range(2)]
    results = fire_through([e.port for e in envoys], 16)
    passed = [r for r in results if r[1] == 200]
    denied = [r for r in results if r[1] == 429]
    assert (len(passed), len(denied)) == (11, 5), results
    assert_paced(passed, results.spread)
    for elapsed, _, headers in denied:
        assert elapsed < STEP, results
        assert headers["retry-after"] == "2"


def test_a_limiter_outage_applies_the_failure_mode_to_every_waiting_request(envoy, processes):
    limiter = processes.limiter()
    cluster = [limiter_cluster("sluice_limiter", [limiter.port])]
    cfg = sluice_config([coalesced_rule("gcra", 1000)],
                        limiter={"cluster": "sluice_limiter", "authority": "sluice-limiter",
                                 "timeout": "2s", "failure_mode": "deny"})
    e = envoy(cfg, clusters=cluster)
    assert load_through([e], per_envoy=50, connections=16) == {200: 50}
    limiter.stop()
    assert load_through([e], per_envoy=50, connections=16) == {429: 50}
    wait_until(lambda: e.sluice_stat("sluice.limiter_errors") == 50, what="sluice.limiter_errors == 50")


def test_sync_on_a_local_limit_is_refused(envoy):
    rule = coalesced_rule("gcra", 10)
    rule["limits"][0]["scope"] = "local"
    e = envoy(sluice_config([{"name": "ok", "key": ["const:k"],
                              "limits": [{"algorithm": "gcra", "requests": 1, "window": "1h"}]}]))
    assert not e.push_config(sluice_config([rule]))
    lines = [line for line in e.log().splitlines() if "sluice: invalid configuration" in line]
    assert lines and "rules[0].limits[0].sync:" in lines[-1], lines
