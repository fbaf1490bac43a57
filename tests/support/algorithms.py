"""The algorithms, as `sluice-core` names them.

The list is read from the table in `crates/core/src/algorithm.rs` that
declares each algorithm once (`Variant = code, "name";`), so a new algorithm
reaches every parametrised test and benchmark row by itself.
"""

from __future__ import annotations

import re

from .paths import ROOT

CORE_SRC = ROOT / "crates" / "core" / "src"

_ENTRY = re.compile(r'^\s*([A-Z]\w*)\s*=\s*\d+\s*,\s*"([a-z][a-z0-9_]*)"\s*;', re.MULTILINE)


def core_algorithms() -> list[str]:
    """Every algorithm name in `sluice-core`, in the order of its table."""
    source = CORE_SRC / "algorithm.rs"
    names = [name for _, name in _ENTRY.findall(source.read_text())]
    if not names:
        raise RuntimeError(f"no `Variant = code, \"name\";` entries in {source}: "
                           "tests/support/algorithms.py reads the algorithm names from there")
    return names


ALGORITHMS: list[str] = core_algorithms()
