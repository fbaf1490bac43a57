"""The documentation in docs/ says what the code does.

- The configuration reference (docs/reference/configuration.md) has a row for
  every field of the JSON Schema (schema/sluice.schema.json, walked through
  `definitions`) with the schema's type, and lists exactly the fields of the
  serde types of `crates/filter/src/config/raw.rs`: a field added there and not documented
  fails here, naming it.
- The descriptors reference lists every field the limiter's descriptor files
  accept (`crates/limiter/src/rls/config/`).
- Every filter configuration of docs/ compiles with `sluice check-config`;
  every descriptor file of docs/ is loaded by `sluice-limiter`.
- Links point at files and headings that exist.
"""

import json
import re
import subprocess

import pytest
import yaml

from support import ALGORITHMS, ROOT, free_port
from support.docs import (CONFIGURATION, DOCS, code_blocks, doc_files, headed_tables, parent_and_field,
                          schema_fields, schema_type)

RAW = ROOT / "crates" / "filter" / "src" / "config" / "raw.rs"
README = ROOT / "README.md"
ALGORITHMS_DOC = DOCS / "reference" / "algorithms.md"
DESCRIPTORS_DOC = DOCS / "reference" / "descriptors.md"
RLS_CONFIG = ROOT / "crates" / "limiter" / "src" / "rls" / "config"
CLI = ROOT / "target" / "release" / "sluice"

_STRUCT = re.compile(r"pub struct (Raw\w+) \{(.*?)\n\}", re.S)
_FIELD = re.compile(r"((?:\s*#\[[^\n]*\]\n)*)\s*pub (\w+): ([^\n]+),")
_RENAME = re.compile(r'rename\s*=\s*"([^"]+)"')


def raw_structs() -> dict[str, list[tuple[str, str]]]:
    """{struct: [(JSON field name, Rust type)]} of raw.rs and its modules (raw/)."""
    out = {}
    text = "\n".join(f.read_text() for f in [RAW, *sorted((RAW.parent / "raw").glob("*.rs"))])
    for name, body in _STRUCT.findall(text):
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
            # A struct holding itself (`match.not`) is documented once.
            if inner and inner.group(1) in structs and inner.group(1) != struct:
                child = f"{path}.{field}" if path else field
                walk(inner.group(1), child + ("[]" if "Vec<" in ty else ""))

    walk("RawConfig", "")
    return out


def reference_tables() -> dict[str, list[list[str]]]:
    """{object path ("" for the top level): rows of its table} in the configuration reference."""
    tables = headed_tables(CONFIGURATION.read_text())
    tables[""] = tables.pop("Top level", [])
    return tables


def documented_rows(path: str) -> dict[str, list[str]]:
    """{field: its row} of the table of the object at `path`."""
    tables = reference_tables()
    assert path in tables, f"{CONFIGURATION.name} has no table under a heading `{path}`"
    head, _, *rows = tables[path]
    assert head == ["field", "type", "default", "example", "meaning"], f"{path}: {head}"
    return {r[0].strip("`"): r for r in rows}


@pytest.mark.parametrize("path", sorted(json_paths()), ids=lambda p: p or "top level")
def test_every_object_lists_exactly_the_fields_of_raw_rs(path):
    rows = documented_rows(path)
    assert sorted(rows) == sorted(json_paths()[path]), \
        f"{path or 'top level'}: the table lists {sorted(rows)}, crates/filter/src/config/raw.rs has {sorted(json_paths()[path])}"
    for row in rows.values():
        assert len(row) == 5 and all(row), f"{path or 'top level'}: a row with an empty cell: {row}"


@pytest.mark.parametrize("field", sorted(schema_fields()))
def test_every_schema_field_has_a_row_with_its_type(field):
    parent, name = parent_and_field(field)
    rows = documented_rows(parent)
    assert name in rows, f"{CONFIGURATION.name} does not document `{field}` (no row `{name}` under `{parent}`)"
    assert rows[name][1] == schema_type(schema_fields()[field]), \
        f"`{field}`: documented as {rows[name][1]!r}, the schema says {schema_type(schema_fields()[field])!r}"


def test_the_schema_walk_reaches_every_definition_and_nested_field():
    fields = schema_fields()
    assert {"domain", "client_ip.ipv4_prefix", "rules[].match.headers[].present", "rules[].limits[].sync.max_share",
            "rules[].limits[].descriptor[].from", "rules[].limits[].elastic.pool", "rules[].overrides[].limit"} <= set(fields)
    definitions = json.loads((ROOT / "schema" / "sluice.schema.json").read_text())["definitions"]
    objects = [d for d in definitions.values() if "properties" in d]
    assert len(fields) == len(json.loads((ROOT / "schema" / "sluice.schema.json").read_text())["properties"]) + \
        sum(len(d["properties"]) for d in objects)


def test_the_walk_finds_the_nested_objects():
    paths = json_paths()
    assert {"", "client_ip", "limiter", "response", "rules[]", "rules[].match", "rules[].match.headers[]",
            "rules[].limits[]", "rules[].overrides[]"} <= set(paths)
    assert "match" in paths["rules[]"]


def test_the_cost_object_has_a_row_per_field_of_the_schema_and_raw_rs():
    # `cost` is read by hand (an integer, a string or an object), so the walks
    # above stop at it: its object form has a table of its own.
    schema = json.loads((ROOT / "schema" / "sluice.schema.json").read_text())
    [form] = [n for n in schema["definitions"]["RawRule"]["properties"]["cost"]["oneOf"] if n["type"] == "object"]
    rows = documented_rows("rules[].cost")
    assert sorted(rows) == sorted(form["properties"]) == sorted(f for f, _ in raw_structs()["RawResponseCost"]), \
        f"rules[].cost: the table lists {sorted(rows)}, the schema's object form has {sorted(form['properties'])}"
    for name, node in form["properties"].items():
        types = [n["type"] for n in node.get("oneOf", [node])]
        assert all(t in rows[name][1] for t in types), f"`rules[].cost.{name}`: documented as {rows[name][1]!r}, the schema says {types}"


def test_the_priced_place_has_a_row_per_field_of_the_schema_and_raw_rs():
    # A response cost's place may be an object (read by hand, inside `cost`):
    # its table lists the fields of the schema's object form and of raw.rs.
    schema = json.loads((ROOT / "schema" / "sluice.schema.json").read_text())
    [form] = [n for n in schema["definitions"]["RawRule"]["properties"]["cost"]["oneOf"] if n["type"] == "object"]
    [places] = [n for n in form["properties"]["response"]["oneOf"] if n["type"] == "array"]
    [priced] = [n for n in places["items"]["oneOf"] if n["type"] == "object"]
    rows = documented_rows("rules[].cost.response[]")
    assert sorted(rows) == sorted(priced["properties"]) == sorted(f for f, _ in raw_structs()["RawPricedPlace"])
    for name, node in priced["properties"].items():
        assert rows[name][1] == schema_type(node), f"`rules[].cost.response[].{name}`: {rows[name][1]!r}"


def test_the_key_parts_table_lists_the_forms_of_the_schema():
    # The schema's key part (built from the filter parser's table of sources)
    # lists its forms in its description; the reference has a row for each,
    # and an instance of each form matches the schema's pattern.
    schema = json.loads((ROOT / "schema" / "sluice.schema.json").read_text())
    [part] = [n for n in schema["definitions"]["RawRule"]["properties"]["key"]["items"]["oneOf"]
              if n["type"] == "string"]
    forms = re.findall(r"`([^`]+)`", part["description"].split(". ")[0])
    rows = [r[0].strip("`") for r in headed_tables(CONFIGURATION.read_text())["Key parts"][2:]]
    assert sorted(rows) == sorted(forms), f"Key parts: the table lists {rows}, the schema {forms}"
    example = {"NAME": "x-user", "TEXT": "v1", "CLAIM": "org.tenant", "NAMESPACE": "envoy.lb", "PATH": "tier"}
    for form in forms:
        text = re.sub(r"[A-Z]+", lambda m: example[m[0]], form)
        assert re.fullmatch(part["pattern"], text), f"{form}: {text!r} does not match the schema's pattern"
    assert not re.fullmatch(part["pattern"], "filter_stat:x")


@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_every_algorithm_is_documented(algorithm):
    limits = documented_rows("rules[].limits[]")
    assert f"`{algorithm}`" in limits["algorithm"][4], f"the reference's `rules[].limits[]` table does not list {algorithm}"
    assert f"(`{algorithm}`)" in ALGORITHMS_DOC.read_text(), \
        f"{ALGORITHMS_DOC.relative_to(ROOT)}'s comparison table has no row for {algorithm}"


# ---------------------------------------------------------------- the descriptors reference

_RLS_STRUCT = re.compile(r"struct (Raw(?:Domain|Descriptor|RateLimitFields|Replaces)) \{(.*?)\n\}", re.S)
_RLS_FIELD = re.compile(r"^\s+(?:pub )?(\w+): ", re.M)
# The table of each struct's fields in the descriptors reference.
_RLS_TABLES = {"RawDomain": "File", "RawDescriptor": "descriptors[]", "RawRateLimitFields": "descriptors[].rate_limit"}


@pytest.mark.parametrize("struct", sorted(_RLS_TABLES))
def test_the_descriptors_reference_lists_every_field_a_file_may_have(struct):
    source = "\n".join(f.read_text() for f in sorted(RLS_CONFIG.glob("*.rs")))
    fields = {name: set(_RLS_FIELD.findall(body)) for name, body in _RLS_STRUCT.findall(source)}
    tables = headed_tables(DESCRIPTORS_DOC.read_text())
    head, _, *rows = tables[_RLS_TABLES[struct]]
    assert head == ["field", "type", "default", "example", "meaning"]
    documented = {r[0].strip("`") for r in rows}
    assert documented == fields[struct], \
        f"{_RLS_TABLES[struct]}: documented {sorted(documented)}, {struct} has {sorted(fields[struct])}"
    assert fields["RawReplaces"] == {"name"}, "`replaces` entries are documented as `{name}`"


# ---------------------------------------------------------------- the examples of docs/

FENCE_KINDS = {"json": "a filter configuration, compiled by `sluice check-config`",
               "json fragment": "part of a filter configuration, parsed as JSON only",
               "json limiter-api": "a limiter API body or answer (docs/reference/limiter-api.md)",
               "json quota-endpoint": "an answer of the filter's quota endpoint (docs/guides/quota-endpoint.md)",
               "json top-limited-keys": "the filter's top limited keys list (docs/operations/top-limited-keys.md)",
               "json vscode-settings": "an editor's settings"}


def json_blocks(kind: str) -> list[tuple[str, int, str]]:
    """[(doc, index, text)] of the ```json blocks of docs/ with this info string."""
    return [(str(p.relative_to(ROOT)), i, text) for p in doc_files()
            for i, (info, text) in enumerate(code_blocks(p)) if info == kind]


def test_every_json_block_says_what_it_holds():
    for path in doc_files():
        for info, _ in code_blocks(path):
            if info.startswith("json"):
                assert info in FENCE_KINDS, f"{path.relative_to(ROOT)}: ```{info} is none of {sorted(FENCE_KINDS)}"
    assert len(json_blocks("json fragment")) <= 3, "keep partial configuration snippets few: complete them"


def test_every_filter_configuration_in_docs_compiles(tmp_path):
    if not CLI.exists():
        pytest.fail(f"{CLI} is missing: run `make cli`")
    blocks = json_blocks("json")
    assert len(blocks) >= 5
    files = []
    for doc, i, text in blocks:
        path = tmp_path / f"{doc.replace('/', '_')}-{i}.json"
        path.write_text(text)
        files.append(path)
    result = subprocess.run([str(CLI), "check-config", *map(str, files)], capture_output=True, text=True)
    assert result.returncode == 0, f"a configuration of docs/ does not compile:\n{result.stdout}{result.stderr}"
    assert result.stdout.count(": ok (") == len(files), result.stdout


@pytest.mark.parametrize("doc,i,text", json_blocks("json fragment"), ids=lambda v: str(v)[:40])
def test_every_fragment_is_json(doc, i, text):
    json.loads(text)


def descriptor_files() -> list[tuple[str, int, str]]:
    """[(doc, index, text)] of the ```yaml blocks of docs/ that are descriptor files (`domain` and `descriptors`)."""
    out = []
    for p in doc_files():
        for i, (info, text) in enumerate(code_blocks(p)):
            doc = yaml.safe_load(text) if info == "yaml" else None
            if isinstance(doc, dict) and "domain" in doc and "descriptors" in doc:
                out.append((str(p.relative_to(ROOT)), i, text))
    return out


def test_the_docs_have_descriptor_files():
    docs = {doc for doc, _, _ in descriptor_files()}
    assert {"docs/reference/descriptors.md", "docs/guides/envoy-ratelimit-filter.md"} <= docs


@pytest.mark.parametrize("doc,i,text", descriptor_files(), ids=lambda v: str(v)[:40])
def test_every_descriptor_file_in_docs_loads_in_the_limiter(doc, i, text, processes, tmp_path):
    path = tmp_path / "descriptors.yaml"
    path.write_text(text)
    # The limiter refuses to start on a file it cannot load.
    lim = processes.limiter(extra_args=["--grpc-listen", f"127.0.0.1:{free_port()}", "--descriptors", str(path)])
    assert lim.metric('sluice_limiter_rls_config_loads_total{result="ok"}') == 1
    assert lim.metric('sluice_limiter_rls_config_loads_total{result="error"}') == 0


# ---------------------------------------------------------------- accuracy for a new user

MARKDOWN = sorted(p for p in ROOT.rglob("*.md")
                  if not {"target", ".venv", "build", ".pytest_cache", ".git"} & set(p.relative_to(ROOT).parts))
_LINK = re.compile(r"\]\(([^)\s]+)\)")


def anchors(doc) -> set[str]:
    """The anchors GitHub gives the headings of a markdown file."""
    out: set[str] = set()
    text = re.sub(r"^```.*?^```", "", doc.read_text(), flags=re.S | re.M)
    for heading in re.findall(r"^#{1,6} (.+)$", text, re.M):
        slug = re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")
        n, candidate = 0, slug
        while candidate in out:
            n += 1
            candidate = f"{slug}-{n}"
        out.add(candidate)
    return out


@pytest.mark.parametrize("doc", MARKDOWN, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_names_a_file_and_heading_of_the_repository(doc):
    for target in _LINK.findall(doc.read_text()):
        if target.startswith(("http://", "https://", "mailto:")):
            continue
        file, _, anchor = target.partition("#")
        path = (doc.parent / file).resolve() if file else doc
        assert path.exists(), f"{doc.relative_to(ROOT)} links to {target}, which is not in the repository"
        if anchor and path.suffix == ".md":
            assert anchor in anchors(path), \
                f"{doc.relative_to(ROOT)} links to {target}: {path.relative_to(ROOT)} has no heading #{anchor}"


def test_the_readme_is_a_front_door():
    lines = README.read_text().count("\n")
    assert lines <= 300, f"README.md has {lines} lines: the reference and the guides belong in docs/"
    assert "docs/README.md" in README.read_text()
    for doc in doc_files():
        if doc.name != "README.md":
            assert doc.relative_to(DOCS).as_posix() in (DOCS / "README.md").read_text(), \
                f"docs/README.md does not list {doc.relative_to(ROOT)}"


def make_help() -> str:
    return subprocess.run(["make", "-s", "help"], cwd=ROOT, capture_output=True, text=True, check=True).stdout


def test_every_make_target_the_docs_name_is_in_make_help():
    helped = set(re.findall(r"^make (\w[\w-]*)", make_help(), re.M)) | {"help"}
    for doc in [README, *doc_files()]:
        named = set(re.findall(r"`make (\w[\w-]*)", doc.read_text()))
        assert named <= helped, \
            f"{doc.relative_to(ROOT)} names make targets that `make help` does not list: {named - helped}"
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
