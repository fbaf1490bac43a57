"""sluice-limiter as the rate limit quota service (--rlqs-listen) of Envoy's own
`envoy.filters.http.rate_limit_quota` filter: usage reports charged into the
descriptors' limits, token-bucket shares and blanket denials pushed back, one
Envoy and a fleet sharing Redis, the filter's fallbacks while the limiter is down.
"""

import itertools
import time

import pytest

from support import free_port, limiter_cluster, load_through, request, start_envoy, wait_until
from support.envoy import rlqs_filter
from support.tls import CA, client_context, upstream_tls

DESCRIPTORS = """\
domain: quota
descriptors:
  - key: name
    value: api
    descriptors:
      - key: tenant
        rate_limit:
          unit: year
          requests_per_unit: {requests}
      - key: tenant
        value: open
        rate_limit:
          unlimited: true
"""

_tenants = itertools.count()


def tenant(label: str) -> str:
    """A bucket no earlier test (in this limiter's store) has counted."""
    return f"{label}-{free_port()}-{next(_tenants)}"


@pytest.fixture
def envoys(tmp_path):
    started = []

    def start(rlqs_ports, transport_socket=None, **filter_args):
        env = start_envoy(tmp_path, [rlqs_filter(**filter_args)], lds=False, component_log_level=None,
                          clusters=[limiter_cluster("rlqs", rlqs_ports, transport_socket)], name="envoy-rlqs")
        started.append(env)
        return env

    yield start
    for env in started:
        env.stop()


def rlqs_limiter(processes, tmp_path, store="memory", requests=20, port=None, tls=None, tls_flags=()):
    """A limiter serving RLQS (assignments live 11 s: Envoy reports every 5 s); (limiter, its RLQS port)."""
    path = tmp_path / f"descriptors-{free_port()}.yaml"
    path.write_text(DESCRIPTORS.format(requests=requests))
    port = port or free_port()
    limiter = processes.limiter(store=store, tls=tls, extra_args=[
        *tls_flags, "--rlqs-listen", f"127.0.0.1:{port}", "--descriptors", str(path),
        "--rlqs-assignment-ttl-ms", "11000", "--store-timeout-ms", "5000"])
    return limiter, port


def status(env, who: str) -> int:
    return request(env.port, "/", headers={"x-tenant": who}).status


def assignments(limiter, kind: str) -> float:
    return limiter.metric(f'sluice_limiter_rlqs_assignments_total{{kind="{kind}"}}')


def test_one_envoy_admits_the_limit_then_denies(envoys, processes, tmp_path):
    limiter, port = rlqs_limiter(processes, tmp_path, requests=20)
    env = envoys([port])
    who = tenant("solo")
    # The first request is admitted with no assignment yet; its report brings
    # the token bucket of the 19 left.
    assert status(env, who) == 200
    wait_until(lambda: assignments(limiter, "token_bucket") >= 1, what="first assignment")
    wait_until(lambda: limiter.metric("sluice_limiter_rlqs_streams") == 1, what="stream open")
    codes = [status(env, who) for _ in range(40)]
    assert codes.count(200) == 19, codes
    assert codes[19:] == [429] * 21
    # Once the usage is reported, the bucket is denied outright.
    wait_until(lambda: assignments(limiter, "deny_all") >= 1, what="blanket deny")
    assert status(env, who) == 429
    # Requests without the header fall in no bucket; an unlimited bucket is allowed.
    assert request(env.port, "/").status == 200
    assert [status(env, "open") for _ in range(30)].count(200) == 30


def test_a_fleet_sharing_redis_stays_within_the_bound(envoys, processes, tmp_path):
    limit = 40
    redis = processes.redis()
    served = [rlqs_limiter(processes, tmp_path, store=redis.url, requests=limit) for _ in range(2)]
    fleet = [envoys([port]) for _, port in served]
    who = tenant("fleet")
    # Each Envoy subscribes to the bucket; both count each other once their
    # reports have gone through (two rounds each).
    for env in fleet:
        assert status(env, who) == 200
    for lim, _ in served:
        wait_until(lambda lim=lim: lim.metric("sluice_limiter_rlqs_reports_total") >= 3, what="reports")
    denied_before = [assignments(lim, "deny_all") for lim, _ in served]
    # Load in rounds through both Envoys, across reporting intervals, until
    # both were told to deny and a round admits nothing: every grant spent.
    totals: dict[int, int] = {}
    deadline = time.monotonic() + 120
    while True:
        assert time.monotonic() < deadline, ("never denied everywhere", totals)
        counts = load_through(fleet, per_envoy=10, connections=2, headers={"x-tenant": who})
        for code, n in counts.items():
            totals[code] = totals.get(code, 0) + n
        denied = all(assignments(lim, "deny_all") > before for (lim, _), before in zip(served, denied_before))
        if denied and 200 not in counts:
            break
    admitted = 2 + totals.get(200, 0)
    print(f"fleet admitted {admitted} of a limit of {limit}: {totals}")
    # The bound (docs/guides/rate-limit-quota.md): the limit, plus what the
    # Envoys admit from the token buckets they hold when it runs out, each its
    # last share of what remained: at most the limit again.
    assert limit <= admitted <= 2 * limit, totals


def test_limiter_down_then_back(envoys, processes, tmp_path):
    limiter, port = rlqs_limiter(processes, tmp_path, requests=1000)
    expired = {"expired_assignment_behavior_timeout": "60s",
               "fallback_rate_limit": {"blanket_rule": "DENY_ALL"}}
    env = envoys([port], expired=expired)
    who = tenant("outage")
    assert status(env, who) == 200
    wait_until(lambda: assignments(limiter, "token_bucket") >= 1, what="first assignment")
    limiter.kill()
    # No report is answered: the 11 s assignment expires, and the filter's
    # expired_assignment_behavior (deny) applies to the bucket ...
    wait_until(lambda: status(env, who) == 429, what="expired assignment behaviour")
    # ... while a bucket first seen now has no assignment: admitted.
    assert status(env, tenant("new")) == 200
    # The limiter back on its port: Envoy opens a new stream, reports the
    # buckets it holds, and the assignment admits again.
    limiter.start()
    wait_until(lambda: limiter.metric("sluice_limiter_rlqs_streams") == 1, what="stream reopened")
    wait_until(lambda: status(env, who) == 200, what="assignment after restart")


def test_quotas_over_mutual_tls(envoys, processes, tmp_path):
    """The RLQS listener takes the limiter's TLS like the others: Envoy's
    stream over mutual TLS is assigned and enforced as in plain text."""
    ca = CA(tmp_path, "ca")
    server, client = ca.issue("server"), ca.issue("client")
    flags = ["--tls-cert", str(server.cert), "--tls-key", str(server.key), "--tls-client-ca", str(ca.cert)]
    limiter, port = rlqs_limiter(processes, tmp_path, requests=20, tls=client_context(ca, client), tls_flags=flags)
    env = envoys([port], transport_socket=upstream_tls(ca, client))
    who = tenant("tls")
    assert status(env, who) == 200
    wait_until(lambda: assignments(limiter, "token_bucket") >= 1, what="first assignment over TLS")
    codes = [status(env, who) for _ in range(30)]
    assert codes.count(200) == 19, codes
    assert limiter.metric('sluice_limiter_tls_handshake_failures_total{listener="rlqs"}') == 0
