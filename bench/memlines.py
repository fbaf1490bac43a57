#!/usr/bin/env python3
"""The 64-byte lines of a filter module's linear memory that one request
touches, split into stack, static data and heap: how much of the caches a
request's own state takes beside Envoy's, which a change can grow or shrink
without changing the CPU the module's code takes in isolation.

Instruments a copy of MODULE with binaryen (`wasm-dis`, `wasm-as`,
`wasm-opt --instrument-memory`: every load and store, and each bulk copy and
fill turned into a host call first) and drives it with `bench/v8host.js
--lines` (one request after 1,000, the `local-gcra` row's configuration
unless `--config` says). Needs node and binaryen (`make binaryen`).

    bench/memlines.py build/sluice.wasm [--config FILE]
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import tempfile
from pathlib import Path

BENCH = Path(__file__).resolve().parent
# Host functions standing in for the bulk-memory instructions, which
# `--instrument-memory` leaves out.
BULK = (' (import "env" "sluice_copy" (func $sluice_copy (param i32 i32 i32)))\n'
        ' (import "env" "sluice_fill" (func $sluice_fill (param i32 i32 i32)))\n')


def instrument(module: Path, out: Path) -> None:
    """Writes to `out` `module` reporting every access to its memory."""
    work = out.parent
    text = work / "module.wat"
    subprocess.run(["wasm-dis", "--all-features", str(module), "-o", str(text)], check=True)
    wat = text.read_text()
    wat = re.sub(r"\(memory\.copy\b", "(call $sluice_copy", wat)
    wat = re.sub(r"\(memory\.fill\b", "(call $sluice_fill", wat)
    first = wat.index(" (import")
    text.write_text(wat[:first] + BULK + wat[first:])
    bulk = work / "bulk.wasm"
    subprocess.run(["wasm-as", "--all-features", str(text), "-o", str(bulk)], check=True)
    subprocess.run(["wasm-opt", "--all-features", str(bulk), "--instrument-memory", "-o", str(out)], check=True)


def lines(module: Path, config: Path | None = None) -> dict:
    """`{"lines", "stack", "data", "heap"}` for one request of `module`."""
    with tempfile.TemporaryDirectory() as tmp:
        instrumented = Path(tmp) / "instrumented.wasm"
        instrument(module, instrumented)
        cmd = ["node", str(BENCH / "v8host.js"), str(instrumented), "--lines"]
        if config:
            cmd += ["--config", str(config)]
        out = subprocess.run(cmd, capture_output=True, text=True, check=True)
        return json.loads(out.stdout)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("module", type=Path)
    p.add_argument("--config", type=Path, help="the filter configuration (default: the local-gcra row's)")
    a = p.parse_args(argv)
    print(json.dumps(lines(a.module, a.config)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
