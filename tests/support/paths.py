"""Where the repository and the programs under test are.

Environment variables point at other builds: `SLUICE_ENVOY`, `SLUICE_WASM`,
`SLUICE_NOOP_WASM`, `SLUICE_LIMITER`, `SLUICE_LOAD`, `REDIS_SERVER`, `REDIS_SENTINEL`.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
BUILD = ROOT / "build"
ENVOY_BIN = Path(os.environ.get("SLUICE_ENVOY", ROOT / ".venv" / "bin" / "envoy"))
SLUICE_WASM = Path(os.environ.get("SLUICE_WASM", BUILD / "sluice.wasm"))
NOOP_WASM = Path(os.environ.get("SLUICE_NOOP_WASM", BUILD / "noop.wasm"))
LIMITER_BIN = Path(os.environ.get("SLUICE_LIMITER", ROOT / "target" / "release" / "sluice-limiter"))
LOAD_BIN = Path(os.environ.get("SLUICE_LOAD", ROOT / "target" / "release" / "sluice-load"))
REDIS_BIN = os.environ.get("REDIS_SERVER") or shutil.which("redis-server") or "/usr/bin/redis-server"
REDIS_CLI = shutil.which("redis-cli") or "/usr/bin/redis-cli"
# None: run `redis-server --sentinel` instead
SENTINEL_BIN = os.environ.get("REDIS_SENTINEL") or shutil.which("redis-sentinel")
