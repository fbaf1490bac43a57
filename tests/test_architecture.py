"""ARCHITECTURE.md is a map that stays true.

Every path it names exists. Its `layers` blocks list, for each crate's
source folder and for some folders within, that folder's modules from the
bottom layer up; each module of the folder is in exactly one layer, and no
module imports one of a layer above its own (tests left out). No crate's
files import each other in a circle (tests included). The imports are read
as `tests/support/rust_imports.py` says.
"""

import os
import re

from support import ROOT
from support.rust_imports import circles, code, crate_modules, expand, imports, strip

ARCHITECTURE = ROOT / "ARCHITECTURE.md"
_CODE = re.compile(r"`([^`\s]+)`")
_EXTENSIONS = (".rs", ".lua", ".md", ".py", ".sh", ".yaml", ".json", ".toml", ".svg", ".Dockerfile")
# Folders within a crate that must have layers besides the crates' own.
_LAYERED_WITHIN = ("crates/filter/src/engine", "crates/filter/src/driver", "src/host")


def crates() -> list[str]:
    """Every crate's source folder."""
    crates_dir = ROOT / "crates"
    return ["src"] + sorted(f"crates/{c}/src" for c in os.listdir(crates_dir) if (crates_dir / c / "src").is_dir())


def layered() -> set[str]:
    """The folders that must have layers: every crate with modules, and
    `_LAYERED_WITHIN`."""
    return {src for src in crates() if len(crate_modules(src)) > 1} | set(_LAYERED_WITHIN)


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
    assert layered() <= set(blocks), f"no layers for {sorted(layered() - set(blocks))}"
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


def test_no_crate_imports_in_a_circle():
    found = {src: circles(imports(src, tests=True)) for src in crates()}
    assert not any(found.values()), {src: group for src, group in found.items() if group}


def test_the_checks_see_the_tree():
    assert {"src", "crates/filter/src", "crates/limiter/src", "crates/core/src", "crates/wire/src",
            "crates/load/src", "crates/cli/src"} <= layered()
    assert "crates/cli/src" in crates()
    assert ("driver", "stream") in crate_modules("crates/filter/src")
    assert ("algo", "codec_tests") not in crate_modules("crates/core/src")
    assert ("engine", "core", "walk") in imports("crates/filter/src")[("engine", "kinds")]
    # `crate::decide_all` is re-exported by lib.rs from `multi`.
    assert {(), ("multi",)} <= imports("crates/core/src")[("batch",)]
    assert layer_blocks()["crates/filter/src"][-1] == ["driver"]


def test_code_is_read_without_comments_literals_or_test_items(tmp_path):
    source = tmp_path / "m.rs"
    source.write_text(
        "use crate::a; // use crate::b;\n"
        "/* outer /* nested */ use crate::c; */\n"
        "const S: &str = r#\"use crate::d; {\"#; const C: char = '{';\n"
        "fn f<'x>(s: &'x str) -> &'x str { s }\n"
        "#[cfg(test)]\nuse crate::e::{f, g};\n"
        "#[cfg(test)]\n#[allow(dead_code)]\nmod tests { fn t() { let _ = \"}\"; crate::h::i(); } }\n"
        "#[cfg(test)]\nmod more;\n"
        "pub fn after() { crate::j::k(); }\n")
    assert strip("a /* b */ c // d\ne 'x' b\"y\"") == 'a  c \ne "" ""'
    assert code(source).split() == ("use crate::a; const S: &str = \"\"; const C: char = \"\"; "
                                    "fn f<'x>(s: &'x str) -> &'x str { s } "
                                    "pub fn after() { crate::j::k(); }").split()
    assert "crate::h::i" in code(source, tests=True)
    assert expand("crate::a::{b as c, d::{self, e}}") == ["crate::a::b as c", "crate::a::d::self", "crate::a::d::e"]
