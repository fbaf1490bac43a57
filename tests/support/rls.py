"""Envoy's own rate limit filter (`envoy.filters.http.ratelimit`) calling
sluice-limiter over gRPC: the Envoy configuration pieces and a starter.

The filter only applies route `rate_limits` on routes with a route action, so
each Envoy routes to a second listener of its own that answers 200 "ok"
directly (the backend).
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

from .client import request
from .envoy import Envoy, limiter_cluster
from .paths import ENVOY_BIN
from .processes import Process, free_port, wait_until

HCM = "type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager"
ROUTER = {"name": "envoy.filters.http.router",
          "typed_config": {"@type": "type.googleapis.com/envoy.extensions.filters.http.router.v3.Router"}}


def ratelimit_filter(domain: str, cluster: str = "rls", failure_mode_deny: bool = False,
                     timeout: str = "5s", x_ratelimit_headers: bool = False) -> dict:
    """The HTTP filter entry of Envoy's ratelimit filter, calling `cluster` over gRPC."""
    cfg = {
        "@type": "type.googleapis.com/envoy.extensions.filters.http.ratelimit.v3.RateLimit",
        "domain": domain,
        "failure_mode_deny": failure_mode_deny,
        "timeout": timeout,
        "rate_limit_service": {"grpc_service": {"envoy_grpc": {"cluster_name": cluster}},
                               "transport_api_version": "V3"},
    }
    if x_ratelimit_headers:
        cfg["enable_x_ratelimit_headers"] = "DRAFT_VERSION_03"
    return {"name": "envoy.filters.http.ratelimit", "typed_config": cfg}


# The rate limit service's one method, as a gRPC path.
RLS_METHOD = "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit"


def _proto_field(number: int, payload: bytes) -> bytes:
    """A length-delimited protobuf field (payloads here are below 128 bytes)."""
    return bytes([number << 3 | 2, len(payload)]) + payload


def rls_request_hex(domain: str, entries: list[tuple[str, str]], hits: int = 1) -> str:
    """A `RateLimitRequest` of one descriptor, in hex (domain is field 1,
    descriptors 2 with entries 1 of key 1 and value 2, hits_addend 3): the
    message `sluice-load --grpc` sends."""
    descriptor = b"".join(_proto_field(1, _proto_field(1, k.encode()) + _proto_field(2, v.encode()))
                          for k, v in entries)
    return (_proto_field(1, domain.encode()) + _proto_field(2, descriptor) + bytes([3 << 3, hits])).hex()


def header_action(header: str, key: str) -> dict:
    return {"request_headers": {"header_name": header, "descriptor_key": key}}


def generic_key(value: str, key: str = "generic_key") -> dict:
    return {"generic_key": {"descriptor_value": value, "descriptor_key": key}}


REMOTE_ADDRESS = {"remote_address": {}}


def _hcm(name: str, route: dict, http_filters: list[dict]) -> dict:
    return {
        "name": "envoy.filters.network.http_connection_manager",
        "typed_config": {
            "@type": HCM,
            "stat_prefix": name,
            "codec_type": "AUTO",
            "use_remote_address": True,
            "route_config": {"name": name, "virtual_hosts": [{"name": "all", "domains": ["*"], "routes": [route]}]},
            "http_filters": http_filters + [ROUTER],
        },
    }


def _listener(name: str, port: int, route: dict, http_filters: list[dict]) -> dict:
    return {"name": name,
            "address": {"socket_address": {"address": "127.0.0.1", "port_value": port}},
            "filter_chains": [{"filters": [_hcm(name, route, http_filters)]}]}


def start_rls_envoy(workdir: Path, domain: str, limiter_ports: list[int], rate_limits: list[list[dict]],
                    *, concurrency: int = 2, envoy_bin: Path = ENVOY_BIN, transport_socket: dict | None = None,
                    filters_before: list[dict] = (), **filter_args) -> Envoy:
    """An Envoy whose route carries `rate_limits` (one list of actions per
    descriptor, or a whole route `RateLimit`) and whose ratelimit filter asks the limiters on `limiter_ports`
    (over `transport_socket` when given), after `filters_before`."""
    rundir = Path(tempfile.mkdtemp(prefix="envoy-rls-", dir=workdir))
    env = Envoy(rundir, free_port(), free_port())
    backend_port = free_port()
    route = {"match": {"prefix": "/"},
             "route": {"cluster": "backend",
                       "rate_limits": [rl if isinstance(rl, dict) else {"actions": rl} for rl in rate_limits]}}
    backend_route = {"match": {"prefix": "/"},
                     "direct_response": {"status": 200, "body": {"inline_string": "ok\n"}}}
    backend_cluster = {
        "name": "backend", "type": "STATIC", "connect_timeout": "1s",
        "load_assignment": {"cluster_name": "backend", "endpoints": [{"lb_endpoints": [
            {"endpoint": {"address": {"socket_address": {"address": "127.0.0.1", "port_value": backend_port}}}}]}]},
    }
    bootstrap = {
        "node": {"id": "rls", "cluster": "rls"},
        "admin": {"address": {"socket_address": {"address": "127.0.0.1", "port_value": env.admin_port}}},
        "static_resources": {
            "listeners": [
                _listener("main", env.port, route, [*filters_before, ratelimit_filter(domain, **filter_args)]),
                _listener("backend", backend_port, backend_route, []),
            ],
            "clusters": [limiter_cluster("rls", limiter_ports, transport_socket), backend_cluster],
        },
    }
    (rundir / "bootstrap.json").write_text(json.dumps(bootstrap, indent=1))
    args = [str(envoy_bin), "-c", str(rundir / "bootstrap.json"), "--concurrency", str(concurrency),
            "--disable-hot-restart", "--log-level", "warning", "--drain-time-s", "1",
            "--file-flush-interval-msec", "50"]
    env.process = Process(args, rundir / "envoy.log")

    def ready():
        env._alive()
        return request(env.admin_port, "/ready", timeout=2).status == 200

    try:
        wait_until(ready, what="envoy ready")
    except BaseException:
        env.stop()
        raise
    return env
