"""sluice-limiter as a process: HTTP/1.1 and h2c on one port, errors, flags, graceful stop."""

import json
import shutil
import subprocess
import time
from pathlib import Path

import pytest

import support
from support import request

CHECK = {"domain": "demo", "limits": [
    {"key": "per-ip/203.0.113.7", "algorithm": "gcra", "requests": 100, "window_ms": 60000, "burst": 20}]}


def test_contract_example_over_http1(processes):
    lim = processes.limiter()
    started = time.monotonic()
    for _ in range(20):
        r = lim.check(CHECK)
        assert r.status == 200
        assert json.loads(r.body)["allowed"] is True
    r = lim.check(CHECK)
    elapsed_ms = (time.monotonic() - started) * 1000
    body = json.loads(r.body)
    assert body["allowed"] is False
    # one request per 600 ms, less the time the 20 admits took
    assert 600 - elapsed_ms - 1 <= body["limits"][0]["retry_after_ms"] <= 600, elapsed_ms
    assert body["limits"][0]["remaining"] == 0
    assert lim.metric("sluice_limiter_checks_total") == 21


@pytest.mark.skipif(shutil.which("curl") is None, reason="curl not installed")
def test_h2c_prior_knowledge_on_the_same_port(processes):
    lim = processes.limiter()
    out = subprocess.run(
        ["curl", "-sS", "--http2-prior-knowledge", "-o", "-", "-w", "\n%{http_version} %{http_code}",
         "-H", "content-type: application/json", "--data", json.dumps(CHECK),
         f"http://127.0.0.1:{lim.port}/v1/check"],
        capture_output=True, text=True, timeout=10, check=True)
    body, _, status = out.stdout.rpartition("\n")
    assert status == "2 200"
    assert json.loads(body)["allowed"] is True


def test_bad_input_is_a_4xx_with_a_json_error(processes):
    lim = processes.limiter()
    r = lim.check(b"{nope")
    assert r.status == 400 and "error" in json.loads(r.body)
    bad = {"domain": "demo", "limits": [dict(CHECK["limits"][0], window_ms=0)]}
    r = lim.check(bad)
    assert r.status == 400
    assert json.loads(r.body)["error"].startswith("limits[0].window_ms")
    r = lim.check(b"{" + b" " * (65 * 1024) + b"}")
    assert r.status == 413
    # nothing above touched state: the full burst is still there
    for _ in range(20):
        assert json.loads(lim.check(CHECK).body)["allowed"] is True


def test_the_tests_know_every_algorithm_the_limiter_knows(processes):
    """support.ALGORITHMS is read from sluice-core's source; the built limiter
    lists the algorithms it knows when it refuses an unknown one."""
    lim = processes.limiter()
    r = lim.check({"domain": "demo", "limits": [dict(CHECK["limits"][0], algorithm="nope")]})
    assert r.status == 400
    error = json.loads(r.body)["error"]
    known = error.split("expected one of ", 1)[1].rstrip(")").split(", ")
    assert known == support.ALGORITHMS, error


def test_overrides_file(processes, tmp_path):
    path = tmp_path / "overrides.json"
    path.write_text(json.dumps({"demo/per-ip/203.0.113.7": {"requests": 2, "window_ms": 60000}}))
    lim = processes.limiter(extra_args=["--overrides", str(path)])
    results = [json.loads(lim.check(CHECK).body)["allowed"] for _ in range(3)]
    assert results == [True, True, False]


def test_redis_override_hashes_serve_the_memory_store(processes):
    redis = processes.redis()
    support.processes.redis_command(redis.port, "HSET", "sluice:overrides:demo", "per-ip/203.0.113.7",
                          '{"requests": 2, "window_ms": 60000}')
    lim = processes.limiter(extra_args=["--overrides-redis", redis.url])
    results = [json.loads(lim.check(CHECK).body)["allowed"] for _ in range(3)]
    assert results == [True, True, False]


def test_redis_overrides_without_a_redis_are_ignored_with_a_warning(processes):
    lim = processes.limiter(extra_args=["--redis-overrides"])
    for _ in range(20):
        assert json.loads(lim.check(CHECK).body)["allowed"] is True
    assert "--overrides-redis" in lim.process.log_path.read_text()


def test_a_bad_overrides_file_stops_startup(tmp_path):
    path = tmp_path / "overrides.json"
    path.write_text('{"no-slash": {"requests": 1, "window_ms": 1000}}')
    proc = subprocess.run([str(support.LIMITER_BIN), "--listen", f"127.0.0.1:{support.free_port()}",
                           "--overrides", str(path)], capture_output=True, text=True, timeout=10)
    assert proc.returncode != 0
    assert "no-slash" in proc.stdout + proc.stderr


def test_sigterm_stops_gracefully(processes):
    lim = processes.limiter()
    assert lim.check(CHECK).status == 200
    started = time.monotonic()
    code = lim.process.stop()
    assert code == 0
    assert time.monotonic() - started < 5
    assert "stopped" in lim.process.log_path.read_text()


def test_memory_bound_denies_new_keys(processes):
    lim = processes.limiter(extra_args=["--max-keys", "2", "--shards", "1"])
    def one(key):
        return {"domain": "demo", "limits": [{"key": key, "algorithm": "fixed_window", "requests": 5, "window_ms": 60000}]}
    assert json.loads(lim.check(one("a")).body)["allowed"] is True
    assert json.loads(lim.check(one("b")).body)["allowed"] is True
    assert json.loads(lim.check(one("c")).body)["allowed"] is False
    assert json.loads(lim.check(one("a")).body)["allowed"] is True
    assert lim.metric("sluice_limiter_capacity_denials_total") == 1


def test_threads_flag_sizes_the_runtime(processes):
    lim = processes.limiter(extra_args=["--threads", "1"])
    assert lim.check(CHECK).status == 200
    # one request-serving thread besides the main thread
    workers = [t for t in (Path(f"/proc/{lim.process.proc.pid}/task").iterdir())
               if (t / "comm").read_text().strip() == "sluice-worker"]
    assert len(workers) == 1


def test_two_limiters_sharing_redis_give_waits_from_one_clock(processes):
    """Delay mode through two limiters on one Redis: the waits follow one
    queue, timed by Redis's clock, whichever limiter answers."""
    redis = processes.redis()
    lims = [processes.limiter(store=redis.url), processes.limiter(store=redis.url)]
    check = {"domain": "demo", "limits": [
        {"key": "shaped", "algorithm": "gcra", "requests": 10, "window_ms": 1000, "burst": 1,
         "max_delay_ms": 1000}]}
    started = time.monotonic()
    delays = []
    while True:
        r = lims[len(delays) % 2].check(check)
        assert r.status == 200, r.body
        body = json.loads(r.body)
        if not body["allowed"]:
            break
        delays.append(body["limits"][0].get("delay_ms", 0))
        assert len(delays) <= 30, delays
    elapsed_ms = (time.monotonic() - started) * 1000
    # One request per 100 ms from the first: each waits its turn, less the
    # time the checks before it took.
    for k, delay in enumerate(delays):
        assert 100 * k - elapsed_ms - 1 <= delay <= 100 * k, (k, delays)
    # 1000 ms of queue: 11 admitted at once, plus what drained meanwhile.
    assert 11 <= len(delays) <= 11 + elapsed_ms // 100 + 1, delays
    denied = body["limits"][0]
    assert "delay_ms" not in denied
    assert 1000 < denied["retry_after_ms"] <= 1100, body
    delayed = sum(lim.metric("sluice_limiter_delayed_total") for lim in lims)
    assert delayed == len(delays) - 1


def test_delay_mode_and_weights_are_refused_where_they_do_not_apply(processes):
    lim = processes.limiter()
    fixed = {"key": "k", "algorithm": "fixed_window", "requests": 5, "window_ms": 60000}
    r = lim.check({"domain": "demo", "limits": [fixed, dict(fixed, key="k2", max_delay_ms=500)]})
    assert r.status == 400
    assert json.loads(r.body)["error"] == (
        "limits[1].max_delay_ms: delay mode is for gcra and leaky_bucket only, not fixed_window")
    r = lim.check({"domain": "demo", "limits": [dict(fixed, hits=10**12 + 1)]})
    assert r.status == 400
    assert json.loads(r.body)["error"].startswith("limits[0].hits: ")
    # A weight of 0 asks, and takes nothing.
    r = lim.check({"domain": "demo", "limits": [dict(fixed, hits=0)]})
    assert json.loads(r.body)["limits"][0]["remaining"] == 5
    # Nothing was consumed; a weight of its own counts under its limit only.
    body = json.loads(lim.check({"domain": "demo", "hits": 2, "limits": [
        dict(fixed, hits=5), dict(fixed, key="k2")]}).body)
    assert body["allowed"] is True
    assert [l["remaining"] for l in body["limits"]] == [0, 3]
