"""Which modules of a Rust crate name which, read from the source.

A module is a file of the crate's source folder (`mod.rs`, `lib.rs` and
`main.rs` stand for their folder); test modules (`tests/` folders,
`tests.rs`, `*_tests.rs`) are left out, and so is the code under
`#[cfg(test)]` unless asked for. A module names another through a
`crate::`, `super::` or `self::` path, in a `use` item or in the code: the
path reaches the longest module it spells, and, when that module re-exports
the next name (`pub use`), the module the name comes from as well.
"""

import os
import re
from pathlib import Path

from .paths import ROOT

_WORD = r"[A-Za-z_]\w*"
_PATH = re.compile(rf"\b(crate|super|self)((?:\s*::\s*{_WORD})+)")
_USE = re.compile(r"\buse\s+([^;]+);", re.S)
_PUB_USE = re.compile(r"\bpub(?:\s*\([^)]*\))?\s+use\s+([^;]+);", re.S)
_LITERAL = re.compile(r"""
    b?r(?P<hashes>\#*)"(?:.|\n)*?"(?P=hashes)   # raw string
  | b?"(?:\\.|[^"\\])*"                          # string
  | b?'(?:\\u\{[0-9A-Fa-f]+\}|\\.|[^'\\\n])'     # char (a lifetime is no literal)
  | //[^\n]*                                     # line comment
  | /\*                                          # block comment (nested: below)
""", re.X | re.S)
_TEST_ATTR = re.compile(r"#\s*\[\s*cfg\s*\(\s*test\s*\)\s*\]")
_ATTR = re.compile(r"\s*#\s*\[")


def _block_comment_end(text: str, start: int) -> int:
    """The index after the block comment opened at `start` (comments nest)."""
    depth, i = 0, start
    while i < len(text):
        if text.startswith("/*", i):
            depth, i = depth + 1, i + 2
        elif text.startswith("*/", i):
            depth, i = depth - 1, i + 2
            if depth == 0:
                return i
        else:
            i += 1
    return len(text)


def strip(text: str) -> str:
    """`text` without comments, and with every string or char literal
    emptied (`""`): what is left is code."""
    out, i = [], 0
    while True:
        m = _LITERAL.search(text, i)
        if not m:
            out.append(text[i:])
            return "".join(out)
        out.append(text[i:m.start()])
        token = m.group(0)
        if token.startswith("/*"):
            i = _block_comment_end(text, m.start())
        elif token.startswith("//"):
            i = m.end()
        else:
            out.append('""')
            i = m.end()


def _item_end(code: str, start: int) -> int:
    """The index after the item that starts at `start`: its `;`, or the brace
    closing its body (a `use` tree's braces are no body)."""
    while (m := _ATTR.match(code, start)) is not None:
        depth, i = 0, m.end() - 1
        while i < len(code):
            depth += {"[": 1, "]": -1}.get(code[i], 0)
            i += 1
            if depth == 0:
                break
        start = i
    is_use = re.match(r"\s*(?:pub(?:\s*\([^)]*\))?\s+)?use\b", code[start:]) is not None
    depth = 0
    for i in range(start, len(code)):
        ch = code[i]
        if ch == ";" and depth == 0:
            return i + 1
        if ch == "{" and not is_use:
            depth += 1
        elif ch == "}" and not is_use:
            depth -= 1
            if depth == 0:
                return i + 1
    return len(code)


def without_tests(code: str) -> str:
    """`code` (stripped) without the items under `#[cfg(test)]`."""
    out, i = [], 0
    while (m := _TEST_ATTR.search(code, i)) is not None:
        out.append(code[i:m.start()])
        i = _item_end(code, m.end())
    out.append(code[i:])
    return "".join(out)


def code(path: Path, tests: bool = False) -> str:
    """The code of the file at `path`, with its test items when `tests`."""
    text = strip(path.read_text(encoding="utf-8", errors="replace"))
    return text if tests else without_tests(text)


def expand(tree: str) -> list[str]:
    """`a::{b as x, c::{d}}` as its paths (`a::b as x`, `a::c::d`)."""
    tree = re.sub(r"\s+", "", re.sub(r"\s+as\s+", "@", tree))
    if "{" not in tree:
        return [tree.replace("@", " as ")]
    cut = tree.index("{")
    prefix, inner = tree[:cut], tree[cut + 1:tree.rindex("}")]
    parts, depth, start = [], 0, 0
    for i, ch in enumerate(inner):
        depth += {"{": 1, "}": -1}.get(ch, 0)
        if ch == "," and depth == 0:
            parts.append(inner[start:i])
            start = i + 1
    parts.append(inner[start:])
    return [prefix + q for p in parts if p for q in expand(p)]


def crate_modules(src: str) -> dict[tuple, str]:
    """{module path: file relative to `src`} of a crate's sources, tests left out."""
    base = ROOT / src
    mods = {}
    for root, dirs, files in os.walk(base):
        dirs[:] = [d for d in dirs if d != "tests"]
        for f in files:
            if f.endswith(".rs") and f != "tests.rs" and not f.endswith("_tests.rs"):
                rel = os.path.relpath(os.path.join(root, f), base)
                parts = rel[:-3].split(os.sep)
                if parts[-1] in ("mod", "lib", "main"):
                    parts = parts[:-1]
                mods[tuple(parts)] = rel
    return mods


def _absolute(segs: list[str], here: tuple, mods: dict) -> list[str] | None:
    """The path `segs`, written in module `here`, from the crate root; `None`
    for a path into another crate. A bare first name is a child module's."""
    if segs[0] == "crate":
        return segs[1:]
    if segs[0] in ("self", "super"):
        at, rest = list(here), segs[1:] if segs[0] == "self" else segs
        while rest and rest[0] == "super":
            at, rest = at[:-1], rest[1:]
        return at + rest
    if (*here, segs[0]) in mods:
        return list(here) + segs
    return None


def _reexports(src: str, mods: dict) -> dict[tuple, dict[str, list[str]]]:
    """{module: {name it re-exports: the name's path from the crate root}}."""
    out = {}
    for mod, rel in mods.items():
        names = {}
        for m in _PUB_USE.finditer(code(ROOT / src / rel)):
            for path in expand(m.group(1)):
                segs = [s for s in path.split("::") if s]
                if not segs or segs[-1] == "*":
                    continue
                original, _, alias = segs[-1].partition(" as ")
                full = _absolute(segs[:-1] + [original], mod, mods)
                if full is not None:
                    names[alias or original] = full
        out[mod] = names
    return out


def _reached(full: list[str], mods: dict, reexports: dict) -> list[tuple]:
    """The modules a path from the crate root reaches: the longest module it
    spells, then, through re-exports, where the next name comes from."""
    reached = []
    for _ in range(16):
        n = next(n for n in range(len(full), -1, -1) if tuple(full[:n]) in mods)
        module = tuple(full[:n])
        reached.append(module)
        target = reexports[module].get(full[n]) if n < len(full) else None
        if target is None:
            return reached
        full = target + full[n + 1:]
    return reached


def imports(src: str, tests: bool = False) -> dict[tuple, set[tuple]]:
    """{module: the other modules its code names}; the code under
    `#[cfg(test)]` counts when `tests`."""
    mods = crate_modules(src)
    reexports = _reexports(src, mods)
    out = {}
    for mod, rel in mods.items():
        text = code(ROOT / src / rel, tests)
        paths = [p for m in _USE.finditer(text) for p in expand(m.group(1))]
        paths += [m.group(1) + re.sub(r"\s+", "", m.group(2)) for m in _PATH.finditer(text)]
        targets = set()
        for path in paths:
            segs = [s.split(" as ")[0] for s in path.split("::") if s]
            if segs and segs[0] in ("crate", "super", "self"):
                full = _absolute(segs, mod, mods)
                targets.update(_reached(full, mods, reexports))
        out[mod] = targets - {mod}
    return out


def circles(graph: dict[tuple, set[tuple]]) -> list[list[tuple]]:
    """The groups (of more than one module) that reach each other."""
    index, low, stack, on, out = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                on.discard(w)
                group.append(w)
                if w == v:
                    break
            if len(group) > 1:
                out.append(sorted(group))

    for v in list(graph):
        if v not in index:
            visit(v)
    return out
