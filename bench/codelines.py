#!/usr/bin/env python3
"""The module code one request runs: the straight-line stretches of a filter
module's functions that one request enters, counted in wasm instructions by
function. Beside Envoy's own code, what a request runs of the module takes
the caches from Envoy, and costs Envoy more than the module's CPU in
isolation shows (bench/README.md, *Where the time goes*).

Instruments a copy of MODULE with a host call at the start of every
stretch (a function's start, after every `end`, `loop`, `if`, `else` and
`br_if`), printed and re-read by wabt (`wasm2wat`, `wat2wasm`), and drives
it with `bench/v8host.js --probes` (one request after 1,000, the
`local-gcra` row's configuration unless `--config` says; with `--with
CALL`, the first request that makes host call CALL, with what its root
does for it, such as a lease renewal's `enqueue`). A stretch counts
up to the next probe or the first branch, return or trap. Functions are
listed by name in a build that keeps them (`make wasm-profiling`), by
number otherwise. Needs node and wabt (`make wabt`).

    bench/codelines.py build/sluice-profiling.wasm [--config FILE] [--with CALL] [--top N]
"""

from __future__ import annotations

import argparse
import collections
import json
import re
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

BENCH = Path(__file__).resolve().parent
PROBE = '  (import "env" "sluice_probe" (func $sluice_probe (param i32)))'
# After these, the next instruction may be reached from elsewhere.
OPENS = re.compile(r"^(end|loop|if|else|br_if)\b")
# After these, the stretch's instructions are not run.
ENDS = re.compile(r"^(br|br_table|return|unreachable)\b")


@dataclass
class Stretch:
    """A probe's stretch: its function and the instructions it runs."""

    function: str
    instructions: int = 0
    closed: bool = False


def instrument(text: str) -> tuple[str, list[Stretch]]:
    """`text` (wabt's `wasm2wat` of a module) with the probes, and the
    stretch of each probe by its number."""
    out: list[str] = []
    stretches: list[Stretch] = []
    function = None
    in_locals = False

    def probe(indent: str) -> None:
        out.append(f"{indent}i32.const {len(stretches)}")
        out.append(f"{indent}call $sluice_probe")
        stretches.append(Stretch(function or "?"))

    lines = text.splitlines()
    last_import = max(i for i, line in enumerate(lines) if line.startswith("  (import "))
    for at, line in enumerate(lines):
        stripped = line.strip()
        if line.startswith("  (func "):
            function = line.split()[1]
            in_locals = True
        elif function is not None and not line.startswith("    "):
            function = None
        elif function is not None:
            if in_locals and stripped.startswith("(local"):
                out.append(line)
                continue
            indent = line[: len(line) - len(line.lstrip())]
            if in_locals:
                in_locals = False
                probe(indent)
            out.append(line)
            current = stretches[-1]
            if not current.closed:
                current.instructions += 1
            current.closed = current.closed or bool(ENDS.match(stripped))
            # The function's last line closes it (`end)`): nothing follows.
            if OPENS.match(stripped) and stripped.count("(") >= stripped.count(")"):
                probe(indent)
            continue
        out.append(line)
        if at == last_import:
            out.append(PROBE)
    return "\n".join(out) + "\n", stretches


def run(module: Path, config: Path | None = None, making: str | None = None) -> dict[str, int]:
    """Instructions one request runs of `module`, by function (the first
    request that makes host call `making`, and its root's work for it, if
    given)."""
    with tempfile.TemporaryDirectory() as tmp:
        printed = subprocess.run(["wasm2wat", "--generate-names", str(module)], capture_output=True, text=True, check=True)
        text, stretches = instrument(printed.stdout)
        wat, probed = Path(tmp) / "probed.wat", Path(tmp) / "probed.wasm"
        wat.write_text(text)
        subprocess.run(["wat2wasm", str(wat), "-o", str(probed)], check=True)
        cmd = ["node", str(BENCH / "v8host.js"), str(probed)]
        cmd += ["--probes-with", making] if making else ["--probes"]
        if config:
            cmd += ["--config", str(config)]
        fired = json.loads(subprocess.run(cmd, capture_output=True, text=True, check=True).stdout)
    by_function: collections.Counter[str] = collections.Counter()
    for probe in fired:
        by_function[stretches[probe].function] += stretches[probe].instructions
    return dict(by_function)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("module", type=Path)
    parser.add_argument("--config", type=Path)
    parser.add_argument("--with", dest="making", help="the first request that makes this host call")
    parser.add_argument("--top", type=int, default=25, help="functions listed (0: the total only)")
    args = parser.parse_args(argv)
    by_function = run(args.module, args.config, args.making)
    print(json.dumps({"instructions": sum(by_function.values()), "functions": len(by_function)}))
    for name, count in collections.Counter(by_function).most_common(args.top):
        print(f"{count:6d}  {name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
