"""sluice-limiter's descriptors from an xDS server, as Envoy Gateway serves
its rate limit deployment: `RateLimitConfig` resources over ADS (state of
the world), from a small management server written here (raw protobuf,
`support/xds_server.py`) that sends what Envoy Gateway's translator
produces. Envoy's own ratelimit filter is limited by what the server sends:
a configuration applies and is acknowledged, an update keeps the counters,
a bad one is refused (NACK naming the field) with the last good one in
force, and the server going away and coming back drops nothing."""

from __future__ import annotations

import copy
import re
import signal
import threading

import pytest


from support import LIMITER_BIN, free_port, load_through, request, wait_until
from support.processes import Limiter, Process
from support.rls import generic_key, header_action, start_rls_envoy
from support.tls import CA, upstream_tls
from support.xds_server import XdsServer, encode_config

from test_ratelimit_env import as_ratelimit

# Envoy Gateway's translation of an HTTPRoute rule limiting each `x-user`
# (internal/xds/translator/testdata/out/ratelimit-config/distinct-match.yaml's
# shape): a route descriptor holding the rule's distinct header descriptor.
DOMAIN = "default/eg/http"
ROUTE = "httproute/default/backend/rule/0/match/-1"


def gateway_config(requests_per_unit: int, unit: str = "YEAR", others: int = 0) -> dict:
    """The configuration with the rule's limit, and `others` other rules (as
    other HTTPRoutes' rules would add). A year: no window ends during a test."""
    extra = [{"key": f"httproute/default/other/rule/{n}/match/-1", "value": f"httproute/default/other/rule/{n}/match/-1",
              "descriptors": [{"key": "rule-0-match-0", "rate_limit": {"requests_per_unit": 1, "unit": "SECOND"}}]}
             for n in range(others)]
    return {"name": DOMAIN, "domain": DOMAIN, "descriptors": extra + [{
        "key": ROUTE, "value": ROUTE, "rate_limit": None,
        "descriptors": [{"key": "rule-0-match-0",
                         "rate_limit": {"requests_per_unit": requests_per_unit, "unit": unit,
                                        "unlimited": False, "name": "", "replaces": []},
                         "descriptors": [], "shadow_mode": False, "quota_mode": False,
                         "detailed_metric": False}],
        "shadow_mode": False, "quota_mode": False, "detailed_metric": False}]}


# Envoy Gateway's route actions for that rule.
ACTIONS = [[generic_key(ROUTE, ROUTE), header_action("x-user", "rule-0-match-0")]]


def codes(envoy, user: str, n: int) -> list[int]:
    return [request(envoy.port, "/", headers={"x-user": user}).status for _ in range(n)]


def loads(port: int) -> dict[str, int]:
    text = request(port, "/metrics").body.decode()
    return {m[0]: int(float(m[1])) for m in
            re.findall(r'^sluice_limiter_rls_config_loads_total\{result="(\w+)"\} (\S+)$', text, re.M)}


def test_envoy_gateways_xds_deployment_limits_envoy_by_what_the_server_sends(processes, tmp_path):
    redis = processes.redis()
    ca = CA(tmp_path, "ca")
    server_leaf, client_leaf = ca.issue("server"), ca.issue("client")
    xds = XdsServer(node_id="envoy-ratelimit", tls=(ca, server_leaf))
    # Envoy Gateway's environment for its ratelimit container, ports chosen here.
    env = {
        "LOG_LEVEL": "info", "USE_STATSD": "false", "REDIS_SOCKET_TYPE": "tcp",
        "REDIS_URL": f"127.0.0.1:{redis.port}", "HOST": "127.0.0.1", "PORT": str(free_port()),
        "GRPC_HOST": "127.0.0.1", "GRPC_PORT": str(free_port()),
        "GRPC_SERVER_USE_TLS": "true", "GRPC_SERVER_TLS_CERT": str(server_leaf.cert),
        "GRPC_SERVER_TLS_KEY": str(server_leaf.key), "GRPC_SERVER_TLS_CA_CERT": str(ca.cert),
        "CONFIG_TYPE": "GRPC_XDS_SOTW", "CONFIG_GRPC_XDS_SERVER_URL": f"localhost:{xds.port}",
        "CONFIG_GRPC_XDS_NODE_ID": "envoy-ratelimit", "CONFIG_GRPC_XDS_SERVER_USE_TLS": "true",
        "CONFIG_GRPC_XDS_CLIENT_TLS_CERT": str(client_leaf.cert),
        "CONFIG_GRPC_XDS_CLIENT_TLS_KEY": str(client_leaf.key),
        "CONFIG_GRPC_XDS_SERVER_TLS_CACERT": str(ca.cert),
        "FORCE_START_WITHOUT_INITIAL_CONFIG": "true",
        "CONFIG_GRPC_XDS_NODE_METADATA": "zone=a",
        "CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS": "x-tenant:blue",
        # Reconnect quickly (the peer's default is 10 s).
        "XDS_CLIENT_BACKOFF_INITIAL_INTERVAL": "100ms", "XDS_CLIENT_BACKOFF_MAX_INTERVAL": "400ms",
    }
    limiter = Process([str(as_ratelimit(tmp_path))], tmp_path / "ratelimit.log", env=env)
    envoy = None
    try:
        port = int(env["PORT"])
        wait_until(lambda: request(port, "/healthcheck").status == 200, what="/healthcheck")
        wait_until(lambda: xds.requests, what="the subscription")
        first = xds.requests[0]
        assert (first.node_id, first.node_metadata, first.version_info, first.response_nonce) == \
            ("envoy-ratelimit", {"zone": "a"}, "", "")
        assert first.type_url == "type.googleapis.com/ratelimit.config.ratelimit.v3.RateLimitConfig"
        assert xds.headers[0].get("x-tenant") == "blue"
        envoy = start_rls_envoy(tmp_path, DOMAIN, [int(env["GRPC_PORT"])], ACTIONS,
                                failure_mode_deny=True, transport_socket=upstream_tls(ca, client_leaf))
        # Started without a configuration: calls are answered UNAVAILABLE (Envoy denies: 500).
        assert codes(envoy, "a", 1) == [500]

        v1 = xds.set_configs([gateway_config(3)])
        wait_until(lambda: v1 in xds.acked(), what="version 1 acknowledged")
        assert codes(envoy, "a", 5) == [200, 200, 200, 429, 429]

        # An update: same window, a larger limit; user a's count (3) is kept.
        v2 = xds.set_configs([gateway_config(5)])
        wait_until(lambda: v2 in xds.acked(), what="version 2 acknowledged")
        assert codes(envoy, "a", 3) == [200, 200, 429]

        # A bad one (no unit) is refused, naming the resource and the field;
        # version 2 stays in force.
        bad = xds.set_configs([gateway_config(1, unit="UNKNOWN")])
        wait_until(lambda: xds.nacks(), what="the NACK")
        nack = xds.nacks()[0]
        assert nack.version_info == v2, nack
        assert nack.error == (f'xds:{DOMAIN}: descriptors[0].descriptors[0].rate_limit.unit: invalid rate limit unit '
                              '"UNKNOWN(0)" (expected second, minute, hour, day, week, month or year)'), nack.error
        assert bad not in xds.acked()
        assert codes(envoy, "a", 1) == [429]
        assert codes(envoy, "b", 6) == [200] * 5 + [429]
        assert loads(port) == {"ok": 2, "error": 1}

        # The server goes away: the configuration in force stays.
        xds.stop()
        wait_until(lambda: "xDS stream ended" in limiter.log(), what="the stream's end logged")
        assert codes(envoy, "c", 6) == [200] * 5 + [429]
        # It comes back with a new snapshot: the limiter subscribes again and applies it.
        v4 = xds.set_configs([gateway_config(7)])
        xds.start()
        wait_until(lambda: v4 in xds.acked(), what="version 4 acknowledged after the restart")
        again = [r for r in xds.requests if not r.response_nonce]
        assert len(again) == 2 and again[1].version_info == v2, again
        assert codes(envoy, "a", 3) == [200, 200, 429]
        assert loads(port) == {"ok": 3, "error": 1}
        # The counters are Redis's, under the limiter's keys.
        route, domain = ROUTE.replace("/", "%2F"), DOMAIN.replace("/", "%2F")
        assert sorted(redis.cli("--scan").split()) == [
            f"sluice:{{rls:{domain}/{route}={route}/rule-0-match-0={user}|fixed_window|31536000000}}"
            for user in "abc"]
        log = limiter.log()
        assert "descriptors loaded" in log and f"version={v4}" in log, log[-2000:]
    finally:
        if envoy:
            envoy.stop()
        limiter.stop()
        xds.stop()


def test_without_force_start_the_limiter_listens_once_configured(tmp_path):
    """`--descriptors-xds` alone: the limiter waits for its first
    configuration before it listens (as envoyproxy/ratelimit waits without
    FORCE_START_WITHOUT_INITIAL_CONFIG); a SIGHUP changes nothing."""
    xds = XdsServer(node_id="mine")
    port = free_port()
    grpc_port = free_port()
    args = ["--listen", f"127.0.0.1:{port}", "--grpc-listen", f"127.0.0.1:{grpc_port}",
            "--descriptors-xds", f"127.0.0.1:{xds.port}", "--xds-node-id", "mine"]
    limiter = Process([str(LIMITER_BIN), *args], tmp_path / "limiter.log")
    try:
        wait_until(lambda: "waiting for the first configuration" in limiter.log(), what="the wait logged")
        wait_until(lambda: xds.requests, what="the subscription")
        with pytest.raises(ConnectionRefusedError):
            request(port, "/healthz")
        version = xds.set_configs([gateway_config(2)])
        wait_until(lambda: request(port, "/healthz").status == 200, what="listening once configured")
        assert xds.acked() == [version]
        envoy = start_rls_envoy(tmp_path, DOMAIN, [grpc_port], ACTIONS, failure_mode_deny=True)
        try:
            assert codes(envoy, "a", 3) == [200, 200, 429]
            # SIGHUP re-reads files; there are none: logged, nothing changes.
            limiter.proc.send_signal(signal.SIGHUP)
            wait_until(lambda: "nothing to re-read" in limiter.log(), what="the SIGHUP logged")
            assert limiter.alive() and codes(envoy, "a", 1) == [429]
        finally:
            envoy.stop()
    finally:
        limiter.stop()
        xds.stop()


def test_a_resource_that_is_no_rate_limit_config_is_refused(tmp_path):
    xds = XdsServer(node_id="default")
    good = copy.deepcopy(gateway_config(2))
    xds.set_resources([encode_config(good)])
    limiter = Limiter(tmp_path, extra_args=["--grpc-listen", f"127.0.0.1:{free_port()}",
                                            "--descriptors-xds", f"http://127.0.0.1:{xds.port}"])
    try:
        wait_until(lambda: xds.acked() == ["1"], what="the first version acknowledged")
        xds.set_resources([b"\xff\xff"])
        wait_until(lambda: xds.nacks(), what="the NACK")
        assert xds.nacks()[0].error.startswith("resources[0]: not a RateLimitConfig"), xds.nacks()[0].error
        assert xds.nacks()[0].version_info == "1"
        assert loads(limiter.port) == {"ok": 1, "error": 1}
    finally:
        limiter.stop()
        xds.stop()


def test_two_limiters_follow_one_server_and_count_exactly_through_updates_under_load(processes, tmp_path):
    """Two limiters on one Redis, subscribed to one server; two Envoys, each
    calling both, 32 connections each. A new limit applies on both, then
    updates back to back (other routes' rules changing) lose or double no count."""
    redis = processes.redis()
    xds = XdsServer(node_id="default")
    v1 = xds.set_configs([gateway_config(400)])
    grpc_ports = [free_port(), free_port()]
    for port in grpc_ports:
        processes.limiter(store=f"redis://127.0.0.1:{redis.port}",
                          extra_args=["--grpc-listen", f"127.0.0.1:{port}", "--store-timeout-ms", "5000",
                                      "--descriptors-xds", f"127.0.0.1:{xds.port}"])
    envoys = [start_rls_envoy(tmp_path, DOMAIN, grpc_ports, ACTIONS, failure_mode_deny=True) for _ in range(2)]
    try:
        assert xds.acked().count(v1) == 2
        assert load_through(envoys, per_envoy=150, connections=32, headers={"x-user": "r"}) == {200: 300}
        v2 = xds.set_configs([gateway_config(500)])
        wait_until(lambda: xds.acked().count(v2) == 2, what="the new limit acknowledged by both")
        stop = threading.Event()

        def churn():
            # Back to back: each version once both limiters acknowledge the one before.
            n = 1
            while not stop.is_set():
                v = xds.set_configs([gateway_config(500, others=n % 7 + 1)])
                n += 1
                while xds.acked().count(v) < 2 and not stop.is_set():
                    stop.wait(0.002)

        t = threading.Thread(target=churn)
        t.start()
        try:
            before = len(set(xds.acked()))
            counts = load_through(envoys, per_envoy=300, connections=32, headers={"x-user": "r"})
            during = len(set(xds.acked())) - before
        finally:
            stop.set()
            t.join()
        assert counts == {200: 200, 429: 400}, counts
        assert xds.nacks() == []
        assert during >= 2, f"{during} versions applied during the load"
    finally:
        for e in envoys:
            e.stop()
        xds.stop()
