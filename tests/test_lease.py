"""Leases: an Envoy spends slices of a global limit's quota the limiter debited in advance, within the stated bound."""

import json

import pytest

from support import ALGORITHMS, limiter_cluster, load_through, request, run_all, sluice_config, wait_until

YEAR = "365d"


def leased_rule(algorithm, requests, max_share, ttl="10s"):
    return {"name": "hot", "key": ["const:k"],
            "limits": [{"algorithm": algorithm, "requests": requests, "window": YEAR, "scope": "global",
                        "sync": {"mode": "lease", "max_share": max_share, "ttl": ttl}}]}


def global_config(rules, failure_mode="deny"):
    return sluice_config(rules, limiter={"cluster": "sluice_limiter", "authority": "sluice-limiter",
                                         "timeout": "5s", "failure_mode": failure_mode})


def limiter_units(limiters):
    """(checks admitted, units leased, units returned) over the limiters."""
    allowed = sum(lim.metric('sluice_limiter_decisions_total{domain="test",result="allowed"}')
                  for lim in limiters)
    leased = sum(lim.metric("sluice_limiter_leased_units_total") for lim in limiters)
    returned = sum(lim.metric("sluice_limiter_returned_units_total") for lim in limiters)
    return allowed, leased, returned


@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_leases_admit_within_the_bound_with_few_calls(envoy, processes, algorithm):
    redis = processes.redis()
    limiters = [processes.limiter(store=redis.url, extra_args=["--store-timeout-ms", "5000"]) for _ in range(2)]
    cluster = [limiter_cluster("sluice_limiter", [lim.port for lim in limiters])]
    # 10% of 200: each Envoy holds at most 20 units of the key
    envoys = [envoy(global_config([leased_rule(algorithm, 200, "10%")]), clusters=cluster) for _ in range(2)]
    counts = load_through(envoys, per_envoy=300, connections=32)
    admitted = counts.get(200, 0)
    assert set(counts) <= {200, 429} and sum(counts.values()) == 600, counts
    assert sum(e.sluice_stat("sluice.limiter_errors") for e in envoys) == 0
    checks, leased, returned = limiter_units(limiters)
    spent_from_leases = admitted - checks
    unspent = leased - returned - spent_from_leases
    # the limiter never counted more than the limit; what it counted was
    # admitted or is still held unspent, at most each Envoy's share
    assert checks + leased - returned <= 200
    assert 0 <= unspent <= 2 * 20, (admitted, checks, leased, returned)
    assert admitted <= 200 and admitted >= 200 - unspent - 1, (admitted, checks, leased, returned)
    assert spent_from_leases > 0, (admitted, checks)


def test_a_hot_key_is_served_mostly_without_calls(envoy, processes):
    limiter = processes.limiter()
    cluster = [limiter_cluster("sluice_limiter", [limiter.port])]
    e = envoy(global_config([leased_rule("gcra", 100_000, "1%")]), clusters=cluster)
    assert load_through([e], per_envoy=3000, connections=16) == {200: 3000}
    calls = limiter.metric("sluice_limiter_checks_total")
    # grants double up to 1,000 units and are renewed before they run out
    assert calls < 3000 / 10, calls


def renewals_settled(e, limiter, admitted):
    """Waits until the Envoy's counts show its `admitted` requests (so every
    renewal they started is counted) and the limiter decided every renewal."""
    wait_until(lambda: e.sluice_stat("sluice.hot.allowed") == admitted
               and e.sluice_stat("sluice.lease_renewals")
               == limiter.metric("sluice_limiter_lease_renewals_total"),
               what="renewals started == renewals decided")


def test_a_lease_in_hand_serves_through_a_limiter_outage(envoy, processes):
    limiter = processes.limiter()
    cluster = [limiter_cluster("sluice_limiter", [limiter.port])]
    # A ttl no loaded machine outlasts: the units in hand stay valid.
    e = envoy(global_config([leased_rule("fixed_window", 1000, "50%", ttl="120s")]), clusters=cluster)
    # one connection: grants double as each runs low (1, 2, 4, ...)
    assert [request(e.port, "/").status for _ in range(20)] == [200] * 20
    renewals_settled(e, limiter, 20)
    assert e.sluice_stat("sluice.lease_renewals") > 0
    checks, leased, returned = limiter_units([limiter])
    held = int(checks + leased - returned) - 20
    limiter.stop()
    statuses = [request(e.port, "/").status for _ in range(60)]
    # every unit in hand is spent (renewals fail, no request waits for
    # them), then failure_mode: deny applies
    assert held >= 4 and statuses == [200] * held + [429] * (60 - held), (held, statuses)


def test_a_renewal_is_no_requests_call(envoy, processes):
    limiter = processes.limiter()
    cluster = [limiter_cluster("sluice_limiter", [limiter.port])]
    e = envoy(global_config([leased_rule("fixed_window", 1000, "10%")]), clusters=cluster)
    assert load_through([e], per_envoy=500, connections=4) == {200: 500}
    renewals_settled(e, limiter, 500)
    renewals = limiter.metric("sluice_limiter_lease_renewals_total")
    checks = limiter.metric('sluice_limiter_decisions_total{domain="test",result="allowed"}')
    leased = limiter.metric("sluice_limiter_leased_units_total")
    returned = limiter.metric("sluice_limiter_returned_units_total")
    # renewals admit no request: the requests the limiter admitted, and the
    # units it leased, are every request, less what the Envoy still holds
    assert renewals > 0 and checks < 500 / 5, (renewals, checks)
    held = checks + leased - returned - 500
    assert 0 <= held <= 100, (checks, leased, returned)


def test_several_hot_keys_renewed_together_count_one_renewal_per_call(envoy, processes):
    limiter = processes.limiter()
    cluster = [limiter_cluster("sluice_limiter", [limiter.port])]
    rule = {**leased_rule("fixed_window", 1000, "10%"), "key": ["header:x-user"]}
    e = envoy(global_config([rule]), clusters=cluster)
    users = ["a", "b", "c", "d"]
    counts = [{} for _ in users]

    def one(i):
        counts[i] = load_through([e], per_envoy=250, connections=8, headers={"x-user": users[i]})

    run_all([lambda i=i: one(i) for i in range(len(users))])
    assert counts == [{200: 250}] * len(users), counts
    # a worker renews the keys running low in one call: the Envoy and the
    # limiter count the same calls
    renewals_settled(e, limiter, 1000)
    checks, leased, returned = limiter_units([limiter])
    assert checks < 1000 / 5, checks
    held = checks + leased - returned - 1000
    assert 0 <= held <= len(users) * 100, (checks, leased, returned)


def test_a_leased_request_reports_the_limiters_remaining_plus_what_is_held(envoy, processes):
    limiter = processes.limiter()
    cluster = [limiter_cluster("sluice_limiter", [limiter.port])]
    e = envoy(global_config([leased_rule("fixed_window", 100, "50%")]), clusters=cluster)
    remaining = []
    for i in range(10):
        remaining.append(int(request(e.port, "/").header("x-ratelimit-remaining")))
        # a request checked alone while a renewal is in flight reports the
        # limiter's remaining without the units on their way: let each settle
        renewals_settled(e, limiter, i + 1)
    # every request counts one unit off what the key has left, limiter and lease together
    assert remaining == list(range(99, 89, -1)), remaining


BAD = {
    "lease without max_share": ({"mode": "lease"}, "rules[0].limits[0].sync.max_share"),
    "share below one unit": ({"mode": "lease", "max_share": "0.5%"}, "rules[0].limits[0].sync.max_share"),
    "share not a percentage": ({"mode": "lease", "max_share": "0.1"}, "rules[0].limits[0].sync.max_share"),
    "ttl with coalesce": ({"mode": "coalesce", "ttl": "1s"}, "rules[0].limits[0].sync"),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_bad_lease_configuration_is_refused_with_the_field_named(envoy, case):
    sync, field = BAD[case]
    good = {"name": "ok", "key": ["const:k"], "limits": [{"algorithm": "gcra", "requests": 1, "window": "1h"}]}
    e = envoy(sluice_config([good]))
    rule = leased_rule("gcra", 100, "1%")
    rule["limits"][0]["sync"] = sync
    assert not e.push_config(json.dumps(global_config([rule])))
    lines = [line for line in e.log().splitlines() if "sluice: invalid configuration" in line]
    assert lines and f"{field}:" in lines[-1], lines


def test_a_leased_limit_in_a_shadow_rule_is_refused(envoy):
    good = {"name": "ok", "key": ["const:k"], "limits": [{"algorithm": "gcra", "requests": 1, "window": "1h"}]}
    e = envoy(sluice_config([good]))
    rule = dict(leased_rule("gcra", 100, "1%"), mode="shadow")
    assert not e.push_config(json.dumps(global_config([rule])))
    lines = [line for line in e.log().splitlines() if "sluice: invalid configuration" in line]
    assert lines and "rules[0].limits[0].sync.mode:" in lines[-1], lines
