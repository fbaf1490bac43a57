#!/usr/bin/env python3
"""The chaos soak's chart: tests/soak/chaos.json (figures per minute) to an SVG.

    .venv/bin/python tests/soak/chart.py [tests/soak/chaos.json [tests/soak/chaos.svg]]

matplotlib is a bench requirement (bench/requirements.txt; `make soak-long` installs it).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

plt.rcParams["svg.fonttype"] = "none"
plt.rcParams["svg.hashsalt"] = "sluice-soak"

HERE = Path(__file__).resolve().parent


def chart(figures: Path, out: Path) -> None:
    data = json.loads(figures.read_text())
    rows = data["minutes"]
    x = [r["minute"] + 1 for r in rows]  # the minute's end
    fig, (mem, lat, exact) = plt.subplots(3, 1, figsize=(9, 9), sharex=True)
    for name in ("envoy0", "envoy1", "limiter0", "limiter1", "redis_rss"):
        mem.plot(x, [(r[name] or 0) / 1024 if r[name] is not None else None for r in rows], marker=".", label=name)
    mem.set_ylabel("RSS (MB)")
    mem.set_yscale("log")
    mem.legend(loc="center right", fontsize="small")
    mem.set_title("Chaos soak: memory, traffic latency, steady clients per minute")
    lat.plot(x, [r["p50_ms"] for r in rows], marker=".", label="p50")
    lat.plot(x, [r["p99_ms"] for r in rows], marker=".", label="p99")
    lat.plot(x, [r["max_ms"] for r in rows], marker=".", label="max", linestyle=":")
    lat.set_ylabel("latency (ms)")
    lat.set_yscale("log")
    lat.legend(loc="upper right", fontsize="small")

    def share(key):
        return [100 * r[key][0] / r[key][1] if r[key][1] else None for r in rows]
    exact.plot(x, share("local_exact"), marker="o", label="local windows exact")
    exact.plot(x, share("global_exact"), marker="s", label="global windows exact (no store fault)")
    exact.plot(x, share("global_reached"), marker="x", linestyle=":", label="global windows a store fault reached")
    exact.set_ylabel("% of windows exact")
    exact.set_ylim(-5, 105)
    exact.set_xlabel("minute (grey lines: Redis stopped and started)")
    exact.legend(loc="lower left", fontsize="small")
    for f in data["faults"]:
        if f.get("redis"):
            for ax in (mem, lat, exact):
                ax.axvline(f["start"] / 60, color="grey", alpha=0.3, linewidth=0.8)
    fig.tight_layout()
    fig.savefig(out, format="svg", metadata={"Date": None})
    plt.close(fig)


if __name__ == "__main__":
    src = Path(sys.argv[1]) if len(sys.argv) > 1 else HERE / "chaos.json"
    dst = Path(sys.argv[2]) if len(sys.argv) > 2 else HERE / "chaos.svg"
    chart(src, dst)
