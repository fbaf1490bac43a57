"""The configuration reference in README.md lists exactly what the filter accepts.

The fields come from the serde types of `crates/filter/src/config/raw.rs`, the algorithms
from `sluice-core`: a field or an algorithm added there and not documented
fails here, naming it.
"""

import re
import subprocess

import pytest
import yaml

from support import ALGORITHMS, ROOT

RAW = ROOT / "crates" / "filter" / "src" / "config" / "raw.rs"
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
        f"{heading}: the table lists {documented}, crates/filter/src/config/raw.rs has {sorted(json_paths()[path])}"
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


# ---------------------------------------------------------------- accuracy for a new user

MARKDOWN = sorted(p for p in ROOT.rglob("*.md")
                  if not {"target", ".venv", "build", ".pytest_cache", ".git"} & set(p.relative_to(ROOT).parts))
_LINK = re.compile(r"\]\(([^)\s]+)\)")


@pytest.mark.parametrize("doc", MARKDOWN, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_names_a_file_of_the_repository(doc):
    for target in _LINK.findall(doc.read_text()):
        if target.startswith(("http://", "https://", "mailto:", "#")):
            continue
        path = (doc.parent / target.split("#")[0]).resolve()
        assert path.exists(), f"{doc.relative_to(ROOT)} links to {target}, which is not in the repository"


def make_help() -> str:
    return subprocess.run(["make", "-s", "help"], cwd=ROOT, capture_output=True, text=True, check=True).stdout


def test_every_make_target_the_readme_names_is_in_make_help():
    named = set(re.findall(r"`make (\w[\w-]*)", README.read_text()))
    helped = set(re.findall(r"^make (\w[\w-]*)", make_help(), re.M))
    assert named <= helped, f"README.md names make targets that `make help` does not list: {named - helped}"
    assert "validate" in helped


def test_the_readme_names_the_envoy_config_make_run_uses():
    run = (ROOT / "scripts" / "run.sh").read_text()
    [config] = re.findall(r"(envoy/envoy[\w-]*\.yaml) >", run)
    try_it = README.read_text().split("\n## Try it\n", 1)[1].split("\n## ", 1)[0]
    assert f"`{config}`" in try_it
    assert "envoy/envoy.yaml" not in try_it.replace(config, "")
    assert config in run.split("cat <<MSG", 1)[1], "make run does not say which Envoy config it uses"


def test_docker_compose_mounts_what_the_makefile_builds_and_the_readme_runs_it():
    compose_path = ROOT / "envoy" / "docker-compose.yaml"
    compose = yaml.safe_load(compose_path.read_text())
    envoy = compose["services"]["envoy"]
    mounts = dict(v.rsplit(":", 1)[0].split(":", 1) for v in envoy["volumes"])
    makefile = (ROOT / "Makefile").read_text()
    wasm_out = re.search(r"^WASM := \$\(BUILD\)/(\S+)", makefile, re.M).group(1)
    build_dir = re.search(r"^BUILD := (\S+)", makefile, re.M).group(1)
    wasm_mount = next(host for host, inside in mounts.items() if inside.endswith(".wasm"))
    assert (compose_path.parent / wasm_mount).resolve() == (ROOT / build_dir / wasm_out).resolve()
    config_mount = next(host for host, inside in mounts.items() if inside == "/etc/envoy/envoy.yaml")
    config = (compose_path.parent / config_mount).resolve()
    assert config.exists()
    assert mounts[wasm_mount] in config.read_text(), "the Envoy config loads the wasm from where compose mounts it"
    assert envoy["command"][envoy["command"].index("-c") + 1] == "/etc/envoy/envoy.yaml"
    limiter = compose["services"]["sluice-limiter"]["build"]
    assert (compose_path.parent / limiter["context"] / limiter["dockerfile"]).resolve().exists()
    for service in compose["services"]["envoy"].get("depends_on", []):
        assert service in compose["services"]
    readme = README.read_text()
    assert "docker compose -f envoy/docker-compose.yaml up --build" in readme
    assert f"`{config.relative_to(ROOT)}`" in readme
