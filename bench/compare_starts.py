#!/usr/bin/env python3
"""Envoy's ready time with several builds of the filter, alternated.

    .venv/bin/python bench/compare_starts.py [--rules N] [--concurrency C] [--starts K] A.wasm B.wasm ...

Starts Envoy K times with each module in turn (A B ... A B ...), Sluice
configured as in `bench/startup.py` (N rules, the last matching), and
prints each module's median, its starts, and how many of them the first
module beat: a change's effect on the start, under the same noise.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from pathlib import Path

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH))
sys.path.insert(0, str(BENCH.parent / "tests"))

import startup  # noqa: E402
import support  # noqa: E402


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("wasm", nargs="+", type=Path)
    p.add_argument("--rules", type=int, default=1)
    p.add_argument("--concurrency", type=int, default=2)
    p.add_argument("--starts", type=int, default=7)
    p.add_argument("--envoy", type=Path, default=BENCH.parent / ".venv" / "bin" / "envoy")
    a = p.parse_args()
    work = Path(tempfile.mkdtemp(prefix="sluice-starts-"))
    ms: dict[Path, list[float]] = {w: [] for w in a.wasm}
    for _ in range(a.starts):
        for w in a.wasm:
            filters = [support.wasm_filter(startup.sluice_rules(a.rules), w)]
            ms[w].append(startup.start_ms(a.envoy, work, filters, a.concurrency))
    first = ms[a.wasm[0]]
    print(f"{a.rules} rule(s), concurrency {a.concurrency}, {a.starts} starts each")
    for w, v in ms.items():
        beaten = sum(x < y for x, y in zip(first, v))
        print(f"{w.name}: median {statistics.median(v):.0f} ms, starts {', '.join(f'{x:.0f}' for x in v)}"
              + ("" if w == a.wasm[0] else f"; the first module was faster in {beaten} of {a.starts}"))


if __name__ == "__main__":
    main()
