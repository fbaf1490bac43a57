"""Concurrency limits in a real Envoy: never more than N requests of a key in
flight at the upstream, and every permit back however the stream ends."""

import http.client
import os
import random
import socket
import threading
import time

import pytest

from support import limiter_cluster, request, run_all, sluice_config, start_envoy, wait_until, wasm_filter
from support.slow_upstream import SlowUpstream

PERMITS = 3
# Requests per connection of the reset test (32 connections); the long
# variant: SLUICE_CONCURRENCY_ROUNDS=3125 (100,000 requests).
ROUNDS = int(os.environ.get("SLUICE_CONCURRENCY_ROUNDS", "40"))


def concurrency_rule(permits: int = PERMITS, **limit) -> list[dict]:
    return [{"name": "inflight", "key": ["header:x-user"], "limits": [{"concurrency": permits, **limit}]}]


@pytest.fixture
def upstream():
    up = SlowUpstream(hold_ms=60)
    yield up
    up.stop()


@pytest.fixture
def proxy(tmp_path, upstream):
    """Starts one Envoy (2 workers) in front of the slow upstream with a filter config."""
    started = []

    def start(config: dict, route_timeout: str = "15s", clusters=(), **kwargs):
        e = start_envoy(tmp_path, [wasm_filter(config)], clusters=[upstream.cluster(), *clusters],
                        hcm_extra=SlowUpstream.route_config(timeout=route_timeout), **kwargs)
        e.upstream = upstream
        started.append(e)
        return e

    yield start
    for e in started:
        e.stop()


def hammer(port: int, users: list[str], connections: int, per_connection: int) -> dict[int, int]:
    """`connections` threads, each sending `per_connection` requests one after another."""
    counts: dict[int, int] = {}
    lock = threading.Lock()

    def one_connection(i: int):
        for j in range(per_connection):
            user = users[(i + j) % len(users)]
            status = request(port, "/", headers={"x-user": user}).status
            with lock:
                counts[status] = counts.get(status, 0) + 1

    run_all([lambda i=i: one_connection(i) for i in range(connections)])
    return counts


def in_use(e) -> int:
    return e.stats().get("wasmcustom.sluice.inflight.permits_in_use", 0)


def all_permits_free(e, port_user: str = "fresh-check"):
    """The gauge is back to 0 and N requests of one key are admitted at once again."""
    wait_until(lambda: in_use(e) == 0, what="permits_in_use == 0")
    for user in ("a", "b"):
        statuses = []
        run_all([lambda: statuses.append(request(e.port, "/", headers={"x-user": user, "x-hold-ms": "300"}).status)
                 for _ in range(PERMITS)])
        # Admitted, whatever the upstream then did (a short route timeout answers 504).
        assert len(statuses) == PERMITS and 429 not in statuses, (user, statuses)


def test_never_more_than_the_permits_in_flight_per_key(proxy, upstream):
    e = proxy(sluice_config(concurrency_rule()))
    counts = hammer(e.port, ["a", "b"], connections=64, per_connection=6)
    assert sum(counts.values()) == 64 * 6
    assert set(counts) <= {200, 429}, counts
    assert upstream.peak == {"a": PERMITS, "b": PERMITS}, upstream.peak
    assert counts[200] == upstream.served
    all_permits_free(e)
    wait_until(lambda: e.sluice_stat("sluice.inflight.denied") == counts[429], what="denied counted")


def test_a_denial_says_no_permit_is_free(proxy):
    e = proxy(sluice_config(concurrency_rule(permits=1)))
    held = threading.Thread(target=lambda: request(e.port, "/", headers={"x-user": "a", "x-hold-ms": "800"}))
    held.start()
    wait_until(lambda: in_use(e) == 1, what="one permit held")
    r = request(e.port, "/", headers={"x-user": "a"})
    assert r.status == 429
    assert r.header("retry-after") == "1"
    assert r.header("x-ratelimit-limit") == "1"
    assert r.header("x-ratelimit-remaining") == "0"
    assert r.header("ratelimit-policy") == '"inflight";q=1'
    held.join()
    ok = request(e.port, "/", headers={"x-user": "a"})
    assert ok.status == 200
    assert ok.header("ratelimit-policy") == '"inflight";q=1'


def test_held_permits_outlive_their_ttl_while_renewed(proxy):
    e = proxy(sluice_config(concurrency_rule(permits=1, permit_ttl="1s")))
    held = threading.Thread(target=lambda: request(e.port, "/", headers={"x-user": "a", "x-hold-ms": "3000"}))
    held.start()
    wait_until(lambda: in_use(e) == 1, what="one permit held")
    time.sleep(2)
    assert request(e.port, "/", headers={"x-user": "a", "x-hold-ms": "1"}).status == 429
    held.join()
    assert request(e.port, "/", headers={"x-user": "a", "x-hold-ms": "1"}).status == 200


@pytest.mark.parametrize("scope", ["local", "global"])
def test_delay_mode_waits_for_a_permit(proxy, processes, scope):
    extra = {}
    if scope == "global":
        limiter = processes.limiter()
        extra = {"limiter": {"cluster": "sluice_limiter", "authority": "sluice-limiter", "timeout": "5s",
                             "failure_mode": "deny"}}
        clusters = [limiter_cluster("sluice_limiter", [limiter.port])]
    else:
        clusters = []
    rule = concurrency_rule(permits=1, on_exceed="delay", max_delay="2s",
                            **({"scope": "global"} if scope == "global" else {}))
    e = proxy(sluice_config(rule, **extra), clusters=clusters)
    held = threading.Thread(target=lambda: request(e.port, "/", headers={"x-user": "a", "x-hold-ms": "500"}))
    held.start()
    wait_until(lambda: upstream_inside(e, "a"), what="the first request upstream")
    started = time.monotonic()
    second = request(e.port, "/", headers={"x-user": "a", "x-hold-ms": "1"})
    waited = time.monotonic() - started
    held.join()
    # It waited for the first to end (about 0.5 s), then passed.
    assert second.status == 200
    assert 0.2 <= waited <= 1.5, waited
    wait_until(lambda: e.sluice_stat("sluice.inflight.delayed") == 1, what="counted delayed")
    # One that cannot get a permit within max_delay is denied after it.
    long = threading.Thread(target=lambda: request(e.port, "/", headers={"x-user": "a", "x-hold-ms": "3000"}))
    long.start()
    wait_until(lambda: upstream_inside(e, "a"), what="a long request upstream")
    started = time.monotonic()
    denied = request(e.port, "/", headers={"x-user": "a", "x-hold-ms": "1"})
    assert denied.status == 429
    assert 1.8 <= time.monotonic() - started <= 2.8
    long.join()
    wait_until(lambda: e.sluice_stat("sluice.inflight.denied") == 1, what="counted denied once")


def upstream_inside(e, user) -> bool:
    return e.upstream.inside.get(user, 0) > 0


def reset_midway(port: int, user: str, after: float):
    """Sends a request and closes the connection before the answer."""
    s = socket.create_connection(("127.0.0.1", port))
    s.sendall(f"GET / HTTP/1.1\r\nhost: x\r\nx-user: {user}\r\n\r\n".encode())
    time.sleep(after)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")  # RST
    s.close()


def test_every_permit_comes_back_however_the_stream_ends(proxy, upstream):
    # Route timeout 40 ms: requests held 80 ms end in Envoy's 504.
    e = proxy(sluice_config(concurrency_rule()), route_timeout="0.04s")
    rng = random.Random(7)
    outcomes: dict[str, int] = {}
    lock = threading.Lock()

    def one_connection(seed: int):
        r = random.Random(seed)
        for _ in range(ROUNDS):
            user = r.choice(["a", "b"])
            kind = r.choice(["complete", "reset", "timeout"])
            if kind == "reset":
                reset_midway(e.port, user, r.uniform(0, 0.03))
                status = "reset"
            else:
                hold = "10" if kind == "complete" else "80"
                try:
                    status = request(e.port, "/", headers={"x-user": user, "x-hold-ms": hold}).status
                except (OSError, http.client.HTTPException):
                    # Envoy's timeout fell after the upstream's headers: the stream was reset.
                    status = "cut"
            with lock:
                outcomes[str(status)] = outcomes.get(str(status), 0) + 1

    run_all([lambda s=rng.random(): one_connection(s) for _ in range(32)])
    assert sum(outcomes.values()) == 32 * ROUNDS
    assert outcomes.get("504", 0) > 0 and outcomes.get("reset", 0) > 0 and outcomes.get("200", 0) > 0, outcomes
    # No bound at the upstream here: a permit goes back when Envoy ends the
    # stream, and the upstream learns of a reset a moment later (the first
    # test bounds what it sees when streams complete).
    all_permits_free(e)


def test_permits_held_across_a_configuration_push(proxy, upstream):
    # The old listener drains for 5 s: its requests finish under the old configuration.
    e = proxy(sluice_config(concurrency_rule()), drain_time_s=5)
    statuses = []
    holders = [threading.Thread(target=lambda: statuses.append(
        request(e.port, "/", headers={"x-user": "a", "x-hold-ms": "1500"}).status)) for _ in range(PERMITS)]
    for t in holders:
        t.start()
    wait_until(lambda: in_use(e) == PERMITS, what="permits held")
    # The new configuration counts the same key: the old requests' permits are still held.
    e.push_config(sluice_config(concurrency_rule(permits=PERMITS + 1)))
    assert request(e.port, "/", headers={"x-user": "a", "x-hold-ms": "1"}).status == 200
    both = [request(e.port, "/", headers={"x-user": "a", "x-hold-ms": "1"}).status for _ in range(2)]
    assert 200 in both
    for t in holders:
        t.join()
    assert statuses == [200] * PERMITS
    # Given back under the configuration that took them.
    wait_until(lambda: in_use(e) == 0, what="permits_in_use == 0")
    assert upstream.peak["a"] <= PERMITS + 1


# ------------------------------------------------------------------ global


def global_config(permits: int = PERMITS, permit_ttl: str = "30s", **limit) -> dict:
    return sluice_config(
        concurrency_rule(permits, scope="global", permit_ttl=permit_ttl, **limit),
        limiter={"cluster": "sluice_limiter", "authority": "sluice-limiter", "timeout": "5s",
                 "failure_mode": "deny"})


@pytest.fixture
def fleet(tmp_path, processes, upstream):
    """Two Envoys, each in front of the slow upstream, and two limiters on one Redis."""
    started = []

    def start(config: dict) -> list:
        redis = processes.redis()
        limiters = [processes.limiter(store=redis.url, extra_args=["--store-timeout-ms", "5000"]) for _ in range(2)]
        clusters = [upstream.cluster(), limiter_cluster("sluice_limiter", [lim.port for lim in limiters])]
        for name in ("a", "b"):
            started.append(start_envoy(tmp_path, [wasm_filter(config)], clusters=clusters, name=f"envoy-{name}",
                                       hcm_extra=SlowUpstream.route_config()))
        return started

    yield start
    for e in started:
        e.stop()


def test_global_never_more_than_the_permits_in_flight_across_envoys(fleet, upstream):
    envoys = fleet(global_config())
    counts: dict[int, int] = {}
    lock = threading.Lock()

    def one_connection(i: int):
        e = envoys[i % 2]
        for j in range(5):
            status = request(e.port, "/", headers={"x-user": "ab"[(i + j) % 2]}).status
            with lock:
                counts[status] = counts.get(status, 0) + 1

    run_all([lambda i=i: one_connection(i) for i in range(64)])
    assert sum(counts.values()) == 64 * 5
    assert set(counts) <= {200, 429}, counts
    assert upstream.peak == {"a": PERMITS, "b": PERMITS}, upstream.peak
    for e in envoys:
        wait_until(lambda e=e: in_use(e) == 0, what="permits_in_use == 0")
    # Every permit is back at the limiter (the last releases are a tick and a
    # call away): N at once pass again, through both Envoys.

    def all_back():
        statuses = []
        run_all([lambda i=i: statuses.append(
            request(envoys[i % 2].port, "/", headers={"x-user": "a", "x-hold-ms": "200"}).status)
            for i in range(PERMITS)])
        return statuses == [200] * PERMITS

    wait_until(all_back, timeout=5, what="every permit back at the limiter")
    failed = sum(e.sluice_stat(f"sluice.limiter_failed_{r}") for e in envoys
                 for r in ("unreachable", "timeout", "status", "unreadable"))
    assert failed == 0


def test_a_killed_envoys_permits_come_back_within_the_ttl(fleet):
    a, b = fleet(global_config(permits=2, permit_ttl="2s"))
    holders = [threading.Thread(target=lambda: _quietly(
        lambda: request(a.port, "/", headers={"x-user": "a", "x-hold-ms": "20000"}, timeout=30)))
        for _ in range(2)]
    for t in holders:
        t.start()
    wait_until(lambda: in_use(a) == 2, what="Envoy a holds both permits")
    assert request(b.port, "/", headers={"x-user": "a", "x-hold-ms": "1"}).status == 429
    # Past the ttl, a's renewals keep them counted.
    time.sleep(3)
    assert request(b.port, "/", headers={"x-user": "a", "x-hold-ms": "1"}).status == 429
    a.process.kill()
    killed = time.monotonic()
    wait_until(lambda: request(b.port, "/", headers={"x-user": "a", "x-hold-ms": "1"}).status == 200,
               timeout=10, what="the killed Envoy's permits back", interval=0.1)
    back = time.monotonic() - killed
    # At most the ttl after a's last renewal (renewals run every third of
    # it), and the polling's and a request's time.
    assert back <= 2.0 + 1.0, back
    for t in holders:
        t.join()


def _quietly(call):
    try:
        call()
    except (OSError, http.client.HTTPException):
        pass


def send_and_leave(port: int, user: str, when: str, rst: bool, body: bool = False):
    """Sends a request and closes the connection (FIN, or RST with `rst`):
    at once (`now`), once the upstream holds it (`inside`), or with its
    body half sent (`body`)."""
    s = socket.create_connection(("127.0.0.1", port))
    try:
        if body:
            s.sendall(f"POST / HTTP/1.1\r\nhost: x\r\nx-user: {user}\r\ncontent-length: 100\r\n\r\n{'x' * 40}".encode())
        else:
            s.sendall(f"GET / HTTP/1.1\r\nhost: x\r\nx-user: {user}\r\nx-hold-ms: 300\r\n\r\n".encode())
        if when == "inside":
            s.settimeout(0.1)
            try:
                s.recv(1)  # a denial, or nothing while the upstream holds it
            except OSError:
                pass
        if rst:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
    finally:
        s.close()


# How a request ends: completes; its client leaves at once (FIN or RST,
# before or while its check is out), with its body half sent, or once the
# upstream holds it; the upstream resets it; the client times out.
GLOBAL_ENDINGS = ["complete", "now-fin", "now-rst", "body-fin", "body-rst", "inside-fin", "inside-rst",
                  "upstream-reset", "timeout"]


@pytest.mark.parametrize("on_exceed", ["deny", "delay"])
def test_global_permits_come_back_however_the_stream_ends(fleet, upstream, on_exceed):
    """2 Envoys, 2 limiters on Redis, 32 connections: requests that end every
    way a request can end, clients leaving while the limiter check is out
    among them (in delay mode, also while waiting for a permit, their checks
    made again by the worker), lose no permit, and the gauges read 0."""
    mode = {"on_exceed": "delay", "max_delay": "250ms"} if on_exceed == "delay" else {}
    envoys = fleet(global_config(**mode))
    rng = random.Random(11)
    outcomes: dict[str, int] = {}
    kinds: dict[str, int] = {}
    lock = threading.Lock()
    rounds = 8

    def one_connection(seed: int):
        r = random.Random(seed)
        for i in range(rounds):
            e = envoys[(seed_index[seed] + i) % 2]
            user = r.choice(["a", "b"])
            kind = r.choice(GLOBAL_ENDINGS)
            if kind in ("complete", "upstream-reset", "timeout"):
                headers = {"x-user": user, "x-hold-ms": "10"}
                if kind == "upstream-reset":
                    headers["x-reset"] = "1"
                if kind == "timeout":
                    headers["x-hold-ms"] = "600"
                try:
                    ending = str(request(e.port, "/", headers=headers, timeout=0.3 if kind == "timeout" else 10).status)
                except (OSError, http.client.HTTPException):
                    ending = kind
            else:
                when, fin_rst = kind.split("-")
                send_and_leave(e.port, user, "now" if when == "body" else when, fin_rst == "rst", body=when == "body")
                ending = kind
            with lock:
                outcomes[ending] = outcomes.get(ending, 0) + 1
                kinds[kind] = kinds.get(kind, 0) + 1

    seeds = [rng.random() for _ in range(32)]
    seed_index = {s: i for i, s in enumerate(seeds)}
    run_all([lambda s=s: one_connection(s) for s in seeds])
    assert sum(outcomes.values()) == 32 * rounds
    assert set(kinds) == set(GLOBAL_ENDINGS), kinds
    assert outcomes.get("200", 0) > 0 and outcomes.get("429", 0) > 0, outcomes
    if on_exceed == "delay":
        assert sum(e.sluice_stat("sluice.inflight.delayed") for e in envoys) > 0
    for e in envoys:
        wait_until(lambda e=e: in_use(e) == 0, what="permits_in_use == 0")

    def all_back():
        statuses = []
        run_all([lambda i=i, user=user: statuses.append(
            (user, request(envoys[i % 2].port, "/", headers={"x-user": user, "x-hold-ms": "300"}).status))
            for i in range(PERMITS) for user in ("a", "b")])
        statuses = [s for _, s in statuses]
        return sorted(statuses) == [200] * (2 * PERMITS)

    # The last releases are a call away; a permit lost would be held for the
    # 30 s ttl, renewed while the key has traffic.
    wait_until(all_back, timeout=5, what="every permit back at the limiter")
    failed = sum(e.sluice_stat(f"sluice.limiter_failed_{r}") for e in envoys
                 for r in ("unreachable", "timeout", "status", "unreadable"))
    assert failed == 0


def test_global_permits_come_back_across_a_configuration_push(fleet, upstream):
    """Requests admitted under one configuration, or with their check out,
    when a new one is pushed (the old listener's connections close with
    the push) give every permit back."""
    a, b = fleet(global_config())
    statuses = []
    lock = threading.Lock()

    def one(e, hold: str):
        try:
            status = request(e.port, "/", headers={"x-user": "a", "x-hold-ms": hold}).status
        except (OSError, http.client.HTTPException):
            status = "cut"
        with lock:
            statuses.append(status)

    holders = [threading.Thread(target=one, args=(a, "1500")) for _ in range(PERMITS)]
    for t in holders:
        t.start()
    wait_until(lambda: in_use(a) == PERMITS, what="permits held")
    # Checks in flight while the push lands: denied (the permits are held).
    racing = [threading.Thread(target=one, args=(a, "1")) for _ in range(8)]
    for t in racing:
        t.start()
    a.push_config(global_config(permit_ttl="29s"))
    for t in holders + racing:
        t.join()
    assert len(statuses) == PERMITS + 8 and set(statuses) <= {200, 429, "cut"}, statuses
    for e in (a, b):
        wait_until(lambda e=e: in_use(e) == 0, what="permits_in_use == 0")

    def all_back():
        got = []
        run_all([lambda i=i: got.append(
            request((a, b)[i % 2].port, "/", headers={"x-user": "a", "x-hold-ms": "300"}).status)
            for i in range(PERMITS)])
        return got == [200] * PERMITS

    # Given back at once, except a racing check the limiter granted after a
    # holder gave its permit back, whose answer the closing root never
    # read: those come back at the first configuration's permit_ttl (30 s,
    # as documented for a root closing with checks out).
    wait_until(all_back, timeout=35, what="every permit back at the limiter")
