"""Sluice calling Kuadrant's Limitador as its rate limit service (limiter.protocol rls).

Limitador answers `overall_code` only (no per-descriptor statuses), and
rate-limit headers with `--rate-limit-headers DRAFT_VERSION_03`. Skipped
unless the environment variable LIMITADOR names a limitador-server binary.
"""

import os
from pathlib import Path

import pytest

from support import Process, free_port, limiter_cluster, load_through, request, sluice_config, wait_until

LIMITADOR = os.environ.get("LIMITADOR")
pytestmark = pytest.mark.skipif(not LIMITADOR, reason="LIMITADOR does not name a limitador-server binary")

DOMAIN = "test"
LIMITS = f"""\
- namespace: {DOMAIN}
  max_value: 5
  seconds: 60
  conditions: ["descriptors[0].generic_key == 'per-user'"]
  variables: ["descriptors[0].user"]
"""
# A descriptor of explicit entries: Limitador reads them as CEL names
# (descriptors[0].user), which the default entry "x-user" is not.
RULES = [{"name": "per-user", "key": ["header:x-user"],
          "limits": [{"scope": "global", "descriptor": [{"key": "generic_key", "value": "per-user"},
                                                        {"key": "user", "from": "header:x-user"}]}]}]
FAILURE_REASONS = ("unreachable", "timeout", "status", "unreadable")


class Limitador:
    """limitador-server with memory storage on loopback ports."""

    def __init__(self, workdir: Path, extra_args=()):
        limits = workdir / f"limits-{free_port()}.yaml"
        limits.write_text(LIMITS)
        self.rls_port, self.http_port = free_port(), free_port()
        self.process = Process([LIMITADOR, "-b", "127.0.0.1", "-p", str(self.rls_port), "-B", "127.0.0.1",
                                "-P", str(self.http_port), *extra_args, str(limits), "memory"],
                               workdir / f"limitador-{self.rls_port}.log")

        def up():
            if not self.process.alive():
                raise RuntimeError(f"limitador exited:\n{self.process.log()[-2000:]}")
            return request(self.http_port, "/status", timeout=2).status == 200

        try:
            wait_until(up, what="limitador /status")
        except BaseException:
            self.process.stop()
            raise

    def metric(self, name: str) -> int:
        """A counter of Limitador's /metrics (0 before it first counts)."""
        for line in request(self.http_port, "/metrics").body.decode().splitlines():
            if line.startswith(name + "{") or line.startswith(name + " "):
                return int(float(line.rsplit(" ", 1)[1]))
        return 0

    def stop(self):
        self.process.stop()


@pytest.fixture
def limitador(tmp_path):
    """Starts limitador-servers; stops them after the test."""
    started = []

    def start(extra_args=()):
        server = Limitador(tmp_path, extra_args)
        started.append(server)
        return server

    yield start
    for server in started:
        server.stop()


def config(failure_mode="deny"):
    return sluice_config(RULES, domain=DOMAIN, limiter={"cluster": "rls", "protocol": "rls", "timeout": "1s",
                                                        "failure_mode": failure_mode})


def through(envoy, server, failure_mode="deny"):
    return envoy(config(failure_mode), clusters=[limiter_cluster("rls", [server.rls_port])])


def failures(e) -> dict:
    return {r: e.sluice_stat(f"sluice.limiter_failed_{r}") for r in FAILURE_REASONS}


def test_exactly_five_of_eight_for_one_user(envoy, limitador):
    e = through(envoy, limitador())
    answers = [request(e.port, "/", headers={"x-user": "alice"}) for _ in range(8)]
    statuses = [r.status for r in answers]
    print(f"\nLimitador, limit 5/min, 8 requests of one user through one Envoy: {statuses}")
    assert statuses == [200] * 5 + [429] * 3
    denied = answers[-1]
    assert denied.header("x-sluice-rule") == "per-user"
    # overall_code only: no quota, no wait
    assert denied.header("x-ratelimit-limit") is None and denied.header("retry-after") is None
    assert request(e.port, "/", headers={"x-user": "bob"}).status == 200
    assert failures(e) == dict.fromkeys(FAILURE_REASONS, 0)
    assert e.sluice_stat("sluice.limiter_errors") == 0


def test_limitador_ignores_a_limit_sent_with_the_descriptor(tmp_path, limitador):
    """`limit_from_metadata` with `protocol: rls` sends the request's limit as
    the descriptor's `limit`; Limitador does not read it: its own limit (5)
    applies where the metadata says 3."""
    from test_metadata_limit import NAMESPACE, start

    rule = dict(RULES[0])
    rule["limits"] = [RULES[0]["limits"][0] | {"limit_from_metadata": {"namespace": NAMESPACE, "key": "lim"}}]
    cfg = sluice_config([rule], domain=DOMAIN, limiter={"cluster": "rls", "protocol": "rls", "timeout": "1s",
                                                        "failure_mode": "deny"})
    e = start(tmp_path, cfg, clusters=[limiter_cluster("rls", [limitador().rls_port])])
    try:
        statuses = [request(e.port, "/", headers={"x-user": "a", "x-limit": "3/hour"}).status for _ in range(7)]
        assert statuses == [200] * 5 + [429] * 2
    finally:
        e.stop()


def test_exactly_five_of_two_hundred_across_two_envoys(envoy, limitador):
    server = limitador()
    envoys = [through(envoy, server) for _ in range(2)]
    counts = load_through(envoys, per_envoy=100, connections=16, headers={"x-user": "hot"})
    print(f"\nLimitador, limit 5/min, 200 requests of one user from 32 connections across 2 Envoys: {counts}")
    assert counts == {200: 5, 429: 195}
    for e in envoys:
        assert failures(e) == dict.fromkeys(FAILURE_REASONS, 0)
        assert e.sluice_stat("sluice.limiter_errors") == 0
        assert e.sluice_stat("sluice.failure_mode_allowed") == 0


def test_draft_03_headers_reach_the_client(envoy, limitador):
    server = limitador(["--rate-limit-headers", "DRAFT_VERSION_03"])
    e = through(envoy, server)
    answers = [request(e.port, "/", headers={"x-user": "carol"}) for _ in range(7)]
    print("\nLimitador with DRAFT_VERSION_03 headers:")
    for r in answers:
        print(f"  {r.status} limit={r.header('x-ratelimit-limit')!r} remaining={r.header('x-ratelimit-remaining')!r} "
              f"reset={r.header('x-ratelimit-reset')!r} retry-after={r.header('retry-after')!r}")
    assert [r.status for r in answers] == [200] * 5 + [429] * 2
    assert [r.header("x-ratelimit-remaining") for r in answers[:5]] == ["4", "3", "2", "1", "0"]
    assert all(r.header("x-ratelimit-limit") == "5, 5;w=60" for r in answers[:5])
    denied = answers[5]
    assert denied.header("x-ratelimit-remaining") == "0"
    # the wait comes from Limitador's x-ratelimit-reset
    assert 1 <= int(denied.header("retry-after")) <= 60
    assert denied.header("retry-after") == denied.header("x-ratelimit-reset")
    assert denied.header("x-sluice-rule") == "per-user"
    # with a known wait, the denial is cached: the last request never reached Limitador
    assert answers[6].header("retry-after") is not None
    limited, authorized = server.metric("limited_calls"), server.metric("authorized_calls")
    print(f"  Limitador counted {authorized} authorized and {limited} limited calls")
    assert (authorized, limited) == (5, 1)


@pytest.mark.parametrize("failure_mode,status", [("allow", 200), ("deny", 429)])
def test_limitador_down_follows_the_failure_mode(envoy, limitador, failure_mode, status):
    server = limitador()
    e = through(envoy, server, failure_mode)
    assert request(e.port, "/", headers={"x-user": "dave"}).status == 200
    server.stop()
    statuses = [request(e.port, "/", headers={"x-user": "dave"}).status for _ in range(10)]
    print(f"\nLimitador down, failure_mode {failure_mode}: {statuses}")
    assert statuses == [status] * 10
    wait_until(lambda: e.sluice_stat("sluice.limiter_failed_unreachable") == 10,
               what="sluice.limiter_failed_unreachable == 10")
    per_request = "sluice.failure_mode_allowed" if failure_mode == "allow" else "sluice.limiter_errors"
    wait_until(lambda: e.sluice_stat(per_request) == 10, what=f"{per_request} == 10")
    print(f"  counters: {failures(e)}, {per_request} = {e.sluice_stat(per_request)}")
