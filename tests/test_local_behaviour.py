"""Shadow mode, several rules, responses, header modes, metrics and reconfiguration."""

from support import request, sluice_config, wait_until


def statuses(port, n, headers=None, path="/"):
    return [request(port, path, headers=headers).status for _ in range(n)]


def test_shadow_mode_counts_but_never_blocks(envoy):
    e = envoy(sluice_config([{
        "name": "trial", "key": ["header:x-user"], "mode": "shadow",
        "limits": [{"algorithm": "sliding_log", "requests": 2, "window": "1h"}],
    }]))
    responses = [request(e.port, "/", headers={"x-user": "a"}) for _ in range(5)]
    assert [r.status for r in responses] == [200] * 5
    assert [r.header("x-sluice-shadow-denied") for r in responses] == [None, None, "trial", "trial", "trial"]
    # counters reach /stats on the filter's next flush
    wait_until(lambda: e.sluice_stat("sluice.trial.allowed") == 2, what="sluice.trial.allowed == 2")
    wait_until(lambda: e.sluice_stat("sluice.trial.shadow_denied") == 3, what="sluice.trial.shadow_denied == 3")
    assert e.sluice_stat("sluice.trial.denied") == 0


def test_denied_request_consumes_nothing_from_other_rules(envoy):
    e = envoy(sluice_config([
        {"name": "site", "key": ["const:site"],
         "limits": [{"algorithm": "fixed_window", "requests": 4, "window": "365d"}]},
        {"name": "user", "key": ["header:x-user"],
         "limits": [{"algorithm": "gcra", "requests": 1, "window": "1h"}]},
    ]))
    # alice: one admitted, then three denied by "user"; "site" must have spent only one
    assert statuses(e.port, 4, {"x-user": "alice"}) == [200, 429, 429, 429]
    assert [request(e.port, "/", headers={"x-user": u}).status for u in ("b", "c", "d", "e")] == [200, 200, 200, 429]
    wait_until(lambda: e.sluice_stat("sluice.user.denied") == 3, what="sluice.user.denied == 3")
    wait_until(lambda: e.sluice_stat("sluice.site.denied") == 1, what="sluice.site.denied == 1")


def test_several_limits_in_one_rule_report_the_closest_to_exhaustion(envoy):
    e = envoy(sluice_config([{
        "name": "two", "key": ["header:x-user"],
        "limits": [{"algorithm": "fixed_window", "requests": 100, "window": "365d"},
                   {"algorithm": "sliding_log", "requests": 3, "window": "1h"}],
    }]))
    r = request(e.port, "/", headers={"x-user": "a"})
    assert r.header("x-ratelimit-limit") == "3"
    assert r.header("x-ratelimit-remaining") == "2"
    # each limit has its policy item; `ratelimit` names the closest to exhaustion
    assert r.header("ratelimit-policy") == '"two.0";q=100;w=31536000, "two.1";q=3;w=3600'
    assert r.header("ratelimit").startswith('"two.1";r=2;')
    assert statuses(e.port, 3, {"x-user": "a"}) == [200, 200, 429]
    # the denied request spent nothing of the 100/year limit: 97 left after 3 admits
    e.push_config(sluice_config([{
        "name": "two", "key": ["header:x-user"],
        "limits": [{"algorithm": "fixed_window", "requests": 100, "window": "365d"}],
    }]))
    assert request(e.port, "/", headers={"x-user": "a"}).header("x-ratelimit-remaining") == "96"


def test_configured_response(envoy):
    e = envoy(sluice_config(
        [{"name": "r", "key": ["const:x"], "limits": [{"algorithm": "gcra", "requests": 1, "window": "1m"}]}],
        response={"status": 503, "body": "{\"error\":\"slow down\"}",
                  "headers": {"content-type": "application/json", "x-extra": "1"}},
        headers="none",
    ))
    ok = request(e.port, "/")
    assert ok.status == 200
    assert all(not k.startswith(("ratelimit", "x-ratelimit")) for k in ok.headers)
    denied = request(e.port, "/")
    assert denied.status == 503
    assert denied.body == b'{"error":"slow down"}'
    assert denied.header("content-type") == "application/json"
    assert denied.header("x-extra") == "1"
    assert 59 <= int(denied.header("retry-after")) <= 60  # always sent on a deny
    assert denied.header("ratelimit") is None


def test_header_modes(envoy):
    rules = [{"name": "r", "key": ["header:x-user"], "limits": [{"algorithm": "gcra", "requests": 10, "window": "1m"}]}]
    e = envoy(sluice_config(rules, headers="legacy"))
    r = request(e.port, "/", headers={"x-user": "a"})
    assert (r.header("x-ratelimit-limit"), r.header("x-ratelimit-remaining")) == ("10", "9")
    assert r.header("ratelimit") is None and r.header("ratelimit-policy") is None

    assert e.push_config(sluice_config(rules, headers="ietf"))
    r = request(e.port, "/", headers={"x-user": "a"})
    assert r.header("x-ratelimit-limit") is None
    assert r.header("ratelimit-policy") == '"r";q=10;w=60'
    # GCRA at 10/min: one of the two spent requests comes back in 6 s (`t`,
    # draft-ietf-httpapi-ratelimit-headers-10: until *additional* quota), both in 12 s;
    # 5 once the push took more than a second
    assert r.header("ratelimit") in ('"r";r=8;t=6', '"r";r=8;t=5'), r.header("ratelimit")


def test_metrics_in_envoy_stats(envoy):
    e = envoy(sluice_config([{
        "name": "m", "key": ["header:x-user"], "limits": [{"algorithm": "token_bucket", "requests": 2, "window": "1h"}],
    }, {
        "name": "paced", "key": ["header:x-user"], "cost": "header:x-cost",
        "limits": [{"algorithm": "gcra", "requests": 2, "window": "1h", "on_exceed": "delay", "max_delay": "1s"}],
    }]))
    statuses(e.port, 5, {"x-user": "a"})
    statuses(e.port, 1)  # no key: skipped
    wait_until(lambda: e.sluice_stat("sluice.m.allowed") == 2, what="sluice.m.allowed == 2")
    wait_until(lambda: e.sluice_stat("sluice.m.denied") == 3, what="sluice.m.denied == 3")
    wait_until(lambda: e.sluice_stat("sluice.m.skipped") == 1, what="sluice.m.skipped == 1")
    assert e.sluice_stat("sluice.cas_exhausted") == 0
    names = request(e.admin_port, "/stats").body.decode()
    assert "sluice.m.allowed" in names and "sluice.cas_exhausted" in names
    # A rule has the stats of the features it uses only.
    plain = ["allowed", "denied", "shadow_denied", "skipped", "table_full", "table_full_workers"]
    assert defined_now(e, "m") == plain
    assert defined_now(e, "paced") == sorted(plain + ["cost_invalid", "delayed", "delayed_ms"])
    # A push that puts rule m in delay mode defines its delay counters.
    assert e.push_config(sluice_config([{
        "name": "m", "key": ["header:x-user"],
        "limits": [{"algorithm": "gcra", "requests": 2, "window": "1h", "on_exceed": "delay", "max_delay": "1s"}],
    }]))
    wait_until(lambda: "delayed" in defined_now(e, "m"), what="sluice.m.delayed defined by the push")
    assert defined_now(e, "m") == sorted(plain + ["delayed", "delayed_ms"])


def defined_now(e, rule):
    """The suffixes of rule `rule`'s stats in Envoy's /stats now."""
    prefix = f"sluice.{rule}."
    names = [name.removeprefix("wasmcustom.") for name in e.stats()]
    return sorted(name[len(prefix):] for name in names if name.startswith(prefix))


def test_reconfiguration_keeps_counters(envoy):
    rule = {"name": "keep", "key": ["header:x-user"],
            "limits": [{"algorithm": "gcra", "requests": 3, "window": "1h"}]}
    e = envoy(sluice_config([rule]))
    assert statuses(e.port, 2, {"x-user": "a"}) == [200, 200]
    other = {"name": "other", "key": ["const:o"], "limits": [{"algorithm": "fixed_window", "requests": 9, "window": "1m"}]}
    assert e.push_config(sluice_config([rule, other]))
    assert statuses(e.port, 2, {"x-user": "a"}) == [200, 429]


def test_empty_rules_pass_everything(envoy):
    e = envoy(sluice_config([]))
    assert statuses(e.port, 3) == [200, 200, 200]


# One path written five ways: as is, with a doubled slash, a dot segment,
# a parent segment, and a percent-encoded unreserved letter.
SPELLINGS = ["/login", "//login", "/./login", "/x/../login", "/%6Cogin"]


def test_paths_reach_rules_as_envoy_normalises_them(envoy):
    """Rules match the path Envoy hands its filters: without the HTTP
    connection manager's `normalize_path` and `merge_slashes`, the other
    spellings of `/login` miss a rule on `/login` (an upstream that
    normalises would serve them all); with them, every spelling counts."""
    rule = [{"name": "login", "match": {"path": "/login"}, "key": ["const:all"],
             "limits": [{"algorithm": "fixed_window", "requests": 1, "window": "1h"}]}]
    raw = envoy(sluice_config(rule))
    assert [request(raw.port, p).status for p in SPELLINGS] == [200, 200, 200, 200, 200]
    assert request(raw.port, "/login").status == 429
    normalised = envoy(sluice_config(rule), hcm_extra={"normalize_path": True, "merge_slashes": True})
    assert [request(normalised.port, p).status for p in SPELLINGS] == [200, 429, 429, 429, 429]
