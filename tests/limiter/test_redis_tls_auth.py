"""sluice-limiter against the real redis-server with TLS and ACL auth, on
loopback: standalone and cluster over TLS, mutual TLS, refused CA and name,
passwords from the environment and a file, refused and revoked credentials,
and the probes while Redis is down."""

from __future__ import annotations

import json
import subprocess
import time

import pytest

import support
from support import request
from support.processes import Redis, RedisTls, start_redis_cluster
from support.tls import CA
from support.windows import away_from_window_boundary

CHECK = {"domain": "demo", "limits": [
    {"key": "tls/1", "algorithm": "fixed_window", "requests": 5, "window_ms": 60000}]}


@pytest.fixture
def stack(tmp_path):
    """Starts Redis servers and limiters with any options; stops them all."""
    started = []

    class Stack:
        def redis(self, **kw):
            r = Redis(tmp_path, **kw)
            started.append(r)
            return r

        def cluster(self, tls):
            nodes = start_redis_cluster(tmp_path, 3, tls=tls)
            started.extend(nodes)
            return nodes

        def limiter(self, store, args=(), env=None, **kw):
            lim = support.Limiter(tmp_path, store=store, extra_args=list(args), env=env, **kw)
            started.append(lim)
            return lim

    yield Stack()
    for item in reversed(started):
        item.stop()


def refused(store: str, args=(), env=None, timeout=20) -> str:
    """Starts a limiter that must refuse to start; its output."""
    proc = subprocess.run([str(support.LIMITER_BIN), "--listen", f"127.0.0.1:{support.free_port()}",
                           "--store", store, *args], capture_output=True, text=True, timeout=timeout,
                          env={**__import__("os").environ, **(env or {})})
    assert proc.returncode != 0, proc.stdout + proc.stderr
    return proc.stdout + proc.stderr


def allowed(lim, check=CHECK) -> list[bool]:
    # The six checks of a minute's fixed window fall in one window.
    away_from_window_boundary(60, 1.0)
    out = []
    for _ in range(6):
        r = lim.check(check)
        assert r.status == 200, r.body
        out.append(json.loads(r.body)["allowed"])
    return out


@pytest.fixture
def ca(tmp_path):
    return CA(tmp_path, "ca")


def test_tls_standalone_is_exact_and_reported(stack, ca):
    server = ca.issue("redis")
    redis = stack.redis(tls=RedisTls(server.cert, server.key, ca.cert))
    lim = stack.limiter(redis.url, ["--redis-ca", str(ca.cert)])
    assert allowed(lim) == [True] * 5 + [False]
    # the state is in that Redis
    assert "sluice:{demo/tls/1|fixed_window|60000}" in redis.cli("KEYS", "sluice:*")
    text = request(lim.port, "/metrics").body.decode()
    assert 'sluice_limiter_build_info{version="' in text and 'store="redis"} 1' in text
    assert lim.metric("sluice_limiter_store_up") == 1
    assert lim.metric("sluice_limiter_redis_round_trip_seconds_count") >= 6


def test_a_certificate_from_another_ca_is_refused_at_startup(stack, ca, tmp_path):
    server = ca.issue("redis")
    redis = stack.redis(tls=RedisTls(server.cert, server.key, ca.cert))
    other = CA(tmp_path, "other-ca")
    out = refused(redis.url, ["--redis-ca", str(other.cert)])
    assert "not signed by a trusted CA" in out, out
    # and the system roots do not trust a throwaway CA either
    out = refused(redis.url)
    assert "TLS" in out, out


def test_a_certificate_for_another_name_is_refused_at_startup(stack, ca):
    server = ca.issue("elsewhere", sans="DNS:redis.elsewhere.example")
    redis = stack.redis(tls=RedisTls(server.cert, server.key, ca.cert))
    out = refused(redis.url, ["--redis-ca", str(ca.cert)])
    assert "does not name the host" in out, out


def test_mutual_tls(stack, ca):
    server = ca.issue("redis")
    client = ca.issue("sluice-limiter")
    redis = stack.redis(tls=RedisTls(server.cert, server.key, ca.cert, auth_clients=True))
    out = refused(redis.url, ["--redis-ca", str(ca.cert)])
    assert "TLS" in out or "client certificate" in out, out
    lim = stack.limiter(redis.url, ["--redis-ca", str(ca.cert), "--redis-cert", str(client.cert),
                                    "--redis-key", str(client.key)])
    assert allowed(lim) == [True] * 5 + [False]


def test_tls_cluster_of_three_nodes(stack, ca):
    server = ca.issue("redis")
    nodes = stack.cluster(RedisTls(server.cert, server.key, ca.cert))
    seeds = ",".join(f"127.0.0.1:{n.port}" for n in nodes)
    lim = stack.limiter(f"rediss-cluster://{seeds}", ["--redis-ca", str(ca.cert)])
    # keys over several slots, each limit exact; one check spanning slots
    for i in range(6):
        check = {"domain": "demo", "limits": [dict(CHECK["limits"][0], key=f"tls/{i}")]}
        assert allowed(lim, check) == [True] * 5 + [False]
    spanning = {"domain": "demo", "limits": [
        dict(CHECK["limits"][0], key=f"span/{i}", requests=3) for i in range(4)]}
    assert allowed(lim, spanning) == [True] * 3 + [False] * 3
    assert lim.metric("sluice_limiter_store_up") == 1
    held = sum(len([k for k in n.cli("KEYS", "sluice:*").split() if k]) for n in nodes)
    assert held == 10


def acl_redis(stack, password="s3cret pass"):
    return stack.redis(args=["--user", "default", "off", "--user", "sluice", "on", f">{password}", "~*", "&*",
                             "+@all"], user="sluice", password=password)


def test_password_from_the_environment(stack):
    redis = acl_redis(stack)
    lim = stack.limiter(f"redis://sluice@127.0.0.1:{redis.port}", env={"SLUICE_REDIS_PASSWORD": "s3cret pass"})
    assert allowed(lim) == [True] * 5 + [False]
    # the password is not in the log
    assert "s3cret" not in lim.process.log()


def test_password_from_a_file(stack, tmp_path):
    redis = acl_redis(stack)
    secret = tmp_path / "password"
    secret.write_text("s3cret pass\n")
    lim = stack.limiter(f"redis://sluice@127.0.0.1:{redis.port}", ["--redis-password-file", str(secret)])
    assert allowed(lim) == [True] * 5 + [False]


def test_password_in_the_url_is_not_logged(stack):
    redis = acl_redis(stack, password="urlpass")
    lim = stack.limiter(f"redis://sluice:urlpass@127.0.0.1:{redis.port}")
    assert allowed(lim) == [True] * 5 + [False]
    log = lim.process.log()
    assert "urlpass" not in log and "sluice:***@" in log, log


def test_wrong_credentials_are_refused_at_startup(stack):
    redis = acl_redis(stack)
    out = refused(f"redis://sluice@127.0.0.1:{redis.port}", env={"SLUICE_REDIS_PASSWORD": "wrong"})
    assert "refused the credentials" in out, out
    assert "wrong" not in out.replace("refused", "")
    out = refused(f"redis://127.0.0.1:{redis.port}")
    assert "refused the credentials" in out, out


def test_credentials_revoked_later_are_counted_and_fail_per_failure_mode(stack):
    redis = acl_redis(stack)
    lim = stack.limiter(f"redis://sluice@127.0.0.1:{redis.port}", env={"SLUICE_REDIS_PASSWORD": "s3cret pass"})
    assert lim.check(CHECK).status == 200
    # the user loses its rights: every check is an error, counted as auth
    assert redis.cli("ACL", "SETUSER", "sluice", "-@all").strip() == "OK"
    r = lim.check(CHECK)
    assert r.status == 503, r.body
    assert lim.metric('sluice_limiter_store_errors_by_reason_total{reason="auth"}') >= 1
    # a new password and the old connection dropped: reconnects fail, counted as auth too
    redis.cli("ACL", "SETUSER", "sluice", "+@all", "resetpass", ">changed")
    redis.cli("CLIENT", "KILL", "USER", "sluice")
    statuses = set()
    for _ in range(5):
        statuses.add(lim.check(CHECK).status)
        time.sleep(0.1)
    assert statuses == {503}, statuses
    support.wait_until(lambda: lim.metric("sluice_limiter_store_up") == 0, timeout=5, what="store down")
    assert request(lim.port, "/readyz").status == 503
    assert request(lim.port, "/livez").status == 200


def test_probes_follow_redis_down_and_back(stack):
    redis = stack.redis()
    lim = stack.limiter(redis.url, ["--store-timeout-ms", "200"])
    assert request(lim.port, "/livez").status == 200
    assert request(lim.port, "/readyz").status == 200
    assert lim.metric("sluice_limiter_store_up") == 1
    redis.stop()
    assert request(lim.port, "/readyz").status == 503
    assert request(lim.port, "/healthz").status == 503
    assert request(lim.port, "/livez").status == 200
    assert lim.check(CHECK).status == 503
    support.wait_until(lambda: lim.metric("sluice_limiter_store_up") == 0, timeout=5, what="store down")
    redis.start()
    support.wait_until(lambda: request(lim.port, "/readyz").status == 200, timeout=10, what="ready again")
    assert lim.check(CHECK).status == 200
    assert lim.metric("sluice_limiter_store_up") == 1
    log = lim.process.log()
    assert "store down" in log and "store up" in log


def test_a_limiter_started_while_redis_is_down_serves_once_it_is_up(stack, tmp_path):
    port = support.free_port()
    lim = stack.limiter(f"redis://127.0.0.1:{port}", ready_path="/livez")
    assert request(lim.port, "/readyz").status == 503
    assert lim.check(CHECK).status == 503
    redis = stack.redis(port=port)
    support.wait_until(lambda: request(lim.port, "/readyz").status == 200, timeout=10, what="ready")
    assert allowed(lim) == [True] * 5 + [False]
    assert redis.port == port
