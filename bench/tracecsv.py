"""Parsers of the trace program's CSV output (no plotting library needed)."""

from __future__ import annotations

import csv
import io


def read_trace(text: str) -> tuple[int, int, dict[str, list[tuple[int, int]]]]:
    """Parses the trace program's CSV: (requests, window_ms, {algorithm: [(t_ms, admitted)]})."""
    requests, window_ms = 0, 0
    body = []
    for line in text.splitlines():
        if line.startswith("# limit,"):
            _, r, w = line.split(",")
            requests, window_ms = int(r), int(w)
        elif line and not line.startswith("#"):
            body.append(line)
    per_algo: dict[str, list[tuple[int, int]]] = {}
    for rec in csv.DictReader(io.StringIO("\n".join(body))):
        per_algo.setdefault(rec["algorithm"], []).append((int(rec["t_ms"]), int(rec["admitted"])))
    return requests, window_ms, per_algo


def read_shaping(text: str) -> tuple[dict[str, int], dict[str, list[tuple[int, str, int | None]]]]:
    """Parses the trace program's `shaping` CSV: ({"limit", "window_ms",
    "soft_percent", "max_delay_ms", "ceiling", "pool", "pool_window_ms"},
    {mode: [(t_ms, outcome, served_ms or None)]})."""
    params: dict[str, int] = {}
    body = []
    for line in text.splitlines():
        if line.startswith("# limit,"):
            _, r, w = line.split(",")
            params["limit"], params["window_ms"] = int(r), int(w)
        elif line.startswith("# pool,"):
            _, r, w = line.split(",")
            params["pool"], params["pool_window_ms"] = int(r), int(w)
        elif line.startswith("# "):
            name, value = line[2:].split(",")
            params[name] = int(value)
        elif line:
            body.append(line)
    per_mode: dict[str, list[tuple[int, str, int | None]]] = {}
    for rec in csv.DictReader(io.StringIO("\n".join(body))):
        served = int(rec["served_ms"]) if rec["served_ms"] else None
        per_mode.setdefault(rec["mode"], []).append((int(rec["t_ms"]), rec["outcome"], served))
    return params, per_mode
