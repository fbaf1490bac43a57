#!/usr/bin/env python3
"""What the code and the memory a request runs through cost Envoy, beside
what they cost in isolation: the `host_calls` reference filter alone, then
with work of a known size after its calls (`bench/noop` built with the
feature `footprint`): `repeat` (N calls of one small function), `spread`
(the same number of calls over N different functions: the same
instructions through N times the code), `touch` (one byte in each of N
64-byte lines), and any Sluice builds given (the `local-gcra` row's
configuration).

One Envoy per run (one worker on CPU 0, wrk on CPU 1), rows alternated
round by round (reversed every other round); each row's Envoy CPU per
request, its difference from `host-calls` paired by round, and, when node
and wabt are there, the module's CPU per request in Node's V8
(`bench/v8host.js`) and the wasm instructions one request runs
(`bench/codelines.py`).

    make bench-footprint [FOOTPRINT_ARGS="--rounds 9 --sluice a.wasm b.wasm"]
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH))
sys.path.insert(0, str(BENCH.parent / "tests"))

import codelines  # noqa: E402
import load  # noqa: E402
import report  # noqa: E402
import run  # noqa: E402
import setups  # noqa: E402
from support.envoy import start_envoy, wasm_filter  # noqa: E402

FLOOR = "host-calls"


@dataclass(frozen=True)
class Row:
    """One filter under load: its module and configuration."""

    name: str
    wasm: Path
    config: dict


def rows(noop: Path, n: int, sluice: list[Path]) -> list[Row]:
    """The floor, the three kinds of work, and each Sluice build."""
    out = [Row(FLOOR, noop, {"mode": "host_calls"})]
    out += [Row(f"repeat-{n}", noop, {"mode": "repeat", "n": n}),
            Row(f"spread-{n}", noop, {"mode": "spread", "n": n})]
    out += [Row(f"touch-{lines}", noop, {"mode": "touch", "n": lines}) for lines in (128, 512)]
    local = setups.sluice_config({"algorithm": "gcra", **setups.ALLOW_LIMIT})
    out += [Row(f"sluice {path.name}", path, local) for path in sluice]
    return out


def envoy_cpu(row: Row, seconds: float, workdir: Path, wrk: str) -> float:
    """Envoy's CPU µs per request under `row`'s filter, after a second's warm-up."""
    config = wasm_filter(row.config, wasm_path=row.wasm, vm_id="bench", name="bench")
    envoy = start_envoy(workdir, [config], concurrency=1, log_level="warn", component_log_level=None, cpus="0")
    try:
        url = f"http://127.0.0.1:{envoy.port}/"
        load.run(wrk, url, 1, "keys.lua", cpus="1")
        return load.run(wrk, url, seconds, "keys.lua", cpus="1", envoy_pid=envoy.process.pid).envoy_cpu_us
    finally:
        envoy.stop()


def isolated(row: Row, workdir: Path) -> tuple[float | None, int | None]:
    """The module's µs per request in Node's V8 and the instructions one
    request runs, each None without its tool."""
    path = workdir / "config.json"
    path.write_text(json.dumps(row.config))
    micros = instructions = None
    if shutil.which("node"):
        out = subprocess.run(["node", "--no-liftoff", "--no-wasm-lazy-compilation", str(BENCH / "v8host.js"),
                              str(row.wasm), "--config", str(path), "--requests", "100000"],
                             capture_output=True, text=True, check=True).stdout
        micros = min(float(line.split()[0]) for line in out.splitlines() if "per request" in line)
    if shutil.which("wasm2wat"):
        instructions = sum(codelines.run(row.wasm, path).values())
    return micros, instructions


def table(runs: dict[str, list[float]], isolation: dict[str, tuple]) -> list[str]:
    """The rows' medians and their differences from the floor's, paired by round."""
    floor = runs[FLOOR]
    lines = ["| row | Envoy CPU µs/request | − host-calls (paired) | dearer in | sign test p "
             "| module in Node, µs | wasm instructions run |", "| --- | --- | --- | --- | --- | --- | --- |"]
    for name, cpu in runs.items():
        diffs = [a - b for a, b in zip(cpu, floor)]
        micros, instructions = isolation.get(name, (None, None))
        paired = "–" if name == FLOOR else f"{statistics.median(diffs):+.2f}"
        dearer = "–" if name == FLOOR else f"{sum(d > 0 for d in diffs)} of {len(diffs)}"
        p = "–" if name == FLOOR else f"{report.sign_test(diffs):.2f}"
        node = "–" if micros is None else f"{micros:.2f}"
        code = "–" if instructions is None else f"{instructions:,}"
        lines.append(f"| {name} | {statistics.median(cpu):.2f} | {paired} | {dearer} | {p} | {node} | {code} |")
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--noop", type=Path, required=True, help="bench/noop built with the feature footprint")
    parser.add_argument("--sluice", type=Path, nargs="*", action="extend", default=[],
                        help="Sluice builds to run beside (repeatable)")
    parser.add_argument("--n", type=int, default=256, help="calls of the repeat and spread rows")
    parser.add_argument("--only", help="a regular expression: only the rows it finds (and host-calls)")
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--seconds", type=float, default=8)
    args = parser.parse_args(argv)
    wrk = shutil.which("wrk")
    if wrk is None:
        sys.exit("wrk is not installed (make wrk)")
    chosen = [row for row in rows(args.noop, args.n, args.sluice)
              if row.name == FLOOR or not args.only or re.search(args.only, row.name)]
    runs: dict[str, list[float]] = {row.name: [] for row in chosen}
    with tempfile.TemporaryDirectory() as tmp:
        workdir = Path(tmp)
        for r in range(args.rounds):
            for row in run.in_round(chosen, r):
                runs[row.name].append(envoy_cpu(row, args.seconds, workdir, wrk))
                print(f"round {r + 1}/{args.rounds} {row.name}: {runs[row.name][-1]:.2f} µs", file=sys.stderr)
        isolation = {row.name: isolated(row, workdir) for row in chosen}
    print("\n".join(table(runs, isolation)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
