"""Faults under load: the pieces `tests/test_faults.py` and `tests/soak/soak.py` share.

- `Stack`: Redis (optional), sluice-limiters and 2 Envoys sharing global
  limits, every process on loopback, Envoys hot-restartable.
- `Load`: `sluice-load` run in the background while faults happen, its JSON
  report read at the end.
- `FailureWatch`: polls the Envoys' limiter-failure counters, so recovery
  after a fault is measured even where `failure_mode: allow` hides it from
  the statuses.
- `accounting_burst`: a fresh key with a known allowance, hammered through
  both Envoys: the admitted count must not pass the allowance.
"""

from __future__ import annotations

import http.client
import threading
import time
from pathlib import Path

from support import (Envoy, Limiter, Redis, limiter_cluster, request, sluice_config, start_envoy, wait_until,
                     wasm_filter)
from support.load import LoadReport, start_load
from support.paths import LOAD_BIN
from soak.steady import GLOBAL_HEADER, LOCAL_HEADER, STEADY_QUOTA, STEADY_WINDOW_S


# The filter's wait for the limiter, and what a request may take beyond it.
LIMITER_TIMEOUT_S = 0.25
MARGIN_S = 1.0
# The accounting limit: a fresh key admits exactly this many, then ~1 per 15 min.
ACCOUNT_ALLOWANCE = 40


# ---------------------------------------------------------------- configuration

def rules(traffic_requests: int = 1_000_000, extra_rule: bool = False, flood: bool = False,
          steady: bool = False, push: int | None = None) -> list[dict]:
    """The rules under load.

    - `traffic` (requests with `x-user`): a global gcra per user, far above
      what the load sends, so a request decided by the limiter is admitted
      and one decided by `failure_mode: deny` is not.
    - `acct` (requests with `x-acct`): the accounting limit, one key per
      check, `ACCOUNT_ALLOWANCE` per 10 h (a refill every 15 min: none
      during a burst).
    - `flood` (requests with `x-flood`, one client per `x-forwarded-for`
      address): a local and a global per-client limit, so a key flood fills
      the Envoy's shared data and the store.
    - `steady-g`, `steady-l` (with `steady`; requests with `x-steady-g` or
      `x-steady-l`): the chaos soak's steady clients, a global limit of
      `STEADY_QUOTA` per hour per key and a local fixed window of
      `STEADY_QUOTA` per `STEADY_WINDOW_S` (`soak/steady.py`).
    - `extra` (config pushes add and remove it): a local per-user limit.
    - with `push` (the number of a configuration push, 0 first): the rules
      of `push_rules(push)`.
    """
    out = [
        {"name": "traffic", "match": {"headers": [{"name": "x-user", "present": True}]},
         "key": ["header:x-user"],
         "limits": [{"algorithm": "gcra", "requests": traffic_requests, "window": "1h", "scope": "global"}]},
        {"name": "acct", "match": {"headers": [{"name": "x-acct", "present": True}]},
         "key": ["header:x-acct"],
         "limits": [{"algorithm": "gcra", "requests": ACCOUNT_ALLOWANCE, "window": "10h", "scope": "global"}]},
    ]
    if steady:
        out.append({"name": "steady-g", "match": {"headers": [{"name": GLOBAL_HEADER, "present": True}]},
                    "key": [f"header:{GLOBAL_HEADER}"],
                    "limits": [{"algorithm": "gcra", "requests": STEADY_QUOTA, "window": "1h", "scope": "global"}]})
        out.append({"name": "steady-l", "match": {"headers": [{"name": LOCAL_HEADER, "present": True}]},
                    "key": [f"header:{LOCAL_HEADER}"],
                    "limits": [{"algorithm": "fixed_window", "requests": STEADY_QUOTA,
                                "window": f"{STEADY_WINDOW_S:.0f}s"}]})
    if flood:
        out.append({"name": "flood", "match": {"headers": [{"name": "x-flood", "present": True}]},
                    "key": ["client_ip"],
                    "limits": [{"algorithm": "fixed_window", "requests": 5, "window": "10s"},
                               {"algorithm": "fixed_window", "requests": 5, "window": "10s", "scope": "global"}]})
    if extra_rule:
        out.append({"name": "extra", "match": {"headers": [{"name": "x-user", "present": True}]},
                    "key": ["header:x-user"],
                    "limits": [{"algorithm": "token_bucket", "requests": 1_000_000, "window": "1h"}]})
    if push is not None:
        out += push_rules(push)
    return out


# Requests held in delay mode during configuration pushes: at most this long.
PACED_MAX_DELAY_S = 0.4


def reset_shape(push: int) -> tuple[str, str]:
    """The (algorithm, window) of the probes whose shape changes: a new one at
    each odd push, alternately a new algorithm alone and a new window too,
    never one seen before."""
    n = (push + 1) // 2
    return ("gcra", "token_bucket")[n % 2], f"{3600 + n // 2}s"


def push_rules(push: int) -> list[dict]:
    """The rules configuration pushes change, for push number `push`: even
    pushes (0 is the first configuration) make compatible changes only, odd
    ones change the shape of the `reset` and `greset` limits as well.

    - `keep` (`x-keep`): local gcra, 1 then 2 per hour in turn (burst 1):
      a change of `requests` keeps the state, so a spent key stays denied.
    - `reset` (`x-reset`) and `greset` (`x-greset`): 1 per window, local and
      global, of `reset_shape(push)`: a new algorithm or window starts afresh.
    - `paced` (`x-paced`): local gcra 10/s per Envoy in delay mode, held up to
      `PACED_MAX_DELAY_S`, unchanged.
    """
    def on(header: str) -> dict:
        return {"headers": [{"name": header, "present": True}]}

    algorithm, window = reset_shape(push)
    return [
        {"name": "keep", "match": on("x-keep"), "key": ["header:x-keep"],
         "limits": [{"algorithm": "gcra", "requests": 1 + push % 2, "window": "1h", "burst": 1}]},
        {"name": "reset", "match": on("x-reset"), "key": ["header:x-reset"],
         "limits": [{"algorithm": algorithm, "requests": 1, "window": window}]},
        {"name": "greset", "match": on("x-greset"), "key": ["header:x-greset"],
         "limits": [{"algorithm": algorithm, "requests": 1, "window": window, "scope": "global"}]},
        {"name": "paced", "match": on("x-paced"), "key": ["header:x-paced"],
         "limits": [{"algorithm": "gcra", "requests": 10, "window": "1s", "burst": 1, "on_exceed": "delay",
                     "max_delay": f"{int(PACED_MAX_DELAY_S * 1000)}ms"}]},
    ]


def filter_config(failure_mode: str = "allow", timeout_s: float = LIMITER_TIMEOUT_S, local_max_keys: int = 10_000,
                  **rule_args) -> dict:
    """The Sluice configuration both Envoys run (`rules(**rule_args)`)."""
    return sluice_config(
        rules(**rule_args), domain="faults", headers=None,
        limiter={"cluster": "sluice_limiter", "authority": "sluice-limiter",
                 "timeout": f"{int(timeout_s * 1000)}ms", "failure_mode": failure_mode},
        # the flood sends its clients in x-forwarded-for, written by one trusted proxy
        client_ip={"xff_trusted_hops": 1},
        local_max_keys=local_max_keys)


def checked_limiter_cluster(ports: list[int]) -> dict:
    """The limiter cluster with what lets one limiter stand in for another:
    active health checks and outlier detection take a dead limiter out of the
    rotation within a fraction of a second."""
    cluster = limiter_cluster("sluice_limiter", ports)
    cluster["health_checks"] = [{
        "timeout": "0.2s", "interval": "0.25s", "no_traffic_interval": "0.25s",
        "unhealthy_threshold": 1, "healthy_threshold": 1,
        "http_health_check": {"path": "/livez", "codec_client_type": "HTTP2"},
    }]
    # Eject a limiter that refuses connections, not one that answers 503: a
    # store outage is every limiter's, and ejecting them all would outlast it.
    cluster["outlier_detection"] = {
        "split_external_local_origin_errors": True, "consecutive_local_origin_failure": 1,
        "enforcing_consecutive_local_origin_failure": 100, "enforcing_consecutive_5xx": 0,
        "enforcing_consecutive_gateway_failure": 0, "enforcing_success_rate": 0,
        "interval": "0.25s", "base_ejection_time": "1s", "max_ejection_time": "2s", "max_ejection_percent": 50,
    }
    return cluster


# ---------------------------------------------------------------- the stack

class Stack:
    """Redis (with `redis=True`), `limiters` sluice-limiters (on Redis when
    there is one, else the memory store) and 2 hot-restartable Envoys."""

    def __init__(self, workdir: Path, limiters: int = 1, redis: bool = False, failure_mode: str = "allow",
                 envoys: int = 2, limiter_args: list[str] | None = None, envoy_args: list[str] | None = None,
                 drain_time_s: int = 1, **config_args):
        self.workdir = workdir
        self.redis: Redis | None = None
        self.limiters: list[Limiter] = []
        self.envoys: list[Envoy] = []
        self.failure_mode = failure_mode
        self.config_args = config_args
        if envoy_args is None:
            # An LDS push drains the old listener's connections; the default
            # gradual drain closes some keep-alive connections while a request
            # is on its way (a reset per push or so). Immediate: every
            # connection is told `connection: close` on its next response.
            envoy_args = ["--drain-strategy", "immediate"]
        try:
            if redis:
                self.redis = Redis(workdir)
            store = self.redis.url if self.redis else "memory"
            for _ in range(limiters):
                self.limiters.append(Limiter(workdir, store=store, extra_args=limiter_args or []))
            cluster = checked_limiter_cluster([lim.port for lim in self.limiters])
            cfg = self.config()
            for i in range(envoys):
                self.envoys.append(start_envoy(workdir, [wasm_filter(cfg)], clusters=[cluster], hot_restart=True,
                                               component_log_level=None, log_level="warning", name=f"envoy{i}",
                                               drain_time_s=drain_time_s, extra_args=envoy_args))
        except BaseException:
            self.stop()
            raise

    def config(self, **overrides) -> dict:
        return filter_config(self.failure_mode, **{**self.config_args, **overrides})

    def urls(self, path: str = "/") -> list[str]:
        return [f"http://127.0.0.1:{e.port}{path}" for e in self.envoys]

    def push(self, **overrides) -> None:
        """A new filter configuration on every Envoy; fails if one refuses it."""
        cfg = self.config(**overrides)
        for e in self.envoys:
            assert e.push_config(cfg), f"envoy refused {cfg}"

    def failures(self) -> int:
        """Limiter failures the Envoys counted (allowed or denied by `failure_mode`)."""
        total = 0
        for e in self.envoys:
            body = request(e.admin_port, "/stats?filter=sluice%5C.(failure_mode_allowed%7Climiter_errors)%24",
                           timeout=2).body.decode()
            for line in body.splitlines():
                total += int(line.rpartition(": ")[2])
        return total

    def processes(self) -> dict[str, list[int]]:
        """Name -> live pids (an Envoy's draining old epoch too)."""
        out = {f"envoy{i}": e.pids() for i, e in enumerate(self.envoys)}
        for i, lim in enumerate(self.limiters):
            out[f"limiter{i}"] = [lim.process.pid] if lim.process and lim.process.alive() else []
        if self.redis and self.redis.process and self.redis.process.alive():
            out["redis"] = [self.redis.process.pid]
        return out

    def stop(self):
        for e in self.envoys:
            e.stop()
        for lim in self.limiters:
            lim.resume()  # a paused process would not take SIGTERM
            lim.stop()
        if self.redis:
            self.redis.resume()  # a paused server would not take SIGTERM
            self.redis.stop()


# ---------------------------------------------------------------- load

def summary(report: LoadReport) -> str:
    """One line of a load's figures."""
    lat = report.latency_us
    return (f"sent {report.sent} answered {report.answered} status {report.status} timeouts {report.timeouts} "
            f"errors connect {report.connect_errors} io {report.io_errors} rate {report.rate:.0f}/s "
            f"latency p50 {lat['p50']}us p99 {lat['p99']}us max {lat['max']}us")


def errors(report: LoadReport) -> int:
    return report.connect_errors + report.io_errors


class Load:
    """`sluice-load` in the background (`support.load.start_load`), with when
    it began (time.monotonic(), the origin of its timeline); `wait()` gives its
    report. The per-request deadline defaults to the limiter timeout + the margin."""

    def __init__(self, urls: list[str], timeout: float = LIMITER_TIMEOUT_S + MARGIN_S, **kwargs):
        if not LOAD_BIN.exists():
            raise FileNotFoundError(f"{LOAD_BIN} is missing: make load")
        self.started = time.monotonic()
        self.running = start_load(urls, timeout=timeout, **kwargs)

    def elapsed(self) -> float:
        return time.monotonic() - self.started

    def wait(self, timeout: float | None = None) -> LoadReport:
        return self.running.wait(timeout=timeout)

    def kill(self):
        self.running.stop()


# ---------------------------------------------------------------- measuring

class FailureWatch:
    """Samples `Stack.failures()` every `interval` s on a thread, as
    (time.monotonic(), count), to date the last limiter failure."""

    def __init__(self, stack: Stack, interval: float = 0.1, count=None):
        self.stack = stack
        self.interval = interval
        self.count_now = count or stack.failures
        self.samples: list[tuple[float, int]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self):
        while not self._stop.is_set():
            try:
                self.samples.append((time.monotonic(), self.count_now()))
            except (OSError, ValueError, http.client.HTTPException):
                pass  # an Envoy between epochs: the next sample will do
            self._stop.wait(self.interval)

    def stop(self):
        self._stop.set()
        self._thread.join()

    def count(self) -> int:
        """Failures seen: the sum of the rises (a hot-restarted Envoy may start its counters afresh)."""
        return rises(self.samples)

    def last_failure(self) -> float | None:
        """When the count last rose (the sample that saw it), or None if it never did."""
        last = None
        for (_, before), (t, after) in zip(self.samples, self.samples[1:]):
            if after > before:
                last = t
        return last

    def recovery_s(self, fault_end: float) -> float:
        """Seconds from `fault_end` until the last failure was seen (0 if none came after it)."""
        last = self.last_failure()
        return max(0.0, last - fault_end) if last is not None else 0.0


def rises(samples: list[tuple[float, int]]) -> int:
    """The sum of the increases between consecutive samples."""
    return sum(max(0, b - a) for (_, a), (_, b) in zip(samples, samples[1:]))


def bad_seconds(report: LoadReport, expected: frozenset[int] = frozenset({200})) -> list[str]:
    """The timeline buckets with an answer not in `expected`, a timeout or an
    error, each with its slowest answer: "t=12s {429: 3} errors 1 max 894 ms"."""
    out = []
    for b in report.timeline:
        other = {s: n for s, n in b["status"].items() if s not in expected}
        if other or b["timeouts"] or b["errors"]:
            out.append(f"t={b['t']:.0f}s {other} timeouts {b['timeouts']} errors {b['errors']} "
                       f"max {b['max_us'] / 1000:.0f} ms")
    return out


def last_non_200_s(report: LoadReport) -> float | None:
    """Start of the last timeline bucket (s since the load began) that had any
    answer other than 200, a timeout or an error; None if there is none."""
    last = None
    for bucket in report.timeline:
        bad = sum(n for s, n in bucket["status"].items() if s != 200) + bucket["timeouts"] + bucket["errors"]
        if bad:
            last = bucket["t"]
    return last


def accounting_burst(stack: Stack, key: str, requests: int = 3 * ACCOUNT_ALLOWANCE) -> LoadReport:
    """`requests` on one fresh accounting key through both Envoys at once."""
    return Load(stack.urls(), requests=requests, connections=8, headers={"x-acct": key}).wait(timeout=60)


def wait_decided_by_limiter(stack: Stack, timeout: float = 30.0) -> None:
    """Until a request through each Envoy is decided by the limiter (its failure count stays put)."""
    def decided():
        before = stack.failures()
        for e in stack.envoys:
            Load([f"http://127.0.0.1:{e.port}/"], requests=5, connections=1,
                 headers={"x-user": "probe"}).wait(timeout=10)
        return stack.failures() == before
    wait_until(decided, timeout=timeout, what="requests decided by the limiter again", interval=0.2)


def write_section(path: Path, name: str, text: str) -> None:
    """Puts `text` in `path` between `<!-- begin NAME -->` and `<!-- end NAME -->`,
    in place of what was there, or at the end; the rest of the file stays."""
    begin, end = f"<!-- begin {name} -->", f"<!-- end {name} -->"
    block = f"{begin}\n{text.rstrip()}\n{end}\n"
    old = path.read_text() if path.exists() else ""
    if begin in old and end in old:
        head, _, rest = old.partition(begin)
        _, _, tail = rest.partition(end)
        new = head + block + ("\n" + tail.lstrip("\n") if tail.strip() else "")
    else:
        new = (old.rstrip() + "\n\n" if old.strip() else "") + block
    path.write_text(new)


STORE_ERRORS = "sluice_limiter_store_errors_total"


def store_errors(stack: Stack) -> int:
    """Store errors the live limiters counted (a restarted limiter starts from 0: `rises` sums the increases)."""
    return int(sum(lim.metric(STORE_ERRORS) for lim in stack.limiters if lim.process and lim.process.alive()))


def last_rise_in(samples: list[tuple[float, int]], since: float, until: float, healed: float) -> float:
    """s from `healed` to the last rise of the count from `since` to `until` (0 if none came after it)."""
    window = [(t, c) for t, c in samples if since <= t < until]
    last = None
    for (_, before), (t, after) in zip(window, window[1:]):
        if after > before:
            last = t
    return max(0.0, last - healed) if last is not None else 0.0
