"""Top limited keys (`top_limited_keys`) and the access log's key
(`access_log_key`) end to end, in Envoy with two workers: one address floods
over 32 connections while others stay steady and the list names the flood
first, its count within the summary's stated error; refusing 100,000
distinct keys adds no Envoy stat; the access log prints the refused key."""

import hashlib
import json

import pytest

import support
from support import request, run_load, sluice_config, start_load, wait_until

PATH = "/sluice/top-limited"
FLOOD_IP = "203.0.113.7"
PER_IP = {"name": "per-ip", "key": ["client_ip"],
          "limits": [{"algorithm": "fixed_window", "requests": 5, "window": "1h"}]}


def hashed(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()[:16]


def top(port) -> dict:
    """{rule: [keys, most refused first]} as the filter lists them."""
    r = request(port, PATH)
    assert r.status == 200, r.body
    return {rule["rule"]: rule["keys"] for rule in json.loads(r.body)["rules"]}


def test_the_flooding_address_comes_first_across_both_workers(tmp_path):
    cfg = sluice_config([PER_IP], client_ip={"xff_trusted_hops": 1}, headers="none",
                        top_limited_keys={"entries": 8, "keys": "clear", "path": PATH})
    e = support.start_envoy(tmp_path, [support.wasm_filter(cfg)], concurrency=2)
    try:
        url = f"http://127.0.0.1:{e.port}/"
        flood = start_load(url, connections=32, requests=4000, headers={"x-forwarded-for": FLOOD_IP})
        # 40 steady clients, 10 requests each: 5 admitted, 5 refused.
        steady = run_load(url, connections=4, requests=400, headers={"x-forwarded-for": "198.18.0.{n}"},
                          distinct=40)
        flooded = flood.wait(timeout=120)
        assert flooded.count(429) + flooded.count(200) == 4000 and flooded.count(200) == 5
        assert steady.count(429) == 200 and steady.count(200) == 200
        refused = flooded.count(429)

        def folded():
            keys = top(e.port)["per-ip"]
            return keys and keys[0]["key"] == FLOOD_IP and keys[0]["refusals"] >= refused
        wait_until(folded, what="the flood's refusals folded into the list")
        keys = top(e.port)["per-ip"]
        first = keys[0]
        # refusals is an upper bound, refusals - error a lower one.
        assert first["refusals"] - first["error"] <= refused <= first["refusals"]
        # 4,195 refusals into 8 entries: each error within 2n/k.
        assert all(k["error"] <= 2 * (refused + 200) // 8 for k in keys)
        assert len(keys) == 8
        assert all(k["key"].startswith("198.18.0.") for k in keys[1:])
        assert request(e.port, PATH, method="POST").status == 405
    finally:
        e.stop()


def test_refusing_100000_distinct_keys_adds_no_stat(tmp_path):
    # A weight of 2 against a limit of 1: every request is refused, under
    # a new key each.
    rule = {"name": "per-ip", "key": ["client_ip"], "cost": "header:x-cost",
            "limits": [{"algorithm": "fixed_window", "requests": 1, "window": "1h"}]}
    cfg = sluice_config([rule], client_ip={"xff_trusted_hops": 1}, headers="none",
                        top_limited_keys={"entries": 32, "path": PATH})
    e = support.start_envoy(tmp_path, [support.wasm_filter(cfg)], concurrency=2)
    try:
        url = f"http://127.0.0.1:{e.port}/"
        run_load(url, connections=4, requests=100, headers={"x-forwarded-for": "{ip}", "x-cost": "2"})
        wait_until(lambda: len(top(e.port)["per-ip"]) > 0, what="the first refusals listed")
        before = len(e.stats())
        report = run_load(url, connections=32, requests=100_000, distinct=100_000,
                          headers={"x-forwarded-for": "{ip}", "x-cost": "2"})
        assert report.count(429) == 100_000
        wait_until(lambda: e.sluice_stat("sluice.per-ip.denied") == 100_100, what="the denials flushed")
        assert len(e.stats()) == before
        keys = top(e.port)["per-ip"]
        assert len(keys) == 32
        assert all(len(k["key"]) == 16 for k in keys)
    finally:
        e.stop()


@pytest.mark.parametrize("scope", ["local", "global"])
def test_the_access_log_prints_the_refused_key(tmp_path, processes, scope):
    log = tmp_path / "access.log"
    access_log = [{"name": "envoy.access_loggers.file", "typed_config": {
        "@type": "type.googleapis.com/envoy.extensions.access_loggers.file.v3.FileAccessLog",
        "path": str(log),
        "log_format": {"text_format_source": {"inline_string":
            "%RESPONSE_CODE% %FILTER_STATE(wasm.sluice_rule:PLAIN)% %FILTER_STATE(wasm.sluice_key:PLAIN)%\n"}}}}]
    per_user = {"name": "per-user", "key": ["header:x-user"],
                "limits": [{"algorithm": "fixed_window", "requests": 1, "window": "1h", "scope": scope}]}
    # Global: the limiter refuses the second request (no over-limit cache
    # has the key yet), and the refusal carries the key as a local one does.
    extra, clusters = {}, []
    if scope == "global":
        limiter = processes.limiter()
        extra = {"limiter": {"cluster": "sluice_limiter", "authority": "sluice-limiter", "timeout": "5s",
                             "failure_mode": "allow"}}
        clusters = [support.limiter_cluster("sluice_limiter", [limiter.port])]
    cfg = sluice_config([per_user], access_log_key="hashed", **extra)
    e = support.start_envoy(tmp_path, [support.wasm_filter(cfg)], clusters=clusters,
                            hcm_extra={"access_log": access_log})
    try:
        assert [request(e.port, "/", headers={"x-user": "alice"}).status for _ in range(2)] == [200, 429]

        def lines():
            return log.read_text().splitlines() if log.exists() else []
        wait_until(lambda: len(lines()) == 2, what="two access log lines")
    finally:
        e.stop()
    assert sorted(lines()) == ["200 - -", f"429 per-user {hashed('alice')}"]
