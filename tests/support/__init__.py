"""Helpers shared by the end-to-end tests (`tests/`) and the benchmark (`bench/`).

- `paths`: the repository and the programs under test.
- `algorithms`: the algorithm names, read from `sluice-core`.
- `processes`: ports, readiness waits, child processes, Redis (TLS, auth, Sentinel), sluice-limiter.
- `tls`: a throwaway CA and certificates (openssl CLI), for the TLS tests.
- `envoy`: Envoy configuration pieces and the one Envoy starter.
- `client`: one HTTP request, and concurrent load that counts every answer.
- `load`: `sluice-load` (fast load with a fresh client address per request, timeouts, timeline).
- `windows`: waiting until a sequence of requests fits in one clock-aligned window.
- `rust_imports`: which modules of a Rust crate import which (the architecture test).

The names most callers need are importable from the package itself.
"""

from .algorithms import ALGORITHMS
from .client import Response, concurrent_requests, load_through, request, run_all
from .load import LoadReport, run_load, start_load
from .envoy import Envoy, limiter_cluster, listener, sluice_config, start_envoy, wasm_filter
from .paths import BUILD, ENVOY_BIN, LIMITER_BIN, NOOP_WASM, REDIS_BIN, ROOT, SLUICE_WASM
from .processes import (Limiter, Process, Redis, RedisTls, Sentinel, free_port, pinned, start_redis_cluster,
                        wait_until)

__all__ = [
    "ALGORITHMS", "BUILD", "ENVOY_BIN", "Envoy", "LIMITER_BIN", "Limiter", "LoadReport", "NOOP_WASM", "Process", "REDIS_BIN",
    "ROOT", "Redis", "RedisTls", "Response", "Sentinel", "SLUICE_WASM", "concurrent_requests", "free_port", "limiter_cluster", "listener",
    "load_through", "pinned", "request", "run_all", "run_load", "start_load", "sluice_config", "start_envoy", "start_redis_cluster", "wait_until",
    "wasm_filter",
]
