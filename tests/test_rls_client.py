"""Sluice calling a rate limit service (limiter.protocol rls): sluice-limiter
--grpc-listen as the service, then a fake service answering as Limitador and
envoyproxy/ratelimit do (tests/support/fake_rls.py)."""

import json

import grpc
import pytest

from support import ALGORITHMS, free_port, limiter_cluster, load_through, request, sluice_config, wait_until
from support.client import grpc_call
from support.fake_rls import OK, OVER_LIMIT, UNKNOWN, EchoUpstream, FakeRls, SilentService, raw_headers

DESCRIPTORS = """\
domain: test
descriptors:
  - key: generic_key
    value: per-user
    descriptors:
      - key: x-user
        rate_limit:
          unit: hour
          requests_per_unit: {requests}
          algorithm: {algorithm}
  - key: plan
    value: free
    rate_limit:
      unit: minute
      requests_per_unit: 1000
"""

RULES = [{"name": "per-user", "key": ["header:x-user"], "limits": [{"scope": "global"}]}]


def rls_config(rules=RULES, failure_mode="deny", timeout="5s", service_headers=None):
    limiter = {"cluster": "rls", "protocol": "rls", "timeout": timeout, "failure_mode": failure_mode}
    if service_headers is not None:
        limiter["service_headers"] = service_headers
    return sluice_config(rules, limiter=limiter)


def rls_limiter(processes, tmp_path, store="memory", requests=20, algorithm="fixed_window"):
    """A limiter serving RLS with the descriptors above; (limiter, its gRPC port)."""
    path = tmp_path / f"descriptors-{free_port()}.yaml"
    path.write_text(DESCRIPTORS.format(requests=requests, algorithm=algorithm))
    grpc = free_port()
    limiter = processes.limiter(store=store, extra_args=["--grpc-listen", f"127.0.0.1:{grpc}",
                                                         "--descriptors", str(path),
                                                         "--store-timeout-ms", "5000"])
    return limiter, grpc


@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_global_limits_through_the_service_are_exact_across_envoys(envoy, processes, tmp_path, algorithm):
    redis = processes.redis()
    served = [rls_limiter(processes, tmp_path, store=redis.url, algorithm=algorithm) for _ in range(2)]
    cluster = [limiter_cluster("rls", [grpc for _, grpc in served])]
    envoys = [envoy(rls_config(), clusters=cluster) for _ in range(2)]
    counts = load_through(envoys, per_envoy=30, connections=16, headers={"x-user": "hot"})
    assert counts == {200: 20, 429: 40}
    assert sum(e.sluice_stat("sluice.limiter_errors") for e in envoys) == 0


def test_headers_come_from_the_services_statuses(envoy, processes, tmp_path):
    _, grpc = rls_limiter(processes, tmp_path)
    e = envoy(rls_config(), clusters=[limiter_cluster("rls", [grpc])])
    r = request(e.port, "/", headers={"x-user": "a"})
    assert r.status == 200
    assert (r.header("x-ratelimit-limit"), r.header("x-ratelimit-remaining")) == ("20", "19")
    assert r.header("ratelimit-policy") == '"per-user";q=20;w=3600'
    for _ in range(19):
        request(e.port, "/", headers={"x-user": "a"})
    denied = request(e.port, "/", headers={"x-user": "a"})
    assert denied.status == 429
    assert 1 <= int(denied.header("retry-after")) <= 3600
    assert denied.header("x-ratelimit-remaining") == "0"


def test_a_request_estimated_at_zero_takes_nothing_from_the_service(envoy, processes, tmp_path):
    """An estimate of 0 goes in each descriptor's own `hits_addend` (the
    request's reads 0 as 1): the service's count is untouched, and a
    request weighing 1 after them sees the whole limit."""
    _, grpc = rls_limiter(processes, tmp_path)
    zero = [{"name": "per-user", "key": ["header:x-user"], "limits": [{"scope": "global"}],
             "cost": {"estimate": 0, "response": "header:x-tokens"}}]
    free, plain = (envoy(rls_config(rules), clusters=[limiter_cluster("rls", [grpc])]) for rules in (zero, RULES))
    answers = [request(free.port, "/", headers={"x-user": "z"}) for _ in range(5)]
    assert [(r.status, r.header("x-ratelimit-remaining")) for r in answers] == [(200, "20")] * 5
    r = request(plain.port, "/", headers={"x-user": "z"})
    assert (r.status, r.header("x-ratelimit-remaining")) == (200, "19")


def test_the_over_limit_cache_spares_the_service(envoy, processes, tmp_path):
    limiter, grpc = rls_limiter(processes, tmp_path, requests=2)
    e = envoy(rls_config(), clusters=[limiter_cluster("rls", [grpc])])
    statuses = [request(e.port, "/", headers={"x-user": "a"}).status for _ in range(3)]
    assert statuses == [200, 200, 429]
    before = limiter.metric("sluice_limiter_rls_calls_total")
    assert all(request(e.port, "/", headers={"x-user": "a"}).status == 429 for _ in range(10))
    assert limiter.metric("sluice_limiter_rls_calls_total") <= before + 2


def test_an_explicit_descriptor_and_a_weight(envoy, processes, tmp_path):
    _, grpc = rls_limiter(processes, tmp_path)
    rules = [{"name": "site", "key": ["const:all"], "cost": 400,
              "limits": [{"scope": "global", "descriptor": [{"key": "plan", "value": "free"}]}]}]
    e = envoy(rls_config(rules), clusters=[limiter_cluster("rls", [grpc])])
    assert [request(e.port, "/").status for _ in range(3)] == [200, 200, 429]


@pytest.mark.parametrize("failure_mode,status", [("deny", 429), ("allow", 200)])
def test_a_service_down_follows_the_failure_mode(envoy, processes, tmp_path, failure_mode, status):
    limiter, grpc = rls_limiter(processes, tmp_path)
    e = envoy(rls_config(failure_mode=failure_mode, timeout="1s"), clusters=[limiter_cluster("rls", [grpc])])
    assert request(e.port, "/", headers={"x-user": "a"}).status == 200
    limiter.stop()
    assert request(e.port, "/", headers={"x-user": "a"}).status == status
    stat = "sluice.limiter_errors" if failure_mode == "deny" else "sluice.failure_mode_allowed"
    wait_until(lambda: e.sluice_stat(stat) == 1, what=f"{stat} == 1")


def test_limit_fields_on_an_rls_limit_are_refused(envoy):
    e = envoy(sluice_config([{"name": "ok", "key": ["const:k"],
                              "limits": [{"algorithm": "gcra", "requests": 1, "window": "1h"}]}]))
    rules = [{"name": "r", "key": ["client_ip"], "limits": [{"scope": "global", "requests": 10}]}]
    assert not e.push_config(json.dumps(rls_config(rules)))
    lines = [line for line in e.log().splitlines() if "sluice: invalid configuration" in line]
    assert lines and "rules[0].limits[0].requests:" in lines[-1], lines


# ---------------------------------------------------------------- a fake service: answers as each service gives them

RATE_LIMIT_HEADERS = ("x-ratelimit-limit", "x-ratelimit-remaining", "x-ratelimit-reset", "ratelimit-policy",
                      "ratelimit")
FAILURE_REASONS = ("unreachable", "timeout", "status", "unreadable")


@pytest.fixture
def fake_rls():
    """Starts fake rate limit services (see FakeRls); stops them after the test."""
    started = []

    def start(style="envoy_ratelimit", **kwargs):
        fake = FakeRls(style, **kwargs)
        started.append(fake)
        return fake

    yield start
    for fake in started:
        fake.stop()


@pytest.fixture
def echo():
    upstream = EchoUpstream()
    yield upstream
    upstream.stop()


def with_fake(envoy, fake, **config):
    return envoy(rls_config(**config), clusters=[limiter_cluster("rls", [fake.port])])


def user(name="a"):
    return {"x-user": name}


def reported(response) -> dict:
    """The rate-limit headers of a response."""
    return {h: response.header(h) for h in RATE_LIMIT_HEADERS if response.header(h) is not None}


def test_overall_only_answers_give_exact_counts_for_one_user(envoy, fake_rls):
    fake = fake_rls("limitador", limit=5)
    e = with_fake(envoy, fake)
    answers = [request(e.port, "/", headers=user()) for _ in range(8)]
    assert [r.status for r in answers] == [200] * 5 + [429] * 3
    assert request(e.port, "/", headers=user("b")).status == 200
    admitted, denied = answers[0], answers[-1]
    assert reported(admitted) == {} and reported(denied) == {}
    assert denied.header("x-sluice-rule") == "per-user"
    assert denied.header("retry-after") is None  # the answer gives no wait
    assert fake.calls() == 9  # no wait known: no denial is cached
    first = fake.requests[0]
    assert (first.domain, first.descriptors, first.hits) == ("test", [[("generic_key", "per-user"), ("x-user", "a")]], 1)
    assert sum(e.sluice_stat(f"sluice.limiter_failed_{r}") for r in FAILURE_REASONS) == 0
    assert e.sluice_stat("sluice.limiter_errors") == 0


def test_overall_only_answers_are_exact_across_envoys(envoy, fake_rls):
    fake = fake_rls("limitador", limit=20)
    envoys = [with_fake(envoy, fake) for _ in range(2)]
    counts = load_through(envoys, per_envoy=100, connections=16, headers=user("hot"))
    print(f"\noverall-only fake, limit 20, 200 requests from 32 connections across 2 Envoys: {counts}")
    assert counts == {200: 20, 429: 180}
    assert fake.calls() == 200
    for e in envoys:
        assert e.sluice_stat("sluice.limiter_errors") == 0
        assert e.sluice_stat("sluice.failure_mode_allowed") == 0


def test_one_status_per_descriptor_gives_the_headers_and_the_cache(envoy, fake_rls):
    fake = fake_rls("envoy_ratelimit", limit=2, reset_seconds=42)
    e = with_fake(envoy, fake)
    answers = [request(e.port, "/", headers=user()) for _ in range(3)]
    assert [r.status for r in answers] == [200, 200, 429]
    assert (answers[0].header("x-ratelimit-limit"), answers[0].header("x-ratelimit-remaining")) == ("2", "1")
    assert answers[0].header("ratelimit-policy") == '"per-user";q=2;w=60'
    assert answers[2].header("retry-after") == "42"
    assert answers[2].header("x-ratelimit-remaining") == "0"
    # the denial is cached until the reset: the service is not asked again
    assert all(request(e.port, "/", headers=user()).status == 429 for _ in range(5))
    assert fake.calls() == 3


# (name, overall code, statuses (code, limit, remaining, reset s), service headers,
#  status, retry-after, rate-limit headers reported, denial cached)
DECISIONS = [
    ("longer-over", OVER_LIMIT, [(OVER_LIMIT, 10, 0, 7), (OVER_LIMIT, 10, 0, 30), (OK, 10, 3, 50)], [],
     429, "30", False, True),
    ("none-over-retry-after", OVER_LIMIT, [], [("retry-after", "12")], 429, "12", False, True),
    ("none-over-ratelimit-reset", OVER_LIMIT, [], [("ratelimit-reset", "9")], 429, "9", False, True),
    ("none-over-x-ratelimit-reset", OVER_LIMIT, [], [("x-ratelimit-reset", "8")], 429, "8", False, True),
    ("none-over-unsaid", OVER_LIMIT, [], [], 429, None, False, False),
    ("none-over-unparsable-header", OVER_LIMIT, [], [("retry-after", "soon")], 429, "soon", False, False),
    ("over-code-ok-statuses", OVER_LIMIT, [(OK, 10, 4, 20)], [], 429, None, False, False),
    ("ok-code-over-status", OK, [(OVER_LIMIT, 10, 0, 20)], [], 200, None, True, False),
    ("ok-longer", OK, [(OK, 10, 4, 20), (OK, 10, 4, 20)], [], 200, None, False, False),
    ("ok-none", OK, [], [], 200, None, False, False),
]


@pytest.mark.parametrize("name,code,statuses,headers,status,retry_after,reports,cached", DECISIONS,
                         ids=[d[0] for d in DECISIONS])
def test_the_decision_table(envoy, fake_rls, name, code, statuses, headers, status, retry_after, reports, cached):
    fake = fake_rls("envoy_ratelimit", limit=100)
    fake.code, fake.statuses, fake.response_headers = code, statuses, headers
    e = with_fake(envoy, fake)
    r = request(e.port, "/", headers=user())
    assert r.status == status
    assert r.header("retry-after") == retry_after
    if reports:
        assert (r.header("x-ratelimit-limit"), r.header("x-ratelimit-remaining")) == ("10", "0")
    else:
        assert reported(r) == {h: v for h, v in headers if h in RATE_LIMIT_HEADERS}
    if status == 429:
        assert r.header("x-sluice-rule") == "per-user"
    again = request(e.port, "/", headers=user())
    assert again.status == status
    assert fake.calls() == (1 if cached else 2)
    assert sum(e.sluice_stat(f"sluice.limiter_failed_{r}") for r in FAILURE_REASONS) == 0


def test_two_descriptors_without_statuses_deny_as_the_first(envoy, fake_rls):
    rules = [{"name": "per-user", "key": ["header:x-user"], "limits": [{"scope": "global"}]},
             {"name": "site", "key": ["const:all"], "limits": [{"scope": "global"}]}]
    fake = fake_rls("limitador", limit=1)
    fake.response_headers = [("retry-after", "5")]
    e = with_fake(envoy, fake, rules=rules)
    assert request(e.port, "/", headers=user()).status == 200
    denied = request(e.port, "/", headers=user())
    assert (denied.status, denied.header("x-sluice-rule"), denied.header("retry-after")) == (429, "per-user", "5")
    assert [len(r.descriptors) for r in fake.requests] == [2, 2]
    # two descriptors: the denial is not known to be either one's, and is not cached
    assert request(e.port, "/", headers=user()).status == 429
    assert fake.calls() == 3


@pytest.mark.parametrize("setting,on_admitted,on_denied",
                         [(None, True, True), ("always", True, True), ("denied", False, True),
                          ("never", False, False)])
def test_service_headers_on_denials_and_admitted_responses(envoy, fake_rls, setting, on_admitted, on_denied):
    fake = fake_rls("envoy_ratelimit", limit=1)
    fake.response_headers = [("X-Service", "v1"), ("x-raw", "r", "raw")]
    e = with_fake(envoy, fake, service_headers=setting)
    admitted, denied = (request(e.port, "/", headers=user()) for _ in range(2))
    assert (admitted.status, denied.status) == (200, 429)
    assert (admitted.header("x-service"), admitted.header("x-raw")) == (("v1", "r") if on_admitted else (None, None))
    assert (denied.header("x-service"), denied.header("x-raw")) == (("v1", "r") if on_denied else (None, None))
    # the rate-limit headers of the statuses are there whatever the setting
    assert admitted.header("x-ratelimit-limit") == "1"


def test_a_service_header_replaces_sluices_own(envoy, fake_rls):
    fake = fake_rls("envoy_ratelimit", limit=1, reset_seconds=42)
    fake.response_headers = [("Content-Type", "application/problem+json"), ("retry-after", "99"),
                             ("x-ratelimit-limit", "7")]
    e = with_fake(envoy, fake)
    status, headers, _ = raw_headers(e.port, user())
    assert status == 200
    assert [v for h, v in headers if h == "x-ratelimit-limit"] == ["7"]
    status, headers, _ = raw_headers(e.port, user())
    assert status == 429
    assert [v for h, v in headers if h == "content-type"] == ["application/problem+json"]
    assert [v for h, v in headers if h == "retry-after"] == ["99"]
    assert [v for h, v in headers if h == "x-ratelimit-limit"] == ["7"]
    assert [v for h, v in headers if h == "x-sluice-rule"] == ["per-user"]


def test_headers_envoy_cannot_carry_are_dropped(envoy, fake_rls):
    fake = fake_rls("envoy_ratelimit", limit=1)
    fake.response_headers = [(":status", "500"), ("bad name", "x"), ("x-crlf", "a\r\nb"), ("x-nul", "a\0b"),
                             ("", "empty"), ("X-Good", "1")]
    e = with_fake(envoy, fake)
    for expected in (200, 429):
        status, headers, _ = raw_headers(e.port, user())
        assert status == expected
        names = [h for h, _ in headers]
        assert [v for h, v in headers if h == "x-good"] == ["1"]
        assert not {"bad name", "x-crlf", "x-nul", ""} & set(names), headers
    assert e.sluice_stat("sluice.limiter_failed_unreadable") == 0


def test_request_headers_reach_the_upstream_when_admitted(envoy, fake_rls, echo):
    fake = fake_rls("envoy_ratelimit", limit=1)
    fake.request_headers = [("x-from-rls", "yes"), ("X-Tenant", "t1", "raw"), ("x-crlf", "a\r\nb")]
    e = envoy(rls_config(), clusters=[limiter_cluster("rls", [fake.port]), echo.cluster()],
              hcm_extra=EchoUpstream.route_config())
    admitted = request(e.port, "/", headers=user())
    assert admitted.status == 200
    seen = json.loads(admitted.body)
    assert (seen.get("x-from-rls"), seen.get("x-tenant")) == ("yes", "t1")
    assert "x-crlf" not in seen
    assert "x-from-rls" not in {k.lower() for k in admitted.headers}
    assert request(e.port, "/", headers=user()).status == 429
    assert echo.count == 1


def test_request_headers_reach_the_upstream_of_a_request_decided_on_its_body_with_its_headers_held(
        envoy, fake_rls, echo):
    """With `headers_while_reading_body: hold` the headers wait in Envoy until
    the decision, so the service's headers still reach the upstream."""
    fake = fake_rls("envoy_ratelimit", limit=1)
    fake.request_headers = [("x-from-rls", "yes")]
    rules = [{"name": "per-user", "key": ["body:user"], "limits": [{"scope": "global"}]}]
    config = {**rls_config(rules), "headers_while_reading_body": "hold"}
    e = envoy(config, allow_stop_iteration=True, clusters=[limiter_cluster("rls", [fake.port]), echo.cluster()],
              hcm_extra=EchoUpstream.route_config())
    body = b'{"user": "a"}'
    admitted = request(e.port, "/", method="POST", body=body, headers={"content-type": "application/json"})
    assert admitted.status == 200
    assert json.loads(admitted.body).get("x-from-rls") == "yes"
    assert request(e.port, "/", method="POST", body=body, headers={"content-type": "application/json"}).status == 429
    assert echo.count == 1


def test_the_raw_body_is_the_body_of_an_http_denial(envoy, fake_rls):
    fake = fake_rls("limitador", limit=1)
    fake.raw_body = b'{"error": "slow down"}\n'
    e = with_fake(envoy, fake)
    admitted = request(e.port, "/", headers=user())
    assert (admitted.status, admitted.body) == (200, b"ok\n")
    denied = request(e.port, "/", headers=user())
    assert (denied.status, denied.body) == (429, b'{"error": "slow down"}\n')
    answer = grpc_call(e.port, [("x-user", "a")])
    call = {**answer.headers, **answer.trailers}
    assert call.get("grpc-status") == "8" and call.get("x-sluice-rule") == "per-user"
    assert answer.body == b""


# reason -> how the fake (or its absence) brings it about, and the counter expected
FAILURES = {
    "unreachable": ("no service", "unreachable"),
    "service-unavailable": (grpc.StatusCode.UNAVAILABLE, "unreachable"),
    "timeout-silent-service": ("silent", "timeout"),
    "timeout-slow-service": ("delay", "timeout"),
    "service-deadline-exceeded": (grpc.StatusCode.DEADLINE_EXCEEDED, "timeout"),
    "internal": (grpc.StatusCode.INTERNAL, "status"),
    "resource-exhausted": (grpc.StatusCode.RESOURCE_EXHAUSTED, "status"),
    "unknown-code": ("unknown code", "unreadable"),
    "other-code": ("code 7", "unreadable"),
    "garbage": ("garbage", "unreadable"),
}


@pytest.fixture
def silent_service():
    service = SilentService()
    yield service
    service.stop()


@pytest.mark.parametrize("failure_mode", ["allow", "deny"])
@pytest.mark.parametrize("failure", list(FAILURES))
def test_each_failure_is_counted_by_reason_and_follows_the_failure_mode(envoy, fake_rls, silent_service, failure,
                                                                        failure_mode):
    how, reason = FAILURES[failure]
    if how == "no service":
        port = free_port()
    elif how == "silent":
        port = silent_service.port
    else:
        fake = fake_rls("envoy_ratelimit", limit=100)
        port = fake.port
        if how == "delay":
            fake.delay = 5.0
        elif how == "unknown code":
            fake.code = UNKNOWN
        elif how == "code 7":
            fake.code = 7
        elif how == "garbage":
            fake.garbage = b"\xff\xff\xff"
        else:
            fake.abort = how
    e = envoy(rls_config(failure_mode=failure_mode, timeout="300ms"), clusters=[limiter_cluster("rls", [port])])
    statuses = [request(e.port, "/", headers=user()).status for _ in range(3)]
    assert statuses == [200 if failure_mode == "allow" else 429] * 3
    counter = f"sluice.limiter_failed_{reason}"
    wait_until(lambda: e.sluice_stat(counter) == 3, what=f"{counter} == 3")
    assert {r: e.sluice_stat(f"sluice.limiter_failed_{r}") for r in FAILURE_REASONS if r != reason} == \
        {r: 0 for r in FAILURE_REASONS if r != reason}
    per_request = "sluice.failure_mode_allowed" if failure_mode == "allow" else "sluice.limiter_errors"
    wait_until(lambda: e.sluice_stat(per_request) == 3, what=f"{per_request} == 3")
    marker = 'sluice: limiter cluster "rls" failed:'
    warnings = [line.split(marker, 1)[1] for line in e.log().splitlines() if marker in line]
    assert 1 <= len(warnings) <= 2, warnings  # at most one per worker in 10 s (two workers)
    assert all(reason in w for w in warnings), warnings
