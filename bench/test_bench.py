"""Checks of the benchmark's parsing and reporting (no servers, no load)."""

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import criterion  # noqa: E402
import load  # noqa: E402
import report  # noqa: E402
import servers  # noqa: E402
import setups  # noqa: E402
import tracecsv  # noqa: E402

WRK = """Running 5s test @ http://127.0.0.1:40000/
  1 threads and 16 connections
  Thread Stats   Avg      Stdev     Max   +/- Stdev
    Latency     1.97ms    4.75ms  44.50ms   95.12%
    Req/Sec    17.75k     4.38k   27.96k    70.00%
  Latency Distribution
     50%  243.00us
     75%    2.09ms
     90%    4.26ms
     99%   30.76ms
  17974 requests in 1.02s, 3.75MB read
  Socket errors: connect 0, read 2, write 0, timeout 1
  Non-2xx or 3xx responses: 17000
Requests/sec:  17648.77
Transfer/sec:      3.69MB
"""


def test_wrk_output():
    s = load.parse(WRK)
    assert s.rps == 17648.77
    assert s.p50_us == 243.0
    assert s.p99_us == 30760.0
    assert (s.requests, s.non_2xx, s.socket_errors) == (17974, 17000, 3)


def test_wrk_output_without_errors():
    text = WRK.replace("  Socket errors: connect 0, read 2, write 0, timeout 1\n", "").replace(
        "  Non-2xx or 3xx responses: 17000\n", "")
    s = load.parse(text)
    assert (s.non_2xx, s.socket_errors) == (0, 0)


def test_criterion_output():
    text = """gcra                    time:   [45.691 ns 47.469 ns 49.267 ns]
                        change: [+9.6839% +23.416% +39.366%] (p = 0.00 < 0.05)
sliding_window/precision_1
                        time:   [1.0204 µs 1.1 µs 1.3 µs]
"""
    assert criterion.parse(text) == [{"name": "gcra", "ns": 47.469},
                                     {"name": "sliding_window/precision_1", "ns": 1100.0}]


def _sample(rps, p99=500.0, non_2xx=0):
    return load.Sample(rps=rps, p50_us=100.0, p99_us=p99, requests=1000, non_2xx=non_2xx, socket_errors=0)


def test_medians_ratios_and_targets():
    rows = {r.id: r for r in setups.rows(Path("s.wasm"), Path("n.wasm"))}

    def summary(row_id, rps, p99=500.0, non_2xx=0):
        return report.summarize(rows[row_id], [_sample(rps, p99, non_2xx), _sample(rps + 10, p99, non_2xx),
                                               _sample(rps - 10, p99, non_2xx)])

    c1 = {s.row_id: s for s in [
        summary("envoy", 30000), summary("noop-wasm", 25000, p99=500), summary("native", 29000),
        summary("local-gcra", 24000, p99=540), summary("local-gcra-10k", 20000),
        summary("local-deny", 26000, non_2xx=990), summary("global-memory", 10000),
        summary("global-cached", 23000, non_2xx=1000), summary("call-out", 12000),
        summary("host-calls", 24000), summary("deny-reply", 22000, non_2xx=1000),
    ]}
    assert c1["envoy"].rps == 30000
    assert c1["local-deny"].expectation_met and c1["local-gcra"].expectation_met
    goals = {t.name: t for t in report.targets({1: c1}, {})}
    assert goals["Sluice local GCRA, one key ≥ 0.93× no-op wasm"].met is True  # 0.96
    assert goals["Sluice local GCRA p99 within 50 µs of no-op wasm (full load)"].met is True
    assert goals["10,000 keys ≥ 0.9× one key (GCRA)"].met is False
    assert goals["global, memory store ≥ 0.6× Sluice local"].met is False
    assert goals["global, memory store ≥ 0.6× Sluice local"].bound == "0.500× for a bare call-out"
    assert goals["deny path ≥ allow path (GCRA)"].bound == "0.917× for the two paths' host calls alone"
    assert goals["sluice-limiter memory store ≥ 50,000 checks/s"].met is None
    text = report.markdown({"commit": "abc"}, {1: c1}, {}, list(goals.values()), None, [])
    assert "| Sluice local gcra, one key | 24,000 | 0% | 100 µs | 540 µs | 0.80 | 0.96 | 0.83 | 0.0 µs | 0.0% | ok |" \
        in text
    assert goals["Sluice local GCRA, one key ≥ 0.93× no-op wasm"].bound == "0.960× for Sluice's host calls alone"
    assert "**missed**" in text


def test_cpu_time_per_request_is_charged_to_the_run():
    s = _sample(1000)
    s.envoy_cpu_us, s.limiter_cpu_us = 20.0, 7.5
    row = next(r for r in setups.rows(Path("s"), Path("n")) if r.id == "global-memory")
    summary = report.summarize(row, [s])
    assert (summary.envoy_cpu_us, summary.limiter_cpu_us) == (20.0, 7.5)
    line = report.envoy_table({"global-memory": summary})[-1]
    assert "limiter CPU 7.5 µs/req" in line and "| 20.0 µs |" in line


def test_placement_gives_envoy_a_cpu_of_its_own_at_concurrency_1():
    import os
    import run
    a = run.parse_args([])
    if (os.cpu_count() or 1) >= 2:
        assert run.placement(a, 1)[0] == "0"
    assert run.placement(a, os.cpu_count() or 1) == (None, None)
    assert run.placement(run.parse_args(["--no-pin"]), 1) == (None, None)


def test_latency_target_uses_one_connection_runs_when_measured():
    rows = {r.id: r for r in setups.rows(Path("s.wasm"), Path("n.wasm"))}
    loaded = [_sample(20000, p99=2000.0)]
    one = [load.Sample(rps=5000, p50_us=180.0, p99_us=260.0, requests=5000, non_2xx=0, socket_errors=0)]
    base = [load.Sample(rps=6000, p50_us=150.0, p99_us=230.0, requests=6000, non_2xx=0, socket_errors=0)]
    c1 = {"noop-wasm": report.summarize(rows["noop-wasm"], [_sample(25000, p99=900.0)], solo=base),
          "local-gcra": report.summarize(rows["local-gcra"], loaded, solo=one)}
    goal = next(t for t in report.targets({1: c1}, {}) if "p99" in t.name)
    assert goal.name.endswith("(one connection)")
    assert (goal.measured, goal.met) == ("+30 µs (260 vs 230)", True)
    assert "| 180 µs / 260 µs |" in report.envoy_table(c1)[-1]


def test_a_deny_row_that_denies_nothing_is_flagged():
    row = next(r for r in setups.rows(Path("s"), Path("n")) if r.id == "local-deny")
    assert not report.summarize(row, [_sample(1000)]).expectation_met


def test_the_delay_row_keeps_its_queues_full():
    row = next(r for r in setups.rows(Path("s"), Path("n")) if r.id == "local-gcra-delay")
    cfg = json.loads(row.filters[0]["typed_config"]["config"]["configuration"]["value"])
    rule = cfg["rules"][0]
    assert rule["max_queued"] == setups.DELAY_MAX_QUEUED
    assert rule["limits"][0] == {"algorithm": "gcra", "requests": 100, "window": "1s",
                                "on_exceed": "delay", "max_delay": "1s"}
    # fewer held than wrk's connections on each of two workers: the rest are denied
    assert row.expect == "deny" and setups.DELAY_MAX_QUEUED < load.CONNECTIONS // 2


def test_trace_csv():
    requests, window, per_algo = tracecsv.read_trace("# limit,10,10000\nt_ms,algorithm,admitted\n0,gcra,1\n5,gcra,0\n")
    assert (requests, window, per_algo) == (10, 10000, {"gcra": [(0, 1), (5, 0)]})


def test_shaping_csv():
    params, per_mode = tracecsv.read_shaping(
        "# limit,10,10000\n# soft_percent,50\n# max_delay_ms,2000\n# ceiling,20\n# pool,12,60000\n"
        "t_ms,mode,outcome,served_ms\n"
        "0,reject,admitted,0\n5,reject,denied,\n9500,delay,delayed,10001\n9600,elastic,borrowed,9600\n")
    assert params == {"limit": 10, "window_ms": 10000, "soft_percent": 50, "max_delay_ms": 2000,
                      "ceiling": 20, "pool": 12, "pool_window_ms": 60000}
    assert per_mode == {"reject": [(0, "admitted", 0), (5, "denied", None)],
                        "delay": [(9500, "delayed", 10001)], "elastic": [(9600, "borrowed", 9600)]}


def test_the_held_row_holds_a_thousand_requests_and_denies_none():
    rows = {r.id: r for r in setups.rows(Path("s"), Path("n"))}
    row = rows["local-gcra-delay-held"]
    cfg = json.loads(row.filters[0]["typed_config"]["config"]["configuration"]["value"])
    rule = cfg["rules"][0]
    limit = rule["limits"][0]
    assert row.connections == setups.HELD == limit["requests"] and limit["window"] == "1s"
    assert limit["burst"] == 1  # all but the first request of a run are held
    # a queue larger than the connections, and a schedule that may hold more
    # than them (1.5 s of the rate), under wrk's 2 s timeout
    assert rule["max_queued"] >= setups.HELD and limit["max_delay"] == "1500ms"
    assert row.expect == "allow" and row.counters and not row.solo
    assert row.load_args() == ["1"]


def test_the_mixed_rows_share_a_configuration_and_keep_their_keys_apart():
    rows = {r.id: r for r in setups.rows(Path("s"), Path("n"))}
    base, held = rows["delay-others"], rows["delay-others-held"]
    assert base.filters == held.filters == rows["local-gcra-delay-held"].filters
    assert base.beside is None
    assert held.beside == load.Beside(setups.HELD, "keys.lua", ["1"])
    # the row's own keys start after the held key (10.0.0.0)
    assert base.load_args() == held.load_args() == [str(setups.MANY_KEYS), "1"]
    cfg = json.loads(base.filters[0]["typed_config"]["config"]["configuration"]["value"])
    # few enough keys per slot that no other key shares the held key's bucket
    assert cfg["local_max_keys"] >= 1000 * setups.MANY_KEYS
    assert base.expect == "undelayed"


def test_the_many_rules_rows_differ_from_the_path_prefix_row_only_in_rules_it_never_matches():
    rows = {r.id: r for r in setups.rows(Path("s"), Path("n"))}

    def config(row_id: str) -> dict:
        return json.loads(rows[row_id].filters[0]["typed_config"]["config"]["configuration"]["value"])

    one = config("local-gcra-path-prefix")
    for n in (100, 1000):
        many = config(f"local-gcra-rules-{n}")
        assert len(many["rules"]) == n and many["rules"][-1] == one["rules"][0]
        assert {**many, "rules": many["rules"][-1:]} == one
        # `GET /` matches none of the others: each names a longer path
        assert all(len(r["match"].get("path_prefix") or r["match"]["path"]) > 1 for r in many["rules"][:-1])
        assert len({r["name"] for r in many["rules"]}) == n


def test_a_row_meant_to_hold_nothing_is_flagged_when_sluice_held_some():
    row = next(r for r in setups.rows(Path("s"), Path("n")) if r.id == "delay-others")
    clean, held = _sample(1000), _sample(1000)
    clean.counters = {"allowed": 1000, "delayed": 0, "denied": 0}
    held.counters = {"allowed": 1000, "delayed": 3, "denied": 0}
    assert report.summarize(row, [clean]).expectation_met
    flagged = report.summarize(row, [clean, held])
    assert not flagged.expectation_met
    assert report.envoy_table({"x": flagged})[-1].endswith("| **expected none denied or held** |")
    # without counters nothing says that none was held
    assert not report.summarize(row, [_sample(1000)]).expectation_met


def test_wrk_command_line():
    cmd = load.command("wrk", "http://127.0.0.1:1/", 4.4, "keys.lua", ["10000", "1"], connections=1000)
    assert cmd[:4] == ["wrk", "-t1", "-c1000", "-d4s"]
    assert cmd[-4:] == ["http://127.0.0.1:1/", "--", "10000", "1"]
    assert load.command("wrk", "u", 1, "check.lua")[-1] == "u"


def test_counters_and_the_load_beside_are_reported():
    rows = {r.id: r for r in setups.rows(Path("s"), Path("n"))}

    def sample(rps, beside_rps=None, counters=None, timeouts=0):
        s = _sample(rps)
        if beside_rps is not None:
            s.beside = load.Sample(rps=beside_rps, p50_us=1e6, p99_us=1e6, requests=int(4 * beside_rps),
                                   non_2xx=0, socket_errors=timeouts)
        s.counters = counters or {}
        return s

    counts = {"allowed": 4100, "delayed": 4000, "denied": 0}
    base = report.summarize(rows["delay-others"], [sample(30000, counters={"allowed": 9, "delayed": 0,
                                                                           "denied": 0})])
    held = report.summarize(rows["delay-others-held"], [sample(29000, 1000, counts), sample(29500, 1200, counts)])
    assert (held.decided, held.held, held.rule_denied) == (8200, 8000, 0)
    assert held.beside_rps == 1100 and held.expectation_met
    assert held.counts() == "held 97.6%, denied 0.0% of 8,200 decisions; held key beside: 1,100 req/s served, " \
                            "0.0% denied"
    line = report.envoy_table({"delay-others-held": held})[-1]
    assert "(held 97.6%" in line and line.endswith("| 0.0% | ok |")
    goal = next(t for t in report.targets({1: {"delay-others": base, "delay-others-held": held}}, {})
                if t.name.startswith("requests not delayed"))
    assert (goal.measured, goal.met) == ("0.975× (target ≥ 0.95×)", True)
    timed_out = report.summarize(rows["delay-others-held"], [sample(29000, 1000, counts, timeouts=3)])
    assert not timed_out.expectation_met
    assert "(3 socket errors)" in report.envoy_table({"x": timed_out})[-1]


def test_rows_without_a_one_connection_run_show_none():
    rows = {r.id: r for r in setups.rows(Path("s"), Path("n"))}
    one = [load.Sample(rps=5000, p50_us=180.0, p99_us=260.0, requests=5000, non_2xx=0, socket_errors=0)]
    table = report.envoy_table({"noop-wasm": report.summarize(rows["noop-wasm"], [_sample(25000)], solo=one),
                                "local-gcra-delay-held": report.summarize(rows["local-gcra-delay-held"],
                                                                          [_sample(1000)])})
    assert "| 180 µs / 260 µs |" in table[-2] and "| – |" in table[-1]


def _limit(row):
    return json.loads(row.filters[0]["typed_config"]["config"]["configuration"]["value"])["rules"][0]["limits"]


def test_the_coalesced_rows_differ_from_the_per_request_rows_only_in_sync():
    rows = {r.id: r for r in setups.rows(Path("s"), Path("n"))}
    for store in ("memory", "redis"):
        alone, shared = rows[f"global-{store}"], rows[f"global-{store}-coalesce"]
        assert alone.store == shared.store == store
        assert alone.keys == shared.keys == 1  # one hot key, like for like
        [a], [s] = _limit(alone), _limit(shared)
        assert "sync" not in a and s == {**a, "sync": {"mode": "coalesce"}}
        assert a["scope"] == "global" and alone.expect == shared.expect == "allow"
    spread = rows["global-memory-coalesce-10k"]
    assert spread.keys == setups.MANY_KEYS and spread.store == "memory"
    assert spread.filters == rows["global-memory-coalesce"].filters


def test_the_outcome_and_block_rows_differ_from_the_plain_rows_only_in_their_setting():
    rows = {r.id: r for r in setups.rows(Path("s"), Path("n"))}
    for plain, scope in (("local-gcra", "local"), ("global-memory", "global")):
        [p] = _limit(rows[plain])
        [o] = _limit(rows[f"{plain}-by-outcome"])
        [b] = _limit(rows[f"{plain}-block"])
        assert o == {**p, "count_when": {"status": ["401"]}}
        assert b == {**p, "on_exceed": "block", "block_for": "1m"}
        assert p.get("scope", "local") == scope
        for row in (rows[f"{plain}-by-outcome"], rows[f"{plain}-block"]):
            assert row.store == rows[plain].store and row.keys == 1 and row.expect == "allow"
    [flood] = _limit(rows["local-deny-block"])
    assert flood == {"algorithm": "gcra", **setups.DENY_LIMIT, "on_exceed": "block", "block_for": "1m"}
    assert rows["local-deny-block"].expect == "deny"


def test_limiter_calls_per_request_are_reported_for_the_rows_that_call_it():
    rows = {r.id: r for r in setups.rows(Path("s"), Path("n"))}

    def sample(rps, calls, batches=0, batched=0):
        s = _sample(rps)  # 1,000 requests
        s.limiter = {"calls": calls, "batches": batches, "batched": batched}
        return s

    alone = report.summarize(rows["global-memory"], [sample(10000, 1000), sample(10100, 1000)])
    shared = report.summarize(rows["global-memory-coalesce"], [sample(14000, 118, 59, 944),
                                                                sample(13000, 118, 59, 944)])
    cached = report.summarize(rows["global-cached"], [sample(20000, 0)])
    assert alone.calls() == "1.000 limiter calls per request"
    assert shared.calls() == "0.118 limiter calls per request, 16.0 requests per batch"
    assert cached.calls() == "0.000 limiter calls per request"
    assert report.summarize(rows["local-gcra"], [_sample(20000)]).calls() == ""
    line = report.envoy_table({"global-memory-coalesce": shared})[-1]
    assert "coalesced calls, limiter memory store (0.118 limiter calls per request, 16.0 requests per batch)" in line
    goals = {t.name: t for t in report.targets({1: {"global-memory": alone, "global-memory-coalesce": shared}}, {})}
    memory = goals["global coalesced ≥ 1.3× a call per request, one key, memory store"]
    assert (memory.measured, memory.met) == ("1.343× (target ≥ 1.30×)", True)
    redis = goals["global coalesced ≥ 1.3× a call per request, one key, Redis store"]
    assert (redis.measured, redis.met) == ("not measured", None)


def test_the_limiter_counters_are_read_from_the_limiter_of_the_row_store():
    import run

    class Limiter(run.support.Limiter):
        def __init__(self, store, values):
            self.store, self.values = store, values

        def metric(self, name):
            return self.values.get(name, 0.0)

    memory = Limiter("memory", {"sluice_limiter_checks_total": 10.0, "sluice_limiter_batches_total": 2.0,
                                "sluice_limiter_batched_requests_total": 30.0})
    redis = Limiter("redis://127.0.0.1:1", {"sluice_limiter_checks_total": 7.0})
    assert run.limiter_counts([redis, memory], "memory") == {"calls": 10.0, "batches": 2.0, "batched": 30.0,
                                                              "leased": 0.0, "returned": 0.0, "rls_calls": 0.0}
    assert run.limiter_counts([redis, memory], "redis") == {"calls": 7.0, "batches": 0.0, "batched": 0.0,
                                                             "leased": 0.0, "returned": 0.0, "rls_calls": 0.0}
    leasing = Limiter("memory", {"sluice_limiter_leased_units_total": 99.0,
                                 "sluice_limiter_returned_units_total": 3.0})
    assert run.limiter_counts([leasing], "memory")["leased"] == 99.0
    assert run.limiter_counts([leasing], "memory")["returned"] == 3.0
    assert run.limiter_counts([], "memory") == {}
    assert run.grown({"calls": 10.0, "batches": 2.0}, {"calls": 25.0, "batches": 3.0}) == \
        {"calls": 15.0, "batches": 1.0}


def test_the_leased_rows_differ_from_the_per_request_rows_only_in_sync():
    rows = {r.id: r for r in setups.rows(Path("s"), Path("n"))}
    for store in ("memory", "redis"):
        alone, leased = rows[f"global-{store}"], rows[f"global-{store}-lease"]
        assert leased.store == store and leased.keys == 1 and leased.expect == "allow"
        [a], [x] = _limit(alone), _limit(leased)
        assert x == {**a, "sync": {"mode": "lease", "max_share": setups.LEASE_SHARE}}
        # The share is at least one unit (grants of up to 100 here).
        assert x["requests"] * float(setups.LEASE_SHARE.rstrip("%")) / 100 >= 1


def test_the_pause_row_runs_the_noop_filter_in_pause_mode():
    rows = {r.id: r for r in setups.rows(Path("s"), Path("n.wasm"))}
    [f] = rows["pause-resume"].filters
    config = f["typed_config"]["config"]
    assert json.loads(config["configuration"]["value"]) == {"mode": "pause"}
    assert rows["pause-resume"].store is None and rows["pause-resume"].expect == "allow"
    assert config["vm_config"]["code"]["local"]["filename"] == "n.wasm"


def test_lease_units_and_the_leased_target_are_reported():
    rows = {r.id: r for r in setups.rows(Path("s"), Path("n"))}

    def sample(rps, calls, leased=0, returned=0):
        s = _sample(rps)  # 1,000 requests
        s.limiter = {"calls": calls, "batches": 0, "batched": 0, "leased": leased, "returned": returned}
        return s

    leased = report.summarize(rows["global-memory-lease"], [sample(19000, 10, 990, 5), sample(19000, 10, 990, 5)])
    assert leased.calls() == "0.010 limiter calls per request, 0.990 units leased and 0.005 returned per request"
    alone = report.summarize(rows["global-memory"], [sample(10000, 1000)])
    assert alone.calls() == "1.000 limiter calls per request"
    local = report.summarize(rows["local-gcra"], [_sample(20000)])
    goals = {t.name: t for t in report.targets({1: {"global-memory-lease": leased, "local-gcra": local}}, {})}
    memory = goals["global leased ≥ 0.95× Sluice local, one key, memory store"]
    assert (memory.measured, memory.met) == ("0.950× (target ≥ 0.95×)", True)
    redis = goals["global leased ≥ 0.95× Sluice local, one key, Redis store"]
    assert (redis.measured, redis.met) == ("not measured", None)


def test_the_floors_beyond_the_noop_filter_are_reported():
    rows = {r.id: r for r in setups.rows(Path("s"), Path("n"))}

    def summary(row_id, cpu):
        s = _sample(10000)
        s.envoy_cpu_us = cpu
        return report.summarize(rows[row_id], [s])

    c1 = {"noop-wasm": summary("noop-wasm", 20.0), "pause-resume": summary("pause-resume", 31.5),
          "call-out": summary("call-out", 38.0)}
    assert report.floors(c1) == ["Envoy CPU per request beyond the no-op wasm filter: a bare limiter call: "
                                 "+18.0 µs (38.0 vs 20.0); pausing the request and resuming it from the root "
                                 "context: +11.5 µs (31.5 vs 20.0)."]
    assert report.floors({"noop-wasm": c1["noop-wasm"]}) == []
    assert report.floors({"pause-resume": c1["pause-resume"]}) == []
    text = report.markdown({}, {1: c1}, {}, [], None, [])
    assert "+11.5 µs (31.5 vs 20.0)" in text


def test_the_rls_rows_ask_for_the_global_rows_limit_on_one_descriptor():
    rows = {r.id: r for r in setups.rows(Path("s"), Path("n"))}
    # The limiter's descriptor: the global rows' GCRA limit, under the entries Sluice sends for the rule.
    assert setups.RLS_DESCRIPTORS == """\
domain: bench
descriptors:
  - key: generic_key
    value: per-ip
    descriptors:
      - key: remote_address
        rate_limit: {requests_per_unit: 1000, window: 10ms, algorithm: gcra}
  - key: name
    value: api
    descriptors:
      - key: tenant
        rate_limit: {requests_per_unit: 1000000000, unit: hour}
"""
    assert (setups.RLS_DOMAIN, setups.RULE) == ("bench", "per-ip")
    [a] = _limit(rows["global-memory"])
    assert (a["algorithm"], a["requests"], a["window"]) == ("gcra", 1000, "10ms")
    for store in ("memory", "redis"):
        envoy, sluice = rows[f"envoy-rls-{store}"], rows[f"global-rls-{store}"]
        assert envoy.store == sluice.store == store and envoy.rls and sluice.rls
        assert envoy.keys == sluice.keys == 1 and envoy.expect == sluice.expect == "allow"
        assert servers.port_key(envoy) == f"{store}-rls" and servers.port_key(rows[f"global-{store}"]) == store
        # Sluice: the rule keyed by client_ip, a global limit naming nothing, the limiter over RLS.
        cfg = json.loads(sluice.filters[0]["typed_config"]["config"]["configuration"]["value"])
        assert cfg["domain"] == setups.RLS_DOMAIN
        assert cfg["limiter"] == {"cluster": setups.LIMITER_CLUSTER, "protocol": "rls", "timeout": "50ms"}
        assert cfg["rules"][0]["key"] == ["client_ip"] and cfg["rules"][0]["limits"] == [{"scope": "global"}]
        # Envoy: its ratelimit filter on the same cluster and domain, the route's actions build the same
        # descriptor, answered by the fault filter on a route that never reaches its cluster.
        ratelimit, fault = envoy.filters
        assert ratelimit["name"] == "envoy.filters.http.ratelimit"
        assert ratelimit["typed_config"]["domain"] == setups.RLS_DOMAIN
        assert ratelimit["typed_config"]["rate_limit_service"]["grpc_service"]["envoy_grpc"]["cluster_name"] == \
            setups.LIMITER_CLUSTER
        assert fault["typed_config"]["abort"]["http_status"] == 200
        [route] = envoy.hcm_extra["route_config"]["virtual_hosts"][0]["routes"]
        assert route["route"]["rate_limits"] == [{"actions": [
            {"generic_key": {"descriptor_value": setups.RULE, "descriptor_key": "generic_key"}},
            {"remote_address": {}}]}]
        assert envoy.hcm_extra["xff_num_trusted_hops"] == 1
        assert [c["name"] for c in envoy.clusters] == [route["route"]["cluster"]]
    reference = rows["envoy-rls-route"]
    assert reference.store is None and reference.filters == [setups.FAULT_REPLY]
    assert reference.hcm_extra == rows["envoy-rls-memory"].hcm_extra
    limitador = rows["envoy-limitador"]
    assert limitador.store == "limitador" and limitador.filters == rows["envoy-rls-memory"].filters
    # Limitador: the same rate per second (a fixed window of whole seconds), the same descriptor.
    assert setups.LIMITADOR_LIMITS == """\
- namespace: bench
  max_value: 100000
  seconds: 1
  conditions:
    - "descriptors[0].generic_key == 'per-ip'"
  variables:
    - descriptors[0].remote_address
"""

def test_rls_calls_and_the_rls_targets_are_reported():
    rows = {r.id: r for r in setups.rows(Path("s"), Path("n"))}

    def sample(rps, rls_calls=0, calls=0):
        s = _sample(rps)  # 1,000 requests
        s.limiter = {"calls": calls, "batches": 0, "batched": 0, "leased": 0, "returned": 0, "rls_calls": rls_calls}
        return s

    envoy = report.summarize(rows["envoy-rls-memory"], [sample(7000, 1002)])
    rls = report.summarize(rows["global-rls-memory"], [sample(5600, 1000)])
    http = report.summarize(rows["global-memory"], [sample(6300, calls=1000)])
    assert envoy.calls() == "1.002 RLS calls per request"
    assert http.calls() == "1.000 limiter calls per request"
    assert "(1.000 RLS calls per request)" in report.envoy_table({"global-rls-memory": rls})[-1]
    goals = {t.name: t for t in report.targets({1: {"envoy-rls-memory": envoy, "global-rls-memory": rls,
                                                    "global-memory": http}}, {})}
    t = goals["Sluice per request (RLS) ≥ Envoy's ratelimit filter → sluice-limiter, memory store"]
    assert (t.measured, t.met) == ("0.800× (target ≥ 1.00×)", False)
    t = goals["Sluice per request (HTTP) ≥ Envoy's ratelimit filter → sluice-limiter, memory store"]
    assert (t.measured, t.met) == ("0.900× (target ≥ 1.00×)", False)
    t = goals["Sluice per request (RLS) ≥ Envoy's ratelimit filter → sluice-limiter, Redis store"]
    assert (t.measured, t.met) == ("not measured", None)


def test_the_rlqs_row_buckets_the_client_address_under_a_limit_it_never_reaches():
    rows = {r.id: r for r in setups.rows(Path("s"), Path("n"))}
    row = rows["rlqs-memory"]
    assert row.store == "memory" and row.rlqs and not row.rls and row.expect == "allow" and row.keys == 1
    assert servers.port_key(row) == "memory-rlqs"
    assert not row.hcm_extra and not row.clusters  # decided before the direct response, no route action needed
    [quota] = row.filters
    cfg = quota["typed_config"]
    assert quota["name"] == "envoy.filters.http.rate_limit_quota"
    assert cfg["domain"] == setups.RLS_DOMAIN
    assert cfg["rlqs_server"]["envoy_grpc"]["cluster_name"] == setups.LIMITER_CLUSTER
    [matcher] = cfg["bucket_matchers"]["matcher_list"]["matchers"]
    assert matcher["predicate"]["single_predicate"]["input"]["typed_config"]["header_name"] == "x-forwarded-for"
    bucket = matcher["on_match"]["action"]["typed_config"]["bucket_id_builder"]["bucket_id_builder"]
    assert sorted(bucket) == ["name", "tenant"] and bucket["name"] == {"string_value": "api"}
    # Two of Envoy's 5 s reporting intervals, so assignments never lapse between reports.
    assert setups.RLQS_TTL_MS == 10_000


def test_the_limiters_serve_rls_beside_http_and_keep_it_across_restarts(tmp_path):
    import run

    args = servers.limiter_args(tmp_path)
    assert args[0] == "--grpc-listen" and args[2] == "--descriptors"
    assert Path(args[3]).read_text() == setups.RLS_DESCRIPTORS
    assert servers.grpc_port(args) == int(args[1].rsplit(":", 1)[1])
    assert args[4] == "--rlqs-listen" and args[6:] == ["--rlqs-assignment-ttl-ms", "10000"]
    assert servers.grpc_port(args, "--rlqs-listen") == int(args[5].rsplit(":", 1)[1]) != servers.grpc_port(args)

    class Limiter(run.support.Limiter):
        def __init__(self):
            self.store, self.base_args, self.extra_args, self.starts = "memory", args, [], 0
            self.process = None

        def stop(self):
            pass

        def start(self):
            self.starts += 1

    lim = Limiter()
    run.place_limiters([lim], "1")
    assert lim.extra_args == [*args, "--threads", "1"] and lim.starts == 1


def test_limitador_is_served_only_its_own_rows():
    limitador = servers.Limitador.__new__(servers.Limitador)
    limitador.store = "limitador"
    on_redis = servers.Limitador.__new__(servers.Limitador)
    on_redis.store = "limitador-redis"
    memory = servers.support.Limiter.__new__(servers.support.Limiter)
    memory.store = "memory"
    redis = servers.support.Redis.__new__(servers.support.Redis)
    assert servers.serves(limitador, "limitador") and not servers.serves(limitador, "limitador-redis")
    assert servers.serves(on_redis, "limitador-redis") and not servers.serves(on_redis, "limitador")
    assert not servers.serves(limitador, "memory") and not servers.serves(limitador, "redis")
    assert not servers.serves(on_redis, "memory") and not servers.serves(on_redis, "redis")
    assert not servers.serves(memory, "limitador") and not servers.serves(redis, "limitador")
    assert not servers.serves(memory, "limitador-redis")
    # Redis's CPU time is charged to the rows of both limiters it serves
    assert servers.serves(redis, "limitador-redis") and servers.serves(redis, "redis")
    assert servers.serves(memory, "memory")


def test_the_limitador_rows_ask_for_the_same_descriptor_over_rls_and_http():
    rows = {r.id: r for r in setups.rows(Path("s"), Path("n"))}
    for store in servers.LIMITADOR_STORES:
        envoy = rows[f"envoy-{store}"]
        assert envoy.rls and envoy.store == store and envoy.filters == rows["envoy-rls-memory"].filters
        assert servers.port_key(envoy) == f"{store}-rls"
    memory, redis = rows["limitador-memory"], rows["limitador-redis"]
    assert (memory.kind, memory.store, redis.kind, redis.store) == ("limiter", "limitador", "limiter",
                                                                    "limitador-redis")
    assert memory.check_path == redis.check_path == "/check_and_report"
    assert json.loads(memory.check_body) == {"namespace": setups.RLS_DOMAIN, "delta": 1,
                                             "values": {"generic_key": setups.RULE, "remote_address": "10.0.0.1"}}
    assert memory.check_body == redis.check_body
    limiter = rows["limiter-memory"]
    assert (limiter.check_path, limiter.check_body) == ("/v1/check", setups.LIMITER_CHECK_BODY)


def test_the_limitador_row_is_skipped_without_a_binary(monkeypatch):
    import run

    monkeypatch.delenv("LIMITADOR", raising=False)
    assert run.parse_args([]).limitador is None
    monkeypatch.setenv("LIMITADOR", "/opt/limitador-server")
    assert run.parse_args([]).limitador == Path("/opt/limitador-server")


def test_the_default_set_keeps_the_rows_of_every_ratio_the_targets_need():
    import run

    rows = setups.rows(Path("s"), Path("n"))
    default = {r.id for r in run.select(rows, "", "default")}
    assert default == {r.id for r in rows if r.default}
    assert {"envoy", "noop-wasm", "native", "host-calls", "local-gcra", "local-gcra-100-rules",
            "local-gcra-1000-rules", "envoy-1000-routes", "call-out", "global-calls", "pause-resume", "global-memory",
            "global-memory-coalesce", "global-memory-lease", "global-redis", "global-redis-lease",
            "global-memory-lease-wide", "lease-calls", "envoy-limitador", "envoy-limitador-redis", "limiter-memory",
            "limiter-redis", "limitador-memory", "limitador-redis", "limiter-rls-memory", "limitador-rls-memory"} == default
    assert len(run.select(rows, "", "full")) == len(rows)
    # --only picks from every row, whatever the set
    assert {r.id for r in run.select(rows, "^local-deny$", "default")} == {"envoy", "noop-wasm", "native",
                                                                          "local-deny"}


def test_the_sets_choose_rounds_durations_and_concurrencies_unless_told():
    import run

    a = run.parse_args([])
    assert (a.set, a.rounds, a.duration, a.concurrencies, a.short_criterion) == ("default", 3, 3, [1], True)
    full = run.parse_args(["--set", "full"])
    assert (full.rounds, full.duration, full.concurrencies, full.short_criterion) == (5, 4, [1, 2], False)
    told = run.parse_args(["--set", "full", "--rounds", "2", "--concurrency", "2"])
    assert (told.rounds, told.concurrencies) == (2, [2])
    quick = run.parse_args(["--quick", "--set", "full"])
    assert (quick.rounds, quick.duration, quick.concurrencies, quick.starts, quick.pushes) == (1, 1, [1], 1, 2)


def test_the_many_rules_rows_match_one_rule_and_envoy_gets_as_many_routes():
    rows = {r.id: r for r in setups.rows(Path("s"), Path("n"))}
    for n in (setups.SOME_RULES, setups.MANY_RULES):
        cfg = json.loads(rows[f"local-gcra-{n}-rules"].filters[0]["typed_config"]["config"]["configuration"]["value"])
        rules = cfg["rules"]
        assert len(rules) == n and len({r["name"] for r in rules}) == n
        # the last rule is local-gcra's, matching every request; the others match paths never requested
        assert rules[-1] == json.loads(rows["local-gcra"].filters[0]["typed_config"]["config"]["configuration"]
                                       ["value"])["rules"][0]
        assert all(r["match"]["path_prefix"].startswith("/svc") for r in rules[:-1])
    routes = rows["envoy-1000-routes"].hcm_extra["route_config"]["virtual_hosts"][0]["routes"]
    assert len(routes) == setups.MANY_RULES and routes[-1]["match"] == {"prefix": "/"}
    assert all(r["match"]["prefix"].startswith("/svc") for r in routes[:-1])
    assert rows["envoy-1000-routes"].filters == []


def test_ratios_carry_their_spread_over_the_rounds_paired_round_by_round():
    rows = {r.id: r for r in setups.rows(Path("s"), Path("n"))}

    def summary(row_id, per_round):
        samples = []
        for rnd, rps in enumerate(per_round, 1):
            s = _sample(rps)
            s.round = rnd
            samples.append(s)
        return report.summarize(rows[row_id], samples)

    c1 = {"local-gcra": summary("local-gcra", [100, 200, 100]),
          "local-gcra-1000-rules": summary("local-gcra-1000-rules", [90, 100, 95]),
          "envoy": summary("envoy", [200, 200, 200]), "envoy-1000-routes": summary("envoy-1000-routes", [180] * 3)}
    goal = next(t for t in report.targets({1: c1}, {}) if t.name.startswith("1,000 rules"))
    assert goal.measured == "0.950× (target ≥ 0.95×)" and goal.met
    assert goal.spread == "0.50–0.95"  # 90/100, 100/200, 95/100
    assert goal.bound == "0.900× for Envoy's route table of 1,000 routes"
    limiter = {"limiter-memory": summary("limiter-memory", [110, 100]),
               "limitador-memory": summary("limitador-memory", [100, 50])}
    goals = {t.name: t for t in report.targets({}, limiter)}
    mem = goals["sluice-limiter ≥ 1.5× Limitador, HTTP checks/s, memory"]
    assert (mem.measured, mem.met, mem.spread) == ("1.400× (target ≥ 1.50×)", False, "1.10–2.00")
    assert goals["sluice-limiter ≥ 1.5× Limitador, HTTP checks/s, Redis"].met is None
    text = report.targets_table(list(goals.values()))
    assert "| sluice-limiter ≥ 1.5× Limitador, HTTP checks/s, memory | – | 1.400× (target ≥ 1.50×) | **missed** | 1.10–2.00 | – |" \
        in text
    assert goals["sluice-limiter ≥ 1.5× Limitador, RLS gRPC checks/s, memory"].met is None
    assert "2 targets need rows this run did not measure (`make bench-full` measures every row)." in text


def test_builds_before_are_compared_round_by_round(monkeypatch):
    monkeypatch.setenv("SLUICE_BASELINE_WASM", "/b/old.wasm")
    rows = {r.id: r for r in setups.rows(Path("s.wasm"), Path("n.wasm"))}

    def summary(row_id, cpu):
        samples = []
        for rnd, us in enumerate(cpu, 1):
            s = _sample(1000)
            s.round, s.envoy_cpu_us = rnd, us
            samples.append(s)
        return report.summarize(rows[row_id], samples)

    c1 = {"local-gcra": summary("local-gcra", [40.0, 45.0, 41.0, 39.0]),
          "local-gcra-baseline": summary("local-gcra-baseline", [38.0, 40.0, 43.0, 38.5]),
          "global-memory": summary("global-memory", [80.0])}
    # Differences +2.0, +5.0, -2.0, +0.5: median +1.25; cheaper once.
    assert report.baselines(c1) == [
        "This build against the builds before it, paired round by round: `local-gcra` against old.wasm: "
        "+1.2 µs of Envoy CPU per request (median of 4 rounds' differences; cheaper in 1 of 4, "
        "sign test p = 0.62)."]
    assert "paired round by round" in report.markdown({}, {1: c1}, {}, [], None, [], traces=False)
    goal = next(t for t in report.targets({1: c1}, {}) if t.name.startswith("`local-gcra` no slower"))
    assert (goal.name, goal.measured, goal.met, goal.spread) == (
        "`local-gcra` no slower than old.wasm (Envoy CPU per request, paired by round)",
        "+1.2 µs (sign test p = 0.62)", False, "-2.0 to +5.0 µs")
    assert report.baselines({"local-gcra": c1["local-gcra"]}) == []


def test_the_sign_test_says_how_much_a_count_of_cheaper_rounds_means():
    # Three rounds all one way happen one time in four by chance.
    assert report.sign_test([1.0, 2.0, 0.5]) == 0.25
    assert report.sign_test([-1.0] * 7) == 2 / 128
    assert report.sign_test([1.0, -1.0] * 4) == 1.0
    # Rounds without a difference count for neither build.
    assert report.sign_test([0.0, 0.0, -1.0]) == 1.0


def test_starts_and_pushes_are_reported_with_the_push_target():
    timings = [report.Timing("start", "Envoy, no filter", 1, [300.0, 320.0, 310.0]),
               report.Timing("start", "Sluice, 1 rule", 1, [400.0, 390.0, 420.0]),
               report.Timing("push", "Sluice, 1 rule", 2, [12.0, 10.0]),
               report.Timing("push", "Sluice, 1,000 rules", 2, [60.0, 40.0, 45.0])]
    lines = report.timings_table(timings)
    assert "| start: Sluice, 1 rule | 1 | 400.0 ms | 390.0–420.0 ms | 3 | +90 ms |" in lines
    assert "| push: Sluice, 1 rule | 2 | 11.0 ms | 10.0–12.0 ms | 2 | – |" in lines
    [push] = [t for t in report.targets({}, {}, timings) if t.name.startswith("a push")]
    assert (push.name, push.concurrency, push.measured, push.met, push.spread) == (
        "a push of 1,000 rules applied < 50 ms", 2, "45.0 ms (median of 3)", True, "40.0–60.0 ms")
    assert "## Plugin start and configuration push" in report.markdown({}, {}, {}, [], None, [], timings=timings)
    assert report.timings_table([]) == []


def test_the_pushed_configurations_differ_only_in_the_matching_rules_quota():
    import startup

    one, other = startup.sluice_rules(setups.MANY_RULES), startup.sluice_rules(setups.MANY_RULES, 999)
    assert one["rules"][:-1] == other["rules"][:-1]
    assert one["rules"][-1]["limits"][0]["requests"] == 1000 and other["rules"][-1]["limits"][0]["requests"] == 999
    assert startup.sluice_rules(1)["rules"] == json.loads(
        next(r for r in setups.rows(Path("s"), Path("n")) if r.id == "local-gcra")
        .filters[0]["typed_config"]["config"]["configuration"]["value"])["rules"]


def test_the_modules_sizes_are_reported(tmp_path):
    sluice, noop = tmp_path / "sluice.wasm", tmp_path / "noop.wasm"
    sluice.write_bytes(b"\0" * 709_797)
    noop.write_bytes(b"\0" * 209_070)
    sizes = report.module_sizes({"Sluice": sluice, "no-op filter": noop, "baseline": tmp_path / "none.wasm"})
    assert sizes == "Sluice sluice.wasm 709,797 B, no-op filter noop.wasm 209,070 B"


def test_code_lines_probe_each_stretch_and_count_what_it_runs():
    import codelines

    text = "\n".join([
        "(module",
        '  (import "env" "proxy_log" (func $log (param i32 i32 i32) (result i32)))',
        "  (func $f (param i32) (result i32)",
        "    (local i32)",
        "    block  ;; label = @1",
        "      local.get 0",
        "      br_if 0 (;@1;)",
        "      i32.const 7",
        "      return",
        "      drop",
        "    end",
        "    i32.const 1)",
        '  (export "f" (func $f)))',
    ])
    probed, stretches = codelines.instrument(text)
    lines = probed.splitlines()
    # The probe's import follows the module's last import; locals stay first.
    assert lines[2] == codelines.PROBE
    assert lines[4:7] == ["    (local i32)", "    i32.const 0", "    call $sluice_probe"]
    # Stretches: the start (block, get, br_if), after br_if (const, return:
    # `drop` never runs), after `end` (the last line closes the function,
    # so no probe follows it).
    assert [(s.function, s.instructions) for s in stretches] == [("$f", 3), ("$f", 2), ("$f", 1)]
    assert sum(line.strip() == "call $sluice_probe" for line in lines) == 3


def test_footprint_rows_and_table():
    import footprint

    chosen = footprint.rows(Path("noop.wasm"), 64, [Path("a.wasm")])
    assert [r.name for r in chosen] == ["host-calls", "repeat-64", "spread-64", "touch-128", "touch-512",
                                        "sluice a.wasm"]
    assert chosen[2].config == {"mode": "spread", "n": 64}
    assert chosen[-1].config["rules"][0]["key"] == ["client_ip"]
    runs = {"host-calls": [30.0, 31.0, 32.0], "spread-64": [34.0, 36.0, 33.0]}
    lines = footprint.table(runs, {"spread-64": (4.5, 12_203)})
    assert lines[2] == "| host-calls | 31.00 | – | – | – | – | – |"
    # Paired by round: +4, +5, +1.
    assert lines[3] == "| spread-64 | 34.00 | +4.00 | 3 of 3 | 0.25 | 4.50 | 12,203 |"


def test_rounds_reverse_the_rows_every_other_round():
    import run

    assert [run.in_round(["a", "b", "c"], r) for r in range(3)] == [
        ["a", "b", "c"], ["c", "b", "a"], ["a", "b", "c"]]


def test_every_round_runs_each_row_in_an_envoy_of_its_own(monkeypatch, tmp_path):
    # Two Envoys of one configuration differ by several µs for as long as
    # they run: a round's Envoys are started for it and stopped after it.
    import argparse

    import run

    started, events = [], []

    class FakeEnvoy:
        def __init__(self, row):
            self.row, self.port, self.pid, self.envoy = row, 1, 1, None
            started.append(self)
            events.append(f"start {row.id}")

        def stop(self):
            events.append(f"stop {self.row.id}")

    def start(row, *_args):
        if row.id == "broken":
            raise RuntimeError("no start")
        return FakeEnvoy(row)

    def fake_run(_wrk, _url, duration, *_args, **_kw):
        events.append(f"load {duration}")
        return _sample(1000)

    monkeypatch.setattr(run.servers, "start_envoy", start)
    monkeypatch.setattr(run.load, "run", fake_run)
    rows = [setups.Row("a", "a"), setups.Row("broken", "b"), setups.Row("c", "c")]
    a = argparse.Namespace(rounds=3, warmup=1, duration=3, solo=0, envoy=None, wrk="wrk", no_pin=True)
    failures: list[str] = []
    out, samples = run.run_envoy_rows(a, rows, tmp_path, {}, [], 1, lambda _line: None, failures)
    # Started, warmed (1 s), run (3 s) in the round's order, stopped.
    rounds = [["start a", "start c", "load 1", "load 1", "load 3", "load 3", "stop a", "stop c"]] * 3
    assert events == [e for r in rounds for e in r]
    assert len({id(e) for e in started}) == 6
    assert len(samples["a"]) == len(samples["c"]) == 3 and samples["broken"] == []
    assert set(out) == {"a", "c"}
    assert failures == ["`broken` at concurrency 1: start failed: no start"]  # named once, not retried


def test_each_build_before_runs_right_after_the_row_it_repeats(monkeypatch):
    # A pair compared round by round shares the round's neighbours.
    monkeypatch.setenv("SLUICE_BASELINE_WASM", "/a/old.wasm:/b/older.wasm")
    ids = [r.id for r in setups.rows(Path("s"), Path("n"))]
    for row in setups.COMPARED:
        at = ids.index(row)
        assert ids[at + 1: at + 3] == [f"{row}-baseline", f"{row}-baseline2"]
