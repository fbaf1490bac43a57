"""ARCHITECTURE.md describes the tree as it is.

Every path it names exists, and every Rust source file of the filter and
the crates (tests aside) is named, or lies in a named folder below a
crate's `src/`. A file added without a word in ARCHITECTURE.md, or a file
renamed while the page still names the old one, fails here.
"""

import re

from support import ROOT

ARCHITECTURE = ROOT / "ARCHITECTURE.md"
_CODE = re.compile(r"`([^`\s]+)`")
_EXTENSIONS = (".rs", ".lua", ".md", ".py", ".sh", ".yaml", ".json", ".toml", ".svg", ".Dockerfile")


def _looks_like_path(token: str) -> bool:
    if token.startswith(("/", "http")) or not re.fullmatch(r"[\w.\-/*]+", token):
        return False
    return "/" in token or token.endswith(_EXTENSIONS)


def named_paths() -> dict[str, bool]:
    """{path named by ARCHITECTURE.md, relative to the root: whether it exists}.

    Outside code blocks, a backticked token is a path when it has a `/` or a
    file extension. A bare file name in a table row resolves in the folder
    the row's first cell names (`decide.lua` in the `crates/limiter/src/store/` row).
    """
    out: dict[str, bool] = {}
    text = re.sub(r"^```.*?^```", "", ARCHITECTURE.read_text(), flags=re.S | re.M)
    for line in text.splitlines():
        folder = ""
        if line.startswith("| `"):
            first = line.strip("|").split("|")[0].strip().strip("`")
            folder = first if first.endswith("/") else ""
        for token in _CODE.findall(line):
            if not _looks_like_path(token):
                continue
            candidates = [token] + ([folder + token] if folder and "/" not in token.rstrip("/") else [])
            found = next((c for c in candidates if list(ROOT.glob(c.rstrip("/")))), candidates[-1])
            out[found] = bool(list(ROOT.glob(found.rstrip("/"))))
    return out


def rust_sources() -> list[str]:
    """The Rust files under src/ and crates/*/src/, without tests.rs and tests/ folders."""
    roots = [ROOT / "src", *sorted((ROOT / "crates").glob("*/src"))]
    return sorted(str(p.relative_to(ROOT)) for root in roots for p in root.rglob("*.rs")
                  if p.name != "tests.rs" and "tests" not in p.relative_to(root).parts[:-1])


def _is_crate_root(folder: str) -> bool:
    """`src/`, `crates/`, `crates/x/`, `crates/x/src/`: too broad to count as describing their files."""
    parts = folder.strip("/").split("/")
    return parts in (["src"], ["crates"]) or (parts[0] == "crates" and (len(parts) == 2 or parts[2:] == ["src"]))


def test_every_path_architecture_names_exists():
    missing = sorted(p for p, exists in named_paths().items() if not exists)
    assert not missing, f"ARCHITECTURE.md names paths that do not exist: {missing}"


def test_every_rust_source_file_is_named_or_in_a_named_folder():
    named = set(named_paths())
    folders = [p.rstrip("/") + "/" for p in named if (ROOT / p).is_dir() and not _is_crate_root(p)]
    uncovered = [f for f in rust_sources() if f not in named and not any(f.startswith(d) for d in folders)]
    assert not uncovered, f"ARCHITECTURE.md says nothing of: {uncovered}"


def test_the_check_sees_the_tree():
    sources = rust_sources()
    assert "src/host/mod.rs" in sources and "crates/limiter/src/store/redis/mod.rs" in sources
    assert not any(s.endswith("/tests.rs") or "/tests/" in s for s in sources)
    assert _is_crate_root("crates/core/src/") and not _is_crate_root("crates/limiter/src/rls/")
