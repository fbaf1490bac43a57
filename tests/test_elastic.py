"""Elastic limits end to end: borrowing beyond the quota from a pool rule, local and global, exact under load."""

import json

import pytest

from support import ALGORITHMS, limiter_cluster, load_through, request, sluice_config, wait_until

YEAR = "365d"


def elastic_rules(algorithm, scope, quota=10, ceiling=15, pool=8):
    """Per user: `quota` of its own, up to `ceiling` while the shared pool of `pool` lasts."""
    limit = {"algorithm": algorithm, "window": YEAR, "scope": scope}
    return [
        {"name": "user", "key": ["header:x-user"],
         "limits": [dict(limit, requests=quota, elastic={"ceiling": ceiling, "pool": "spare"})]},
        {"name": "spare", "key": ["const:all"], "limits": [dict(limit, requests=pool)]},
    ]


def reported(port, user):
    """One request of `user`: (status, limit, remaining) as reported."""
    r = request(port, "/", headers={"x-user": user})
    return r.status, r.header("x-ratelimit-limit"), r.header("x-ratelimit-remaining")


@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_local_elastic_limit_borrows_up_to_its_ceiling_then_holds_to_its_quota(envoy, algorithm):
    e = envoy(sluice_config(elastic_rules(algorithm, "local")))
    # a: 10 of its own and 5 borrowed (its ceiling); b: 10 and the pool's last 3; c: its own 10
    assert load_through([e], per_envoy=40, connections=32, headers={"x-user": "a"}) == {200: 15, 429: 25}
    assert load_through([e], per_envoy=40, connections=32, headers={"x-user": "b"}) == {200: 13, 429: 27}
    assert load_through([e], per_envoy=40, connections=32, headers={"x-user": "c"}) == {200: 10, 429: 30}
    # counters reach the stats when the workers flush them
    wait_until(lambda: e.sluice_stat("sluice.user.borrowed") == 8, what="sluice.user.borrowed == 8")
    wait_until(lambda: e.sluice_stat("sluice.user.allowed") == 38, what="sluice.user.allowed == 38")
    assert e.sluice_stat("sluice.spare.allowed") == 0


def test_a_borrowed_request_reports_the_quota_with_nothing_remaining(envoy):
    e = envoy(sluice_config(elastic_rules("fixed_window", "local", quota=2, ceiling=3, pool=5)))
    # two of its own, one borrowed (the ceiling), then denied as over its quota
    assert [reported(e.port, "u") for _ in range(4)] == [
        (200, "2", "1"), (200, "2", "0"), (200, "2", "0"), (429, "2", "0")]


def test_a_pool_rule_is_not_applied_on_its_own(envoy):
    e = envoy(sluice_config(elastic_rules("gcra", "local", pool=1)))
    # requests the elastic rule cannot key (no x-user) are not counted by the pool
    assert all(request(e.port, "/").status == 200 for _ in range(5))
    assert load_through([e], per_envoy=20, connections=8, headers={"x-user": "a"}) == {200: 11, 429: 9}


@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_global_elastic_limit_is_exact_across_envoys_and_limiters(envoy, processes, algorithm):
    redis = processes.redis()
    limiters = [processes.limiter(store=redis.url, extra_args=["--store-timeout-ms", "5000"]) for _ in range(2)]
    # a limiter failure denies: it can only lower the counts
    cfg = sluice_config(elastic_rules(algorithm, "global", quota=20, ceiling=30, pool=15),
                        limiter={"cluster": "sluice_limiter", "authority": "sluice-limiter",
                                 "timeout": "5s", "failure_mode": "deny"})
    cluster = [limiter_cluster("sluice_limiter", [lim.port for lim in limiters])]
    envoys = [envoy(cfg, clusters=cluster) for _ in range(2)]
    assert load_through(envoys, per_envoy=30, connections=16, headers={"x-user": "a"}) == {200: 30, 429: 30}
    assert load_through(envoys, per_envoy=30, connections=16, headers={"x-user": "b"}) == {200: 25, 429: 35}
    assert load_through(envoys, per_envoy=30, connections=16, headers={"x-user": "c"}) == {200: 20, 429: 40}
    assert sum(e.sluice_stat("sluice.limiter_errors") for e in envoys) == 0
    wait_until(lambda: sum(e.sluice_stat("sluice.user.borrowed") for e in envoys) == 15,
               what="sluice.user.borrowed == 15 over both Envoys")


GOOD = elastic_rules("gcra", "local")


def with_elastic(**changes):
    rules = json.loads(json.dumps(GOOD))
    rules[0]["limits"][0]["elastic"].update(changes)
    return rules


def pool_with(**changes):
    rules = json.loads(json.dumps(GOOD))
    rules[1].update(changes)
    return rules


BAD = {
    "pool naming no rule": (with_elastic(pool="nope"), "rules[0].limits[0].elastic.pool"),
    "pool that is itself elastic": (
        pool_with(limits=[{"algorithm": "gcra", "requests": 8, "window": YEAR,
                           "elastic": {"ceiling": 9, "pool": "user"}}]),
        "rules[0].limits[0].elastic.pool"),
    "ceiling not above the quota": (with_elastic(ceiling=10), "rules[0].limits[0].elastic.ceiling"),
    "pool with a match": (pool_with(match={"path": "/x"}), "rules[1].match"),
    "global pool for a local limit": (
        pool_with(limits=[{"algorithm": "gcra", "requests": 8, "window": YEAR, "scope": "global"}]),
        "rules[0].limits[0].elastic.pool"),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_bad_elastic_configuration_is_refused_with_the_field_named(envoy, case):
    e = envoy(sluice_config(GOOD))
    rules, field = BAD[case]
    config = sluice_config(rules, limiter={"cluster": "sluice_limiter", "authority": "sluice-limiter"})
    assert not e.push_config(json.dumps(config))
    lines = [line for line in e.log().splitlines() if "sluice: invalid configuration" in line]
    assert lines and f"{field}:" in lines[-1], lines
    # still serving the previous configuration
    assert request(e.port, "/", headers={"x-user": "a"}).status == 200
