"""Costs known from the response (LLM tokens) in a real Envoy: admitted for an
estimate, charged what the upstream's `usage` says, JSON or event stream,
local and global; debt, recovery, missing usage and cut streams."""

import http.client
import json
import random
import socket
import threading
import time

import pytest

from support import limiter_cluster, request, run_all, sluice_config, start_envoy, wait_until, wasm_filter
from support.llm_upstream import LlmUpstream
from support.windows import away_from_window_boundary

TOTAL = "body:usage.total_tokens"


def token_rule(limit: dict, estimate=0, response=TOTAL, **extra) -> list[dict]:
    return [{"name": "tokens", "key": ["header:x-user"], "cost": {"estimate": estimate, "response": response},
             "limits": [limit], **extra}]


def per_hour(tokens: int, algorithm: str = "fixed_window", **more) -> dict:
    return {"algorithm": algorithm, "requests": tokens, "window": "1h", **more}


@pytest.fixture
def llm():
    up = LlmUpstream()
    yield up
    up.stop()


@pytest.fixture
def proxy(tmp_path, llm):
    started = []

    def start(config: dict, clusters=(), **kwargs):
        e = start_envoy(tmp_path, [wasm_filter(config)], clusters=[llm.cluster(), *clusters],
                        hcm_extra=LlmUpstream.route_config(), **kwargs)
        started.append(e)
        return e

    yield start
    for e in started:
        e.stop()


def ask(port, user="a", stream=False, **headers):
    h = {"x-user": user, **({"x-stream": "1"} if stream else {}), **{k.replace("_", "-"): str(v) for k, v in headers.items()}}
    return request(port, "/v1/chat/completions", method="POST", headers=h, body=b"{}")


@pytest.mark.parametrize("stream", [False, True], ids=["json", "event-stream"])
def test_admitted_while_not_in_debt_then_denied_until_paid(proxy, stream):
    # 100 tokens an hour; each request costs 30 (10 + 20), estimated 0.
    e = proxy(sluice_config(token_rule(per_hour(100))))
    statuses = [ask(e.port, stream=stream).status for _ in range(6)]
    # 0, 30, 60, 90 are below 100: four pass, the fourth into debt (120).
    assert statuses == [200, 200, 200, 200, 429, 429]
    wait_until(lambda: e.sluice_stat("sluice.tokens.cost_charged") == 120, what="120 tokens charged")
    denied = ask(e.port, stream=stream)
    assert denied.header("x-ratelimit-remaining") == "0"
    assert int(denied.header("retry-after")) > 0


def test_a_bucket_in_debt_recovers_when_it_says(proxy):
    # 10 tokens a second, bucket of 10: one request of 30 leaves 20 of debt.
    e = proxy(sluice_config(token_rule({"algorithm": "token_bucket", "requests": 10, "window": "1s"})))
    assert ask(e.port).status == 200
    wait_until(lambda: e.sluice_stat("sluice.tokens.cost_charged") == 30, what="charged")
    denied = ask(e.port)
    assert denied.status == 429
    # In debt by 20 at 10/s: one more token is there after ~2.1 s.
    retry = int(denied.header("retry-after"))
    assert 2 <= retry <= 3, retry
    started = time.monotonic()
    wait_until(lambda: ask(e.port, x_completion_tokens=0, x_prompt_tokens=0).status == 200,
               timeout=5, interval=0.05, what="recovered")
    assert time.monotonic() - started <= retry + 0.5


def test_an_estimate_reserves_and_the_rest_is_refunded(proxy):
    # Estimated 40 from the request header, costs 30: 10 back each time.
    e = proxy(sluice_config(token_rule(per_hour(400), estimate="header:x-max-tokens")))
    counts: dict[int, int] = {}
    lock = threading.Lock()

    def one_connection():
        for _ in range(6):
            status = ask(e.port, x_max_tokens=40).status
            with lock:
                counts[status] = counts.get(status, 0) + 1

    run_all([one_connection for _ in range(32)])
    assert set(counts) <= {200, 429}
    # Reserving 40 for each admitted request, 400 admit at least 10, and the
    # 30 each really costs never passes 400 (13 * 30 = 390).
    assert 10 <= counts[200] <= 13, counts
    wait_until(lambda: e.sluice_stat("sluice.tokens.cost_refunded") == 10 * counts[200], what="refunds")
    assert e.sluice_stat("sluice.tokens.cost_missing") == 0


def test_an_estimate_from_the_request_body(proxy, llm):
    e = proxy(sluice_config(token_rule(per_hour(100), estimate="body:max_tokens")))
    # max_tokens 90: the first takes 90 and is refunded 60; the second fits (30 + 90 > 100: no).
    body = json.dumps({"model": "m", "max_tokens": 90, "messages": []}).encode()
    first = request(e.port, "/v1/chat/completions", method="POST", headers={"x-user": "a"}, body=body)
    assert first.status == 200
    wait_until(lambda: e.sluice_stat("sluice.tokens.cost_refunded") == 60, what="refund")
    second = request(e.port, "/v1/chat/completions", method="POST", headers={"x-user": "a"}, body=body)
    assert second.status == 429  # 30 used, 90 more would pass 100
    small = json.dumps({"max_tokens": 50}).encode()
    assert request(e.port, "/v1/chat/completions", method="POST", headers={"x-user": "a"}, body=small).status == 200


def test_usage_from_a_header_and_summed_fields(proxy):
    e = proxy(sluice_config(token_rule(per_hour(1000), response="header:x-usage-total")
                            + [{"name": "sum", "key": ["header:x-user"],
                                "cost": {"response": ["body:usage.prompt_tokens", "body:usage.completion_tokens"]},
                                "limits": [per_hour(1000)]}]))
    assert ask(e.port, x_prompt_tokens=7, x_completion_tokens=5).status == 200
    wait_until(lambda: e.sluice_stat("sluice.tokens.cost_charged") == 12, what="header charged")
    wait_until(lambda: e.sluice_stat("sluice.sum.cost_charged") == 12, what="sum charged")


def test_a_response_without_usage_keeps_the_estimate(proxy):
    e = proxy(sluice_config(token_rule(per_hour(100), estimate=25)))
    assert ask(e.port, x_no_usage=1).status == 200
    wait_until(lambda: e.sluice_stat("sluice.tokens.cost_missing") == 1, what="missing counted")
    r = ask(e.port, x_prompt_tokens=0, x_completion_tokens=0)
    assert r.header("x-ratelimit-remaining") == "50"  # 25 kept, 25 estimated now


def test_a_cut_stream_settles_to_what_is_known(proxy):
    e = proxy(sluice_config(token_rule(per_hour(100), estimate=25)))
    with pytest.raises(Exception):
        ask(e.port, stream=True, x_abort_after=1, x_chunk_ms=20)
    wait_until(lambda: e.sluice_stat("sluice.tokens.cost_missing") == 1, what="missing counted")
    assert e.sluice_stat("sluice.tokens.cost_charged") == 0


# ------------------------------------------------------------------ global


def test_a_rate_limit_service_is_charged_the_difference(tmp_path, llm):
    from support.fake_rls import FakeRls
    fake = FakeRls(style="envoy_ratelimit", limit=1000)
    try:
        config = sluice_config(
            [{"name": "tokens", "key": ["header:x-user"], "cost": {"estimate": 10, "response": TOTAL},
              "limits": [{"scope": "global"}]}],
            limiter={"cluster": "rls", "protocol": "rls", "timeout": "5s", "failure_mode": "deny"})
        e = start_envoy(tmp_path, [wasm_filter(config)], clusters=[llm.cluster(), limiter_cluster("rls", [fake.port])],
                        hcm_extra=LlmUpstream.route_config())
        try:
            assert ask(e.port, x_prompt_tokens=12, x_completion_tokens=18).status == 200
            wait_until(lambda: fake.calls() == 2, what="the settlement call")
            check, charge = fake.requests
            assert check.descriptors == charge.descriptors
            assert (check.hits, charge.hits) == (10, 20)
            # Cheaper than its estimate: nothing more to say to the service.
            assert ask(e.port, x_prompt_tokens=1, x_completion_tokens=1).status == 200
            wait_until(lambda: e.sluice_stat("sluice.tokens.cost_refunded") == 8, what="refund counted")
            assert fake.calls() == 3
        finally:
            e.stop()
    finally:
        fake.stop()



@pytest.fixture
def token_fleet(tmp_path, processes, llm):
    """Two Envoys in front of the LLM upstream, and two limiters on one Redis."""
    started = []

    def start(rule: list[dict]) -> list:
        redis = processes.redis()
        limiters = [processes.limiter(store=redis.url, extra_args=["--store-timeout-ms", "5000"]) for _ in range(2)]
        start.limiters = limiters
        clusters = [llm.cluster(), limiter_cluster("sluice_limiter", [lim.port for lim in limiters])]
        config = sluice_config(rule, limiter={"cluster": "sluice_limiter", "authority": "sluice-limiter",
                                              "timeout": "5s", "failure_mode": "deny"})
        started.extend(start_envoy(tmp_path, [wasm_filter(config)], clusters=clusters, name=f"envoy-{n}",
                                   hcm_extra=LlmUpstream.route_config()) for n in "ab")
        return started

    yield start
    for e in started:
        e.stop()


def fleet_load(envoys, user: str, connections: int = 32, per_connection: int = 6, keep_alive: bool = False,
               **headers) -> dict[int, int]:
    """`connections` clients, alternately on each Envoy, each sending
    `per_connection` requests one after another (a third as event streams),
    on one kept-alive connection each or on a new connection per request."""
    counts: dict[int, int] = {}
    lock = threading.Lock()

    def one_connection(i):
        conn = http.client.HTTPConnection("127.0.0.1", envoys[i % 2].port, timeout=10)
        h = {"x-user": user, **({"x-stream": "1"} if i % 3 == 0 else {}),
             **{k.replace("_", "-"): str(v) for k, v in headers.items()}}
        try:
            for _ in range(per_connection):
                if keep_alive:
                    conn.request("POST", "/v1/chat/completions", body=b"{}", headers=h)
                    resp = conn.getresponse()
                    resp.read()
                    status = resp.status
                else:
                    status = ask(envoys[i % 2].port, user=user, stream=bool(i % 3 == 0), **headers).status
                with lock:
                    counts[status] = counts.get(status, 0) + 1
        finally:
            conn.close()

    run_all([lambda i=i: one_connection(i) for i in range(connections)])
    assert set(counts) <= {200, 429}, counts
    return counts


def test_global_tokens_held_across_two_envoys(token_fleet, llm):
    envoys = token_fleet(token_rule(per_hour(400, scope="global"), estimate="header:x-max-tokens"))
    away_from_window_boundary(3600, margin_s=30)
    counts = fleet_load(envoys, "a", x_max_tokens=40)
    assert 10 <= counts[200] <= 13, counts
    # The upstream counts an answer once its last byte is written.
    wait_until(lambda: llm.reported.get("a") == 30 * counts[200], timeout=5,
               what=f"the upstream counts {30 * counts[200]} tokens (it has {llm.reported.get('a')})")
    assert 30 * counts[200] <= 400
    # Each admitted request held 40 and gave back 10 once its answer said
    # 30: the limiter's own count (asked without consuming) is exact.
    limiter = token_fleet.limiters[0]
    peek = {"domain": "test", "hits": 0, "limits": [
        {"key": "tokens/0/a", "algorithm": "fixed_window", "requests": 400, "window_ms": 3_600_000}]}
    wait_until(lambda: json.loads(limiter.check(peek).body)["limits"][0]["remaining"] == 400 - 30 * counts[200],
               timeout=5, what=f"the limiter holds {30 * counts[200]} tokens")
    for e in envoys:
        assert e.sluice_stat("sluice.limiter_failed_status") == 0


# The estimate-0 bound across a fleet: each request costs 30 tokens, the
# limit is 400, 32 clients, each on one Envoy of 2 workers. Once the limit
# runs out, what is admitted beyond it is what the requests admitted and not
# yet charged cost. A worker's check waits for the charges its ended streams
# owe on the key, so a client has at most one such request per worker it
# reaches: one on a kept-alive connection, up to one per worker of its Envoy
# with a connection per request. At most (400 - 1 + 32 x 30) / 30 = 45
# requests kept alive, (400 - 1 + 32 x 2 x 30) / 30 = 77 otherwise.
CONNECTIONS, COST, LIMIT, WORKERS = 32, 30, 400, 2


def estimate_zero_bound(keep_alive: bool) -> int:
    uncharged = CONNECTIONS * (1 if keep_alive else WORKERS)
    return (LIMIT - 1 + uncharged * COST) // COST


@pytest.mark.parametrize("keep_alive", [True, False], ids=["kept-alive", "connection-per-request"])
def test_global_estimate_zero_overshoot_is_bounded_by_the_streams_at_once(token_fleet, llm, keep_alive):
    envoys = token_fleet(token_rule(per_hour(LIMIT, scope="global")))
    away_from_window_boundary(3600, margin_s=60)
    admitted = []
    for run in range(10):
        user = f"run-{run}"
        counts = fleet_load(envoys, user, connections=CONNECTIONS, keep_alive=keep_alive)
        admitted.append(counts.get(200, 0))
        wait_until(lambda u=user, n=admitted[-1]: llm.reported.get(u) == COST * n, timeout=5,
                   what=f"the upstream counts {COST * admitted[-1]} tokens for {user}")
    print(f"admitted per run, {'kept-alive' if keep_alive else 'a connection per request'}: {admitted}")
    # The limit is reached in every run, and never overshot beyond the bound.
    bound = estimate_zero_bound(keep_alive)
    assert all(LIMIT // COST < n <= bound for n in admitted), (admitted, bound)
    for e in envoys:
        assert e.sluice_stat("sluice.limiter_failed_status") == 0
        assert e.sluice_stat("sluice.limiter_failed_timeout") == 0


def leave_early(port: int, user: str, stream: bool, after: float):
    """Sends a request and closes the connection `after` seconds later (0:
    at once, while its check may be out or waiting for what its worker owes)."""
    s = socket.create_connection(("127.0.0.1", port))
    try:
        extra = "x-stream: 1\r\nx-chunks: 5\r\nx-chunk-ms: 40\r\n" if stream else ""
        s.sendall(f"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\nx-user: {user}\r\n{extra}"
                  f"content-length: 2\r\n\r\n{{}}".encode())
        if after:
            s.settimeout(after)
            try:
                s.recv(100)
            except OSError:
                pass
    finally:
        s.close()


def test_every_global_charge_arrives_once_however_streams_end(token_fleet, llm):
    """32 clients across 2 Envoys and 2 limiters on Redis, requests that
    complete, leave at once or leave mid-stream: what the filters charged is
    what the limiters applied, no call failed, and a key's checks still
    pass once its charges are in."""
    envoys = token_fleet(token_rule(per_hour(1_000_000, algorithm="token_bucket", scope="global")))
    rng = random.Random(5)
    kinds: dict[str, int] = {}
    lock = threading.Lock()

    def one_client(seed: float, i: int):
        r = random.Random(seed)
        e = envoys[i % 2]
        for _ in range(8):
            kind = r.choice(["json", "stream", "leave-now", "leave-mid-stream"])
            if kind in ("json", "stream"):
                assert ask(e.port, user="k", stream=kind == "stream").status == 200
            else:
                leave_early(e.port, "k", stream=True, after=0.06 if kind == "leave-mid-stream" else 0)
            with lock:
                kinds[kind] = kinds.get(kind, 0) + 1

    run_all([lambda s=rng.random(), i=i: one_client(s, i) for i in range(32)])
    assert len(kinds) == 4, kinds

    def charged() -> int:
        return sum(e.sluice_stat("sluice.tokens.cost_charged") for e in envoys)

    def applied() -> int:
        return sum(int(lim.metric("sluice_limiter_charged_units_total")) for lim in token_fleet.limiters)

    # Envoy's counters are flushed every second: waited for.
    complete = 30 * (kinds["json"] + kinds["stream"])
    wait_until(lambda: charged() >= complete and applied() == charged(),
               what=f"at least {complete} tokens charged, each applied once")
    for e in envoys:
        for reason in ("unreachable", "timeout", "status", "unreadable"):
            assert e.sluice_stat(f"sluice.limiter_failed_{reason}") == 0, reason
        assert ask(e.port, user="k").status == 200
