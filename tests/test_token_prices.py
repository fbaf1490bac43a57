"""Token prices in a real Envoy in front of the fake LLM upstream: usage
fields weighted as LLM prices weigh them, charged exactly from a JSON body
and from an event stream; a limit per model from the request's JSON body;
a cap on the estimates in flight per key (a concurrency limit in the rule),
local and global, and the overshoot it bounds for estimates of 0."""

import http.client
import json
import threading
import time

import pytest

from support import limiter_cluster, request, run_all, sluice_config, start_envoy, wait_until, wasm_filter
from support.llm_upstream import LlmUpstream

# input + 4 x output + 0.1 x cached input.
PRICED = ["body:usage.input_tokens",
          {"from": "body:usage.output_tokens", "times": 4},
          {"from": "body:usage.input_tokens_details.cached_tokens", "times": "0.1"}]


def usage(input_tokens: int, output_tokens: int, cached: int) -> str:
    return json.dumps({"input_tokens": input_tokens, "output_tokens": output_tokens,
                       "input_tokens_details": {"cached_tokens": cached}})


def per_hour(tokens: int, **more) -> dict:
    return {"algorithm": "fixed_window", "requests": tokens, "window": "1h", **more}


@pytest.fixture
def llm():
    up = LlmUpstream()
    yield up
    up.stop()


@pytest.fixture
def proxy(tmp_path, llm):
    started = []

    def start(config: dict, clusters=(), name: str = "envoy"):
        e = start_envoy(tmp_path, [wasm_filter(config)], clusters=[llm.cluster(), *clusters],
                        hcm_extra=LlmUpstream.route_config(), name=name)
        started.append(e)
        return e

    yield start
    for e in started:
        e.stop()


def ask(port, user="a", body: dict | None = None, stream=False, **headers):
    h = {"x-user": user, **({"x-stream": "1"} if stream else {}),
         **{k.replace("_", "-"): str(v) for k, v in headers.items()}}
    return request(port, "/v1/chat/completions", method="POST", headers=h,
                   body=json.dumps(body if body is not None else {}).encode())


@pytest.mark.parametrize("stream", [False, True], ids=["json", "event-stream"])
def test_weighted_usage_is_charged_exactly(proxy, stream):
    rule = {"name": "spend", "key": ["header:x-user"], "cost": {"response": PRICED}, "limits": [per_hour(1000)]}
    e = proxy(sluice_config([rule]))
    # 10 + 4 x 5 + 0.1 x 7 = 30.7: 31.
    assert ask(e.port, stream=stream, x_usage=usage(10, 5, 7)).status == 200
    wait_until(lambda: e.sluice_stat("sluice.spend.cost_charged") == 31, what="31 charged")
    # 3 cached tokens at 0.1 are 0.3: 1, never free.
    assert ask(e.port, stream=stream, x_usage=usage(0, 0, 3)).status == 200
    wait_until(lambda: e.sluice_stat("sluice.spend.cost_charged") == 32, what="1 more charged")
    probe = ask(e.port, stream=stream, x_usage=usage(0, 0, 0))
    assert probe.header("x-ratelimit-remaining") == str(1000 - 32)
    assert e.sluice_stat("sluice.spend.cost_missing") == 0


def test_each_model_has_its_own_limit(proxy):
    # 100 tokens an hour per API key and model; each request costs 30.
    rule = {"name": "model", "key": ["header:x-user", "body:model"],
            "cost": {"response": "body:usage.total_tokens"}, "limits": [per_hour(100)]}
    e = proxy(sluice_config([rule]))
    a = {"model": "model-a", "messages": []}
    # 0, 30, 60 and 90 are below 100: four pass, the fourth into debt.
    assert [ask(e.port, body=a).status for _ in range(6)] == [200, 200, 200, 200, 429, 429]
    wait_until(lambda: e.sluice_stat("sluice.model.cost_charged") == 120, what="120 charged")
    # The same API key, another model: a limit of its own.
    assert ask(e.port, body={"model": "model-b"}).status == 200
    assert ask(e.port, body={"model": "model-a"}).status == 429
    # Another API key on model A: its own limit too.
    assert ask(e.port, user="b", body=a).status == 200
    # Without a model the rule has no key: not counted.
    assert [ask(e.port, body={"messages": []}).status for _ in range(2)] == [200, 200]
    wait_until(lambda: e.sluice_stat("sluice.model.skipped") == 2, what="2 skipped")


CAP, ESTIMATE, CONNECTIONS = 30, 10, 32


def capped_rule(scope: str, estimate=ESTIMATE, cap: int | None = CAP, tokens=1_000_000) -> list[dict]:
    """A rule of `tokens` an hour per key and, unless `cap` is None, at most
    `cap` estimated tokens in flight."""
    capped = [{"concurrency": cap, "scope": scope}] if cap else []
    return [{"name": "tokens", "key": ["header:x-user"],
             "cost": {"estimate": estimate, "response": "body:usage.total_tokens"},
             "limits": [*capped, per_hour(tokens, scope=scope)]}]


def load(envoys, per_connection: int = 3, deadline: float | None = None, **headers) -> dict[int, int]:
    """CONNECTIONS clients, alternately on each Envoy, each on one kept-alive
    connection sending `per_connection` requests one after another (or, with
    `deadline`, until that monotonic time)."""
    counts: dict[int, int] = {}
    lock = threading.Lock()

    def one_connection(i):
        conn = http.client.HTTPConnection("127.0.0.1", envoys[i % len(envoys)].port, timeout=10)
        h = {"x-user": "a", **({"x-stream": "1"} if i % 3 == 0 else {}),
             **{k.replace("_", "-"): str(v) for k, v in headers.items()}}
        try:
            sent = 0
            while (time.monotonic() < deadline) if deadline else sent < per_connection:
                conn.request("POST", "/v1/chat/completions", body=b"{}", headers=h)
                resp = conn.getresponse()
                resp.read()
                sent += 1
                with lock:
                    counts[resp.status] = counts.get(resp.status, 0) + 1
        finally:
            conn.close()

    run_all([lambda i=i: one_connection(i) for i in range(CONNECTIONS)])
    assert set(counts) <= {200, 429}, counts
    return counts


@pytest.fixture
def fleet(tmp_path, processes, proxy):
    """Local: one Envoy. Global: two Envoys and one limiter (memory store)."""
    def start(scope: str, **rule) -> list:
        if scope == "local":
            return [proxy(sluice_config(capped_rule("local", **rule)))]
        lim = processes.limiter()
        limiter = {"cluster": "sluice_limiter", "authority": "sluice-limiter", "timeout": "5s",
                   "failure_mode": "deny"}
        config = sluice_config(capped_rule("global", **rule), limiter=limiter)
        return [proxy(config, clusters=[limiter_cluster("sluice_limiter", [lim.port])], name=f"envoy-{n}")
                for n in "ab"]
    return start


@pytest.mark.parametrize("scope", ["local", "global"])
def test_the_tokens_in_flight_of_a_key_are_capped(fleet, llm, scope):
    envoys = fleet(scope)
    # Each answer takes 300 ms: 32 clients keep the key at its cap.
    counts = load(envoys, x_delay_ms=300)
    print(f"{scope}: {counts}, at most {llm.max_in_flight['a']} in flight")
    # 30 tokens in flight, 10 estimated a request: 3 at once, exactly.
    assert llm.max_in_flight["a"] == CAP // ESTIMATE, llm.max_in_flight
    assert counts[200] >= CAP // ESTIMATE, counts
    # Each admitted request is settled: 30 charged, 20 beyond its estimate.
    wait_until(lambda: sum(e.sluice_stat("sluice.tokens.cost_charged") for e in envoys) == 20 * counts[200],
               what=f"{20 * counts[200]} tokens charged")
    for e in envoys:
        assert e.sluice_stat("sluice.limiter_failed_status") == 0
    # Every permit came back: none held, and the key admits a full cap at once again.
    wait_until(lambda: all(e.sluice_stat("sluice.tokens.permits_in_use") == 0 for e in envoys),
               what="no permits in use")
    wait_until(lambda: all_admitted(envoys[0].port, CAP // ESTIMATE), what="a full cap admitted at once")


def all_admitted(port: int, n: int) -> bool:
    """Whether `n` requests sent at once, each answered in 200 ms, are all admitted."""
    statuses: list[int] = []
    run_all([lambda: statuses.append(ask(port, user="a", x_delay_ms=200).status) for _ in range(n)])
    return statuses == [200] * n


# The overshoot of estimates of 0, capped: 100 tokens an hour, requests of
# 30 tokens, at most 2 in flight (an estimate of 0 holds one permit). A
# request is admitted while the key has spent at most 99 settled tokens, and
# at most 2 are unsettled at any time, so at most 99 // 30 + 2 = 5 are
# admitted (150 tokens). Without the cap, every client that comes while
# nothing is settled yet is admitted: up to one per connection.
LIMIT, COST, IN_FLIGHT = 100, 30, 2


@pytest.mark.parametrize("cap", [IN_FLIGHT, None], ids=["capped", "uncapped"])
def test_the_cap_bounds_the_overshoot_of_estimates_of_zero(fleet, llm, cap):
    [e] = fleet("local", estimate=0, cap=cap, tokens=LIMIT)
    counts = load([e], deadline=time.monotonic() + 1.5, x_delay_ms=100)
    admitted = counts.get(200, 0)
    print(f"cap {cap}: admitted {admitted} of {sum(counts.values())}, at most {llm.max_in_flight['a']} in flight")
    wait_until(lambda: e.sluice_stat("sluice.tokens.cost_charged") == COST * admitted,
               what=f"{COST * admitted} tokens charged")
    # The limit is reached (0, 30, 60, 90 pass).
    assert admitted >= (LIMIT - 1) // COST + 1, counts
    if cap:
        assert llm.max_in_flight["a"] <= IN_FLIGHT
        assert admitted <= (LIMIT - 1) // COST + IN_FLIGHT, counts
    else:
        # What the cap is for: without it, more than its bound.
        assert admitted > (LIMIT - 1) // COST + IN_FLIGHT, counts
