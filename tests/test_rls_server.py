"""sluice-limiter as Envoy's rate limit service: Envoy's own ratelimit filter
(`envoy.filters.http.ratelimit`) with route `rate_limits` actions, calling
`sluice-limiter --grpc-listen` over gRPC."""

import os
import signal
import threading
import time

import pytest

from support import ALGORITHMS, free_port, load_through, request, wait_until
from support.load import run_load
from support.windows import away_from_window_boundary
from support.rls import RLS_METHOD, REMOTE_ADDRESS, generic_key, header_action, rls_request_hex, start_rls_envoy

# Exactness must not confuse a slow machine with a wrong count.
PATIENT = ["--store-timeout-ms", "5000"]
USER = [header_action("x-user", "user")]
NESTED = [generic_key("site", "scope"), header_action("x-user", "user")]


@pytest.fixture
def rls_envoy(tmp_path):
    started = []

    def start(*args, **kwargs):
        env = start_rls_envoy(tmp_path, *args, **kwargs)
        started.append(env)
        return env

    yield start
    for env in started:
        env.stop()


def rls_limiter(processes, tmp_path, descriptors, store="memory", name="rls.yaml", extra=()):
    """A limiter serving RLS from `descriptors` (YAML text, or an existing path)."""
    if isinstance(descriptors, str):
        path = tmp_path / name
        path.write_text(descriptors)
    else:
        path = descriptors
    grpc = free_port()
    lim = processes.limiter(store=store, extra_args=["--grpc-listen", f"127.0.0.1:{grpc}",
                                                     "--descriptors", str(path), "--descriptors-poll-ms", "100",
                                                     *PATIENT, *extra])
    lim.grpc_port = grpc
    lim.descriptors = path
    return lim


def statuses(env, n, headers=None):
    return [request(env.port, "/", headers=headers or {}).status for _ in range(n)]


def exact_config(algorithm, requests=300):
    return f"""
domain: exact
descriptors:
  - key: scope
    value: site
    descriptors:
      - key: user
        rate_limit:
          requests_per_unit: {requests}
          window: 365d
          algorithm: {algorithm}
"""


@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_two_envoys_two_limiters_one_redis_admit_exactly(rls_envoy, processes, tmp_path, algorithm):
    redis = processes.redis()
    limiters = [rls_limiter(processes, tmp_path, exact_config(algorithm), store=redis.url) for _ in range(2)]
    ports = [lim.grpc_port for lim in limiters]
    envoys = [rls_envoy("exact", ports, [NESTED], failure_mode_deny=True) for _ in range(2)]
    # 2 Envoys x 16 connections
    counts = load_through(envoys, per_envoy=600, connections=16, headers={"x-user": "hot"})
    assert counts == {200: 300, 429: 900}, counts


ACTIONS = """
domain: actions
descriptors:
  - key: remote_address
    rate_limit: {unit: minute, requests_per_unit: 6}
  - key: user
    rate_limit: {unit: minute, requests_per_unit: 3}
  - key: user
    value: vip
    rate_limit: {unit: minute, requests_per_unit: 5}
  - key: scope
    value: site
    descriptors:
      - key: user
        rate_limit: {unit: minute, requests_per_unit: 2, algorithm: gcra}
"""


def test_remote_address_request_headers_generic_key_and_nesting(rls_envoy, processes, tmp_path):
    # Several Envoys one after another: day windows, which no run crosses
    # unless it spans midnight, where minute windows ended mid-test.
    lim = rls_limiter(processes, tmp_path, ACTIONS.replace("unit: minute", "unit: day"))
    # One descriptor per action list; all decided together.
    user_only = rls_envoy("actions", [lim.grpc_port], [USER])
    assert statuses(user_only, 4, {"x-user": "a"}) == [200, 200, 200, 429]
    assert statuses(user_only, 6, {"x-user": "vip"}) == [200] * 5 + [429], "the exact value wins"
    assert statuses(user_only, 2) == [200, 200], "no header: no descriptor, no limit"

    nested = rls_envoy("actions", [lim.grpc_port], [NESTED])
    assert statuses(nested, 3, {"x-user": "b"}) == [200, 200, 429]

    # All three at once: the nested limit (2) denies first and consumes nothing elsewhere.
    everything = rls_envoy("actions", [lim.grpc_port], [[REMOTE_ADDRESS], USER, NESTED])
    assert statuses(everything, 3, {"x-user": "c"}) == [200, 200, 429]
    assert statuses(user_only, 2, {"x-user": "c"}) == [200, 429], "user c spent 2 of 3, not 3"
    by_ip = rls_envoy("actions", [lim.grpc_port], [[REMOTE_ADDRESS]])
    assert statuses(by_ip, 5) == [200] * 4 + [429], "the address spent 2 of 6"
    text = request(lim.port, "/metrics").body.decode()
    assert 'sluice_limiter_rls_descriptors_total{domain="actions",descriptor="scope_site.user",result="over_limit"}' in text
    assert 'sluice_limiter_rls_calls_total{domain="actions",result="over_limit"}' in text


QUOTA_MODE = """
domain: quota
descriptors:
  - key: plan
    value: free
    descriptors:
      - key: user
        quota_mode: true
        rate_limit: {unit: day, requests_per_unit: 2}
  - key: plan
    value: credits
    descriptors:
      - key: user
        quota_mode: true
        rate_limit: {unit: day, requests_per_unit: 3}
"""


def test_quota_mode_refuses_only_once_every_quota_is_spent(rls_envoy, processes, tmp_path):
    lim = rls_limiter(processes, tmp_path, QUOTA_MODE)
    both = [[generic_key("free", "plan"), header_action("x-user", "user")],
            [generic_key("credits", "plan"), header_action("x-user", "user")]]
    env = rls_envoy("quota", [lim.grpc_port], both)
    # free (2) spent after 2, credits (3) after 3: the third passes on credits alone.
    assert statuses(env, 5, {"x-user": "a"}) == [200, 200, 200, 429, 429]
    free_only = rls_envoy("quota", [lim.grpc_port], both[:1])
    assert statuses(free_only, 3, {"x-user": "b"}) == [200, 200, 429], "one quota descriptor: a limit"
    text = request(lim.port, "/metrics").body.decode()
    lines = set(text.splitlines())
    for line in [
        'sluice_limiter_rls_calls_total{domain="quota",result="ok"} 5',
        'sluice_limiter_rls_calls_total{domain="quota",result="over_limit"} 3',
        'sluice_limiter_rls_descriptors_total{domain="quota",descriptor="plan_free.user",result="over_limit"} 4',
        'sluice_limiter_rls_descriptors_total{domain="quota",descriptor="plan_credits.user",result="over_limit"} 2',
    ]:
        assert line in lines, (line, [t for t in lines if 'domain="quota"' in t])


def test_global_quota_mode_puts_every_descriptor_in_quota_mode(rls_envoy, processes, tmp_path):
    lim = rls_limiter(processes, tmp_path, QUOTA_MODE.replace("        quota_mode: true\n", ""),
                      extra=["--quota-mode"])
    both = [[generic_key("free", "plan"), header_action("x-user", "user")],
            [generic_key("credits", "plan"), header_action("x-user", "user")]]
    env = rls_envoy("quota", [lim.grpc_port], both)
    assert statuses(env, 5, {"x-user": "a"}) == [200, 200, 200, 429, 429]


def test_envoy_sends_a_routes_negative_hits_as_hits(rls_envoy, processes, tmp_path):
    # Envoy 1.40's ratelimit filter sends a route's `hits_addend` with
    # `is_negative_hits` as one hit: counted, not given back.
    lim = rls_limiter(processes, tmp_path, ACTIONS.replace("unit: minute", "unit: day"))
    taking = rls_envoy("actions", [lim.grpc_port], [USER])
    giving = rls_envoy("actions", [lim.grpc_port],
                       [{"actions": USER, "hits_addend": {"number": 2, "is_negative_hits": True}}])
    assert statuses(giving, 1, {"x-user": "h"}) == [200]
    assert statuses(taking, 3, {"x-user": "h"}) == [200, 200, 429], "1 of 3 taken"
    lines = request(lim.port, "/metrics").body.decode().splitlines()
    assert not [t for t in lines if 'result="given_back"' in t]


# Written for this test from envoyproxy/ratelimit's documented format (its
# README's examples), one domain per file, loaded as is.
RATELIMIT_EXAMPLES = {
    "messaging.yaml": """
domain: messaging
descriptors:
  # Only allow 5 marketing messages a day
  - key: message_type
    value: marketing
    descriptors:
      - key: to_number
        rate_limit:
          unit: day
          requests_per_unit: 5

  # Only allow 100 messages a day to any unique phone number
  - key: to_number
    rate_limit:
      unit: day
      requests_per_unit: 100
""",
    "edge_proxy_per_ip.yaml": """
domain: edge_proxy_per_ip
descriptors:
  - key: remote_address
    rate_limit:
      unit: second
      requests_per_unit: 10

  # Black list IP
  - key: remote_address
    value: 50.0.0.5
    rate_limit:
      unit: second
      requests_per_unit: 0
""",
    "example6.yaml": """
domain: example6
descriptors:
  - key: service
    descriptors:
      - key: user
        value: user-a
        rate_limit:
          requests_per_unit: 1
          unit: minute
        shadow_mode: true
      - key: user
        value: user-b
        rate_limit:
          requests_per_unit: 2
          unit: minute
""",
    "example7.yaml": """
domain: example7
descriptors:
  - key: key_1
    value: value_1
    descriptors:
      - key: user
        value: bkthomps
        rate_limit:
          name: specific_limit
          requests_per_unit: 5
          unit: minute
  - key: key_2
    value: value_2
    descriptors:
      - key: user
        value: bkthomps
        rate_limit:
          replaces:
            - name: specific_limit
          requests_per_unit: 10
          unit: minute
""",
    "internal.yaml": """
domain: internal
descriptors:
  - key: ldap
    rate_limit:
      unlimited: true

  - key: azure
    rate_limit:
      unit: minute
      requests_per_unit: 100
""",
}


def test_an_envoyproxy_ratelimit_config_loads_unchanged(rls_envoy, processes, tmp_path):
    confdir = tmp_path / "config"
    confdir.mkdir()
    for name, text in RATELIMIT_EXAMPLES.items():
        (confdir / name).write_text(text)
    lim = rls_limiter(processes, tmp_path, confdir)
    msg = rls_envoy("messaging", [lim.grpc_port],
                    [[header_action("x-type", "message_type"), header_action("x-to", "to_number")],
                     [header_action("x-to", "to_number")]])
    marketing = {"x-type": "marketing", "x-to": "2061111111"}
    # The examples count per minute: each Envoy's requests fit in one.
    away_from_window_boundary(60, 3)
    assert statuses(msg, 6, marketing) == [200] * 5 + [429]
    # The per-number limit counted only the 5 admitted.
    other = {"x-type": "transactional", "x-to": "2061111111"}
    assert statuses(msg, 95, other) == [200] * 95
    assert statuses(msg, 1, other) == [429]

    shadow = rls_envoy("example6", [lim.grpc_port],
                       [[generic_key("auth", "service"), header_action("x-user", "user")]])
    away_from_window_boundary(60, 2)
    assert statuses(shadow, 4, {"x-user": "user-a"}) == [200] * 4, "shadow_mode never denies"
    assert statuses(shadow, 3, {"x-user": "user-b"}) == [200, 200, 429]

    replaces = rls_envoy("example7", [lim.grpc_port],
                         [[generic_key("value_1", "key_1"), header_action("x-user", "user")],
                          [generic_key("value_2", "key_2"), header_action("x-user", "user")]])
    away_from_window_boundary(60, 2)
    assert statuses(replaces, 11, {"x-user": "bkthomps"}) == [200] * 10 + [429]

    unlimited = rls_envoy("internal", [lim.grpc_port], [[generic_key("x", "ldap")]])
    assert statuses(unlimited, 20) == [200] * 20


@pytest.mark.parametrize("deny", [False, True])
def test_failure_mode_deny_with_the_limiter_down(rls_envoy, processes, tmp_path, deny):
    lim = rls_limiter(processes, tmp_path, ACTIONS)
    env = rls_envoy("actions", [lim.grpc_port], [USER], failure_mode_deny=deny, timeout="0.25s")
    assert statuses(env, 1, {"x-user": "a"}) == [200]
    lim.stop()
    for i in range(3):
        started = time.monotonic()
        r = request(env.port, "/", headers={"x-user": f"u{i}"})
        assert r.status == (500 if deny else 200)
        assert time.monotonic() - started < 2.0


def test_x_ratelimit_headers(rls_envoy, processes, tmp_path):
    lim = rls_limiter(processes, tmp_path, ACTIONS)
    env = rls_envoy("actions", [lim.grpc_port], [USER], x_ratelimit_headers=True)
    away_from_window_boundary(60, 2)  # per minute, with the remaining counted
    seen = [request(env.port, "/", headers={"x-user": "h"}) for _ in range(4)]
    assert [r.status for r in seen] == [200, 200, 200, 429]
    assert [r.header("x-ratelimit-remaining") for r in seen] == ["2", "1", "0", "0"]
    assert seen[0].header("x-ratelimit-limit") == "3, 3;w=60"
    assert 0 <= int(seen[0].header("x-ratelimit-reset")) <= 60


RESETS = """
domain: resets
descriptors:
  - key: user
    value: per-second
    rate_limit: {unit: second, requests_per_unit: 1000}
  - key: user
    rate_limit: {unit: minute, requests_per_unit: 1000}
"""


def test_x_ratelimit_reset_is_envoyproxy_ratelimits_whole_seconds(rls_envoy, processes, tmp_path):
    """`duration_until_reset` is whole seconds rounded up (`unit - now % unit` in
    whole seconds, as envoyproxy/ratelimit sends it): Envoy keeps only the
    seconds, so a fraction would make the header a second low, and 0 through a
    per-second window."""
    lim = rls_limiter(processes, tmp_path, RESETS)
    env = rls_envoy("resets", [lim.grpc_port], [USER], x_ratelimit_headers=True)
    for _ in range(5):
        r = request(env.port, "/", headers={"x-user": "per-second"})
        assert (r.status, r.header("x-ratelimit-reset")) == (200, "1")
    # Whichever second of the minute the limiter decided in: `60 - s % 60`.
    for _ in range(5):
        before = int(time.time())
        r = request(env.port, "/", headers={"x-user": "u"})
        after = int(time.time())
        assert r.status == 200
        assert int(r.header("x-ratelimit-reset")) in {60 - s % 60 for s in range(before, after + 1)}


RELOAD = """
domain: reload
descriptors:
  - key: user
    rate_limit:
      requests_per_unit: {requests}
      window: 365d
      algorithm: gcra
  - key: unrelated{n}
    rate_limit: {{unit: second, requests_per_unit: 1}}
"""


def test_reload_under_load_loses_no_counters(rls_envoy, processes, tmp_path):
    path = tmp_path / "reload.yaml"
    path.write_text(RELOAD.format(requests=400, n=0))
    lim = rls_limiter(processes, tmp_path, path)
    envoys = [rls_envoy("reload", [lim.grpc_port], [USER], failure_mode_deny=True) for _ in range(2)]
    stop = threading.Event()

    def churn():
        n = 1
        while not stop.is_set():
            # Unchanged limit, other descriptors changing; a bad file now and then; SIGHUP too.
            text = RELOAD.format(requests=400, n=n) if n % 3 else "domain: reload\ndescriptors: [{key: }]\n"
            tmp = path.with_suffix(".tmp")
            tmp.write_text(text)
            os.replace(tmp, path)
            if n % 4 == 0:
                os.killpg(lim.process.proc.pid, signal.SIGHUP)
            n += 1
            time.sleep(0.05)

    t = threading.Thread(target=churn)
    t.start()
    try:
        counts = load_through(envoys, per_envoy=500, connections=16, headers={"x-user": "r"})
    finally:
        stop.set()
        t.join()
    assert counts == {200: 400, 429: 600}, counts
    # A bad file lived 50 ms under the churn, less than the 100 ms poll, so
    # the poller may have missed every one: leave one in place until it is
    # refused, then a good one until it is loaded.
    loads = 'sluice_limiter_rls_config_loads_total{{result="{}"}}'
    ok_before = lim.metric(loads.format("ok"))
    path.write_text("domain: reload\ndescriptors: [{key: }]\n")
    wait_until(lambda: lim.metric(loads.format("error")) >= 1, what="a refused reload counted")
    path.write_text(RELOAD.format(requests=400, n=0))
    wait_until(lambda: lim.metric(loads.format("ok")) > ok_before, what="a good reload counted")
    assert lim.metric(loads.format("ok")) >= 2
    assert lim.process.alive()


def test_the_load_tool_speaks_grpc_to_the_rate_limit_service(processes, tmp_path):
    """`sluice-load --grpc` (the benchmark's limiter-alone gRPC rows) makes
    well-formed RLS calls: tonic answers each with grpc-status 0, and the
    limiter decides every one for the descriptor sent, within its limit."""
    lim = rls_limiter(processes, tmp_path, """
domain: load
descriptors:
  - key: generic_key
    value: api
    descriptors:
      - key: remote_address
        rate_limit: {requests_per_unit: 150, unit: hour}
""")
    message = rls_request_hex("load", [("generic_key", "api"), ("remote_address", "10.0.0.1")])
    report = run_load(f"http://127.0.0.1:{lim.grpc_port}{RLS_METHOD}", requests=200, connections=4, grpc=message)
    assert report.count(200) == 200
    assert lim.metric('sluice_limiter_rls_calls_total{domain="load",result="ok"}') == 150
    assert lim.metric('sluice_limiter_rls_calls_total{domain="load",result="over_limit"}') == 50


def test_shadow_mode_lets_a_limited_key_pass_and_counts_it(rls_envoy, processes, tmp_path):
    """`--shadow-mode` (envoyproxy/ratelimit's `SHADOW_MODE`): a call over the
    limit is answered OK, so Envoy passes it, and counted."""
    lim = rls_limiter(processes, tmp_path, ACTIONS, extra=["--shadow-mode"])
    env = rls_envoy("actions", [lim.grpc_port], [USER])
    away_from_window_boundary(60, 2)  # user: 3 per minute
    assert statuses(env, 5, {"x-user": "shadowed"}) == [200] * 5
    assert lim.metric('sluice_limiter_rls_global_shadow_mode_total{domain="actions"}') == 2
    assert lim.metric('sluice_limiter_rls_calls_total{domain="actions",result="ok"}') == 5
    assert lim.metric('sluice_limiter_rls_descriptors_total{domain="actions",descriptor="user",result="over_limit"}') == 2
    assert "--shadow-mode" in lim.process.log()


MULTIPLIED = """
domain: multiplied
descriptors:
  - key: user
    value: five-minutes
    rate_limit: {unit: minute, unit_multiplier: 5, requests_per_unit: 3}
  - key: user
    value: sixty-seconds
    rate_limit: {unit: second, unit_multiplier: 60, requests_per_unit: 1000}
"""


def test_unit_multiplier_counts_in_a_window_of_n_units(rls_envoy, processes, tmp_path):
    """`unit_multiplier: 5` with `unit: minute`: 3 requests per 5 minutes,
    the window aligned to the epoch, `X-RateLimit-Reset` the rest of it in
    whole seconds; 60 seconds report as a minute."""
    lim = rls_limiter(processes, tmp_path, MULTIPLIED)
    env = rls_envoy("multiplied", [lim.grpc_port], [USER], x_ratelimit_headers=True)
    away_from_window_boundary(300, 2)
    before = int(time.time())
    seen = [request(env.port, "/", headers={"x-user": "five-minutes"}) for _ in range(4)]
    after = int(time.time())
    assert [r.status for r in seen] == [200, 200, 200, 429]
    assert [r.header("x-ratelimit-remaining") for r in seen] == ["2", "1", "0", "0"]
    resets = {300 - s % 300 for s in range(before, after + 1)}
    assert all(int(r.header("x-ratelimit-reset")) in resets for r in seen)
    # Five minutes are no protocol unit: Envoy sends the limit without a window.
    assert seen[0].header("x-ratelimit-limit") == "3"
    r = request(env.port, "/", headers={"x-user": "sixty-seconds"})
    assert (r.status, r.header("x-ratelimit-limit")) == (200, "1000, 1000;w=60")


NAMED = """
domain: named
descriptors:
  - key: user
    value_to_metric: true
    rate_limit: {unit: minute, requests_per_unit: 100}
"""


def test_value_to_metric_names_the_descriptor_metric_with_the_value(rls_envoy, processes, tmp_path):
    """`value_to_metric`: the descriptor's series is named as envoyproxy/ratelimit
    names its stat (`named.user_alice`), one per value Envoy sent."""
    lim = rls_limiter(processes, tmp_path, NAMED)
    env = rls_envoy("named", [lim.grpc_port], [USER])
    assert statuses(env, 2, {"x-user": "alice"}) + statuses(env, 1, {"x-user": "bob"}) == [200] * 3
    series = 'sluice_limiter_rls_descriptors_total{{domain="named",descriptor="{}",result="ok"}}'
    assert lim.metric(series.format("user_alice")) == 2
    assert lim.metric(series.format("user_bob")) == 1
    assert lim.metric(series.format("user")) == 0
