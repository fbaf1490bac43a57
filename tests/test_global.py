"""Global limits end to end: Envoys calling sluice-limiter, memory and Redis stores."""

import http.server
import socket
import threading
import time

import pytest

from support import ALGORITHMS, limiter_cluster, load_through, request, sluice_config, wait_until


def global_config(rules, failure_mode="allow", timeout="250ms", **top):
    return sluice_config(rules, limiter={"cluster": "sluice_limiter", "authority": "sluice-limiter",
                                         "timeout": timeout, "failure_mode": failure_mode}, **top)


def global_rule(algorithm="gcra", requests=2, window="1h", name="g", **extra):
    return {"name": name, "key": ["header:x-user"],
            "limits": [{"algorithm": algorithm, "requests": requests, "window": window, "scope": "global"}],
            **extra}


# Exactness tests must not confuse a slow machine with a wrong count: generous
# timeouts, and a limiter failure denies (it can only lower the count).
EXACT = {"failure_mode": "deny", "timeout": "5s"}
PATIENT = ["--store-timeout-ms", "5000"]


def assert_exact(counts, admitted, total, envoys):
    failures = sum(e.sluice_stat("sluice.limiter_errors") for e in envoys)
    assert counts == {200: admitted, 429: total - admitted}, f"{counts}; limiter failures: {failures}"


def clusters(*limiters):
    return [limiter_cluster("sluice_limiter", [lim.port for lim in limiters])]


@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_two_envoys_two_limiters_one_redis_admit_exactly_the_limit(envoy, processes, algorithm):
    redis = processes.redis()
    limiters = [processes.limiter(store=redis.url, extra_args=PATIENT) for _ in range(2)]
    cfg = global_config([global_rule(algorithm, requests=300, window="365d")], **EXACT)
    envoys = [envoy(cfg, clusters=clusters(*limiters)) for _ in range(2)]
    counts = load_through(envoys, per_envoy=600, headers={"x-user": "hot"})
    assert_exact(counts, 300, 1200, envoys)


@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_memory_store_admits_exactly_the_limit(envoy, processes, algorithm):
    limiter = processes.limiter()
    cfg = global_config([global_rule(algorithm, requests=300, window="365d")], **EXACT)
    envoys = [envoy(cfg, clusters=clusters(limiter)) for _ in range(2)]
    counts = load_through(envoys, per_envoy=600, headers={"x-user": "hot"})
    assert_exact(counts, 300, 1200, envoys)


def test_redis_cluster_admits_exactly_the_limit(envoy, processes):
    nodes = processes.redis_cluster(3)
    store = "redis-cluster://" + ",".join(f"127.0.0.1:{n.port}" for n in nodes)
    limiters = [processes.limiter(store=store, extra_args=PATIENT) for _ in range(2)]
    # two rules whose keys land in different slots: a denied check consumes nothing
    cfg = global_config([
        global_rule("gcra", requests=200, window="365d", name="user"),
        {"name": "site", "key": ["const:site"],
         "limits": [{"algorithm": "sliding_log", "requests": 1000, "window": "1h", "scope": "global"}]},
    ])
    envoys = [envoy(cfg, clusters=clusters(*limiters)) for _ in range(2)]
    counts = load_through(envoys, per_envoy=400, headers={"x-user": "hot"})
    assert counts == {200: 200, 429: 600}
    # "site" spent exactly what was admitted: 800 left
    r = request(envoys[0].port, "/", headers={"x-user": "fresh"})
    assert r.status == 200
    assert r.header("x-ratelimit-remaining") == "199"  # the fresh user's 200 is closer to exhaustion


def test_headers_and_retry_after_come_from_the_limiter(envoy, processes):
    limiter = processes.limiter()
    e = envoy(global_config([global_rule("gcra", requests=3, window="1m")], **EXACT), clusters=clusters(limiter))
    alice = {"x-user": "alice"}
    remaining = [request(e.port, "/", headers=alice).header("x-ratelimit-remaining") for _ in range(3)]
    assert remaining == ["2", "1", "0"]
    denied = request(e.port, "/", headers=alice)
    assert denied.status == 429
    assert 1 <= int(denied.header("retry-after")) <= 20  # one request per 20 s
    assert denied.header("ratelimit-policy") == '"g";q=3;w=60'


def test_local_deny_makes_no_call_out(envoy, processes):
    limiter = processes.limiter()
    rule = {"name": "both", "key": ["header:x-user"],
            "limits": [{"algorithm": "fixed_window", "requests": 1, "window": "365d"},
                       {"algorithm": "gcra", "requests": 100, "window": "1h", "scope": "global"}]}
    e = envoy(global_config([rule], **EXACT), clusters=clusters(limiter))
    assert [request(e.port, "/", headers={"x-user": "a"}).status for _ in range(4)] == [200, 429, 429, 429]
    assert limiter.metric("sluice_limiter_checks_total") == 1


def test_over_limit_cache_spares_the_limiter(envoy, processes):
    limiter = processes.limiter()
    e = envoy(global_config([global_rule("gcra", requests=2, window="1h")], **EXACT), clusters=clusters(limiter))
    statuses = [request(e.port, "/", headers={"x-user": "flood"}).status for _ in range(20)]
    assert statuses == [200, 200] + [429] * 18
    # two admits and the first deny reach the limiter; the rest are answered from the cache
    assert limiter.metric("sluice_limiter_checks_total") == 3
    denied = request(e.port, "/", headers={"x-user": "flood"})
    assert int(denied.header("retry-after")) >= 1


@pytest.mark.parametrize("failure_mode,expected", [("allow", 200), ("deny", 429)])
def test_limiter_down_follows_failure_mode_within_the_timeout(envoy, processes, failure_mode, expected):
    limiter = processes.limiter()
    e = envoy(global_config([global_rule("gcra", requests=100)], failure_mode=failure_mode, timeout="200ms"),
              clusters=clusters(limiter))
    assert request(e.port, "/", headers={"x-user": "a"}).status == 200
    limiter.stop()
    for i in range(5):
        started = time.monotonic()
        r = request(e.port, "/", headers={"x-user": f"u{i}"})
        elapsed = time.monotonic() - started
        assert r.status == expected
        assert elapsed < 2.0, f"request took {elapsed:.2f}s with the limiter down"
    stat = "sluice.failure_mode_allowed" if failure_mode == "allow" else "sluice.limiter_errors"
    wait_until(lambda: e.sluice_stat(stat) >= 5, what=f"{stat} >= 5")


def test_limiter_timeout_follows_failure_mode(envoy):
    # a "limiter" that accepts connections and never answers
    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen(64)
    try:
        e = envoy(global_config([global_rule("gcra")], failure_mode="allow", timeout="100ms"),
                  clusters=[limiter_cluster("sluice_limiter", [silent.getsockname()[1]])])
        started = time.monotonic()
        assert request(e.port, "/", headers={"x-user": "a"}).status == 200
        assert time.monotonic() - started < 2.0
    finally:
        silent.close()


def test_redis_restart_limiter_recovers_by_itself(processes):
    redis = processes.redis()
    limiter = processes.limiter(store=redis.url)
    body = {"domain": "d", "hits": 1, "limits": [{"key": "k", "algorithm": "gcra", "requests": 100, "window_ms": 60000}]}
    assert limiter.check(body).status == 200
    redis.stop()
    started = time.monotonic()
    r = limiter.check(body)
    assert r.status == 503
    assert time.monotonic() - started < 2.0
    assert b"error" in r.body
    redis.start()
    wait_until(lambda: limiter.check(body).status == 200, what="limiter reconnecting to redis")
    assert limiter.metric("sluice_limiter_store_errors_total") >= 1


class _RefusingLimiter(http.server.BaseHTTPRequestHandler):
    """Answers every check as the limiter answers a body it refuses."""

    def do_POST(self):
        self.rfile.read(int(self.headers.get("content-length", 0)))
        body = b'{"error":"limits[0].requests: must be between 1 and 1000000000000"}'
        self.send_response(400)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


def test_an_error_answer_is_counted_and_its_warning_quotes_the_limiter(envoy):
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _RefusingLimiter)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        cluster = limiter_cluster("sluice_limiter", [server.server_address[1]])
        del cluster["typed_extension_protocol_options"]  # HTTP/1.1 to the stand-in
        e = envoy(global_config([global_rule("gcra")], failure_mode="deny"), clusters=[cluster])
        assert request(e.port, "/", headers={"x-user": "a"}).status == 429
        wait_until(lambda: e.sluice_stat("sluice.limiter_failed_status") == 1, what="the error status counted")
        marker = 'sluice: limiter cluster "sluice_limiter" failed: error status'
        warnings = [line.split(marker, 1)[1] for line in e.log().splitlines() if marker in line]
        assert len(warnings) == 1, warnings
        assert warnings[0].startswith(
            ' (status 400: {"error":"limits[0].requests: must be between 1 and 1000000000000"})'), warnings
    finally:
        server.shutdown()
        server.server_close()
