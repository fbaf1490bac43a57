"""Costs and limits another filter writes into the request's dynamic
metadata (Envoy Gateway's `cost.request.from: Metadata`), read by Sluice
through Envoy: `header_to_metadata` before Sluice writes the number."""


import support
from support import free_port, limiter_cluster, load_through, request, sluice_config, wait_until

NAMESPACE = "example.cost"


def header_to_metadata(header: str, key: str, kind: str = "NUMBER") -> dict:
    """Envoy's own filter writing `header` into `NAMESPACE:key` (a double for
    NUMBER, as every number of a metadata Struct is)."""
    return {
        "name": "envoy.filters.http.header_to_metadata",
        "typed_config": {
            "@type": "type.googleapis.com/envoy.extensions.filters.http.header_to_metadata.v3.Config",
            "request_rules": [{"header": header, "remove": True, "on_header_present": {
                "metadata_namespace": NAMESPACE, "key": key, "type": kind}}],
        },
    }


def start(tmp_path, config: dict, **kwargs):
    return support.start_envoy(tmp_path, [header_to_metadata("x-units", "units"), support.wasm_filter(config)],
                               **kwargs)


def weighed_rule(limit: dict) -> dict:
    return {"name": "m", "key": ["header:x-user"], "cost": f"metadata:{NAMESPACE}:units", "limits": [limit]}


def remaining_after(port: int, units: str | None) -> tuple[int, str | None]:
    headers = {"x-user": "a"} | ({"x-units": units} if units is not None else {})
    r = request(port, "/", headers=headers)
    return r.status, r.header("x-ratelimit-remaining")


def test_a_local_limit_takes_the_cost_in_metadata(tmp_path):
    e = start(tmp_path, sluice_config([weighed_rule({"algorithm": "fixed_window", "requests": 20, "window": "1h"})]))
    try:
        assert remaining_after(e.port, "5") == (200, "15")
        assert remaining_after(e.port, "5") == (200, "10")
        # No metadata: weight 1, counted as cost_invalid.
        assert remaining_after(e.port, None) == (200, "9")
        wait_until(lambda: e.sluice_stat("sluice.m.cost_invalid") == 1, what="cost_invalid == 1")
        # More than is left: refused, nothing taken.
        assert remaining_after(e.port, "10")[0] == 429
        assert remaining_after(e.port, "9") == (200, "0")
    finally:
        e.stop()


def test_a_global_limit_takes_the_cost_in_metadata_exactly(tmp_path, processes):
    limiter = processes.limiter(extra_args=["--store-timeout-ms", "5000"])
    config = sluice_config([weighed_rule({"algorithm": "fixed_window", "requests": 100, "window": "1h",
                                          "scope": "global"})],
                           limiter={"cluster": "sluice_limiter", "authority": "sluice-limiter",
                                    "timeout": "5s", "failure_mode": "deny"})
    e = start(tmp_path, config, clusters=[limiter_cluster("sluice_limiter", [limiter.port])])
    try:
        assert remaining_after(e.port, "5") == (200, "95")
        # 40 requests of 5 over 32 connections: 19 more fit the 95 left.
        counts = load_through([e], per_envoy=40, connections=32, headers={"x-user": "a", "x-units": "5"})
        assert counts == {200: 19, 429: 21}
        assert e.sluice_stat("sluice.limiter_errors") == 0
    finally:
        e.stop()


DESCRIPTORS = """\
domain: test
descriptors:
  - key: generic_key
    value: m
    descriptors:
      - key: x-user
        rate_limit:
          unit: hour
          requests_per_unit: 100
"""


def test_the_cost_in_metadata_is_the_rls_hits_addend(tmp_path, processes):
    path = tmp_path / "descriptors.yaml"
    path.write_text(DESCRIPTORS)
    grpc = free_port()
    processes.limiter(extra_args=["--grpc-listen", f"127.0.0.1:{grpc}", "--descriptors", str(path),
                                  "--store-timeout-ms", "5000"])
    config = sluice_config([weighed_rule({"scope": "global"})],
                           limiter={"cluster": "rls", "protocol": "rls", "timeout": "5s", "failure_mode": "deny"})
    e = start(tmp_path, config, clusters=[limiter_cluster("rls", [grpc])])
    try:
        assert remaining_after(e.port, "5") == (200, "95")
        counts = load_through([e], per_envoy=40, connections=32, headers={"x-user": "a", "x-units": "5"})
        assert counts == {200: 19, 429: 21}
        assert e.sluice_stat("sluice.limiter_errors") == 0
    finally:
        e.stop()
