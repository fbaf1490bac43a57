#!/usr/bin/env python3
"""`make soak-long`: the chaos soak, 30 minutes of faults under traffic while
a steady set of clients must get exactly their quota in every window.

2 Envoys, 2 sluice-limiters, one Redis, `failure_mode: allow`. For the whole
run: normal traffic through both Envoys (`sluice-load`, one run per minute,
so each minute has its own latency figures) and the steady clients of
`soak/steady.py` (4 global, 4 local; quota 10 and 25 requests in each
10-s window: a global client on a fresh key per window, a local client on
one key against a fixed window aligned to the epoch). A 3-minute cycle of chaos repeats:

    0:05  a key flood (a fresh client address per request), 20 s
    0:40  kill -9 limiter1, restart it 3 s later
    1:10  configuration pushes every second for 15 s, a key flood at once
    1:50  Redis stopped, started 3 s later
    2:20  a key flood, Redis stopped 5 s into it and started 3 s later

Every minute: RSS of each Envoy, limiter and Redis (and Redis's
used_memory), the traffic's p50/p99 latency, the steady windows judged.
Checks: every request answered in time; every local window exact (the
local limits never depend on the limiter); every global window exact unless
it overlaps a fault reaching the store (a limiter killed, Redis restarted:
`failure_mode: allow` admits, a restarted Redis has lost its keys) or the
2 s after it; recovery after every Redis restart; flat memory for envoy0 and
limiter0 (never restarted). Writes its section of tests/soak/RESULTS.md,
tests/soak/chaos.json (the figures per minute) and tests/soak/chaos.svg
(`soak/chart.py`). Exit status 1 when a check fails.

    SOAK_SECONDS=1800 .venv/bin/python tests/soak/chaos.py   (make soak-long; SOAK_SECONDS=180 for one cycle)
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import threading
import time
from pathlib import Path

if __name__ == "__main__":
    sys.path[0] = str(Path(__file__).resolve().parents[1])

from soak.harness import (LIMITER_TIMEOUT_S, MARGIN_S, FailureWatch, Load, Stack, errors,  # noqa: E402
                          last_rise_in, store_errors, summary, write_section)
from soak.soak import FLAT_ABS_KB, FLAT_RATIO, Sampler, git_commit, log  # noqa: E402
from soak.steady import STEADY_QUOTA, STEADY_WINDOW_S, SteadyClients, disturbed  # noqa: E402

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "RESULTS.md"
FIGURES = HERE / "chaos.json"
CHART = HERE / "chaos.svg"
CYCLE_S = 180.0
RECOVERY_BOUND_S = 10.0
# a global window overlapping a fault that reaches the store, or this long after it, is not judged
DISTURBED_MARGIN_S = 2.0


class Chaos:
    def __init__(self, seconds: float, rate: float, flood_rate: float, workdir: Path, results: Path = RESULTS,
                 figures: Path = FIGURES, chart: Path = CHART):
        self.seconds = seconds
        self.rate = rate
        self.flood_rate = flood_rate
        self.workdir = workdir
        self.results = results
        self.figures_path = figures
        self.chart = chart
        self.cycle = CYCLE_S if seconds >= CYCLE_S else seconds
        self.scale = self.cycle / CYCLE_S
        self.faults: list[dict] = []  # {"what", "start", "end", "store", "redis"} in s since t0
        self.floods: list = []
        self.minutes: list[tuple[float, object]] = []  # (start s, LoadReport) per minute of traffic
        self.pushes = 0

    def now(self) -> float:
        return time.monotonic() - self.t0

    def at(self, cycle_start: float, offset: float) -> bool:
        target = cycle_start + offset * self.scale
        if target >= self.seconds - 5:
            return False
        time.sleep(max(0.0, target - self.now()))
        return True

    # ------------------------------------------------------------ the schedule

    def flood(self, seconds: float) -> Load:
        n = len(self.floods) + len(self.faults)
        return Load(self.stack.urls(), duration=seconds, rate=self.flood_rate, connections=8,
                    headers={"x-flood": "1", "x-forwarded-for": "{ip}"}, distinct=1_000_000, first=n * 1_000_000,
                    timeout=LIMITER_TIMEOUT_S + MARGIN_S)

    def finish_flood(self, load: Load, seconds: float):
        report = load.wait(timeout=seconds + 60)
        self.floods.append(report)
        log(f"flood: {summary(report)}")

    def fault(self, what: str, inject, heal, hold: float, store: bool, redis: bool = False):
        start = self.now()
        inject()
        time.sleep(max(0.0, hold))
        end = self.now()
        heal()
        self.faults.append({"what": what, "start": start, "end": end, "store": store, "redis": redis,
                            "healed": self.now()})
        log(f"{what}: {start:.1f}-{end:.1f}s")

    def pushes_for(self, seconds: int):
        start = self.now()
        for i in range(seconds):
            self.stack.push(traffic_requests=1_000_000 - (i % 2), extra_rule=(i % 4 >= 2), flood=True, steady=True)
            self.pushes += 1
            time.sleep(max(0.0, self.t0 + start + i + 1 - time.monotonic()))
        self.faults.append({"what": f"{seconds} configuration pushes, one a second, under a key flood",
                            "start": start, "end": self.now(), "store": False, "redis": False})

    def run_cycle(self, start: float):
        s = self.stack
        flood_s = max(3.0, 20 * self.scale)
        if not self.at(start, 5):
            return
        f = self.flood(flood_s)
        self.faults.append({"what": f"key flood {self.flood_rate:.0f}/s", "start": self.now(),
                            "end": self.now() + flood_s, "store": False, "redis": False})
        self.finish_flood(f, flood_s)
        if not self.at(start, 40):
            return
        victim = s.limiters[-1]
        self.fault("kill -9 limiter1, restart", victim.kill, victim.start, 3, store=True)
        if not self.at(start, 70):
            return
        pushes = max(3, int(15 * self.scale))
        f = self.flood(pushes)
        self.pushes_for(pushes)
        self.finish_flood(f, pushes)
        if not self.at(start, 110):
            return
        self.fault("stop Redis, start it", s.redis.stop, s.redis.start, 3, store=True, redis=True)
        if not self.at(start, 140):
            return
        f = self.flood(flood_s)
        time.sleep(min(5.0, flood_s / 4))
        self.fault("stop Redis under a key flood, start it", s.redis.stop, s.redis.start, 3, store=True, redis=True)
        self.finish_flood(f, flood_s)

    def traffic(self, stop: threading.Event):
        """Normal traffic, one `sluice-load` run per minute, until the end."""
        while not stop.is_set():
            begin = self.now()
            left = self.seconds - begin
            if left < 5:
                return
            d = min(60.0, left)
            load = Load(self.stack.urls(), duration=d, rate=self.rate, connections=48,
                        headers={"x-user": "u{n}"}, distinct=1000, interval=5)
            self.current_traffic = load
            self.minutes.append((begin, load.wait(timeout=d + 60)))

    def run(self) -> int:
        self.commit = git_commit()
        log(f"{self.seconds:.0f}s chaos: traffic {self.rate:.0f}/s, floods {self.flood_rate:.0f}/s, "
            f"a {self.cycle:.0f}s cycle; steady clients 4 global + 4 local, {STEADY_QUOTA} per "
            f"{STEADY_WINDOW_S:.0f}s window")
        self.stack = Stack(self.workdir, limiters=2, redis=True, failure_mode="allow", flood=True, steady=True,
                           local_max_keys=10_000)
        stop = threading.Event()
        try:
            self.t0 = time.monotonic()
            self.sampler = Sampler(self.stack, self.t0, interval=5.0)
            self.watch = FailureWatch(self.stack, interval=0.1)
            self.store_watch = FailureWatch(self.stack, interval=0.1, count=lambda: store_errors(self.stack))
            self.steady = SteadyClients([e.port for e in self.stack.envoys])
            traffic = threading.Thread(target=self.traffic, args=(stop,), daemon=True)
            traffic.start()
            try:
                n = 0
                while self.now() + 10 < self.seconds:
                    self.run_cycle(n * self.cycle)
                    n += 1
                    time.sleep(max(0.0, min(n * self.cycle, self.seconds) - self.now()))
                traffic.join(timeout=self.seconds + 120)
            finally:
                stop.set()
                if getattr(self, "current_traffic", None):
                    self.current_traffic.kill()
                self.steady.stop()
            self.sampler.stop()
            self.watch.stop()
            self.store_watch.stop()
            self.cycles = n
        finally:
            self.stack.stop()
        return self.report()

    # ------------------------------------------------------------ figures and checks

    def recoveries(self) -> list[dict]:
        """Per Redis restart: s from Redis answering again to the last store
        error the limiters counted, and to the last failure the Envoys counted
        (their counters are flushed every 0.5 s: later by up to that)."""
        out = []
        starts = sorted(f["start"] for f in self.faults)
        for f in (f for f in self.faults if f["redis"]):
            healed = self.t0 + f["healed"]
            since = self.t0 + f["start"]
            until = self.t0 + next((s for s in starts if s > f["start"]), f["start"] + 30)
            out.append({**f, "limiter_s": last_rise_in(self.store_watch.samples, since - 1, until, healed),
                        "envoy_s": last_rise_in(self.watch.samples, since - 1, until, healed)})
        return out

    def windows(self) -> tuple[list[dict], list[dict], list[dict]]:
        """Steady windows: (local, global judged, global disturbed by a store fault)."""
        verdicts = self.steady.verdicts()
        local = [v for v in verdicts if v["scope"] == "local"]
        glob = [v for v in verdicts if v["scope"] == "global"]
        judged = [v for v in glob if not disturbed(v, self.faults, self.t0, DISTURBED_MARGIN_S)]
        spared = [v for v in glob if disturbed(v, self.faults, self.t0, DISTURBED_MARGIN_S)]
        return local, judged, spared

    def checks(self) -> list[tuple[str, bool, str]]:
        reports = [r for _, r in self.minutes]
        sent = sum(r.sent for r in reports)
        answered = sum(r.answered for r in reports)
        errs = sum(errors(r) for r in reports)
        timeouts = sum(r.timeouts for r in reports)
        out = [("every traffic request answered", sent == answered and errs == 0 and sent > 0,
                f"sent {sent}, answered {answered}, errors {errs}"),
               ("no traffic request past the timeout", timeouts == 0, f"{timeouts} timeouts")]
        bound = LIMITER_TIMEOUT_S + MARGIN_S
        worst = max([r.max_latency_s for r in reports + self.floods] or [0.0])
        out.append((f"worst latency <= limiter timeout + {MARGIN_S:.0f} s ({bound:.2f} s)", worst <= bound,
                    f"{worst * 1000:.1f} ms"))
        flood_ok = all(f.sent == f.answered and f.timeouts == 0 and errors(f) == 0 for f in self.floods)
        out.append(("every flood request answered, none past the timeout", flood_ok,
                    f"{sum(f.sent for f in self.floods)} sent, {sum(f.answered for f in self.floods)} answered"))
        local, judged, spared = self.windows()
        bad_local = [v for v in local if not v["exact"]]
        out.append((f"every local window exact ({STEADY_QUOTA} admitted)", bool(local) and not bad_local,
                    f"{len(local) - len(bad_local)} of {len(local)} exact" + describe(bad_local)))
        bad_global = [v for v in judged if not v["exact"]]
        out.append((f"every global window exact ({STEADY_QUOTA} admitted) but those a store fault reached",
                    bool(judged) and not bad_global,
                    f"{len(judged) - len(bad_global)} of {len(judged)} exact; {len(spared)} reached by a fault, "
                    f"admitted {spread([v['admitted'] for v in spared])}" + describe(bad_global)))
        recs = self.recoveries()
        worst_rec = max((r["limiter_s"] for r in recs), default=0.0)
        out.append((f"recovery after every Redis restart <= {RECOVERY_BOUND_S:.0f} s", bool(recs) and
                    worst_rec <= RECOVERY_BOUND_S, f"worst {worst_rec:.2f} s after Redis answered (limiters' "
                    "store errors)"))
        grows = [name for name, *_, verdict in self.rss_rows() if verdict == "GROWS"]
        out.append(("memory flat (envoy0, limiter0: never restarted)", not grows,
                    ", ".join(grows) + " grow" if grows else "end within the margin of after the first cycle"))
        return out

    def rss_rows(self) -> list[tuple]:
        """(process, after the first cycle, peak, end, verdict) in kB, envoy0 and limiter0 judged."""
        rows = self.sampler.rows
        out = []
        for name in ("envoy0", "envoy1", "limiter0", "limiter1", "redis_rss", "redis"):
            values = [(r["t"], r[name]) for r in rows if r.get(name) is not None]
            if not values:
                continue
            warm = next((v for t, v in values if t >= min(self.cycle, self.seconds / 2)), values[-1][1])
            peak = max(v for _, v in values)
            end = values[-1][1]
            judged = name in ("envoy0", "limiter0")
            flat = end <= warm * (1 + FLAT_RATIO) + FLAT_ABS_KB
            out.append((name, warm, peak, end, ("flat" if flat else "GROWS") + ("" if judged else " (not judged)")))
        return out

    def per_minute(self) -> list[dict]:
        """The figures of each minute of the run."""
        local, judged, spared = self.windows()
        rows = []
        for start, r in self.minutes:
            end = start + 60
            upto = [s for s in self.sampler.rows if s["t"] <= end] or self.sampler.rows[:1]

            def last(key):
                """The key's last value up to the minute's end (a process restarting has none)."""
                return next((s[key] for s in reversed(upto) if s.get(key) is not None), None)
            in_minute = [v for v in local + judged + spared if start <= v["end"] - self.t0 < end]

            def exact(vs):
                return [sum(1 for v in vs if v["exact"]), len(vs)]
            rows.append({
                "minute": int(start // 60), "t": round(start, 1),
                "sent": r.sent, "answered": r.answered, "non_200": sum(n for s, n in r.status.items() if s != 200),
                "timeouts": r.timeouts, "errors": errors(r),
                "p50_ms": r.latency_us["p50"] / 1000, "p99_ms": r.latency_us["p99"] / 1000,
                "max_ms": r.latency_us["max"] / 1000,
                "local_exact": exact([v for v in in_minute if v["scope"] == "local"]),
                "global_exact": exact([v for v in in_minute if v in judged]),
                "global_reached": exact([v for v in in_minute if v in spared]),
                "faults": [f["what"] for f in self.faults if start <= f["start"] < end],
                **{k: last(k) for k in ("envoy0", "envoy1", "limiter0", "limiter1", "redis_rss", "redis",
                                              "redis_keys")},
            })
        return rows

    def report(self) -> int:
        checks = self.checks()
        ok = all(c[1] for c in checks)
        rows = self.per_minute()
        self.figures_path.write_text(json.dumps({"seconds": self.seconds, "faults": self.faults, "minutes": rows},
                                                indent=1) + "\n")
        try:
            from soak.chart import chart
            chart(self.figures_path, self.chart)
        except ImportError as e:  # matplotlib is a bench requirement (make soak-long installs it)
            log(f"no chart: {e}")
        write_section(self.results, "chaos", self.markdown(checks, ok, rows))
        for name, passed, detail in checks:
            log(f"{'PASS' if passed else 'FAIL'} {name}: {detail}")
        log(f"wrote {self.results}, {self.figures_path}")
        return 0 if ok else 1

    def markdown(self, checks, ok: bool, rows: list[dict]) -> str:
        from soak.chaos_report import markdown
        return markdown(self, checks, ok, rows)


def describe(bad: list[dict]) -> str:
    return ("; not exact: " + ", ".join(f"{v['client']} w{v['window']} ({v['admitted']} admitted, {v['other']} other)"
                                        for v in bad[:8])) if bad else ""


def spread(values: list[int]) -> str:
    return f"{min(values)}-{max(values)}" if values else "-"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=float(os.environ.get("SOAK_SECONDS", "1800")))
    parser.add_argument("--rate", type=float, default=float(os.environ.get("SOAK_RATE", "300")),
                        help="normal traffic, requests/s through both Envoys")
    parser.add_argument("--flood-rate", type=float, default=float(os.environ.get("SOAK_FLOOD_RATE", "300")),
                        help="key flood, requests/s")
    parser.add_argument("--results", type=Path, default=RESULTS, help="the Markdown report (its chaos section)")
    parser.add_argument("--figures", type=Path, default=FIGURES, help="the figures per minute (JSON)")
    parser.add_argument("--chart", type=Path, default=CHART, help="the chart (SVG)")
    args = parser.parse_args()
    if args.seconds < 60:
        parser.error("--seconds: at least 60")
    with tempfile.TemporaryDirectory(prefix="sluice-chaos-") as workdir:
        return Chaos(args.seconds, args.rate, args.flood_rate, Path(workdir), args.results, args.figures,
                     args.chart).run()


if __name__ == "__main__":
    sys.exit(main())
