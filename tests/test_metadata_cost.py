"""Costs another filter writes into the request's dynamic metadata (Envoy
Gateway's `cost.request.from: Metadata` and `cost.response.from: Metadata`),
read by Sluice through Envoy: `header_to_metadata` before Sluice writes the
number on the request, a Lua filter on the response."""


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


# Writes 7 into `example.cost:used` as the response passes (a filter before
# Sluice sees the response after it: Sluice reads it when the stream ends).
RESPONSE_LUA = """
function envoy_on_response(handle)
  handle:streamInfo():dynamicMetadata():set("example.cost", "used", 7)
end
"""


def response_metadata_filter() -> dict:
    return {
        "name": "envoy.filters.http.lua",
        "typed_config": {
            "@type": "type.googleapis.com/envoy.extensions.filters.http.lua.v3.Lua",
            "default_source_code": {"inline_string": RESPONSE_LUA},
        },
    }


def response_rule(limit: dict) -> dict:
    return {"name": "m", "key": ["header:x-user"],
            "cost": {"estimate": 1, "response": f"metadata:{NAMESPACE}:used"}, "limits": [limit]}


def test_a_cost_from_the_response_reads_the_metadata_written_on_the_response(tmp_path):
    config = sluice_config([response_rule({"algorithm": "fixed_window", "requests": 100, "window": "1h"})])
    e = support.start_envoy(tmp_path, [response_metadata_filter(), support.wasm_filter(config)])
    try:
        # Each request is admitted for 1, then charged 6 more when it ends.
        for n in range(3):
            assert remaining_after(e.port, None) == (200, str(99 - 7 * n))
            wait_until(lambda: e.sluice_stat("sluice.m.cost_charged") == 6 * (n + 1), what="charged 6 more")
        assert remaining_after(e.port, None) == (200, "78")
        assert e.sluice_stat("sluice.m.cost_missing") == 0
    finally:
        e.stop()


def test_a_global_cost_from_the_response_is_charged_from_the_metadata(tmp_path, processes):
    limiter = processes.limiter(extra_args=["--store-timeout-ms", "5000"])
    config = sluice_config([response_rule({"algorithm": "fixed_window", "requests": 100, "window": "1h",
                                           "scope": "global"})],
                           limiter={"cluster": "sluice_limiter", "authority": "sluice-limiter",
                                    "timeout": "5s", "failure_mode": "deny"})
    e = support.start_envoy(tmp_path, [response_metadata_filter(), support.wasm_filter(config)],
                            clusters=[limiter_cluster("sluice_limiter", [limiter.port])])
    try:
        assert remaining_after(e.port, None) == (200, "99")
        wait_until(lambda: e.sluice_stat("sluice.m.cost_charged") == 6, what="charged 6 more")
        # The charge reaches the limiter before the key's next check.
        assert remaining_after(e.port, None) == (200, "92")
        assert e.sluice_stat("sluice.limiter_errors") == 0
    finally:
        e.stop()
