"""The algorithms, as `sluice-core` names them.

The list is read from the core's source, where each algorithm's
configuration name is written once (`Algorithm::X => "name"`), so a new
algorithm reaches every parametrised test and benchmark row by itself.
"""

from __future__ import annotations

import re

from .paths import ROOT

CORE_SRC = ROOT / "crates" / "core" / "src"

_NAME = re.compile(r'Algorithm::(\w+)\s*=>\s*"([a-z][a-z0-9_]*)"')


def core_algorithms() -> list[str]:
    """Every algorithm name in `sluice-core`, in the order of its source."""
    names: list[str] = []
    for path in [CORE_SRC / "algorithm.rs", *sorted(CORE_SRC.rglob("*.rs"))]:
        if not path.exists():
            continue
        for _, name in _NAME.findall(path.read_text()):
            if name not in names:
                names.append(name)
        if names:
            return names
    raise RuntimeError(f"no `Algorithm::X => \"name\"` arms found under {CORE_SRC}: "
                       "tests/support/algorithms.py reads the algorithm names from there")


ALGORITHMS: list[str] = core_algorithms()
