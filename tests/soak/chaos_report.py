"""The chaos soak's section of tests/soak/RESULTS.md (`soak/chaos.py`)."""

from __future__ import annotations

import datetime
import os

from soak.harness import LIMITER_TIMEOUT_S
from soak.steady import STEADY_PER_WINDOW, STEADY_QUOTA, STEADY_WINDOW_S


def mb(kb) -> str:
    return "-" if kb is None else f"{kb / 1024:.1f}"


def ratio(pair) -> str:
    done, total = pair
    return f"{done}/{total}" if total else "-"


def markdown(run, checks, ok: bool, rows: list[dict]) -> str:
    commit, dirty = run.commit
    lines = [
        "# Chaos soak results",
        "",
        f"- commit: `{commit}`{' (with uncommitted changes)' if dirty else ''}",
        f"- date: {datetime.datetime.now(datetime.timezone.utc).strftime('%Y-%m-%d %H:%M UTC')}",
        f"- command: `make soak-long SOAK_LONG_SECONDS={run.seconds:.0f}` "
        f"(`tests/soak/chaos.py --seconds {run.seconds:.0f} --rate {run.rate:.0f} --flood-rate {run.flood_rate:.0f}`)",
        f"- machine: {os.cpu_count()} cores shared with other work; load average at the end {os.getloadavg()[0]:.2f}",
        f"- set-up: 2 Envoys, 2 sluice-limiters on one Redis, `failure_mode: allow`, limiter timeout "
        f"{LIMITER_TIMEOUT_S * 1000:.0f} ms; traffic {run.rate:.0f}/s through both Envoys; steady clients: 4 global "
        f"(both Envoys, a fresh key per window) and 4 local (Envoy 0, one key each, a fixed window aligned to the "
        f"epoch), each {STEADY_PER_WINDOW} requests per {STEADY_WINDOW_S:.0f}-s window, quota {STEADY_QUOTA}",
        f"- {run.cycles} cycles of {run.cycle:.0f} s: key flood; kill -9 limiter1 + restart; configuration pushes "
        f"every second under a key flood; Redis stop + start; Redis stop + start under a key flood "
        f"({run.pushes} pushes, {sum(1 for f in run.faults if f['redis'])} Redis restarts in all)",
        f"- chart: [chaos.svg](chaos.svg) (from [chaos.json](chaos.json) by `tests/soak/chart.py`)",
        f"- verdict: **{'PASS' if ok else 'FAIL'}**",
        "",
        "## Checks",
        "",
        "| check | result | figures |",
        "| --- | --- | --- |",
    ]
    for name, passed, detail in checks:
        lines.append(f"| {name} | {'pass' if passed else '**FAIL**'} | {detail} |")
    lines += ["", "## Redis restarts", "",
              "Recovery: from Redis answering again to the last store error the limiters counted (sampled every "
              "0.1 s), and to the last failure the Envoys counted (their counters are flushed every 0.5 s).", "",
              "| t (s) | fault | limiters' last store error | Envoys' last failure |", "| --- | --- | --- | --- |"]
    for r in run.recoveries():
        lines.append(f"| {r['start']:.0f} | {r['what']} | {r['limiter_s']:.2f} s | {r['envoy_s']:.2f} s |")
    lines += ["", "## Per minute", "",
              "Traffic latency of the minute (`sluice-load`); steady windows ending in the minute, exact of judged "
              "(global: those no store fault reached; reached: exact of those a fault reached, not judged); "
              "RSS in MB at the minute's end (Redis: its RSS, and used_memory).", "",
              "| min | traffic sent | non-200 | timeouts | p50 ms | p99 ms | max ms | local exact | global exact "
              "| reached | envoy0 | envoy1 | limiter0 | limiter1 | redis RSS | redis used | redis keys | faults |",
              "| " + " | ".join(["---"] * 18) + " |"]
    for r in rows:
        lines.append(
            f"| {r['minute']} | {r['sent']} | {r['non_200']} | {r['timeouts']} | {r['p50_ms']:.1f} | "
            f"{r['p99_ms']:.1f} | {r['max_ms']:.1f} | {ratio(r['local_exact'])} | {ratio(r['global_exact'])} | "
            f"{ratio(r['global_reached'])} | {mb(r['envoy0'])} | {mb(r['envoy1'])} | {mb(r['limiter0'])} | "
            f"{mb(r['limiter1'])} | {mb(r['redis_rss'])} | {mb(r['redis'])} | "
            f"{r['redis_keys'] if r['redis_keys'] is not None else '-'} | {'; '.join(r['faults']) or '-'} |")
    lines += ["", "## Memory", "", "In MB. Flat: the end within 25% + 16 MB of after the first cycle "
              "(judged for envoy0 and limiter0, never restarted).", "",
              "| process | after the first cycle | peak | end | |", "| --- | --- | --- | --- | --- |"]
    for name, warm, peak, end, verdict in run.rss_rows():
        lines.append(f"| {name} | {mb(warm)} | {mb(peak)} | {mb(end)} | {verdict} |")
    return "\n".join(lines) + "\n"
