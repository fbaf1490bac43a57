"""The configuration reference in README.md lists exactly what the filter accepts.

The fields come from the serde types of `src/config/raw.rs`, the algorithms
from `sluice-core`: a field or an algorithm added there and not documented
fails here, naming it.
"""

import re

import pytest

from support import ALGORITHMS, ROOT

RAW = ROOT / "src" / "config" / "raw.rs"
README = ROOT / "README.md"
CORE_README = ROOT / "crates" / "core" / "README.md"

_STRUCT = re.compile(r"pub struct (Raw\w+) \{(.*?)\n\}", re.S)
_FIELD = re.compile(r"((?:\s*#\[[^\n]*\]\n)*)\s*pub (\w+): ([^\n]+),")
_RENAME = re.compile(r'rename\s*=\s*"([^"]+)"')


def raw_structs() -> dict[str, list[tuple[str, str]]]:
    """{struct: [(JSON field name, Rust type)]} of raw.rs."""
    out = {}
    for name, body in _STRUCT.findall(RAW.read_text()):
        fields = []
        for attrs, field, ty in _FIELD.findall(body):
            rename = _RENAME.search(attrs)
            fields.append((rename.group(1) if rename else field, ty))
        out[name] = fields
    return out


def json_paths() -> dict[str, set[str]]:
    """{JSON path of an object: its field names}, walking from RawConfig.

    The top level is "", nested objects are `client_ip`, `rules[]`,
    `rules[].match.headers[]`, ...
    """
    structs = raw_structs()
    out: dict[str, set[str]] = {}

    def walk(struct: str, path: str):
        out[path] = {f for f, _ in structs[struct]}
        for field, ty in structs[struct]:
            inner = re.search(r"\b(Raw\w+)\b", ty)
            if inner and inner.group(1) in structs:
                child = f"{path}.{field}" if path else field
                walk(inner.group(1), child + ("[]" if ty.startswith("Vec<") else ""))

    walk("RawConfig", "")
    return out


def configuration_section() -> str:
    text = README.read_text()
    start = text.index("\n## Configuration\n")
    end = text.index("\n## ", start + 1)
    return text[start:end]


# The heading of each object's table in the reference.
HEADINGS = {"": "Top level", "rules[]": "Rules", "rules[].limits[]": "Limits",
            "rules[].overrides[]": "Overrides"}


def reference_tables() -> dict[str, list[list[str]]]:
    """{heading: rows of the table right under it (cells)} in the Configuration section."""
    tables: dict[str, list[list[str]]] = {}
    heading = None
    for line in configuration_section().splitlines():
        if line.startswith("#"):
            heading = line.lstrip("#").strip().strip("`")
        elif line.startswith("|") and heading is not None:
            cells = [c.strip() for c in line.strip().strip("|").split(" | ")]
            tables.setdefault(heading, []).append(cells)
    return tables


def heading_of(path: str) -> str:
    return HEADINGS.get(path, path.removeprefix("rules[]."))


@pytest.mark.parametrize("path", sorted(json_paths()), ids=lambda p: p or "top level")
def test_every_field_is_documented_once_with_a_default(path):
    tables = reference_tables()
    heading = heading_of(path)
    assert heading in tables, f"README.md's Configuration section has no table under a heading {heading!r}"
    head, _, *rows = tables[heading]
    assert head[:3] == ["field", "default", "meaning"], f"{heading}: {head}"
    documented = [r[0].strip("`") for r in rows]
    assert sorted(documented) == sorted(json_paths()[path]), \
        f"{heading}: the table lists {documented}, src/config/raw.rs has {sorted(json_paths()[path])}"
    for row in rows:
        assert len(row) == 3 and row[1] and row[2], f"{heading}: row without a default or meaning: {row}"


def test_the_walk_finds_the_nested_objects():
    paths = json_paths()
    assert {"", "client_ip", "limiter", "response", "rules[]", "rules[].match", "rules[].match.headers[]",
            "rules[].limits[]", "rules[].overrides[]"} <= set(paths)
    assert "match" in paths["rules[]"]


@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_every_algorithm_is_documented(algorithm):
    limits = {r[0].strip("`"): r for r in reference_tables()["Limits"][2:]}
    assert f"`{algorithm}`" in limits["algorithm"][2], f"README.md's Limits table does not list {algorithm}"
    assert f"(`{algorithm}`)" in CORE_README.read_text(), \
        f"crates/core/README.md's comparison table has no row for {algorithm}"
