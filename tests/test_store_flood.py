"""The limiter's memory store under a flood of distinct keys, sent straight
to `POST /v1/check` (no Envoy in between, so millions of keys take minutes),
while a steady set of legitimate keys keeps checking.

The fast check (part of `make test`) floods 40,000 keys at `--max-keys`
10,000; `make store-flood` floods STORE_FLOOD_KEYS (10,000,000) at
STORE_MAX_KEYS (1,000,000, the flag's default) and writes the figures to
tests/flood/RESULTS.md (its own section, below the Envoy floods').

What it asserts (the policy of docs/reference/limiter-stores.md):

- the store never holds more than `--max-keys` keys (sampled every 0.5 s);
- a key held is never evicted: each legitimate key, first checked before
  the flood and then again and again during it, is admitted exactly its
  quota, never more, never less;
- once full, a check needing a new key is denied (200, `allowed: false`,
  `retry_after_ms` 1000) and counted in `capacity_denials`, for every
  flood key past the bound;
- `/metrics` has the same series after the flood as before (no series
  per key);
- the limiter's memory grows by a bounded amount (the fast check: under
  64 MiB); the long run reports bytes per key held.
"""

from __future__ import annotations

import http.client
import json
import os
import re
import threading
import time
from pathlib import Path

from support import wait_until
from support.load import start_load

LONG = os.environ.get("SLUICE_STORE_FLOOD") == "1"
KEYS = int(os.environ.get("STORE_FLOOD_KEYS", "10000000")) if LONG else 40_000
MAX_KEYS = int(os.environ.get("STORE_MAX_KEYS", "1000000")) if LONG else 10_000
SHARDS = 64
LEGIT_KEYS = 50
QUOTA = 10
CONNECTIONS = 16
MIB = 1024 * 1024
RESULTS = Path(__file__).parent / "flood" / "RESULTS.md"
SECTION = "## The limiter's memory store, flooded directly"


def rss_kib(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise ValueError(pid)


def check_body(key: str) -> str:
    # A day-long GCRA: a key that took one request stays held all run.
    return json.dumps({"domain": "flood", "limits": [
        {"key": key, "algorithm": "gcra", "requests": QUOTA, "window_ms": 86_400_000}]})


def series(text: str) -> set[str]:
    """The metric series of an exposition: names with their labels, no values."""
    return {line.rpartition(" ")[0] for line in text.splitlines() if line and not line.startswith("#")}


class Legit:
    """Checks each legitimate key once per round over one keep-alive
    connection: one round before the flood, then rounds until stopped (and
    at least twice the quota); counts admissions per key."""

    def __init__(self, port: int):
        self.conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        self.admitted = [0] * LEGIT_KEYS
        self.sent = [0] * LEGIT_KEYS
        self.failures: list[str] = []
        self.rounds = 0
        self._stop = threading.Event()
        self._t = threading.Thread(target=self._run, daemon=True)

    def round(self):
        for i in range(LEGIT_KEYS):
            self.conn.request("POST", "/v1/check", body=check_body(f"legit/{i}"),
                              headers={"content-type": "application/json"})
            r = self.conn.getresponse()
            body = r.read()
            self.sent[i] += 1
            if r.status != 200:
                self.failures.append(f"{r.status} {body[:200]!r}")
            elif json.loads(body)["allowed"]:
                self.admitted[i] += 1
        self.rounds += 1

    def _run(self):
        while not self._stop.is_set() or self.rounds < 2 * QUOTA:
            self.round()
            self._stop.wait(0.05 if LONG else 0.0)

    def __enter__(self):
        self._t.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._t.join()
        self.conn.close()


def test_a_key_flood_is_held_to_max_keys_and_legitimate_keys_stay_exact(processes):
    lim = processes.limiter(extra_args=["--max-keys", str(MAX_KEYS), "--shards", str(SHARDS)])
    pid = lim.process.proc.pid
    legit = Legit(lim.port)
    legit.round()  # every legitimate key held before the flood
    assert legit.admitted == [1] * LEGIT_KEYS
    exposition_before = series(_metrics_text(lim))
    before = rss_kib(pid)
    keys_seen: list[float] = []
    rss_seen: list[int] = []
    stop = threading.Event()

    def watch():
        while not stop.is_set():
            keys_seen.append(lim.metric("sluice_limiter_store_keys"))
            rss_seen.append(rss_kib(pid))
            stop.wait(0.5)

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    started = time.monotonic()
    with legit:
        flood = start_load(f"http://127.0.0.1:{lim.port}/v1/check", connections=CONNECTIONS, requests=KEYS,
                           headers={"content-type": "application/json"}, body=check_body("per-ip/0/{ip}"),
                           timeout=30, threads=2)
        # Full, or (a run with room for every key) the flood done.
        wait_until(lambda: lim.metric("sluice_limiter_store_keys") >= MAX_KEYS or flood.proc.poll() is not None,
                   timeout=3600, what="the store full")
        full_at = time.monotonic() - started
        report = flood.wait(timeout=7200)
        rss_full = rss_kib(pid)
        filled = lim.metric("sluice_limiter_store_keys")
        newcomer = _check(lim.port, "legit/newcomer")
    elapsed = time.monotonic() - started
    stop.set()
    watcher.join()
    held = lim.metric("sluice_limiter_store_keys")
    after = rss_kib(pid)
    capacity = lim.metric("sluice_limiter_capacity_denials_total")
    flood_admitted = lim.metric('sluice_limiter_decisions_total{domain="flood",result="allowed"}') \
        - sum(legit.admitted) - (1 if newcomer[0] else 0)
    exposition_after = series(_metrics_text(lim))

    assert report.timeouts == report.io_errors == report.connect_errors == 0
    assert report.status == {200: KEYS}
    assert not legit.failures, legit.failures[:3]
    assert max(keys_seen + [held]) <= MAX_KEYS
    # Every key admitted is held, every other was denied for lack of room.
    assert held == flood_admitted + LEGIT_KEYS + (1 if newcomer[0] else 0)
    assert capacity == KEYS - flood_admitted + (0 if newcomer[0] else 1)
    if KEYS >= 4 * MAX_KEYS:
        # Enough keys to fill every shard: exactly --max-keys held.
        assert held == MAX_KEYS
    # Each legitimate key: exactly its quota, however often it came back.
    assert legit.admitted == [QUOTA] * LEGIT_KEYS, legit.admitted
    assert min(legit.sent) >= 2 * QUOTA
    if held == MAX_KEYS:
        assert newcomer == (False, 1000)
    assert exposition_after == exposition_before
    peak = max(rss_seen + [after])
    if not LONG:
        assert (peak - before) * 1024 < 64 * MIB
    figures = {
        "keys": KEYS, "max_keys": MAX_KEYS, "shards": SHARDS, "key_example": "flood/per-ip/0/1.2.3.4|gcra|86400000",
        "store_keys_max_seen": int(max(keys_seen + [held])), "flood_admitted": int(flood_admitted),
        "keys_when_measured": int(filled),
        "capacity_denials": int(capacity), "seconds": round(elapsed, 1), "store_full_at_s": round(full_at, 1),
        "checks_per_s": round(report.rate), "latency_us": report.latency_us,
        "rss_kib": {"before": before, "store_full": rss_full, "peak": peak, "after": after},
        "bytes_per_key_held": round((rss_full - before) * 1024 / max(1, filled - LEGIT_KEYS)),
        "legit": {"keys": LEGIT_KEYS, "quota": QUOTA, "admitted_each": sorted(set(legit.admitted)),
                  "sent_each_min": min(legit.sent), "sent_each_max": max(legit.sent)},
        "newcomer_once_full": {"allowed": newcomer[0], "retry_after_ms": newcomer[1]},
        "metrics_series": {"before": len(exposition_before), "after": len(exposition_after)},
    }
    print("\nstore flood: " + json.dumps(figures, indent=1))
    if LONG:
        write_section(figures)


def _metrics_text(lim) -> str:
    conn = http.client.HTTPConnection("127.0.0.1", lim.port, timeout=10)
    conn.request("GET", "/metrics")
    text = conn.getresponse().read().decode()
    conn.close()
    return text


def _check(port: int, key: str) -> tuple[bool, int]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    conn.request("POST", "/v1/check", body=check_body(key), headers={"content-type": "application/json"})
    answer = json.loads(conn.getresponse().read())
    conn.close()
    return answer["allowed"], answer["limits"][0]["retry_after_ms"]


def test_a_flood_of_domains_adds_at_most_256_domain_series(processes):
    """Domains label `sluice_limiter_decisions_total`: past 256, `_other`."""
    lim = processes.limiter()
    conn = http.client.HTTPConnection("127.0.0.1", lim.port, timeout=10)
    for i in range(1000):
        conn.request("POST", "/v1/check", headers={"content-type": "application/json"}, body=json.dumps(
            {"domain": f"d{i}", "limits": [{"key": "k", "algorithm": "gcra", "requests": 1, "window_ms": 1000}]}))
        assert conn.getresponse().read()
    conn.close()
    text = _metrics_text(lim)
    domains = set(re.findall(r'sluice_limiter_decisions_total\{domain="([^"]*)"', text))
    assert len(domains) == 257 and "_other" in domains, len(domains)
    assert lim.metric('sluice_limiter_decisions_total{domain="_other",result="allowed"}') == 1000 - 256
    assert len(text) < 64 * 1024, len(text)


def write_section(f: dict):
    """Writes (or replaces) this scenario's section of tests/flood/RESULTS.md."""
    import subprocess
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                            cwd=Path(__file__).parent).stdout.strip()
    r = f["rss_kib"]
    mib = lambda kib: f"{kib / 1024:.1f} MiB"  # noqa: E731
    heading = f"{SECTION} (--max-keys {f['max_keys']})"
    lines = [
        heading, "",
        f"- commit: `{commit}`; date: {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}",
        f"- command: `make store-flood STORE_FLOOD_KEYS={f['keys']} STORE_MAX_KEYS={f['max_keys']}` (that is: "
        f"`SLUICE_STORE_FLOOD=1 STORE_FLOOD_KEYS={f['keys']} STORE_MAX_KEYS={f['max_keys']} "
        ".venv/bin/python -m pytest tests/test_store_flood.py -s -q`)",
        f"- {f['keys']:,} distinct keys, one `POST /v1/check` each, {CONNECTIONS} connections, straight to "
        f"the limiter (`--store memory --max-keys {f['max_keys']} --shards {f['shards']}`); "
        f"{f['legit']['keys']} legitimate keys, quota {f['legit']['quota']} a day each, checked in rounds "
        "from before the flood to its end",
        f"- machine: {os.cpu_count()} CPUs, shared (the driver on the same machine)", "",
        "| figure | value |", "| --- | --- |",
        f"| keys held at most (`--max-keys`) | {f['store_keys_max_seen']:,} ({f['max_keys']:,}) |",
        f"| flood keys admitted / denied for lack of room | {f['flood_admitted']:,} / "
        f"{f['keys'] - f['flood_admitted']:,} |",
        f"| limiter RSS before / with {f['keys_when_measured']:,} keys / peak / after | {mib(r['before'])} / {mib(r['store_full'])} / "
        f"{mib(r['peak'])} / {mib(r['after'])} |",
        f"| bytes of RSS per key held (RSS then, less before, over the flood keys held) | {f['bytes_per_key_held']} |",
        f"| time: store full (or flood done) at / flood done | {f['store_full_at_s']} s / {f['seconds']} s |",
        f"| checks/s; latency p99 / max | {f['checks_per_s']:,}; {f['latency_us']['p99']} / "
        f"{f['latency_us']['max']} us |",
        f"| legitimate keys: admitted each (quota); sent each | {f['legit']['admitted_each']} "
        f"({f['legit']['quota']}); {f['legit']['sent_each_min']} to {f['legit']['sent_each_max']} |",
        f"| a new key once full | allowed {f['newcomer_once_full']['allowed']}, retry_after_ms "
        f"{f['newcomer_once_full']['retry_after_ms']} |",
        f"| `/metrics` series before / after | {f['metrics_series']['before']} / {f['metrics_series']['after']} |",
        "", "```json", json.dumps(f, indent=1), "```", "",
    ]
    text = RESULTS.read_text() if RESULTS.exists() else "# Flood results\n"
    head, found, rest = text.partition(heading + "\n")
    tail = rest[rest.find("\n## ") + 1:] if found and "\n## " in rest else ""
    RESULTS.write_text(head.rstrip("\n") + "\n\n" + "\n".join(lines) + ("\n" + tail if tail else ""))
