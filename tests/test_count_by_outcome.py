"""Limits counted by the response's outcome (`count_when`) in a real Envoy: a
login limit that counts only failed logins (401), local, global (the limiter
on memory and on Redis, 2 Envoys + 2 limiters) and through Limitador
(`limiter.protocol: rls`, charged at the stream's end). The fake login
upstream counts the failures it answered: what the limit must bound."""

import os
from pathlib import Path

import pytest

from support import (Process, free_port, limiter_cluster, load_through, request, sluice_config, start_envoy,
                     wait_until, wasm_filter)
from support.client import grpc_call
from support.login_upstream import GrpcLoginUpstream, LoginUpstream

LIMIT = 5
COUNT_401 = {"status": ["401"]}


def login_rule(**limit) -> list[dict]:
    return [{"name": "login", "key": ["header:x-user"],
             "limits": [{"algorithm": "fixed_window", "requests": LIMIT, "window": "1h",
                         "count_when": COUNT_401, **limit}]}]


def global_config(rules=None):
    return sluice_config(rules or login_rule(scope="global"),
                         limiter={"cluster": "sluice_limiter", "authority": "sluice-limiter", "timeout": "5s",
                                  "failure_mode": "deny"})


@pytest.fixture
def login():
    up = LoginUpstream()
    yield up
    up.stop()


@pytest.fixture
def proxy(tmp_path, login):
    started = []

    def start(config: dict, clusters=()):
        e = start_envoy(tmp_path, [wasm_filter(config)], clusters=[login.cluster(), *clusters],
                        hcm_extra=LoginUpstream.route_config())
        started.append(e)
        return e

    yield start
    for e in started:
        e.stop()


def attempt(port, user, outcome="fail", body=b"{}"):
    return request(port, "/login", method="POST", headers={"x-user": user, "x-login": outcome}, body=body).status


def test_only_failed_logins_count_and_are_cut_off_after_exactly_the_limit(proxy, login):
    e = proxy(sluice_config(login_rule()))
    # Successes are never counted.
    assert [attempt(e.port, "alice", "ok") for _ in range(50)] == [200] * 50
    statuses = [attempt(e.port, "alice") for _ in range(20)]
    print(f"\n20 failed logins of one user after 50 successes, limit {LIMIT} failures: {statuses}")
    assert statuses == [401] * LIMIT + [429] * (20 - LIMIT)
    assert login.failures["alice"] == LIMIT
    assert login.successes["alice"] == 50
    # Over the limit, a success is refused too: the key is over its limit.
    assert attempt(e.port, "alice", "ok") == 429
    # Another user is untouched.
    assert [attempt(e.port, "bob") for _ in range(LIMIT + 1)] == [401] * LIMIT + [429]
    wait_until(lambda: e.sluice_stat("sluice.login.outcome_given_back") == 50, what="50 successes given back")
    wait_until(lambda: e.sluice_stat("sluice.login.outcome_counted") == 2 * LIMIT, what="10 failures counted")
    wait_until(lambda: e.sluice_stat("sluice.login.denied") == 15 + 1 + 1, what="17 denied")


def test_a_stream_without_a_response_status_keeps_its_unit(proxy, login):
    e = proxy(sluice_config(login_rule()))
    # The upstream resets: Envoy answers 503 itself, which is no response.
    assert [attempt(e.port, "carol", "reset") for _ in range(2)] == [503] * 2
    statuses = [attempt(e.port, "carol") for _ in range(LIMIT)]
    print(f"\nafter 2 upstream resets, {LIMIT} failed logins: {statuses}")
    assert statuses == [401] * (LIMIT - 2) + [429] * 2
    assert login.failures["carol"] == LIMIT - 2
    wait_until(lambda: e.sluice_stat("sluice.login.outcome_counted") == LIMIT
               and e.sluice_stat("sluice.login.denied") == 2, what="resets and failures counted, 2 denied")
    assert e.sluice_stat("sluice.login.outcome_given_back") == 0


def test_per_address_and_per_username_from_the_body_as_the_guide_configures(proxy, login):
    rules = [{"name": "per-address", "key": ["client_ip"],
              "limits": [{"algorithm": "fixed_window", "requests": 8, "window": "1h", "count_when": COUNT_401}]},
             {"name": "per-user", "key": ["body:username"],
              "limits": [{"algorithm": "fixed_window", "requests": 3, "window": "1h", "count_when": COUNT_401}]}]
    e = proxy(sluice_config(rules))
    as_user = lambda name, outcome="fail": attempt(e.port, "-", outcome, f'{{"username":"{name}"}}'.encode())  # noqa: E731
    assert [as_user("ivan", "ok") for _ in range(5)] == [200] * 5
    assert [as_user("ivan") for _ in range(4)] == [401] * 3 + [429]
    # Other usernames from the same address, until the address's 8 failures.
    assert [as_user(f"user{i}") for i in range(6)] == [401] * 5 + [429]
    assert sum(login.failures.values()) == 8


def test_grpc_statuses_are_read_from_the_headers_or_the_trailers(tmp_path):
    upstream = GrpcLoginUpstream()
    rules = [{"name": "login", "key": ["header:x-user"],
              "limits": [{"algorithm": "fixed_window", "requests": 3, "window": "1h",
                          "count_when": {"grpc_status": [16]}}]}]
    e = start_envoy(tmp_path, [wasm_filter(sluice_config(rules))],
                    clusters=[limiter_cluster(upstream.name, [upstream.port])],
                    hcm_extra=LoginUpstream.route_config(upstream.name))
    try:
        def call(user, outcome):
            answer = grpc_call(e.port, [("x-user", user), ("x-login", outcome)])
            return {**answer.headers, **answer.trailers}.get("grpc-status")

        assert [call("judy", "ok") for _ in range(5)] == ["0"] * 5
        # Where each failure carries its status: the trailers after a
        # message, the headers of a trailers-only answer.
        late = grpc_call(e.port, [("x-user", "kim"), ("x-login", "fail-late")])
        assert "grpc-status" not in late.headers and late.trailers["grpc-status"] == "16"
        early = grpc_call(e.port, [("x-user", "kim"), ("x-login", "fail")])
        assert early.headers["grpc-status"] == "16"
        # 16 at once (trailers only), then 16 after a message (in the trailers).
        statuses = [call("judy", "fail"), call("judy", "fail-late"), call("judy", "fail"), call("judy", "fail")]
        print(f"\n5 gRPC successes, then 4 failed logins (status 16), limit 3: {statuses}")
        assert statuses == ["16", "16", "16", "8"]
        assert upstream.failures["judy"] == 3
        wait_until(lambda: e.sluice_stat("sluice.login.outcome_given_back") == 5, what="5 successes given back")
        wait_until(lambda: e.sluice_stat("sluice.login.outcome_counted") == 3 + 2, what="5 failures counted")
    finally:
        e.stop()
        upstream.stop()


def test_a_client_gone_before_the_response_keeps_its_unit(proxy, login):
    e = proxy(sluice_config(login_rule()))
    for _ in range(2):
        # The client gives up while the upstream holds its login.
        with pytest.raises(TimeoutError):
            request(e.port, "/login", method="POST", headers={"x-user": "leo", "x-login": "hold"}, body=b"{}",
                    timeout=0.5)
    wait_until(lambda: e.sluice_stat("sluice.login.outcome_counted") == 2, what="both streams ended, counted")
    assert [attempt(e.port, "leo") for _ in range(LIMIT - 1)] == [401] * (LIMIT - 2) + [429]


def burst_of_failures(envoys, login, user):
    counts = load_through(envoys, per_envoy=200 // len(envoys), connections=32 // len(envoys),
                          headers={"x-user": user, "x-login": "fail"})
    print(f"\n200 failed logins of one user from 32 connections across {len(envoys)} Envoy(s): {counts}, "
          f"the upstream answered {login.failures.get(user, 0)} failures")
    assert counts == {401: LIMIT, 429: 200 - LIMIT}
    assert login.failures[user] == LIMIT


def test_32_connections_of_failures_locally_reach_the_upstream_exactly_the_limit(proxy, login):
    burst_of_failures([proxy(sluice_config(login_rule()))], login, "dave")


@pytest.mark.parametrize("store", ["memory", "redis"])
def test_32_connections_of_failures_across_two_envoys_reach_the_upstream_exactly_the_limit(
        proxy, login, processes, store):
    redis = processes.redis() if store == "redis" else None
    limiters = [processes.limiter(**({"store": redis.url} if redis else {})) for _ in range(2 if redis else 1)]
    clusters = [limiter_cluster("sluice_limiter", [lim.port for lim in limiters])]
    envoys = [proxy(global_config(), clusters) for _ in range(2)]
    # Successes through both Envoys are given back at the limiter.
    for e in envoys:
        assert [attempt(e.port, "erin", "ok") for _ in range(10)] == [200] * 10
    burst_of_failures(envoys, login, "erin")
    for e in envoys:
        assert e.sluice_stat("sluice.limiter_errors") == 0


LIMITADOR = os.environ.get("LIMITADOR")
LIMITADOR_LIMITS = f"""\
- namespace: test
  max_value: {LIMIT}
  seconds: 3600
  conditions: ["descriptors[0].generic_key == 'login'"]
  variables: ["descriptors[0].user"]
"""


@pytest.fixture
def limitador(tmp_path):
    limits = tmp_path / "limits.yaml"
    limits.write_text(LIMITADOR_LIMITS)
    rls_port, http_port = free_port(), free_port()
    process = Process([LIMITADOR, "-b", "127.0.0.1", "-p", str(rls_port), "-B", "127.0.0.1", "-P", str(http_port),
                       "--rate-limit-headers", "DRAFT_VERSION_03", str(limits), "memory"],
                      Path(tmp_path) / "limitador.log")
    try:
        wait_until(lambda: process.alive() and request(http_port, "/status", timeout=2).status == 200,
                   what="limitador /status")

        def metric(name: str) -> int:
            for line in request(http_port, "/metrics").body.decode().splitlines():
                if line.startswith(name + "{") or line.startswith(name + " "):
                    return int(float(line.rsplit(" ", 1)[1]))
            return 0

        yield rls_port, metric
    finally:
        process.stop()


def through_limitador(proxy, rls_port):
    rules = [{"name": "login", "key": ["header:x-user"],
              "limits": [{"scope": "global", "count_when": COUNT_401,
                          "descriptor": [{"key": "generic_key", "value": "login"},
                                         {"key": "user", "from": "header:x-user"}]}]}]
    config = sluice_config(rules, limiter={"cluster": "rls", "protocol": "rls", "timeout": "5s",
                                           "failure_mode": "deny"})
    return proxy(config, [limiter_cluster("rls", [rls_port])])


needs_limitador = pytest.mark.skipif(not LIMITADOR, reason="LIMITADOR does not name a limitador-server binary")


@needs_limitador
def test_through_limitador_failures_are_charged_at_the_stream_end(proxy, login, limitador):
    rls_port, metric = limitador
    e = through_limitador(proxy, rls_port)
    # Successes make no call at all.
    assert [attempt(e.port, "frank", "ok") for _ in range(3)] == [200] * 3
    calls = lambda: metric("authorized_calls") + metric("limited_calls")  # noqa: E731
    assert calls() == 0
    statuses = []
    # One failure at a time, each charged before the next: the fifth's
    # answer says none remain, which refuses the key until Limitador's reset.
    for n in range(1, LIMIT + 1):
        statuses.append(attempt(e.port, "frank"))
        wait_until(lambda n=n: calls() == n, what=f"charge {n} answered")
    wait_until(lambda: attempt(e.port, "frank", "ok") == 429, what="the exhausted key refused")
    statuses += [attempt(e.port, "frank") for _ in range(20 - len(statuses))]
    authorized, limited = metric("authorized_calls"), metric("limited_calls")
    print(f"\nLimitador, {LIMIT} failures an hour, 20 failed logins one at a time: {statuses}; "
          f"the upstream answered {login.failures['frank']} failures; Limitador counted {authorized} charges "
          f"and refused {limited}")
    assert statuses == [401] * LIMIT + [429] * (20 - LIMIT)
    assert login.failures["frank"] == LIMIT
    assert (authorized, limited) == (LIMIT, 0)
    # Another user is untouched.
    assert attempt(e.port, "grace") == 401


@needs_limitador
def test_through_limitador_a_burst_of_failures_stays_within_the_requests_in_flight(proxy, login, limitador):
    rls_port, metric = limitador
    envoys = [through_limitador(proxy, rls_port) for _ in range(2)]
    counts = load_through(envoys, per_envoy=100, connections=16, headers={"x-user": "heidi", "x-login": "fail"})
    seen = login.failures["heidi"]
    print(f"\nLimitador, {LIMIT} failures an hour, 200 failed logins from 32 connections across 2 Envoys: "
          f"{counts}; the upstream answered {seen} failures; Limitador counted "
          f"{metric('authorized_calls')} charges and refused {metric('limited_calls')}")
    # Every failure the upstream answered was charged once; Limitador
    # counted exactly the limit and refused the rest. Beyond the limit went
    # what the Envoys admitted before each read an answer saying the key
    # was exhausted (a measure of the charges' latency, not asserted).
    assert counts == {401: seen, 429: 200 - seen}
    wait_until(lambda: metric("authorized_calls") + metric("limited_calls") == seen, what="every failure charged")
    assert metric("authorized_calls") == LIMIT
    assert LIMIT <= seen < 200
    for e in envoys:
        wait_until(lambda e=e: attempt(e.port, "heidi", "ok") == 429, what="the key refused in each Envoy")
