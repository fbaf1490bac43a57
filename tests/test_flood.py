"""Floods: a million client addresses against per-IP limits (local and
global), and one hot key from every worker.

The fast checks (part of `make test`) flood 40,000 distinct addresses;
`make flood` runs the same scenarios at FLOOD_KEYS (1,000,000) with WORKERS
Envoy workers and writes the figures to tests/flood/RESULTS.md.

What each asserts:

- **Local key flood.** Envoy's memory is bounded by `local_max_keys`: once
  the key table's buckets are written, more fresh addresses add nothing. A
  legitimate client sending twice its limit inside every fixed window is
  never admitted more than its limit in any window; its key has an entry of
  its own while the table has room (the flood's keys live in one window stay
  below the table's size here), so its shortfall stays within the bound the
  older slot layout guaranteed (with F flood requests over M keys, a
  Poisson(F/M) tail at one in a million). `sluice.cas_exhausted` stays 0.
- **Global key flood, memory store.** `sluice_limiter_store_keys` stays
  within `--max-keys` (split exactly over the shards); once full,
  checks needing a new key are denied (the documented behaviour), while a
  client whose key is held is still limited exactly. Limiter memory bounded.
- **Global key flood, Redis.** Every key expires: DBSIZE falls back to 0
  once the windows pass, and Redis's used_memory with it.
- **Hot key.** One key from every worker at full speed: exactly the limit
  admitted, CAS retries per request reported, `cas_exhausted` 0.
"""

from __future__ import annotations

import http.client
import json
import math
import os
import subprocess
import threading
import time
from pathlib import Path

import pytest

import support
from support import limiter_cluster, request, sluice_config, wait_until
from support.load import run_load, start_load
from support.processes import redis_command

LONG = os.environ.get("SLUICE_FLOOD") == "1"
KEYS = int(os.environ.get("FLOOD_KEYS", "1000000")) if LONG else 40_000
# Envoy workers: WORKERS, else one per CPU up to 8 (make flood passes WORKERS=2 by default).
WORKERS = int(os.environ.get("WORKERS") or min(os.cpu_count() or 2, 8))
CONNECTIONS = 16
RESULTS = Path(__file__).parent / "flood" / "RESULTS.md"
MIB = 1024 * 1024
STORE_SECTION = "## The limiter's memory store, flooded directly"

LEGIT_IP = "203.0.113.7"
FIGURES: dict[str, dict] = {}


def rss_kib(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise ValueError(pid)


class RssSampler:
    """Samples a process's VmRSS every `period` seconds: before, peak, series."""

    def __init__(self, pid: int, period: float = 0.5):
        self.pid, self.period = pid, period
        self.samples: list[tuple[float, int]] = []
        self._stop = threading.Event()
        self._t = threading.Thread(target=self._run, daemon=True)
        self._t0 = time.monotonic()

    def _run(self):
        while not self._stop.is_set():
            try:
                self.samples.append((time.monotonic() - self._t0, rss_kib(self.pid)))
            except (OSError, ValueError):
                return
            self._stop.wait(self.period)

    def __enter__(self):
        self._t.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._t.join()

    @property
    def peak(self) -> int:
        return max(v for _, v in self.samples)


def poisson_tail(mean: float, p: float = 1e-6) -> int:
    """The smallest k with P(Poisson(mean) > k) < p."""
    term = math.exp(-mean)
    cdf, k = term, 0
    while 1 - cdf >= p and k < 100_000:
        k += 1
        term *= mean / k
        cdf += term
    return k


class LegitClient:
    """One client sending `burst` requests in the middle of every `window`
    (fixed windows aligned to the epoch), on a keep-alive connection, and
    counting admissions per window. A window in which some answer came back
    after the window ended is left out (its request could have been decided
    in either window)."""

    def __init__(self, port: int, window_s: float, burst: int, headers: dict):
        self.port, self.window_s, self.burst, self.headers = port, window_s, burst, headers
        self.windows: dict[int, int] = {}
        self.ambiguous: set[int] = set()
        self.failures: list[str] = []
        self._stop = threading.Event()
        self._t = threading.Thread(target=self._run, daemon=True)

    def _run(self):
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=10)
        while not self._stop.is_set():
            now = time.time()
            w = int(now // self.window_s)
            start = (w + 0.25) * self.window_s
            if now > start:
                w += 1
                start = (w + 0.25) * self.window_s
            time.sleep(max(0.0, start - time.time()))
            if self._stop.is_set():
                break
            admitted = 0
            for _ in range(self.burst):
                try:
                    conn.request("GET", "/", headers=self.headers)
                    resp = conn.getresponse()
                    resp.read()
                except (OSError, http.client.HTTPException) as e:
                    self.failures.append(repr(e))
                    conn.close()
                    conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=10)
                    self.ambiguous.add(w)
                    continue
                admitted += resp.status == 200
            if int(time.time() // self.window_s) != w:
                self.ambiguous.add(w)
            self.windows[w] = admitted
        conn.close()

    def __enter__(self):
        self._t.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._t.join(timeout=30)

    def counted(self) -> dict[int, int]:
        return {w: n for w, n in dict(self.windows).items() if w not in set(self.ambiguous)}

    def wait_windows(self, more: int):
        """Waits until `more` windows beyond those already recorded are
        recorded, and at least three in all are counted (a fast flood may
        end within one window)."""
        target = len(self.windows) + more
        wait_until(lambda: len(self.windows) >= target and len(self.counted()) >= 3,
                   timeout=self.window_s * (more + 6), interval=0.05, what="the legitimate client's windows")


def flood_headers() -> dict:
    return {"x-forwarded-for": "{ip}"}


def settle_stat(e, name: str) -> int:
    """A Sluice counter once it stops moving (counters are flushed every 500 ms)."""
    last = [-1]

    def stable():
        v = e.sluice_stat(name)
        if v == last[0]:
            return True
        last[0] = v
        return False

    wait_until(stable, interval=0.7, what=f"{name} settles")
    return last[0]


def sluice_stat_names(e) -> set[str]:
    """The names of the Sluice stats Envoy shows."""
    return {name for name in e.stats() if "sluice" in name}


def per_ip_local(requests: int, window: str, slots: int) -> dict:
    return sluice_config(
        [{"name": "per-ip", "key": ["client_ip"],
          "limits": [{"algorithm": "fixed_window", "requests": requests, "window": window}]}],
        client_ip={"xff_trusted_hops": 1}, local_max_keys=slots, headers="none")


def per_ip_global(algorithm: str, requests: int, window: str) -> dict:
    return sluice_config(
        [{"name": "per-ip", "key": ["client_ip"],
          "limits": [{"algorithm": algorithm, "requests": requests, "window": window, "scope": "global"}]}],
        client_ip={"xff_trusted_hops": 1}, headers="none",
        limiter={"cluster": "sluice_limiter", "authority": "sluice-limiter", "timeout": "5s",
                 "failure_mode": "deny"})


def record(name: str, **figures):
    FIGURES[name] = figures
    print(f"\n{name}: " + json.dumps(figures, indent=1))


# ---------------------------------------------------------------- local


def test_local_key_flood_is_bounded_by_local_max_keys(envoy):
    """Two floods of fresh addresses: a tenth of the keys fills the slots,
    the other nine tenths (fresh addresses all) may only fill the slots
    left; the legitimate client stays within its limit in every window."""
    # The long run keeps the default slots: collisions with the legitimate
    # client's slot stay rare at full speed (flood keys per window << slots).
    slots = 100_000 if LONG else 10_000
    limit, window_s = 5, 1
    e = envoy(per_ip_local(limit, f"{window_s}s", slots), concurrency=WORKERS)
    pid = e.process.proc.pid
    url = f"http://127.0.0.1:{e.port}/"
    run_load(url, connections=2, requests=200, headers={"x-forwarded-for": "198.18.{n}.1"}, distinct=200)
    baseline = rss_kib(pid)
    stats_before = sluice_stat_names(e)
    assert stats_before
    half = KEYS // 10
    with RssSampler(pid) as rss, LegitClient(e.port, window_s, 2 * limit,
                                             {"x-forwarded-for": LEGIT_IP}) as legit:
        first = run_load(url, connections=CONNECTIONS, requests=half, headers=flood_headers(), timeout=10)
        after_first = rss_kib(pid)
        second = run_load(url, connections=CONNECTIONS, requests=KEYS - half, headers=flood_headers(),
                          first=half, timeout=10)
        after_second = rss_kib(pid)
        legit.wait_windows(2)  # two more windows without the flood
    after = rss_kib(pid)
    for report in (first, second):
        assert report.timeouts == report.io_errors == report.connect_errors == 0
        assert report.answered == report.sent
        assert set(report.status) <= {200, 429}
    flood_requests = first.sent + second.sent
    counted = legit.counted()
    assert not legit.failures, legit.failures[:3]
    assert len(counted) >= 3, (legit.windows, legit.ambiguous)
    # Never over-admitted, in any window.
    assert max(counted.values()) <= limit, counted
    # The shortfall is what flood requests landing in its slot took.
    shortfall = sum(limit - n for n in counted.values())
    expected_hits = flood_requests / slots
    bound = poisson_tail(expected_hits)
    assert shortfall <= bound, (shortfall, bound, counted)
    assert settle_stat(e, "sluice.cas_exhausted") == 0
    retries = settle_stat(e, "sluice.cas_retries")
    # Envoy's stats are per rule, never per key: the flood added none.
    assert sluice_stat_names(e) == stats_before
    # Slots filled by the first flood: 1 - e^(-half/slots) of them; the
    # second flood can fill only what is left. A slot costs well under
    # 1 KiB (about 160 bytes measured); unbounded, the second flood's
    # KEYS - half entries would cost that much each.
    grown_first = after_first - baseline
    grown_second = after_second - after_first
    left_after_first = slots * math.exp(-half / slots)
    assert grown_second * 1024 < max(4 * MIB, left_after_first * 1024 + 2 * MIB), (grown_first, grown_second)
    assert (rss.peak - baseline) * 1024 < 64 * MIB
    record(f"local flood ({KEYS} keys, {WORKERS} workers)",
           keys=KEYS, local_max_keys=slots, workers=WORKERS,
           rss_kib={"before": baseline, f"after_{half}_keys": after_first, f"after_{KEYS}_keys": after_second,
                    "peak": rss.peak, "after": after},
           requests_per_s=[round(first.rate), round(second.rate)],
           flood_status={str(k): first.count(k) + second.count(k) for k in sorted(set(first.status) | set(second.status))},
           legit={"limit_per_window": limit, "windows": len(counted), "admitted": sum(counted.values()),
                  "shortfall": shortfall, "shortfall_bound": bound,
                  "flood_hits_expected_on_its_slot_in_the_whole_run": round(expected_hits, 2)},
           cas_retries_per_request=round(retries / max(1, flood_requests), 5), cas_exhausted=0)


# ---------------------------------------------------------------- global, memory


def limiter_metric(lim, name: str) -> float:
    return lim.metric(name)


def test_global_key_flood_memory_store_holds_max_keys(envoy, processes):
    max_keys, shards = (100_000 if LONG else 10_000), 64
    lim = processes.limiter(extra_args=["--max-keys", str(max_keys), "--shards", str(shards),
                                        "--store-timeout-ms", "5000"])
    # A long window: every key stays held (a key that took one request is
    # back to full after a day / 20), so the store fills.
    limit = 20
    e = envoy(per_ip_global("gcra", limit, "1d"), concurrency=WORKERS,
              clusters=[limiter_cluster("sluice_limiter", [lim.port])])
    url = f"http://127.0.0.1:{e.port}/"
    legit_headers = {"x-forwarded-for": LEGIT_IP}
    # The legitimate client's key is held before the flood.
    assert request(e.port, "/", headers=legit_headers).status == 200
    lpid = lim.process.proc.pid
    baseline = rss_kib(lpid)
    keys_seen: list[float] = []
    stop = threading.Event()

    def watch_keys():
        while not stop.is_set():
            keys_seen.append(lim.metric("sluice_limiter_store_keys"))
            stop.wait(0.5)

    watcher = threading.Thread(target=watch_keys, daemon=True)
    watcher.start()
    legit_statuses: list[int] = []
    with RssSampler(lpid) as rss:
        flood = start_load(url, connections=CONNECTIONS, requests=KEYS, headers=flood_headers(), timeout=10)
        # While the flood runs, the legitimate client sends twice its limit.
        conn = http.client.HTTPConnection("127.0.0.1", e.port, timeout=10)
        for _ in range(2 * limit - 1):
            conn.request("GET", "/", headers=legit_headers)
            r = conn.getresponse()
            r.read()
            legit_statuses.append(r.status)
            time.sleep(0.2)
        conn.close()
        # A client first seen once the store is full (every shard) is denied.
        wait_until(lambda: lim.metric("sluice_limiter_store_keys") >= max_keys, timeout=300,
                   what="every shard of the store full")
        newcomer = request(e.port, "/", headers={"x-forwarded-for": "203.0.113.99"}).status
        report = flood.wait(timeout=600)
    stop.set()
    watcher.join()
    held = lim.metric("sluice_limiter_store_keys")
    capacity = lim.metric("sluice_limiter_capacity_denials_total")
    assert report.timeouts == report.io_errors == report.connect_errors == 0
    assert report.answered == report.sent == KEYS
    # Each flood address sent once: admitted while there was room, denied after.
    admitted = report.count(200)
    assert admitted + report.count(429) == KEYS
    assert max(keys_seen + [held]) <= max_keys
    assert admitted <= max_keys
    assert admitted >= max_keys * 0.9, admitted
    assert capacity >= KEYS - admitted - 1
    # The held key: exactly its limit (one before the flood, the rest during it).
    assert legit_statuses.count(200) == limit - 1, legit_statuses
    assert newcomer == 429
    assert (rss.peak - baseline) * 1024 < 64 * MIB
    record(f"global flood, memory store ({KEYS} keys, {WORKERS} workers)",
           keys=KEYS, max_keys=max_keys, shards=shards, store_keys_max_seen=max(keys_seen + [held]),
           flood_status={str(k): v for k, v in report.status.items()}, requests_per_s=round(report.rate),
           capacity_denials=capacity,
           limiter_rss_kib={"before": baseline, "peak": rss.peak, "after": rss_kib(lpid)},
           legit={"limit": limit, "admitted": legit_statuses.count(200) + 1, "sent": len(legit_statuses) + 1},
           newcomer_while_full=newcomer)


# ---------------------------------------------------------------- global, Redis


def redis_info(port: int, field: str) -> int:
    text = redis_command(port, "INFO", "memory").decode()
    for line in text.splitlines():
        if line.startswith(field + ":"):
            return int(line.split(":")[1])
    raise ValueError(field)


def redis_dbsize(port: int) -> int:
    return int(redis_command(port, "DBSIZE").decode().strip().lstrip(":"))


def test_global_key_flood_redis_keys_expire(envoy, processes):
    redis = processes.redis()
    lim = processes.limiter(store=redis.url, extra_args=["--store-timeout-ms", "5000"])
    window_s = 2
    e = envoy(per_ip_global("fixed_window", 1, f"{window_s}s"), concurrency=WORKERS,
              clusters=[limiter_cluster("sluice_limiter", [lim.port])])
    url = f"http://127.0.0.1:{e.port}/"
    mem_before = redis_info(redis.port, "used_memory")
    sizes: list[tuple[float, int]] = []
    stop = threading.Event()
    t0 = time.monotonic()

    def watch():
        while not stop.is_set():
            sizes.append((round(time.monotonic() - t0, 1), redis_dbsize(redis.port)))
            stop.wait(0.5)

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    report = run_load(url, connections=CONNECTIONS, requests=KEYS, headers=flood_headers(), timeout=10)
    flood_end = time.monotonic() - t0
    mem_peak = redis_info(redis.port, "used_memory_peak")
    wait_until(lambda: redis_dbsize(redis.port) == 0, timeout=window_s + 10, what="every key expired")
    stop.set()
    watcher.join()
    sizes.append((round(time.monotonic() - t0, 1), redis_dbsize(redis.port)))
    mem_after = redis_info(redis.port, "used_memory")
    assert report.timeouts == report.io_errors == report.connect_errors == 0
    assert report.status == {200: KEYS}
    # Keys live at most one window: DBSIZE never held more than about two windows of the flood.
    peak = max(n for _, n in sizes)
    assert peak <= report.rate * (window_s + 1) * 1.5 + 1000, (peak, report.rate)
    assert peak < KEYS or KEYS < 20_000
    assert mem_after - mem_before < 4 * MIB
    record(f"global flood, Redis ({KEYS} keys, {WORKERS} workers)",
           keys=KEYS, window_s=window_s, requests_per_s=round(report.rate), dbsize_peak=peak,
           dbsize_over_time=" ".join(f"{t}s:{n}" for t, n in sizes[:: max(1, len(sizes) // 24)] + sizes[-1:]),
           flood_end_s=round(flood_end, 1),
           redis_used_memory={"before": mem_before, "peak": mem_peak, "after": mem_after})


# ---------------------------------------------------------------- hot key


def test_hot_key_from_every_worker_is_exact(envoy):
    total = 40_000 if LONG else 20_000
    limit = total // 2
    e = envoy(sluice_config(
        [{"name": "hot", "key": ["const:hot"],
          "limits": [{"algorithm": "fixed_window", "requests": limit, "window": "365d"}]}], headers="none"),
        concurrency=WORKERS)
    url = f"http://127.0.0.1:{e.port}/"
    report = run_load(url, connections=max(CONNECTIONS, 4 * WORKERS), requests=total, timeout=10)
    assert report.timeouts == report.io_errors == report.connect_errors == 0
    assert report.status == {200: limit, 429: total - limit}
    exhausted = settle_stat(e, "sluice.cas_exhausted")
    retries = settle_stat(e, "sluice.cas_retries")
    assert exhausted == 0
    assert settle_stat(e, "sluice.hot.allowed") == limit
    record(f"hot key ({WORKERS} workers)", workers=WORKERS, requests=total, admitted=report.count(200),
           limit=limit, requests_per_s=round(report.rate), cas_retries=retries,
           cas_retries_per_request=round(retries / total, 5),
           cas_retries_per_admitted=round(retries / limit, 5), cas_exhausted=exhausted,
           latency_us=report.latency_us)


# ---------------------------------------------------------------- results


def mib(kib: float) -> str:
    return f"{kib / 1024:.1f} MiB"


def summary(figures: dict[str, dict]) -> list[str]:
    """The headline figures of each scenario, as a Markdown table."""
    rows = []
    for name, f in figures.items():
        if name.startswith("local flood"):
            r, legit = f["rss_kib"], f["legit"]
            after_part = [v for k, v in r.items() if k.startswith("after_") and k.endswith("_keys")]
            rows += [
                (name, "Envoy RSS before / after 1/10 of the keys / after all / peak",
                 " / ".join(mib(v) for v in [r["before"], *after_part, r["peak"]])),
                (name, "flood requests/s (two phases)", " / ".join(str(x) for x in f["requests_per_s"])),
                (name, "legitimate client admitted (limit per window x windows)",
                 f"{legit['admitted']} of {legit['limit_per_window'] * legit['windows']} "
                 f"(shortfall {legit['shortfall']}, bound {legit['shortfall_bound']}); never above the limit"),
                (name, "cas_exhausted, CAS retries per request",
                 f"{f['cas_exhausted']}, {f['cas_retries_per_request']}"),
            ]
        elif name.startswith("global flood, memory"):
            r = f["limiter_rss_kib"]
            rows += [
                (name, "store keys at most (--max-keys)",
                 f"{int(f['store_keys_max_seen'])} ({f['max_keys']}; {f['shards']} shards)"),
                (name, "flood admitted / denied for lack of room",
                 f"{f['flood_status'].get('200', 0)} / {f['flood_status'].get('429', 0)}"),
                (name, "limiter RSS before / peak / after", " / ".join(mib(r[k]) for k in ("before", "peak", "after"))),
                (name, "flood requests/s", str(f["requests_per_s"])),
                (name, "held client admitted; newcomer once full",
                 f"{f['legit']['admitted']} of {f['legit']['sent']} (limit {f['legit']['limit']}); "
                 f"{f['newcomer_while_full']}"),
            ]
        elif name.startswith("global flood, Redis"):
            m = f["redis_used_memory"]
            rows += [
                (name, "flood requests/s; window", f"{f['requests_per_s']}; {f['window_s']} s"),
                (name, "DBSIZE peak; 0 again at", f"{f['dbsize_peak']}; {f['dbsize_over_time'].split()[-1]} "
                                                  f"(flood ended at {f['flood_end_s']} s)"),
                (name, "Redis used_memory before / peak / after",
                 " / ".join(mib(m[k] / 1024) for k in ("before", "peak", "after"))),
            ]
        elif name.startswith("hot key"):
            rows += [
                (name, "admitted (limit) of requests", f"{f['admitted']} ({f['limit']}) of {f['requests']}"),
                (name, "requests/s; latency p99 / max",
                 f"{f['requests_per_s']}; {f['latency_us']['p99']} / {f['latency_us']['max']} us"),
                (name, "CAS retries (per request); cas_exhausted",
                 f"{f['cas_retries']} ({f['cas_retries_per_request']}); {f['cas_exhausted']}"),
            ]
    lines = ["| scenario | figure | value |", "| --- | --- | --- |"]
    lines += [f"| {a} | {b} | {c} |" for a, b, c in rows]
    return lines


def render_results(figures: dict[str, dict], header: list[str]) -> str:
    lines = [*header, *summary(figures), "", "The figures in full:", ""]
    for name, f in figures.items():
        lines += [f"### {name}", "", "```json", json.dumps(f, indent=1), "```", ""]
    return "\n".join(lines)


@pytest.fixture(scope="module", autouse=True)
def write_results():
    yield
    if not LONG or not FIGURES:
        return
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                            cwd=Path(__file__).parent).stdout.strip()
    header = [
        "# Flood results",
        "",
        f"- commit: `{commit}`",
        f"- date: {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}",
        f"- command: `make flood FLOOD_KEYS={KEYS} WORKERS={WORKERS}` (that is: `SLUICE_FLOOD=1 FLOOD_KEYS={KEYS} "
        f"WORKERS={WORKERS} .venv/bin/python -m pytest tests/test_flood.py -s -q`)",
        f"- machine: {os.cpu_count()} CPUs, shared; figures are indicative, the assertions are the contract",
        "",
    ]
    RESULTS.parent.mkdir(exist_ok=True)
    # The store flood's sections (tests/test_store_flood.py) stay as they are.
    kept = RESULTS.read_text().partition(STORE_SECTION)[1:] if RESULTS.exists() else ("", "")
    RESULTS.write_text(render_results(FIGURES, header) + ("\n" + "".join(kept) if kept[0] else ""))
