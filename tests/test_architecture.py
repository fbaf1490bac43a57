"""ARCHITECTURE.md is a map that stays true.

Every path it names exists. Its `layers` blocks list, for a folder of a
crate, that folder's modules from the bottom layer up; each module of the
folder is in exactly one layer, and no module imports one of a layer above
its own (read from `crate::`, `super::` and `self::` paths in the code,
tests left out). The filter's logic and the host have no import circle
among their files at all.
"""

import os
import re

from support import ROOT

ARCHITECTURE = ROOT / "ARCHITECTURE.md"
_CODE = re.compile(r"`([^`\s]+)`")
_EXTENSIONS = (".rs", ".lua", ".md", ".py", ".sh", ".yaml", ".json", ".toml", ".svg", ".Dockerfile")
_WORD = r"[A-Za-z_]\w*"
_PATH = re.compile(rf"\b(crate|super|self)((?:::{_WORD})+)")
_USE = re.compile(r"\buse\s+([^;]+);", re.S)
# The crates whose files may not reach each other in a circle.
_NO_CIRCLES = ("crates/filter/src", "src")


def _looks_like_path(token: str) -> bool:
    if token.startswith(("/", "http")) or not re.fullmatch(r"[\w.\-/*]+", token):
        return False
    return "/" in token or token.endswith(_EXTENSIONS)


def _prose() -> str:
    return re.sub(r"^```.*?^```", "", ARCHITECTURE.read_text(), flags=re.S | re.M)


def named_paths() -> dict[str, bool]:
    """{path named outside code blocks: whether it exists}."""
    out = {}
    for token in _CODE.findall(_prose()):
        if _looks_like_path(token):
            out[token] = bool(list(ROOT.glob(token.rstrip("/"))))
    return out


def layer_blocks() -> dict[str, list[list[str]]]:
    """{folder: its layers, bottom first} from the ```layers FOLDER blocks."""
    blocks = {}
    for folder, body in re.findall(r"^```layers (\S+)\n(.*?)^```", ARCHITECTURE.read_text(), flags=re.S | re.M):
        lines = [line.split("#")[0].split() for line in body.splitlines()]
        blocks[folder.rstrip("/")] = [line for line in lines if line]
    return blocks


def _code(path) -> str:
    text = path.read_text(encoding="utf-8", errors="replace")
    text = text.split("#[cfg(test)]")[0]
    text = re.sub(r"/\*.*?\*/", "", text, flags=re.S)
    return re.sub(r"//[^\n]*", "", text)


def _expand(tree: str) -> list[str]:
    """`a::{b, c::{d}}` as its paths."""
    tree = re.sub(r"\s+", "", tree)
    if "{" not in tree:
        return [tree]
    cut = tree.index("{")
    prefix, inner = tree[:cut], tree[cut + 1:tree.rindex("}")]
    parts, depth, start = [], 0, 0
    for i, ch in enumerate(inner):
        depth += {"{": 1, "}": -1}.get(ch, 0)
        if ch == "," and depth == 0:
            parts.append(inner[start:i])
            start = i + 1
    parts.append(inner[start:])
    return [prefix + q for p in parts if p for q in _expand(p)]


def crate_modules(src: str) -> dict[tuple, str]:
    """{module path: file} of a crate's sources, tests left out."""
    base = ROOT / src
    mods = {}
    for root, dirs, files in os.walk(base):
        dirs[:] = [d for d in dirs if d != "tests"]
        for f in files:
            if f.endswith(".rs") and f != "tests.rs":
                rel = os.path.relpath(os.path.join(root, f), base)
                parts = rel[:-3].split(os.sep)
                if parts[-1] in ("mod", "lib", "main"):
                    parts = parts[:-1]
                mods[tuple(parts)] = rel
    return mods


def imports(src: str) -> dict[tuple, set[tuple]]:
    """{module: the modules its code names}, each path resolved to the
    longest module that exists."""
    mods = crate_modules(src)
    out = {}
    for mod, rel in mods.items():
        text = _code(ROOT / src / rel)
        paths = [p for m in _USE.finditer(text) for p in _expand(m.group(1))]
        paths += [m.group(1) + m.group(2) for m in _PATH.finditer(text)]
        here = list(mod)
        targets = set()
        for p in paths:
            segs = [s.split(" as ")[0] for s in p.split("::") if s]
            if not segs or segs[0] not in ("crate", "super", "self"):
                continue
            at = [] if segs[0] == "crate" else list(here)
            rest = segs[1:] if segs[0] in ("crate", "self") else segs
            while rest and rest[0] == "super":
                at = at[:-1] if at else at
                rest = rest[1:]
            full = at + rest
            for n in range(len(full), -1, -1):
                if tuple(full[:n]) in mods:
                    if tuple(full[:n]) != mod:
                        targets.add(tuple(full[:n]))
                    break
        out[mod] = targets
    return out


def _module_of(folder: str, src: str, mod: tuple) -> str | None:
    """The name, within `folder`, of the module `mod` is or lies in."""
    prefix = tuple(p for p in os.path.relpath(ROOT / folder, ROOT / src).split(os.sep) if p != ".")
    if mod[:len(prefix)] != prefix or len(mod) == len(prefix):
        return None
    return mod[len(prefix)]


def _crate_of(folder: str) -> str:
    parts = folder.split("/")
    return "src" if parts[0] == "src" else "/".join(parts[:3])


def test_every_path_architecture_names_exists():
    missing = sorted(p for p, exists in named_paths().items() if not exists)
    assert not missing, f"ARCHITECTURE.md names paths that do not exist: {missing}"


def test_every_module_of_a_layered_folder_is_in_one_layer():
    blocks = layer_blocks()
    assert {"crates/filter/src", "crates/filter/src/engine", "crates/filter/src/driver", "src/host"} <= set(blocks)
    for folder, layers in blocks.items():
        listed = [m for layer in layers for m in layer]
        assert len(listed) == len(set(listed)), f"{folder}: a module in two layers"
        mods = {_module_of(folder, _crate_of(folder), m) for m in crate_modules(_crate_of(folder))} - {None}
        assert set(listed) == mods, f"{folder}: layers list {sorted(set(listed) - mods)} not in the code, " \
                                    f"miss {sorted(mods - set(listed))}"


def test_no_module_imports_a_layer_above_its_own():
    wrong = []
    for folder, layers in layer_blocks().items():
        src = _crate_of(folder)
        level = {m: i for i, layer in enumerate(layers) for m in layer}
        for mod, targets in imports(src).items():
            a = _module_of(folder, src, mod)
            for target in targets:
                b = _module_of(folder, src, target)
                if a and b and a != b and level[b] > level[a]:
                    wrong.append(f"{folder}: {a} imports {b}, a layer above")
    assert not wrong, "\n".join(sorted(set(wrong)))


def circles(src: str) -> list[list[tuple]]:
    """The strongly connected groups (of more than one module) of a crate."""
    graph = imports(src)
    index, low, stack, on, out, counter = {}, {}, [], set(), [], [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
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


def test_the_filter_and_the_host_have_no_import_circle():
    found = {src: circles(src) for src in _NO_CIRCLES}
    assert not any(found.values()), found


def test_the_checks_see_the_tree():
    assert ("driver", "stream") in crate_modules("crates/filter/src")
    assert ("engine", "core", "walk") in imports("crates/filter/src")[("engine", "kinds")]
    assert layer_blocks()["crates/filter/src"][-1] == ["driver"]
