"""The limiter's introspection API end to end (`--introspection`): a flood
from one key and steady traffic from others through Envoy; `/v1/top` names
the flooding key first with the exact refusals the limiter decided;
`/v1/keys` reads what the response headers said; the top-keys metric keeps
its series count under a flood of 100,000 distinct keys; off it answers 404;
over TLS and mutual TLS; and the `sluice` command's verbs over it."""

import hashlib
import json
import math
import os
import subprocess
from pathlib import Path

import pytest

from support import ROOT, concurrent_requests, free_port, limiter_cluster, request, run_load, sluice_config
from support.tls import CA, client_context

CLI = Path(os.environ.get("SLUICE_CLI", ROOT / "target" / "release" / "sluice"))

# count_when: every global denial is decided by the limiter (none is kept
# in the filter's over-limit cache), so the limiter sees every refusal.
RULE = {"name": "per-user", "key": ["header:x-user"],
        "limits": [{"algorithm": "fixed_window", "requests": 5, "window": "1h", "scope": "global",
                    "count_when": {"status": ["200"]}}]}
KEY_LIMIT = {"algorithm": "fixed_window", "requests": "5", "window_ms": "3600000"}

DESCRIPTORS = """\
domain: shop
descriptors:
  - key: remote_address
    rate_limit: {unit: second, requests_per_unit: 10, name: per-ip}
  - key: path
    value: /login
    shadow_mode: true
    rate_limit: {unit: minute, requests_per_unit: 5}
"""
# The Sluice filter over RLS sends (generic_key: the rule's name, x-user).
RLS_DESCRIPTORS = """\
domain: test
descriptors:
  - key: generic_key
    value: per-user
    descriptors:
      - key: x-user
        rate_limit: {unit: hour, requests_per_unit: 3}
"""


def get(limiter, path, tls=None):
    r = request(limiter.port, path, tls=tls)
    return r.status, json.loads(r.body)


def introspecting(processes, tmp_path, *extra, tls=None, store="memory", grpc=None):
    descriptors = tmp_path / "descriptors.yaml"
    descriptors.write_text(DESCRIPTORS)
    return processes.limiter(tls=tls, store=store, extra_args=[
        "--introspection", "--descriptors", str(descriptors),
        "--grpc-listen", f"127.0.0.1:{grpc or free_port()}", *extra])


def through_envoy(envoy, limiter):
    cfg = sluice_config([RULE], limiter={"cluster": "sluice_limiter", "authority": "sluice-limiter",
                                         "timeout": "5s", "failure_mode": "deny"})
    return envoy(cfg, clusters=[limiter_cluster("sluice_limiter", [limiter.port])])


def test_an_rls_flood_is_named_first_and_its_counter_read(envoy, processes, tmp_path):
    (tmp_path / "rls").mkdir()
    (tmp_path / "rls" / "test.yaml").write_text(RLS_DESCRIPTORS)
    (tmp_path / "rls" / "shop.yaml").write_text(DESCRIPTORS)
    grpc = free_port()
    limiter = processes.limiter(extra_args=["--introspection", "--introspection-keys", "clear",
                                            "--descriptors", str(tmp_path / "rls"),
                                            "--grpc-listen", f"127.0.0.1:{grpc}"])
    cfg = sluice_config([{"name": "per-user", "key": ["header:x-user"], "limits": [{"scope": "global"}]}],
                        limiter={"cluster": "rls", "protocol": "rls", "timeout": "5s", "failure_mode": "deny"})
    e = envoy(cfg, clusters=[limiter_cluster("rls", [grpc])])
    assert concurrent_requests(e.port, 8, 100, headers={"x-user": "flood"}) == {200: 3, 429: 97}
    assert concurrent_requests(e.port, 1, 2, headers={"x-user": "calm"}) == {200: 2}
    over = limiter.metric('sluice_limiter_rls_calls_total{domain="test",result="over_limit"}')
    status, top = get(limiter, "/v1/top?domain=test")
    assert status == 200
    assert top == {"domain": "test", "keys": [{"key": "generic_key=per-user/x-user=flood",
                                                "limit": "generic_key_per-user.x-user",
                                                "refusals": over, "error": 0}]}
    assert over >= 1
    for user, remaining in [("flood", 0), ("calm", 1)]:
        key = f"generic_key%3Dper-user%2Fx-user%3D{user}"
        status, state = get(limiter, f"/v1/keys?service=rls&domain=test&key={key}")
        assert status == 200
        (limit,) = state["limits"]
        assert (limit["algorithm"], limit["window_ms"], limit["limit"], limit["remaining"]) == (
            "fixed_window", 3_600_000, 3, remaining)


def top_series(limiter) -> list[str]:
    text = request(limiter.port, "/metrics").body.decode()
    return [line for line in text.splitlines() if line.startswith("sluice_limiter_top_limited_key_refusals{")]


@pytest.mark.parametrize("store", ["memory", "redis"])
def test_a_flood_is_named_first_and_a_keys_state_agrees_with_the_headers(envoy, processes, tmp_path, store):
    url = processes.redis().url if store == "redis" else "memory"
    limiter = introspecting(processes, tmp_path, "--introspection-keys", "clear", store=url)
    e = through_envoy(envoy, limiter)
    assert concurrent_requests(e.port, 16, 300, headers={"x-user": "flood"}) == {200: 5, 429: 295}
    for user in [f"steady{i}" for i in range(10)]:
        assert concurrent_requests(e.port, 2, 3, headers={"x-user": user}) == {200: 3}
    assert concurrent_requests(e.port, 1, 7, headers={"x-user": "mild"}) == {200: 5, 429: 2}
    status, top = get(limiter, "/v1/top?domain=test")
    assert status == 200
    assert top == {"domain": "test", "keys": [
        {"key": "per-user/0/flood", "limit": "fixed_window|3600000", "refusals": 295, "error": 0},
        {"key": "per-user/0/mild", "limit": "fixed_window|3600000", "refusals": 2, "error": 0}]}
    # the refusals listed are every refusal the limiter decided
    assert limiter.metric('sluice_limiter_decisions_total{domain="test",result="denied"}') == 297

    last = [request(e.port, "/", headers={"x-user": "alice"}) for _ in range(3)][-1]
    remaining, reset_s = int(last.header("x-ratelimit-remaining")), int(last.header("x-ratelimit-reset"))
    query = "&".join(f"{k}={v}" for k, v in KEY_LIMIT.items())
    for _ in range(2):  # reading twice: reading consumes nothing
        status, state = get(limiter, f"/v1/keys?domain=test&key=per-user/0/alice&{query}")
        assert status == 200
        (limit,) = state["limits"]
        assert (state["key"], limit["limit"], limit["remaining"]) == ("per-user/0/alice", 5, remaining)
        assert reset_s - 1 <= math.ceil(limit["reset_ms"] / 1000) <= reset_s
    assert remaining == 2


def test_keys_are_hashed_by_default_and_the_metric_keeps_its_series_under_100000_keys(processes, tmp_path):
    limiter = introspecting(processes, tmp_path, "--top-keys", "10")
    url = f"http://127.0.0.1:{limiter.port}/v1/check"
    # hits above requests: every check is refused (the cost never fits)
    body = ('{"domain":"flood","limits":[{"key":"k{n}","algorithm":"fixed_window",'
            '"requests":1,"window_ms":3600000,"hits":2}]}')
    warm = run_load(url, connections=4, requests=1_000, body=body)
    assert warm.count(200) == 1_000
    before = top_series(limiter)
    assert len(before) == 10
    assert all(line.startswith('sluice_limiter_top_limited_key_refusals{domain="flood",key="') for line in before)
    flood = run_load(url, connections=8, requests=100_000, first=1_000, body=body, timeout=10)
    assert flood.count(200) == 100_000
    after = top_series(limiter)
    assert len(after) == len(before) == 10
    status, top = get(limiter, "/v1/top?domain=flood&n=256")
    assert status == 200 and len(top["keys"]) == 256
    for k in top["keys"]:
        assert len(k["key"]) == 16 and int(k["key"], 16) >= 0
        # 101,000 refusals over 256 entries: no count is off by more than that
        assert k["error"] <= 101_000 // 256
    status, key = get(limiter, "/v1/keys?domain=flood&key=k1&algorithm=fixed_window&requests=1&window_ms=3600000")
    assert (status, key["key"]) == (200, hashlib.sha256(b"k1").hexdigest()[:16])


def test_without_the_flag_every_endpoint_answers_404(processes):
    limiter = processes.limiter()
    for path in ["/v1/limits", "/v1/keys?domain=d&key=k", "/v1/top?domain=d"]:
        status, body = get(limiter, path)
        assert (status, body) == (404, {"error": "introspection is off (start sluice-limiter with --introspection)"})
    assert top_series(limiter) == []


def test_bad_parameters_get_a_400_naming_them(processes, tmp_path):
    limiter = introspecting(processes, tmp_path)
    assert get(limiter, "/v1/top") == (400, {"error": "domain: required"})
    assert get(limiter, "/v1/limits?page_size=0") == (
        400, {"error": 'page_size: expected a whole number from 1 to 1000, got "0"'})


@pytest.mark.parametrize("mtls", [False, True], ids=["tls", "mtls"])
def test_served_over_tls_and_mutual_tls(processes, tmp_path, mtls):
    ca = CA(tmp_path, "ca")
    server, client = ca.issue("server"), ca.issue("client")
    flags = ["--tls-cert", str(server.cert), "--tls-key", str(server.key)]
    flags += ["--tls-client-ca", str(ca.cert)] if mtls else []
    context = client_context(ca, client if mtls else None)
    limiter = introspecting(processes, tmp_path, *flags, tls=context)
    status, limits = get(limiter, "/v1/limits?domain=shop&page_size=1", tls=context)
    assert (status, limits["next_page_token"]) == (200, "1")
    assert limits["domains"][0]["limits"][0]["descriptors"] == [{"key": "path", "value": "/login"}]
    # the sluice command over the same TLS
    https = ["--limiter", f"https://127.0.0.1:{limiter.port}", "--cacert", str(ca.cert)]
    mine = ["--cert", str(client.cert), "--key", str(client.key)] if mtls else []
    out = sluice("limits", *https, *mine, "--json")
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout) == get(limiter, "/v1/limits", tls=context)[1]
    if mtls:
        with pytest.raises(OSError):  # the handshake is refused
            request(limiter.port, "/v1/limits", tls=client_context(ca, None))
        out = sluice("limits", *https)
        assert out.returncode == 2 and out.stderr.startswith("sluice limits: https://127.0.0.1:"), out.stderr


def sluice(*args) -> subprocess.CompletedProcess:
    return subprocess.run([str(CLI), *args], capture_output=True, text=True, timeout=30)


def test_the_sluice_verbs_print_tables_and_json(envoy, processes, tmp_path):
    limiter = introspecting(processes, tmp_path, "--introspection-keys", "clear")
    e = through_envoy(envoy, limiter)
    assert concurrent_requests(e.port, 4, 8, headers={"x-user": "bob"}) == {200: 5, 429: 3}
    url = f"http://127.0.0.1:{limiter.port}"

    out = sluice("limits", "--limiter", url)
    assert out.returncode == 0, out.stderr
    assert out.stdout == (
        "DOMAIN  DESCRIPTORS     NAME    LIMIT      MODE\n"
        "shop    path=/login             5/minute   shadow\n"
        "shop    remote_address  per-ip  10/second\n")
    out = sluice("limits", "--limiter", url, "--json")
    assert json.loads(out.stdout) == get(limiter, "/v1/limits")[1]

    out = sluice("top", "test", "--limiter", url)
    assert out.stdout == (
        "#  KEY             LIMIT                 REFUSALS  ERROR\n"
        "1  per-user/0/bob  fixed_window|3600000  3         0\n")
    out = sluice("top", "test", "-n", "1", "--limiter", url, "--json")
    assert json.loads(out.stdout) == get(limiter, "/v1/top?domain=test&n=1")[1]

    args = ["--algorithm", "fixed_window", "--requests", "5", "--window-ms", "3600000"]
    out = sluice("key", "test", "per-user/0/bob", *args, "--limiter", url, "--json")
    assert out.returncode == 0, out.stderr
    (state,) = json.loads(out.stdout)["limits"]
    assert (state["limit"], state["remaining"]) == (5, 0)
    out = sluice("key", "test", "per-user/0/bob", *args, "--limiter", url)
    header, row = out.stdout.splitlines()
    assert header.split() == ["ALGORITHM", "WINDOW_MS", "LIMIT", "REMAINING", "RESET_MS", "RETRY_AFTER_MS",
                              "DEBT", "HELD", "BLOCKED_UNTIL_MS"]
    assert row.split()[:4] == ["fixed_window", "3600000", "5", "0"]

    out = sluice("key", "shop", "remote_address=10.0.0.1", "--service", "rls", "--limiter", url, "--json")
    assert json.loads(out.stdout) == {"domain": "shop", "key": "remote_address=10.0.0.1", "limits": [
        {"algorithm": "fixed_window", "window_ms": 1000, "limit": 10, "remaining": 10, "reset_ms": 0}]}

    out = sluice("top", "--limiter", url)
    assert (out.returncode, out.stderr) == (2, "sluice top: expected DOMAIN [-n N]\n")
    out = sluice("top", "test", "-n", "0", "--limiter", url)
    assert (out.returncode, out.stderr) == (1, 'sluice top: n: expected a whole number from 1 to 256, got "0"\n')


@pytest.mark.parametrize("store", ["memory", "redis"])
def test_a_key_in_debt_shows_what_it_owes_and_a_block_shows_at_once(processes, tmp_path, store):
    """A GCRA of 2 per hour charged 5 after its responses owes 3 (it drains
    one unit per 30 minutes); a key boxed by its refusal shows the block's
    end while its quota is spent; reading started no block on the key in
    debt."""
    redis_url = processes.redis().url if store == "redis" else "memory"
    limiter = introspecting(processes, tmp_path, "--introspection-keys", "clear", store=redis_url)
    limit = {"algorithm": "gcra", "requests": 2, "window_ms": 3_600_000, "block_ms": 600_000}
    charged = request(limiter.port, "/v1/charge", method="POST", body=json.dumps(
        {"domain": "d", "limits": [{"key": "eve", "algorithm": "gcra", "requests": 2,
                                    "window_ms": 3_600_000, "charge": 5}]}))
    assert charged.status == 200, charged.body
    query = "&".join(f"{k}={v}" for k, v in limit.items())
    status, body = get(limiter, f"/v1/keys?domain=d&key=eve&{query}")
    assert status == 200, body
    (eve,) = body["limits"]
    assert (eve["remaining"], eve["debt"], "blocked_until_ms" in eve) == (0, 3, False), eve
    out = sluice("key", "d", "eve", "--algorithm", "gcra", "--requests", "2", "--window-ms", "3600000",
                 "--limiter", f"http://127.0.0.1:{limiter.port}")
    header, row = out.stdout.splitlines()
    assert dict(zip(header.split(), row.split()))["DEBT"] == "3", out.stdout
    check = {"domain": "d", "limits": [{"key": "mal", **limit}]}
    answers = [json.loads(request(limiter.port, "/v1/check", method="POST", body=json.dumps(check)).body)
               for _ in range(3)]
    assert [a["allowed"] for a in answers] == [True, True, False]
    assert answers[2]["limits"][0]["blocked"] is True
    status, body = get(limiter, f"/v1/keys?domain=d&key=mal&{query}")
    (mal,) = body["limits"]
    assert mal["remaining"] == 0 and 0 < mal["retry_after_ms"] <= 600_000, mal
    assert "blocked_until_ms" in mal and "debt" not in mal, mal
    assert limiter.metric("sluice_limiter_blocks_started_total") == 1
