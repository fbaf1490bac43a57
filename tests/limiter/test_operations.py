"""What an operator runs into: JSON logs with one line per notable event,
graceful shutdown (in-flight HTTP and gRPC checks finish, new connections are
refused, the bound holds), and the gauges on /metrics."""

from __future__ import annotations

import json
import socket
import threading
import time

import pytest

import support
from support import free_port, request
from support.processes import redis_command
from support.rls import header_action, start_rls_envoy
from support.windows import away_from_window_boundary

CHECK = {"domain": "demo", "limits": [
    {"key": "ops/1", "algorithm": "fixed_window", "requests": 1000, "window_ms": 60000}]}


def json_lines(lim) -> list[dict]:
    return [json.loads(line) for line in lim.process.log().splitlines() if line.strip()]


def test_json_logs_one_line_per_event_never_per_request(processes):
    redis = processes.redis()
    lim = processes.limiter(store=redis.url, extra_args=["--log-format", "json", "--store-timeout-ms", "200"])
    lines = json_lines(lim)  # every line is one JSON object
    assert any(line["fields"].get("message") == "sluice-limiter serving" for line in lines), lines
    assert all({"timestamp", "level", "fields"} <= line.keys() for line in lines)
    for _ in range(50):
        assert lim.check(CHECK).status == 200
    assert len(json_lines(lim)) == len(lines)
    # Redis goes away: one "store down" line and one throttled "check failed",
    # however many checks fail
    redis.stop()
    for _ in range(50):
        assert lim.check(CHECK).status == 503
    support.wait_until(lambda: lim.metric("sluice_limiter_store_up") == 0, timeout=5, what="store down")
    messages = [line["fields"].get("message") for line in json_lines(lim)[len(lines):]]
    assert messages.count("store down") == 1, messages
    assert messages.count("check failed") <= 1, messages
    assert len(messages) <= 6, messages
    redis.start()
    support.wait_until(lambda: "store up" in [l["fields"].get("message") for l in json_lines(lim)], timeout=10,
                       what="store up logged")


def test_memory_store_gauges(processes):
    lim = processes.limiter(extra_args=["--max-keys", "100", "--shards", "1"])
    for i in range(3):
        lim.check({"domain": "demo", "limits": [dict(CHECK["limits"][0], key=f"k{i}")]})
    text = request(lim.port, "/metrics").body.decode()
    assert 'store="memory"} 1' in text
    assert lim.metric("sluice_limiter_store_keys") == 3
    assert lim.metric("sluice_limiter_store_max_keys") == 100
    assert lim.metric("sluice_limiter_store_up") == 1
    assert "sluice_limiter_redis_round_trip_seconds" not in text
    # each metric family is written in one block (the check histogram included)
    families = [line.split()[2] for line in text.splitlines() if line.startswith("# TYPE")]
    assert len(families) == len(set(families))
    seen = []
    for line in text.splitlines():
        if not line.startswith("#"):
            name = line.split("{")[0].split(" ")[0]
            for suffix in ("_bucket", "_sum", "_count"):
                if name.endswith(suffix) and name[: -len(suffix)] in families:
                    name = name[: -len(suffix)]
            if not seen or seen[-1] != name:
                assert name not in seen, f"{name} split over two blocks"
                seen.append(name)
    assert request(lim.port, "/livez").status == 200
    assert request(lim.port, "/readyz").status == 200


def test_metrics_parse_with_prometheus_client(processes):
    """/metrics read by the Prometheus project's own Python parsers: the
    OpenMetrics one (strict: the format the content type declares) and the
    classic text one; each sample the tests read by name is there once,
    with the value the limiter counted."""
    from prometheus_client.openmetrics.parser import text_string_to_metric_families as openmetrics
    from prometheus_client.parser import text_string_to_metric_families as classic

    lim = processes.limiter(extra_args=["--max-keys", "100"])
    limit = dict(CHECK["limits"][0], requests=2, key="parsed")
    away_from_window_boundary(60, 1.0)  # the three checks in one minute's window
    statuses = [lim.check({"domain": "parsed", "limits": [limit]}).status for _ in range(3)]
    assert statuses == [200, 200, 200]
    assert lim.check(b"{").status == 400
    r = request(lim.port, "/metrics")
    assert r.headers.get("content-type", "").startswith("application/openmetrics-text")
    text = r.body.decode()
    families = {f.name: f for f in openmetrics(text)}
    samples = {(s.name, tuple(sorted(s.labels.items()))): s.value
               for f in families.values() for s in f.samples}
    assert families["sluice_limiter_checks"].type == "counter"
    assert samples[("sluice_limiter_checks_total", ())] == 4
    assert samples[("sluice_limiter_decisions_total", (("domain", "parsed"), ("result", "allowed")))] == 2
    assert samples[("sluice_limiter_decisions_total", (("domain", "parsed"), ("result", "denied")))] == 1
    assert families["sluice_limiter_check_duration_seconds"].type == "histogram"
    assert samples[("sluice_limiter_check_duration_seconds_count", ())] == 4
    assert samples[("sluice_limiter_check_duration_seconds_bucket", (("le", "+Inf"),))] == 4
    assert samples[("sluice_limiter_store_max_keys", ())] == 100
    assert samples[("sluice_limiter_connections", (("listener", "http"),))] >= 1
    build = [s for s in families["sluice_limiter_build_info"].samples]
    assert len(build) == 1 and build[0].labels["store"] == "memory" and build[0].value == 1
    # The classic parser reads every sample alike, each once.
    classic_samples = [(s.name, tuple(sorted(s.labels.items())), s.value)
                       for f in classic(text) for s in f.samples]
    assert len(classic_samples) == len(samples)
    assert {(n, l): v for n, l, v in classic_samples} == samples
    assert lim.metric("sluice_limiter_checks_total") == 4


def slow_redis(redis, seconds: float):
    """Blocks `redis` for `seconds` (DEBUG SLEEP) on a thread; returns the
    thread once Redis no longer answers."""
    t = threading.Thread(target=redis_command, args=(redis.port, "DEBUG", "SLEEP", str(seconds)))
    t.start()
    support.wait_until(lambda: not answers_ping(redis.port), timeout=seconds / 2, what="Redis blocked")
    return t


def answers_ping(port: int) -> bool:
    """Whether Redis answers a PING within 50 ms."""
    with socket.create_connection(("127.0.0.1", port), timeout=1) as s:
        s.settimeout(0.05)
        s.sendall(b"*1\r\n$4\r\nPING\r\n")
        try:
            return s.recv(16).startswith(b"+PONG")
        except TimeoutError:
            return False


def refuses_connections(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1):
            return False
    except OSError:
        return True


def test_sigterm_finishes_the_checks_in_flight_and_refuses_new_ones(processes):
    redis = processes.redis(args=["--enable-debug-command", "yes"])
    lim = processes.limiter(store=redis.url, extra_args=["--store-timeout-ms", "5000"])
    assert lim.check(CHECK).status == 200
    sleeper = slow_redis(redis, 1.0)
    answers = []
    in_flight = threading.Thread(target=lambda: answers.append(lim.check(CHECK)))
    in_flight.start()
    time.sleep(0.2)
    started = time.monotonic()
    lim.process.proc.send_signal(15)
    support.wait_until(lambda: refuses_connections(lim.port), timeout=2, what="listener closed")
    in_flight.join(timeout=10)
    assert lim.process.proc.wait(timeout=10) == 0
    sleeper.join()
    assert answers and answers[0].status == 200, answers
    assert json.loads(answers[0].body)["allowed"] is True
    assert time.monotonic() - started < 3
    log = lim.process.log()
    assert "shutting down" in log and "sluice-limiter stopped" in log


def test_the_shutdown_bound_holds(processes):
    redis = processes.redis(args=["--enable-debug-command", "yes"])
    lim = processes.limiter(store=redis.url, extra_args=["--store-timeout-ms", "10000",
                                                         "--shutdown-timeout-ms", "300"])
    assert lim.check(CHECK).status == 200
    sleeper = slow_redis(redis, 3.0)
    in_flight = threading.Thread(target=lambda: _ignore(lambda: lim.check(CHECK)))
    in_flight.start()
    time.sleep(0.2)
    started = time.monotonic()
    lim.process.proc.send_signal(15)
    assert lim.process.proc.wait(timeout=5) == 0
    assert time.monotonic() - started < 1.5
    assert "shutdown bound reached" in lim.process.log()
    in_flight.join(timeout=10)
    sleeper.join()


def _ignore(call):
    try:
        call()
    except Exception:  # noqa: BLE001 - the connection is cut at the bound
        pass


DESCRIPTORS = """
domain: ops
descriptors:
  - key: user
    rate_limit:
      requests_per_unit: 100
      window: 365d
      algorithm: fixed_window
"""


def test_sigterm_finishes_grpc_checks_in_flight(processes, tmp_path):
    redis = processes.redis(args=["--enable-debug-command", "yes"])
    path = tmp_path / "rls.yaml"
    path.write_text(DESCRIPTORS)
    grpc = free_port()
    lim = processes.limiter(store=redis.url, extra_args=["--grpc-listen", f"127.0.0.1:{grpc}", "--descriptors",
                                                         str(path), "--store-timeout-ms", "5000"])
    env = start_rls_envoy(tmp_path, "ops", [grpc], [[header_action("x-user", "user")]], failure_mode_deny=True)
    try:
        r = request(env.port, "/", headers={"x-user": "a"})
        assert r.status == 200
        sleeper = slow_redis(redis, 1.0)
        answers = []
        in_flight = threading.Thread(
            target=lambda: answers.append(request(env.port, "/", headers={"x-user": "a"})))
        in_flight.start()
        time.sleep(0.2)
        lim.process.proc.send_signal(15)
        in_flight.join(timeout=10)
        assert lim.process.proc.wait(timeout=10) == 0
        sleeper.join()
        # answered by the limiter (failure_mode_deny would have made it a 500/429)
        assert answers and answers[0].status == 200, answers
        assert env.stat("cluster.rls.upstream_rq_200") >= 2 or env.stat("ratelimit.ok") >= 2
    finally:
        env.stop()
