"""A global limit's requests and window taken from the request's dynamic
metadata (Envoy Gateway's `limit.fromMetadata`): a Lua filter before Sluice
writes the struct `{requests_per_unit, unit}` another filter (ext_proc)
would, and Sluice sends that limit to sluice-limiter, or to a rate limit
service as the descriptor's `limit`."""


import pytest

import support
from support import free_port, limiter_cluster, load_through, request, sluice_config, wait_until
from support.windows import away_from_window_boundary

# The RLS descriptors of the rule `m`: 100 per hour per x-user.
from test_metadata_cost import DESCRIPTORS

NAMESPACE = "example.limit"

# Writes `x-limit: N/UNIT` as the struct {requests_per_unit = N, unit = UNIT}.
LUA = """
function envoy_on_request(handle)
  local limit = handle:headers():get("x-limit")
  if limit == nil then
    return
  end
  local requests, unit = string.match(limit, "^(%d+)/(%a+)$")
  handle:streamInfo():dynamicMetadata():set("example.limit", "lim",
    {requests_per_unit = tonumber(requests), unit = unit})
end
"""


def lua_filter() -> dict:
    return {
        "name": "envoy.filters.http.lua",
        "typed_config": {
            "@type": "type.googleapis.com/envoy.extensions.filters.http.lua.v3.Lua",
            "default_source_code": {"inline_string": LUA},
        },
    }


def start(tmp_path, config: dict, **kwargs):
    return support.start_envoy(tmp_path, [lua_filter(), support.wasm_filter(config)], **kwargs)


def limited_rule(limit: dict) -> dict:
    place = {"namespace": NAMESPACE, "key": "lim"}
    return {"name": "m", "key": ["header:x-user"], "limits": [limit | {"limit_from_metadata": place}]}


def remaining_after(port: int, user: str, limit: str | None) -> tuple[int, str | None]:
    headers = {"x-user": user} | ({"x-limit": limit} if limit is not None else {})
    r = request(port, "/", headers=headers)
    return r.status, r.header("x-ratelimit-remaining")


def assert_the_metadata_limit_applies(e):
    """3 per hour from metadata while the configured limit is 100 per hour."""
    away_from_window_boundary(3600, margin_s=10)
    assert remaining_after(e.port, "a", "3/HOUR") == (200, "2")
    # 40 more over 32 connections: exactly the 2 left pass.
    counts = load_through([e], per_envoy=40, connections=32, headers={"x-user": "a", "x-limit": "3/hour"})
    assert counts == {200: 2, 429: 38}
    # Without metadata, or with a malformed limit: the configured one.
    assert remaining_after(e.port, "b", None) == (200, "99")
    assert remaining_after(e.port, "c", "3/eon") == (200, "99")
    wait_until(lambda: e.sluice_stat("sluice.m.limit_metadata_invalid") == 1, what="limit_metadata_invalid == 1")
    assert e.sluice_stat("sluice.limiter_errors") == 0


def store_args(processes, store: str) -> dict:
    """The limiter's store: its memory, or a Redis server of the test's own."""
    return {"store": processes.redis().url} if store == "redis" else {}


@pytest.mark.parametrize("store", ["memory", "redis"])
def test_a_limit_from_metadata_is_checked_by_sluice_limiter(tmp_path, processes, store):
    limiter = processes.limiter(extra_args=["--store-timeout-ms", "5000"], **store_args(processes, store))
    config = sluice_config([limited_rule({"algorithm": "fixed_window", "requests": 100, "window": "1h",
                                          "scope": "global"})],
                           limiter={"cluster": "sluice_limiter", "authority": "sluice-limiter",
                                    "timeout": "5s", "failure_mode": "deny"})
    e = start(tmp_path, config, clusters=[limiter_cluster("sluice_limiter", [limiter.port])])
    try:
        assert_the_metadata_limit_applies(e)
    finally:
        e.stop()




@pytest.mark.parametrize("store", ["memory", "redis"])
def test_a_limit_from_metadata_is_the_rls_descriptors_limit(tmp_path, processes, store):
    path = tmp_path / "descriptors.yaml"
    path.write_text(DESCRIPTORS)
    grpc = free_port()
    processes.limiter(extra_args=["--grpc-listen", f"127.0.0.1:{grpc}", "--descriptors", str(path),
                                  "--store-timeout-ms", "5000"], **store_args(processes, store))
    config = sluice_config([limited_rule({"scope": "global"})],
                           limiter={"cluster": "rls", "protocol": "rls", "timeout": "5s", "failure_mode": "deny"})
    e = start(tmp_path, config, clusters=[limiter_cluster("rls", [grpc])])
    try:
        assert_the_metadata_limit_applies(e)
    finally:
        e.stop()
