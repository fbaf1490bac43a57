"""The conventions Envoy users know: IETF rate-limit headers, gRPC denials,
access logs, Prometheus labels and Envoy's duration form, against real Envoy."""

import http_sfv
import yaml

import support
from support import request, sluice_config, wait_until
from support.client import grpc_call
from support.docs import code_blocks, doc_files


def sf_list(value: str) -> list:
    """A structured-field List (RFC 9651), as [(item, params)]; fails on bad syntax."""
    parsed = http_sfv.List()
    parsed.parse(value.encode())
    return [(member.value, dict(member.params)) for member in parsed]


# ---------------------------------------------------------------- IETF headers

def test_each_limit_has_its_policy_item_and_ratelimit_names_the_closest(envoy):
    e = envoy(sluice_config([
        {"name": "site", "key": ["const:site"],
         "limits": [{"algorithm": "fixed_window", "requests": 1000, "window": "1h"}]},
        {"name": "user", "key": ["header:x-user"],
         "limits": [{"algorithm": "gcra", "requests": 100, "window": "1m"},
                    {"algorithm": "sliding_log", "requests": 3, "window": "1h"}]},
    ], headers="ietf"))
    r = request(e.port, "/", headers={"x-user": "a"})
    assert r.status == 200
    policies = sf_list(r.header("ratelimit-policy"))
    assert policies == [("site", {"q": 1000, "w": 3600}),
                        ("user.0", {"q": 100, "w": 60}),
                        ("user.1", {"q": 3, "w": 3600})]
    state = sf_list(r.header("ratelimit"))
    assert [name for name, _ in state] == ["user.1"]
    assert state[0][1]["r"] == 2
    request(e.port, "/", headers={"x-user": "a"})
    request(e.port, "/", headers={"x-user": "a"})
    denied = request(e.port, "/", headers={"x-user": "a"})
    assert denied.status == 429
    assert denied.header("x-sluice-rule") == "user"
    assert [n for n, _ in sf_list(denied.header("ratelimit-policy"))] == ["site", "user.0", "user.1"]
    (name, params), = sf_list(denied.header("ratelimit"))
    assert (name, params["r"]) == ("user.1", 0)
    assert int(denied.header("retry-after")) >= params["t"] > 0


def test_a_limit_may_carry_its_own_name(envoy):
    e = envoy(sluice_config([{"name": "user", "key": ["const:k"],
                              "limits": [{"name": "per-second", "algorithm": "gcra", "requests": 10, "window": "1s"},
                                         {"algorithm": "fixed_window", "requests": 2, "window": "1h"}]}],
                            headers="ietf"))
    r = request(e.port, "/")
    assert sf_list(r.header("ratelimit-policy")) == [("per-second", {"q": 10, "w": 1}), ("user.1", {"q": 2, "w": 3600})]
    assert sf_list(r.header("ratelimit"))[0][0] == "user.1"


def test_t_is_the_time_until_additional_quota(envoy):
    # 60 per hour: one request comes back every minute, the whole quota in an hour
    e = envoy(sluice_config([{"name": "hourly", "key": ["const:k"],
                              "limits": [{"algorithm": "token_bucket", "requests": 60, "window": "1h"}]}],
                            headers="both"))
    r = request(e.port, "/")
    (name, params), = sf_list(r.header("ratelimit"))
    assert (name, params["r"]) == ("hourly", 59)
    assert 59 <= params["t"] <= 60
    assert int(r.header("x-ratelimit-reset")) >= 59  # legacy: until the quota is full
    for _ in range(59):
        request(e.port, "/")
    denied = request(e.port, "/")
    assert denied.status == 429
    (_, params), = sf_list(denied.header("ratelimit"))
    assert params["r"] == 0 and 1 <= params["t"] <= 60
    assert int(denied.header("retry-after")) >= params["t"]
    assert denied.header("x-envoy-ratelimited") == "true"


# ---------------------------------------------------------------- gRPC

def test_a_denied_grpc_call_gets_resource_exhausted(envoy):
    e = envoy(sluice_config([{"name": "rpc", "key": ["const:k"],
                              "limits": [{"algorithm": "gcra", "requests": 1, "window": "1m"}]}],
                            response={"status": 429, "body": "{}", "headers": {"content-type": "application/json",
                                                                              "x-extra": "1"}},
                            headers="ietf"))
    _, ok, _, _ = grpc_call(e.port)
    assert ok[":status"] == "200"
    assert sf_list(ok["ratelimit"])[0][0] == "rpc"
    _, denied, trailers, _ = grpc_call(e.port)
    fields = {**denied, **trailers}  # a trailers-only response carries everything in its headers
    assert fields[":status"] == "200"
    assert fields["grpc-status"] == "8"  # RESOURCE_EXHAUSTED, not 14 (UNAVAILABLE, retried at once)
    assert "rpc" in fields["grpc-message"]
    assert fields["content-type"] == "application/grpc"
    assert fields["x-sluice-rule"] == "rpc"
    assert fields["x-envoy-ratelimited"] == "true"
    assert fields["x-extra"] == "1"
    assert int(fields["retry-after"]) >= sf_list(fields["ratelimit"])[0][1]["t"] > 0


def test_a_delayed_grpc_call_never_waits_past_its_deadline(envoy):
    e = envoy(sluice_config([{"name": "paced", "key": ["const:k"],
                              "limits": [{"algorithm": "gcra", "requests": 2, "window": "1s", "burst": 1,
                                          "on_exceed": "delay", "max_delay": "5s"}]}]))
    grpc_call(e.port)  # spends the burst: the next call conforms in 500 ms
    elapsed, headers, _, _ = grpc_call(e.port, [("grpc-timeout", "200m")])
    assert headers["grpc-status"] == "8" and headers["x-sluice-rule"] == "paced"
    assert elapsed < 0.2
    # with time enough, it is held and goes through
    elapsed, headers, _, _ = grpc_call(e.port, [("grpc-timeout", "5S")])
    # (the direct response answers a gRPC call with its own grpc-status)
    assert headers.get("grpc-status") != "8" and "x-sluice-rule" not in headers
    assert 0.3 < elapsed < 1.5
    assert int(headers["x-sluice-delayed-ms"]) > 0


# ---------------------------------------------------------------- access log

def readme_yaml(first_line: str):
    """The documentation's YAML block (in docs/) that starts with `first_line`."""
    for path in doc_files():
        for info, block in code_blocks(path):
            if info == "yaml" and block.startswith(first_line):
                return yaml.safe_load(block)
    raise AssertionError(f"docs/ has no yaml block starting with {first_line!r}")


def test_denied_and_delayed_requests_are_in_the_access_log_as_the_readme_shows(tmp_path):
    log = tmp_path / "access.log"
    access_log = readme_yaml("access_log:")["access_log"]
    access_log[0]["typed_config"]["path"] = str(log)
    cfg = sluice_config([{"name": "paced", "key": ["header:x-user"],
                          "limits": [{"algorithm": "gcra", "requests": 2, "window": "1s", "burst": 1,
                                      "on_exceed": "delay", "max_delay": "750ms"}]}])
    e = support.start_envoy(tmp_path, [support.wasm_filter(cfg)], hcm_extra={"access_log": access_log})
    try:
        assert request(e.port, "/a", headers={"x-user": "a"}).status == 200  # admitted at once
        assert request(e.port, "/b", headers={"x-user": "b"}).status == 200
        # two at once for "a": the first held ~500 ms, the second would wait ~1 s: denied
        results = []
        support.run_all([lambda: results.append(request(e.port, "/a", headers={"x-user": "a"}).status)
                         for _ in range(2)])
        assert sorted(results) == [200, 429]
        # a gRPC call over "a"'s quota, which cannot wait
        _, headers, _, _ = grpc_call(e.port, [("x-user", "a"), ("grpc-timeout", "1n")])
        assert headers["grpc-status"] == "8"

        def lines():
            return log.read_text().splitlines() if log.exists() else []
        wait_until(lambda: len(lines()) == 5, what="five access log lines")
    finally:
        e.stop()
    # START_TIME METHOD PATH CODE X-ENVOY-RATELIMITED OUTCOME RULE DELAYED-MS
    rows = sorted(line.split(" ")[1:] for line in lines())
    assert rows[0] == ["GET", "/a", "200", "-", "-", "-", "-"]
    assert rows[1][:6] == ["GET", "/a", "200", "-", "delayed", "paced"] and int(rows[1][6]) > 0
    assert rows[2] == ["GET", "/a", "429", "true", "denied", "paced", "-"]
    assert rows[3] == ["GET", "/b", "200", "-", "-", "-", "-"]
    assert rows[4] == ["POST", "/test.Echo/Say", "200", "true", "denied", "paced", "-"]


# ---------------------------------------------------------------- stats

def test_the_readme_stats_tags_turn_the_rule_into_a_prometheus_label(tmp_path):
    cfg = sluice_config([{"name": "per-ip", "key": ["const:k"],
                          "limits": [{"algorithm": "gcra", "requests": 1, "window": "1m"}]},
                         {"name": "user_2", "key": ["const:k"], "mode": "shadow",
                          "limits": [{"algorithm": "gcra", "requests": 5, "window": "1m"}]}])
    stats_config = readme_yaml("stats_config:")  # docs/operations/metrics.md's snippet
    e = support.start_envoy(tmp_path, [support.wasm_filter(cfg)], bootstrap_extra=stats_config)
    try:
        assert [request(e.port, "/").status for _ in range(2)] == [200, 429]

        def prometheus():
            return request(e.admin_port, "/stats/prometheus").body.decode()
        # counters reach Envoy on each worker's next flush (the two requests
        # may have gone to two workers)
        flushed = ('sluice_denied{sluice_rule="per-ip"} 1', 'sluice_allowed{sluice_rule="per-ip"} 1',
                   'sluice_allowed{sluice_rule="user_2"} 1')
        wait_until(lambda: all(s in prometheus() for s in flushed), what="the rule's counters, labelled")
        text = prometheus()
    finally:
        e.stop()
    samples = {}
    for line in text.splitlines():
        if line.startswith("#") or "sluice" not in line:
            continue
        name, _, value = line.rpartition(" ")
        samples[name] = float(value)
    assert samples['sluice_allowed{sluice_rule="per-ip"}'] == 1
    assert samples['sluice_denied{sluice_rule="per-ip"}'] == 1
    assert samples['sluice_allowed{sluice_rule="user_2"}'] == 1
    assert samples["sluice_config_errors{}"] == 0  # filter-wide counters keep their names
    assert samples["sluice_delay_ms_count{}"] == 0
    assert "sluice_per_ip" not in text and "sluice_user_2" not in text


def test_a_dot_in_a_rule_name_is_refused_naming_the_field(envoy):
    e = envoy(sluice_config([{"name": "ok", "key": ["const:k"],
                              "limits": [{"algorithm": "gcra", "requests": 1, "window": "1m"}]}]))
    bad = sluice_config([{"name": "a.b", "key": ["const:k"],
                          "limits": [{"algorithm": "gcra", "requests": 1, "window": "1m"}]}])
    assert not e.push_config(bad)
    assert "rules[0].name" in e.log()


# ---------------------------------------------------------------- durations

def test_envoy_decimal_second_durations(envoy):
    e = envoy(sluice_config([{"name": "quarter", "key": ["const:k"],
                              "limits": [{"algorithm": "fixed_window", "requests": 1, "window": "0.25s"}]},
                             {"name": "slow", "key": ["const:k"],
                              "limits": [{"algorithm": "gcra", "requests": 100, "window": "1.5s"}]}],
                            headers="ietf"))
    r = request(e.port, "/")
    assert sf_list(r.header("ratelimit-policy")) == [("quarter", {"q": 1, "w": 1}), ("slow", {"q": 100, "w": 2})]
    wait_until(lambda: request(e.port, "/").status == 429, what="a denial in the quarter second")
    wait_until(lambda: request(e.port, "/").status == 200, timeout=2, what="the next quarter second")
