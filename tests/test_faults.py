"""Faults under load: 2 Envoys sharing global limits through sluice-limiter,
`sluice-load` sending through both while a limiter is killed, Redis stops or
hangs, the configuration changes every second, or an Envoy hot-restarts.

Each scenario asserts: every request answered (none hanging past the
limiter timeout + a margin, none lost), statuses as `failure_mode` says,
recovery without restarting anything (measured from the Envoys' failure
counters), and no over-admission once the store is back (a fresh
accounting key admits exactly its allowance through both Envoys).
The figures each scenario measured are printed (`pytest -s`).
"""

from __future__ import annotations

import os
import time

import pytest

from soak.harness import (ACCOUNT_ALLOWANCE, LIMITER_TIMEOUT_S, LOAD_BIN, MARGIN_S, PACED_MAX_DELAY_S, FailureWatch,
                          Load, Stack, accounting_burst, bad_seconds, errors, last_non_200_s, summary,
                          wait_decided_by_limiter)
from support import request, wait_until

pytestmark = pytest.mark.skipif(not LOAD_BIN.exists(), reason=f"{LOAD_BIN} not built")

RATE = 400  # requests/s through both Envoys: what 2 shared cores carry beside the processes under test
RECOVERY_BOUND_S = 10.0
SOAK_RATE = 300  # the soak's traffic (`make soak`)
# enough connections to keep the rate while a fault holds each request for the store's timeout (~100 ms)
CONNECTIONS = 48


@pytest.fixture
def stack(tmp_path):
    started = []

    def start(**kwargs):
        s = Stack(tmp_path, **kwargs)
        started.append(s)
        return s

    yield start
    for s in started:
        s.stop()


class Run:
    """A load with a fault in the middle: what happened, and when (time.monotonic())."""

    def __init__(self, report, started, watch, fault_start, fault_end):
        self.report = report
        self.started = started
        self.watch = watch
        self.fault_start = fault_start
        self.fault_end = fault_end

    @property
    def recovery_s(self) -> float:
        return self.watch.recovery_s(self.fault_end)

    def rel(self, t: float) -> float:
        """`t` in seconds since the load began."""
        return t - self.started

    def figures(self, name: str) -> str:
        line = (f"[faults] {name}: {summary(self.report)}; limiter failures {self.watch.count()}; "
                f"fault {self.rel(self.fault_start):.1f}-{self.rel(self.fault_end):.1f}s; "
                f"recovery {self.recovery_s:.2f}s after the fault ended")
        print(line)
        return line


def under_fault(stack: Stack, inject, heal, *, before: float = 3.0, fault: float = 3.0, after: float = 7.0,
                duration: float | None = None, headers: list[str] | None = None, rate: float = RATE,
                interval: float = 1.0) -> Run:
    """Load through both Envoys for `duration` s (default: `before + fault + after`);
    `inject()` after `before` s, `heal()` `fault` s after it began (or once it returns)."""
    duration = duration or before + fault + after
    watch = FailureWatch(stack)
    load = Load(stack.urls(), duration=duration, rate=rate, connections=CONNECTIONS,
                headers=headers or {"x-user": "u{n}"}, distinct=1000, interval=interval)
    try:
        time.sleep(max(0.0, before - load.elapsed()))
        fault_start = time.monotonic()
        inject()
        time.sleep(max(0.0, fault_start + fault - time.monotonic()))
        fault_end = time.monotonic()
        heal()
        report = load.wait(timeout=duration + 60)
    finally:
        load.kill()
        watch.stop()
    return Run(report, load.started, watch, fault_start, fault_end)


def assert_answered_in_time(run: Run, allowed_statuses: set[int]):
    r = run.report
    assert r.sent == r.answered, run.figures("lost")
    assert r.timeouts == 0, run.figures("timeouts")
    assert errors(r) == 0, run.figures("errors")
    assert r.answered > RATE * 5, run.figures("too little load")
    assert set(r.status) <= allowed_statuses, run.figures("statuses")
    assert r.max_latency_s <= LIMITER_TIMEOUT_S + MARGIN_S, run.figures("latency")


def assert_recovered(run: Run, stack: Stack):
    assert run.recovery_s <= RECOVERY_BOUND_S, run.figures("recovery")
    wait_decided_by_limiter(stack)


def assert_no_over_admission(stack: Stack, key: str):
    """A fresh key admits exactly its allowance across both Envoys, once the store is back."""
    burst = accounting_burst(stack, key)
    assert burst.sent == burst.answered == 3 * ACCOUNT_ALLOWANCE, summary(burst)
    assert burst.status == {200: ACCOUNT_ALLOWANCE, 429: 2 * ACCOUNT_ALLOWANCE}, summary(burst)


# ---------------------------------------------------------------- a limiter dies

@pytest.mark.parametrize("failure_mode", ["allow", "deny"])
def test_limiter_killed_and_restarted_failure_mode_answers(stack, failure_mode):
    s = stack(limiters=1, failure_mode=failure_mode)
    limiter = s.limiters[0]
    run = under_fault(s, limiter.kill, limiter.start)
    run.figures(f"kill -9 the only limiter ({failure_mode})")
    assert_answered_in_time(run, {200} if failure_mode == "allow" else {200, 429})
    assert run.watch.count() > 0, "the fault did not reach the filter"
    if failure_mode == "deny":
        assert run.report.count(429) > 0
        # a denial only while the limiter was away
        assert last_non_200_s(run.report) <= run.rel(run.fault_end) + RECOVERY_BOUND_S
    assert_recovered(run, s)
    assert_no_over_admission(s, f"after-kill-{failure_mode}")


def test_limiter_killed_the_other_limiter_serves(stack):
    s = stack(limiters=2, redis=True, failure_mode="deny")
    victim = s.limiters[0]
    run = under_fault(s, victim.kill, victim.start, fault=5.0)
    run.figures("kill -9 one of two limiters (deny)")
    assert_answered_in_time(run, {200, 429})
    # Health checks and outlier detection take the dead limiter out within a
    # fraction of a second: from then on the other one decides everything.
    start, end = run.rel(run.fault_start), run.rel(run.fault_end)
    for bucket in run.report.timeline:
        if start + 1.5 <= bucket["t"] and bucket["t"] + 1 <= end:
            assert set(bucket["status"]) == {200} and bucket["timeouts"] == bucket["errors"] == 0, bucket
    assert_recovered(run, s)
    assert_no_over_admission(s, "after-kill-one-of-two")


def test_limiter_paused_the_filter_timeout_answers(stack):
    # SIGSTOP: the limiter's connections stay open and say nothing, so only the
    # filter's own timeout ends each call
    s = stack(limiters=1, failure_mode="allow")
    limiter = s.limiters[0]
    run = under_fault(s, limiter.pause, limiter.resume)
    run.figures("SIGSTOP the only limiter, SIGCONT (allow)")
    assert_answered_in_time(run, {200})
    assert run.watch.count() > 0, "the fault did not reach the filter"
    assert run.report.max_latency_s >= LIMITER_TIMEOUT_S * 0.9, "no request waited for the timeout"
    assert_recovered(run, s)
    assert_no_over_admission(s, "after-limiter-pause")


# ---------------------------------------------------------------- Redis stops or hangs

def test_redis_stopped_and_restarted(stack):
    s = stack(limiters=2, redis=True, failure_mode="allow")
    run = under_fault(s, s.redis.stop, s.redis.start)
    run.figures("Redis stopped, started again (allow)")
    assert_answered_in_time(run, {200})
    assert run.watch.count() > 0, "the fault did not reach the filter"
    assert_recovered(run, s)
    assert_no_over_admission(s, "after-redis-restart")


def test_redis_restarted_decided_again_within_a_fraction_of_a_second_under_the_soaks_load(stack):
    # deny: each request the limiter could not decide is a 429, so the
    # statuses in 50-ms buckets date the recovery (the Envoys' failure
    # counters are flushed every 0.5 s, too coarse for this)
    s = stack(limiters=2, redis=True, failure_mode="deny")
    answering = []

    def start_redis():
        s.redis.start()  # returns once it answers PING
        answering.append(time.monotonic())

    run = under_fault(s, s.redis.stop, start_redis, rate=SOAK_RATE, interval=0.05)
    assert_answered_in_time(run, {200, 429})
    bad = [b for b in run.report.timeline if set(b["status"]) - {200} or b["timeouts"] or b["errors"]]
    assert bad, run.figures("the fault did not reach the filter")
    # denied per failure mode while Redis was away, and only then
    # (a bucket's width, and the load's clock starting up to 0.2 s after
    # `run.started`)
    assert bad[0]["t"] >= run.rel(run.fault_start) - 0.05 - 0.2, bad[0]
    assert all(b["timeouts"] == b["errors"] == 0 for b in bad), bad
    recovered = run.started + bad[-1]["t"] + 0.05
    from_up, from_end = recovered - answering[0], recovered - run.fault_end
    run.figures(f"Redis stopped, started again (deny, {SOAK_RATE}/s): last 429 {from_up:.2f}s after Redis "
                f"answered again, {from_end:.2f}s after the fault ended; {run.report.count(429)} denied")
    # measured ~0.1 s after Redis answers; a generous bound
    assert from_up < 2.0
    assert_recovered(run, s)
    assert_no_over_admission(s, "after-redis-restart-deny")


def test_redis_paused_then_resumed(stack):
    s = stack(limiters=2, redis=True, failure_mode="deny")
    # half the allowance of one key spent before Redis hangs: after, only the other half
    before = accounting_burst(s, "across-pause", requests=ACCOUNT_ALLOWANCE // 2)
    assert before.status == {200: ACCOUNT_ALLOWANCE // 2}, summary(before)
    run = under_fault(s, s.redis.pause, s.redis.resume)
    run.figures("Redis SIGSTOP, SIGCONT (deny)")
    assert_answered_in_time(run, {200, 429})
    assert run.report.count(429) > 0, "the fault did not reach the filter"
    assert_recovered(run, s)
    after = accounting_burst(s, "across-pause")
    assert after.status == {200: ACCOUNT_ALLOWANCE - ACCOUNT_ALLOWANCE // 2,
                            429: 3 * ACCOUNT_ALLOWANCE - (ACCOUNT_ALLOWANCE - ACCOUNT_ALLOWANCE // 2)}, summary(after)
    assert_no_over_admission(s, "after-redis-pause")


# ---------------------------------------------------------------- configuration and Envoy restarts

# A push a second for this many seconds (the long variant: SLUICE_PUSH_SECONDS=300); the soak pushes too.
PUSH_SECONDS = int(os.environ.get("SLUICE_PUSH_SECONDS", "15"))
RSS_EVERY_S = 60.0


def probe(e, header: str, n: int) -> list[int]:
    """The statuses of `n` requests with `header` (one key), each on a new connection."""
    return [request(e.port, "/", headers={header: "probe"}).status for _ in range(n)]


def probes_against_the_docs(s: Stack, push: int) -> list[str]:
    """Spends the probe keys after push `push`; returns where a limit kept or
    started afresh other than the reference says (unchanged shape: kept; a
    new algorithm or window: afresh)."""
    afresh = push == 0 or push % 2 == 1
    fresh = [200, 429] if afresh else [429, 429]
    seen = {}
    for i, e in enumerate(s.envoys):
        seen[f"keep@envoy{i}"] = (probe(e, "x-keep", 2 if push == 0 else 1), [200, 429] if push == 0 else [429])
        seen[f"reset@envoy{i}"] = (probe(e, "x-reset", 2), fresh)
    # one store: one admitted through both Envoys
    seen["greset"] = ([probe(e, "x-greset", 1)[0] for e in s.envoys], fresh)
    return [f"push {push} {name}: {got} (expected {want})" for name, (got, want) in seen.items() if got != want]


def envoy_rss_mb(s: Stack) -> list[float]:
    return [round((e.process.rss_kb() or 0) / 1024, 1) for e in s.envoys]


@pytest.mark.timeout(PUSH_SECONDS + 240)
def test_configuration_pushed_every_second(stack):
    # Alternately a compatible push (a changed quota, an added or removed
    # rule: counters kept) and an incompatible one (a limit's algorithm or
    # window changed: that limit afresh). (Stack runs Envoy with
    # `--drain-strategy immediate`: with the gradual default, each push
    # resets a few keep-alive connections mid-request.)
    # Envoy's drain time (its default is 600 s) 5 s: a keep-alive connection
    # not answered within it (a held request, a machine stalling) is
    # closed when the replaced listener's drain ends.
    s = stack(limiters=1, failure_mode="deny", push=0, drain_time_s=5)
    assert probes_against_the_docs(s, 0) == []
    pushes, wrong = [], []
    rss = [(0.0, envoy_rss_mb(s))]
    # the accounting key is spent while the configuration changes under it
    acct = Load(s.urls(), duration=PUSH_SECONDS, rate=8, connections=2, headers={"x-acct": "during-pushes"})
    # requests held in delay mode while the configuration changes
    paced = Load(s.urls(), duration=PUSH_SECONDS, rate=24, connections=12, headers={"x-paced": "p"},
                 timeout=PACED_MAX_DELAY_S + MARGIN_S)

    def push_every_second():
        started = time.monotonic()
        for i in range(1, PUSH_SECONDS + 1):
            s.push(push=i, traffic_requests=1_000_000 - (i % 2), extra_rule=(i % 4 >= 2))
            pushes.append(time.monotonic())
            wrong.extend(probes_against_the_docs(s, i))
            if time.monotonic() - started >= RSS_EVERY_S * len(rss):
                rss.append((time.monotonic() - started, envoy_rss_mb(s)))
            time.sleep(max(0.0, started + i - time.monotonic()))

    run = under_fault(s, push_every_second, lambda: None, before=1.0, fault=0.0, duration=PUSH_SECONDS + 3.0)
    acct_report, paced_report = acct.wait(timeout=60), paced.wait(timeout=60)
    # nothing still held once the loads are done
    for e in s.envoys:
        wait_until(lambda e=e: e.stat("http.ingress.downstream_rq_active") == 0, what="no request left active")
    rss.append((pushes[-1] - run.fault_start, envoy_rss_mb(s)))
    run.figures(f"{len(pushes)} configuration pushes in {pushes[-1] - pushes[0]:.1f}s (deny)")
    print(f"[faults] accounting key during the pushes: {summary(acct_report)}")
    print(f"[faults] held requests during the pushes: {summary(paced_report)}")
    print(f"[faults] limits kept or afresh other than documented: {len(wrong)}; Envoy RSS (MB) by time (s): "
          + ", ".join(f"{t:.0f}: {mb}" for t, mb in rss))
    for name, report, expected in (("traffic", run.report, {200}), ("held", paced_report, {200, 429})):
        print(f"[faults] {name}: seconds with an answer not in {sorted(expected)}, a timeout or an error: "
              f"{bad_seconds(report, frozenset(expected)) or 'none'}")
    assert len(pushes) == PUSH_SECONDS
    assert wrong == []
    assert_answered_in_time(run, {200})
    assert run.watch.count() == 0
    assert acct_report.sent == acct_report.answered and acct_report.timeouts == 0
    assert acct_report.count(200) == ACCOUNT_ALLOWANCE, summary(acct_report)
    r = paced_report
    assert r.sent == r.answered and r.timeouts == 0 and errors(r) == 0, summary(r)
    assert set(r.status) <= {200, 429} and r.count(200) > 0, summary(r)
    assert r.max_latency_s <= PACED_MAX_DELAY_S + MARGIN_S, summary(r)
    for first, last in zip(rss[0][1], rss[-1][1]):
        assert last <= first * 1.25 + 16, rss
    # Back to the first shape: its state is still there (within its window).
    s.push(push=0)
    assert probes_against_the_docs(s, 2) == []
    assert_no_over_admission(s, "after-pushes")


@pytest.mark.parametrize("restart", ["hot", "cold"])
def test_envoy_restart_under_load_keeps_global_limits_exact(stack, restart):
    s = stack(limiters=1, failure_mode="deny")
    restarted = s.envoys[0]
    old = restarted.process
    # the accounting key is being spent (16/s, allowance 40) when the restart comes
    key = f"across-{restart}-restart"
    acct = Load(s.urls(), duration=5.0, rate=16, connections=2, headers={"x-acct": key})
    inject = restarted.hot_restart if restart == "hot" else restarted.cold_restart
    run = under_fault(s, inject, lambda: None, before=1.0, fault=0.0, after=6.0)
    acct_report = acct.wait(timeout=60)
    run.figures(f"{restart} restart of one Envoy (deny)")
    print(f"[faults] accounting key across the {restart} restart: {summary(acct_report)}")
    if restart == "hot":
        assert_answered_in_time(run, {200})
        assert restarted.epoch == 1 and restarted.server_info()["state"] == "LIVE"
        # the old epoch drained and exited by itself
        wait_until_exited(old)
        assert acct_report.sent == acct_report.answered and errors(acct_report) == 0, summary(acct_report)
        assert acct_report.count(200) == ACCOUNT_ALLOWANCE, summary(acct_report)
    else:
        # the killed Envoy's requests in flight are lost (io errors), the
        # others are answered; a lost one may have been counted by the limiter
        r = run.report
        assert r.timeouts == 0 and set(r.status) == {200}, run.figures("statuses")
        assert r.max_latency_s <= LIMITER_TIMEOUT_S + MARGIN_S, run.figures("latency")
        assert acct_report.timeouts == 0 and set(acct_report.status) <= {200, 429}, summary(acct_report)
        assert (ACCOUNT_ALLOWANCE - acct_report.io_errors <= acct_report.count(200) <= ACCOUNT_ALLOWANCE), \
            summary(acct_report)
    assert_no_over_admission(s, f"after-{restart}-restart")


def wait_until_exited(process, timeout: float = 30.0):
    deadline = time.monotonic() + timeout
    while process.alive():
        assert time.monotonic() < deadline, "the old Envoy epoch did not exit"
        time.sleep(0.1)
