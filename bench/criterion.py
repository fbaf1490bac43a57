"""sluice-core's criterion benchmark: run it and read its table."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

_NS = {"ps": 0.001, "ns": 1.0, "µs": 1000.0, "us": 1000.0, "ms": 1_000_000.0, "s": 1_000_000_000.0}
_TIME = re.compile(
    r"^(?P<name>\S+)?\s*\n?\s*time:\s+\[(?P<lo>[\d.]+) (?P<lou>\S+) (?P<mid>[\d.]+) (?P<midu>\S+) "
    r"(?P<hi>[\d.]+) (?P<hiu>\S+)\]", re.M)


def parse(text: str) -> list[dict]:
    """Benchmarks of criterion's output: name and the median estimate in ns.

    Criterion prints a long name on its own line and `time: [...]` on the
    next; a short name shares the line.
    """
    out = []
    for m in _TIME.finditer(text):
        name = m.group("name")
        if not name:
            continue
        out.append({"name": name, "ns": float(m.group("mid")) * _NS.get(m.group("midu"), 1.0)})
    return out


def run(root: Path, cargo: str = "cargo", short: bool = False) -> tuple[list[dict], str]:
    """Runs `cargo bench -p sluice-core` (shorter measurements than criterion's
    defaults, and shorter still if `short`); returns the parsed table and the
    raw output."""
    times = ["--warm-up-time", "0.5", "--measurement-time", "1"] if short else \
        ["--warm-up-time", "1", "--measurement-time", "3"]
    proc = subprocess.run([cargo, "bench", "-p", "sluice-core", "--bench", "decide", "--", *times],
                          cwd=root, capture_output=True, text=True, timeout=1800)
    if proc.returncode != 0:
        raise RuntimeError(f"cargo bench failed:\n{proc.stderr[-4000:]}")
    return parse(proc.stdout), proc.stdout
