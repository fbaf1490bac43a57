#!/usr/bin/env python3
"""`make soak`: Sluice under normal traffic, key floods and faults for a set time.

2 Envoys, 2 sluice-limiters and one Redis. `sluice-load` sends normal
traffic through both Envoys for the whole run; a cycle repeats on a
schedule: a key flood (a fresh client address per request in a trusted
`x-forwarded-for`), `kill -9` of a limiter and its restart, Redis paused
(SIGSTOP/SIGCONT), configuration pushes every second, a hot restart of an
Envoy, Redis stopped and started, and accounting bursts on fresh keys once
the store is back. Envoy 0 and limiter 0 are never restarted, so their
memory over the whole run is the leak check; Envoy 1 and limiter 1 take the
restarts.

It samples the RSS of every Envoy and limiter and Redis's used_memory every
few seconds, checks every request answered in time, recovery after every
fault, no over-admission, flat memory, and writes tests/soak/RESULTS.md.
Exit status 1 when a check fails.

    SOAK_SECONDS=600 .venv/bin/python tests/soak/soak.py   (make soak; SOAK_SECONDS=60 for a smoke run)
"""

from __future__ import annotations

import argparse
import datetime
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

if __name__ == "__main__":
    # tests/ (for `support` and the `soak` package), in place of this script's own directory
    sys.path[0] = str(Path(__file__).resolve().parents[1])

from support.load import LoadReport  # noqa: E402
from soak.harness import (ACCOUNT_ALLOWANCE, LIMITER_TIMEOUT_S, MARGIN_S, FailureWatch, Load,  # noqa: E402
                          Stack, accounting_burst, errors, last_rise_in, rises, store_errors, summary,
                          write_section)
from support.paths import ROOT  # noqa: E402
from support.processes import rss_kb  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "RESULTS.md"
RECOVERY_BOUND_S = 10.0
# "Flat": memory at the end may pass what it was after the first flood by at
# most this much (a warmed-up process still grows a little: allocator
# arenas, connection buffers).
FLAT_RATIO = 0.25
FLAT_ABS_KB = 16 * 1024


def log(msg: str):
    print(f"[soak {time.strftime('%H:%M:%S')}] {msg}", flush=True)


def redis_figures(port: int) -> tuple[int | None, int | None]:
    """(used_memory bytes, keys) from Redis, or Nones when it does not answer within 1 s."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1) as s:
            s.sendall(b"*2\r\n$4\r\nINFO\r\n$6\r\nmemory\r\n*1\r\n$6\r\nDBSIZE\r\n")
            data = b""
            while b"\r\n:" not in data:
                chunk = s.recv(65536)
                if not chunk:
                    break
                data += chunk
            text = data.decode(errors="replace")
    except OSError:
        return None, None
    used = keys = None
    for line in text.split("\r\n"):
        if line.startswith("used_memory:"):
            used = int(line.split(":", 1)[1])
        elif line.startswith(":"):
            keys = int(line[1:])
    return used, keys


class Sampler:
    """Every `interval` s: RSS (kB) of each Envoy (its newest epoch) and limiter, Redis memory and keys."""

    def __init__(self, stack: Stack, started: float, interval: float = 3.0):
        self.stack = stack
        self.started = started
        self.interval = interval
        self.rows: list[dict] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def sample(self) -> dict:
        row: dict = {"t": time.monotonic() - self.started}
        for i, e in enumerate(self.stack.envoys):
            row[f"envoy{i}"] = rss_kb(e.process.pid) if e.process else None
        for i, lim in enumerate(self.stack.limiters):
            row[f"limiter{i}"] = rss_kb(lim.process.pid) if lim.process and lim.process.alive() else None
        if self.stack.redis:
            used, keys = redis_figures(self.stack.redis.port)
            row["redis"] = used // 1024 if used is not None else None
            row["redis_keys"] = keys
            proc = self.stack.redis.process
            row["redis_rss"] = rss_kb(proc.pid) if proc and proc.alive() else None
        return row

    def _run(self):
        while not self._stop.is_set():
            self.rows.append(self.sample())
            self._stop.wait(self.interval)

    def stop(self):
        self._stop.set()
        self._thread.join()
        self.rows.append(self.sample())


class Soak:
    def __init__(self, seconds: float, rate: float, flood_rate: float, workdir: Path, results: Path = RESULTS):
        self.results = results
        self.seconds = seconds
        self.rate = rate
        self.flood_rate = flood_rate
        self.workdir = workdir
        # a 2-minute cycle; a short run gets one cycle squeezed into its time
        self.cycle = 120.0 if seconds >= 240 else seconds
        self.scale = self.cycle / 120.0
        self.faults: list[dict] = []  # {"what", "start", "end"} in s since the start
        self.bursts: list[dict] = []
        self.floods: list[LoadReport] = []
        self.pushes = 0
        self.hot_restarts = 0
        self.first_flood_end: float | None = None

    def now(self) -> float:
        return time.monotonic() - self.t0

    def at(self, cycle_start: float, offset: float):
        """Sleeps until `offset` (of the 120-s cycle, scaled) after `cycle_start`; False once time is up."""
        target = cycle_start + offset * self.scale
        if target >= self.seconds - 2:
            return False
        time.sleep(max(0.0, target - self.now()))
        return True

    def fault(self, what: str, inject, heal, hold: float):
        start = self.now()
        inject()
        time.sleep(max(0.0, hold * self.scale))
        end = self.now()
        heal()
        self.faults.append({"what": what, "start": start, "end": end, "healed": self.now()})
        log(f"{what}: {start:.1f}-{end:.1f}s")

    def burst(self, key: str):
        report = accounting_burst(self.stack, key)
        admitted = report.count(200)
        self.bursts.append({"key": key, "t": self.now(), "sent": report.sent, "answered": report.answered,
                            "admitted": admitted, "timeouts": report.timeouts, "errors": errors(report)})
        log(f"accounting {key}: {admitted} admitted of {report.sent} (allowance {ACCOUNT_ALLOWANCE})")

    def run_cycle(self, n: int, start: float):
        s = self.stack
        if not self.at(start, 2):
            return
        flood = Load(s.urls(), duration=20 * self.scale, rate=self.flood_rate, connections=8,
                     headers={"x-flood": "1", "x-forwarded-for": "{ip}"}, distinct=1_000_000, first=n * 1_000_000,
                     timeout=LIMITER_TIMEOUT_S + MARGIN_S)
        log(f"cycle {n}: key flood, {self.flood_rate:.0f}/s for {20 * self.scale:.0f}s")
        report = flood.wait(timeout=20 * self.scale + 60)
        self.floods.append(report)
        log(f"flood: {summary(report)}")
        if self.first_flood_end is None:
            self.first_flood_end = self.now()
        victim = s.limiters[-1]
        if not self.at(start, 27):
            return
        self.fault("kill -9 limiter1, restart", victim.kill, victim.start, 3)
        if not self.at(start, 37):
            return
        self.burst(f"c{n}-after-limiter-kill")
        if not self.at(start, 42):
            return
        self.fault("SIGSTOP Redis, SIGCONT", s.redis.pause, s.redis.resume, 3)
        if not self.at(start, 52):
            return
        self.burst(f"c{n}-after-redis-pause")
        if not self.at(start, 57):
            return
        pushes = max(3, int(15 * self.scale))
        push_start = self.now()
        for i in range(pushes):
            s.push(traffic_requests=1_000_000 - (i % 2), extra_rule=(i % 4 >= 2), flood=True)
            self.pushes += 1
            time.sleep(max(0.0, self.t0 + push_start + i + 1 - time.monotonic()))
        self.faults.append({"what": "configuration pushed every second", "start": push_start, "end": self.now()})
        log(f"{pushes} configuration pushes: {push_start:.1f}-{self.now():.1f}s")
        if not self.at(start, 77):
            return
        restarted = s.envoys[-1]
        self.fault("hot restart envoy1", restarted.hot_restart, lambda: None, 0)
        self.hot_restarts += 1
        if not self.at(start, 87):
            return
        self.fault("stop Redis, start it", s.redis.stop, s.redis.start, 3)
        if not self.at(start, 102):
            return
        self.burst(f"c{n}-after-redis-restart")

    def run(self) -> int:
        self.commit = git_commit()
        log(f"{self.seconds:.0f}s: 2 Envoys, 2 limiters, Redis; traffic {self.rate:.0f}/s, floods "
            f"{self.flood_rate:.0f}/s, a {self.cycle:.0f}s cycle of faults")
        self.stack = Stack(self.workdir, limiters=2, redis=True, failure_mode="allow", flood=True,
                           local_max_keys=10_000)
        try:
            self.t0 = time.monotonic()
            self.sampler = Sampler(self.stack, self.t0)
            self.watch = FailureWatch(self.stack, interval=0.1)
            self.store_watch = FailureWatch(self.stack, interval=0.1, count=lambda: store_errors(self.stack))
            # enough connections to keep the rate while a fault holds requests for the store's timeout
            traffic = Load(self.stack.urls(), duration=self.seconds, rate=self.rate, connections=48,
                           headers={"x-user": "u{n}"}, distinct=1000, interval=5)
            try:
                n = 0
                while self.now() + 5 < self.seconds:
                    self.run_cycle(n, n * self.cycle)
                    n += 1
                    time.sleep(max(0.0, n * self.cycle - self.now()))
                self.traffic = traffic.wait(timeout=self.seconds + 120)
            finally:
                traffic.kill()  # if a step failed: no load left behind
            log(f"traffic: {summary(self.traffic)}")
            self.sampler.stop()
            self.watch.stop()
            self.store_watch.stop()
            self.cycles = n
        finally:
            self.stack.stop()
        return self.report()

    # ------------------------------------------------------------ figures and checks

    def recoveries(self) -> list[dict]:
        """Per fault: seconds from its end to the last limiter failure before
        the next fault began (`recovery_s`), and, for the store's faults, from
        its healing (Redis answering again) to the last store error the
        limiters counted (`store_s`; None without a store watch)."""
        samples = self.watch.samples
        store = getattr(self, "store_watch", None)
        out = []
        for i, f in enumerate(self.faults):
            end = self.t0 + f["end"]
            nxt = self.t0 + (self.faults[i + 1]["start"] if i + 1 < len(self.faults) else self.seconds + 1e9)
            window = [(t, c) for t, c in samples if self.t0 + f["start"] - 1 <= t < nxt]
            failures = rises(window)
            last = None
            for (_, before), (t, after) in zip(window, window[1:]):
                if after > before:
                    last = t
            store_s = None
            if store is not None and "Redis" in f["what"] and "healed" in f:
                store_s = last_rise_in(store.samples, self.t0 + f["start"] - 1, nxt, self.t0 + f["healed"])
            out.append({**f, "failures": failures, "recovery_s": max(0.0, last - end) if last else 0.0,
                        "store_s": store_s})
        return out

    def rss_rows(self) -> list[tuple[str, int | None, int | None, int | None, int | None, str]]:
        """(process, start, after first flood, peak, end, flat?) in kB."""
        rows = self.sampler.rows
        names = [k for k in rows[0] if k not in ("t", "redis_keys")]
        after_flood = self.first_flood_end if self.first_flood_end is not None else self.seconds / 2
        out = []
        for name in names:
            values = [(r["t"], r[name]) for r in rows if r.get(name) is not None]
            if not values:
                continue
            start = values[0][1]
            warm = next((v for t, v in values if t >= after_flood), values[-1][1])
            peak = max(v for _, v in values)
            end = values[-1][1]
            restarted = name in ("envoy1", "limiter1", "redis", "redis_rss")
            flat = end <= warm * (1 + FLAT_RATIO) + FLAT_ABS_KB
            verdict = ("flat" if flat else "GROWS") + (" (restarted during the run)" if restarted else "")
            out.append((name, start, warm, peak, end, verdict))
        return out

    def checks(self) -> list[tuple[str, bool, str]]:
        t = self.traffic
        out = []
        out.append(("every traffic request answered", t.sent == t.answered and errors(t) == 0,
                    f"sent {t.sent}, answered {t.answered}, errors: connect {t.connect_errors}, io {t.io_errors}"))
        out.append(("no traffic request past the timeout", t.timeouts == 0, f"{t.timeouts} timeouts"))
        bound = LIMITER_TIMEOUT_S + MARGIN_S
        worst = max([t.max_latency_s] + [f.max_latency_s for f in self.floods])
        out.append((f"worst latency <= limiter timeout + {MARGIN_S:.0f} s ({bound:.2f} s)", worst <= bound,
                    f"{worst * 1000:.1f} ms"))
        flood_ok = all(f.sent == f.answered and f.timeouts == 0 and errors(f) == 0 for f in self.floods)
        out.append(("every flood request answered, none past the timeout", flood_ok,
                    f"{sum(f.sent for f in self.floods)} sent, {sum(f.answered for f in self.floods)} answered, "
                    f"{sum(f.timeouts for f in self.floods)} timeouts"))
        over = sum(max(0, b["admitted"] - ACCOUNT_ALLOWANCE) for b in self.bursts)
        out.append(("no over-admission (accounting bursts)", over == 0 and bool(self.bursts),
                    f"{over} over the allowance in {len(self.bursts)} bursts"))
        recs = self.recoveries()
        worst_rec = max((r["recovery_s"] for r in recs), default=0.0)
        out.append((f"recovery after every fault <= {RECOVERY_BOUND_S:.0f} s", worst_rec <= RECOVERY_BOUND_S,
                    f"worst {worst_rec:.2f} s"))
        grows = [r[0] for r in self.rss_rows() if r[5].startswith("GROWS") and r[0] in ("envoy0", "limiter0")]
        out.append(("memory flat (envoy0, limiter0: never restarted)", not grows,
                    ", ".join(grows) + " grow" if grows else "end within the margin of after the first flood"))
        return out

    def report(self) -> int:
        checks = self.checks()
        ok = all(c[1] for c in checks)
        write_section(self.results, "soak", self.markdown(checks, ok))
        for name, passed, detail in checks:
            log(f"{'PASS' if passed else 'FAIL'} {name}: {detail}")
        log(f"wrote {self.results}")
        return 0 if ok else 1

    def markdown(self, checks, ok: bool) -> str:
        commit, dirty = self.commit
        t = self.traffic
        lat = t.latency_us
        lines = [
            "# Soak results",
            "",
            f"- commit: `{commit}`{' (with uncommitted changes)' if dirty else ''}",
            f"- date: {datetime.datetime.now(datetime.timezone.utc).strftime('%Y-%m-%d %H:%M UTC')}",
            f"- command: `make soak SOAK_SECONDS={self.seconds:.0f}` "
            f"(`tests/soak/soak.py --seconds {self.seconds:.0f} --rate {self.rate:.0f} "
            f"--flood-rate {self.flood_rate:.0f}`)",
            f"- machine: {os.cpu_count()} cores shared with other work; load average at the end "
            f"{os.getloadavg()[0]:.2f}",
            f"- set-up: 2 Envoys (hot restart on, `--drain-strategy immediate`), 2 sluice-limiters on one Redis, "
            f"`failure_mode: allow`, limiter timeout {LIMITER_TIMEOUT_S * 1000:.0f} ms, `local_max_keys` 10000",
            f"- {self.cycles} cycles of {self.cycle:.0f} s: key flood, kill -9 limiter1 + restart, Redis "
            f"SIGSTOP/SIGCONT, config pushes every second, hot restart of envoy1, Redis stop + start, "
            f"accounting bursts ({self.pushes} pushes, {self.hot_restarts} hot restarts in all)",
            f"- verdict: **{'PASS' if ok else 'FAIL'}**",
            "",
            "## Checks",
            "",
            "| check | result | figures |",
            "| --- | --- | --- |",
        ]
        lines += [f"| {name} | {'pass' if passed else '**FAIL**'} | {detail} |" for name, passed, detail in checks]
        lines += [
            "",
            "## Requests by outcome",
            "",
            "| load | sent | answered | statuses | timeouts | errors | worst latency | p99 |",
            "| --- | --- | --- | --- | --- | --- | --- | --- |",
            f"| traffic ({self.rate:.0f}/s, both Envoys, whole run) | {t.sent} | {t.answered} | "
            f"{fmt_status(t.status)} | {t.timeouts} | {errors(t)} | {lat['max'] / 1000:.1f} ms | "
            f"{lat['p99'] / 1000:.1f} ms |",
        ]
        if self.floods:
            fs = {}
            for f in self.floods:
                for k, v in f.status.items():
                    fs[k] = fs.get(k, 0) + v
            lines.append(
                f"| key floods ({len(self.floods)} x {20 * self.scale:.0f} s, {self.flood_rate:.0f}/s, a fresh "
                f"address per request) | {sum(f.sent for f in self.floods)} | "
                f"{sum(f.answered for f in self.floods)} | {fmt_status(fs)} | "
                f"{sum(f.timeouts for f in self.floods)} | {sum(errors(f) for f in self.floods)} | "
                f"{max(f.max_latency_s for f in self.floods) * 1000:.1f} ms | "
                f"{max(f.latency_us['p99'] for f in self.floods) / 1000:.1f} ms |")
        b_sent = sum(b["sent"] for b in self.bursts)
        b_adm = sum(b["admitted"] for b in self.bursts)
        lines.append(f"| accounting bursts ({len(self.bursts)}, {3 * ACCOUNT_ALLOWANCE} requests on a fresh key "
                     f"each, allowance {ACCOUNT_ALLOWANCE}) | {b_sent} | {sum(b['answered'] for b in self.bursts)} "
                     f"| 200: {b_adm} (allowance x bursts: {ACCOUNT_ALLOWANCE * len(self.bursts)}) | "
                     f"{sum(b['timeouts'] for b in self.bursts)} | {sum(b['errors'] for b in self.bursts)} | | |")
        lines += ["", "## Faults and recovery", "",
                  "Recovery: from the end of the fault to the last limiter failure the Envoys counted "
                  "(`sluice.failure_mode_allowed`, sampled every 0.1 s; the filter flushes its counters every "
                  "0.5 s, so this is late by up to that). Store: from Redis answering again to the last store "
                  "error the limiters counted (`sluice_limiter_store_errors_total`, sampled every 0.1 s).", "",
                  "| t (s) | fault | lasted | limiter failures | recovery | store |",
                  "| --- | --- | --- | --- | --- | --- |"]
        for r in self.recoveries():
            store_s = "-" if r.get("store_s") is None else f"{r['store_s']:.2f} s"
            lines.append(f"| {r['start']:.0f} | {r['what']} | {r['end'] - r['start']:.1f} s | {r['failures']} | "
                         f"{r['recovery_s']:.2f} s | {store_s} |")
        lines += ["", "## Memory", "",
                  f"RSS in MB (redis: used_memory; redis_rss: its RSS). Flat: the end is within {FLAT_RATIO:.0%} + "
                  f"{FLAT_ABS_KB // 1024} MB of the value after the first flood. envoy1 and limiter1 are "
                  "restarted every cycle (their figures are their current process's).", "",
                  "| process | start | after first flood | peak | end | |", "| --- | --- | --- | --- | --- | --- |"]
        for name, start, warm, peak, end, verdict in self.rss_rows():
            lines.append(f"| {name} | {mb(start)} | {mb(warm)} | {mb(peak)} | {mb(end)} | {verdict} |")
        lines += ["", "### Over time", "", "| t (s) | envoy0 | envoy1 | limiter0 | limiter1 | redis | redis keys |",
                  "| --- | --- | --- | --- | --- | --- | --- |"]
        step = max(1, len(self.sampler.rows) // 40)
        rows = self.sampler.rows[::step]
        if rows[-1] is not self.sampler.rows[-1]:
            rows.append(self.sampler.rows[-1])
        for r in rows:
            lines.append(f"| {r['t']:.0f} | {mb(r.get('envoy0'))} | {mb(r.get('envoy1'))} | {mb(r.get('limiter0'))} "
                         f"| {mb(r.get('limiter1'))} | {mb(r.get('redis'))} | "
                         f"{r.get('redis_keys') if r.get('redis_keys') is not None else '-'} |")
        lines += ["", "### Traffic over time", "",
                  f"Buckets of {t.timeline[1]['t'] - t.timeline[0]['t'] if len(t.timeline) > 1 else 0:.0f} s.", "",
                  "| t (s) | answered | statuses | timeouts | errors | worst latency |",
                  "| --- | --- | --- | --- | --- | --- |"]
        for b in t.timeline:
            lines.append(f"| {b['t']:.0f} | {b['answered']} | {fmt_status(b['status'])} | {b['timeouts']} | "
                         f"{b['errors']} | {b['max_us'] / 1000:.1f} ms |")
        return "\n".join(lines) + "\n"


def git_commit() -> tuple[str, bool]:
    """The commit checked out, and whether tracked files differ from it (taken when the run starts)."""
    commit = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True,
                            text=True).stdout.strip()
    dirty = subprocess.run(["git", "-C", str(ROOT), "status", "--porcelain", "--untracked-files=no"],
                           capture_output=True, text=True).stdout.strip()
    return commit, bool(dirty)


def fmt_status(status: dict) -> str:
    return ", ".join(f"{k}: {v}" for k, v in sorted(status.items())) or "-"


def mb(kb) -> str:
    return "-" if kb is None else f"{kb / 1024:.1f}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=float(os.environ.get("SOAK_SECONDS", "600")))
    parser.add_argument("--rate", type=float, default=float(os.environ.get("SOAK_RATE", "300")),
                        help="normal traffic, requests/s through both Envoys")
    parser.add_argument("--results", type=Path, default=RESULTS, help="where the Markdown report goes")
    parser.add_argument("--flood-rate", type=float, default=float(os.environ.get("SOAK_FLOOD_RATE", "300")),
                        help="key flood, requests/s")
    args = parser.parse_args()
    if args.seconds < 30:
        parser.error("--seconds: at least 30")
    with tempfile.TemporaryDirectory(prefix="sluice-soak-") as workdir:
        return Soak(args.seconds, args.rate, args.flood_rate, Path(workdir), args.results).run()


if __name__ == "__main__":
    sys.exit(main())
