"""Sluice calling a rate limit service (limiter.protocol rls): sluice-limiter --grpc-listen as the service."""

import json

import pytest

from support import ALGORITHMS, free_port, limiter_cluster, load_through, request, sluice_config, wait_until

DESCRIPTORS = """\
domain: test
descriptors:
  - key: generic_key
    value: per-user
    descriptors:
      - key: x-user
        rate_limit:
          unit: hour
          requests_per_unit: {requests}
          algorithm: {algorithm}
  - key: plan
    value: free
    rate_limit:
      unit: minute
      requests_per_unit: 1000
"""

RULES = [{"name": "per-user", "key": ["header:x-user"], "limits": [{"scope": "global"}]}]


def rls_config(rules=RULES, failure_mode="deny", timeout="5s"):
    return sluice_config(rules, limiter={"cluster": "rls", "protocol": "rls", "timeout": timeout,
                                         "failure_mode": failure_mode})


def rls_limiter(processes, tmp_path, store="memory", requests=20, algorithm="fixed_window"):
    """A limiter serving RLS with the descriptors above; (limiter, its gRPC port)."""
    path = tmp_path / f"descriptors-{free_port()}.yaml"
    path.write_text(DESCRIPTORS.format(requests=requests, algorithm=algorithm))
    grpc = free_port()
    limiter = processes.limiter(store=store, extra_args=["--grpc-listen", f"127.0.0.1:{grpc}",
                                                         "--descriptors", str(path),
                                                         "--store-timeout-ms", "5000"])
    return limiter, grpc


@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_global_limits_through_the_service_are_exact_across_envoys(envoy, processes, tmp_path, algorithm):
    redis = processes.redis()
    served = [rls_limiter(processes, tmp_path, store=redis.url, algorithm=algorithm) for _ in range(2)]
    cluster = [limiter_cluster("rls", [grpc for _, grpc in served])]
    envoys = [envoy(rls_config(), clusters=cluster) for _ in range(2)]
    counts = load_through(envoys, per_envoy=30, connections=16, headers={"x-user": "hot"})
    assert counts == {200: 20, 429: 40}
    assert sum(e.sluice_stat("sluice.limiter_errors") for e in envoys) == 0


def test_headers_come_from_the_services_statuses(envoy, processes, tmp_path):
    _, grpc = rls_limiter(processes, tmp_path)
    e = envoy(rls_config(), clusters=[limiter_cluster("rls", [grpc])])
    r = request(e.port, "/", headers={"x-user": "a"})
    assert r.status == 200
    assert (r.header("x-ratelimit-limit"), r.header("x-ratelimit-remaining")) == ("20", "19")
    assert r.header("ratelimit-policy") == '"per-user";q=20;w=3600'
    for _ in range(19):
        request(e.port, "/", headers={"x-user": "a"})
    denied = request(e.port, "/", headers={"x-user": "a"})
    assert denied.status == 429
    assert 1 <= int(denied.header("retry-after")) <= 3600
    assert denied.header("x-ratelimit-remaining") == "0"


def test_the_over_limit_cache_spares_the_service(envoy, processes, tmp_path):
    limiter, grpc = rls_limiter(processes, tmp_path, requests=2)
    e = envoy(rls_config(), clusters=[limiter_cluster("rls", [grpc])])
    statuses = [request(e.port, "/", headers={"x-user": "a"}).status for _ in range(3)]
    assert statuses == [200, 200, 429]
    before = limiter.metric("sluice_limiter_rls_calls_total")
    assert all(request(e.port, "/", headers={"x-user": "a"}).status == 429 for _ in range(10))
    assert limiter.metric("sluice_limiter_rls_calls_total") <= before + 2


def test_an_explicit_descriptor_and_a_weight(envoy, processes, tmp_path):
    _, grpc = rls_limiter(processes, tmp_path)
    rules = [{"name": "site", "key": ["const:all"], "cost": 400,
              "limits": [{"scope": "global", "descriptor": [{"key": "plan", "value": "free"}]}]}]
    e = envoy(rls_config(rules), clusters=[limiter_cluster("rls", [grpc])])
    assert [request(e.port, "/").status for _ in range(3)] == [200, 200, 429]


@pytest.mark.parametrize("failure_mode,status", [("deny", 429), ("allow", 200)])
def test_a_service_down_follows_the_failure_mode(envoy, processes, tmp_path, failure_mode, status):
    limiter, grpc = rls_limiter(processes, tmp_path)
    e = envoy(rls_config(failure_mode=failure_mode, timeout="1s"), clusters=[limiter_cluster("rls", [grpc])])
    assert request(e.port, "/", headers={"x-user": "a"}).status == 200
    limiter.stop()
    assert request(e.port, "/", headers={"x-user": "a"}).status == status
    stat = "sluice.limiter_errors" if failure_mode == "deny" else "sluice.failure_mode_allowed"
    wait_until(lambda: e.sluice_stat(stat) == 1, what=f"{stat} == 1")


def test_limit_fields_on_an_rls_limit_are_refused(envoy):
    e = envoy(sluice_config([{"name": "ok", "key": ["const:k"],
                              "limits": [{"algorithm": "gcra", "requests": 1, "window": "1h"}]}]))
    rules = [{"name": "r", "key": ["client_ip"], "limits": [{"scope": "global", "requests": 10}]}]
    assert not e.push_config(json.dumps(rls_config(rules)))
    lines = [line for line in e.log().splitlines() if "sluice: invalid configuration" in line]
    assert lines and "rules[0].limits[0].requests:" in lines[-1], lines
