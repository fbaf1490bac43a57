"""What the documentation tests read: the markdown files of `docs/`, their
tables and code blocks, and the field paths of the configuration's JSON Schema."""

from __future__ import annotations

import json
import re
from pathlib import Path

from .paths import ROOT

DOCS = ROOT / "docs"
SCHEMA = ROOT / "schema" / "sluice.schema.json"
CONFIGURATION = DOCS / "reference" / "configuration.md"

_FENCE = re.compile(r"^```([^\n]*)\n(.*?)^```", re.S | re.M)


def doc_files() -> list[Path]:
    return sorted(DOCS.rglob("*.md"))


def code_blocks(path: Path) -> list[tuple[str, str]]:
    """[(info string, text)] of the fenced code blocks of a markdown file."""
    return [(info.strip(), text) for info, text in _FENCE.findall(path.read_text())]


def headed_tables(text: str) -> dict[str, list[list[str]]]:
    """{heading (without `#` and backticks): rows of the tables under it (cells)}."""
    tables: dict[str, list[list[str]]] = {}
    heading = None
    fence = False
    for line in text.splitlines():
        if line.startswith("```"):
            fence = not fence
        elif fence:
            continue
        elif line.startswith("#"):
            heading = line.lstrip("#").strip().strip("`")
        elif line.startswith("|") and heading is not None:
            cells = [c.strip() for c in re.split(r"(?<!\\)\|", line.strip().strip("|"))]
            tables.setdefault(heading, []).append(cells)
    return tables


def _resolve(schema: dict, node: dict) -> dict:
    """A property's schema with `$ref`, `allOf: [ref]` and `anyOf: [ref, null]` followed."""
    while True:
        if "$ref" in node:
            node = schema["definitions"][node["$ref"].rsplit("/", 1)[1]]
        elif "allOf" in node and len(node["allOf"]) == 1:
            node = node["allOf"][0]
        elif "anyOf" in node:
            node = next(n for n in node["anyOf"] if n.get("type") != "null")
        else:
            return node


def schema_fields() -> dict[str, dict]:
    """{field path: its resolved schema} of every property of the configuration,
    walked from the root through objects, arrays and `definitions`:
    `domain`, `client_ip.ipv4_prefix`, `rules[].limits[].sync.mode`, ..."""
    schema = json.loads(SCHEMA.read_text())
    out: dict[str, dict] = {}

    def walk(node: dict, prefix: str):
        for name, prop in node.get("properties", {}).items():
            path = f"{prefix}{name}"
            resolved = _resolve(schema, prop)
            out[path] = resolved
            if resolved is node:
                continue  # an object holding itself (`match.not`): documented once
            if "items" in resolved:
                item = _resolve(schema, resolved["items"])
                if "properties" in item:
                    walk(item, f"{path}[].")
            elif "properties" in resolved:
                walk(resolved, f"{path}.")

    walk(schema, "")
    return out


def parent_and_field(path: str) -> tuple[str, str]:
    """`rules[].limits[].sync.mode` -> (`rules[].limits[].sync`, `mode`); top level -> ("", name)."""
    parent, _, field = path.rpartition(".")
    return parent, field


def schema_type(node: dict) -> str:
    """The type column of a field in the reference, from its resolved schema."""
    if "oneOf" in node:
        if all("const" in n for n in node["oneOf"]):
            return "string (enum)"
        return " or ".join(n["type"] for n in node["oneOf"])
    types = node["type"] if isinstance(node["type"], list) else [node["type"]]
    [kind] = [t for t in types if t != "null"]
    if kind == "array":
        item = node["items"]
        if "oneOf" in item:
            return "array of " + " or ".join(f"{n['type']}s" for n in item["oneOf"])
        if item.get("type") in ("string", "integer"):
            return f"array of {item['type']}s"
        return "array of objects"
    if kind == "object" and isinstance(node.get("additionalProperties"), dict):
        return "map of strings"
    return kind
