"""The soak's verdict, from made-up figures (no processes): each check fails on what it guards against."""

from types import SimpleNamespace

import pytest

from soak.harness import ACCOUNT_ALLOWANCE
from soak.soak import Soak
from support.load import LoadReport


def report(sent=1000, answered=1000, timeouts=0, io_errors=0, max_us=50_000) -> LoadReport:
    return LoadReport(sent=sent, answered=answered, status={200: answered}, timeouts=timeouts, connect_errors=0,
                      io_errors=io_errors, elapsed_s=10.0, rate=100.0,
                      latency_us={"p50": 500, "p99": 9000, "p999": 20000, "max": max_us},
                      timeline=[{"t": 0.0, "answered": answered, "status": {200: answered}, "timeouts": timeouts,
                                 "errors": io_errors, "max_us": max_us}])


def soak(tmp_path, **change) -> Soak:
    s = Soak(seconds=600, rate=100, flood_rate=100, workdir=tmp_path, results=tmp_path / "RESULTS.md")
    s.t0 = 0.0
    s.commit = ("abc1234", False)
    s.cycles = 1
    s.traffic = report()
    s.floods = [report()]
    s.bursts = [{"key": "k", "t": 50.0, "sent": 120, "answered": 120, "admitted": ACCOUNT_ALLOWANCE,
                 "timeouts": 0, "errors": 0}]
    s.faults = [{"what": "kill", "start": 30.0, "end": 33.0}]
    # failures while the fault lasts and 1 s after it
    s.watch = SimpleNamespace(samples=[(29.0, 0), (31.0, 10), (34.0, 20), (40.0, 20)])
    s.first_flood_end = 20.0
    s.sampler = SimpleNamespace(rows=[
        {"t": 0.0, "envoy0": 100_000, "envoy1": 100_000, "limiter0": 7_000, "limiter1": 7_000, "redis": 1_000,
         "redis_keys": 0},
        {"t": 21.0, "envoy0": 104_000, "envoy1": 104_000, "limiter0": 7_200, "limiter1": 7_200, "redis": 1_100,
         "redis_keys": 10},
        {"t": 600.0, "envoy0": 106_000, "envoy1": 50_000, "limiter0": 8_000, "limiter1": 7_000, "redis": 1_100,
         "redis_keys": 10},
    ])
    for name, value in change.items():
        setattr(s, name, value)
    return s


def failed(s: Soak) -> list[str]:
    return [name for name, ok, _ in s.checks() if not ok]


def test_a_clean_run_passes_and_writes_its_figures(tmp_path):
    s = soak(tmp_path)
    assert failed(s) == []
    assert s.report() == 0
    text = (tmp_path / "RESULTS.md").read_text()
    assert "verdict: **PASS**" in text and "`abc1234`" in text
    assert "| envoy0 | 97.7 | 101.6 | 103.5 | 103.5 | flat |" in text
    assert [r["recovery_s"] for r in s.recoveries()] == [1.0]


@pytest.mark.parametrize("change,check", [
    ({"traffic": report(sent=1000, answered=999, io_errors=1)}, "every traffic request answered"),
    ({"traffic": report(sent=1000, answered=999, timeouts=1)}, "no traffic request past the timeout"),
    ({"traffic": report(max_us=1_300_000)}, "worst latency"),
    ({"floods": [report(sent=10, answered=9, timeouts=1)]}, "every flood request answered"),
    ({"bursts": [{"key": "k", "t": 50.0, "sent": 120, "answered": 120, "admitted": ACCOUNT_ALLOWANCE + 1,
                  "timeouts": 0, "errors": 0}]}, "no over-admission"),
    ({"bursts": []}, "no over-admission"),
    ({"watch": SimpleNamespace(samples=[(29.0, 0), (31.0, 10), (45.0, 11)])}, "recovery after every fault"),
])
def test_each_check_fails_on_what_it_guards(tmp_path, change, check):
    s = soak(tmp_path, **change)
    assert [name for name in failed(s) if name.startswith(check)], failed(s)
    assert s.report() == 1
    assert "verdict: **FAIL**" in (tmp_path / "RESULTS.md").read_text()


def test_memory_growing_past_the_margin_fails_only_for_processes_never_restarted(tmp_path):
    s = soak(tmp_path)
    s.sampler.rows[-1]["limiter0"] = 7_200 * 1.25 + 16 * 1024 + 1
    assert failed(s) == ["memory flat (envoy0, limiter0: never restarted)"]
    s = soak(tmp_path)
    s.sampler.rows[-1]["limiter1"] = 200_000  # restarted every cycle: reported, not judged
    assert failed(s) == []
