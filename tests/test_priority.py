"""Priority classes end to end: under saturation each class gets at most its
share of a limit, and critical traffic is never denied while the limit has
room."""

from __future__ import annotations

import pytest

from support import limiter_cluster, load_through, sluice_config
from support.load import start_load

QUOTA = 1_000
SHARES = {"critical": 100, "default": 80, "bulk": 50}


def priority_config(algorithm: str) -> dict:
    return sluice_config([{
        "name": "api", "key": ["const:all"],
        "priority": {"from": "header:x-priority", "default": "default",
                     "classes": [{"name": c, "share": s} for c, s in SHARES.items()]},
        # A year: no window boundary (windows are aligned to the clock) is
        # crossed while the test runs.
        "limits": [{"algorithm": algorithm, "requests": QUOTA, "window": "365d"}]}], headers="none")


def flood(url: str, cls: str, requests: int):
    return start_load(url, connections=4, requests=requests, rate=2_000,
                      headers={"x-priority": cls}, timeout=10)


@pytest.mark.parametrize("algorithm", ["fixed_window", "sliding_window", "sliding_log"])
def test_each_class_alone_takes_exactly_its_share(envoy, algorithm):
    # Bulk floods first and stops at half the quota; default then takes the
    # limit to 80%; critical takes the rest.
    e = envoy(priority_config(algorithm), concurrency=2)
    url = f"http://127.0.0.1:{e.port}/"
    got = {c: flood(url, c, QUOTA).wait(timeout=60).count(200) for c in ["bulk", "default", "critical"]}
    assert got == {"bulk": 500, "default": 300, "critical": 200}


@pytest.mark.parametrize("algorithm", ["fixed_window", "gcra", "sliding_window"])
def test_classes_at_once_never_exceed_their_shares(envoy, algorithm):
    # Three classes at once, each sending more than the whole quota, from
    # two workers: bulk never passes half the quota, bulk and default never
    # pass 80% of it, and critical is denied only once the limit is full.
    e = envoy(priority_config(algorithm), concurrency=2)
    url = f"http://127.0.0.1:{e.port}/"
    loads = {c: flood(url, c, QUOTA + 200) for c in SHARES}
    reports = {c: load.wait(timeout=60) for c, load in loads.items()}
    admitted = {c: r.count(200) for c, r in reports.items()}
    for c, r in reports.items():
        assert r.answered == r.sent == QUOTA + 200, (c, r.status)
        assert set(r.status) <= {200, 429}, (c, r.status)
    # GCRA refills 1,000 a year while the test runs: none.
    refill = 0
    assert QUOTA <= sum(admitted.values()) <= QUOTA + refill, admitted
    assert admitted["bulk"] <= QUOTA * SHARES["bulk"] // 100 + refill, admitted
    assert admitted["bulk"] + admitted["default"] <= QUOTA * SHARES["default"] // 100 + refill, admitted
    assert admitted["critical"] >= QUOTA * (100 - SHARES["default"]) // 100, admitted


# Global limits: two Envoys share one limit through the limiter (memory, or
# two limiters on one Redis); each class keeps the reserve of the classes
# above it in its checks.
GLOBAL_QUOTA = 300
GLOBAL_EXACT = {"failure_mode": "deny", "timeout": "5s"}


def global_priority_config(algorithm: str) -> dict:
    return sluice_config([{
        "name": "api", "key": ["const:all"],
        "priority": {"from": "header:x-priority", "default": "default",
                     "classes": [{"name": c, "share": s} for c, s in SHARES.items()]},
        "limits": [{"algorithm": algorithm, "requests": GLOBAL_QUOTA, "window": "365d", "scope": "global"}]}],
        headers="none", limiter={"cluster": "sluice_limiter", "authority": "sluice-limiter", **GLOBAL_EXACT})


def two_envoys(envoy, processes, store: str, algorithm: str):
    if store == "redis":
        redis = processes.redis()
        limiters = [processes.limiter(store=redis.url, extra_args=["--store-timeout-ms", "5000"])
                    for _ in range(2)]
    else:
        limiters = [processes.limiter()]
    clusters = [limiter_cluster("sluice_limiter", [lim.port for lim in limiters])]
    return [envoy(global_priority_config(algorithm), clusters=clusters) for _ in range(2)]


def assert_no_limiter_failures(envoys):
    assert sum(e.sluice_stat("sluice.limiter_errors") for e in envoys) == 0


@pytest.mark.parametrize("store", ["memory", "redis"])
def test_global_classes_alone_take_exactly_their_share(envoy, processes, store):
    envoys = two_envoys(envoy, processes, store, "sliding_window")
    got = {}
    for c in ["bulk", "default", "critical"]:
        counts = load_through(envoys, per_envoy=GLOBAL_QUOTA // 2 + 20, headers={"x-priority": c})
        got[c] = counts.get(200, 0)
    assert_no_limiter_failures(envoys)
    assert got == {"bulk": 150, "default": 90, "critical": 60}


@pytest.mark.parametrize("store,algorithm", [("memory", "gcra"), ("redis", "fixed_window")])
def test_global_classes_at_once_never_exceed_their_shares(envoy, processes, store, algorithm):
    envoys = two_envoys(envoy, processes, store, algorithm)
    loads = [(c, start_load(f"http://127.0.0.1:{e.port}/", connections=4, requests=GLOBAL_QUOTA,
                            rate=1_000, headers={"x-priority": c}, timeout=10))
             for c in SHARES for e in envoys]
    admitted = dict.fromkeys(SHARES, 0)
    for c, load in loads:
        report = load.wait(timeout=120)
        assert report.answered == report.sent == GLOBAL_QUOTA, (c, report.status)
        assert set(report.status) <= {200, 429}, (c, report.status)
        admitted[c] += report.count(200)
    assert_no_limiter_failures(envoys)
    # Nothing refills within the test: a 365-day window.
    assert sum(admitted.values()) == GLOBAL_QUOTA, admitted
    assert admitted["bulk"] <= GLOBAL_QUOTA * SHARES["bulk"] // 100, admitted
    assert admitted["bulk"] + admitted["default"] <= GLOBAL_QUOTA * SHARES["default"] // 100, admitted
    assert admitted["critical"] >= GLOBAL_QUOTA * (100 - SHARES["default"]) // 100, admitted
