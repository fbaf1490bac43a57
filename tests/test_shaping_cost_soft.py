"""Soft limits and request cost end to end: local and global, exact under concurrent load."""

import functools
import json
import threading

import pytest

from support import ALGORITHMS, limiter_cluster, load_through, request, run_all, sluice_config, wait_until

YEAR = "365d"
YEAR_S = 365 * 24 * 3600


def concurrent(port, total, headers, connections=16):
    """`total` requests at once, each on its own connection; every response."""
    responses = []
    lock = threading.Lock()
    barrier = threading.Barrier(connections)

    def worker(n):
        barrier.wait(timeout=30)
        for _ in range(n):
            r = request(port, "/", headers=headers, timeout=30)
            with lock:
                responses.append(r)

    shares = [total // connections + (1 if i < total % connections else 0) for i in range(connections)]
    run_all([functools.partial(worker, n) for n in shares])
    assert len(responses) == total
    return responses


def statuses(responses):
    out = {}
    for r in responses:
        out[r.status] = out.get(r.status, 0) + 1
    return out


def remaining(responses):
    return sorted((int(r.header("x-ratelimit-remaining")) for r in responses if r.status == 200), reverse=True)


def local_rule(algorithm, requests, name="r", key=("header:x-user",), **limit_extra):
    rule_extra = {k: limit_extra.pop(k) for k in ("cost",) if k in limit_extra}
    return {"name": name, "key": list(key),
            "limits": [{"algorithm": algorithm, "requests": requests, "window": YEAR, **limit_extra}],
            **rule_extra}


def global_config(rules):
    # A limiter failure denies: it can only lower a count, never fake an exact one.
    return sluice_config(rules, limiter={"cluster": "sluice_limiter", "authority": "sluice-limiter",
                                         "timeout": "5s", "failure_mode": "deny"})


def global_rule(algorithm, requests, name="g", cost=None, key=("header:x-user",), **limit_extra):
    rule = {"name": name, "key": list(key),
            "limits": [{"algorithm": algorithm, "requests": requests, "window": YEAR, "scope": "global",
                        **limit_extra}]}
    if cost is not None:
        rule["cost"] = cost
    return rule


# --- soft limits -------------------------------------------------------------

@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_soft_limit_admits_exactly_the_allowance_and_reports_the_quota(envoy, algorithm):
    e = envoy(sluice_config([local_rule(algorithm, 10, name="soft", burst=10, soft_percent=20)]))
    responses = concurrent(e.port, 40, {"x-user": "fresh"})
    assert statuses(responses) == {200: 12, 429: 28}
    admitted = [r for r in responses if r.status == 200]
    assert {r.header("ratelimit-policy") for r in admitted} == {f'"soft";q=10;w={YEAR_S}'}
    assert {r.header("x-ratelimit-limit") for r in admitted} == {"10"}
    # remaining counts the hard quota down to 0, and stays there for the allowance
    assert remaining(responses) == [9, 8, 7, 6, 5, 4, 3, 2, 1, 0, 0, 0]
    assert all(int(r.header("retry-after")) >= 1 for r in responses if r.status == 429)


def test_soft_limit_applies_to_overrides(envoy):
    rule = local_rule("token_bucket", 10, name="soft", soft_percent=50)
    rule["overrides"] = [{"key": "vip", "requests": 20}]
    e = envoy(sluice_config([rule]))
    assert statuses(concurrent(e.port, 50, {"x-user": "vip"})) == {200: 30, 429: 20}
    assert statuses(concurrent(e.port, 30, {"x-user": "plain"})) == {200: 15, 429: 15}


# --- request cost ------------------------------------------------------------

@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_fixed_cost_admits_exactly_what_fits(envoy, algorithm):
    e = envoy(sluice_config([local_rule(algorithm, 20, name="c", cost=3)]))
    responses = concurrent(e.port, 10, {"x-user": "u"}, connections=10)
    assert statuses(responses) == {200: 6, 429: 4}
    assert remaining(responses) == [17, 14, 11, 8, 5, 2]
    wait_until(lambda: e.sluice_stat("sluice.c.allowed") == 6, what="sluice.c.allowed == 6")
    wait_until(lambda: e.sluice_stat("sluice.c.denied") == 4, what="sluice.c.denied == 4")


def test_header_cost_weighs_each_request(envoy):
    e = envoy(sluice_config([local_rule("fixed_window", 20, name="h", cost="header:x-cost")]))

    def send(cost, user="u"):
        headers = {"x-user": user}
        if cost is not None:
            headers["x-cost"] = cost
        return request(e.port, "/", headers=headers)

    steps = [(send("5"), 200, "15"), (send("10"), 200, "5"), (send("6"), 429, "5"), (send("5"), 200, "0")]
    for r, status, left in steps:
        assert (r.status, r.header("x-ratelimit-remaining")) == (status, left)
    denied = steps[2][0]
    assert int(denied.header("retry-after")) >= 1
    assert denied.header("x-sluice-reason") is None  # over the quota, not over the capacity
    # weight 0: the rule does not count the request
    free = send("0")
    assert free.status == 200
    assert free.header("x-ratelimit-remaining") is None and free.header("ratelimit") is None
    # a missing or malformed cost weighs 1 and is counted
    fallback = [send(c, user="v") for c in (None, "abc", "-2", "1.5", "")]
    assert [r.status for r in fallback] == [200] * 5
    assert [r.header("x-ratelimit-remaining") for r in fallback] == ["19", "18", "17", "16", "15"]
    wait_until(lambda: e.sluice_stat("sluice.h.cost_invalid") == 5, what="sluice.h.cost_invalid == 5")
    wait_until(lambda: e.sluice_stat("sluice.h.allowed") == 8, what="sluice.h.allowed == 8")


def test_header_cost_under_concurrent_load(envoy):
    e = envoy(sluice_config([local_rule("gcra", 100, name="h", cost="header:x-cost")]))
    heavy = concurrent(e.port, 30, {"x-user": "u", "x-cost": "7"})
    # 100 units: 14 requests of 7, 2 units left
    assert statuses(heavy) == {200: 14, 429: 16}
    light = concurrent(e.port, 10, {"x-user": "u", "x-cost": "1"})
    assert statuses(light) == {200: 2, 429: 8}


def test_cost_above_capacity_is_denied_with_a_reason_and_consumes_nothing(envoy):
    e = envoy(sluice_config([
        {"name": "site", "key": ["const:s"], "limits": [{"algorithm": "fixed_window", "requests": 1000, "window": YEAR}]},
        {"name": "h", "key": ["header:x-user"], "cost": "header:x-cost",
         "limits": [{"algorithm": "gcra", "requests": 10, "window": "1m", "soft_percent": 100}]},
    ]))
    for cost in ("21", "99999999999999999999999"):
        r = request(e.port, "/", headers={"x-user": "u", "x-cost": cost})
        assert r.status == 429
        assert r.header("x-sluice-reason") == "cost-exceeds-capacity"
        assert r.header("x-sluice-rule") == "h"
        assert r.header("retry-after") == "60"  # the window: retrying soon cannot help
        # every limit decided has its policy item ("site" admitted before "h" denied)
        assert r.header("ratelimit-policy") == '"site";q=1000;w=31536000, "h";q=10;w=60'
        assert r.header("ratelimit").startswith('"h";')
    # capacity is 20 (10 + 100%): a weight of 20 fits, and the rejected ones spent nothing
    ok = request(e.port, "/", headers={"x-user": "u", "x-cost": "20"})
    assert ok.status == 200
    assert ok.header("x-ratelimit-remaining") == "0"
    wait_until(lambda: e.sluice_stat("sluice.h.denied") == 2, what="sluice.h.denied == 2")
    assert request(e.port, "/", headers={"x-user": "other"}).header("x-ratelimit-remaining") == "9"
    # "site" counted only the admitted requests (u's, other's, this one)
    site = request(e.port, "/", headers={"x-user": "third", "x-cost": "1"})
    assert site.status == 200
    wait_until(lambda: e.sluice_stat("sluice.site.allowed") == 3, what="sluice.site.allowed == 3")
    assert e.sluice_stat("sluice.site.denied") == 0


BAD_COSTS = {
    "negative cost": (-3, "rules[0].cost"),
    "zero cost": (0, "rules[0].cost"),
    "fractional cost": (1.5, "rules[0].cost"),
    "cost above the capacity": (11, "rules[0].cost: 11 is more than rules[0].limits[0] can ever admit"),
    "cost without header name": ("header:", "rules[0].cost"),
    "cost of another form": ("query:c", "rules[0].cost"),
}


@pytest.mark.parametrize("case", sorted(BAD_COSTS))
def test_bad_cost_or_soft_percent_is_refused_with_the_field_named(envoy, case):
    good = local_rule("gcra", 10)
    e = envoy(sluice_config([good]))
    cost, message = BAD_COSTS[case]
    assert not e.push_config(json.dumps(sluice_config([dict(good, cost=cost)]))), case
    lines = [line for line in e.log().splitlines() if "invalid configuration" in line]
    assert lines and message in lines[-1], lines[-1:] or e.log()[-2000:]
    assert request(e.port, "/", headers={"x-user": "u"}).status == 200


def test_soft_percent_out_of_range_is_refused(envoy):
    good = local_rule("gcra", 10)
    e = envoy(sluice_config([good]))
    assert not e.push_config(json.dumps(sluice_config([local_rule("gcra", 10, soft_percent=1001)])))
    lines = [line for line in e.log().splitlines() if "invalid configuration" in line]
    assert "rules[0].limits[0].soft_percent: must be between 0 and 1000, got 1001" in lines[-1]


# --- global ------------------------------------------------------------------

@pytest.fixture
def memory_limiter(processes):
    limiter = processes.limiter()
    return [limiter_cluster("sluice_limiter", [limiter.port])]


@pytest.mark.parametrize("algorithm", ["gcra", "sliding_window"])
def test_global_soft_limit_admits_exactly_the_allowance(envoy, memory_limiter, algorithm):
    cfg = global_config([global_rule(algorithm, 100, burst=100, soft_percent=20)])
    envoys = [envoy(cfg, clusters=memory_limiter) for _ in range(2)]
    counts = load_through(envoys, per_envoy=100, headers={"x-user": "hot"})
    assert counts == {200: 120, 429: 80}
    r = request(envoys[0].port, "/", headers={"x-user": "fresh"})
    assert (r.header("x-ratelimit-limit"), r.header("x-ratelimit-remaining")) == ("100", "99")


def test_global_fixed_cost_admits_exactly_what_fits(envoy, memory_limiter):
    cfg = global_config([global_rule("token_bucket", 20, cost=3)])
    envoys = [envoy(cfg, clusters=memory_limiter) for _ in range(2)]
    counts = load_through(envoys, per_envoy=10, connections=10, headers={"x-user": "hot"})
    assert counts == {200: 6, 429: 14}


def test_global_header_cost_and_capacity(envoy, memory_limiter):
    e = envoy(global_config([global_rule("gcra", 20, cost="header:x-cost")]), clusters=memory_limiter)

    def send(cost):
        return request(e.port, "/", headers={"x-user": "u", "x-cost": cost})

    assert [(r.status, r.header("x-ratelimit-remaining")) for r in (send("8"), send("8"), send("5"), send("4"))] \
        == [(200, "12"), (200, "4"), (429, "4"), (200, "0")]
    too_much = send("21")
    assert (too_much.status, too_much.header("x-sluice-reason")) == (429, "cost-exceeds-capacity")
    assert e.sluice_stat("sluice.limiter_errors") == 0


def test_global_limits_of_rules_with_different_weights_are_checked_in_one_call(envoy, memory_limiter):
    cfg = global_config([
        global_rule("fixed_window", 20, name="heavy", cost=3),
        global_rule("fixed_window", 100, name="site", key=("const:site",)),
    ])
    envoys = [envoy(cfg, clusters=memory_limiter) for _ in range(2)]
    counts = load_through(envoys, per_envoy=10, connections=10, headers={"x-user": "hot"})
    assert counts == {200: 6, 429: 14}
    # "site" spent one unit per admitted request: 94 left for another user
    r = request(envoys[0].port, "/", headers={"x-user": "fresh"})
    assert r.status == 200
    assert r.header("ratelimit") is not None
    wait_until(lambda: envoys[0].sluice_stat("sluice.site.allowed")
               + envoys[1].sluice_stat("sluice.site.allowed") == 7, what="site.allowed == 7")
    assert envoys[0].sluice_stat("sluice.limiter_errors") + envoys[1].sluice_stat("sluice.limiter_errors") == 0
