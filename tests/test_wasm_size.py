"""The size of the built filter, `build/sluice.wasm` (`make wasm`).

Envoy compiles the whole module before its listener takes connections (V8's
optimising compiler, every function, once per module), so the module's size
is most of what Sluice adds to Envoy's start: see bench/README.md, *Plugin
start and configuration push*. Size is deterministic for a given source and
toolchain, so the budget is checked exactly; a change that grows the module
beyond it raises the budget here, with the reason in its commit.
"""

from __future__ import annotations

from pathlib import Path

from support import BUILD

MODULE = BUILD / "sluice.wasm"
# 690 KiB: the module with the quota endpoint and top limited keys after
# `wasm-opt -O3` (684,266 B, of which 28,404 B for top limited keys and the
# access log's key, `sha2` 6,787 B of it; 731,068 B at opt-level 3 alone
# before them), and 1% more.
# The target is 400 KB (issue 39), which build settings alone do not reach.
BUDGET_BYTES = 690 * 1024


def leb128(data: bytes, at: int) -> tuple[int, int]:
    """An unsigned LEB128 integer at `at`: (value, offset after it)."""
    value = shift = 0
    while True:
        byte = data[at]
        at += 1
        value |= (byte & 0x7F) << shift
        shift += 7
        if not byte & 0x80:
            return value, at


def sections(module: Path) -> list[tuple[int, str, int]]:
    """(id, custom section name or "", size in bytes) of each section."""
    data = module.read_bytes()
    assert data[:8] == b"\0asm\1\0\0\0", f"{module} is not a wasm module"
    out, at = [], 8
    while at < len(data):
        sid = data[at]
        size, start = leb128(data, at + 1)
        name = ""
        if sid == 0:
            length, name_at = leb128(data, start)
            name = data[name_at:name_at + length].decode()
        out.append((sid, name, size))
        at = start + size
    return out


def test_the_module_is_within_its_budget():
    size = MODULE.stat().st_size
    assert size <= BUDGET_BYTES, f"{MODULE} is {size:,} B, over its budget of {BUDGET_BYTES:,} B"


def test_the_module_ships_without_custom_sections():
    # No name section, debug information or producers: the release profile
    # strips them (Cargo.toml, `strip = "symbols"` for the package sluice).
    custom = [name for sid, name, _ in sections(MODULE) if sid == 0]
    assert custom == []


def test_sections_are_read_whole(tmp_path):
    # A module of one type section (a function type) and one custom section.
    module = tmp_path / "m.wasm"
    module.write_bytes(b"\0asm\1\0\0\0" + b"\x01\x04\x01\x60\x00\x00" + b"\x00\x05\x04name")
    assert sections(module) == [(1, "", 4), (0, "name", 5)]
